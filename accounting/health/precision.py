"""How a product rounds: the unit roundoffs of its inputs, sums and output, and the bound they give.

The rounding model behind the result check (:mod:`accounting.health.results`, whose docstring states the
tolerance): :class:`Precision` holds a product's units and gives ``α``, the bound on ``|fl(AB) − AB|`` as a
multiple of ``|A||B|`` (:meth:`Precision.product_coefficient`), and ``β``, its output's rounding as a multiple of
``|C|``; :func:`precision_of` builds it for a dtype on a device (an fp8 product on a GPU: the tensor cores'
chunked sums, :mod:`accounting.health.accumulation`).

>>> precision_of("float32").product_coefficient(1000) < 1e-4
True
"""

import math
from dataclasses import dataclass

import torch

from accounting.errors import AccountingError, AccountingTypeError
from accounting.health.accumulation import FP8_TENSOR_CORE_UNIT, check_accumulation, fp8_coefficient, growth
from accounting.memory import TF32, format_name, storage_dtype

TF32_INPUT_UNIT = 2.0**-10
"""TF32 keeps 10 explicit mantissa bits: a float32 operand rounded (2⁻¹¹) or truncated (2⁻¹⁰) to it."""

MMA_K_STEP = 16
"""The smallest run of products a tensor-core partial sum covers (``mma`` k-step 16 for 16-bit inputs):
under reduced-precision reductions a product has at most ``⌈k / 16⌉`` partials added in its output type."""


def unit_roundoff(dtype) -> float:
    """``u``: half the gap from 1 to the next number, ``torch.finfo(dtype).eps / 2``.

    >>> unit_roundoff(torch.float32) == 2.0**-24, unit_roundoff(torch.bfloat16) == 2.0**-8
    (True, True)
    """
    return torch.finfo(dtype).eps / 2


def underflow_unit(dtype) -> float:
    """``η``: half the smallest subnormal of ``dtype``, the most rounding can lose in the subnormal range.

    >>> underflow_unit(torch.float16) == 2.0**-25
    True
    """
    info = torch.finfo(dtype)
    return info.smallest_normal * info.eps / 2


def gamma(n: int, u: float) -> float:
    """Higham's ``γ_n = n·u / (1 − n·u)``; infinite once ``n·u ≥ 1`` (no bound left).

    >>> gamma(4, 0.125)
    1.0
    >>> gamma(8, 0.125)
    inf
    """
    nu = n * u
    return math.inf if nu >= 1 else nu / (1 - nu)


@dataclass(frozen=True)
class Precision:
    """How a product rounds: unit roundoffs of its inputs, sums and output (the tolerance: :mod:`~accounting.health.results`).

    ``output_unit`` is 0 when ``C`` keeps the sums' precision; ``reduction_chunk`` is ``None`` unless
    partial sums may be added in the output type. ``fp8_tensor_cores``: the sums are an fp8 product's on a
    GPU's tensor cores, bounded by :func:`~accounting.health.accumulation.fp8_coefficient` for ``accumulation``
    (``"default"``, ``"fast"``, or ``None`` where not known: the larger bound).
    """

    input_unit: float
    accumulation_unit: float
    output_unit: float
    reduction_chunk: int | None = None
    accumulation_underflow: float = 0.0
    output_underflow: float = 0.0
    overflow_limit: float = math.inf
    """The largest finite value the sums or the output can hold: at or beyond it no bound is left."""
    fp8_tensor_cores: bool = False
    accumulation: str | None = None

    def underflow(self, k: int) -> float:
        """The absolute error underflow may add to one element: ``(k + 1)·η_acc + η_out``.

        Higham's relative bounds assume no underflow; a result in the subnormal range is rounded to
        a fixed spacing instead, adding at most ``η`` (half the smallest subnormal) per operation.
        """
        return (k + 1) * self.accumulation_underflow + self.output_underflow

    def product_coefficient(self, k: int) -> float:
        """``α``: the bound on ``|fl(AB) − AB|`` as a multiple of ``|A||B|`` (``inf`` or NaN: no bound)."""
        if self.fp8_tensor_cores:
            sums = fp8_coefficient(k, self.accumulation)
        else:
            sums = growth(k + 1, self.accumulation_unit)
        inputs = (1 + sums) * (2 * self.input_unit + self.input_unit**2) if self.input_unit else 0.0
        partials = growth(math.ceil(k / self.reduction_chunk), self.output_unit) if self.reduction_chunk else 0.0
        return inputs + sums + partials

    @property
    def output_coefficient(self) -> float:
        """``β = u_out / (1 − u_out)``: the output's rounding as a multiple of ``|C|``."""
        return self.output_unit / (1 - self.output_unit)


def precision_of(dtype, device="cpu", *, out_dtype=None, accumulation: str | None = None) -> Precision:
    """How a product in ``dtype`` (a name as :func:`accounting.memory.format_name` takes) rounds on ``device``.

    float64 and float32 sum in their own type; tf32 rounds its float32 inputs to 10 mantissa bits;
    bfloat16, float16 and fp8 sum in float32 (fp8 on a GPU: in the tensor cores' chunks,
    :mod:`accounting.health.accumulation`, by ``accumulation``: ``"default"``, ``"fast"`` or ``None``, not
    known) and round into ``out_dtype`` (default: the inputs' type; fp8 products write bfloat16 in the
    benchmarks). ``accumulation`` is for fp8 only.
    On CUDA, fp16 and bf16 products allowed reduced-precision reductions
    (``torch.backends.cuda.matmul.allow_*_reduced_precision_reduction``, on by default) get
    ``reduction_chunk = MMA_K_STEP``.

    >>> bf16 = precision_of("bf16")
    >>> bf16.accumulation_unit == 2.0**-24, bf16.output_unit == 2.0**-8, bf16.reduction_chunk
    (True, True, None)
    >>> precision_of("float32").output_unit
    0
    >>> fast = precision_of("float8_e4m3fn", "cuda", out_dtype=torch.bfloat16, accumulation="fast")
    >>> fast.fp8_tensor_cores, math.isfinite(fast.product_coefficient(65536))
    (True, True)
    """
    name = format_name(dtype)
    if accumulation is not None:
        if not name.startswith("float8"):
            raise AccountingError(f"accumulation is for fp8 products, got accumulation={accumulation!r} for {name}")
        check_accumulation(accumulation)
    store = storage_dtype(name)
    kind = torch.device(device).type
    out = store if out_dtype is None else out_dtype
    if not isinstance(out, torch.dtype):
        raise AccountingTypeError(f"out_dtype must be a torch.dtype, got {out_dtype!r}")
    tensor_cores = name.startswith("float8") and kind != "cpu"
    sums = torch.float64 if store == torch.float64 else torch.float32
    unit = FP8_TENSOR_CORE_UNIT if tensor_cores else unit_roundoff(sums)
    output = unit_roundoff(out) if unit_roundoff(out) > unit else 0
    chunk = None
    if kind == "cuda" and store in (torch.float16, torch.bfloat16):
        flag = "allow_fp16_reduced_precision_reduction" if store == torch.float16 else "allow_bf16_reduced_precision_reduction"
        if bool(getattr(torch.backends.cuda.matmul, flag, True)):
            chunk = MMA_K_STEP
    return Precision(TF32_INPUT_UNIT if name == TF32 else 0, unit, output, chunk,
                     underflow_unit(sums), underflow_unit(out) if output else 0.0,
                     min(torch.finfo(sums).max, torch.finfo(out).max), tensor_cores, accumulation)
