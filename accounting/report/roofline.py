"""Arithmetic intensity of a matmul and where it sits on a device's roofline.

A kernel is *memory-bound* when it does fewer FLOPs per byte moved than the device's
ridge point (peak FLOP/s ÷ memory bandwidth): the memory system, not the arithmetic
units, then limits it. Bytes moved by ``(m, k) @ (k, n)`` are counted as each operand
read once and the result written once, the least any kernel can move.

>>> from accounting.report.roofline import arithmetic_intensity, ridge_point, bound
>>> ai = arithmetic_intensity(4096, 4096, 4096, "bfloat16")
>>> round(ai, 1)
1365.3
>>> ridge = ridge_point(989.4e12, 3.35e12)                          # H100 SXM bf16
>>> round(ridge, 1), bound(ai, ridge)
(295.3, 'compute')
>>> bound(arithmetic_intensity(8192, 8192, 1, "bfloat16"), ridge)  # matrix-vector
'memory'
"""

from accounting._checks import check_positive
from accounting.flops import matmul_flops
from accounting.timing import matmul_bytes

COMPUTE_BOUND = "compute"
MEMORY_BOUND = "memory"


def arithmetic_intensity(m: int, k: int, n: int, dtype) -> float:
    """FLOPs per byte moved of a ``(m, k) @ (k, n)`` product in ``dtype``.

    FLOPs from :func:`accounting.matmul_flops`, bytes from :func:`accounting.timing.matmul_bytes`
    (both operands read once, the result written once; float8 writes bfloat16).

    >>> arithmetic_intensity(1024, 1024, 1024, "float32")
    170.66666666666666
    """
    return matmul_flops((m, k), (k, n)) / matmul_bytes(m, k, n, dtype)


def ridge_point(peak_flops_per_second: float, bytes_per_second: float) -> float:
    """Arithmetic intensity (FLOP/byte) above which a kernel is compute-bound on this device.

    >>> ridge_point(2e12, 1e11)
    20.0
    """
    peak = check_positive(peak_flops_per_second, "peak_flops_per_second")
    bandwidth = check_positive(bytes_per_second, "bytes_per_second")
    return peak / bandwidth


def bound(intensity: float, ridge: float) -> str:
    """``"compute"`` when ``intensity`` is at or above the ridge point, else ``"memory"``.

    >>> bound(10.0, 20.0), bound(20.0, 20.0)
    ('memory', 'compute')
    """
    intensity = check_positive(intensity, "arithmetic intensity")
    ridge = check_positive(ridge, "ridge point")
    return COMPUTE_BOUND if intensity >= ridge else MEMORY_BOUND

