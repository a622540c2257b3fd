"""Tensor and storage bytes and floating-point layouts, checked against torch."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from jaxtyping import jaxtyped

from accounting import (
    AccountingError,
    AccountingTypeError,
    dtype_info,
    format_name,
    same_storage,
    storage_bytes,
    tensor_bytes,
)
from accounting.memory import storage_dtype
from tests.support.strategies import shapes, viewed_tensors

# beartype is a test extra: where it is missing (a GPU machine's own environment) the module is skipped with that
# reason, so `pytest -m gpu` still collects.
beartype = pytest.importorskip("beartype").beartype

# The public tensor functions, under jaxtyping + beartype runtime checking.
checked_tensor_bytes = jaxtyped(typechecker=beartype)(tensor_bytes)
checked_storage_bytes = jaxtyped(typechecker=beartype)(storage_bytes)
checked_same_storage = jaxtyped(typechecker=beartype)(same_storage)

TORCH_FLOATS = [torch.float64, torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2]


@pytest.mark.parametrize("dtype", TORCH_FLOATS, ids=str)
def test_dtype_info_agrees_with_finfo(dtype):
    info, truth = dtype_info(dtype), torch.finfo(dtype)
    assert info.bits == truth.bits == 8 * torch.empty((), dtype=dtype).element_size()
    assert info.max == truth.max
    assert info.min == truth.min
    assert info.smallest_normal == truth.smallest_normal == info.tiny
    assert info.eps == truth.eps
    assert info.mantissa_bits == -math.log2(truth.eps)
    # smallest normal is 2**(1 - bias) and bias = 2**(exponent_bits - 1) - 1
    assert info.exponent_bits == math.log2(1 - math.log2(truth.smallest_normal) + 1) + 1
    assert info.sign_bits + info.exponent_bits + info.mantissa_bits == truth.bits
    assert info.storage_bytes == dtype.itemsize
    assert info.name == str(dtype).removeprefix("torch.")  # the name torch itself prints


def test_tf32_has_float32_range_and_float16_precision():
    tf32, f32, f16 = dtype_info("tf32"), torch.finfo(torch.float32), torch.finfo(torch.float16)
    assert (tf32.sign_bits, tf32.exponent_bits, tf32.mantissa_bits) == (1, 8, 10)
    assert tf32.smallest_normal == f32.smallest_normal
    assert tf32.eps == f16.eps
    assert f16.max < tf32.max < f32.max
    assert tf32.storage_bytes == torch.float32.itemsize  # stored as float32


@pytest.mark.parametrize("dtype", TORCH_FLOATS, ids=str)
def test_every_name_of_a_format_resolves_to_it(dtype):
    name = str(dtype).removeprefix("torch.")
    assert format_name(dtype) == format_name(name) == format_name(f"torch.{name}") == format_name(name.upper())
    assert storage_dtype(name) == dtype


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2], ids=str)
def test_underflow_to_zero_is_where_dtype_info_puts_it(dtype):
    """float16 turns 1e-8 into 0; bfloat16, with float32's exponent, keeps it."""
    info = dtype_info(dtype)
    smallest_subnormal = info.smallest_normal * info.eps
    for value in [1e-8, 1e-3, smallest_subnormal, smallest_subnormal / 4]:
        assert (torch.tensor(value, dtype=dtype).item() == 0) == (value <= smallest_subnormal / 2)


def test_lecture_float16_underflow_and_bfloat16_range():
    assert torch.tensor(1e-8, dtype=torch.float16).item() == 0
    assert torch.tensor(1e-8, dtype=torch.bfloat16).item() != 0
    assert dtype_info(torch.float16).smallest_normal * dtype_info(torch.float16).eps > 1e-8
    assert dtype_info(torch.bfloat16).smallest_normal < 1e-8


@pytest.mark.parametrize("dtype", TORCH_FLOATS, ids=str)
def test_zeros_4_by_8_costs_32_elements_of_the_dtype(dtype):
    x = torch.zeros(4, 8, dtype=dtype)
    assert checked_tensor_bytes(x) == x.untyped_storage().nbytes() == 32 * dtype_info(dtype).storage_bytes
    if dtype in (torch.float16, torch.bfloat16):
        assert tensor_bytes(x) * 2 == tensor_bytes(torch.zeros(4, 8)) == 128


@given(shapes(), st.sampled_from(TORCH_FLOATS + [torch.int8, torch.int64, torch.bool, torch.complex64]))
def test_tensor_bytes_of_a_fresh_tensor_is_its_storage(shape, dtype):
    x = torch.empty(shape, dtype=dtype)
    assert checked_tensor_bytes(x) == x.untyped_storage().nbytes()


@given(viewed_tensors())
def test_a_view_costs_its_elements_but_keeps_its_whole_storage(x):
    base = x._base if x._base is not None else x
    assert checked_tensor_bytes(x) == x.numel() * x.element_size()
    assert checked_storage_bytes(x) == checked_storage_bytes(base) == base.untyped_storage().nbytes()
    assert checked_storage_bytes(x, base, x.clone()) == base.untyped_storage().nbytes() + tensor_bytes(x)


def test_a_slice_of_a_40000_byte_tensor_costs_40000_bytes():
    base = torch.zeros(10_000)
    piece = base[:10]
    assert tensor_bytes(piece) == 40
    assert storage_bytes(piece) == 40_000
    assert storage_bytes(piece.clone()) == 40


def test_storage_bytes_counts_distinct_storages_once_on_meta_too():
    a, b = torch.empty(100, device="meta"), torch.empty(100, device="meta")
    assert storage_bytes(a, a[3:], a.view(10, 10), b) == 2 * 400
    assert checked_same_storage(a, a[3:]) and not same_storage(a, b)


@pytest.mark.parametrize(
    "call, error, message",
    [
        pytest.param(lambda: tensor_bytes([1, 2]), AccountingTypeError, r"^x must be a torch.Tensor, got list: \[1, 2\]$", id="tensor-bytes-list"),
        pytest.param(lambda: storage_bytes(torch.zeros(1), 3), AccountingTypeError, r"tensor 1 must be a torch.Tensor, got int: 3", id="storage-bytes-int"),
        pytest.param(lambda: same_storage(torch.zeros(1), None), AccountingTypeError, r"b must be a torch.Tensor", id="same-storage-none"),
        pytest.param(lambda: same_storage(None, torch.zeros(1)), AccountingTypeError, r"^a must be a torch.Tensor, got NoneType: None$", id="same-storage-none-first"),
        pytest.param(lambda: dtype_info("float12"), AccountingError, r"unknown floating-point format 'float12'", id="unknown-format"),
        pytest.param(lambda: dtype_info(torch.int32), AccountingError, r"unknown floating-point format torch.int32", id="integer-dtype"),
        pytest.param(lambda: dtype_info(32), AccountingTypeError, r"expected a torch dtype or its name, got 32", id="number-as-dtype"),
    ],
)
def test_bad_input_is_named_in_the_error(call, error, message):
    with pytest.raises(error, match=message):
        call()


EIGHT_BIT_FLOATS = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]


@pytest.mark.parametrize("dtype", EIGHT_BIT_FLOATS, ids=str)
def test_eight_bit_layouts_match_every_value_the_dtype_holds(dtype):
    """All 256 bit patterns, decoded by torch: the exact truth for max, smallest normal, eps and infinities.

    torch.finfo agrees on all but one figure: its eps for float8_e5m2fnuz is 0.125, yet that
    format's next value after 1 is 1.25 (two mantissa bits), as the enumeration shows.
    """
    values = torch.arange(256, dtype=torch.uint8).view(dtype).float()
    finite = sorted(set(values[values.isfinite()].tolist()))
    info = dtype_info(dtype)
    assert info.max == max(finite) == torch.finfo(dtype).max and info.min == min(finite)
    assert info.eps == finite[finite.index(1.0) + 1] - 1.0
    assert info.has_infinity == bool(values.isinf().any())
    subnormal_step = info.smallest_normal * info.eps  # the spacing below the smallest normal
    assert min(value for value in finite if value > 0) == subnormal_step
    assert info.smallest_normal == torch.finfo(dtype).smallest_normal
    assert info.storage_bytes == 1 and format_name(dtype) == str(dtype).removeprefix("torch.")


def test_an_unknown_format_lists_names_that_each_resolve():
    """The "known:" list in the error is one a user can copy from: every entry is accepted, torch's floats among them."""
    with pytest.raises(AccountingError, match=r"^unknown floating-point format 'float12'; known: ") as caught:
        format_name("float12")
    known = str(caught.value).split("; known: ", 1)[1].split(", ")
    assert [format_name(name) for name in known] == known
    assert {str(dtype).removeprefix("torch.") for dtype in TORCH_FLOATS} <= set(known)
