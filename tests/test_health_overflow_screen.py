"""A float16 product is judged wherever it cannot overflow, and says "not checked" where no block can be judged.

The recorded H200 report judged no float16 product from 2048³ up: every block's sum ``T = |A||B||x|`` passed
65504, so every block was set aside as one that "may overflow", and the check still read "ok" with an excess of
0. The screen now bounds each block's largest element (``|A|·max_j |B[:, j]|``), far below the block's sum.
Truth: the exact product in float64 and the recorded report.
"""

import json
import math
from pathlib import Path

import torch

from accounting.health.results import check_product, residuals
from accounting.timing import matmul_case

H200 = Path(__file__).parent / "data" / "hosts" / "nvidia-h200"
FLOAT16_MAX = torch.finfo(torch.float16).max


def test_the_recorded_float16_checks_judged_nothing_from_2048_up():
    """What the H200's report recorded: float16 checks 'ok' with an excess of exactly 0 (nothing judged)."""
    rows = json.loads((H200 / "report.json").read_text())["dtypes"]["float16"]["measurements"]
    unjudged = {row["k"] for row in rows if row["check"]["ok"] and row["check"]["excess"] == 0.0}
    assert {2048, 4096, 8192, 16384} <= unjudged


def test_a_float16_product_at_a_recorded_k_is_now_judged_and_a_corruption_caught():
    k = 8192
    case = matmul_case("float16", 4, k, 256, seed=1)
    a, b, _ = case.operands
    c = case.fn().clone()
    exact = a.double() @ b.double()
    assert float(exact.abs().max()) < FLOAT16_MAX / 2  # nothing near overflow in fact
    found = residuals(a, b, c)
    block_sums = (a.double().abs() @ b.double().abs()).view(4, 16, 16).sum(-1)
    assert bool((block_sums >= FLOAT16_MAX).all())  # the old screen (the block's sum) set every block aside
    assert not bool(found.may_overflow.any())
    check = check_product(a, b, c)
    assert check.checked and check.ok and 0 < check.excess <= 1
    bad = c.clone()
    bad[2, 100] += 4 * found.catch_factor * float(found.tolerance[2, found.vector_of(100)])
    wrong = check_product(a, b, bad)
    assert not wrong.ok and wrong.row == 2 and wrong.columns[0] <= 100 < wrong.columns[1]


def test_a_product_every_block_of_which_may_overflow_is_not_checked():
    generator = torch.Generator().manual_seed(0)
    a = (torch.randn(4, 256, generator=generator) * 60).half()
    b = (torch.randn(256, 32, generator=generator) * 60).half()
    c = a @ b
    check = check_product(a, b, c)
    assert not check.checked and check.ok and math.isnan(check.excess)
    assert "every block may overflow its float16 result" in check.note
