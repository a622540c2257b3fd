"""Hypothesis strategies for shapes, strided layouts and einsum patterns.

Small composites, each capped in element count, later ones built from earlier ones.
"""

import math
import string

import torch
from hypothesis import strategies as st

MAX_ELEMENTS = 4096


def sizes(min_size: int = 0, max_size: int = 5):
    return st.integers(min_size, max_size)


@st.composite
def shapes(draw, min_dims: int = 0, max_dims: int = 4, min_size: int = 0, max_size: int = 5):
    """A shape whose element count stays under MAX_ELEMENTS."""
    shape = draw(st.lists(sizes(min_size, max_size), min_size=min_dims, max_size=max_dims))
    while math.prod(shape) > MAX_ELEMENTS:
        shape[shape.index(max(shape))] //= 2
    return tuple(shape)


@st.composite
def strided_layouts(draw, max_dims: int = 4):
    """(shape, strides, storage_offset) of any layout ``as_strided`` can make: gaps,
    overlaps, size-0, size-1 and stride-0 (expanded) dims included."""
    shape = draw(shapes(max_dims=max_dims))
    strides = tuple(draw(st.lists(st.integers(0, 40), min_size=len(shape), max_size=len(shape))))
    offset = draw(st.integers(0, 7))
    return shape, strides, offset


def make_strided(shape, strides, offset, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """A tensor with exactly this layout over a storage just big enough for it."""
    span = 1 + sum((size - 1) * stride for size, stride in zip(shape, strides)) if math.prod(shape) else 0
    storage = torch.empty(offset + span, dtype=dtype, device=device)
    return storage.as_strided(shape, strides, offset)


@st.composite
def viewed_tensors(draw):
    """A tensor reached from a fresh one by a chain of torch view ops: permute, stepped
    slices, expand, transpose, unsqueeze. Its layout is whatever torch makes of them."""
    shape = draw(shapes(max_dims=3, min_size=1))
    x = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["permute", "slice", "expand", "transpose", "unsqueeze"]))
        if op == "permute" and x.dim() > 1:
            x = x.permute(draw(st.permutations(range(x.dim()))))
        elif op == "slice" and x.dim() > 0:
            dim = draw(st.integers(0, x.dim() - 1))
            start = draw(st.integers(0, x.shape[dim]))
            step = draw(st.integers(1, 3))
            x = x[(slice(None),) * dim + (slice(start, None, step),)]
        elif op == "expand" and x.dim() < 4:
            x = x.unsqueeze(0).expand(draw(st.integers(1, 3)), *x.shape)
        elif op == "transpose" and x.dim() > 1:
            a, b = draw(st.permutations(range(x.dim())))[:2]
            x = x.transpose(a, b)
        elif op == "unsqueeze":
            x = x.unsqueeze(draw(st.integers(0, x.dim())))
    return x


@st.composite
def factorizations(draw, numel: int, max_dims: int = 4):
    """A shape with ``numel`` elements, sometimes with size-1 dims and one -1."""
    if numel == 0:
        shape = list(draw(shapes(min_dims=1, max_dims=max_dims)))
        shape[draw(st.integers(0, len(shape) - 1))] = 0
        return tuple(shape)
    shape = []
    rest = numel
    for _ in range(draw(st.integers(0, max_dims - 1))):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        size = draw(st.sampled_from(divisors))
        shape.append(size)
        rest //= size
    shape.append(rest)
    shape = draw(st.permutations(shape))
    if draw(st.booleans()):
        shape = list(shape)
        shape[draw(st.integers(0, len(shape) - 1))] = -1
    return tuple(shape)


AXIS_NAMES = [f"{letter}{letter}" for letter in string.ascii_lowercase[:6]]


@st.composite
def einsum_cases(draw, operands: int = 2, allow_ellipsis: bool = True):
    """(pattern, shapes) for einops.einsum: each operand uses some of a pool of named
    axes in any order, the output a subset of their union, optionally with ``...``."""
    axis_sizes = {name: draw(st.integers(0, 5)) for name in AXIS_NAMES[: draw(st.integers(1, 6))]}
    names = list(axis_sizes)
    operand_axes = [
        draw(st.permutations(names))[: draw(st.integers(0, len(names)))] for _ in range(operands)
    ]
    used = sorted({axis for axes in operand_axes for axis in axes})
    output = list(draw(st.permutations(used)))[: draw(st.integers(0, len(used)))]
    batch = ()
    with_ellipsis = allow_ellipsis and draw(st.booleans())
    shapes_, texts = [], []
    if with_ellipsis:
        batch = draw(shapes(min_dims=1, max_dims=2, min_size=1, max_size=3))
    for axes in operand_axes:
        shape = [axis_sizes[axis] for axis in axes]
        tokens = list(axes)
        if with_ellipsis:
            # Right-aligned broadcasting: an operand may drop leading batch dims or hold 1s.
            own = list(batch[draw(st.integers(0, len(batch))):])
            own = [1 if draw(st.booleans()) and draw(st.booleans()) else size for size in own]
            at = draw(st.integers(0, len(tokens)))
            tokens.insert(at, "...")
            shape[at:at] = own
        texts.append(" ".join(tokens))
        shapes_.append(tuple(shape))
    out_tokens = list(output)
    if with_ellipsis:
        out_tokens.insert(draw(st.integers(0, len(out_tokens))), "...")
    pattern = ", ".join(texts) + " -> " + " ".join(out_tokens)
    return pattern, shapes_
