"""Whether CUDA float32 matmuls may use TF32 tensor cores: read the flags, and set them for a block.

>>> with float32_matmul_mode(tf32=False):
...     tf32_enabled()
False
"""

import warnings

import torch

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

    >>> with float32_matmul_mode(tf32=True):
    ...     tf32_enabled()
    True
    """
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
