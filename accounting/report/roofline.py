"""Arithmetic intensity of a matmul and where it sits on a device's roofline.

A kernel is *memory-bound* when it does fewer FLOPs per byte moved than the device's
ridge point (peak FLOP/s ÷ memory bandwidth): the memory system, not the arithmetic
units, then limits it. Bytes moved by ``(m, k) @ (k, n)`` are counted as each operand
read once and the result written once, the least any kernel can move.

>>> from accounting.report.roofline import arithmetic_intensity, ridge_point, bound
>>> ai = arithmetic_intensity(4096, 4096, 4096, element_bytes=2)   # bf16
>>> round(ai, 1)
1365.3
>>> ridge = ridge_point(989.4e12, 3.35e12)                          # H100 SXM bf16
>>> round(ridge, 1), bound(ai, ridge)
(295.3, 'compute')
>>> bound(arithmetic_intensity(8192, 8192, 1, element_bytes=2), ridge)  # matrix-vector
'memory'
"""

from accounting._checks import check_positive, check_positive_size
from accounting.flops import matmul_flops

COMPUTE_BOUND = "compute"
MEMORY_BOUND = "memory"


def matmul_bytes(m: int, k: int, n: int, element_bytes: int, out_element_bytes: int | None = None) -> int:
    """Bytes a ``(m, k) @ (k, n)`` product must move: read both operands, write the result.

    ``out_element_bytes`` is the result's element size where it differs from the inputs'
    (an fp8 product written out in bf16).

    >>> matmul_bytes(2, 3, 4, element_bytes=4)   # (6 + 12 + 8) elements × 4 bytes
    104
    >>> matmul_bytes(16, 16, 16, element_bytes=1, out_element_bytes=2)
    1024
    """
    m = check_positive_size(m, "m")
    k = check_positive_size(k, "k")
    n = check_positive_size(n, "n")
    size = check_positive_size(element_bytes, "element_bytes")
    out_size = size if out_element_bytes is None else check_positive_size(out_element_bytes, "out_element_bytes")
    return (m * k + k * n) * size + m * n * out_size


def arithmetic_intensity(m: int, k: int, n: int, element_bytes: int, out_element_bytes: int | None = None) -> float:
    """FLOPs per byte moved of a ``(m, k) @ (k, n)`` product (FLOPs from :func:`accounting.matmul_flops`).

    >>> arithmetic_intensity(1024, 1024, 1024, element_bytes=4)
    170.66666666666666
    """
    return matmul_flops((m, k), (k, n)) / matmul_bytes(m, k, n, element_bytes, out_element_bytes)


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


def attainable_flops(intensity: float, peak_flops_per_second: float, bytes_per_second: float) -> float:
    """The roofline: the most FLOP/s a kernel of this intensity can reach, ``min(peak, AI × bandwidth)``.

    >>> attainable_flops(10.0, peak_flops_per_second=2e12, bytes_per_second=1e11)
    1000000000000.0
    """
    intensity = check_positive(intensity, "arithmetic intensity")
    peak = check_positive(peak_flops_per_second, "peak_flops_per_second")
    bandwidth = check_positive(bytes_per_second, "bytes_per_second")
    return min(peak, intensity * bandwidth)
