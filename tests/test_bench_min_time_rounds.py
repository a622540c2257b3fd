"""Rounds that fill a time: ``timing.rounds_for`` against ``time_fn``'s own loop, the fixture, benchmarks.json."""

import copy
import math
import re
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accounting.bench import fixture
from accounting.bench.fixture import FlopsBenchmark, warm_call_seconds
from accounting.bench.matrix import MAX_MIN_TIME_S, parse_benchmarks
from accounting.errors import AccountingError
from accounting.hardware.devices import DeviceInfo
from accounting.timing import rounds_for, time_fn


class TickClock:
    """A clock where every call of fn takes ``step`` seconds; it counts the calls."""

    def __init__(self, step):
        self.step, self.now, self.calls = step, 0.0, 0

    def synchronize(self):
        pass

    def mark(self):
        return self.now

    def elapsed(self, start, end):
        return end - start

    def flush_cache(self):
        pass

    def call(self):
        self.now += self.step
        self.calls += 1


# Steps and times in 1/64 s: their sums are exact in binary floating point, so time_fn's running total
# reaches min_time_s exactly when the arithmetic says it does.
@given(step=st.integers(1, 64), rounds=st.integers(1, 30), min_time=st.integers(0, 400), cap=st.integers(30, 60))
def test_rounds_for_counts_what_time_fns_loop_takes(step, rounds, min_time, cap):
    clock = TickClock(step / 64)
    timing = time_fn(clock.call, warmup=0, repeats=rounds, min_time_s=min_time / 64, max_repeats=cap,
                     clock=clock, count_flops=False, flops=1)
    assert len(timing.samples) == rounds_for(step / 64, rounds=rounds, min_time_s=min_time / 64, max_rounds=cap)


@pytest.mark.parametrize("arguments, message", [
    pytest.param(dict(call_s=0.0, rounds=10, min_time_s=1.0), r"call_s must be positive, got 0\.0", id="call-zero"),
    pytest.param(dict(call_s=0.01, rounds=0, min_time_s=1.0), r"rounds .*0", id="rounds-zero"),
    pytest.param(dict(call_s=0.01, rounds=10, min_time_s=-1.0), r"min_time_s must be non-negative, got -1\.0",
                 id="time-negative"),
    pytest.param(dict(call_s=0.01, rounds=10, min_time_s=1.0, max_rounds=5), r"max_rounds \(5\) is below rounds \(10\)",
                 id="cap-below-rounds"),
])
def test_rounds_for_refuses_bad_input_by_name(arguments, message):
    call_s = arguments.pop("call_s")
    with pytest.raises(AccountingError, match=message):
        rounds_for(call_s, **arguments)


def test_warm_call_seconds_is_the_fastest_call_and_runs_at_least_one():
    durations = iter([0.030, 0.010, 0.020])
    now = [0.0]
    clock = SimpleNamespace(perf_counter=lambda: now[0])

    def target():
        now[0] += next(durations)

    original = fixture.time
    fixture.time = clock
    try:
        assert warm_call_seconds(target, lambda: None, 3) == pytest.approx(0.010)
        durations, calls = iter([0.5]), []
        assert warm_call_seconds(lambda: calls.append(now[0]) or target(), lambda: None, 0) == pytest.approx(0.5)
        assert len(calls) == 1
    finally:
        fixture.time = original


class RecordingBenchmark:
    """pytest-benchmark's fixture, reduced to what the plugin calls: pedantic's arguments are kept."""

    def __init__(self):
        self.extra_info, self.stats, self.pedantic_calls = {}, None, []

    def pedantic(self, target, setup, rounds, warmup_rounds, iterations):
        self.pedantic_calls.append((rounds, warmup_rounds))
        for _ in range(warmup_rounds + rounds):
            setup()
            target()
        self.stats = SimpleNamespace(stats=SimpleNamespace(median=0.01))


def _runner():
    config = SimpleNamespace(getoption=lambda name, default=None: None)
    runner = FlopsBenchmark(RecordingBenchmark(), config)
    runner._infos["cpu"] = DeviceInfo("cpu", "fake CPU", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}),
                                      cores=1, clock_ghz=1.0)
    return runner


@pytest.mark.parametrize("min_time_s", [0.0, 0.2])
def test_fixture_sizes_its_rounds_from_the_warm_calls(monkeypatch, min_time_s):
    now, calls = [0.0], []
    monkeypatch.setattr(fixture, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(fixture, "synchronize", lambda device: None)

    def fn():  # every call takes 8 ms on the patched clock
        now[0] += 0.008
        calls.append(now[0])

    runner = _runner()
    runner(fn, flops=1e6, dtype="float32", device="cpu", rounds=4, warmup_rounds=2, min_time_s=min_time_s,
           measure_memory=False)  # the memory call after the rounds is tested in test_bench_fixture
    expected = max(4, math.ceil(min_time_s / 0.008))  # 0.2 s of 8 ms calls: 25 rounds
    warmup_in_pedantic = 2 if not min_time_s else 0  # sized: the warm-up ran before pedantic, timed
    assert runner.benchmark.pedantic_calls == [(expected, warmup_in_pedantic)]
    assert len(calls) == 2 + expected  # the warm-up calls are neither repeated nor dropped
    assert runner.benchmark.extra_info["rounds"] == expected
    assert runner.benchmark.extra_info["min_time_s"] == min_time_s


@pytest.mark.parametrize("options, message", [
    pytest.param(dict(min_time_s=-0.5), r"min_time_s must be non-negative, got -0\.5", id="negative-time"),
    pytest.param(dict(min_time_s=0.2, warmup_rounds=-1), r"warmup_rounds must be a non-negative integer, got -1",
                 id="negative-warmup"),
])
def test_fixture_refuses_bad_timing_options_before_running_anything(options, message):
    ran = []
    with pytest.raises(AccountingError, match=message):
        _runner()(lambda: ran.append(1), flops=1, dtype="float32", rounds=2, **options)
    assert ran == []


CONFIG = {"regression": {"metric": "min", "threshold_percent": 10},
          "cpu": {"dtypes": ["float32"], "shapes": [[256, 256, 256]], "floors": {"float32": 0.1}, "rounds": 3}}


def _with_min_time(value):
    data = copy.deepcopy(CONFIG)
    data["cpu"]["min_time_s"] = value
    return data


def test_benchmarks_json_min_time_defaults_to_zero_and_keeps_the_edges():
    assert parse_benchmarks(CONFIG).device("cpu").min_time_s == 0.0
    assert parse_benchmarks(_with_min_time(0)).device("cpu").min_time_s == 0.0
    assert parse_benchmarks(_with_min_time(1.5)).device("cpu").min_time_s == 1.5
    assert parse_benchmarks(_with_min_time(MAX_MIN_TIME_S)).device("cpu").min_time_s == MAX_MIN_TIME_S


@pytest.mark.parametrize("value", [-0.1, MAX_MIN_TIME_S + 0.5, float("nan"), True, "1.5", None])
def test_benchmarks_json_min_time_refused_by_name(value):
    with pytest.raises(AccountingError, match=r"^bench\.json: cpu\.min_time_s = " + re.escape(repr(value))
                       + r": must be a number of seconds in \[0, 60\]$"):  # the file and the entry, named
        parse_benchmarks(_with_min_time(value), "bench.json")
