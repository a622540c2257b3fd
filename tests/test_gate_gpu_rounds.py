"""A GPU benchmark's rounds as the fixture records them and the gate reads them; the settings the gate compares.

The truths: the fake NVML's scripted clock and throttle mask, set round by round (what the device would report);
the record the fixture writes must come back through the gate's reader as the same rounds, in order (the warm-up's
rules, a clock that never settles among them: tests/test_bench_round_telemetry.py).
"""

import pytest
import torch

from accounting.bench.round_telemetry import RoundReadings, open_round_backend
from accounting.gate.decide import judge
from accounting.gate.gpu_rounds import clock_note, rounds_disturbances, rounds_telemetry
from accounting.gate.render import rows
from accounting.gate.settings import read as read_settings
from accounting.gate.settings import run_settings, settings_difference
from accounting.gate.stats import Decision
from accounting.gate.storage import parse_run
from accounting.telemetry.gpu_nvml import NvmlBackend
from accounting.telemetry.readings import Reading
from tests.support.fake_nvml import GPU_IDLE, HW_SLOWDOWN, SW_POWER_CAP, FakeGpu, FakeNvml, FakeTime
from tests.support.gate_runs import MATMUL, document


def _record_rounds(clocks, masks, warmup_rounds=2):
    """Run a RoundReadings over a real NVML backend on a fake GPU whose clock and mask change each round: read
    during each round (the thread's reading, here taken by hand), idle at each round's end."""
    nvml = FakeNvml([FakeGpu()])
    clock = FakeTime()
    backend = NvmlBackend(nvml, 0, now=clock)
    recorder = RoundReadings(backend, warmup_rounds=warmup_rounds, rounds=len(clocks), thread=False, now=clock)
    gpu = nvml.gpus[0]

    def round_ends():
        clock.t += 0.001
        gpu.clock_mhz, gpu.throttle_mask = 345.0, GPU_IDLE  # synchronized: idle until the next round
        recorder.teardown()  # pedantic's teardown: right after the round

    for _ in range(warmup_rounds):
        clock.t += 0.03
        gpu.clock_mhz, gpu.throttle_mask = 1200.0, HW_SLOWDOWN  # the warm-up's readings must not be kept
        recorder.sample()
        round_ends()
    for round_clock, mask in zip(clocks, masks):
        clock.t += 0.03
        gpu.clock_mhz, gpu.throttle_mask = round_clock, mask
        recorder.sample()  # during the round
        round_ends()
    recorder.teardown()  # a call beyond the timed rounds (pytest-benchmark's profiling) is not counted either
    return recorder.record()


def test_the_fixtures_round_record_reads_back_as_the_same_rounds_in_order():
    clocks = [1980.0, 1980.0, 1650.0, 1440.0, 1440.0, 1980.0]
    masks = [0, 0, SW_POWER_CAP, SW_POWER_CAP | HW_SLOWDOWN, SW_POWER_CAP | HW_SLOWDOWN, 0]
    record = _record_rounds(clocks, masks)
    assert record["clock_mhz"] == clocks
    telemetry = rounds_telemetry({"telemetry_rounds": record}, len(clocks))
    assert telemetry.per_round and [s.clock_mhz for s in telemetry.stretches] == clocks
    assert [set(s.reasons) for s in telemetry.stretches][3] == {"sw_power_cap", "hw_slowdown"}
    (reason,) = rounds_disturbances(telemetry)
    assert reason.startswith("rounds 4-5 of 6 throttled (hw_slowdown) at 1440 MHz")


def test_a_power_capped_round_record_is_not_disturbed_against_cooler_baselines():
    record = _record_rounds([1980.0, 1500.0, 1410.0], [0, SW_POWER_CAP, SW_POWER_CAP])
    baseline = rounds_telemetry({"telemetry_rounds": _record_rounds([1980.0] * 3, [0] * 3)}, 3)
    assert rounds_disturbances(rounds_telemetry({"telemetry_rounds": record}, 3), [baseline]) == []
    unexplained = _record_rounds([1980.0, 1500.0, 1410.0], [0, 0, SW_POWER_CAP])  # round 2: low with no reason
    (reason,) = rounds_disturbances(rounds_telemetry({"telemetry_rounds": unexplained}, 3), [baseline])
    assert reason.startswith("round 2 of 3 at 1500 MHz")


def test_a_clock_above_capped_baselines_is_not_disturbed_but_above_uncapped_ones_it_is():
    fast = rounds_telemetry({"telemetry_rounds": _record_rounds([1980.0] * 3, [0] * 3)}, 3)
    capped = rounds_telemetry({"telemetry_rounds": _record_rounds([1500.0] * 3, [SW_POWER_CAP] * 3)}, 3)
    locked = rounds_telemetry({"telemetry_rounds": _record_rounds([1500.0] * 3, [0] * 3)}, 3)
    assert rounds_disturbances(fast, [capped]) == []
    assert rounds_disturbances(fast, [locked]) != []


def test_a_backend_that_fails_stops_the_record_and_says_after_which_round():
    class Failing:
        calls = 0

        def read(self, *, edge):
            self.calls += 1
            if self.calls == 3:
                raise RuntimeError("GPU is lost")
            return Reading(0.0, clock_mhz=1980.0)

    clock = FakeTime()
    recorder = RoundReadings(Failing(), warmup_rounds=0, rounds=5, thread=False, now=clock)
    for _ in range(5):
        clock.t += 0.03
        recorder.sample()
        clock.t += 0.001
        recorder.teardown()
    record = recorder.record()
    assert record["clock_mhz"] == [1980.0, 1980.0]
    assert record["error"] == "round readings stopped after round 2: RuntimeError: GPU is lost"


def test_the_cpu_opens_no_round_backend():
    assert open_round_backend(torch.device("cpu")) is None


def test_settings_are_read_from_nvml_and_a_missing_call_is_unknown():
    nvml = FakeNvml([FakeGpu(power_limit_mw=500_000.0)])
    assert read_settings(nvml, 0) == {"power_limit_w": 500.0, "applications_sm_clock_mhz": None,
                                      "applications_memory_clock_mhz": None}  # the fake has no application clocks

    class WithClocks(FakeNvml):
        def nvmlDeviceGetApplicationsClock(self, handle, kind):  # noqa: N802 - pynvml's name
            return {1: 1755, 2: 3201}[kind]

    assert read_settings(WithClocks([FakeGpu()]), 0)["applications_sm_clock_mhz"] == 1755
    refusing = FakeNvml([FakeGpu()], unsupported={"nvmlDeviceGetEnforcedPowerLimit"})
    assert read_settings(refusing, 0)["power_limit_w"] is None


def test_settings_differences_name_each_setting_and_ignore_a_milliwatt():
    assert settings_difference({"power_limit_w": 700.0}, {"power_limit_w": 699.999}) == ""
    assert settings_difference({"applications_memory_clock_mhz": 3201}, {"applications_memory_clock_mhz": 2619}) == (
        "application memory clock 3201 MHz in the baseline, 2619 MHz here")
    assert run_settings({"before": {"settings": {"power_limit_w": 700.0}}}) == {"power_limit_w": 700.0}
    assert run_settings({"before": {}}) is None and run_settings(None) is None


@pytest.mark.parametrize("baseline, current, ratio, words", [
    (1980.0, 1650.0, 1.2, "a slower clock, not a slower product"),
    (1980.0, 1980.0, 1.1, "a slower product at the same clock"),
    (1980.0, 1900.0, 1.3, "a slower product at the same clock"),  # 4 % apart: within the clock tolerance
    (1980.0, 1650.0, 1.5, "a slower product, not only a slower clock"),
])
def test_the_clock_note_tells_a_slower_clock_from_a_slower_product(baseline, current, ratio, words):
    note = clock_note(baseline, current, ratio)
    assert note.endswith(words)
    assert f"per clock cycle {ratio * current / baseline:.3f}×" in note


def test_a_per_round_record_still_hears_the_windows_neighbours_and_throttling_between_its_readings():
    record = _record_rounds([1980.0] * 4, [0] * 4)
    window = {"clock_mhz_mean": 1980.0, "throttle_reasons": ["hw_slowdown"],
              "tags": ["throttled: hw_slowdown", "busy: GPU 1: 50% utilised, 30.0 GiB used"]}
    telemetry = rounds_telemetry({"telemetry_rounds": record, "telemetry": window}, 4)
    reasons = rounds_disturbances(telemetry)
    assert reasons == ["throttled (hw_slowdown) during the rounds' telemetry window, between the rounds' own "
                       "readings"], "a busy sibling GPU shares nothing of this one"
    shared = dict(window, tags=["busy: other processes hold 6.00 GiB on the device; GPU 1: 50% utilised"])
    assert rounds_disturbances(rounds_telemetry({"telemetry_rounds": record, "telemetry": shared}, 4))[1] == (
        "rounds 1-4 of 4: other processes hold 6.00 GiB on the device"), "an older window: its tag's words"
    kept = dict(window, other_process_memory_bytes=6 * 2**30)
    assert rounds_disturbances(rounds_telemetry({"telemetry_rounds": record, "telemetry": kept}, 4))[1] == (
        "rounds 1-4 of 4: other processes held 6.0 GiB on the device")
    quiet = rounds_telemetry({"telemetry_rounds": record, "telemetry": {"throttle_reasons": ["sw_power_cap"]}}, 4)
    assert rounds_disturbances(quiet) == []


def _gpu_runs(prefix, count, seconds, clock, reasons=()):
    runs = []
    for number in range(count):
        data = document({MATMUL: seconds * (1 + 0.002 * (number % 3))}, kind="cuda", count=20)
        data["benchmarks"][0]["extra_info"]["telemetry"] = {"clock_mhz_mean": clock, "power_w_mean": 690.0,
                                                            "throttle_reasons": list(reasons)}
        runs.append(parse_run(data, f"{prefix}{number:04}.json"))
    return runs


@pytest.mark.parametrize("clock, reasons, words", [
    (1650.0, ("sw_power_cap",), "a slower clock, not a slower product"),
    (1980.0, (), "a slower product at the same clock"),
])
def test_a_regression_says_whether_the_clock_or_the_product_slowed(clock, reasons, words):
    baseline = _gpu_runs("base-", 10, 0.0014, 1980.0)
    current = _gpu_runs("current-", 4, 0.0014 * 1.2, clock, reasons)
    result = judge(baseline, current, threshold_for=lambda kind, name: 10)
    (verdict,) = result.verdicts
    assert verdict.decision is Decision.REGRESSION and verdict.reason.endswith(words + ")")
    assert (verdict.baseline_clock_mhz, verdict.current_clock_mhz) == (1980.0, clock)
    assert rows(result)[0][3].endswith(f"@ {clock:.0f} MHz")
