"""accounting.acceptance.expected: the healthy ranges of an H100 SXM and an H200, and the verdict on a reading.

The peaks come from the package's peak table, so the ranges are checked against ``peak_flops`` and
``peak_bandwidth`` as a user would call them; the anchors against the figures their sources give; and every
range against the benchmark floors of benchmarks.json, which a range must never undercut.
"""

import pytest

from accounting.acceptance.expected import (
    ABOVE,
    AGREEMENT,
    ANCHOR_TOLERANCE,
    BELOW,
    HOST_AGREEMENT,
    IN_RANGE,
    NO_EXPECTATION,
    Expected,
    chip_of,
    expected_bandwidth,
    expected_clock,
    expected_matmul,
    expected_model_mfu,
    expected_power,
    judge,
)
from accounting.bench.matrix import load_benchmarks
from accounting.flops import MFU_CEILING
from accounting.hardware.peaks import peak_bandwidth, peak_flops

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


@pytest.mark.parametrize("value, verdict", [
    pytest.param(10.0, IN_RANGE, id="low-end-inclusive"),
    pytest.param(20.0, IN_RANGE, id="high-end-inclusive"),
    pytest.param(9.999, BELOW, id="just-below"),
    pytest.param(20.001, ABOVE, id="just-above"),
    pytest.param(None, NO_EXPECTATION, id="no-value"),
])
def test_judge_places_a_value_against_both_ends(value, verdict):
    assert judge(value, Expected(10.0, 20.0, "x", "s")) == verdict


def test_an_open_end_bounds_nothing():
    assert judge(1e9, Expected(10.0, None, "x", "s")) == IN_RANGE
    assert judge(-1e9, Expected(None, 20.0, "x", "s")) == IN_RANGE
    assert judge(5.0, None) == NO_EXPECTATION


@pytest.mark.parametrize("name, dtype, anchor", [
    pytest.param(H100, "bfloat16", 792.1, id="h100-bf16-mamf-finder"),
    pytest.param(H200, "bfloat16", 790.0, id="h200-bf16-8192-cubed"),
    pytest.param(H100, "float16", 792.1, id="h100-fp16-as-bf16"),
    pytest.param(H100, "float8_e4m3fn", 1403.0, id="h100-fp8"),
    pytest.param(H200, "float8_e5m2", 1453.0, id="h200-fp8"),
])
def test_a_matmul_range_runs_from_the_tolerance_below_its_anchor_to_the_ceiling_over_the_datasheet(name, dtype, anchor):
    expected = expected_matmul(name, dtype)
    assert expected.low == pytest.approx(ANCHOR_TOLERANCE * anchor)
    assert expected.high == pytest.approx(MFU_CEILING * peak_flops(name, dtype) / 1e12)
    assert expected.unit == "TFLOP/s"


@pytest.mark.parametrize("dtype", ["float32", "tf32"])
def test_plain_fp32_and_tf32_are_expected_near_seven_tenths_of_their_peak(dtype):
    expected = expected_matmul(H100, dtype)
    peak = peak_flops(H100, dtype) / 1e12
    assert expected.low == pytest.approx(ANCHOR_TOLERANCE * 0.7 * peak)
    assert expected.high == pytest.approx(MFU_CEILING * peak)


@pytest.mark.parametrize("name", [H100, H200])
@pytest.mark.parametrize("dtype", load_benchmarks().device("cuda").dtypes)
def test_no_healthy_range_reaches_below_the_benchmark_floor(name, dtype):
    """A card the benchmarks fail (below floor × peak) must never read 'in range' here."""
    floor = load_benchmarks().floor("cuda", dtype)
    expected = expected_matmul(name, dtype)
    assert expected.low >= floor * peak_flops(name, dtype) / 1e12
    assert expected.low < expected.high


@pytest.mark.parametrize("name, low", [pytest.param(H200, 3.0, id="h200-anchor"),
                                       pytest.param(H100, 3.0 / 4.8 * 3.35, id="h100-scaled")])
def test_the_copy_bandwidth_runs_from_its_anchor_to_the_datasheet(name, low):
    expected = expected_bandwidth(name)
    assert expected.low == pytest.approx(low)
    assert expected.high == pytest.approx(peak_bandwidth(name) / 1e12)


def test_clock_and_power_are_bounded_above_only():
    assert (expected_clock(H200).low, expected_clock(H200).high) == (None, 1980.0)
    assert expected_power(H100).low is None and expected_power(H100).high == pytest.approx(714.0)
    assert judge(1755, expected_clock(H100)) == IN_RANGE and judge(2100, expected_clock(H100)) == ABOVE


@pytest.mark.parametrize("name", [
    pytest.param("NVIDIA A100-SXM4-80GB", id="a100-no-anchor"),
    pytest.param("NVIDIA H100 80GB HBM3 MIG 1g.10gb", id="mig-slice"),
    pytest.param("NVIDIA H100 PCIe", id="h100-pcie-no-anchor"),
    pytest.param(None, id="no-device"),
])
def test_a_device_without_anchors_has_no_expectation(name):
    assert chip_of(name) is None
    assert expected_matmul(name, "bfloat16") is None and expected_bandwidth(name) is None
    assert expected_clock(name) is None and expected_power(name) is None


def test_a_dtype_the_chip_has_no_rate_for_has_no_expectation():
    assert expected_matmul(H100, "int8") is None  # a rate, but no anchor and not fp32/tf32


def test_the_model_mfu_range_is_the_floor_to_the_ceiling():
    assert (expected_model_mfu(0.1).low, expected_model_mfu(0.1).high) == (0.1, MFU_CEILING)
    assert expected_model_mfu(None) is None


def test_the_agreement_bands_contain_one_and_the_host_may_only_read_longer_by_little():
    assert AGREEMENT[0] < 1 < AGREEMENT[1]
    assert HOST_AGREEMENT[0] < 1 < HOST_AGREEMENT[1] and HOST_AGREEMENT[0] > AGREEMENT[0]


def test_text_shows_both_ends_or_the_one_there_is():
    assert Expected(3.0, 4.8, "TB/s", "s").text(2) == "3.00–4.80 TB/s"
    assert Expected(None, 1980.0, "MHz", "s").text() == "≤ 1,980 MHz"
    assert Expected(0.1, None, "", "s").text(1) == "≥ 0.1 "
