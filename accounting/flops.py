"""FLOP counts of matmuls, einsums and linear layers, and model FLOPs utilisation.

Convention, stated once for the whole package: a multiply-add is 2 FLOPs, so a
product of an (m, k) and a (k, n) matrix costs 2·m·k·n FLOPs (strictly m·n·(2k-1);
the difference is ignored, as by ``torch.utils.flop_counter.FlopCounterMode``).
Only matmul-class work is counted; elementwise ops, sums and softmaxes are not.

>>> from accounting import matmul_flops, einsum_flops, linear_flops, mfu
>>> matmul_flops((1024, 256), (256, 64))
33554432
>>> einsum_flops("batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2", (2, 8, 16), (2, 8, 16))
4096
>>> linear_flops(tokens=1024, in_features=256, out_features=64, phase="step")
100663296
>>> round(mfu(flops=4e14, seconds=1.0, peak_flops_per_second=989.4e12), 3)
0.404
"""

import math
import re

from accounting._checks import check_choice, check_non_negative, check_positive, check_shape, check_size
from accounting.errors import AccountingError, AccountingTypeError

FLOPS_PER_MULTIPLY_ADD = 2


def _broadcast(a: tuple[int, ...], b: tuple[int, ...], describe: str) -> tuple[int, ...]:
    """numpy-style broadcast of two batch shapes (right-aligned, size 1 stretches)."""
    width = max(len(a), len(b))
    a = (1,) * (width - len(a)) + a
    b = (1,) * (width - len(b)) + b
    result = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise AccountingError(f"{describe}: batch sizes {x} and {y} cannot broadcast")
        result.append(y if x == 1 else x)
    return tuple(result)


def matmul_flops(a_shape, b_shape) -> int:
    """FLOPs of ``torch.matmul(a, b)`` for operands of these shapes.

    Follows matmul's rules: 1-D operands are vectors (a dot product is 2·n FLOPs,
    a matrix-vector product 2·m·n), leading dims broadcast as batch dims.

    >>> matmul_flops((8, 1, 32, 64), (4, 64, 16))  # batch (8, 4) of (32, 64) @ (64, 16)
    2097152
    >>> matmul_flops((64,), (64,))
    128
    """
    a = check_shape(a_shape, "a_shape")
    b = check_shape(b_shape, "b_shape")
    describe = f"matmul of shapes {a} and {b}"
    if not a or not b:
        raise AccountingError(f"{describe}: both operands need at least one dimension")
    m = 1 if len(a) == 1 else a[-2]
    n = 1 if len(b) == 1 else b[-1]
    inner_a = a[-1]
    inner_b = b[0] if len(b) == 1 else b[-2]
    if inner_a != inner_b:
        raise AccountingError(f"{describe}: inner sizes {inner_a} and {inner_b} differ")
    batch = _broadcast(a[:-2], b[:-2], describe)
    return FLOPS_PER_MULTIPLY_ADD * math.prod(batch) * m * inner_a * n


_PHASE_MATMULS = ("forward", "backward", "step")


def linear_flops(tokens: int, in_features: int, out_features: int, phase: str = "forward") -> int:
    """FLOPs of a linear layer ``y = x @ W`` (bias ignored) over ``tokens`` rows.

    - ``forward``: ``x @ W`` — 2·t·i·o.
    - ``backward``: ``dx = dy @ Wᵀ`` and ``dW = xᵀ @ dy`` — 4·t·i·o.
    - ``step`` (forward + backward): 6·t·i·o, the "6 × tokens × parameters" rule.

    >>> linear_flops(10, 3, 5), linear_flops(10, 3, 5, "backward")
    (300, 600)
    """
    t = check_size(tokens, "tokens")
    i = check_size(in_features, "in_features")
    o = check_size(out_features, "out_features")
    check_choice(phase, _PHASE_MATMULS, "phase")
    forward = matmul_flops((t, i), (i, o))
    backward = matmul_flops((t, o), (o, i)) + matmul_flops((i, t), (t, o))
    return {"forward": forward, "backward": backward, "step": forward + backward}[phase]


MFU_CEILING = 1.05
"""MFU above this is no measurement to trust: the peak is wrong for the device (or the dtype ran in a
faster mode than its peak is for, float32 on TF32 tensor cores), or the timer missed work (a host
clock read around asynchronous GPU work). A little above 1 is allowed for timer resolution."""


def mfu(flops, seconds, peak_flops_per_second) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over the hardware's promised FLOP/s.

    >>> mfu(flops=1e12, seconds=0.5, peak_flops_per_second=4e12)
    0.5
    """
    flops = check_non_negative(flops, "flops")
    seconds = check_positive(seconds, "seconds")
    peak = check_positive(peak_flops_per_second, "peak_flops_per_second")
    return flops / seconds / peak


def achieved_mfu(flops: int, seconds: float, peak: float | None) -> float | None:
    """MFU, or ``None`` when the peak is unknown (never a made-up figure).

    >>> achieved_mfu(10**12, 1.0, 2e12), achieved_mfu(10**12, 1.0, None)
    (0.5, None)
    """
    if peak is None or (isinstance(peak, float) and math.isnan(peak)):
        return None
    return mfu(flops, seconds, peak)


# ---- einsum -------------------------------------------------------------------------

_ELLIPSIS = "..."
_AXIS_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _parse_operand(text: str, pattern: str, where: str) -> list[str]:
    tokens = text.split()
    for token in tokens:
        if token != _ELLIPSIS and not _AXIS_NAME.match(token):
            raise AccountingError(
                f'einsum pattern "{pattern}": {where} has axis {token!r}; axes are names '
                "(letters, digits, _) or ..., and einsum takes no (grouped) or numeric axes"
            )
    seen = set()
    for token in tokens:
        if token in seen:
            raise AccountingError(f'einsum pattern "{pattern}": axis {token} appears twice in {where}')
        seen.add(token)
    return tokens


def _parse_pattern(pattern) -> tuple[list[list[str]], list[str]]:
    if not isinstance(pattern, str):
        raise AccountingTypeError(f"einsum pattern must be a string, got {pattern!r}")
    if pattern.count("->") != 1:
        raise AccountingError(f'einsum pattern "{pattern}" needs exactly one "->"')
    left, right = pattern.split("->")
    inputs = [_parse_operand(text, pattern, f"operand {i}") for i, text in enumerate(left.split(","))]
    output = _parse_operand(right, pattern, "the output")
    known = {axis for operand in inputs for axis in operand}
    unknown = [axis for axis in output if axis not in known]
    if unknown:
        raise AccountingError(
            f'einsum pattern "{pattern}": output axes {", ".join(unknown)} appear in no operand'
        )
    if (_ELLIPSIS in known) != (_ELLIPSIS in output):
        raise AccountingError(f'einsum pattern "{pattern}": use ... in the output exactly when an operand has it')
    return inputs, output


def _axis_sizes(pattern, inputs, output, shapes) -> tuple[list[list[str]], list[str], dict[str, int]]:
    """Bind axis names to sizes; expand ``...`` into numbered batch axes (right-aligned)."""
    if len(shapes) != len(inputs):
        raise AccountingError(
            f'einsum pattern "{pattern}" has {len(inputs)} operands but {len(shapes)} shapes were given'
        )
    sizes: dict[str, int] = {}
    owner: dict[str, int] = {}
    ellipsis_shapes = []
    named_inputs = []
    for position, (axes, shape) in enumerate(zip(inputs, shapes)):
        shape = check_shape(shape, f"shape of operand {position}")
        named = [axis for axis in axes if axis != _ELLIPSIS]
        has_ellipsis = len(named) != len(axes)
        if len(shape) < len(named) or (not has_ellipsis and len(shape) != len(named)):
            raise AccountingError(
                f'einsum pattern "{pattern}": operand {position} has axes {" ".join(axes)} '
                f"but shape {shape}"
            )
        cut = axes.index(_ELLIPSIS) if has_ellipsis else len(axes)
        extra = len(shape) - len(named)
        ellipsis_part = shape[cut:cut + extra]
        named_sizes = shape[:cut] + shape[cut + extra:]
        ellipsis_names = [f"...{extra - k}" for k in range(extra)]  # "...1" is the last dim
        if has_ellipsis:
            ellipsis_shapes.append(ellipsis_part)
        for axis, size in zip(named, named_sizes):
            if axis in sizes and sizes[axis] != size:
                raise AccountingError(
                    f'einsum pattern "{pattern}": axis {axis} is {sizes[axis]} in operand '
                    f"{owner[axis]} but {size} in operand {position}"
                )
            sizes.setdefault(axis, size)
            owner.setdefault(axis, position)
        expanded = axes[:cut] + ellipsis_names + axes[cut + 1:] if has_ellipsis else list(axes)
        named_inputs.append((expanded, dict(zip(ellipsis_names, ellipsis_part))))
    batch = ()
    for shape in ellipsis_shapes:
        batch = _broadcast(batch, shape, f'einsum pattern "{pattern}" at ...')
    for k, size in enumerate(reversed(batch), start=1):
        sizes[f"...{k}"] = size
    # A dim of size 1 does not vary, so like torch we treat it as absent: an ellipsis dim that
    # broadcasts from 1 is absent from that operand, and an axis of size 1 is absent everywhere
    # (contracting over it alone is an elementwise product).
    operands = [
        {axis for axis in axes if own.get(axis, sizes[axis]) == sizes[axis] != 1}
        for axes, own in named_inputs
    ]
    out_axes = []
    for axis in output:
        out_axes += [f"...{k}" for k in range(len(batch), 0, -1)] if axis == _ELLIPSIS else [axis]
    return operands, out_axes, sizes


def einsum_flops(pattern: str, *shapes) -> int:
    """Matmul FLOPs of ``einops.einsum(*tensors, pattern)`` for tensors of these shapes.

    Two operands: axes of size 1 are ignored, and axes only in one operand and not in the
    output are summed away first (no FLOPs, as torch does); if some axis is then contracted, the product costs
    2 × (product of the sizes of every remaining axis). If no axis is contracted the
    step is an elementwise or outer product: torch computes it with ``mul``, which is
    not matmul work, so it counts 0 here and in ``FlopCounterMode``.

    One operand (a transpose, a trace-free sum): 0. Three or more: contracted pairwise
    left to right, as torch does without opt_einsum, summing each step; another
    contraction order may cost less.

    >>> einsum_flops("b i k, b k j -> b i j", (4, 8, 16), (4, 16, 2))
    2048
    >>> einsum_flops("... i k, k j -> ... i j", (3, 5, 8, 16), (16, 2))
    7680
    """
    inputs, output = _parse_pattern(pattern)
    operands, out_axes, sizes = _axis_sizes(pattern, inputs, output, shapes)
    total = 0
    current = operands[0]
    for position in range(1, len(operands)):
        following = set(out_axes).union(*operands[position + 1:])
        right = operands[position]
        left = {axis for axis in current if axis in right or axis in following}
        right = {axis for axis in right if axis in left or axis in following}
        contracted = {axis for axis in left & right if axis not in following}
        involved = left | right
        if contracted:
            total += FLOPS_PER_MULTIPLY_ADD * math.prod(sizes[axis] for axis in involved)
        current = involved - contracted
    return total
