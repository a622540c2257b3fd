"""FLOP counts checked against torch.utils.flop_counter.FlopCounterMode.

Shapes are counted on ``device="meta"`` tensors, so big shapes cost nothing.
"""

import math

import einops
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from accounting import AccountingError, AccountingTypeError, einsum_flops, linear_flops, matmul_flops, mfu
from tests.support.strategies import einsum_cases, shapes


def counted_flops(fn) -> int:
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


def meta(shape, requires_grad=False) -> torch.Tensor:
    return torch.empty(shape, device="meta", requires_grad=requires_grad)


@st.composite
def matmul_shapes(draw):
    """Operand shapes torch.matmul accepts: 1-D vectors, and batch dims that broadcast."""
    m, k, n = draw(st.integers(0, 64)), draw(st.integers(0, 64)), draw(st.integers(0, 64))
    batch = draw(shapes(max_dims=3, max_size=4))
    a_batch = tuple(1 if draw(st.booleans()) else size for size in batch[draw(st.integers(0, len(batch))):])
    b_batch = tuple(1 if draw(st.booleans()) else size for size in batch[draw(st.integers(0, len(batch))):])
    a = (k,) if draw(st.integers(0, 4)) == 0 else a_batch + (m, k)
    b = (k,) if draw(st.integers(0, 4)) == 0 else b_batch + (k, n)
    return a, b


@given(matmul_shapes())
@example(((1024, 256), (256, 64)))
@example(((8, 1, 32, 64), (4, 64, 16)))
@example(((64,), (2, 64, 16)))
def test_matmul_flops_equal_flop_counter(operands):
    a, b = operands
    # FlopCounterMode counts aten.mm/bmm but not aten.mv/aten.dot, which torch may use when an
    # operand is a vector; for those, count the same product with the vector as a 1-row
    # (left) or 1-column (right) matrix.
    a_as_matrix = (1,) + a if len(a) == 1 else a
    b_as_matrix = b + (1,) if len(b) == 1 else b
    expected = counted_flops(lambda: torch.matmul(meta(a_as_matrix), meta(b_as_matrix)))
    assert matmul_flops(a, b) == expected
    if len(a) > 1 and len(b) > 1:
        assert matmul_flops(a, b) == counted_flops(lambda: torch.matmul(meta(a), meta(b)))


def test_lecture_matmul_is_2_b_d_k():
    B, D, K = 1024, 256, 64
    x, w = meta((B, D)), meta((D, K))
    assert matmul_flops(x.shape, w.shape) == counted_flops(lambda: x @ w) == 2 * B * D * K


@given(einsum_cases(operands=2))
@example(("batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2", [(2, 3, 4), (2, 5, 4)]))
@example(("aa, bb -> aa bb", [(3,), (4,)]))  # outer product: torch uses mul, 0 matmul FLOPs
@example(("aa bb, bb cc -> cc", [(3, 4), (4, 5)]))  # aa summed away first
@example(("... aa, aa bb -> ... bb", [(2, 1, 3), (3, 4)]))
def test_einsum_flops_equal_flop_counter_for_two_operands(case):
    pattern, operand_shapes = case
    tensors = [meta(shape) for shape in operand_shapes]
    assert einsum_flops(pattern, *operand_shapes) == counted_flops(lambda: einops.einsum(*tensors, pattern))


@given(einsum_cases(operands=3))
@example(("aa bb, bb cc, cc dd -> aa dd", [(3, 4), (4, 5), (5, 6)]))
# The first two operands' batch dim broadcasts from 1: their product has none, and torch's first
# step costs 2·4·5·6, not 3× that; only the last step runs over the batch of 3.
@example(("... aa bb, ... bb cc, ... cc dd -> ... aa dd", [(1, 4, 5), (1, 5, 6), (3, 6, 7)]))
def test_einsum_flops_for_three_operands_follow_torch_left_to_right(case):
    pattern, operand_shapes = case
    tensors = [meta(shape) for shape in operand_shapes]
    assert einsum_flops(pattern, *operand_shapes) == counted_flops(lambda: einops.einsum(*tensors, pattern))


@given(einsum_cases(operands=1))
def test_einsum_flops_of_one_operand_is_zero_as_torch_counts(case):
    pattern, operand_shapes = case
    tensors = [meta(shape) for shape in operand_shapes]
    assert einsum_flops(pattern, *operand_shapes) == 0 == counted_flops(lambda: einops.einsum(*tensors, pattern))


# hidden (the contracted axis) of size 1 makes torch's einsum a plain broadcast product,
# which costs no matmul FLOPs (see the two-operand test), so it starts at 2 here.
@given(st.integers(1, 4), st.integers(1, 6), st.integers(1, 6), st.integers(2, 8))
def test_einops_einsum_is_the_classic_batched_matmul(batch, seq1, seq2, hidden):
    generator = torch.Generator().manual_seed(batch * 1000 + seq1 * 100 + seq2 * 10 + hidden)
    x = torch.randn(batch, seq1, hidden, generator=generator, dtype=torch.float64)
    y = torch.randn(batch, seq2, hidden, generator=generator, dtype=torch.float64)
    classic = x @ y.transpose(-2, -1)
    named = einops.einsum(x, y, "batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2")
    ellipsis = einops.einsum(x, y, "... seq1 hidden, ... seq2 hidden -> ... seq1 seq2")
    torch.testing.assert_close(named, classic)
    torch.testing.assert_close(ellipsis, classic)
    torch.testing.assert_close(torch.einsum("bih,bjh->bij", x, y), classic)
    assert einsum_flops("batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2", x.shape, y.shape) == matmul_flops(
        x.shape, y.transpose(-2, -1).shape
    )


@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 4), st.integers(2, 5))
def test_heads_split_and_merge_round_trip(batch, seq, heads, head_dim):
    x = torch.randn(batch, seq, heads * head_dim, dtype=torch.float64)
    split = einops.rearrange(x, "... (heads hidden1) -> ... heads hidden1", heads=heads)
    assert split.shape == (batch, seq, heads, head_dim)
    torch.testing.assert_close(einops.rearrange(split, "... heads hidden1 -> ... (heads hidden1)"), x)
    torch.testing.assert_close(einops.reduce(x, "... hidden -> ...", "mean"), x.mean(dim=-1))
    # The lecture's per-head projection: flops of the einsum equal flops of the matmul it is.
    w = torch.randn(head_dim, head_dim, dtype=torch.float64)
    projected = einops.einsum(split, w, "... hidden1, hidden1 hidden2 -> ... hidden2")
    torch.testing.assert_close(projected, split @ w)
    assert einsum_flops("... hidden1, hidden1 hidden2 -> ... hidden2", split.shape, w.shape) == matmul_flops(
        split.shape, w.shape
    )


@given(st.integers(1, 4096), st.integers(1, 2048), st.integers(1, 2048))
@example(1024, 256, 64)
def test_linear_model_forward_is_2_b_d_k(B, D, K):
    x, w = meta((B, D)), meta((D, K), requires_grad=True)
    assert linear_flops(B, D, K) == counted_flops(lambda: x @ w)


@given(st.integers(1, 2048), st.integers(1, 1024), st.integers(1, 1024))
@example(1024, 256, 64)
def test_two_layer_model_forward_and_backward_equal_flop_counter(B, D, K):
    """The lecture's x -> w1 -> h1 -> w2 -> h2; backward costs twice the forward."""
    x = meta((B, D), requires_grad=True)  # as the output of an earlier layer would be
    w1, w2 = meta((D, D), requires_grad=True), meta((D, K), requires_grad=True)
    counter = FlopCounterMode(display=False)
    with counter:
        h2 = (x @ w1) @ w2
    forward = counter.get_total_flops()
    with counter:
        h2.sum().backward()
    backward = counter.get_total_flops()
    assert forward == linear_flops(B, D, D) + linear_flops(B, D, K) == 2 * B * D * D + 2 * B * D * K
    assert backward == linear_flops(B, D, D, "backward") + linear_flops(B, D, K, "backward") == 2 * forward
    assert forward + backward == linear_flops(B, D, D, "step") + linear_flops(B, D, K, "step")


@given(st.floats(0, 1e20), st.floats(1e-9, 1e6), st.floats(1e6, 1e18))
def test_mfu_is_achieved_over_promised(flops, seconds, peak):
    utilisation = mfu(flops, seconds, peak)
    assert math.isclose(utilisation * peak * seconds, flops, rel_tol=1e-9, abs_tol=1e-300)


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    "call, error, message",
    [
        pytest.param(lambda: matmul_flops((2, 3), (4, 5)), AccountingError, r"^matmul of shapes \(2, 3\) and \(4, 5\): inner sizes 3 and 4 differ$", id="matmul-inner"),
        pytest.param(lambda: matmul_flops((2, 2, 3), (3, 3, 4)), AccountingError, r"^matmul of shapes \(2, 2, 3\) and \(3, 3, 4\): batch sizes 2 and 3 cannot broadcast$", id="matmul-batch"),
        pytest.param(lambda: matmul_flops((), (3,)), AccountingError, r"^matmul of shapes \(\) and \(3,\): both operands need at least one dimension$", id="matmul-scalar"),
        pytest.param(lambda: matmul_flops((2, -3), (3, 4)), AccountingError, r"a_shape \(2, -3\): entry 1 must be a non-negative integer, got -3", id="matmul-negative"),
        pytest.param(lambda: matmul_flops((2, 3.0), (3, 4)), AccountingTypeError, r"entry 1 must be a non-negative integer, got 3.0", id="matmul-float-size"),
        pytest.param(lambda: matmul_flops((2, True), (1, 4)), AccountingTypeError, r"got True", id="matmul-bool-size"),
        pytest.param(lambda: matmul_flops(5, (5,)), AccountingTypeError, r"a_shape must be a sequence of integers, got 5", id="matmul-int-shape"),
        pytest.param(lambda: einsum_flops("b i k, b k j -> b i j", (2, 3, 4), (2, 5, 6)), AccountingError, r'^einsum pattern "b i k, b k j -> b i j": axis k is 4 in operand 0 but 5 in operand 1$', id="einsum-axis-sizes"),
        pytest.param(lambda: einsum_flops("i k, k j -> i z", (2, 3), (3, 4)), AccountingError, r"output axes z appear in no operand", id="einsum-unknown-output"),
        pytest.param(lambda: einsum_flops("i k, k j -> i j", (2, 3, 1), (3, 4)), AccountingError, r"operand 0 has axes i k but shape \(2, 3, 1\)", id="einsum-rank"),
        pytest.param(lambda: einsum_flops("i k, k j -> i j", (2, 3)), AccountingError, r"has 2 operands but 1 shapes", id="einsum-count"),
        pytest.param(lambda: einsum_flops("i k k, k j -> i j", (2, 3, 3), (3, 4)), AccountingError, r"axis k appears twice in operand 0", id="einsum-repeat"),
        pytest.param(lambda: einsum_flops("(i k), k j -> i j", (6,), (3, 4)), AccountingError, r"^einsum pattern \"\(i k\), k j -> i j\": operand 0 has axis '\(i'; axes are names \(letters, digits, _\) or \.\.\., and einsum takes no \(grouped\) or numeric axes$", id="einsum-group"),
        pytest.param(lambda: einsum_flops("i k, k j", (2, 3), (3, 4)), AccountingError, r'needs exactly one "->"', id="einsum-arrow"),
        pytest.param(lambda: einsum_flops("... k, k j -> j", (2, 3), (3, 4)), AccountingError, r"use \.\.\. in the output", id="einsum-ellipsis"),
        pytest.param(lambda: linear_flops(-1, 2, 3), AccountingError, r"tokens must be a non-negative integer, got -1", id="linear-negative"),
        pytest.param(lambda: linear_flops(1.5, 2, 3), AccountingTypeError, r"tokens must be a non-negative integer, got 1.5", id="linear-float"),
        pytest.param(lambda: linear_flops(4, 2, 3, phase="adam"), AccountingError, r"phase must be one of 'forward', 'backward', 'step', got 'adam'", id="linear-phase"),
        pytest.param(lambda: mfu(1e12, 0, 1e12), AccountingError, r"seconds must be positive, got 0", id="mfu-zero-seconds"),
        pytest.param(lambda: mfu(1e12, NAN, 1e12), AccountingError, r"seconds must be finite, got nan", id="mfu-nan-seconds"),
        pytest.param(lambda: mfu(1e12, 1.0, -5.0), AccountingError, r"peak_flops_per_second must be positive, got -5.0", id="mfu-negative-peak"),
        pytest.param(lambda: mfu(1e12, 1.0, INF), AccountingError, r"peak_flops_per_second must be finite, got inf", id="mfu-inf-peak"),
        pytest.param(lambda: mfu(-1.0, 1.0, 1e12), AccountingError, r"flops must be non-negative, got -1.0", id="mfu-negative-flops"),
        pytest.param(lambda: mfu(INF, 1.0, 1e12), AccountingError, r"flops must be finite, got inf", id="mfu-inf-flops"),
        pytest.param(lambda: mfu("1e12", 1.0, 1e12), AccountingTypeError, r"flops must be a real number, got '1e12'", id="mfu-string"),
    ],
)
def test_bad_input_is_named_in_the_error(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize(
    "call, error, message",
    [
        pytest.param(lambda: einsum_flops(3, (2,)), AccountingTypeError, r"^einsum pattern must be a string, got 3$",
                     id="einsum-int-pattern"),
        pytest.param(lambda: einsum_flops(b"i -> i", (2,)), AccountingTypeError,
                     r"^einsum pattern must be a string, got b'i -> i'$", id="einsum-bytes-pattern"),
        pytest.param(lambda: einsum_flops("i -> i", "2"), AccountingTypeError,
                     r"^shape of operand 0 must be a sequence of integers, got '2'$", id="einsum-string-shape"),
        pytest.param(lambda: einsum_flops("i k, k j -> i j", (2, 3), (3, 4.0)), AccountingTypeError,
                     r"^shape of operand 1 \(3, 4.0\): entry 1 must be a non-negative integer, got 4.0$",
                     id="einsum-float-size"),
        pytest.param(lambda: matmul_flops((2, 3), None), AccountingTypeError,
                     r"^b_shape must be a sequence of integers, got None$", id="matmul-none-shape"),
        pytest.param(lambda: linear_flops(4, 2, 3, phase=None), AccountingError,
                     r"^phase must be one of 'forward', 'backward', 'step', got None$", id="linear-phase-none"),
        pytest.param(lambda: mfu(1e12, True, 1e12), AccountingTypeError, r"^seconds must be a real number, got True$",
                     id="mfu-bool-seconds"),
    ],
)
def test_wrong_types_raise_the_named_error_with_the_value(call, error, message):
    with pytest.raises(error, match=message):
        call()


# Patterns torch (through einops) refuses too; the message names the pattern and the exact offence.
@pytest.mark.parametrize("pattern, operand_shapes, message", [
    pytest.param("i k, k j -> i i", [(2, 3), (3, 4)],
                 r'^einsum pattern "i k, k j -> i i": axis i appears twice in the output$', id="output-repeat"),
    pytest.param("i k, k j -> i 2", [(2, 3), (3, 4)],
                 r"^einsum pattern \"i k, k j -> i 2\": the output has axis '2'; axes are names", id="output-number"),
    pytest.param("i k, k j -> y z", [(2, 3), (3, 4)],
                 r'^einsum pattern "i k, k j -> y z": output axes y, z appear in no operand$', id="two-unknown-outputs"),
    pytest.param("... i k, ... k j -> ... i j", [(2, 3, 4), (5, 4, 6)],
                 r'^einsum pattern "... i k, ... k j -> ... i j" at ...: batch sizes 2 and 5 cannot broadcast$',
                 id="ellipsis-batch"),
])
def test_an_einsum_torch_refuses_is_refused_naming_the_offence(pattern, operand_shapes, message):
    tensors = [meta(shape) for shape in operand_shapes]
    with pytest.raises(Exception):  # the independent truth: torch/einops cannot run it either
        einops.einsum(*tensors, pattern)
    with pytest.raises(AccountingError, match=message):
        einsum_flops(pattern, *operand_shapes)


@pytest.mark.parametrize("call, error, message", [
    pytest.param(lambda: linear_flops(4, -2, 3), AccountingError, r"^in_features must be a non-negative integer, got -2$",
                 id="in-features-negative"),
    pytest.param(lambda: linear_flops(4, 2, "3"), AccountingTypeError,
                 r"^out_features must be a non-negative integer, got '3'$", id="out-features-string"),
])
def test_every_linear_size_is_named_when_bad(call, error, message):
    with pytest.raises(error, match=message):
        call()
