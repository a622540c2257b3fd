"""The GPU backends of :mod:`accounting.telemetry`: which one a CUDA device gets (:func:`open_gpu_backend`).

- :mod:`~accounting.telemetry.gpu_nvml` — NVML (``nvidia-ml-py``): NVIDIA GPUs and their MIG slices;
- :mod:`~accounting.telemetry.gpu_amdsmi` — AMD SMI (``amdsmi``): ROCm devices;
- :mod:`~accounting.telemetry.gpu_calls` — what the two share: a failed library call kept as the reason a
  reading is missing, the ``*_VISIBLE_DEVICES`` variables, torch's view of a device.

Neither library comes with torch: ``pip install 'pytest-accounting[gpu]'`` brings
``nvidia-ml-py`` (module ``pynvml``); ROCm installs ``amdsmi`` with the driver stack.
Without them every GPU reading is ``None`` with the reason, never an error.

The backends' public names are importable from here too, as before they had modules of their own.

>>> decode_clock_event_reasons(0x4 | 0x20 | 0x1)
('sw_power_cap', 'sw_thermal_slowdown')
"""

import torch

from accounting.telemetry.gpu_amdsmi import (  # noqa: F401 (the AMD SMI backend's names, importable from here)
    AMDSMI_POWER_SOURCES,
    AMDSMI_VIOLATIONS,
    SMU_THROTTLER_BITS,
    AmdSmiBackend,
    amdsmi_handle,
    decode_indep_throttle_status,
    decode_violation_status,
    open_amdsmi,
)
from accounting.telemetry.gpu_nvml import (  # noqa: F401 (the NVML backend's names, importable from here)
    BUSY_SIBLING_MEMORY_BYTES,
    BUSY_SIBLING_UTILISATION_PCT,
    NOT_SLOWING,
    NVML_CLOCK_EVENT_REASONS,
    NVML_ENERGY_UPDATE_PERIOD_S,
    NVML_FI_DEV_POWER_INSTANT,
    NVML_VALUE_TYPES,
    OWN_CONTEXT_ALLOWANCE_BYTES,
    NvmlBackend,
    decode_clock_event_reasons,
    nvml_field_value,
    open_nvml,
    power_source_of_power_usage,
)
from accounting.telemetry.readings import NoBackend


def open_gpu_backend(index: int, *, fleet_devices=()):
    """The backend for CUDA device ``index``: AMD SMI first on ROCm builds, NVML first otherwise; else a :class:`NoBackend`.

    ``fleet_devices``: torch indices of this node's GPUs that the fleet's other ranks use (see :class:`NvmlBackend`).
    """
    openers = [open_amdsmi, open_nvml] if getattr(torch.version, "hip", None) else [open_nvml, open_amdsmi]
    reasons = []
    for opener in openers:
        backend, reason = opener(index, tuple(fleet_devices))
        if backend is not None:
            return backend
        reasons.append(reason)
    return NoBackend("; ".join(reasons))
