"""How an fp8 product accumulates, named on every figure: ``"fast"`` or ``"default"``.

cuBLAS's fp8 products (``torch._scaled_mm``) run with ``use_fast_accum=True`` (``"fast"``: the tensor
cores' partial sums stay in their own narrower accumulator; the package's default, what forward passes use)
or without (``"default"``: partial sums promoted to float32 in chunks; slower, what gradients' products
use). The two differ by 10–15 % in speed (H200: 1567 against 1399 TFLOP/s burst), so an fp8 figure that does
not say which it used cannot be compared with anything. Both are judged against the same dense fp8 peak.

The report's sweep runs fp8 with fast accumulation; its headline phase also measures the default one
under the key :func:`default_key` (``"float8_e4m3fn (default accumulation)"``), which
:func:`split_key` takes apart again.

On ROCm there is one fp8 kernel: torch's ``scaled_gemm`` sets cuBLASLt's fast-accumulation attribute only
outside ROCm builds (``#ifndef USE_ROCM``), so hipBLASLt runs the same product whatever ``use_fast_accum``
says (:func:`fast_accumulation_honoured`). There an fp8 figure is named ``"default"`` (what torch runs without
fast accumulation, partial sums in float32), :func:`default_key` is the dtype itself, so the product is timed
once, and :func:`accumulation_note` says why there is no second figure.

>>> split_key("float8_e4m3fn"), split_key(default_key("float8_e4m3fn")), split_key("bfloat16")
(('float8_e4m3fn', 'fast'), ('float8_e4m3fn', 'default'), ('bfloat16', None))
>>> figure_label("float8_e4m3fn", "default"), figure_label("bfloat16", None)
('float8_e4m3fn (default accumulation)', 'bfloat16')
"""

from accounting.errors import AccountingError
from accounting.hardware.native import fast_accumulation_honoured
from accounting.health.accumulation import DEFAULT, FAST
from accounting.memory import format_name

_DEFAULT_SUFFIX = f" ({DEFAULT} accumulation)"


def is_fp8(dtype: str) -> bool:
    """Whether ``dtype`` names a float8 format."""
    try:
        return format_name(dtype).startswith("float8")
    except AccountingError:  # a name that is no format (a headline key) is not fp8
        return False


def accumulation_of(dtype: str) -> str | None:
    """The accumulation the package's fp8 products use by default (``"fast"``; ``"default"`` on ROCm, which has no
    fast one), ``None`` for other dtypes."""
    if not is_fp8(dtype):
        return None
    return FAST if fast_accumulation_honoured() else DEFAULT


def default_key(dtype: str) -> str:
    """The headline key of ``dtype`` measured with default accumulation: ``dtype`` itself where that is the only
    accumulation (ROCm), so a caller that measures every key times the one kernel once."""
    return dtype + _DEFAULT_SUFFIX if fast_accumulation_honoured() else dtype


def accumulation_note(dtype: str) -> str | None:
    """Why ``dtype`` has no separate default-accumulation figure here (``None`` where it has, or is not fp8).

    >>> accumulation_note("bfloat16") is None
    True
    """
    if not is_fp8(dtype) or fast_accumulation_honoured():
        return None
    return (f"{dtype}: one figure, with default accumulation: on ROCm torch ignores use_fast_accum (hipBLASLt has no "
            "fast-accumulation mode), so fast and default are one kernel, timed once")


def split_key(key: str) -> tuple[str, str | None]:
    """``(dtype, accumulation)`` of a headline key (``accumulation`` ``None`` for dtypes that are not fp8)."""
    if key.endswith(_DEFAULT_SUFFIX):  # a key written on CUDA keeps its meaning wherever it is read
        return key[:-len(_DEFAULT_SUFFIX)], DEFAULT
    return key, accumulation_of(key)


def case_options(accumulation: str | None) -> dict:
    """Keyword arguments of :func:`accounting.timing.matmul_case` for ``accumulation`` (none for the default fast).

    >>> case_options("default"), case_options("fast"), case_options(None)
    ({'fp8_fast_accum': False}, {}, {})
    """
    return {"fp8_fast_accum": False} if accumulation == DEFAULT else {}


def figure_label(dtype: str, accumulation: str | None) -> str:
    """``dtype`` with its accumulation where it has one."""
    return dtype if accumulation is None else f"{dtype} ({accumulation} accumulation)"


def dtype_label(dtype: str) -> str:
    """``dtype`` named with the accumulation the package's products of it use (fp8: fast), as its figures are.

    >>> dtype_label("float8_e4m3fn"), dtype_label("bfloat16")
    ('float8_e4m3fn (fast accumulation)', 'bfloat16')
    """
    return figure_label(dtype, accumulation_of(dtype))
