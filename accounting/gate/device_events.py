"""Faults of a GPU during a gated run: new ECC errors and Xid events disturb it.

A GPU that corrected or failed to correct a memory error, or whose driver raised an Xid (a
fault: a reset channel, a fallen-off-the-bus device, a page retirement), ran the benchmarks on
something other than the healthy device the baseline ran on. The gate reads the volatile ECC
counts with each load-guard reading (:func:`read_ecc`, kept under ``"ecc"``) and watches Xid
events during the whole pytest process (:class:`XidWatch`, kept under ``"xids"``); either
disturbs the run (:func:`fault_disturbances`). A count the device does not give (ECC off, a
driver without events) decides nothing. The counters and events are read by
:mod:`accounting.health.nvml`, the package's health check.

>>> fault_disturbances({"before": {"ecc": {"corrected": 2, "uncorrected": 0}},
...                     "after": {"ecc": {"corrected": 5, "uncorrected": 0}}, "xids": [79]})
['3 corrected ECC error(s) during the run', 'Xid 79 during the run']
>>> fault_disturbances({"before": {"ecc": {"corrected": None}}, "after": {"ecc": {"corrected": 4}}, "xids": None})
[]
"""

from accounting.health.counters import ECC_CORRECTED, ECC_UNCORRECTED
from accounting.health.nvml import XidEvents, read_nvml
from accounting.telemetry.gpu_nvml import open_nvml

ECC_KEY = "ecc"
"""Key of the ECC counts in a load-guard reading."""
XIDS_KEY = "xids"
"""Key of the Xids seen during the run in the gate's record (a list; ``None`` where they could not be watched)."""


def read_ecc(nvml, handle) -> dict:
    """The volatile ECC counts (since the driver loaded) of the GPU behind ``handle``: ``None`` where not given."""
    snapshot = read_nvml(nvml, handle)
    return {"corrected": snapshot.value(ECC_CORRECTED), "uncorrected": snapshot.value(ECC_UNCORRECTED)}


def open_device_nvml(device: str):
    """The telemetry's NVML backend of ``device`` (``"cuda:0"``; the caller closes it), ``None`` off NVIDIA GPUs or
    without NVML: the gate's readings of settings, ECC counts and Xids go through it."""
    if not str(device).startswith("cuda"):
        return None
    backend, _ = open_nvml(int(str(device).split(":")[1]) if ":" in str(device) else 0, ())
    return backend


class XidWatch:
    """Xid events of one GPU while a run lasts: :meth:`stop` gives the Xids seen (``None``: not watched)."""

    def __init__(self, nvml, handle, *, close=lambda: None):
        self._events = XidEvents(nvml, handle)
        self._close = close
        self._events.start()

    def stop(self) -> list | None:
        try:
            seen = self._events.stop()
        finally:
            self._close()
        return list(seen.value) if seen.available else None


def watch_xids(device: str) -> XidWatch | None:
    """Start watching ``device``'s Xid events (``None`` off NVIDIA GPUs or without NVML)."""
    backend = open_device_nvml(device)
    if backend is None:
        return None
    return XidWatch(backend.nvml, backend.device_handle(), close=backend.close)  # Xids are the GPU's, not a MIG slice's


def _count(reading, name):
    value = ((reading or {}).get(ECC_KEY) or {}).get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def fault_disturbances(guard: dict | None) -> list[str]:
    """The faults a saved run's gate record shows: ECC counts that rose between before and after, Xids seen."""
    guard = guard or {}
    reasons = []
    for name in ("uncorrected", "corrected"):
        first, last = _count(guard.get("before"), name), _count(guard.get("after"), name)
        if first is not None and last is not None and last > first:
            reasons.append(f"{last - first} {name} ECC error(s) during the run")
    xids = guard.get(XIDS_KEY)
    if isinstance(xids, list) and xids:
        reasons.append(f"Xid {', '.join(str(xid) for xid in xids)} during the run")
    return reasons
