"""Strides, offsets, contiguity and views, checked against what torch does."""

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from accounting import (
    AccountingError,
    AccountingTypeError,
    contiguous_strides,
    element_offset,
    is_contiguous,
    same_storage,
    view_strides,
)
from accounting.strides import infer_shape
from tests.support.strategies import factorizations, make_strided, shapes, strided_layouts, viewed_tensors


@given(shapes())
@example((2, 0, 3))
@example(())
def test_contiguous_strides_match_a_fresh_tensor(shape):
    assert contiguous_strides(shape) == torch.empty(shape).stride()


@given(strided_layouts(), st.data())
def test_element_offset_is_where_torch_finds_the_element(layout, data):
    shape, strides, offset = layout
    if 0 in shape:
        return
    x = make_strided(shape, strides, offset)
    index = tuple(data.draw(st.integers(0, size - 1)) for size in shape)
    assert element_offset(index, strides, offset) == x[index].storage_offset()


def test_element_offset_of_the_lecture_example():
    x = torch.randint(1, 1000, (10, 10, 20))
    flat = x.flatten()
    position = element_offset((2, 3, 4), x.stride())
    assert flat[position] == x[2, 3, 4]


@given(strided_layouts())
@example(((3, 1, 4), (4, 99, 1), 0))  # size-1 dim with any stride
@example(((3, 4), (0, 1), 0))  # expanded dim
@example(((0, 4), (7, 3), 0))  # no elements
@example(((1, 1), (0, 0), 2))
def test_is_contiguous_agrees_with_torch_for_any_layout(layout):
    shape, strides, offset = layout
    assert is_contiguous(shape, strides) == make_strided(shape, strides, offset).is_contiguous()


@given(viewed_tensors())
def test_is_contiguous_agrees_with_torch_after_view_ops(x):
    assert is_contiguous(x.shape, x.stride()) == x.is_contiguous()


@given(viewed_tensors())
def test_contiguous_copies_exactly_when_not_contiguous(x):
    y = x.contiguous()
    copied = not same_storage(x, y)
    assert copied == (not is_contiguous(x.shape, x.stride()))
    if copied:
        assert y.stride() == contiguous_strides(x.shape)
    assert torch.equal(y, x)


@given(viewed_tensors())
def test_views_share_storage_with_their_base(x):
    base = x._base if x._base is not None else x
    assert same_storage(x, base)
    assert (x.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()) == same_storage(x, base)
    assert not same_storage(x.clone(), base) or base.numel() == 0


def _torch_view_strides(x: torch.Tensor, new_shape):
    try:
        return x.view(new_shape).stride()
    except RuntimeError:
        return None


@given(strided_layouts(max_dims=4), st.data())
@example(((2, 3, 4), (12, 1, 3), 0), None)
def test_view_strides_match_torch_view_on_any_layout(layout, data):
    shape, strides, offset = layout
    x = make_strided(shape, strides, offset)
    new_shape = data.draw(factorizations(x.numel())) if data is not None else (6, 4)
    if x.numel() == 0 and -1 in new_shape:
        return  # -1 is ambiguous with no elements; tested as an error below
    assert view_strides(shape, strides, new_shape) == _torch_view_strides(x, new_shape)


@given(viewed_tensors(), st.data())
def test_view_strides_match_torch_view_after_view_ops(x, data):
    new_shape = data.draw(factorizations(x.numel()))
    if x.numel() == 0 and -1 in new_shape:
        return
    assert view_strides(x.shape, x.stride(), new_shape) == _torch_view_strides(x, new_shape)


@given(viewed_tensors(), st.data())
def test_a_successful_view_shares_storage_and_a_refused_one_needs_reshape_to_copy(x, data):
    new_shape = data.draw(factorizations(x.numel()))
    if x.numel() == 0:
        return
    predicted = view_strides(x.shape, x.stride(), new_shape)
    reshaped = x.reshape(new_shape)
    assert same_storage(reshaped, x) == (predicted is not None)


def test_view_of_a_transposed_matrix_is_refused_as_the_lecture_says():
    x = torch.tensor([[1.0, 2, 3], [4, 5, 6]]).transpose(1, 0)
    assert view_strides(x.shape, x.stride(), (2, 3)) is None
    with pytest.raises(RuntimeError):
        x.view(2, 3)


@pytest.mark.parametrize(
    "shape, strides, new_shape, message",
    [
        pytest.param((2, 3), (3, 1), (4, 2), r"new_shape \(4, 2\) is invalid for 6 elements", id="wrong-count"),
        pytest.param((2, 3), (3, 1), (-1, -1), r"only one dimension can be -1", id="two-holes"),
        pytest.param((2, 3), (3, 1), (-1, 4), r"new_shape \(-1, 4\) is invalid for 6 elements", id="hole-no-fit"),
        pytest.param((0, 3), (3, 1), (-1, 0), r"-1 is ambiguous", id="hole-in-empty"),
        pytest.param((2, 3), (3, 1), (-2, 3), r"entry 0 must be a non-negative integer, got -2", id="negative-size"),
        pytest.param((2, 3), (1,), (6,), r"shape \(2, 3\) has 2 dims but strides \(1,\) has 1", id="rank-mismatch"),
    ],
)
def test_impossible_views_are_errors_not_none(shape, strides, new_shape, message):
    with pytest.raises(AccountingError, match=message):
        view_strides(shape, strides, new_shape)


@pytest.mark.parametrize(
    "call, error, message",
    [
        pytest.param(lambda: contiguous_strides((2, -1)), AccountingError, r"shape \(2, -1\): entry 1 must be a non-negative integer, got -1", id="negative-size"),
        pytest.param(lambda: contiguous_strides((2, 1.5)), AccountingTypeError, r"entry 1 must be a non-negative integer, got 1.5", id="float-size"),
        pytest.param(lambda: contiguous_strides((True, 2)), AccountingTypeError, r"entry 0 must be a non-negative integer, got True", id="bool-size"),
        pytest.param(lambda: contiguous_strides("23"), AccountingTypeError, r"shape must be a sequence of integers, got '23'", id="string-shape"),
        pytest.param(lambda: element_offset((1, 2), (8, 1, 1)), AccountingError, r"index \(1, 2\) has 2 dims but strides \(8, 1, 1\) has 3", id="offset-rank"),
        pytest.param(lambda: element_offset((1, 2), (8, 1), storage_offset=-3), AccountingError, r"storage_offset must be a non-negative integer, got -3", id="offset-negative"),
        pytest.param(lambda: is_contiguous((2, 3), (3,)), AccountingError, r"shape \(2, 3\) has 2 dims but strides \(3,\) has 1", id="contiguous-rank"),
        pytest.param(lambda: is_contiguous((2, 3), (3, -1)), AccountingError, r"strides \(3, -1\): entry 1 must be a non-negative integer, got -1", id="negative-stride"),
    ],
)
def test_bad_layouts_are_named_in_the_error(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize(
    "call, error, message",
    [
        pytest.param(lambda: infer_shape(6, 6), AccountingTypeError, r"^new_shape must be a sequence of integers, got 6$",
                     id="infer-int-shape"),
        pytest.param(lambda: infer_shape("23", 6), AccountingTypeError, r"^new_shape must be a sequence of integers, got '23'$",
                     id="infer-string-shape"),
        pytest.param(lambda: infer_shape((2, 3), 6.0), AccountingTypeError, r"^numel must be a non-negative integer, got 6.0$",
                     id="infer-float-numel"),
        pytest.param(lambda: infer_shape((-1, 3), "6"), AccountingTypeError, r"^numel must be a non-negative integer, got '6'$",
                     id="infer-string-numel"),
        pytest.param(lambda: infer_shape((2, None), 6), AccountingTypeError,
                     r"^new_shape \(2, None\): entry 1 must be a non-negative integer, got None$", id="infer-none-size"),
        pytest.param(lambda: view_strides((2, 3), (3, 1), b"6"), AccountingTypeError,
                     r"^new_shape must be a sequence of integers, got b'6'$", id="view-bytes-shape"),
        pytest.param(lambda: view_strides((2, 3), (3, 1.0), (6,)), AccountingTypeError,
                     r"^strides \(3, 1.0\): entry 1 must be a non-negative integer, got 1.0$", id="view-float-stride"),
        pytest.param(lambda: element_offset((1.5,), (1,)), AccountingTypeError,
                     r"^index \(1.5,\): entry 0 must be a non-negative integer, got 1.5$", id="offset-float-index"),
        pytest.param(lambda: element_offset((1,), (1,), storage_offset=1.0), AccountingTypeError,
                     r"^storage_offset must be a non-negative integer, got 1.0$", id="offset-float-storage-offset"),
    ],
)
def test_wrong_types_raise_the_named_error_with_the_value(call, error, message):
    with pytest.raises(error, match=message):
        call()


# Mutation testing (README, "Development") found no test naming a bad shape or stride in these two.
@pytest.mark.parametrize(
    "call, error, message",
    [
        pytest.param(lambda: is_contiguous((2, -3), (3, 1)), AccountingError, r"^shape \(2, -3\): entry 1 must be a non-negative integer, got -3$",
                     id="contiguous-negative-size"),
        pytest.param(lambda: view_strides((2.0, 3), (3, 1), (6,)), AccountingTypeError, r"^shape \(2.0, 3\): entry 0 must be a non-negative integer, got 2.0$",
                     id="view-float-size"),
        pytest.param(lambda: element_offset((1, 2), (8, -1)), AccountingError, r"^strides \(8, -1\): entry 1 must be a non-negative integer, got -1$",
                     id="offset-negative-stride"),
    ],
)
def test_a_bad_size_or_stride_is_named_as_a_shape_or_a_stride(call, error, message):
    with pytest.raises(error, match=message):
        call()
