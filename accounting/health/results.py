"""Is a timed product right? Freivalds' check against a rounding-error bound, and a repeat check.

A fast device that returns wrong numbers is not healthy. This module checks a product
``C ≈ A @ B`` that a benchmark has just computed, for a small fraction of its cost:

**Freivalds' check.** For random sign vectors ``x`` (entries ±1), ``A @ (B @ x)`` and ``C @ x``
agree up to rounding when ``C`` is right. Both sides are computed in float64 (or float32) on
the operands' own device: two matrix-vector products, O(mk + kn + mn) work per vector against
the product's O(mkn). Each of the ``vectors`` vectors covers one contiguous block of
``w = ⌈n / vectors⌉`` columns of ``C`` (zero elsewhere), so a wrong element is compared with the
rounding of its own block of a row, not of the whole row.

**The tolerance** (row ``i``, vector ``x`` over columns ``J``) bounds what rounding alone can do.
Higham, *Accuracy and Stability of Numerical Algorithms* (2nd ed., 2002), §3.1 and §3.5: a dot
product of length ``k`` computed in floating point with unit roundoff ``u`` (in any order, with or
without FMA) has ``|fl(a·b) − a·b| ≤ γ_k |a|·|b|`` with ``γ_k = k·u / (1 − k·u)``; for a matrix
product ``|fl(AB) − AB| ≤ γ_k |A||B|`` elementwise. Here ``u = torch.finfo(dtype).eps / 2``.
With the rounding a product may add (:class:`Precision`):

- ``input_unit`` ``u_in``: operands rounded before multiplying (TF32: 10 explicit mantissa
  bits, ``u_in = 2⁻¹⁰`` whether rounded or truncated) add ``(2·u_in + u_in²)·|A||B|``;
- ``accumulation_unit`` ``u_acc``: the sums, with one more rounding for an fp8 product's scales:
  ``g_{k+1}(u_acc)·|A||B|`` (an fp8 product on a GPU: the tensor cores' chunked sums instead,
  :mod:`accounting.health.accumulation`, by its ``accumulation``, default or fast);
- ``output_unit`` ``u_out``: ``C`` stored in a narrower type than the sums (bfloat16 from float32
  sums): ``|fl(y) − y| ≤ u_out·|y| ≤ u_out/(1 − u_out)·|C|``;
- ``reduction_chunk``: where partial sums over chunks of at least this many products may be added
  in the output type (cuBLAS "reduced-precision reductions", on by default in torch for fp16 and
  bf16), ``g_s(u_out)·|A||B|`` with ``s = ⌈k / reduction_chunk⌉`` partials.

Here ``g_n(u) = (1 + u)^n − 1`` (:func:`~accounting.health.accumulation.growth`), what Higham's
``γ_n`` bounds (Lemma 3.1) while ``n·u < 1``, and finite beyond. So ``|((AB − C)x)_i| ≤ α·(|A||B||x|)_i +
β·(|C||x|)_i`` with ``α = (1 + g_{k+1}(u_acc))(2u_in + u_in²) + g_{k+1}(u_acc) + g_s(u_out)`` and
``β = u_out/(1 − u_out)``. The check computes ``T = |A|(|B||x|)``
and ``S = |C||x|`` alongside, in the same precision ``u_c`` (2⁻⁵³ for float64), and adds its own
rounding (``γ_{k+w+3}(u_c)`` on ``T``, ``γ_{w+2}(u_c)`` on ``S``, ``w`` the block's width, then
divides by ``1 − γ_{k+w+3}(u_c)`` for the rounding of ``T`` and ``S`` themselves). Underflow, which
relative bounds leave out, adds at most ``η = `` half the smallest subnormal per operation: ``w·((k + 1)·η_acc
+ η_out + (k + w + 3)·η_c)`` (it matters only for a product in fp16's subnormal range). That is the tolerance
``t``. A correct product never exceeds it, whatever order the library sums in — a worst-case
bound, not a statistical one, so a failed check is a wrong result, not bad luck. A product whose ``α``
is not finite (or whose bound is not a number) has no bound to be judged against: its check says *not
checked* and why (:attr:`ResultCheck.not_checked_reason`), never *wrong*.

**Overflow**, which relative bounds leave out too: where ``(1 + α)·L`` reaches the largest finite value of
the output type, ``L = |A|·max_{j∈J}|B[:, j]|`` (at least ``Σ_l |a_il||b_lj|`` for every column ``j`` of the
block; computed only where the block's sum ``T`` reaches it), an element of that block may be infinite in a
correct product, either because its value lies beyond the type's range or because a library adds partial sums
in the output type (a CPU's float16 path may store partial sums in float16: an infinity where the exact result
is finite). No bound holds there: such a block is not judged (``Residuals.may_overflow``; ``|partial sum| ≤ L``
for every order of summing, so a block below the limit cannot overflow and keeps its bound). A product none of
whose blocks can be judged is *not checked*, and says so.

**What it is guaranteed to catch.** A single element ``C[i, j]`` off by ``δ`` moves row ``i`` of its
block's residual by exactly ``±δ`` and its tolerance by at most ``c·|δ|`` (``c = β + γ_{w+2}(u_c)``);
so the check fails whenever ``|δ| > catch_factor · t`` with ``catch_factor = 2ρ / (1 − 2ρc)``,
``ρ = (1 + γ_{k+w+3}(u_c)) / (1 − γ_{k+w+3}(u_c))``: just over twice the tolerance of that row's
block (2.016 for a bfloat16 ``C``). Smaller corruptions lie inside what rounding can do and may
pass. The worst-case bound grows with ``k·u``, so the tolerance, measured against the elements'
own size, is figured in docs/health.md for the report sweep's shapes.

**Repeat check.** Identical calls on one device give bitwise identical results (cuBLAS documents
run-to-run reproducibility on one GPU architecture and SM count; CPU BLAS libraries with a fixed
thread count do too): a result that changes between two identical calls is a fault.

>>> a, b = torch.randn(64, 48, dtype=torch.float64), torch.randn(48, 32, dtype=torch.float64)
>>> check_product(a, b, a @ b).ok
True
>>> c = a @ b
>>> c[3, 7] += 1e-6
>>> check = check_product(a, b, c)
>>> check.ok, check.row, check.columns[0] <= 7 < check.columns[1]
(False, 3, True)
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from accounting._checks import check_positive_size
from accounting.errors import AccountingError, AccountingTypeError
from accounting.health.precision import (  # noqa: F401 (the precision model, importable from here as before)
    MMA_K_STEP,
    TF32_INPUT_UNIT,
    Precision,
    gamma,
    precision_of,
    underflow_unit,
    unit_roundoff,
)
from accounting.memory import format_name

VECTORS = 16
"""Sign vectors per check, each over one block of about ``n / VECTORS`` columns: the check costs
``2·VECTORS·(mk + kn)`` multiply-adds (the signed and the absolute pass) against the product's ``mkn``."""

CHUNK_ELEMENTS = 2**24
"""Elements of an operand converted to the check's precision at a time (128 MiB of float64): the check
never holds a float64 copy of a whole large operand."""

@dataclass(frozen=True)
class Residuals:
    """Freivalds' residuals of one product, their tolerances, and the blocks of columns they cover.

    ``residual`` and ``tolerance`` are ``(m, vectors)`` tensors; vector ``v`` covers columns
    ``bounds[v]`` to ``bounds[v + 1]``. A single element off by more than ``catch_factor`` times its
    row's tolerance is always caught.
    """

    residual: torch.Tensor
    tolerance: torch.Tensor
    bounds: tuple[int, ...]
    catch_factor: float
    may_overflow: torch.Tensor | None = None
    """``(m, vectors)``: blocks where a correct product may hold an infinity (not judged); ``None``: none."""
    unbounded: torch.Tensor | None = None
    """``(m, vectors)``: blocks whose bound ``|A||B||x|`` is NaN (an operand holds NaN): no bound to judge by."""

    def excess(self) -> torch.Tensor:
        """``|residual| / tolerance``: infinite where the residual is not finite, or non-zero against a zero tolerance;
        0 in a block that may overflow (not judged)."""
        size = self.residual.abs()
        ratio = torch.where(self.tolerance > 0, size / self.tolerance.clamp_min(torch.finfo(size.dtype).tiny),
                            torch.where(size > 0, math.inf, 0.0))
        judged = torch.where(torch.isfinite(size) & ~torch.isnan(self.tolerance), ratio, math.inf)
        return judged if self.may_overflow is None else torch.where(self.may_overflow, 0.0, judged)

    def vector_of(self, column: int) -> int:
        """Which vector covers ``column``."""
        for vector in range(len(self.bounds) - 1):
            if self.bounds[vector] <= column < self.bounds[vector + 1]:
                return vector
        raise AccountingError(f"column {column!r} is outside 0..{self.bounds[-1] - 1}")


@dataclass(frozen=True)
class ResultCheck:
    """The verdict on one product: ``ok``, and where and by how much it is worst.

    ``excess`` is the worst ``|residual| / tolerance`` (at most 1 passes; ``inf`` for a non-finite
    result); ``row`` and ``columns`` (half-open) say where. ``repeat_identical`` is ``None`` when the
    product was not repeated. ``not_checked_reason`` is why the product could not be judged against a
    bound (none could be computed: ``excess`` is NaN), empty where it was; such a product is not
    ``checked`` and not failed: ``ok`` unless its repeat differed. ``accumulation``: an fp8 product's
    (``"default"``, ``"fast"``; ``None`` for other dtypes or when not known), whose bound judged it on a GPU.

    >>> unchecked = ResultCheck("bfloat16", (8, 8, 8), math.nan, 0, (0, 8), math.nan, math.inf,
    ...                         not_checked_reason="no finite rounding bound")
    >>> unchecked.checked, unchecked.ok, unchecked.status
    (False, True, 'not checked')
    """

    dtype: str
    shape: tuple[int, int, int]
    excess: float
    row: int
    columns: tuple[int, int]
    residual: float
    tolerance: float
    repeat_identical: bool | None = None
    not_checked_reason: str = ""
    accumulation: str | None = None

    @property
    def checked(self) -> bool:
        """Whether the product was judged against its rounding bound."""
        return not self.not_checked_reason

    @property
    def ok(self) -> bool:
        """Nothing found wrong: within its bound (or not checked) and, where repeated, the same bits twice."""
        return (not self.checked or self.excess <= 1) and self.repeat_identical is not False

    @property
    def status(self) -> str:
        """``"wrong"``, ``"not checked"`` (no bound, nothing else wrong) or ``"ok"``."""
        return "wrong" if not self.ok else "not checked" if not self.checked else "ok"

    @property
    def note(self) -> str:
        """One line saying why the product was not checked (empty when it was)."""
        if self.checked:
            return ""
        return f"{self.dtype} {'x'.join(map(str, self.shape))} product not checked: {self.not_checked_reason}"

    @property
    def reason(self) -> str:
        """One line saying what is wrong (empty when ``ok``)."""
        shape = "x".join(map(str, self.shape))
        parts = []
        if self.checked and self.excess > 1:
            size = "not finite" if math.isinf(self.excess) else f"off by {self.excess:.3g}x its rounding tolerance"
            parts.append(f"{self.dtype} {shape} product wrong: row {self.row}, columns "
                         f"{self.columns[0]}-{self.columns[1] - 1} {size} "
                         f"(residual {self.residual:.3g}, tolerance {self.tolerance:.3g})")
        if self.repeat_identical is False:
            parts.append(f"{self.dtype} {shape} product changed between two identical calls")
        return "; ".join(parts)


def _operand(x, what):
    if not isinstance(x, torch.Tensor):
        raise AccountingTypeError(f"{what} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise AccountingError(f"{what} must be a matrix, got shape {tuple(x.shape)}")
    return x


def _scale(scale, what, length, axis):
    """A ``_scaled_mm`` scale as a tensor that broadcasts: a scalar, or one per row of A / column of B."""
    if scale is None:
        return None
    if not isinstance(scale, torch.Tensor):
        raise AccountingTypeError(f"{what} must be a torch.Tensor or None, got {type(scale).__name__}")
    if scale.numel() == 1:
        return scale.reshape(())
    wanted = (length, 1) if axis == 0 else (1, length)
    if tuple(scale.shape) != wanted:
        raise AccountingError(f"{what} must be a scalar or of shape {wanted}, got {tuple(scale.shape)}")
    return scale


def _rows(total: int, width: int):
    step = max(1, CHUNK_ELEMENTS // max(1, width))
    for start in range(0, total, step):
        yield start, min(total, start + step)


def _blocks(x, width, acc, scale=None):
    """``(start, stop, block)`` per run of rows of ``x``: those rows in ``acc`` (a copy of their own, so ``abs_`` may
    change it), times ``scale`` where given, zero-padded to whole blocks of ``width`` columns and viewed as
    ``(rows, blocks, width)``: the blocks are reduced over the last axis as a view, O(rows·n), no index scatter."""
    rows, n = x.shape
    vectors = -(-n // width)
    pad = vectors * width - n
    for start, stop in _rows(rows, n):
        block = x[start:stop].to(acc, copy=True)
        if scale is not None:
            block = block * scale.to(acc)
        if pad:
            block = torch.nn.functional.pad(block, (0, pad))
        yield start, stop, block.view(stop - start, vectors, width)


def _block_sums(x, width, signs, acc, scale=None):
    """Per block of ``width`` columns: the signed sums ``x[:, J] @ signs[J]`` and the sums of ``|x[:, J]|``, in ``acc``."""
    vectors = -(-x.shape[1] // width)
    signed = torch.empty(x.shape[0], vectors, dtype=acc, device=x.device)
    absolute = torch.empty_like(signed)
    for start, stop, block in _blocks(x, width, acc, scale):
        signed[start:stop] = (block * signs.view(vectors, width)).sum(-1)
        absolute[start:stop] = block.abs_().sum(-1)
    return signed, absolute


def _block_max(x, width, acc, scale=None):
    """Per block of ``width`` columns: ``max_{j ∈ J} |x[:, j]|``, in ``acc`` (zero-padded like :func:`_block_sums`)."""
    largest = torch.empty(x.shape[0], -(-x.shape[1] // width), dtype=acc, device=x.device)
    for start, stop, block in _blocks(x, width, acc, scale):
        largest[start:stop] = block.abs_().amax(-1)
    return largest


def _largest_elements(a, b, width, acc, scale_a, scale_b):
    """``(m, vectors)``: ``|A| · max_{j ∈ J} |B[:, j]|``, at least every ``Σ_l |a_il||b_lj|`` of its block (so at least
    every partial sum of those elements, in any order): a screen for overflow much finer than the block's sum ``T``."""
    y_max = _block_max(b, width, acc, scale_b)
    largest = torch.empty(a.shape[0], y_max.shape[1], dtype=acc, device=a.device)
    for start, stop in _rows(a.shape[0], a.shape[1]):
        block = a[start:stop].to(acc, copy=True)
        if scale_a is not None:
            block = block * (scale_a if scale_a.dim() == 0 else scale_a[start:stop]).to(acc)
        largest[start:stop] = block.abs_() @ y_max
    return largest


def residuals(a, b, c, *, scale_a=None, scale_b=None, precision: Precision | None = None, dtype=None,
              vectors: int = VECTORS, seed: int = 0, check_dtype=torch.float64,
              accumulation: str | None = None) -> Residuals:
    """Freivalds' residuals ``A(Bx) − Cx`` and their tolerances (module docstring), on the operands' device.

    ``a`` (m, k) and ``b`` (k, n) as the benchmark multiplied them (``b`` may be a transposed view);
    ``scale_a``/``scale_b`` the float32 scales of a ``torch._scaled_mm`` product (scalars, or one
    per row of ``a`` / column of ``b``); ``c`` (m, n) the product. ``precision`` defaults to
    :func:`precision_of` for ``dtype`` (default: ``a``'s), on ``a``'s device, into ``c``'s dtype, with an fp8
    product's ``accumulation`` (``"default"``, ``"fast"``, ``None``: not known). ``check_dtype`` is float64,
    or float32 where a device has no float64 (not for a float64 product).
    """
    a, b, c = _operand(a, "a"), _operand(b, "b"), _operand(c, "c")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2 or tuple(c.shape) != (m, n):
        raise AccountingError(f"shapes do not match: a {tuple(a.shape)}, b {tuple(b.shape)}, c {tuple(c.shape)}")
    if not a.device == b.device == c.device:
        raise AccountingError(f"a, b and c must be on one device, got {a.device}, {b.device}, {c.device}")
    if check_dtype not in (torch.float64, torch.float32):
        raise AccountingError(f"check_dtype must be torch.float64 or torch.float32, got {check_dtype!r}")
    if check_dtype == torch.float32 and torch.float64 in (a.dtype, b.dtype, c.dtype):
        raise AccountingError("a float64 product cannot be checked in float32: use check_dtype=torch.float64")
    vectors = min(check_positive_size(vectors, "vectors"), n)
    precision = precision or precision_of(a.dtype if dtype is None else dtype, a.device, out_dtype=c.dtype,
                                          accumulation=accumulation)
    scale_a, scale_b = _scale(scale_a, "scale_a", m, 0), _scale(scale_b, "scale_b", n, 1)

    width = -(-n // vectors)
    vectors = -(-n // width)
    bounds = tuple(min(v * width, n) for v in range(vectors + 1))
    generator = torch.Generator(device=a.device).manual_seed(seed)
    signs = torch.randint(0, 2, (vectors * width,), generator=generator, device=a.device).to(check_dtype) * 2 - 1
    y, y_abs = _block_sums(b, width, signs, check_dtype, scale_b)
    left = torch.empty(m, vectors, dtype=check_dtype, device=a.device)
    bound_t = torch.empty_like(left)
    for start, stop in _rows(m, k):
        block = a[start:stop].to(check_dtype, copy=True)  # a copy of its own: abs_ below must not touch a
        if scale_a is not None:
            block = block * (scale_a if scale_a.dim() == 0 else scale_a[start:stop]).to(check_dtype)
        left[start:stop] = block @ y
        bound_t[start:stop] = block.abs_() @ y_abs
    right, bound_s = _block_sums(c, width, signs, check_dtype)

    u_check = unit_roundoff(check_dtype)
    long_sums = gamma(k + width + 3, u_check)
    short_sums = gamma(width + 2, u_check)
    alpha = precision.product_coefficient(k) + long_sums
    beta = precision.output_coefficient + short_sums
    floor = width * (precision.underflow(k) + (k + width + 3) * underflow_unit(check_dtype))
    tolerance = (alpha * bound_t + beta * bound_s + floor) / (1 - long_sums)
    may_overflow = (1 + alpha) * bound_t >= precision.overflow_limit
    if bool(may_overflow.any()):  # the block's sum is only a coarse screen: look at its largest elements' bound
        largest = _largest_elements(a, b, width, check_dtype, scale_a, scale_b)
        may_overflow = (1 + alpha) * largest >= precision.overflow_limit
    rho = (1 + long_sums) / (1 - long_sums)
    catch = 2 * rho / (1 - 2 * rho * beta) if 2 * rho * beta < 1 else math.inf
    return Residuals(left - right, tolerance, bounds, catch, may_overflow, torch.isnan(bound_t))


def check_product(a, b, c, *, scale_a=None, scale_b=None, precision: Precision | None = None, dtype=None,
                  vectors: int = VECTORS, seed: int = 0, check_dtype=torch.float64,
                  repeat_identical: bool | None = None, accumulation: str | None = None) -> ResultCheck:
    """Freivalds' check of ``c ≈ a @ b`` (arguments as :func:`residuals`): a :class:`ResultCheck`.

    ``repeat_identical`` is passed through (from :func:`same_bits` of two identical calls). Where the
    precision model gives no finite bound at this ``k``, or the bound is not a number (an operand holds
    NaN), the check is *not checked*, with the reason: never *wrong* for want of a bound.
    """
    a, b, c = _operand(a, "a"), _operand(b, "b"), _operand(c, "c")
    name = format_name(a.dtype if dtype is None else dtype)
    shape = (a.shape[0], a.shape[1], b.shape[1])
    precision = precision or precision_of(name, a.device, out_dtype=c.dtype, accumulation=accumulation)
    used = precision.accumulation if precision.fp8_tensor_cores else accumulation
    alpha = precision.product_coefficient(a.shape[1])
    if not math.isfinite(alpha):
        why = f"no finite rounding bound at k={a.shape[1]} (the bound's multiple of |A||B| is {alpha})"
        return ResultCheck(name, shape, math.nan, 0, (0, b.shape[1]), math.nan, math.nan, repeat_identical, why, used)
    found = residuals(a, b, c, scale_a=scale_a, scale_b=scale_b, precision=precision, dtype=dtype,
                      vectors=vectors, seed=seed, check_dtype=check_dtype)
    unbounded = found.unbounded
    if unbounded is not None and bool(unbounded.any()):
        row, vector = divmod(int(torch.argmax(unbounded.to(torch.uint8)).item()), unbounded.shape[1])
        why = (f"its rounding bound is not a number in {int(unbounded.sum())} of {unbounded.numel()} blocks, first row "
               f"{row}, columns {found.bounds[vector]}-{found.bounds[vector + 1] - 1} (an operand holds NaN)")
        return ResultCheck(name, shape, math.nan, row, (found.bounds[vector], found.bounds[vector + 1]),
                           float(found.residual[row, vector].item()), math.nan, repeat_identical, why, used)
    if found.may_overflow is not None and bool(found.may_overflow.all()):
        why = (f"every block may overflow its {str(c.dtype).removeprefix('torch.')} result (a correct product may "
               f"hold an infinity there), so none has a bound to judge it by")
        return ResultCheck(name, shape, math.nan, 0, (0, b.shape[1]), math.nan, math.nan, repeat_identical, why, used)
    excess = found.excess()
    worst = int(torch.argmax(excess).item())
    row, vector = divmod(worst, excess.shape[1])
    return ResultCheck(name, shape, float(excess[row, vector].item()), row,
                       (found.bounds[vector], found.bounds[vector + 1]), float(found.residual[row, vector].item()),
                       float(found.tolerance[row, vector].item()), repeat_identical, "", used)


def _bits(x: torch.Tensor) -> torch.Tensor:
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    return x.contiguous().view(as_int)


def same_bits(first: torch.Tensor, second: torch.Tensor) -> bool:
    """Whether two results are bitwise identical (NaNs with the same bits count as equal).

    >>> x = torch.tensor([1.0, float("nan")])
    >>> same_bits(x, x.clone()), same_bits(x, x + 1)
    (True, False)
    """
    if first.shape != second.shape or first.dtype != second.dtype:
        return False
    return bool(torch.equal(_bits(first), _bits(second)))


def check_case(case, *, vectors: int = VECTORS, seed: int = 0, repeat: bool = True,
               check_dtype=torch.float64) -> ResultCheck:
    """Run a benchmark's product once (twice with ``repeat``) and check it: the hook for the sweep and benchmarks.

    ``case`` is anything shaped like :class:`accounting.timing.MatmulCase`: ``fn()`` returns the
    product; ``operands`` are ``(a, b, out)``, or ``(a, b, scale_a, scale_b)`` for fp8
    (``torch._scaled_mm``); ``dtype``, and ``runs_as`` where set, name the dtype; an fp8 case's
    ``accumulation`` (``"default"`` or ``"fast"``, where it has one) picks its bound. Call it outside
    the timed repetitions (it runs the product itself).

    >>> import types
    >>> a, b = torch.randn(32, 16), torch.randn(16, 8)
    >>> case = types.SimpleNamespace(fn=lambda: a @ b, operands=(a, b), dtype="float32", runs_as=None)
    >>> check_case(case).ok
    True
    """
    fn = getattr(case, "fn", None)
    operands = tuple(getattr(case, "operands", ()))
    if not callable(fn) or len(operands) < 2:
        raise AccountingTypeError(f"case must have fn() and operands (a, b, ...), got {case!r}")
    name = format_name(getattr(case, "runs_as", None) or getattr(case, "dtype", operands[0].dtype))
    scales = operands[2:4] if name.startswith("float8") else (None, None)
    result = _call(fn)
    identical = None
    if repeat:
        result = result.clone()
        identical = same_bits(result, _call(fn))
    accumulation = getattr(case, "accumulation", None) if name.startswith("float8") else None
    return check_product(operands[0], operands[1], result, scale_a=scales[0], scale_b=scales[1], dtype=name,
                         vectors=vectors, seed=seed, check_dtype=check_dtype, repeat_identical=identical,
                         accumulation=accumulation)


def _call(fn: Callable[[], object]) -> torch.Tensor:
    result = fn()
    if not isinstance(result, torch.Tensor):
        raise AccountingTypeError(f"the case's fn() must return the product tensor, got {type(result).__name__}")
    return result
