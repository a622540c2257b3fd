"""Which benchmarks run here, and why the others are skipped: markers' reasons, GPU selection, known peaks.

Every skip says what a user can do about it: a dtype the device only emulates names the
report command that times it anyway; a missing peak names ``--peak-tflops``.

>>> zen3 = DeviceInfo("cpu", "AMD EPYC", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}), vendor="amd")
>>> native_skip_reason(zen3, "float32") is None
True
"""

import re
import warnings

import pytest
import torch

from accounting.hardware.devices import DeviceInfo, cuda_available, cuda_device_names, detect_device
from accounting.hardware.native import native_matmul
from accounting.hardware.peaks import PeakUnknownWarning, device_peak_flops


def shape_mode(config) -> str:
    """``"quick"`` or ``"full"``: ``auto`` is full when the ``-m`` expression selects cpu or gpu benchmarks."""
    mode = config.getoption("matmul_shapes", "auto")
    if mode != "auto":
        return mode
    expression = config.getoption("markexpr", "") or ""
    return "full" if re.search(r"(?<!not )\b(cpu|gpu)\b", expression) else "quick"


def native_skip_reason(info: DeviceInfo, dtype) -> str | None:
    """Why a matmul benchmark of ``dtype`` does not run on this device (``None`` when it does).

    :func:`accounting.hardware.native.native_matmul`'s answer: the configured floors and
    peaks are for native hardware, so a dtype the device only emulates (bf16 on an
    AVX2 CPU), runs as another (tf32 without TF32 units) or cannot run (fp8 before
    Ada) is skipped with its reason — the report's default dtype list drops the same
    ones with the same reason.

    >>> zen3 = DeviceInfo("cpu", "AMD EPYC", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}), vendor="amd")
    >>> native_skip_reason(zen3, "float32") is None, native_skip_reason(zen3, "bf16").startswith("this CPU has no")
    (True, True)
    """
    answer = native_matmul(info, dtype)
    if answer.native:
        return None
    if not answer.runs:
        return answer.reason
    return (f"{answer.reason} (not benchmarked: the floors are for native hardware; "
            f"`python -m accounting report --dtypes {answer.dtype}` times it anyway)")


def gpu_skip_reason(dtype=None, info: DeviceInfo | None = None):
    """Why a GPU benchmark cannot run here (``None`` when it can); ``dtype`` adds :func:`native_skip_reason`.

    ``info`` is the GPU (default: the current CUDA device, detected).

    >>> import torch
    >>> cuda_available() or gpu_skip_reason().startswith("no CUDA device")
    True
    """
    if not cuda_available():
        return f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__})"
    if dtype is not None:
        return native_skip_reason(info if info is not None else detect_device("cuda"), dtype)
    return None


def gpu_indices(config, device_count: int | None = None) -> list[int]:
    """The CUDA devices the GPU benchmarks run on: ``--gpus`` (checked against the visible ones), else all.

    ``device_count`` defaults to the visible GPUs; with none, ``[0]``: the benchmarks are then
    collected once and skipped with the gpu marker's reason.
    """
    count = len(cuda_device_names()) if device_count is None else device_count
    text = config.getoption("gpus", None)
    if text is None:
        return list(range(count)) or [0]
    indices = []
    for part in text.split(","):
        part = part.strip().removeprefix("cuda:")
        if not part.isdigit():
            raise pytest.UsageError(f"--gpus {text!r}: {part!r} is not a device index (e.g. --gpus 0,3)")
        if count and int(part) >= count:
            raise pytest.UsageError(f"--gpus {text!r}: cuda:{part} does not exist ({count} CUDA device(s) visible)")
        if int(part) not in indices:
            indices.append(int(part))
    if not indices:
        raise pytest.UsageError(f"--gpus {text!r} names no device (e.g. --gpus 0,3)")
    return indices


def gpu_device_params(config, device_count: int | None = None) -> list:
    """``pytest.param("cuda:N", id="cuda:N")`` for each device of :func:`gpu_indices`."""
    return [pytest.param(f"cuda:{index}", id=f"cuda:{index}") for index in gpu_indices(config, device_count)]


def peak_or_skip(info: DeviceInfo, dtype, config) -> float:
    """The device's peak FLOP/s for ``dtype`` (``--peak-tflops`` wins); skips the test, saying how to fix it, when none is known."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PeakUnknownWarning)
        peak = device_peak_flops(info, dtype, override_tflops=config.getoption("peak_tflops"))
    if peak is None:
        pytest.skip(str(caught[-1].message) if caught else f"no {dtype} peak for {info.name}")
    return peak
