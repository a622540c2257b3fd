"""Whether CUDA float32 matmuls may use TF32 tensor cores: read the flags, and set them for a block.

>>> with float32_matmul_mode(tf32=False):
...     tf32_enabled()
False

On ROCm the flags are not the whole story: torch's ROCm builds before 2.7 have no TF32 path at all, and
2.7 to 2.9 use it (hipBLASLt's XF32) only with ``HIPBLASLT_ALLOW_TF32=1`` in the environment
(:func:`rocm_tf32_blocker`); without it a "tf32" matmul runs as plain FP32 whatever the flags say.
"""

import os
import re
import warnings

import torch

from accounting.errors import AccountingError

#
# Two APIs set TF32 (torch/csrc .. aten/src/ATen/Context.cpp):
# - legacy: ``torch.set_float32_matmul_precision`` ("highest" / "high" / "medium") and
#   ``torch.backends.cuda.matmul.allow_tf32``; both write one global precision (and, on torch >= 2.9,
#   the per-backend flags below too);
# - new (torch >= 2.9): per-backend ``fp32_precision`` flags ("ieee", "tf32", "bf16", "none" = inherit
#   from the backend's "all", then from "generic"), written alone by their setters.
# Once only the new flags are set, torch >= 2.9 refuses to read the legacy ones (RuntimeError: "mix of the
# legacy and new APIs"), and so does cuBLAS's allowTF32CuBLAS(). So flags are read through the new API where
# it exists, and switched with the legacy setter, which keeps both consistent.

_LEGACY_LINKED = (("cuda", "matmul"), ("mkldnn", "matmul"))
"""Backend flags ``torch.set_float32_matmul_precision`` writes besides the global precision (torch >= 2.9)."""


HIPBLASLT_ALLOW_TF32 = "HIPBLASLT_ALLOW_TF32"
"""The environment variable torch 2.7 to 2.9 on ROCm read before a float32 matmul may use TF32 (XF32).

ATen ``Context.cpp``: ``allowTF32CuBLAS()`` returns false and ``setAllowTF32CuBLAS()`` does nothing under
``USE_ROCM`` unless ``c10::utils::check_env("HIPBLASLT_ALLOW_TF32")`` is true, which only the text ``"1"`` is.
Added with hipBLASLt TF32 for ``aten::mm`` (pytorch/pytorch#143549, relanded for torch 2.7); earlier
releases compile the TF32 compute type out of ROCm builds (``#ifndef USE_ROCM`` in ``CUDABlas.cpp``). The
check is gone from later sources, where the flags alone decide, as on CUDA (``docs/source/notes/hip.rst``)."""
ROCM_TF32_SINCE = (2, 7)
"""The first torch release whose ROCm build can run a float32 matmul on TF32 (XF32) units."""
ROCM_TF32_ENV_UNTIL = (2, 10)
"""The first torch release whose ROCm build no longer asks for ``HIPBLASLT_ALLOW_TF32`` (2.9's source still
does; the newest sources do not, and a 2.10 build on gfx950 was reported running TF32 from the flag alone)."""


def torch_release(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a torch version string (local and pre-release parts ignored).

    >>> torch_release("2.8.0+rocm6.4"), torch_release("2.10.0.dev20251101"), torch_release("2.13.0a0+git94c6e04")
    ((2, 8), (2, 10), (2, 13))
    >>> torch_release("nightly")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: torch version 'nightly' does not start with major.minor
    """
    match = re.match(r"\s*(\d+)\.(\d+)", str(version))
    if match is None:
        raise AccountingError(f"torch version {version!r} does not start with major.minor")
    return int(match.group(1)), int(match.group(2))


def rocm_tf32_blocker(version: str | None = None, environ=None) -> str | None:
    """Why torch's ROCm build runs a float32 matmul as plain FP32 even with TF32 allowed, and how to change
    that; ``None`` when the TF32 flags decide (as on CUDA).

    ``version`` defaults to ``torch.__version__``, ``environ`` to ``os.environ``: what this process's torch
    will do. Only the arch (gfx942, gfx950 have XF32 units) is left to :mod:`accounting.hardware.native`.

    >>> print(rocm_tf32_blocker("2.8.0+rocm6.4", {HIPBLASLT_ALLOW_TF32: "1"}))
    None
    >>> rocm_tf32_blocker("2.8.0+rocm6.4", {})  # doctest: +NORMALIZE_WHITESPACE
    'torch 2.8.0+rocm6.4 on ROCm uses TF32 (XF32) for float32 matmuls only with HIPBLASLT_ALLOW_TF32=1 in the
    environment (it is not set), so tf32 runs as plain FP32; to turn TF32 on, run with HIPBLASLT_ALLOW_TF32=1
    (set before Python starts)'
    """
    version = torch.__version__ if version is None else version
    environ = os.environ if environ is None else environ
    release = torch_release(version)
    if release < ROCM_TF32_SINCE:
        return (f"torch {version} on ROCm has no TF32 (XF32) path for float32 matmuls (it came with torch 2.7, "
                "through hipBLASLt), so tf32 runs as plain FP32; to turn TF32 on, install torch 2.7 or later "
                f"(2.7 to 2.9 also need {HIPBLASLT_ALLOW_TF32}=1 in the environment)")
    if release < ROCM_TF32_ENV_UNTIL and environ.get(HIPBLASLT_ALLOW_TF32) != "1":
        value = environ.get(HIPBLASLT_ALLOW_TF32)
        now = "it is not set" if value is None else f"it is {value!r}; torch reads only '1' as on"
        return (f"torch {version} on ROCm uses TF32 (XF32) for float32 matmuls only with {HIPBLASLT_ALLOW_TF32}=1 "
                f"in the environment ({now}), so tf32 runs as plain FP32; to turn TF32 on, run with "
                f"{HIPBLASLT_ALLOW_TF32}=1 (set before Python starts)")
    return None


def _rocm_blocks_tf32() -> bool:
    """Whether :func:`rocm_tf32_blocker` blocks TF32 here; a torch version it cannot read blocks nothing."""
    try:
        return rocm_tf32_blocker() is not None
    except AccountingError:
        return False


def _new_tf32_api() -> bool:
    """Whether this torch has the per-backend ``fp32_precision`` flags (2.9+)."""
    return hasattr(torch._C, "_get_fp32_precision_getter")


def _fp32_precision(backend: str, op: str) -> str:
    """A per-backend flag as set (``"none"`` included), read without any consistency check."""
    return torch._C._get_fp32_precision_getter(backend, op)


def _resolved_fp32_precision(backend: str, op: str) -> str:
    """The precision a backend's op really uses: its flag, else its backend's ``"all"``, else ``generic``'s."""
    for key in ((backend, op), (backend, "all"), ("generic", "all")):
        precision = _fp32_precision(*key)
        if precision != "none":
            return precision
    return "none"


def _legacy(read):
    """``read()`` a legacy flag: ``None`` where torch refuses (mixed APIs); quiet where torch warns it is deprecated."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*new API settings to control TF32", category=UserWarning)
        try:
            return read()
        except RuntimeError:
            return None


def tf32_enabled() -> bool:
    """Whether CUDA float32 matmuls may use TF32 tensor cores right now (reads flags; no CUDA init, never raises).

    On a ROCm build, also what :func:`rocm_tf32_blocker` says: torch 2.9 reads the per-backend flag as
    ``"tf32"`` without ``HIPBLASLT_ALLOW_TF32=1``, yet runs plain FP32.

    >>> with float32_matmul_mode(tf32=True):
    ...     tf32_enabled()
    True
    """
    if getattr(torch.version, "hip", None) and _rocm_blocks_tf32():
        return False
    if _new_tf32_api():
        return _resolved_fp32_precision("cuda", "matmul") == "tf32"
    return bool(torch.backends.cuda.matmul.allow_tf32)


def tf32_flags() -> dict:
    """Every TF32 setting as torch holds it, read without raising (for machine info).

    ``float32_matmul_precision`` (the legacy global) is ``None`` where torch refuses to read it
    because the two APIs were mixed; ``cuda_matmul_fp32_precision`` is ``None`` before torch 2.9.

    >>> sorted(tf32_flags())
    ['cuda_matmul', 'cuda_matmul_fp32_precision', 'cudnn', 'float32_matmul_precision']
    """
    new = _new_tf32_api()
    return {
        "cuda_matmul": tf32_enabled(),
        "cuda_matmul_fp32_precision": _fp32_precision("cuda", "matmul") if new else None,
        "float32_matmul_precision": _legacy(torch.get_float32_matmul_precision),
        "cudnn": (_resolved_fp32_precision("cuda", "conv") == "tf32") if new
        else bool(torch.backends.cudnn.allow_tf32),
    }


class float32_matmul_mode:  # noqa: N801 - used as a context manager, named like one
    """Set whether CUDA float32 matmuls use TF32 (``tf32=True``) or plain FP32, and restore exactly on exit.

    Switched with ``torch.set_float32_matmul_precision`` ("high" / "highest"), which writes the legacy
    global and, on torch >= 2.9, the per-backend flags, so both APIs agree inside the block (nothing that
    reads ``allow_tf32`` or ``get_float32_matmul_precision()`` raises). On exit the legacy global and the
    per-backend flags it touched are put back as they were, a mixed state included. Touches no device.

    >>> before = tf32_enabled()
    >>> with float32_matmul_mode(tf32=False):
    ...     tf32_enabled(), torch.get_float32_matmul_precision()
    (False, 'highest')
    >>> tf32_enabled() == before
    True
    """

    def __init__(self, *, tf32: bool):
        self.tf32 = bool(tf32)
        self._saved = None

    def __enter__(self):
        linked = {}
        if _new_tf32_api():
            linked = {key: _fp32_precision(*key) for key in _LEGACY_LINKED}
            for key in linked:  # with these at "ieee" the legacy global reads without a mixed-API error
                torch._C._set_fp32_precision_setter(*key, "ieee")
        self._saved = (_legacy(torch.get_float32_matmul_precision), linked)
        torch.set_float32_matmul_precision("high" if self.tf32 else "highest")
        return self

    def __exit__(self, *exc_info):
        legacy, linked = self._saved
        torch.set_float32_matmul_precision(legacy)
        for key, value in linked.items():
            torch._C._set_fp32_precision_setter(*key, value)
        return False
