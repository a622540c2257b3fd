"""The health counters of the report's devices, read around the run: before, under load, after.

- The timed GPU (``cuda:N``): NVML's ECC, row-remapping, retired-page, PCIe, NVLink and power-limit
  counters and its Xid events (:func:`accounting.health.nvml.read_nvml`, :class:`~accounting.health.nvml.XidEvents`),
  or AMD SMI's (:func:`accounting.health.amd.read_amdsmi`), on the handle the telemetry finds for the device
  (:func:`accounting.telemetry.gpu.open_gpu_backend`: by UUID, a MIG slice's parent GPU, AMD by PCI address).
- The host's CPU: EDAC memory errors and machine checks (:func:`accounting.health.cpu.read_cpu`).

A counter that cannot be read is "not available" with its reason, never zero: where no library
answers at all, every GPU counter is listed as not available. Xid events exist on NVIDIA only:
on AMD GPUs and CPUs there is nothing to read, so they are left out rather than listed as unchecked.

>>> with HealthWindows([CpuCounters(root="/nonexistent")]) as windows:
...     windows.under_load()
>>> window = windows.windows[0]
>>> window.before.device.kind, window.after.value("edac.corrected"), window.xids
('cpu', None, None)
"""

import contextlib

from accounting.hardware.clocks import synchronize
from accounting.health import counters as names
from accounting.health.amd import read_amdsmi
from accounting.health.counters import Counter, DeviceId, Snapshot, Window, snapshot
from accounting.health.cpu import read_cpu
from accounting.health.nvml import XidEvents, nvml_identity, read_nvml
from accounting.telemetry.gpu import open_gpu_backend

GPU_COUNTERS = tuple(name for name in names.NAMES
                     if name not in (names.EDAC_CORRECTED, names.EDAC_UNCORRECTED, names.MACHINE_CHECKS, names.XIDS))
"""What a GPU reader fills in (listed as not available when no library answers)."""

LOAD_CALLS = 8
"""Products queued before the under-load reading (the device is then busy for their whole length)."""


class NoEvents:
    """The event source of a device that has no Xid events (AMD GPUs, CPUs): nothing to read, nothing unchecked."""

    def start(self) -> None:
        pass

    def stop(self):
        return None


class CpuCounters:
    """The host CPU's EDAC and machine-check counters (``root`` stands for ``/`` in tests)."""

    label = "cpu"

    def __init__(self, *, root="/"):
        self.root = root

    def read(self) -> Snapshot:
        return read_cpu(root=self.root)

    def events(self):
        return NoEvents()


class _HeldXids:
    """NVML Xid events of one GPU across a window: an NVML session held open from ``start()`` to ``stop()``.

    Started after the window's first reading, which says whose GPU it is: an AMD GPU has no Xids
    (``stop()`` gives ``None``: nothing to check, not a reading missing).
    """

    def __init__(self, counters: "GpuCounters"):
        self.counters = counters
        self.backend = None
        self.events = None
        self.reason = "Xid events not started"
        self.none_to_read = False

    def start(self) -> None:
        if self.counters.vendor == "amdsmi":
            self.none_to_read = True
            return
        backend = self.counters.open_backend(self.counters.index)
        if getattr(backend, "name", None) != "nvml":
            self.reason = _why_not(backend, "no NVML for Xid events")
            _close(backend)
            return
        try:
            self.events = XidEvents(backend.library, backend.device_handle())
        except Exception as error:  # noqa: BLE001 - a MIG parent NVML will not give: Xids not available, with why
            self.reason = f"no NVML handle for Xid events: {type(error).__name__}: {error}"
            _close(backend)
            return
        self.backend = backend
        self.events.start()

    def stop(self) -> Counter | None:
        if self.none_to_read:
            return None
        if self.events is None:
            return Counter.missing(self.reason)
        try:
            return self.events.stop()
        finally:
            _close(self.backend)
            self.backend = self.events = None


def _why_not(backend, default: str) -> str:
    reasons = sorted(set((getattr(backend, "unavailable", None) or {}).values()))
    return "; ".join(reasons) or default


def _close(backend) -> None:
    close = getattr(backend, "close", None)
    if close is not None:
        close()


class GpuCounters:
    """The counters of CUDA (or ROCm) device ``index``, through the telemetry's backend for it.

    Each reading opens the backend afresh (NVML and AMD SMI sessions are cheap to open, and the
    report's samplers open and close their own meanwhile); the Xid events hold one NVML session across
    the window. ``open_backend`` is :func:`accounting.telemetry.gpu.open_gpu_backend` (tests pass a fake).
    """

    def __init__(self, index: int, *, open_backend=open_gpu_backend):
        self.index = index
        self.label = f"cuda:{index}"
        self.open_backend = open_backend
        self.vendor = None
        """``"nvml"`` or ``"amdsmi"`` once a reading found one (decides whether Xids exist)."""

    def _missing(self, reason: str) -> Snapshot:
        return snapshot(DeviceId("cuda", self.index), {name: Counter.missing(reason) for name in GPU_COUNTERS})

    def read(self) -> Snapshot:
        backend = self.open_backend(self.index)
        try:
            name = getattr(backend, "name", None)
            if name not in ("nvml", "amdsmi"):
                return self._missing(_why_not(backend, "no GPU library answered"))
            self.vendor = name
            try:
                handle = backend.device_handle()
            except Exception as error:  # noqa: BLE001 - no handle for the whole GPU: nothing read, said why
                return self._missing(f"no {name} handle for the whole GPU: {type(error).__name__}: {error}")
            if name == "nvml":
                return read_nvml(backend.library, handle, device=nvml_identity(backend.library, handle))
            return read_amdsmi(backend.library, handle)
        finally:
            _close(backend)

    def events(self):
        """Xid events on NVIDIA; none on AMD (it has no Xids)."""
        return _HeldXids(self)


def device_counters(info, *, open_backend=open_gpu_backend, cpu_root="/") -> list:
    """The counter readers for a report on ``info`` (a :class:`~accounting.hardware.devices.DeviceInfo`):
    the GPU and the host CPU for a CUDA device, the CPU alone for a CPU run."""
    if info.kind == "cuda":
        return [GpuCounters(info.index or 0, open_backend=open_backend), CpuCounters(root=cpu_root)]
    return [CpuCounters(root=cpu_root)]


class HealthWindows(contextlib.AbstractContextManager):
    """One :class:`~accounting.health.counters.Window` per reader: entered, read under load and left together."""

    def __init__(self, readers):
        self.readers = list(readers)
        self.windows: list[Window] = []

    def __enter__(self):
        self.windows = [Window(reader.read, events=reader.events()) for reader in self.readers]
        for window in self.windows:
            window.__enter__()
        return self

    def under_load(self) -> None:
        """Read every device now (call it while the timed device is busy)."""
        for window in self.windows:
            window.under_load()

    def __exit__(self, *exc) -> None:
        for window in self.windows:
            window.__exit__(*exc)


def read_under_load(windows: HealthWindows, fn, device, *, calls: int = LOAD_CALLS) -> None:
    """Queue ``calls`` calls of ``fn`` on ``device``, read every window while they run, then wait for them.

    On a GPU the calls run asynchronously, so the reading lands while the device is busy and its
    PCIe link is trained up; on a CPU each call returns when done, and the reading follows them.
    """
    for _ in range(calls):
        fn()
    windows.under_load()
    synchronize(device)
