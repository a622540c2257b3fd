"""The recorded H200 run replayed: what its report called sustained, and what a sustained window really read.

The truths are the recorded files (``tests/data/hosts/nvidia-h200/``, loaded by
:mod:`tests.support.h200_report_replay`): the report's 15 ms "sustained" windows (budget 40) and its
793 TFLOP/s "at 1350 MHz" (budget 60) must be withheld with their reasons; the four 2-s windows of the
report's sustained shape (684–689 TFLOP/s at a median 1455–1500 MHz, 685–691 W, software power cap, enforced
limit 700 W) are what sustained means and must be accepted; instant power readings above the limit
(894–931 W) must not make figures power-suspect.
"""

import math

import pytest

from accounting.hardware.flops_per_clock import FLOPS_PER_CLOCK_PER_SM
from accounting.hardware.peaks import peak_flops
from accounting.report import headlines as phase
from accounting.report import run
from accounting.report.headlines import Candidate, measure_headlines, sustained
from accounting.report.results import dtype_section
from accounting.report.saturation import MIN_READINGS, SUSTAINED_MIN_S, withheld_because
from accounting.report.sweep import MatmulMeasurement
from accounting.telemetry.validity import POWER_SUSPECT, tag_names, validity_tags
from tests.support import h200_report_replay as recorded

SHAPE = (4608, 6208, 5632)
"""The report's sustained shape on the recorded H200 (both reports chose it; the 2-s windows ran it)."""


def sustained_shape_candidate(device) -> Candidate:
    m, k, n = SHAPE
    flops = 2 * m * k * n
    return Candidate(SHAPE, flops, flops / (device.window["tflops"] * 1e12))


@pytest.mark.parametrize("window", [1, 2, 3])
def test_the_recorded_2_s_windows_are_published_as_sustained_at_their_median_clock_and_power(window):
    device = recorded.RecordedH200(window)
    figure = device.window
    headline, windows = sustained(device, "bfloat16", [sustained_shape_candidate(device)], deadline=10.0,
                                  physical=recorded.physical())
    assert headline.published, headline.reason
    assert headline.tflops == pytest.approx(figure["tflops"])
    # power: the energy counter's average over the window (the fake's counter advanced at each reading's power, one
    # of them an instant overshoot), within 1 % of the readings' recorded median
    telemetry = windows[-1][0].telemetry
    assert headline.clock_mhz == figure["clock_median"]
    assert headline.power_w == pytest.approx(telemetry["energy_j"] / telemetry["duration_s"])
    assert headline.power_w == pytest.approx(figure["power_median"], rel=0.01)
    assert headline.seconds >= phase.SUSTAINED_TARGET_S - headline.seconds / headline.repeats
    assert windows[-1][0].telemetry["samples"] >= MIN_READINGS
    assert headline.power_limit_w == recorded.sustained_windows()["power_limit_w"]
    assert headline.saturation.startswith(f"power {headline.power_w:.0f} W ≥ 0.9 × the enforced limit 700 W")
    # J/TFLOP from the energy counter: the fake's counter advanced at the power drawn, reading by reading
    work_tflop = headline.flops * headline.repeats / 1e12
    assert headline.energy_source == "counter"
    assert headline.j_per_tflop == pytest.approx(headline.energy_j / work_tflop)
    assert headline.j_per_tflop == pytest.approx(figure["power_median"] / figure["tflops"], rel=0.02)


def test_a_2_s_window_with_an_instant_reading_above_the_limit_is_not_power_suspect():
    device = recorded.RecordedH200(2, overshoot_w=recorded.INSTANT_POWER_OVERSHOOT_W)
    found = measure_headlines(device, {"bfloat16": [sustained_shape_candidate(device)]}, budget_s=12.0,
                              physical=recorded.physical())
    steady = found["headlines"]["bfloat16"]["sustained"]
    assert found["run_max_power_w"] == recorded.INSTANT_POWER_OVERSHOOT_W, "the overshoot was read"
    assert steady.published and POWER_SUSPECT not in tag_names(steady.tags)
    assert "throttled: sw_power_cap" in steady.tags
    assert found["power_limit_w"] == 700.0


def test_the_reports_15_ms_sustained_windows_are_withheld_for_their_length_and_readings():
    report = recorded.load("report.json")
    for dtype in ("tf32", "bfloat16", "float16", "float8_e4m3fn"):
        old = report["dtypes"][dtype]["headlines"]["sustained"]
        telemetry = old["telemetry"]
        assert old["published"] and telemetry["duration_s"] < 0.02, "the recorded report published it"
        why = withheld_because(telemetry, seconds=telemetry["duration_s"], flops_per_s=old["flops_per_s"], dtype=dtype,
                               physical=recorded.physical())
        assert why.startswith(f"the window ran {telemetry['duration_s']:.3g} s, under the {SUSTAINED_MIN_S:g} s")
        assert f"{telemetry['samples']} telemetry readings in the window, under the {MIN_READINGS}" in why


def test_the_793_tflops_at_1350_mhz_figure_is_withheld_as_impossible_and_too_short():
    report = recorded.load("report-bf16-budget60.json")
    old = report["dtypes"]["bfloat16"]["headlines"]["sustained"]
    capability = tuple(report["machine"]["device"]["compute_capability"])
    sms = report["machine"]["device"]["multiprocessors"]
    why = withheld_because(old["telemetry"], seconds=old["telemetry"]["duration_s"], flops_per_s=old["flops_per_s"],
                           dtype="bfloat16", physical=(capability, sms))
    ceiling = sms * FLOPS_PER_CLOCK_PER_SM[capability]["bfloat16"] * 1350e6 * 1.02 / 1e12
    assert f"impossible: 793.1 TFLOP/s > 132 SMs × 4096 FLOP/clock × 1350 MHz × 1.02 = {ceiling:.1f} TFLOP/s" in why
    assert why.startswith("the window ran 0.0102 s, under the 1 s")


def test_power_suspect_is_judged_against_the_700_w_limit_not_the_931_w_instant_reading():
    report = recorded.load("report.json")
    limit = recorded.sustained_windows()["power_limit_w"]
    rows = [row for section in report["dtypes"].values() for row in section["measurements"]]
    old_suspect = [row for row in rows if POWER_SUSPECT in tag_names(row["tags"])]
    assert old_suspect and all("the highest in the run, 931 W" in " ".join(row["tags"]) for row in old_suspect)
    telemetry = [figure["telemetry"] for section in report["dtypes"].values()
                 for figure in section["headlines"].values()]
    capped = [summary for summary in telemetry if "sw_power_cap" in summary["throttle_reasons"]]
    assert capped, "the recorded run throttled on its power cap"
    for summary in capped:  # at the cap, whatever an instant reading said
        assert POWER_SUSPECT not in tag_names(validity_tags(summary, power_limit_w=limit))
    low = [summary for summary in telemetry if not summary["throttle_reasons"] and summary["power_w_mean"] < 0.9 * limit]
    assert low, "the burst windows drew little power"
    for summary in low:
        tags = validity_tags(summary, power_limit_w=limit)
        assert f"the enforced power limit, {limit:.0f} W" in " ".join(tags)


def recorded_candidates(report) -> dict:
    """Each dtype's recorded sweep rows as headline candidates, fastest first (the report's own ranking)."""
    found = {}
    for dtype, section in report["dtypes"].items():
        rows = sorted(section["measurements"], key=lambda row: row["flops_per_s"], reverse=True)
        found[dtype] = [Candidate((row["m"], row["k"], row["n"]), row["flops"], row["seconds"]) for row in rows]
    return found


class SaturatedH200:
    """Every product at its recorded sweep speed × 685 / 826 (the recorded sustained over burst bf16 rate) once
    the soak has run a second; telemetry as the recorded 2-s windows read it (one reading per 20 ms)."""

    def __init__(self):
        self.now = 0.0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds

    def repeat(self, dtype, shape, repeats, *, seconds=None):
        per_call = self.seconds[(dtype.split(" (")[0], shape)] * 826 / 685
        if seconds is not None:
            repeats = min(repeats, max(1, math.ceil(seconds / per_call)))
        self.now += per_call * repeats
        duration = per_call * repeats
        telemetry = {"backend": "nvml", "samples": int(duration / 0.02) + 2, "duration_s": duration,
                     "clock_mhz_median": 1455.0, "clock_mhz_early": 1455.0, "clock_mhz_late": 1455.0,
                     "clock_mhz_max": 1500.0, "power_w_median": 690.0, "power_w_max": 931.0, "power_limit_w": 700.0,
                     "throttle_reasons": ["sw_power_cap"], "energy_j": 690.0 * duration if duration >= 1 else None,
                     "energy_source": "counter", "unavailable": {}}
        return phase.Window((per_call,) * repeats, telemetry)


def test_the_standard_reports_default_budget_reaches_sustained_on_an_h200():
    report = recorded.load("report.json")
    candidates = recorded_candidates(report)
    device = SaturatedH200()
    device.seconds = {(dtype, shape.shape): shape.seconds for dtype, shapes in candidates.items() for shape in shapes}
    budget = 60.0  # the standard level's default
    spent = report["bandwidth"]["seconds"] * report["bandwidth"]["repeats"] if report.get("bandwidth") else 0.5
    headline_budget = budget * (1 - run.FINISH_RESERVE_FRACTION) - spent - run.sweep_budget_s(budget, spent)
    keyed = run.with_fp8_default_accumulation(candidates, headline_budget, [])
    found = measure_headlines(device, keyed, budget_s=headline_budget, physical=recorded.physical(),
                              accumulations={key: run.split_key(key)[1] for key in keyed})
    assert device.now <= headline_budget * 1.1
    for key, figures in found["headlines"].items():
        steady = figures["sustained"]
        assert steady.published, (key, steady.reason)
        assert steady.seconds >= SUSTAINED_MIN_S and steady.j_per_tflop is not None
    assert "float8_e4m3fn (default accumulation)" in found["headlines"]
    assert found["headlines"]["float8_e4m3fn"]["sustained"].accumulation == "fast"


def test_after_a_soak_whose_clock_moved_the_sustained_clock_is_its_own_windows_median_not_the_soaks():
    device = recorded.SoakingH200(1)
    steady_shape = sustained_shape_candidate(device)
    m, k, n = device.soak_shape
    soak_shape = Candidate(device.soak_shape, 2 * m * k * n, 2 * m * k * n / 677e12)
    found = measure_headlines(device, {"bfloat16": [steady_shape, soak_shape]}, budget_s=30.0,
                              physical=recorded.physical())
    soaked, steady = found["soak"], found["headlines"]["bfloat16"]["sustained"]
    assert soaked.shape == device.soak_shape and soaked.windows
    assert soaked.clocks == device.soak_clocks[:len(soaked.clocks)], "the soak read the recorded moving clock"
    assert steady.published and steady.clock_mhz == device.window["clock_median"] != soaked.clocks[-1]
    assert steady.tflops == pytest.approx(device.window["tflops"])


def test_a_best_figure_above_the_physical_ceiling_is_not_judged_healthy():
    """The recorded 793 TFLOP/s "at 1350 MHz" as a sweep row: tagged impossible, and the verdict says unknown."""
    old = recorded.load("report-bf16-budget60.json")["dtypes"]["bfloat16"]["headlines"]["sustained"]
    done = MatmulMeasurement("bfloat16", *old["shape"], old["flops"], old["flops"] / old["flops_per_s"], 0.0, 9,
                             telemetry=old["telemetry"])
    peak = peak_flops("NVIDIA H200", "bf16")
    judged = dtype_section("bfloat16", [done], peak=peak, floor=0.6, bandwidth=None, spec_bandwidth=None,
                           physical=recorded.physical())
    unchecked = dtype_section("bfloat16", [done], peak=peak, floor=0.6, bandwidth=None, spec_bandwidth=None)
    assert unchecked["verdict"]["healthy"] is True, "MFU 0.80 over its 0.6 floor, judged without the check"
    assert judged["verdict"]["healthy"] is None and judged["verdict"]["status"] == "unknown"
    assert judged["verdict"]["message"].startswith("unknown: the best figure fails the physical check (impossible: 793.1")
    assert any(tag.startswith("impossible: 793.1 TFLOP/s") for tag in judged["best"]["tags"])


def test_the_recorded_bursts_at_low_power_carry_no_power_suspect_tag():
    """The recorded bf16 burst drew 125 W (an idle device, a few products): not saturated, by design."""
    old = recorded.load("report-bf16-budget60.json")["dtypes"]["bfloat16"]["headlines"]["burst"]
    assert "power-suspect" in " ".join(old["tags"]), "the recorded report tagged it"
    window = phase.Window((old["flops"] / old["flops_per_s"],), {**old["telemetry"], "power_limit_w": 700.0})
    burst = phase._burst_headline("bfloat16", [(window, Candidate(tuple(old["shape"]), old["flops"], 1e-3))],
                                  1980.0, "cuda:0", recorded.physical())
    assert burst.published and POWER_SUSPECT not in tag_names(burst.tags)
    assert POWER_SUSPECT in tag_names(validity_tags(window.telemetry)), "the window itself is not saturated"
