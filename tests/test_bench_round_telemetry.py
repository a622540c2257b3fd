"""``flops_benchmark`` on a GPU, its logic on the CPU with a fake device backend: the warm-up to the working clock
runs before anything is timed, and both it and each timed round read the device while the calls run, never at
their idle edge.

The truths: the order of events a pytest-benchmark ``pedantic`` makes (setup, the timed call, teardown per round),
and the fake backends' clocks, which rise from idle as calls are made, are capped only while a call runs, or are
throttled in one round; for the warm-up's rule, clocks scripted call by call on a clock the test advances.
"""

import time
from types import SimpleNamespace

import pytest

from accounting.bench import fixture
from accounting.bench.fixture import FlopsBenchmark
from accounting.bench.round_telemetry import (
    SETTLE_READINGS,
    SETTLE_SPACING_S,
    WARM_MAX_S,
    DeviceReadings,
    warm_to_working_clock,
)
from accounting.errors import AccountingTypeError
from accounting.hardware.devices import DeviceInfo
from accounting.telemetry.readings import Reading
from tests.support.fake_nvml import FakeTime


class Pedantic:
    """pytest-benchmark's pedantic as it orders things: per call setup, the timed call, teardown (when given)."""

    def __init__(self, log):
        self.log, self.extra_info, self.stats = log, {}, None

    def pedantic(self, target, setup, rounds, warmup_rounds, iterations, teardown=None):
        for _ in range(warmup_rounds + rounds):
            setup()
            self.log.append("timed start")
            target()
            self.log.append("timed stop")
            if teardown is not None:
                teardown()
        self.stats = SimpleNamespace(stats=SimpleNamespace(median=None))  # skips the CUDA-events timing


CALL_S = 0.05
"""Each fake call's time: a few of the readings' 20 ms intervals, so every call is read while it runs."""


class RisingGpu:
    """A device backend whose clock, while a call runs, rises from idle with each call made (345 MHz idle). Its calls
    take 30 ms: at most two of the 20 ms readings fall in one, so three alike need two calls at one clock."""

    def __init__(self, log):
        self.log, self.busy, self.closed = log, False, False

    def call(self):
        self.log.append("fn")
        self.busy = True
        time.sleep(0.03)
        self.busy = False

    def read(self, *, edge):
        calls = self.log.count("fn")
        return Reading(0.0, clock_mhz=min(1980.0, 345.0 + 600.0 * calls) if self.busy else 345.0, power_w=690.0)

    def close(self):
        self.closed = True


def _runner(monkeypatch, backend, log):
    monkeypatch.setattr(fixture, "open_round_backend", lambda device: backend)
    monkeypatch.setattr(fixture, "synchronize", lambda device: None)
    monkeypatch.setattr(fixture, "peak_memory", lambda target, setup, device: {})
    monkeypatch.setattr("accounting.bench.round_telemetry.SETTLE_SPACING_S", 0.0)  # every reading counts
    runner = FlopsBenchmark(Pedantic(log), SimpleNamespace(getoption=lambda name, default=None: None))
    runner._infos["cpu"] = DeviceInfo("cpu", "fake", None, 2**30, cores=1, clock_ghz=1.0)
    return runner


def test_warm_up_reaches_the_working_clock_before_the_first_timed_round(monkeypatch):
    log = []
    backend = RisingGpu(log)
    runner = _runner(monkeypatch, backend, log)
    runner(backend.call, flops=10**9, dtype="float32", device="cpu", rounds=4, warmup_rounds=1)
    warm = runner.benchmark.extra_info["warmup"]
    assert warm["settled"] is True and warm["clock_mhz_first"] < 1980.0 and warm["clock_mhz_settled"] == 1980.0
    first_timed = log.index("timed start")
    assert log[:first_timed].count("fn") == warm["calls"] and "timed start" not in log[:first_timed]
    assert backend.closed


class CappedWhileBusyGpu:
    """A device held at its power cap (sw_power_cap, ``capped`` MHz) while a call runs, and once it has
    synchronized at ``idle`` MHz with no reason (a capped GPU's idle edge reads its boost clock again): what a
    reading after a call's sync sees is the idle edge, not the call. ``hot_round``: the pedantic round (counted in
    ``log``'s "timed start", its warm-up round first) that also runs into a thermal slowdown."""

    def __init__(self, log=None, *, capped=1455.0, idle=1980.0, hot_round=None):
        self.log, self.capped, self.idle, self.hot_round = [] if log is None else log, capped, idle, hot_round
        self.busy, self.closed = False, False

    def call(self, seconds=CALL_S):
        self.busy = True
        time.sleep(seconds)
        self.busy = False  # the call's synchronize returned

    def read(self, *, edge):
        if not self.busy:
            return Reading(time.perf_counter(), clock_mhz=self.idle, power_w=90.0)
        hot = ("hw_thermal_slowdown",) if self.log.count("timed start") == self.hot_round else ()
        return Reading(time.perf_counter(), clock_mhz=self.capped, power_w=700.0,
                       throttle_reasons=("sw_power_cap", *hot))

    def close(self):
        self.closed = True


def test_the_warm_up_settles_on_the_clock_the_calls_run_at_not_the_idle_edges(monkeypatch):
    """Capped at 1455 MHz only while a call runs: read after each call's synchronize the clock is the idle edge's
    1980 MHz, and the warm-up would call that the working clock."""
    log = []
    gpu = CappedWhileBusyGpu(log)
    runner = _runner(monkeypatch, gpu, log)
    runner(gpu.call, flops=10**9, dtype="float32", device="cpu", rounds=2, warmup_rounds=1, measure_memory=False)
    warm = runner.benchmark.extra_info["warmup"]
    assert warm["settled"] is True and warm["clock_mhz_settled"] == gpu.capped


def test_each_timed_round_is_read_while_it_runs_not_at_its_idle_edge(monkeypatch):
    """Rounds of 100 ms, read every 20 ms: each has readings of its own, all under the power cap, and the hot round
    alone says so; a reading after each round (its teardown) would have seen 345 MHz and no reason at all."""
    log = []
    gpu = CappedWhileBusyGpu(log, idle=345.0, hot_round=1 + 3)  # pedantic's warm-up round, then the third timed one
    runner = _runner(monkeypatch, gpu, log)
    runner(lambda: gpu.call(0.1), flops=10**9, dtype="float32", device="cpu", rounds=4, warmup_rounds=1)
    record = runner.benchmark.extra_info["telemetry_rounds"]
    assert record["clock_mhz"] == [1455.0] * 4 and record["power_w"] == [700.0] * 4
    assert record["throttle_reasons"] == [["sw_power_cap"]] * 2 + [["sw_power_cap", "hw_thermal_slowdown"],
                                                                   ["sw_power_cap"]]
    assert all(count >= 1 for count in record["samples"]) and record["read"].startswith("during the rounds")


# ---- the warm-up's rule, driven call by call ------------------------------------------------------------------------


class Scripted:
    """A backend whose clock follows ``clocks`` reading by reading (``None``: no clock), or fails on ``fail_at``."""

    def __init__(self, clocks, fail_at=None):
        self.clocks, self.fail_at, self.reads = iter(clocks), fail_at, 0

    def read(self, *, edge):
        self.reads += 1
        if self.reads == self.fail_at:
            raise RuntimeError("GPU is lost")
        return Reading(0.0, clock_mhz=next(self.clocks))


def driven(backend, call_s, reads_per_call=1):
    """Readings without a thread on a clock the test advances, and a call that lasts ``call_s`` and is read
    ``reads_per_call`` times while it runs (as the thread reads a running call)."""
    clock = FakeTime(0.0)
    readings = DeviceReadings(backend, thread=False, now=clock)
    calls = []

    def call():
        calls.append(clock.t)
        for _ in range(reads_per_call):
            clock.t += call_s / (reads_per_call + 1)
            readings.sample()
        clock.t += call_s / (reads_per_call + 1)

    return readings, call, calls


def test_warm_up_stops_once_the_clock_has_settled():
    readings, call, calls = driven(Scripted([345.0, 900.0, 1500.0, 1980.0, 1980.0, 1980.0, 1980.0]), 0.025)
    warm = warm_to_working_clock(call, readings)
    assert warm["settled"] is True and warm["clock_mhz_first"] == 345.0 and warm["clock_mhz_settled"] == 1980.0
    assert len(calls) == 3 + SETTLE_READINGS  # the three ramp readings, then three at the working clock
    assert warm["seconds"] == pytest.approx(0.025 * len(calls))


def test_warm_up_counts_readings_at_least_the_spacing_apart():
    """A long call read every 6.4 ms: only every fourth reading is ``SETTLE_SPACING_S`` (20 ms) after the last one
    counted, and those read 1455 MHz; the ones between them (1980 MHz) would keep it from settling."""
    step = 0.0064
    clocks = [1455.0 if index % 4 == 0 else 1980.0 for index in range(40)]
    readings, call, calls = driven(Scripted(clocks), call_s=16 * step, reads_per_call=15)
    warm = warm_to_working_clock(call, readings)
    assert warm["settled"] is True and len(calls) == 1
    assert warm["clock_mhz_first"] == warm["clock_mhz_settled"] == 1455.0


def test_warm_up_reads_nothing_after_a_call_and_goes_on_until_a_reading_comes():
    """Calls shorter than the readings' interval: no reading of their own, so the calls go on until readings come."""
    clock = FakeTime(0.0)
    readings = DeviceReadings(Scripted([1455.0] * 10), thread=False, now=clock)
    calls = []

    def call():
        calls.append(1)
        clock.t += 0.005
        if len(calls) % 5 == 0:  # a reading every 25 ms of calls
            readings.sample()

    warm = warm_to_working_clock(call, readings)
    assert warm["settled"] is True and len(calls) == 5 * SETTLE_READINGS


def test_warm_up_gives_up_on_a_clock_that_never_settles():
    readings, call, _ = driven(Scripted([1980.0, 1410.0] * 100), 0.05)
    warm = warm_to_working_clock(call, readings)
    assert warm["settled"] is False and WARM_MAX_S <= warm["seconds"] < WARM_MAX_S + 0.1


def test_warm_up_without_a_clock_stops_at_the_first_reading_and_claims_nothing():
    readings, call, calls = driven(Scripted([None] * 5), 0.05)
    warm = warm_to_working_clock(call, readings)
    assert len(calls) == 1 and warm["settled"] is None and warm["clock_mhz_first"] is None


def test_warm_up_with_nothing_read_claims_nothing():
    clock = FakeTime(0.0)
    readings = DeviceReadings(Scripted([]), thread=False, now=clock)
    warm = warm_to_working_clock(lambda: setattr(clock, "t", clock.t + 0.5), readings)
    assert warm["settled"] is None and warm["calls"] == WARM_MAX_S / 0.5, "calls until WARM_MAX_S had passed"


def test_a_failing_backend_stops_the_warm_up_and_says_so():
    readings, call, calls = driven(Scripted([345.0, 900.0], fail_at=3), 0.05)
    warm = warm_to_working_clock(call, readings)
    assert len(calls) == 3 and warm["settled"] is None and warm["clock_mhz_settled"] == 900.0
    assert warm["error"] == "warm-up readings stopped: RuntimeError: GPU is lost"


def test_a_read_function_is_no_reading_during_the_calls():
    """A function the warm-up would call after each call reads the idle edge: it is refused, naming what came."""
    read = lambda: Reading(0.0, clock_mhz=1980.0)  # noqa: E731
    with pytest.raises(AccountingTypeError, match=r"^readings must be a DeviceReadings .*, not function <function"):
        warm_to_working_clock(lambda: None, read)


def test_the_readings_thread_reads_while_a_call_runs_and_stops_when_closed():
    gpu = CappedWhileBusyGpu()
    with DeviceReadings(gpu, interval_s=0.01) as readings:
        started = readings.now()
        gpu.call(0.1)
        during = readings.taken(started, readings.now())
    assert during and {reading.clock_mhz for _, reading in during} == {gpu.capped}
    assert not readings._thread.is_alive()


def test_on_the_cpu_nothing_is_warmed_or_read(monkeypatch):
    log = []
    monkeypatch.setattr(fixture, "synchronize", lambda device: None)
    runner = FlopsBenchmark(Pedantic(log), SimpleNamespace(getoption=lambda name, default=None: None))
    runner._infos["cpu"] = DeviceInfo("cpu", "fake", None, 2**30, cores=1, clock_ghz=1.0)
    runner(lambda: log.append("fn"), flops=10**9, dtype="float32", device="cpu", rounds=3, warmup_rounds=1,
           measure_memory=False)
    assert "warmup" not in runner.benchmark.extra_info and "telemetry_rounds" not in runner.benchmark.extra_info
    assert log.count("fn") == 4 and "read" not in log
