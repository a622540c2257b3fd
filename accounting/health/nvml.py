"""NVIDIA health counters through NVML (``nvidia-ml-py``, module ``pynvml``), and Xid events during a window.

The caller passes the ``pynvml`` module (initialised) and a device handle, so tests pass a fake.
Every name below is checked against nvidia-ml-py's ``pynvml.py`` (13.x):

- ECC: ``nvmlDeviceGetEccMode`` (current, pending), ``nvmlDeviceGetTotalEccErrors(handle,
  NVML_MEMORY_ERROR_TYPE_CORRECTED | _UNCORRECTED, NVML_VOLATILE_ECC | NVML_AGGREGATE_ECC)``;
- page retirement (before Ampere): ``nvmlDeviceGetRetiredPages(handle,
  NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS | _DOUBLE_BIT_ECC_ERROR)`` (a list of
  addresses), ``nvmlDeviceGetRetiredPagesPendingStatus`` (``NVML_FEATURE_ENABLED`` when pending);
- row remapping (Ampere and newer): ``nvmlDeviceGetRemappedRows`` → ``(corrected, uncorrected,
  pending, failure)``;
- PCIe: ``nvmlDeviceGetCurrPcieLinkGeneration``/``Width`` against ``nvmlDeviceGetMaxPcieLinkGeneration``/
  ``Width`` (the most the device *and its slot* allow: a Gen5 card in a Gen4 slot is not degraded);
- NVLink: ``nvmlDeviceGetNvLinkState(handle, link)`` for links ``0..NVML_NVLINK_MAX_LINKS − 1`` (a link
  the device lacks raises), ``nvmlDeviceGetNvLinkErrorCounter(handle, link, counter)`` for
  ``NVML_NVLINK_ERROR_DL_REPLAY``, ``_DL_RECOVERY``, ``_DL_CRC_FLIT``, ``_DL_CRC_DATA``;
- power (mW): ``nvmlDeviceGetEnforcedPowerLimit`` (else ``nvmlDeviceGetPowerManagementLimit``) against
  ``nvmlDeviceGetPowerManagementDefaultLimit``;
- Xid events: ``nvmlEventSetCreate``, ``nvmlDeviceRegisterEvents(handle, nvmlEventTypeXidCriticalError,
  set)``, ``nvmlEventSetWait_v2(set, timeout_ms)`` (raises ``NVML_ERROR_TIMEOUT`` when no event is
  waiting; an event's ``eventData`` is the Xid), ``nvmlEventSetFree``;
- identity: ``nvmlDeviceGetIndex``, ``nvmlDeviceGetUUID``, ``nvmlDeviceGetSerial``, ``nvmlDeviceGetPciInfo().busId``.

An error with ``NVML_ERROR_GPU_IS_LOST`` (15) marks the device lost.
"""

import socket

from accounting.health.counters import (
    ECC_AGGREGATE_CORRECTED,
    ECC_AGGREGATE_UNCORRECTED,
    ECC_CORRECTED,
    ECC_UNCORRECTED,
    LINK_ERRORS,
    LINKS_DOWN,
    LINKS_UP,
    PAGES_PENDING,
    PAGES_RETIRED,
    PCIE_GENERATION,
    PCIE_GENERATION_MAX,
    PCIE_WIDTH,
    PCIE_WIDTH_MAX,
    POWER_DEFAULT_LIMIT_W,
    POWER_LIMIT_W,
    REMAP_CORRECTED,
    REMAP_FAILURE,
    REMAP_PENDING,
    REMAP_UNCORRECTED,
    Counter,
    DeviceId,
    Reader,
    Snapshot,
    snapshot,
)

NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_TIMEOUT = 10
NVLINK_ERROR_COUNTERS = ("NVML_NVLINK_ERROR_DL_REPLAY", "NVML_NVLINK_ERROR_DL_RECOVERY",
                         "NVML_NVLINK_ERROR_DL_CRC_FLIT", "NVML_NVLINK_ERROR_DL_CRC_DATA")
MAX_EVENTS_PER_POLL = 1000
"""Events drained from a set per :meth:`XidEvents.poll` at most (a storm must not hang the caller)."""


def _text(value) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_identity(nvml, handle, *, index: int | None = None) -> DeviceId:
    """The device's index, UUID, serial and PCI bus id, each where NVML gives it."""
    reader = Reader(nvml, "NVML")
    if index is None:
        index, _ = reader.call("nvmlDeviceGetIndex", handle)
    uuid, _ = reader.call("nvmlDeviceGetUUID", handle)
    serial, _ = reader.call("nvmlDeviceGetSerial", handle)
    pci, _ = reader.call("nvmlDeviceGetPciInfo", handle)
    bus = _text(getattr(pci, "busId", None)) if pci is not None else None
    return DeviceId("cuda", index, _text(uuid), _text(serial), bus, socket.gethostname())


def _ecc(reader, handle) -> dict:
    mode, reason = reader.call("nvmlDeviceGetEccMode", handle)
    names = ((ECC_CORRECTED, "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"),
             (ECC_UNCORRECTED, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),
             (ECC_AGGREGATE_CORRECTED, "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_AGGREGATE_ECC"),
             (ECC_AGGREGATE_UNCORRECTED, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC"))
    if mode is None:
        return {name: Counter.missing(f"ECC mode unknown: {reason}") for name, _, _ in names}
    if not mode[0]:
        return {name: Counter.missing("ECC is disabled on this device") for name, _, _ in names}
    out = {}
    for name, error_type, counter_type in names:
        value, reason = reader.call("nvmlDeviceGetTotalEccErrors", handle, reader.constant(error_type),
                                    reader.constant(counter_type))
        out[name] = Counter.missing(reason) if value is None else Counter.of(int(value))
    return out


def _pages(reader, handle) -> dict:
    total, reasons = 0, []
    for cause in ("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"):
        pages, reason = reader.call("nvmlDeviceGetRetiredPages", handle, reader.constant(cause))
        if pages is None:
            reasons.append(reason)
        else:
            total += len(pages)
    pending, pending_reason = reader.call("nvmlDeviceGetRetiredPagesPendingStatus", handle)
    enabled = reader.constant("NVML_FEATURE_ENABLED")
    return {PAGES_RETIRED: Counter.missing(reasons[0]) if reasons else Counter.of(total),
            PAGES_PENDING: Counter.missing(pending_reason) if pending is None
            else Counter.of(bool(pending == (1 if enabled is None else enabled)))}


def _remap(reader, handle) -> dict:
    rows, reason = reader.call("nvmlDeviceGetRemappedRows", handle)
    names = (REMAP_CORRECTED, REMAP_UNCORRECTED, REMAP_PENDING, REMAP_FAILURE)
    if rows is None:
        return {name: Counter.missing(reason) for name in names}
    corrected, uncorrected, pending, failure = rows
    return {REMAP_CORRECTED: Counter.of(int(corrected)), REMAP_UNCORRECTED: Counter.of(int(uncorrected)),
            REMAP_PENDING: Counter.of(bool(pending)), REMAP_FAILURE: Counter.of(bool(failure))}


def _pcie(reader, handle) -> dict:
    out = {}
    for name, function in ((PCIE_GENERATION, "nvmlDeviceGetCurrPcieLinkGeneration"),
                           (PCIE_GENERATION_MAX, "nvmlDeviceGetMaxPcieLinkGeneration"),
                           (PCIE_WIDTH, "nvmlDeviceGetCurrPcieLinkWidth"),
                           (PCIE_WIDTH_MAX, "nvmlDeviceGetMaxPcieLinkWidth")):
        value, reason = reader.call(function, handle)
        out[name] = Counter.missing(reason) if value is None else Counter.of(int(value))
    return out


def _nvlink(reader, handle) -> dict:
    links = reader.constant("NVML_NVLINK_MAX_LINKS") or 0
    up, down, errors, error_reasons = [], [], 0, []
    for link in range(links):
        state, _ = reader.call("nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            continue  # the device has no such link
        (up if state else down).append(link)
        if not state:
            continue
        for counter in NVLINK_ERROR_COUNTERS:
            count, reason = reader.call("nvmlDeviceGetNvLinkErrorCounter", handle, link, reader.constant(counter))
            if count is None:
                error_reasons.append(reason)
            else:
                errors += int(count)
    if not up and not down:
        none = Counter.missing("no NVLink answered on this device")
        return {LINKS_UP: none, LINKS_DOWN: none, LINK_ERRORS: none}
    return {LINKS_UP: Counter.of(tuple(up)), LINKS_DOWN: Counter.of(tuple(down)),
            LINK_ERRORS: Counter.missing(error_reasons[0]) if error_reasons else Counter.of(errors)}


def _power(reader, handle) -> dict:
    limit, reason = reader.call("nvmlDeviceGetEnforcedPowerLimit", handle)
    if limit is None:
        limit, reason = reader.call("nvmlDeviceGetPowerManagementLimit", handle)
    default, default_reason = reader.call("nvmlDeviceGetPowerManagementDefaultLimit", handle)
    return {POWER_LIMIT_W: Counter.missing(reason) if limit is None else Counter.of(limit / 1000),
            POWER_DEFAULT_LIMIT_W: Counter.missing(default_reason) if default is None else Counter.of(default / 1000)}


def read_nvml(nvml, handle, *, device: DeviceId | None = None) -> Snapshot:
    """Every NVML health counter of the device behind ``handle`` (see the module docstring), never raising."""
    reader = Reader(nvml, "NVML", lost_codes=(nvml_constant(nvml, "NVML_ERROR_GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST),))
    device = device or nvml_identity(nvml, handle)
    counters = {}
    for part in (_ecc, _pages, _remap, _pcie, _nvlink, _power):
        counters.update(part(reader, handle))
    if counters[REMAP_PENDING].available:  # Ampere and newer remap rows instead of retiring pages: not a gap
        for name in (PAGES_RETIRED, PAGES_PENDING):
            if not counters[name].available:
                del counters[name]
    return snapshot(device, counters, lost=reader.lost)


def nvml_constant(nvml, name: str, default):
    """``nvml.<name>``, or ``default`` where the module lacks it."""
    return getattr(nvml, name, default)


class XidEvents:
    """Xid events of one device during a window: ``start()`` registers, ``stop()`` drains them into a :class:`Counter`.

    One event set per device, so every event read belongs to it. Where registering fails (a
    driver or platform without events) the Xids are "not available" with the reason.
    """

    def __init__(self, nvml, handle):
        self.nvml = nvml
        self.handle = handle
        self.reader = Reader(nvml, "NVML", lost_codes=(nvml_constant(nvml, "NVML_ERROR_GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST),))
        self.event_set = None
        self.reason = "Xid events not started"
        self.seen: list[int] = []

    def start(self) -> None:
        kind = self.reader.constant("nvmlEventTypeXidCriticalError")
        if kind is None:
            self.reason = "NVML has no nvmlEventTypeXidCriticalError"
            return
        event_set, reason = self.reader.call("nvmlEventSetCreate")
        if event_set is None:
            self.reason = reason
            return
        _, reason = self.reader.call("nvmlDeviceRegisterEvents", self.handle, kind, event_set)
        if reason:
            self.reader.call("nvmlEventSetFree", event_set)
            self.reason = reason
            return
        self.event_set = event_set

    def poll(self) -> None:
        """Drain the events waiting now (call it during a long window too: NVML keeps a limited queue)."""
        if self.event_set is None:
            return
        timeout = nvml_constant(self.nvml, "NVML_ERROR_TIMEOUT", NVML_ERROR_TIMEOUT)
        kind = self.reader.constant("nvmlEventTypeXidCriticalError")
        for _ in range(MAX_EVENTS_PER_POLL):
            try:
                data = self.nvml.nvmlEventSetWait_v2(self.event_set, 0)
            except Exception as error:  # noqa: BLE001 - the timeout is how NVML says the queue is empty
                if getattr(error, "value", None) != timeout:
                    self.reason = f"nvmlEventSetWait_v2 failed: {error}"
                    self.event_set = None
                return
            if getattr(data, "eventType", kind) == kind:
                self.seen.append(int(data.eventData))

    def stop(self) -> Counter:
        """The Xids seen since :meth:`start` (an empty tuple when none), or not available with the reason."""
        if self.event_set is None:
            return Counter.missing(self.reason)
        self.poll()
        if self.event_set is None:
            return Counter.missing(self.reason)
        self.reader.call("nvmlEventSetFree", self.event_set)
        self.event_set = None
        return Counter.of(tuple(self.seen))

