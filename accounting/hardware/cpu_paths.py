"""FLOPs per cycle per core of a CPU's best matmul path for a dtype, from its ISA flags.

A table of paths, best first, for each dtype; the first whose flags the CPU has is the one a matmul takes
(:func:`cpu_matmul_path`). The peak (:mod:`accounting.hardware.cpu_peak`) multiplies it by cores and clock;
the clock measurement (:mod:`accounting.hardware.cpu_clock`) divides a measured FMA rate by it.

>>> cpu_flops_per_cycle("float32", {"avx2", "fma"})
(32, 'AVX2+FMA')
"""

from dataclasses import dataclass

from accounting.errors import AccountingError, AccountingTypeError
from accounting.hardware.dtypes import INT8, peak_column

# FLOPs per cycle per core, best path first: (required flags, FLOPs/cycle, path name).
# A vector FMA unit of w lanes does 2·w FLOPs a cycle; server cores have two.
FP32_AVX512_FLOPS_PER_CYCLE = 64  # 2 units × 16 lanes × 2
FP32_AVX512_HALF_WIDTH_FLOPS_PER_CYCLE = 32  # AMD Zen 4: 512-bit ops split on 256-bit units
FP32_AVX2_FMA_FLOPS_PER_CYCLE = 32  # 2 units × 8 lanes × 2
FP32_AVX_FLOPS_PER_CYCLE = 16  # one 8-lane add and one 8-lane multiply port
FP32_SSE_FLOPS_PER_CYCLE = 8  # one 4-lane add and one 4-lane multiply port
AMX_BF16_FLOPS_PER_CYCLE = 1024  # TDPBF16PS: 16×16×32 multiply-adds per 16 cycles
AMX_FP16_FLOPS_PER_CYCLE = 1024  # TDPFP16PS, same shape
AMX_INT8_OPS_PER_CYCLE = 2048
AVX512_BF16_FLOPS_PER_CYCLE = 128  # VDPBF16PS: 16 lanes × 2 pairs × 2, two units
AVX512_FP16_FLOPS_PER_CYCLE = 128  # 32 fp16 lanes × 2, two units
AVX512_VNNI_OPS_PER_CYCLE = 256  # VPDPBUSD: 16 lanes × 4 multiply-adds × 2, two units
AVX_VNNI_OPS_PER_CYCLE = 128

_CPU_PATHS = {
    "float32": [
        ({"avx512f", "avx512_vp2intersect"}, FP32_AVX512_FLOPS_PER_CYCLE, "AVX-512"),
        ({"avx512f", "amd"}, FP32_AVX512_HALF_WIDTH_FLOPS_PER_CYCLE, "AVX-512 (Zen 4, 256-bit units)"),
        ({"avx512f"}, FP32_AVX512_FLOPS_PER_CYCLE, "AVX-512"),
        ({"avx2", "fma"}, FP32_AVX2_FMA_FLOPS_PER_CYCLE, "AVX2+FMA"),
        ({"avx"}, FP32_AVX_FLOPS_PER_CYCLE, "AVX"),
        (set(), FP32_SSE_FLOPS_PER_CYCLE, "SSE"),
    ],
    "bfloat16": [
        ({"amx_bf16", "amx_tile"}, AMX_BF16_FLOPS_PER_CYCLE, "AMX-BF16"),
        ({"avx512_bf16"}, AVX512_BF16_FLOPS_PER_CYCLE, "AVX512-BF16"),
    ],
    "float16": [
        ({"amx_fp16", "amx_tile"}, AMX_FP16_FLOPS_PER_CYCLE, "AMX-FP16"),
        ({"avx512_fp16"}, AVX512_FP16_FLOPS_PER_CYCLE, "AVX512-FP16"),
    ],
    INT8: [
        ({"amx_int8", "amx_tile"}, AMX_INT8_OPS_PER_CYCLE, "AMX-INT8"),
        ({"avx512_vnni"}, AVX512_VNNI_OPS_PER_CYCLE, "AVX512-VNNI"),
        ({"avx_vnni"}, AVX_VNNI_OPS_PER_CYCLE, "AVX-VNNI"),
    ],
}


@dataclass(frozen=True)
class CpuPath:
    """The best matmul path a CPU's flags allow for a dtype.

    ``native`` is ``False`` when the dtype has no path of its own on these flags: torch
    converts it and computes on the float32 path, whose name and rate these are.
    """

    flops_per_cycle: int
    name: str
    native: bool


def cpu_native_paths(dtype) -> tuple[str, ...]:
    """Names of the ISA paths that compute ``dtype`` natively on some CPU, best first (empty: none).

    >>> cpu_native_paths("bf16")
    ('AMX-BF16', 'AVX512-BF16')
    """
    column = peak_column(dtype)
    return tuple(path for _flags, _rate, path in _CPU_PATHS.get("float32" if column == "float64" else column, []))


def cpu_matmul_path(dtype, flags, *, vendor: str | None = None) -> CpuPath | None:
    """The path ``dtype`` matmuls take on a CPU with these ISA flags; ``None`` for a dtype no CPU has units for.

    ``float64`` is half the ``float32`` rate. bfloat16, float16 and int8 without a
    native path run at the float32 rate (torch converts and computes in float32).
    ``vendor="amd"`` with AVX-512 but no VP2INTERSECT is Zen 4, whose 512-bit ops
    run on 256-bit units; any other vendor is taken to have full-width units, which
    can only overstate the peak (MFU low, never above 1).

    >>> cpu_matmul_path("bf16", {"avx2", "fma"})
    CpuPath(flops_per_cycle=32, name='AVX2+FMA', native=False)
    >>> print(cpu_matmul_path("tf32", {"avx2", "fma"}))
    None
    """
    column = peak_column(dtype)
    if isinstance(flags, str) or not all(isinstance(flag, str) for flag in flags):
        raise AccountingTypeError(f"flags must be a collection of flag names, got {flags!r}")
    lookup = "float32" if column == "float64" else column
    if lookup not in _CPU_PATHS:
        return None
    have = {flag.lower() for flag in flags}
    if vendor == "amd":
        have.add("amd")
    for required, per_cycle, path in _CPU_PATHS[lookup]:
        if required <= have:
            if column == "float64":
                return CpuPath(per_cycle // 2, f"{path} (FP64)", True)
            return CpuPath(per_cycle, path, True)
    fallback = cpu_matmul_path("float32", flags, vendor=vendor)
    return CpuPath(fallback.flops_per_cycle, fallback.name, False)


def cpu_flops_per_cycle(dtype, flags, *, vendor: str | None = None) -> tuple[int, str]:
    """FLOPs per cycle per core for ``dtype`` on a CPU with these ISA flags, and the path's name (for display).

    :func:`cpu_matmul_path` chooses the path; a dtype computed on the float32 path
    has ``" (via float32)"`` added to the name. Whether a dtype is native is
    :func:`accounting.hardware.native.native_matmul`'s answer, not this string's.

    >>> cpu_flops_per_cycle("bfloat16", {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
    (1024, 'AMX-BF16')
    >>> cpu_flops_per_cycle("float64", {"avx2", "fma"})
    (16, 'AVX2+FMA (FP64)')
    """
    path = cpu_matmul_path(dtype, flags, vendor=vendor)
    if path is None:
        raise AccountingError(f"no CPU computes {peak_column(dtype)} matmuls natively; there is no CPU peak for {dtype!r}")
    return path.flops_per_cycle, path.name if path.native else f"{path.name} (via float32)"
