"""Strides, storage offsets, contiguity and views, as pure functions of shapes and strides.

A tensor is a window onto a flat storage: element ``index`` lives at
``storage_offset + sum(index[d] * strides[d])``. These functions answer what torch
would do for a layout without making a tensor, so they can explain it.

>>> from accounting import contiguous_strides, element_offset, is_contiguous, view_strides
>>> contiguous_strides((4, 8, 16))
(128, 16, 1)
>>> element_offset((1, 2, 3), (128, 16, 1))
163
>>> is_contiguous((8, 4), (1, 8))          # a transposed (4, 8) tensor
False
>>> view_strides((4, 8), (8, 1), (2, -1))  # x.view(2, -1)
(16, 1)
>>> print(view_strides((8, 4), (1, 8), (32,)))  # x.T.view(32) fails in torch
None
"""

import math
from collections.abc import Iterable

from accounting._checks import check_shape, check_size
from accounting.errors import AccountingError, AccountingTypeError


def _check_layout(shape, strides) -> tuple[tuple[int, ...], tuple[int, ...]]:
    shape = check_shape(shape, "shape")
    strides = check_shape(strides, "strides")
    if len(shape) != len(strides):
        raise AccountingError(
            f"shape {shape} has {len(shape)} dims but strides {strides} has {len(strides)}"
        )
    return shape, strides


def contiguous_strides(shape) -> tuple[int, ...]:
    """Row-major strides torch gives a new tensor of ``shape`` (size-0 dims count as 1).

    >>> contiguous_strides((2, 0, 3))
    (3, 3, 1)
    """
    shape = check_shape(shape)
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def element_offset(index, strides, storage_offset: int = 0) -> int:
    """Position in storage (in elements) of element ``index`` of a tensor with ``strides``.

    >>> element_offset((2, 1), (1, 8), storage_offset=3)  # x.T[2, 1] for x of shape (4, 8), offset 3
    13
    """
    index = check_shape(index, "index")
    strides = check_shape(strides, "strides")
    storage_offset = check_size(storage_offset, "storage_offset")
    if len(index) != len(strides):
        raise AccountingError(
            f"index {index} has {len(index)} dims but strides {strides} has {len(strides)}"
        )
    return storage_offset + sum(i * s for i, s in zip(index, strides))


def is_contiguous(shape, strides) -> bool:
    """Whether a tensor with this layout is contiguous, by torch's rule.

    Dims of size 1 may have any stride; a tensor with no elements is contiguous.

    >>> is_contiguous((3, 1, 4), (4, 99, 1)), is_contiguous((3, 4), (0, 1))
    (True, False)
    """
    shape, strides = _check_layout(shape, strides)
    if math.prod(shape) == 0:
        return True
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def infer_shape(new_shape, numel: int) -> tuple[int, ...]:
    """Resolve one ``-1`` in ``new_shape`` so it holds ``numel`` elements; raise if impossible.

    >>> infer_shape((-1, 4), 12)
    (3, 4)
    """
    if isinstance(new_shape, (str, bytes)) or not isinstance(new_shape, Iterable):
        raise AccountingTypeError(f"new_shape must be a sequence of integers, got {new_shape!r}")
    numel = check_size(numel, "numel")
    new_shape = tuple(new_shape)
    holes = [d for d, size in enumerate(new_shape) if isinstance(size, int) and not isinstance(size, bool) and size == -1]
    if len(holes) > 1:
        raise AccountingError(f"new_shape {new_shape}: only one dimension can be -1")
    known = check_shape([size for d, size in enumerate(new_shape) if d not in holes], "new_shape")
    known_numel = math.prod(known)
    if holes:
        if known_numel == 0:
            raise AccountingError(
                f"new_shape {new_shape}: -1 is ambiguous when the other sizes multiply to 0"
            )
        if numel % known_numel:
            raise AccountingError(f"new_shape {new_shape} is invalid for {numel} elements")
        resolved = list(new_shape)
        resolved[holes[0]] = numel // known_numel
        return tuple(resolved)
    if known_numel != numel:
        raise AccountingError(f"new_shape {new_shape} is invalid for {numel} elements")
    return known


def view_strides(shape, strides, new_shape) -> tuple[int, ...] | None:
    """Strides of ``x.view(new_shape)`` for ``x`` with this layout, or ``None`` where torch refuses the view.

    ``new_shape`` may hold one ``-1``. A ``new_shape`` with the wrong element count is an error,
    not ``None``: it is not a view any layout could make.

    A view is possible when each run of old dims that is laid out contiguously (a "chunk")
    is split or merged only within itself; this follows ATen's ``computeStride``.

    >>> view_strides((2, 3, 4), (12, 4, 1), (6, 4))
    (4, 1)
    >>> print(view_strides((2, 3, 4), (12, 1, 3), (6, 4)))  # dims 1 and 2 swapped
    None
    """
    shape, strides = _check_layout(shape, strides)
    numel = math.prod(shape)
    new_shape = infer_shape(new_shape, numel)
    if not shape:
        return (1,) * len(new_shape)
    if numel == 0:
        if shape == new_shape:
            return strides
        return contiguous_strides(new_shape)

    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = strides[-1]
    tensor_numel = 1
    view_numel = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[tensor_d]
        chunk_ends = tensor_d == 0 or (
            shape[tensor_d - 1] != 1 and strides[tensor_d - 1] != tensor_numel * chunk_base_stride
        )
        if not chunk_ends:
            continue
        while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
            new_strides[view_d] = view_numel * chunk_base_stride
            view_numel *= new_shape[view_d]
            view_d -= 1
        if view_numel != tensor_numel:
            return None
        if tensor_d > 0:
            chunk_base_stride = strides[tensor_d - 1]
            tensor_numel = 1
            view_numel = 1
    if view_d != -1:
        return None
    return tuple(new_strides)
