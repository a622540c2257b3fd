"""A product with no bound to judge it by is "not checked" everywhere the report shows checks: never "wrong".

The checks are real :class:`~accounting.health.results.ResultCheck` s from real products (CPU), one of them
judged with a precision model whose bound overflows (``(1 + 10³)^257`` is past float64), as the old fp8 GPU
model's did from k = 8192.
"""

import math
from types import SimpleNamespace

import torch

from accounting.health.results import check_product, precision_of
from accounting.report.burn import BurnResult
from accounting.report.checks import ResultChecker, check_result
from accounting.report.render import _case_lines
from accounting.report.results import check_dict, checks_summary
from accounting.timing import matmul_case


def _checks():
    """(a passing check, a check with no finite bound, a wrong one), of one bfloat16 product."""
    case = matmul_case("bfloat16", 8, 256, 16, seed=2)
    a, b, _ = case.operands
    c = case.fn().clone()
    passing = check_product(a, b, c, repeat_identical=True)
    model = precision_of("bfloat16", out_dtype=torch.bfloat16)
    unbounded = check_product(a, b, c, precision=type(model)(0, 1e3, model.output_unit), repeat_identical=True)
    bad = c.clone()
    bad[3, 5] = math.inf
    wrong = check_product(a, b, bad, repeat_identical=True)
    return passing, unbounded, wrong


def test_the_json_of_a_not_checked_product_says_so_and_why():
    passing, unbounded, wrong = _checks()
    assert (passing.status, unbounded.status, wrong.status) == ("ok", "not checked", "wrong")
    record = check_dict(unbounded)
    assert record["ok"] is True and record["checked"] is False and record["reason"] == ""
    assert record["not_checked"].startswith("bfloat16 8x256x16 product not checked: no finite rounding bound at k=256")
    assert check_dict(passing)["checked"] is True and check_dict(passing)["not_checked"] is None


def test_a_dtype_summary_lists_not_checked_apart_from_failed_and_from_the_worst_excess():
    passing, unbounded, wrong = _checks()
    summary = checks_summary([SimpleNamespace(check=check) for check in (passing, unbounded)])
    assert summary["failed"] == [] and summary["checked"] == 1
    assert [item["not_checked"] for item in summary["not_checked"]] == [unbounded.note]
    assert summary["worst_excess"] == passing.excess  # NaN of the unchecked one is no "not finite" result
    with_wrong = checks_summary([SimpleNamespace(check=check) for check in (passing, unbounded, wrong)])
    assert len(with_wrong["failed"]) == 1 and with_wrong["worst_excess"] is None  # wrong: an infinite result


def test_the_text_report_shows_a_not_checked_product_and_calls_nothing_wrong():
    passing, unbounded, _ = _checks()
    rows = [{"m": 8, "k": 256, "n": 16, "size": 8, "flops_per_s": 1e9, "mfu": None, "arithmetic_intensity": 1.0,
             "bound": None, "phase": "sweep", "tags": [], "check": check_dict(check)} for check in (passing, unbounded)]
    text = "\n".join(_case_lines("bfloat16", {"ridge_flop_per_byte": None, "measurements": rows}))
    assert "wrong results" not in text
    assert "results not checked" in text and unbounded.note in text


def test_a_sustained_phase_keeps_not_checked_out_of_failed_and_worst_excess():
    passing, unbounded, _ = _checks()
    found = BurnResult("bfloat16", (8, 256, 16), checks=[unbounded, passing]).to_dict()
    assert found["failed"] == [] and found["not_checked"] == [unbounded.note]
    assert found["worst_excess"] == passing.excess


def test_the_report_checker_hands_an_fp8_case_its_accumulation():
    """The report's checks bound an fp8 product by the accumulation it ran with (recorded on the check)."""
    for fast, named in ((True, "fast"), (False, "default")):
        case = matmul_case("float8_e4m3fn", 16, 64, 32, fp8_fast_accum=fast)
        assert ResultChecker()("float8_e4m3fn", case).accumulation == named
        assert check_result(case, case.fn()).accumulation == named
    assert ResultChecker()("bfloat16", matmul_case("bfloat16", 16, 64, 32)).accumulation is None
