"""``flops_benchmark`` on a GPU, its logic on the CPU with a fake device backend: the warm-up to the working clock
runs before anything is timed, and each timed round's reading is taken after it, outside the timed call.

The truths: the order of events a pytest-benchmark ``pedantic`` makes (setup, the timed call, teardown per round),
and the fake backend's clock, which rises from idle as calls are made and is throttled in one round.
"""

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


def test_each_timed_round_is_read_after_it_ends_and_warm_up_rounds_are_not(monkeypatch):
    log = []
    warm_calls = 4  # 945, 1545, 1980, 1980, 1980 MHz: settled at the fifth call, so calls 1-5 warm up
    extra = _run(monkeypatch, RisingGpu(log, hot_calls={5 + 1 + 3}), log)  # + 1 pedantic warm-up, 3rd timed round
    record = extra["telemetry_rounds"]
    assert extra["warmup"]["calls"] == warm_calls + 1
    assert record["clock_mhz"] == [1980.0, 1980.0, 1410.0, 1980.0]
    assert record["throttle_reasons"] == [[], [], ["hw_slowdown"], []]
    stops = [index for index, event in enumerate(log) if event == "timed stop"]
    warm_up, timed = stops[0], stops[1:]  # pedantic's own warm-up round, then the 4 timed ones
    assert log[warm_up + 1] != "read"
    assert all(log[index + 1] == "read" for index in timed)  # read right after each timed round, never inside it
    assert all(log[index - 2:index + 1] == ["timed start", "fn", "timed stop"] for index in stops)  # nothing else


def test_on_the_cpu_nothing_is_warmed_or_read(monkeypatch):
    log = []
    monkeypatch.setattr(fixture, "synchronize", lambda device: None)
    runner = FlopsBenchmark(Pedantic(log), SimpleNamespace(getoption=lambda name, default=None: None))
    runner._infos["cpu"] = DeviceInfo("cpu", "fake", None, 2**30, cores=1, clock_ghz=1.0)
    runner(lambda: log.append("fn"), flops=10**9, dtype="float32", device="cpu", rounds=3, warmup_rounds=1,
           measure_memory=False)
    assert "warmup" not in runner.benchmark.extra_info and "telemetry_rounds" not in runner.benchmark.extra_info
    assert log.count("fn") == 4 and "read" not in log
