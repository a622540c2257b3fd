"""The fp8 result check on a GPU: finite at every k, above every error a real H200 made, and still catching a fault.

Truth is the recorded H200 run (tests/data/hosts/nvidia-h200/): the errors its fp8 products made against
a float64 product of the same fp8 values (``fp8-product-error.txt``), and the products its report, fleet
and benchmarks judged "wrong result ... tolerance nan" with the old bound. Products are computed here on
the CPU (torch runs ``_scaled_mm`` there) and judged with the GPU's precision model, as a GPU run would.
"""

import math
import re
from pathlib import Path

import pytest
import torch

from accounting.errors import AccountingError
from accounting.health.accumulation import ACCUMULATIONS, DEFAULT, FAST, fp8_coefficient, growth
from accounting.health.faults import flip_bit
from accounting.health.results import ResultCheck, check_product, precision_of, residuals
from accounting.timing import FP8_OUT_DTYPE, matmul_case

H200 = Path(__file__).parent / "data" / "hosts" / "nvidia-h200"
LARGEST_K = 65536
"""The largest k the benchmarks and the report's sweep use."""

_ERROR_LINE = re.compile(r"k=(\d+) fast_accum=(True|False): max \|C-AB\|/\(\|A\|\|B\|\) = ([0-9.e+-]+), .*"
                         r"beyond bf16 output rounding max = ([0-9.e+-]+);")
_NAN_VERDICT = re.compile(r"(float8_\w+) (\d+)x(\d+)x(\d+) product wrong: row \d+, columns \d+-\d+ not finite "
                          r"\(residual [^,]+, tolerance nan\)")


def recorded_errors() -> list[tuple[int, str, float, float]]:
    """``(k, accumulation, max error, max error beyond the bf16 output's rounding)``, as shares of |A||B|."""
    rows = []
    for line in (H200 / "fp8-product-error.txt").read_text().splitlines():
        found = _ERROR_LINE.match(line)
        if found:
            k, fast, total, beyond = found.groups()
            rows.append((int(k), FAST if fast == "True" else DEFAULT, float(total), float(beyond)))
    return rows


def nan_verdicts() -> set[tuple[str, int, int, int]]:
    """Every fp8 product the recorded run called wrong with a NaN tolerance: ``(dtype, m, k, n)``."""
    found = set()
    for path in sorted(H200.glob("*")):
        if path.suffix in (".log", ".json", ".md"):
            for dtype, m, k, n in _NAN_VERDICT.findall(path.read_text()):
                found.add((dtype, int(m), int(k), int(n)))
    return found


def gpu_precision(accumulation):
    return precision_of("float8_e4m3fn", "cuda", out_dtype=FP8_OUT_DTYPE, accumulation=accumulation)


def test_the_recorded_table_is_read_whole():
    rows = recorded_errors()
    assert sorted({(k, mode) for k, mode, _, _ in rows}) == sorted(
        (k, mode) for k in (1024, 8192, 16384, 32768) for mode in ACCUMULATIONS)


@pytest.mark.parametrize("k, accumulation, total, beyond", recorded_errors(),
                         ids=lambda value: str(value) if not isinstance(value, float) else None)
def test_every_recorded_h200_error_lies_inside_the_bound(k, accumulation, total, beyond):
    """What the sums lost (beyond the output's own rounding) is inside ``α``; the whole error inside ``α + β(1 + α)``.

    ``|C − AB| ≤ α|A||B| + β|C|`` and ``|C| ≤ (1 + α)|A||B|``, so as a share of |A||B| the whole error is at
    most ``α + β(1 + α)``.
    """
    precision = gpu_precision(accumulation)
    alpha = precision.product_coefficient(k)
    assert math.isfinite(alpha)
    assert beyond <= alpha
    assert total <= alpha + precision.output_coefficient * (1 + alpha)


def test_default_accumulation_bound_is_the_tighter_where_chunks_are_promoted():
    """Promotion to float32 every 128 products keeps default's bound flat in k; fast's grows with it."""
    for k in (1024, 8192, 32768):
        assert fp8_coefficient(k, DEFAULT) < fp8_coefficient(k, FAST)
    assert fp8_coefficient(LARGEST_K, DEFAULT) < 1.01 * fp8_coefficient(1024, DEFAULT)
    assert fp8_coefficient(LARGEST_K, FAST) > 100 * fp8_coefficient(1024, FAST)
    assert fp8_coefficient(8192, None) == fp8_coefficient(8192, FAST)  # not known: the larger


@pytest.mark.parametrize("accumulation", [DEFAULT, FAST, None])
def test_the_bound_is_finite_at_every_k_the_benchmarks_use(accumulation):
    precision = gpu_precision(accumulation)
    assert all(math.isfinite(precision.product_coefficient(k)) for k in range(16, LARGEST_K + 1, 16))


def test_growth_is_what_gamma_bounds_and_stays_finite_past_it():
    """``(1 + u)^n − 1`` ≤ ``γ_n`` while ``n·u < 1`` (Higham, Lemma 3.1), and is the product of n factors itself."""
    u = 2.0**-13
    for n in (1, 7, 100, 4000, 8191):
        gamma = n * u / (1 - n * u)
        assert growth(n, u) <= gamma
        assert growth(n, u) == pytest.approx(math.prod([1 + u] * n) - 1, rel=1e-9)
    assert math.isfinite(growth(8192, u)) and math.isfinite(growth(1 << 20, u))


def test_a_product_the_h200_called_wrong_is_now_judged_with_a_finite_tolerance():
    """Every recorded ``tolerance nan`` verdict, at its own k: a correct product passes with the GPU's model.

    Fails on the old model (accumulation unit 2⁻¹³ over the whole of k: NaN tolerance from k = 8192).
    m and n are cut to a few rows and columns (the bound of an element depends on k only).
    """
    verdicts = nan_verdicts()
    assert {k for _, _, k, _ in verdicts} >= {8192, 9728, 16384, 32768}
    for dtype, k in sorted({(dtype, k) for dtype, _m, k, _n in verdicts}):
        case = matmul_case(dtype, 2, k, 16, seed=k)
        a, b, scale_a, scale_b = case.operands
        c = case.fn()
        for accumulation in (case.accumulation, None):  # the report's (fast), and not known (the larger bound)
            check = check_product(a, b, c, scale_a=scale_a, scale_b=scale_b, dtype=dtype,
                                  precision=gpu_precision(accumulation))
            assert check.checked and check.ok, (dtype, k, accumulation, check)
            assert math.isfinite(check.tolerance) and check.excess <= 1


def _upward_exponent_flip(c: torch.Tensor, index: int) -> int:
    """The highest exponent bit of bfloat16 element ``index`` that is 0: flipping it multiplies it by 2^(2^j)."""
    bits = int(c.view(torch.int16).view(-1)[index]) & 0xFFFF
    for bit in range(14, 6, -1):
        if not bits & (1 << bit):
            return bit
    raise AssertionError(f"element {index} has every exponent bit set")


@pytest.mark.parametrize("k, accumulation", [(8192, DEFAULT), (8192, FAST), (16384, DEFAULT), (LARGEST_K, FAST)])
def test_a_flipped_exponent_bit_still_fails_an_fp8_product_on_the_gpu_path(k, accumulation):
    """The fault injection's flip, on a product judged with the GPU's model: caught at the right row and columns."""
    case = matmul_case("float8_e4m3fn", 8, k, 64, seed=3, fp8_fast_accum=accumulation == FAST)
    a, b, scale_a, scale_b = case.operands
    c = case.fn().clone()
    precision = gpu_precision(case.accumulation)
    clean = check_product(a, b, c, scale_a=scale_a, scale_b=scale_b, precision=precision)
    assert clean.checked and clean.ok
    index = 2 * 64 + 37  # row 2, column 37
    bit = _upward_exponent_flip(c, index)
    bad = c.clone()
    flip_bit(bad, index, bit)
    change = abs(float(bad.view(-1)[index].double()) - float(c.view(-1)[index].double()))
    found = residuals(a, b, c, scale_a=scale_a, scale_b=scale_b, precision=precision)
    tolerance = float(found.tolerance[2, found.vector_of(37)])
    assert change > found.catch_factor * tolerance or not math.isfinite(change)  # the flip is above the guarantee
    check = check_product(a, b, bad, scale_a=scale_a, scale_b=scale_b, precision=precision)
    assert check.checked and not check.ok and check.status == "wrong"
    assert check.row == 2 and check.columns[0] <= 37 < check.columns[1]
    assert "product wrong: row 2" in check.reason


def test_a_product_with_no_finite_bound_is_not_checked_and_says_why_never_wrong():
    """An accumulation unit so coarse its bound overflows: 'not checked' with the reason, not 'wrong'."""
    case = matmul_case("bfloat16", 8, 2048, 16)
    a, b, _ = case.operands
    coarse = precision_of("bfloat16", out_dtype=torch.bfloat16)
    coarse = type(coarse)(0, 0.5, coarse.output_unit)  # (1 + 0.5)^2049 − 1 is past float64's range
    assert math.isinf(coarse.product_coefficient(2048))
    check = check_product(a, b, case.fn(), precision=coarse, repeat_identical=True)
    assert not check.checked and check.ok and check.status == "not checked"
    assert check.reason == "" and "no finite rounding bound at k=2048" in check.note
    assert check.note.startswith("bfloat16 8x2048x16 product not checked: ")
    changed = check_product(a, b, case.fn(), precision=coarse, repeat_identical=False)
    assert not changed.ok and changed.status == "wrong" and "changed between two identical calls" in changed.reason


def test_an_operand_holding_nan_leaves_its_blocks_not_checked():
    a, b = torch.randn(6, 40, dtype=torch.float64), torch.randn(40, 32, dtype=torch.float64)
    c = a @ b
    a[4, 3] = math.nan
    check = check_product(a, b, c)
    assert not check.checked and check.ok and check.row == 4
    assert "not a number" in check.not_checked_reason and "an operand holds NaN" in check.not_checked_reason


def test_a_nan_in_the_result_is_still_wrong():
    a, b = torch.randn(6, 40, dtype=torch.float64), torch.randn(40, 32, dtype=torch.float64)
    c = a @ b
    c[1, 2] = math.nan
    check = check_product(a, b, c)
    assert check.checked and not check.ok and check.row == 1


def test_accumulation_is_named_for_fp8_only_and_from_the_two_modes():
    with pytest.raises(AccountingError, match=r"accumulation is for fp8 products, got accumulation='fast' for bfloat16"):
        precision_of("bfloat16", "cuda", accumulation="fast")
    with pytest.raises(AccountingError, match=r"fp8 accumulation must be one of \('default', 'fast'\), got 'slow'"):
        precision_of("float8_e4m3fn", "cuda", accumulation="slow")


@pytest.mark.parametrize("fast, named", [(True, FAST), (False, DEFAULT)])
def test_the_fp8_case_names_its_accumulation_and_its_check_uses_that_bound(fast, named):
    case = matmul_case("float8_e4m3fn", 16, 64, 32, fp8_fast_accum=fast)
    assert case.accumulation == named
    assert matmul_case("bfloat16", 16, 64, 32).accumulation is None
    a, b, scale_a, scale_b = case.operands
    on_gpu = check_product(a, b, case.fn(), scale_a=scale_a, scale_b=scale_b, precision=gpu_precision(named))
    assert on_gpu.accumulation == named
    expected = gpu_precision(named).product_coefficient(64)
    other = gpu_precision(DEFAULT if fast else FAST).product_coefficient(64)
    assert expected != other  # the two bounds differ, so picking one is visible


def test_the_check_of_a_case_passes_its_accumulation_through(monkeypatch):
    """check_case hands the case's accumulation to the precision model (a GPU would pick its bound by it)."""
    from accounting.health import results

    seen = []
    real = results.precision_of

    def spy(dtype, device="cpu", *, out_dtype=None, accumulation=None):
        seen.append(accumulation)
        return real(dtype, device, out_dtype=out_dtype, accumulation=accumulation)

    monkeypatch.setattr(results, "precision_of", spy)
    results.check_case(matmul_case("float8_e4m3fn", 16, 64, 32, fp8_fast_accum=False), repeat=False)
    assert seen == [DEFAULT]


def test_a_not_checked_result_check_is_not_a_failure_for_the_health_verdict():
    from accounting.health.states import HEALTHY, judge

    unchecked = ResultCheck("float8_e4m3fn", (8, 8192, 8), math.nan, 0, (0, 8), math.nan, math.nan,
                            not_checked_reason="no finite rounding bound at k=8192")
    verdict = judge("gpu0", results=[unchecked])
    assert verdict.state == HEALTHY
    assert any("no finite rounding bound at k=8192" in item for item in verdict.unchecked)


def test_the_reports_injected_fault_fails_an_fp8_product_judged_with_the_gpu_model(monkeypatch):
    """The report's self-test on fp8, with every check using the GPU's precision model (as on a GPU)."""
    from accounting.health import results
    from accounting.report.checks import ResultChecker, parse_injected_fault

    real = results.precision_of
    monkeypatch.setattr(results, "precision_of", lambda dtype, device="cpu", **kwargs: real(dtype, "cuda", **kwargs))
    case = matmul_case("float8_e4m3fn", 8, 8192, 64, seed=3)
    clean = ResultChecker()("float8_e4m3fn", case)
    assert clean.checked and clean.ok and clean.accumulation == FAST
    index = 5
    bit = _upward_exponent_flip(case.fn(), index)
    raised = ResultChecker(parse_injected_fault(f"float8_e4m3fn:flip:{index}:{bit}"))("float8_e4m3fn", case)
    assert raised.checked and not raised.ok and raised.excess > 1 and raised.row == 0
    assert raised.columns[0] <= index < raised.columns[1]
    acceptance = ResultChecker(parse_injected_fault("float8_e4m3fn:flip:0:14"))("float8_e4m3fn", case)
    assert not acceptance.ok and acceptance.repeat_identical is False
