"""Health counters of one device, read before and after a run: the types every backend fills in.

A reading is a :class:`Counter`: a value, or "not available" with the reason (the library is
missing, the device does not support it, ECC is off, no permission). Nothing here raises for a
missing reading and nothing reads as healthy by default: :mod:`accounting.health.states` lists
every counter it could not read beside its verdict.

The backends: :func:`accounting.health.nvml.read_nvml` (NVIDIA), :func:`accounting.health.amd.read_amdsmi`
(AMD), :func:`accounting.health.cpu.read_cpu` (Linux EDAC and machine checks). Each returns a
:class:`Snapshot` keyed by the names below, so the judgement does not care which vendor answered.

Names (:data:`NAMES`): counts since the driver loaded (or the machine booted) unless said otherwise.

>>> snap = Snapshot(DeviceId("cuda", 0, uuid="GPU-1"), {ECC_CORRECTED: Counter.of(3),
...                 ECC_UNCORRECTED: Counter.missing("ECC is disabled")})
>>> snap.value(ECC_CORRECTED), snap.value(ECC_UNCORRECTED), snap.unavailable()
(3, None, {'ecc.uncorrected': 'ECC is disabled'})
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self

from accounting.errors import AccountingTypeError

ECC_CORRECTED = "ecc.corrected"
"""Correctable memory errors (NVML: volatile, since the driver loaded; AMD: the total count)."""
ECC_UNCORRECTED = "ecc.uncorrected"
"""Uncorrectable memory errors, same scope."""
ECC_DEFERRED = "ecc.deferred"
"""AMD: uncorrectable errors whose handling was deferred (poisoned data)."""
ECC_AGGREGATE_CORRECTED = "ecc.aggregate.corrected"
"""NVML: correctable errors over the board's life (kept in its infoROM): history, not judged."""
ECC_AGGREGATE_UNCORRECTED = "ecc.aggregate.uncorrected"
PAGES_RETIRED = "pages.retired"
"""Memory pages retired (NVML, before Ampere) or reserved as bad (AMD)."""
PAGES_PENDING = "pages.pending"
"""A page retirement waiting for the next reset (bool)."""
PAGES_UNRESERVABLE = "pages.unreservable"
"""AMD: bad pages the driver could not reserve."""
REMAP_CORRECTED = "remap.corrected"
"""NVML (Ampere and newer): rows remapped for correctable errors."""
REMAP_UNCORRECTED = "remap.uncorrected"
REMAP_PENDING = "remap.pending"
"""A row remap waiting for the next reset (bool)."""
REMAP_FAILURE = "remap.failure"
"""A row remap failed: no spare row left (bool)."""
PCIE_GENERATION = "pcie.generation"
PCIE_GENERATION_MAX = "pcie.generation_max"
"""The highest generation the device and its slot can train to."""
PCIE_SPEED = "pcie.speed_gts"
"""AMD: the link's speed in GT/s (the current and the maximum: AMD reports speeds, not generations)."""
PCIE_SPEED_MAX = "pcie.speed_gts_max"
PCIE_WIDTH = "pcie.width"
PCIE_WIDTH_MAX = "pcie.width_max"
LINKS_UP = "links.up"
"""GPU-to-GPU links (NVLink, xGMI) that are up: a tuple of link numbers."""
LINKS_DOWN = "links.down"
LINK_ERRORS = "links.errors"
"""Errors counted on those links (NVLink replay, recovery and CRC counters; xGMI ECC counts), summed."""
POWER_LIMIT_W = "power.limit_w"
"""The power limit in force (NVML: the enforced one, the lowest of every limit set)."""
POWER_DEFAULT_LIMIT_W = "power.default_limit_w"
EDAC_CORRECTED = "edac.corrected"
"""CPU memory controllers (Linux EDAC): correctable errors since boot, all controllers."""
EDAC_UNCORRECTED = "edac.uncorrected"
MACHINE_CHECKS = "mce.exceptions"
"""Machine-check exceptions taken, all CPUs (``/proc/interrupts``, ``MCE:``)."""
XIDS = "xids"
"""NVIDIA Xid events seen during the window: a tuple of Xid numbers (from :class:`Window`)."""

NAMES = (ECC_CORRECTED, ECC_UNCORRECTED, ECC_DEFERRED, ECC_AGGREGATE_CORRECTED, ECC_AGGREGATE_UNCORRECTED,
         PAGES_RETIRED, PAGES_PENDING, PAGES_UNRESERVABLE, REMAP_CORRECTED, REMAP_UNCORRECTED, REMAP_PENDING,
         REMAP_FAILURE, PCIE_GENERATION, PCIE_GENERATION_MAX, PCIE_SPEED, PCIE_SPEED_MAX, PCIE_WIDTH, PCIE_WIDTH_MAX,
         LINKS_UP, LINKS_DOWN, LINK_ERRORS, POWER_LIMIT_W, POWER_DEFAULT_LIMIT_W, EDAC_CORRECTED, EDAC_UNCORRECTED,
         MACHINE_CHECKS, XIDS)


@dataclass(frozen=True)
class Counter:
    """One reading: ``value``, or ``None`` with ``reason`` saying why it is not available."""

    value: object = None
    reason: str = ""

    @classmethod
    def of(cls, value) -> "Counter":
        return cls(value, "")

    @classmethod
    def missing(cls, reason: str) -> "Counter":
        return cls(None, reason or "not available")

    @property
    def available(self) -> bool:
        return self.value is not None


@dataclass(frozen=True)
class DeviceId:
    """Which device: its kind (``cuda``, ``rocm``, ``cpu``), index, UUID, serial and PCI bus id, where known.

    >>> DeviceId("cuda", 3, uuid="GPU-8f2c", serial="1652", pci_bus_id="00000000:3B:00.0").label
    'cuda:3 (GPU-8f2c, serial 1652, PCI 00000000:3B:00.0)'
    >>> DeviceId("cpu", host="node07").label
    'cpu (node07)'
    """

    kind: str
    index: int | None = None
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    host: str | None = None

    @property
    def label(self) -> str:
        name = self.kind if self.index is None else f"{self.kind}:{self.index}"
        details = [part for part in (self.uuid, self.serial and f"serial {self.serial}",
                                     self.pci_bus_id and f"PCI {self.pci_bus_id}", self.host) if part]
        return f"{name} ({', '.join(details)})" if details else name


@dataclass(frozen=True)
class Snapshot:
    """Every counter of one device at one moment. ``lost`` is set when the device stopped answering (fell off the bus)."""

    device: DeviceId
    counters: dict = field(default_factory=dict)
    lost: str | None = None
    taken_at: float = 0.0

    def value(self, name: str):
        """The reading's value, ``None`` when not available or not read."""
        counter = self.counters.get(name)
        return None if counter is None else counter.value

    def unavailable(self) -> dict[str, str]:
        """``{name: reason}`` for every counter read but not available."""
        return {name: counter.reason for name, counter in self.counters.items() if not counter.available}


class Reader:
    """Calls one vendor library's functions, turning each failure into "not available" with its reason.

    ``lost_codes`` are the library's error codes that mean the device is gone (NVML's
    ``NVML_ERROR_GPU_IS_LOST``): the first one seen is kept in :attr:`lost`.
    """

    def __init__(self, library, name: str, *, lost_codes=()):
        self.library = library
        self.name = name
        self.lost_codes = frozenset(lost_codes)
        self.lost: str | None = None

    def call(self, function: str, *args):
        """``(value, None)``, or ``(None, reason)`` when the function is missing or raises."""
        fn = getattr(self.library, function, None)
        if fn is None:
            return None, f"{self.name} has no {function} (an older library)"
        try:
            return fn(*args), None
        except Exception as error:  # noqa: BLE001 - any library failure is a reading not available, never a crash
            code = getattr(error, "value", getattr(error, "err_code", None))
            if code in self.lost_codes and self.lost is None:
                self.lost = f"{function} failed: {error or type(error).__name__} (the device is lost)"
            return None, f"{function} failed: {str(error) or type(error).__name__}"

    def constant(self, name: str):
        """A constant of the library, or ``None``."""
        return getattr(self.library, name, None)


def snapshot(device: DeviceId, counters: dict, *, lost: str | None = None, now: Callable[[], float] = time.time) -> Snapshot:
    """A :class:`Snapshot` stamped now; every name must be one of :data:`NAMES`."""
    for name, counter in counters.items():
        if name not in NAMES or not isinstance(counter, Counter):
            raise AccountingTypeError(f"counter {name!r} must be one of the known names with a Counter, got {counter!r}")
    return Snapshot(device, dict(counters), lost, now())


class Window:
    """Counters read before and after a run (and, for link state, under load), plus the Xid events in between.

    ``read()`` returns a :class:`Snapshot`; ``events`` is optional (an object with ``start()`` and
    ``stop() -> Counter`` of :data:`XIDS`, such as :class:`accounting.health.nvml.XidEvents`).
    Call :meth:`under_load` while the timed work still runs (on a GPU: right after queuing the last
    call, before synchronising): idle PCIe links train down to save power, so only a reading under
    load says whether the link trained to its maximum.

    >>> reads = iter([Snapshot(DeviceId("cpu"), {EDAC_CORRECTED: Counter.of(n)}) for n in (4, 6)])
    >>> with Window(lambda: next(reads)) as window:
    ...     pass
    >>> window.before.value(EDAC_CORRECTED), window.after.value(EDAC_CORRECTED)
    (4, 6)
    """

    def __init__(self, read: Callable[[], Snapshot], *, events=None):
        if not callable(read):
            raise AccountingTypeError(f"read must be callable, got {read!r}")
        self.read = read
        self.events = events
        self.before: Snapshot | None = None
        self.load: Snapshot | None = None
        self.after: Snapshot | None = None
        self.xids = Counter.missing("no Xid event source for this device")

    def __enter__(self) -> Self:
        self.before = self.read()
        if self.events is not None:
            self.events.start()
        return self

    def under_load(self) -> Snapshot:
        """Read now, while the device is busy; kept in :attr:`load`."""
        self.load = self.read()
        return self.load

    def __exit__(self, *exc) -> None:
        if self.events is not None:
            self.xids = self.events.stop()
        self.after = self.read()
