"""Verdicts and roofline figures on crafted measurements."""

import pytest

from accounting import AccountingError
from accounting.hardware.native import native_matmul
from accounting.report.results import BandwidthMeasurement, bandwidth_section, dtype_section
from accounting.report.roofline import arithmetic_intensity, bound, ridge_point
from accounting.report.sweep import MatmulMeasurement
from accounting.report.verdict import ABOVE_PEAK, BELOW_FLOOR, HEALTHY, NOT_JUDGED, UNKNOWN, judge, not_judged, overall
from tests.support.fake_devices import SAPPHIRE_RAPIDS, ZEN3


def measured(dtype, m, k, n, flops_per_second, phase="ramp"):
    flops = 2 * m * k * n
    return MatmulMeasurement(dtype, m, k, n, flops, flops / flops_per_second, 0.0, 5, phase=phase)


@pytest.mark.parametrize(
    "mfu, floor, status, healthy",
    [
        pytest.param(0.80, 0.50, HEALTHY, True, id="above"),
        pytest.param(0.50, 0.50, HEALTHY, True, id="exactly-at-floor"),
        pytest.param(0.49, 0.50, BELOW_FLOOR, False, id="just-below"),
        pytest.param(0.00, 0.50, BELOW_FLOOR, False, id="zero"),
        pytest.param(None, 0.50, UNKNOWN, None, id="no-mfu"),
        pytest.param(0.70, None, UNKNOWN, None, id="no-floor"),
        pytest.param(1.05, 0.50, HEALTHY, True, id="at-the-ceiling"),
        pytest.param(1.30, 0.50, ABOVE_PEAK, None, id="above-the-ceiling"),
    ],
)
def test_judge_status(mfu, floor, status, healthy):
    verdict = judge("bfloat16", mfu, floor)
    assert (verdict.status, verdict.healthy) == (status, healthy)
    assert verdict.message.startswith(status + ":")


def test_below_floor_says_by_how_much():
    verdict = judge("float32", 0.3, 0.4, best_flops=3e11, peak_flops=1e12)
    assert verdict.shortfall == pytest.approx(0.1)
    assert verdict.message == (
        "below floor: MFU 0.300 < floor 0.400, short by 0.100 (25% under); best 0.300 TFLOP/s, the floor needs 0.400"
    )


def test_judge_rejects_negative_mfu():
    with pytest.raises(AccountingError, match=r"^mfu must be non-negative, got -0\.1$"):
        judge("float32", -0.1, 0.5)


@pytest.mark.parametrize(
    "statuses, expected",
    [
        pytest.param([HEALTHY, HEALTHY], HEALTHY, id="all-healthy"),
        pytest.param([HEALTHY, BELOW_FLOOR, UNKNOWN], BELOW_FLOOR, id="one-short"),
        pytest.param([HEALTHY, UNKNOWN], UNKNOWN, id="one-unknown"),
        pytest.param([HEALTHY, ABOVE_PEAK, UNKNOWN], ABOVE_PEAK, id="one-above-peak"),
        pytest.param([BELOW_FLOOR, ABOVE_PEAK], BELOW_FLOOR, id="below-floor-first"),
        pytest.param([], UNKNOWN, id="nothing"),
        pytest.param([HEALTHY, NOT_JUDGED], HEALTHY, id="emulated-left-out"),
        pytest.param([NOT_JUDGED, BELOW_FLOOR], BELOW_FLOOR, id="judged-below-still-counts"),
        pytest.param([NOT_JUDGED], UNKNOWN, id="nothing-judged"),
    ],
)
def test_overall(statuses, expected):
    assert overall(statuses) == expected


def test_not_judged_shows_the_mfu_and_the_reason_but_no_floor():
    verdict = not_judged("bfloat16", 0.0125, label="emulated", reason="no AMX")
    assert (verdict.status, verdict.healthy, verdict.floor, verdict.shortfall) == (NOT_JUDGED, None, None, None)
    assert verdict.message == "emulated — not judged: MFU 0.013 of the float32 path's peak; no AMX"
    assert not_judged("tf32", None, label="runs as float32", reason="sm_70").message == "runs as float32 — not judged: sm_70"


@pytest.mark.parametrize("info, judged", [
    pytest.param(ZEN3, False, id="zen3-emulates-bf16"),
    pytest.param(SAPPHIRE_RAPIDS, True, id="spr-amx-bf16"),
])
def test_dtype_section_judges_only_a_native_dtype(info, judged):
    """An MFU far under the floor: below floor where bf16 is native, not judged (no floor) where it is emulated."""
    answer = native_matmul(info, "bf16")
    section = dtype_section("bfloat16", [measured("bfloat16", 512, 512, 512, 1e10)], peak=1e12, floor=0.5,
                            bandwidth=1e10, spec_bandwidth=None, native=answer, mfu_against="the float32 path's peak")
    assert (section["native"], section["judged"], section["emulated"]) == (judged, judged, not judged)
    assert section["mfu"] == pytest.approx(0.01)
    assert section["verdict"]["status"] == (BELOW_FLOOR if judged else NOT_JUDGED)
    assert section["floor"] == (0.5 if judged else None)
    assert section["not_native_reason"] == answer.reason and section["runs_as"] == "bfloat16"
    assert section["mfu_against"] == (None if judged else "the float32 path's peak")


def test_dtype_section_from_crafted_measurements():
    runs = [
        measured("bfloat16", 512, 512, 512, 2e11),
        measured("bfloat16", 1024, 1024, 1024, 4e11),
        measured("bfloat16", 1024, 1024, 1152, 5e11, phase="refine"),
    ]
    section = dtype_section("bfloat16", runs, peak=1e12, floor=0.6, bandwidth=1e10,
                            spec_bandwidth=None)
    assert (section["best"]["m"], section["best"]["n"]) == (1024, 1152)
    assert section["mfu"] == pytest.approx(0.5)
    assert section["median_flops_per_s"] == pytest.approx(4e11)
    assert section["median_mfu"] == pytest.approx(0.4)
    assert section["ridge_flop_per_byte"] == pytest.approx(100.0)
    assert [row["bound"] for row in section["measurements"]] == ["compute", "compute", "compute"]
    assert section["verdict"]["status"] == BELOW_FLOOR
    assert section["verdict"]["shortfall"] == pytest.approx(0.1)


def test_dtype_section_small_shapes_are_memory_bound_on_a_slow_memory():
    runs = [measured("float32", 128, 128, 128, 1e10)]
    section = dtype_section("float32", runs, peak=1e12, floor=0.1, bandwidth=1e9,
                            spec_bandwidth=None)
    assert section["measurements"][0]["arithmetic_intensity"] == pytest.approx(2 * 128**3 / (3 * 128 * 128 * 4))
    assert section["measurements"][0]["bound"] == "memory"


def test_dtype_section_without_peak_is_unknown_and_says_why():
    section = dtype_section("float16", [measured("float16", 256, 256, 256, 1e11)], peak=None, floor=0.5, bandwidth=1e10, spec_bandwidth=None)
    assert section["mfu"] is None
    assert section["verdict"]["status"] == UNKNOWN
    assert "no spec peak for float16" in section["verdict"]["message"]
    assert section["ridge_basis"].startswith("best measured")


@pytest.mark.parametrize(
    "peak, spec_bandwidth, ridge, basis",
    [
        pytest.param(1e12, 1e11, 10.0, "spec peak FLOP/s / spec bandwidth", id="both-spec"),
        pytest.param(1e12, None, 100.0, "spec peak FLOP/s / measured bandwidth", id="spec-peak-only"),
        pytest.param(None, 1e11, 2.0, "best measured FLOP/s / spec bandwidth", id="spec-bandwidth-only"),
        pytest.param(None, None, 20.0, "best measured FLOP/s / measured bandwidth", id="neither"),
    ],
)
def test_ridge_basis_names_the_figures_it_was_computed_from(peak, spec_bandwidth, ridge, basis):
    """Best measured 2e11 FLOP/s, measured bandwidth 1e10 B/s; the spec figures, where given, win."""
    runs = [measured("float16", 256, 256, 256, 1e11), measured("float16", 512, 512, 512, 2e11)]
    section = dtype_section("float16", runs, peak=peak, floor=0.5, bandwidth=1e10, spec_bandwidth=spec_bandwidth)
    assert section["ridge_flop_per_byte"] == pytest.approx(ridge)
    assert section["ridge_basis"] == basis


def test_dtype_section_with_nothing_measured():
    section = dtype_section("float32", [], peak=1e12, floor=0.5, bandwidth=None,
                            spec_bandwidth=None)
    assert section["best"] is None and section["measurements"] == []
    assert section["verdict"]["message"] == "unknown: nothing measured: the budget ran out first"


def test_bandwidth_against_spec():
    section = bandwidth_section(BandwidthMeasurement(bytes_moved=2 * 10**9, seconds=1e-3, iqr_s=0.0, repeats=5),
                                spec_bytes_per_s=3.35e12)
    assert section["measured_bytes_per_s"] == pytest.approx(2e12)
    assert section["fraction_of_spec"] == pytest.approx(2e12 / 3.35e12)


@pytest.mark.parametrize(
    "m, k, n, dtype, expected",
    [
        pytest.param(4096, 4096, 4096, "bfloat16", 2 * 4096**3 / (3 * 4096**2 * 2), id="square-bf16"),
        pytest.param(8192, 8192, 1, "bf16", 2 * 8192 * 8192 / ((8192 * 8192 + 8192 + 8192) * 2), id="matrix-vector"),
        pytest.param(1024, 1024, 1024, "tf32", 2 * 1024**3 / (3 * 1024**2 * 4), id="tf32-stored-as-float32"),
        pytest.param(64, 64, 64, "fp8", 2 * 64**3 / (2 * 64 * 64 * 1 + 64 * 64 * 2), id="fp8-writes-bf16"),
    ],
)
def test_arithmetic_intensity(m, k, n, dtype, expected):
    assert arithmetic_intensity(m, k, n, dtype) == pytest.approx(expected)


def test_roofline_on_h100_figures():
    ridge = ridge_point(989.4e12, 3.35e12)
    assert ridge == pytest.approx(295.34, rel=1e-3)
    assert bound(arithmetic_intensity(8192, 8192, 8192, "bf16"), ridge) == "compute"
    assert bound(arithmetic_intensity(8192, 8192, 16, "bf16"), ridge) == "memory"


def test_ridge_point_rejects_zero_bandwidth():
    with pytest.raises(AccountingError, match=r"^bytes_per_second must be positive, got 0$"):
        ridge_point(1e12, 0)
