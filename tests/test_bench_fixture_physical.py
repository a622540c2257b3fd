"""``flops_benchmark`` on a GPU judges its event-timed figure against the clock of the window those calls ran in,
not the clock of the host-timed rounds before them.

On CUDA the fixture times its rounds with the host clock inside one telemetry window, then times the same call
again with CUDA events (:func:`accounting.timing.time_fn`) for the TFLOP/s it reports. The physical check must pair
that figure with a clock read while those calls ran: the highest of their window's readings.

Truths: the recorded H200 (``tests/data/hosts/nvidia-h200/``): 132 SMs, compute capability 9.0; its bf16 burst,
826.3 TFLOP/s at 1980 MHz (``report-bf16-budget60.json``), and its power-capped clock under back-to-back load,
1455 MHz (the median of the recorded 2-s windows). 826 TFLOP/s is possible at 1980 MHz and not at 1455 MHz (132
SMs × the datasheet's dense bf16 per SM per clock × 1455 MHz × the check's 2 % margin is 802 TFLOP/s). The
device is read through the package's Sampler and NVML backend, from a fake NVML whose SM clock each call sets.
"""

import sys
from types import SimpleNamespace

import pytest

from accounting.bench import fixture
from accounting.bench.fixture import FlopsBenchmark
from accounting.hardware.devices import DeviceInfo
from accounting.hardware.peaks import peak_flops
from accounting.timing import Timing
from tests.support import h200_report_replay as recorded
from tests.support.fake_nvml import SW_POWER_CAP, FakeGpu, FakeNvml

BURST = recorded.load("report-bf16-budget60.json")["dtypes"]["bfloat16"]["headlines"]["burst"]
CAPPED_MHZ = float(recorded.sustained_windows()["sustained_windows"][1]["clock_median"])


class Rounds:
    """pytest-benchmark's ``pedantic`` as it orders things (setup, the timed call), reporting a host median."""

    def __init__(self, seconds):
        self.seconds, self.extra_info, self.stats = seconds, {}, None

    def pedantic(self, target, setup, rounds, warmup_rounds, iterations):
        for _ in range(warmup_rounds + rounds):
            setup()
            target()
        self.stats = SimpleNamespace(stats=SimpleNamespace(median=self.seconds))


def run(monkeypatch, *, rounds_mhz: list[float], timed_mhz: float) -> dict:
    """Benchmark the burst's product on an H200 whose SM clock is ``rounds_mhz[i]`` in the i-th host-timed round (the
    last repeating) and ``timed_mhz`` while the event-timed calls run (each call sets the fake NVML's clock, so a
    window's opening edge reads the clock the last call left); the benchmark's ``extra_info``."""
    gpu = FakeGpu(clock_mhz=rounds_mhz[0], power_limit_mw=700e3, throttle_mask=SW_POWER_CAP)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([gpu]))
    monkeypatch.setattr(fixture, "open_round_backend", lambda device: None)  # per-round readings: not this test's
    monkeypatch.setattr(fixture, "clock_for", lambda device, **options: SimpleNamespace(flush_cache=lambda: None))
    monkeypatch.setattr(fixture, "flush_bytes", lambda device: 50 * 2**20)
    monkeypatch.setattr(fixture, "synchronize", lambda device: None)
    clocks = list(rounds_mhz)
    per_call = BURST["flops"] / BURST["flops_per_s"]

    def call():
        gpu.clock_mhz = clocks.pop(0) if len(clocks) > 1 else clocks[0]

    def event_timed(fn, **kwargs):
        clocks[:] = [timed_mhz]
        for _ in range(kwargs["repeats"]):
            fn()
        return Timing.from_samples([per_call] * kwargs["repeats"], device=str(kwargs["device"]))

    monkeypatch.setattr(fixture, "time_fn", event_timed)
    props = recorded.sustained_windows()["props"]
    h200 = DeviceInfo("cuda", props["name"], 0, props["total_memory"],
                      compute_capability=(props["major"], props["minor"]),
                      multiprocessors=props["multi_processor_count"], runtime="CUDA 13.0")
    runner = FlopsBenchmark(Rounds(per_call * 1.05), SimpleNamespace(getoption=lambda name, default=None: None),
                            infos={"cuda:0": h200})
    result = runner(call, flops=BURST["flops"], dtype="bfloat16", device="cuda:0", rounds=5, warmup_rounds=1,
                    peak=peak_flops(props["name"], "bf16"), flush_cache=False, measure_memory=False)
    assert result.tflops * 1e12 == pytest.approx(BURST["flops_per_s"])  # the figure is the event-timed one
    return runner.benchmark.extra_info


def test_a_burst_figure_timed_at_1980_mhz_is_not_impossible_because_the_rounds_before_ran_capped(monkeypatch):
    extra = run(monkeypatch, rounds_mhz=[CAPPED_MHZ], timed_mhz=BURST["clock_mhz"])
    assert extra["telemetry"]["clock_mhz_mean"] == CAPPED_MHZ  # the rounds' window, as recorded
    check = extra["physical_check"]
    assert check["ok"] is True and check["clock_mhz"] == BURST["clock_mhz"]


def test_the_same_figure_from_calls_that_ran_capped_fails_though_the_rounds_before_ran_at_1980_mhz(monkeypatch):
    # the power limiter engaged in the last of the 1 + 5 rounds and held the clock for the event-timed calls
    extra = run(monkeypatch, rounds_mhz=[BURST["clock_mhz"]] * 5 + [CAPPED_MHZ], timed_mhz=CAPPED_MHZ)
    check = extra["physical_check"]
    assert check["ok"] is False and check["clock_mhz"] == CAPPED_MHZ
    assert check["reason"].startswith("impossible: 826.3 TFLOP/s > 132 SMs")
