"""``flops_benchmark`` on a GPU, its logic on the CPU with a fake device backend: the warm-up to the working clock
runs before anything is timed, and each timed round's reading is taken after it, outside the timed call.

The truths: the order of events a pytest-benchmark ``pedantic`` makes (setup, the timed call, teardown per round),
and the fake backend's clock, which rises from idle as calls are made and is throttled in one round.
"""

import time
from types import SimpleNamespace

import pytest

from accounting.bench import fixture
from accounting.bench.fixture import FlopsBenchmark
from accounting.hardware.devices import DeviceInfo
from accounting.telemetry.readings import Reading


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


class RisingGpu:
    """A device backend whose clock rises from idle with each call made, and is throttled in ``hot_calls``."""

    def __init__(self, log, hot_calls=()):
        self.log, self.calls, self.hot_calls, self.closed = log, 0, set(hot_calls), False

    def read(self, *, edge):
        self.calls = self.log.count("fn")
        self.log.append("read")
        clock = min(1980.0, 345.0 + 600.0 * self.calls)
        hot = self.calls in self.hot_calls
        return Reading(0.0, clock_mhz=1410.0 if hot else clock, power_w=690.0,
                       throttle_reasons=("hw_slowdown",) if hot else ())

    def close(self):
        self.closed = True


def _run(monkeypatch, backend, log, rounds=4, warmup_rounds=1):
    monkeypatch.setattr(fixture, "open_round_backend", lambda device: backend)
    monkeypatch.setattr(fixture, "synchronize", lambda device: None)
    monkeypatch.setattr(fixture, "peak_memory", lambda target, setup, device: {})
    monkeypatch.setattr("accounting.bench.round_telemetry.SETTLE_SPACING_S", 0.0)  # every reading counts
    runner = FlopsBenchmark(Pedantic(log), SimpleNamespace(getoption=lambda name, default=None: None))
    runner._infos["cpu"] = DeviceInfo("cpu", "fake", None, 2**30, cores=1, clock_ghz=1.0)
    runner(lambda: log.append("fn"), flops=10**9, dtype="float32", device="cpu", rounds=rounds,
           warmup_rounds=warmup_rounds)
    return runner.benchmark.extra_info


def test_warm_up_reaches_the_working_clock_before_the_first_timed_round(monkeypatch):
    log = []
    backend = RisingGpu(log)
    extra = _run(monkeypatch, backend, log)
    warm = extra["warmup"]
    assert warm["settled"] is True and warm["clock_mhz_first"] == 945.0 and warm["clock_mhz_settled"] == 1980.0
    first_timed = log.index("timed start")
    assert log[:first_timed].count("fn") == warm["calls"] and "timed start" not in log[:first_timed]
    assert backend.closed


HOT_CALL = 3 + 1 + 3
"""The third timed round's call: after the warm-up's 3 (three idle readings alike settle it) and pedantic's 1."""


class CappedWhileBusyGpu:
    """A device held at its power cap (sw_power_cap, 1455 MHz) while a call runs, idle (gpu_idle, 345 MHz) once it
    has synchronized: what a reading after the round's sync sees is the idle edge, not the round. The third timed
    call also runs into a thermal slowdown."""

    def __init__(self):
        self.busy, self.calls, self.closed = False, 0, False

    def call(self, seconds):
        self.calls += 1
        self.busy = True
        time.sleep(seconds)
        self.busy = False  # the call's synchronize returned

    def read(self, *, edge):
        if not self.busy:
            return Reading(time.perf_counter(), clock_mhz=345.0, power_w=90.0)
        hot = ("hw_thermal_slowdown",) if self.calls == HOT_CALL else ()
        return Reading(time.perf_counter(), clock_mhz=1455.0, power_w=700.0, throttle_reasons=("sw_power_cap", *hot))

    def close(self):
        self.closed = True


def test_each_timed_round_is_read_while_it_runs_not_at_its_idle_edge(monkeypatch):
    """Rounds of 100 ms, read every 20 ms: each has readings of its own, all under the power cap, and the hot round
    alone says so; a reading after each round (its teardown) would have seen 345 MHz and no reason at all."""
    gpu = CappedWhileBusyGpu()
    monkeypatch.setattr(fixture, "open_round_backend", lambda device: gpu)
    monkeypatch.setattr(fixture, "synchronize", lambda device: None)
    monkeypatch.setattr(fixture, "peak_memory", lambda target, setup, device: {})
    monkeypatch.setattr("accounting.bench.round_telemetry.SETTLE_SPACING_S", 0.0)
    runner = FlopsBenchmark(Pedantic([]), SimpleNamespace(getoption=lambda name, default=None: None))
    runner._infos["cpu"] = DeviceInfo("cpu", "fake", None, 2**30, cores=1, clock_ghz=1.0)
    runner(lambda: gpu.call(0.1), flops=10**9, dtype="float32", device="cpu", rounds=4, warmup_rounds=1)
    record = runner.benchmark.extra_info["telemetry_rounds"]
    assert runner.benchmark.extra_info["warmup"]["calls"] == 3, "HOT_CALL assumes it"
    assert record["clock_mhz"] == [1455.0] * 4 and record["power_w"] == [700.0] * 4
    assert record["throttle_reasons"] == [["sw_power_cap"]] * 2 + [["sw_power_cap", "hw_thermal_slowdown"],
                                                                   ["sw_power_cap"]]
    assert all(count >= 1 for count in record["samples"]) and record["read"].startswith("during the rounds")


def test_on_the_cpu_nothing_is_warmed_or_read(monkeypatch):
    log = []
    monkeypatch.setattr(fixture, "synchronize", lambda device: None)
    runner = FlopsBenchmark(Pedantic(log), SimpleNamespace(getoption=lambda name, default=None: None))
    runner._infos["cpu"] = DeviceInfo("cpu", "fake", None, 2**30, cores=1, clock_ghz=1.0)
    runner(lambda: log.append("fn"), flops=10**9, dtype="float32", device="cpu", rounds=3, warmup_rounds=1,
           measure_memory=False)
    assert "warmup" not in runner.benchmark.extra_info and "telemetry_rounds" not in runner.benchmark.extra_info
    assert log.count("fn") == 4 and "read" not in log
