"""The result check never fires on a correct product and always catches a corruption above its guarantee.

Truth is independent of the check: the exact product of the operands (float64 holds every product
of two bf16/fp16/fp8 values, and sums of up to a few thousand of them, to far below the check's
tolerance), and corruptions made and measured by the test itself. Every dtype the CPU computes:
float64, float32, bfloat16, float16, and fp8 e4m3/e5m2 through ``torch._scaled_mm`` (torch runs it
on the CPU, so it is checked here for real), over Hypothesis-drawn shapes with ``k`` up to 3000.
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from accounting.errors import AccountingError
from accounting.health.results import (
    Precision,
    check_case,
    check_product,
    precision_of,
    residuals,
    same_bits,
    unit_roundoff,
)
from accounting.timing import matmul_case

DTYPES = ["float64", "float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"]
FP8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
PLAIN = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@st.composite
def products(draw):
    """A product as a benchmark computes it: operands, scales (fp8), the result, and its dtype name."""
    dtype = draw(st.sampled_from(DTYPES))
    fp8 = dtype in FP8
    step = 16 if fp8 else 1
    m = draw(st.integers(1, 48))
    k = draw(st.integers(1, 3000 // step)) * step
    n = draw(st.integers(1, 48 // step)) * step if fp8 else draw(st.integers(1, 48))
    data = draw(st.sampled_from(["normal", "positive", "wide"]))
    seed = draw(st.integers(0, 2**16))
    generator = torch.Generator().manual_seed(seed)

    def operand(rows, cols):
        if data == "positive":  # no cancellation: rounding errors pile up in one direction
            x = torch.rand(rows, cols, generator=generator, dtype=torch.float64)
        else:
            x = torch.randn(rows, cols, generator=generator, dtype=torch.float64)
        if data == "wide":  # rows of very different size
            x = x * torch.exp2(torch.randint(-6, 7, (rows, 1), generator=generator)).to(torch.float64)
        return x

    if fp8:
        a = operand(m, k).to(FP8[dtype])
        b = operand(n, k).to(torch.float8_e4m3fn).t()  # column-major mat2, e4m3 partner as the benchmark does
        if draw(st.booleans()):  # one scale per tensor
            scale_a = torch.tensor(draw(st.sampled_from([1.0, 0.5, 3.0])), dtype=torch.float32)
            scale_b = torch.tensor(draw(st.sampled_from([1.0, 0.25, 2.0])), dtype=torch.float32)
        else:  # one per row of a and per column of b
            scale_a = torch.rand(m, 1, generator=generator, dtype=torch.float32) + 0.5
            scale_b = torch.rand(1, n, generator=generator, dtype=torch.float32) + 0.5
        c = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
        return dtype, a, b, c, scale_a, scale_b
    a, b = operand(m, k).to(PLAIN[dtype]), operand(k, n).to(PLAIN[dtype])
    return dtype, a, b, a @ b, None, None


def exact(a, b, scale_a=None, scale_b=None):
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    if scale_a is not None:
        a64, b64 = a64 * scale_a.to(torch.float64), b64 * scale_b.to(torch.float64)
    return a64 @ b64, a64.abs() @ b64.abs()


@given(products())
def test_a_correct_product_never_fails_the_check(product):
    dtype, a, b, c, scale_a, scale_b = product
    check = check_product(a, b, c, scale_a=scale_a, scale_b=scale_b, dtype=dtype)
    assert check.ok, check.reason
    assert 0 <= check.excess <= 1


@given(products())
def test_the_elementwise_model_bounds_every_rounding_error(product):
    """The bound behind the tolerance, against the exact product (the float64 product is left out: no exact truth)."""
    dtype, a, b, c, scale_a, scale_b = product
    if dtype == "float64":
        return
    truth, size = exact(a, b, scale_a, scale_b)
    precision = precision_of(dtype, out_dtype=c.dtype)
    k = a.shape[1]
    bound = (precision.product_coefficient(k) * size + precision.output_coefficient * c.to(torch.float64).abs()
             + precision.underflow(k))
    error = (c.to(torch.float64) - truth).abs()
    assert bool((error <= bound).all()), float((error - bound).max())


@given(products(), st.data())
def test_a_corruption_above_the_guarantee_is_always_caught(product, data):
    dtype, a, b, c, scale_a, scale_b = product
    m, n = c.shape
    i, j = data.draw(st.integers(0, m - 1)), data.draw(st.integers(0, n - 1))
    clean = residuals(a, b, c, scale_a=scale_a, scale_b=scale_b, dtype=dtype)
    tolerance = float(clean.tolerance[i, clean.vector_of(j)])
    if bool(clean.may_overflow[i, clean.vector_of(j)]):  # may overflow in a correct product: no guarantee there
        return
    factor = data.draw(st.floats(1.01, 1000))
    sign = data.draw(st.sampled_from([-1.0, 1.0]))
    wanted = sign * factor * clean.catch_factor * max(tolerance, 1e-300)
    bad = c.clone()
    bad[i, j] = (bad[i, j].to(torch.float64) + wanted).to(c.dtype)
    change = abs(float(bad[i, j].to(torch.float64)) - float(c[i, j].to(torch.float64)))
    check = check_product(a, b, bad, scale_a=scale_a, scale_b=scale_b, dtype=dtype)
    if change > clean.catch_factor * tolerance or not math.isfinite(change):  # after rounding to c's dtype
        assert not check.ok
        assert check.row == i and check.columns[0] <= j < check.columns[1]


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_flipped_exponent_bit_is_caught_at_every_cpu_dtype(dtype):
    case = matmul_case(dtype, 32, 256, 48, seed=1)
    c = case.fn().clone()
    scales = case.operands[2:4] if dtype in FP8 else (None, None)
    clean = residuals(case.operands[0], case.operands[1], c, scale_a=scales[0], scale_b=scales[1], dtype=dtype)
    bits = c.element_size() * 8
    top_exponent = {8: 6, 16: 14, 32: 30, 64: 62}[bits]
    bad = c.clone()
    bad.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[c.element_size()]).view(-1)[7] ^= 1 << top_exponent
    change = abs(float(bad.view(-1)[7].double()) - float(c.view(-1)[7].double()))
    tolerance = float(clean.tolerance[0, clean.vector_of(7)])
    assert change > clean.catch_factor * tolerance or not math.isfinite(change)  # the flip matters
    check = check_product(case.operands[0], case.operands[1], bad, scale_a=scales[0], scale_b=scales[1], dtype=dtype)
    assert not check.ok and check.row == 0


def test_the_output_rounding_term_is_needed():
    """A model that forgets bf16's output rounding fires on a correct bf16 product: the term is not decoration."""
    case = matmul_case("bfloat16", 64, 64, 64)
    c = case.fn()
    assert check_product(case.operands[0], case.operands[1], c).ok
    no_output = Precision(0, unit_roundoff(torch.float32), 0)
    assert not check_product(case.operands[0], case.operands[1], c, precision=no_output).ok


def test_float32_checking_never_fires_on_a_correct_low_precision_product_but_refuses_float64():
    case = matmul_case("bfloat16", 40, 1000, 24)
    assert check_product(case.operands[0], case.operands[1], case.fn(), check_dtype=torch.float32).ok
    a = torch.randn(4, 4, dtype=torch.float64)
    with pytest.raises(AccountingError, match="float64 product"):
        check_product(a, a, a @ a, check_dtype=torch.float32)


def test_a_gpu_model_is_no_tighter_than_the_cpu_one():
    """fp8 on a GPU accumulates in far fewer bits; cuBLAS may reduce bf16 partials in bf16 unless told not to."""
    k = 4096
    for dtype in ("float8_e4m3fn", "bfloat16"):
        cpu = precision_of(dtype, "cpu", out_dtype=torch.bfloat16).product_coefficient(k)
        gpu = precision_of(dtype, "cuda", out_dtype=torch.bfloat16).product_coefficient(k)
        assert gpu > cpu
    before = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False  # a torch flag: settable without a GPU
    try:
        gpu = precision_of("bfloat16", "cuda").product_coefficient(k)
    finally:
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = before
    assert gpu == precision_of("bfloat16", "cpu").product_coefficient(k)


def test_tf32_inputs_widen_the_tolerance():
    assert precision_of("tf32", "cuda").product_coefficient(64) > precision_of("float32", "cuda").product_coefficient(64)


def test_non_finite_results_fail():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    c = a @ b
    c[2, 3] = float("nan")
    check = check_product(a, b, c)
    assert not check.ok and math.isinf(check.excess) and "not finite" in check.reason


def _float16_with_partials_in_float16(a, b, chunk):
    """``a @ b`` as a library that adds float32 partial sums of ``chunk`` products in float16 computes it."""
    total = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float16)
    for start in range(0, a.shape[1], chunk):
        part = a[:, start:start + chunk].float() @ b[start:start + chunk].float()
        total = (total.float() + part).half()
    return total


def test_a_float16_product_beyond_the_types_range_is_not_judged_but_one_below_it_is():
    """Partial sums stored in float16 overflow where the exact result is finite (a CPU's float16 path did): no bound
    holds where the row's |A||B| reaches float16's largest value, so such a correct product passes; the same
    infinity in a product whose |A||B| stays below the limit is a fault."""
    k = 1374
    a = torch.full((1, k), 150.0, dtype=torch.float16)
    b = torch.cat([torch.full((k // 2, 1), 150.0), torch.full((k - k // 2, 1), -150.0)]).half()
    exact = float(a.double() @ b.double())
    c = _float16_with_partials_in_float16(a, b, chunk=64)
    assert math.isfinite(exact) and abs(exact) < torch.finfo(torch.float16).max and not torch.isfinite(c).all()
    assert check_product(a, b, c).ok
    small_a, small_b = a / 64, b / 64  # |A||B| = 1374 * 150**2 / 64**2, far below 65504
    bad = (small_a.double() @ small_b.double()).half()  # the exact product, rounded once
    assert check_product(small_a, small_b, bad).ok
    bad[0, 0] = float("inf")
    assert not check_product(small_a, small_b, bad).ok


def test_the_repeat_check_compares_bits():
    x = torch.tensor([0.0, 1.0])
    assert same_bits(x, x.clone())
    assert not same_bits(x, torch.tensor([-0.0, 1.0]))  # equal as numbers, not as bits
    assert not same_bits(x, x.to(torch.float64))


def test_check_case_runs_the_benchmarks_own_case_at_every_cpu_dtype():
    for dtype in DTYPES:
        check = check_case(matmul_case(dtype, 48, 96, 32))
        assert check.ok and check.repeat_identical is True and check.shape == (48, 96, 32), check.reason


@pytest.mark.parametrize("call, error, match", [
    (lambda: check_product(torch.ones(2, 3), torch.ones(4, 2), torch.ones(2, 2)), AccountingError, r"\(2, 3\)"),
    (lambda: check_product([[1.0]], torch.ones(1, 1), torch.ones(1, 1)), TypeError, "list"),
    (lambda: check_product(torch.ones(2, 2, 2), torch.ones(2, 2), torch.ones(2, 2)), AccountingError, r"\(2, 2, 2\)"),
    (lambda: check_product(torch.ones(2, 2), torch.ones(2, 2), torch.ones(2, 2), vectors=0), AccountingError, "vectors"),
    (lambda: check_product(torch.ones(2, 2), torch.ones(2, 2), torch.ones(2, 2), scale_a=torch.ones(3)),
     AccountingError, r"\(3,\)"),
    (lambda: check_case(object()), TypeError, "object"),
])
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call()
