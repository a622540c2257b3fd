"""AMD health counters through AMD SMI (the ``amdsmi`` module ROCm installs).

The caller passes the ``amdsmi`` module (initialised) and a processor handle. Names checked
against ROCm/amdsmi's ``py-interface/amdsmi_interface.py`` (7.0):

- ECC: ``amdsmi_get_gpu_total_ecc_count(handle)`` → ``correctable_count``, ``uncorrectable_count``,
  ``deferred_count`` (accumulated);
- bad pages: ``amdsmi_get_gpu_bad_page_info(handle)`` → records with ``status``
  (``AMDSMI_MEM_PAGE_STATUS_RESERVED`` 0, ``_PENDING`` 1, ``_UNRESERVABLE`` 2);
- PCIe: ``amdsmi_get_pcie_info(handle)`` → ``pcie_metric.pcie_width``/``pcie_speed`` (MT/s) against
  ``pcie_static.max_pcie_width``/``max_pcie_speed`` (MT/s in ROCm 6 headers, GT/s in ROCm 7's; a
  value below 1000 is read as GT/s). Unsupported fields are the text ``"N/A"``;
- xGMI: ``amdsmi_get_gpu_xgmi_link_status(handle)`` → ``status`` per link (``"U"`` up, ``"D"`` down,
  ``"X"`` disabled), and the xGMI block's errors ``amdsmi_get_gpu_ecc_count(handle,
  AmdSmiGpuBlock.XGMI_WAFL)``;
- power: ``amdsmi_get_power_cap_info(handle)`` → ``power_cap``, ``default_power_cap`` (µW on Linux);
- identity: ``amdsmi_get_gpu_device_uuid``, ``amdsmi_get_gpu_device_bdf``, ``amdsmi_get_gpu_asic_info()["asic_serial"]``.

AMD has no Xid events: :data:`~accounting.health.counters.XIDS` stays "not available".
"""

import socket

from accounting.health.counters import (
    ECC_CORRECTED,
    ECC_DEFERRED,
    ECC_UNCORRECTED,
    LINK_ERRORS,
    LINKS_DOWN,
    LINKS_UP,
    PAGES_PENDING,
    PAGES_RETIRED,
    PAGES_UNRESERVABLE,
    PCIE_SPEED,
    PCIE_SPEED_MAX,
    PCIE_WIDTH,
    PCIE_WIDTH_MAX,
    POWER_DEFAULT_LIMIT_W,
    POWER_LIMIT_W,
    Counter,
    DeviceId,
    Reader,
    Snapshot,
    snapshot,
)

PAGE_RESERVED, PAGE_PENDING, PAGE_UNRESERVABLE = 0, 1, 2
"""``amdsmi_memory_page_status_t``."""
GTS_BELOW = 1000
"""A PCIe speed below this is in GT/s (ROCm 7's ``max_pcie_speed``), at or above it in MT/s."""


def _number(value):
    """An integer reading, or ``None`` for AMD SMI's ``"N/A"`` and other non-numbers."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _gts(speed):
    speed = _number(speed)
    if speed is None:
        return None
    return speed if speed < GTS_BELOW else speed / 1000


def amd_identity(amdsmi, handle, *, index: int | None = None) -> DeviceId:
    """The device's UUID, serial and PCI bus id, each where AMD SMI gives it."""
    reader = Reader(amdsmi, "AMD SMI")
    uuid, _ = reader.call("amdsmi_get_gpu_device_uuid", handle)
    bdf, _ = reader.call("amdsmi_get_gpu_device_bdf", handle)
    asic, _ = reader.call("amdsmi_get_gpu_asic_info", handle)
    serial = asic.get("asic_serial") if isinstance(asic, dict) else None
    return DeviceId("rocm", index, uuid or None, serial if serial not in (None, "", "N/A") else None, bdf or None,
                    socket.gethostname())


def _missing(names, reason):
    return {name: Counter.missing(reason) for name in names}


def _ecc(reader, handle) -> dict:
    counts, reason = reader.call("amdsmi_get_gpu_total_ecc_count", handle)
    names = ((ECC_CORRECTED, "correctable_count"), (ECC_UNCORRECTED, "uncorrectable_count"),
             (ECC_DEFERRED, "deferred_count"))
    if not isinstance(counts, dict):
        return _missing([name for name, _ in names], reason or f"unexpected answer {counts!r}")
    out = {}
    for name, key in names:
        value = _number(counts.get(key))
        out[name] = Counter.of(int(value)) if value is not None else Counter.missing(f"{key} is {counts.get(key)!r}")
    return out


def _pages(reader, handle) -> dict:
    records, reason = reader.call("amdsmi_get_gpu_bad_page_info", handle)
    if not isinstance(records, list):
        return _missing((PAGES_RETIRED, PAGES_PENDING, PAGES_UNRESERVABLE), reason or f"unexpected answer {records!r}")
    statuses = [record.get("status") for record in records if isinstance(record, dict)]
    return {PAGES_RETIRED: Counter.of(statuses.count(PAGE_RESERVED)),
            PAGES_PENDING: Counter.of(PAGE_PENDING in statuses),
            PAGES_UNRESERVABLE: Counter.of(statuses.count(PAGE_UNRESERVABLE))}


def _pcie(reader, handle) -> dict:
    info, reason = reader.call("amdsmi_get_pcie_info", handle)
    names = (PCIE_WIDTH, PCIE_WIDTH_MAX, PCIE_SPEED, PCIE_SPEED_MAX)
    if not isinstance(info, dict):
        return _missing(names, reason or f"unexpected answer {info!r}")
    static, metric = info.get("pcie_static", {}), info.get("pcie_metric", {})
    values = {PCIE_WIDTH: _number(metric.get("pcie_width")), PCIE_WIDTH_MAX: _number(static.get("max_pcie_width")),
              PCIE_SPEED: _gts(metric.get("pcie_speed")), PCIE_SPEED_MAX: _gts(static.get("max_pcie_speed"))}
    return {name: Counter.of(value) if value is not None else Counter.missing("AMD SMI reports N/A")
            for name, value in values.items()}


def _xgmi(reader, handle) -> dict:
    status, reason = reader.call("amdsmi_get_gpu_xgmi_link_status", handle)
    if not isinstance(status, dict) or not status.get("status"):
        out = _missing((LINKS_UP, LINKS_DOWN), reason or "no xGMI link on this device")
    else:
        links = list(status["status"])
        out = {LINKS_UP: Counter.of(tuple(i for i, s in enumerate(links) if s == "U")),
               LINKS_DOWN: Counter.of(tuple(i for i, s in enumerate(links) if s == "D"))}
    block = getattr(getattr(reader.library, "AmdSmiGpuBlock", None), "XGMI_WAFL", None)
    if block is None:
        out[LINK_ERRORS] = Counter.missing("AMD SMI has no AmdSmiGpuBlock.XGMI_WAFL")
        return out
    counts, reason = reader.call("amdsmi_get_gpu_ecc_count", handle, block)
    values = [_number(counts.get(key)) for key in ("correctable_count", "uncorrectable_count")] if isinstance(counts, dict) else []
    out[LINK_ERRORS] = (Counter.of(int(sum(values))) if values and None not in values
                        else Counter.missing(reason or f"unexpected answer {counts!r}"))
    return out


def _power(reader, handle) -> dict:
    caps, reason = reader.call("amdsmi_get_power_cap_info", handle)
    if not isinstance(caps, dict):
        return _missing((POWER_LIMIT_W, POWER_DEFAULT_LIMIT_W), reason or f"unexpected answer {caps!r}")
    out = {}
    for name, key in ((POWER_LIMIT_W, "power_cap"), (POWER_DEFAULT_LIMIT_W, "default_power_cap")):
        value = _number(caps.get(key))
        out[name] = Counter.of(value / 1e6) if value is not None else Counter.missing(f"{key} is {caps.get(key)!r}")
    return out


def read_amdsmi(amdsmi, handle, *, device: DeviceId | None = None) -> Snapshot:
    """Every AMD SMI health counter of the device behind ``handle`` (see the module docstring), never raising."""
    reader = Reader(amdsmi, "AMD SMI")
    device = device or amd_identity(amdsmi, handle)
    counters = {}
    for part in (_ecc, _pages, _pcie, _xgmi, _power):
        counters.update(part(reader, handle))
    return snapshot(device, counters, lost=reader.lost)
