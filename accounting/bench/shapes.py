"""The matmul shape a benchmark runs on a device: the configured one, or a halved one that fits its free memory.

>>> plan_shape((1024, 1024, 1024), "float32", 2**30)
((1024, 1024, 1024), '')
"""

import pytest

from accounting.hardware.clocks import L2_FLUSH_FACTOR
from accounting.hardware.devices import as_device, free_memory_bytes
from accounting.memory import format_name
from accounting.timing import fit_matmul_shape, flush_bytes


def plan_shape(shape, dtype, free_bytes: int, *, extra_bytes: int = 0):
    """``(shape to run, note)``: the configured shape, a halved one that fits, or ``(None, why not)``.

    >>> plan_shape((16384, 16384, 16384), "bf16", 2**30)
    ((8192, 8192, 8192), 'shrunk from 16384x16384x16384 to fit 1.0 GiB free')
    """
    fitted = fit_matmul_shape(shape, dtype, free_bytes, extra_bytes=extra_bytes)
    gib = free_bytes / 2**30
    described = "x".join(map(str, shape))
    if fitted is None:
        return None, f"{described} {format_name(dtype)} does not fit {gib:.1f} GiB free, even shrunk"
    if tuple(fitted) != tuple(shape):
        return fitted, f"shrunk from {described} to fit {gib:.1f} GiB free"
    return tuple(shape), ""


def fitted_shape(shape, dtype, device):
    """The shape to run on ``device``, shrunk to its free memory; skips the test when nothing fits."""
    device = as_device(device)
    extra = L2_FLUSH_FACTOR * flush_bytes(device)  # the flush buffer the benchmark allocates
    fitted, note = plan_shape(shape, dtype, free_memory_bytes(device), extra_bytes=extra)
    if fitted is None:
        pytest.skip(note)
    return fitted, note
