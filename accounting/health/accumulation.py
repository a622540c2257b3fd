"""How far an fp8 product's sums may drift on a GPU's tensor cores: the bound behind its result check.

An fp8 product (``torch._scaled_mm``) multiplies exactly — two fp8 significands of at most 4 bits
give at most 8 — but its sums do not keep float32's 24 bits. DeepSeek-V3's technical report
(arXiv:2412.19437, §3.3.2) measured Hopper's FP8 tensor cores (H800) keeping about 14 bits when they
accumulate; a bound with that unit over the whole of ``k`` is useless (Higham's ``γ_k(2⁻¹³)`` is
infinite from ``k = 8192``). What the libraries do instead, and what this module bounds:

- **Default accumulation** (``use_fast_accum=False``): the tensor cores sum one chunk of
  :data:`FP8_PROMOTION_INTERVAL` = 128 products (4 ``wgmma`` instructions of
  :data:`FP8_MMA_K` = 32), then the partial is added into a float32 accumulator ("promotion"). That is
  DeepSeek-V3's interval ``N_C = 128`` and CUTLASS's default ``mma_promotion_interval = 4``
  (its FP8 kernels without ``FastAccum``); cuBLAS does not document its own.
- **Fast accumulation** (``use_fast_accum=True``): no promotion; the tensor cores' accumulator carries
  the sum over the whole of ``k``.

**The model.** Each tensor-core instruction adds :data:`FP8_MMA_K` products and the accumulator,
aligned to the largest exponent among them and cut to 14 significant bits (unit
``u_tc = 2⁻¹³``, :data:`FP8_TENSOR_CORE_UNIT`, truncation): each of the ``K + 1`` terms loses less
than ``u_tc·2^e_max`` and a carry out of the top bit one more, so the instruction's error is below
``c·(|acc| + Σ|p|)`` with ``c = (K + 2)·u_tc``. After ``J`` instructions the error is at most
``((1 + c)^J − 1)·Σ|a||b|`` (induction: ``E_j ≤ E_{j−1} + c·(S + E_{j−1})``, ``S`` the sum of the
products' magnitudes). So, as a multiple of ``|A||B|``:

- default: ``α = g_c + (1 + g_c)·((1 + u_32)^(⌈k/128⌉ + 1) − 1)``, ``g_c = (1 + c)^(⌈min(k, 128)/32⌉) − 1``
  (the float32 sums of the promoted partials and the scale's multiply, in float32's ``u_32 = 2⁻²⁴``);
- fast: ``α = (1 + c)^⌈k/32⌉·(1 + u_32) − 1`` (the scale's multiply, in float32).

``(1 + u)^n − 1`` is what Higham's ``γ_n`` bounds (Lemma 3.1) and is finite at every ``n``
(:func:`growth`). The model is a worst case; the products a benchmark times land far inside it. The
recorded H200 run (tests/data/hosts/nvidia-h200/fp8-product-error.txt: ``_scaled_mm``, e4m3 × e4m3,
bfloat16 output, against float64) measured at most 4.6e-5·|A||B| beyond the output's rounding with default
accumulation and at most 5.5e-4·|A||B| with fast accumulation, for k from 1024 to 32768: default's bound
there is 0.017 (360 times the largest error), fast's 0.14 at k = 1024 and more beyond — fast
accumulation can lose far more than random data shows (a sum of same-sign products swamps its
accumulator), so its bound grows with ``k`` while the measured error does not. A bound well above 1 still
catches what a failing device does to a result: NaN, infinity, an exponent bit flipped upwards.

>>> round(fp8_coefficient(1024, DEFAULT), 4), round(fp8_coefficient(1024, FAST), 4)
(0.0167, 0.1417)
>>> math.isfinite(fp8_coefficient(65536, FAST))
True
"""

import math

from accounting._checks import check_positive_size
from accounting.errors import AccountingError

FP8_TENSOR_CORE_UNIT = 2.0**-13
"""The tensor cores' fp8 accumulation unit: about 14 significant bits (DeepSeek-V3, §3.3.2, on H800), cut."""

FP8_MMA_K = 32
"""Products one tensor-core instruction sums (PTX ``wgmma`` and ``mma`` with e4m3/e5m2 inputs: k = 32)."""

FP8_PROMOTION_INTERVAL = 128
"""Products summed in the tensor cores before a partial joins the float32 accumulator under default accumulation
(DeepSeek-V3's ``N_C``; CUTLASS's ``mma_promotion_interval`` of 4 instructions)."""

FLOAT32_UNIT = 2.0**-24
"""float32's unit roundoff: the promoted partials' sums and the scales' multiply."""

DEFAULT = "default"
"""Partial sums promoted to float32 every :data:`FP8_PROMOTION_INTERVAL` products (``use_fast_accum=False``)."""

FAST = "fast"
"""No promotion: the tensor cores' accumulator over the whole of k (``use_fast_accum=True``)."""

ACCUMULATIONS = (DEFAULT, FAST)


def growth(n: int, u: float) -> float:
    """``(1 + u)^n − 1``: the most ``n`` relative errors of at most ``u`` compound to (Higham, Lemma 3.1).

    Higham's ``γ_n = n·u / (1 − n·u)`` bounds it only while ``n·u < 1``; this is finite for every ``n``
    (infinite only past float64's range).

    >>> growth(1, 0.5), round(growth(8192, 2.0**-13), 4)
    (0.5, 1.7181)
    """
    try:
        return math.expm1(n * math.log1p(u))
    except OverflowError:
        return math.inf


def check_accumulation(accumulation) -> str:
    """``accumulation`` if it is ``"default"`` or ``"fast"``; an :class:`AccountingError` naming it otherwise.

    >>> check_accumulation("fast")
    'fast'
    """
    if accumulation not in ACCUMULATIONS:
        raise AccountingError(f"fp8 accumulation must be one of {ACCUMULATIONS}, got {accumulation!r}")
    return accumulation


def fp8_coefficient(k: int, accumulation: str | None) -> float:
    """``α``: the bound on an fp8 product's ``|fl(AB) − AB|`` (before its output's rounding), a multiple of |A||B|.

    ``accumulation`` ``"default"`` or ``"fast"`` (module docstring); ``None`` (not known) takes the larger of the two.
    """
    k = check_positive_size(k, "k")
    if accumulation is None:
        return max(fp8_coefficient(k, DEFAULT), fp8_coefficient(k, FAST))
    per_instruction = (FP8_MMA_K + 2) * FP8_TENSOR_CORE_UNIT
    if check_accumulation(accumulation) == FAST:
        return (1 + growth(math.ceil(k / FP8_MMA_K), per_instruction)) * (1 + FLOAT32_UNIT) - 1
    chunk = growth(math.ceil(min(k, FP8_PROMOTION_INTERVAL) / FP8_MMA_K), per_instruction)
    return chunk + (1 + chunk) * growth(math.ceil(k / FP8_PROMOTION_INTERVAL) + 1, FLOAT32_UNIT)
