"""What the GPU telemetry backends share: asking a vendor library for a reading, and which device is meant.

Both backends (:mod:`~accounting.telemetry.gpu_nvml`, :mod:`~accounting.telemetry.gpu_amdsmi`) read through a
vendor library whose calls fail in two ways: "never" (not supported on this GPU or driver, no such function, no
permission) and "not now" (a timeout, a busy device). :func:`ask_library` records the first as the reason a
reading is missing and does not ask again; the second is asked again at the next reading. Which physical device
torch's ``cuda:N`` is depends on the ``*_VISIBLE_DEVICES`` variables (:func:`visible_entries`) and on what torch
reports of the device (:func:`torch_properties`).

>>> is_transient(type("NVMLError_Timeout", (Exception,), {"value": 10})())
True
"""

import os
import warnings

import torch

NVML_TRANSIENT_ERRORS = {10: "Timeout", 17: "Operating System", 19: "In use by another client", 21: "No data",
                         27: "Not ready", 999: "Unknown Error"}
"""NVML return codes (``nvml.h``) that say "not now" rather than "never": the reading is asked for again."""
AMDSMI_TRANSIENT_ERRORS = ("AmdSmiRetryException", "AmdSmiTimeoutException")

CLOCK_FIELDS = ("clock_mhz_min", "clock_mhz_mean", "clock_mhz_max")
"""The ``Summary`` fields a failed clock call leaves unavailable."""
POWER_FIELDS = ("power_w_mean", "power_w_max")
"""The ``Summary`` fields a failed power call leaves unavailable."""


def is_transient(error: Exception) -> bool:
    """Whether a failed NVML or AMD SMI call may succeed if asked again (a timeout, not "not supported")."""
    if type(error).__name__ in AMDSMI_TRANSIENT_ERRORS:
        return True
    code = getattr(error, "value", None)
    return type(error).__name__.startswith("NVMLError") and code in NVML_TRANSIENT_ERRORS


def describe_failure(call, error: Exception) -> str:
    """``"<call's name>: <error's type>: <error>"``, the reason a reading is missing."""
    return f"{getattr(call, '__name__', call)}: {type(error).__name__}: {error}"


def import_quietly(module: str):
    """``import module``, its warnings silenced."""
    with warnings.catch_warnings():  # the old `pynvml` shim package warns that it is deprecated
        warnings.simplefilter("ignore")
        return __import__(module)


def visible_entries(variable: str) -> list[str] | None:
    """The entries of a ``*_VISIBLE_DEVICES`` variable (``None`` when it is not set)."""
    value = os.environ.get(variable)
    if value is None:
        return None
    return [entry.strip() for entry in value.split(",") if entry.strip()]


def torch_properties(index: int):
    """torch's properties of device ``index`` (``None`` where torch has no such device)."""
    if torch.cuda.is_available() and 0 <= index < torch.cuda.device_count():
        return torch.cuda.get_device_properties(index)
    return None


def ask_library(self, fields, call, *args):
    """``call(*args)``, or ``None`` with the reason recorded for ``fields`` in ``self.unavailable``.

    The ``_ask`` method of both backends (``self``: the backend, with ``name``, ``unavailable`` and ``_failed``).

    A call that cannot succeed (not supported, no such function, no permission) is not asked again; one
    that timed out or was not ready is, and a later answer clears the reason in the summary.
    """
    if fields[0] in self._failed:
        return None
    try:
        return call(*args)
    except Exception as error:  # noqa: BLE001 - NVMLError_NotSupported and kin: a missing reading, not a crash
        if not is_transient(error):
            self._failed.add(fields[0])
        backend = "NVML" if self.name == "nvml" else "AMD SMI"
        for name in fields:
            self.unavailable[name] = f"{backend} {describe_failure(call, error)}"
        return None
