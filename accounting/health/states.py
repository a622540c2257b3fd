"""Healthy, degraded or failed: one device's verdict with its reasons, rolled up per node and per fleet.

- **healthy**: nothing below was seen. Counters that could not be read are listed in
  ``unchecked`` (with ``strict=True`` each one degrades the device instead): a device is never
  healthy because nothing could be asked.
- **degraded** (keep it in service, watch it): MFU below its floor; correctable errors rising during
  the run (GPU memory, CPU memory, links), more pages retired; the PCIe link trained below its
  maximum (generation judged only from a reading under load: idle links train down); a GPU link
  down; the power limit below its default; throttling; an Xid outside :data:`FAILED_XIDS`.
- **failed** (drain it): a wrong result (:mod:`accounting.health.results`); uncorrectable ECC
  errors; deferred (poisoned) errors; a row remap that failed or waits for a reset; a page
  retirement that waits for a reset, or bad pages that could not be reserved; uncorrectable CPU
  memory errors; machine-check exceptions during the run; an Xid in :data:`FAILED_XIDS`; the device lost.

Every reason names its device by index, UUID or serial and PCI bus id (:class:`DeviceId`). A node's
or a fleet's state is the worst of its members', every member's reasons kept.

Exit statuses for a Slurm prolog or health check, or a Kubernetes node check: :data:`EXIT_HEALTHY`
(0), :data:`EXIT_DEGRADED` (3), :data:`EXIT_FAILED` (4). They stay clear of the package's others
(``accounting.console``: 1 a regression the gate found, 2 bad input, 130 interrupted; 141 broken pipe).

>>> from accounting.health.counters import DeviceId, Snapshot, Counter, ECC_UNCORRECTED
>>> gpu = DeviceId("cuda", 0, uuid="GPU-1", pci_bus_id="00000000:3B:00.0")
>>> verdict = judge(gpu, after=Snapshot(gpu, {ECC_UNCORRECTED: Counter.of(2)}))
>>> verdict.state, verdict.exit_status
('failed', 4)
>>> print(verdict.reasons[0])
failed: cuda:0 (GPU-1, PCI 00000000:3B:00.0): 2 uncorrectable ECC errors since the driver loaded
"""

from collections.abc import Iterable
from dataclasses import dataclass

from accounting.errors import AccountingTypeError
from accounting.health import counters as names
from accounting.health.counters import Counter, DeviceId, Snapshot, Window

HEALTHY, DEGRADED, FAILED = "healthy", "degraded", "failed"
STATES = (HEALTHY, DEGRADED, FAILED)
"""Best to worst."""

EXIT_HEALTHY = 0
EXIT_DEGRADED = 3
EXIT_FAILED = 4
EXIT_STATUS = {HEALTHY: EXIT_HEALTHY, DEGRADED: EXIT_DEGRADED, FAILED: EXIT_FAILED}

FAILED_XIDS = {
    48: "double-bit ECC error",
    63: "row remapping or page retirement recorded, applied at the next GPU reset",
    64: "row remapping or page retirement failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    94: "contained uncorrectable ECC error",
    95: "uncontained uncorrectable ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}
"""Xids that drain a GPU (NVIDIA's Xid catalog, docs.nvidia.com/deploy/xid-errors: each needs at least a GPU
reset — 63 because a pending remap applies only at the reset — or points to failing hardware)."""
WATCH_XIDS = {92: "high single-bit ECC error rate"}
"""Xids that degrade it: a warning of failing memory, not yet an error. Any other Xid degrades too."""

ROUTINE_CLOCK_EVENTS = frozenset({
    "gpu_idle", "applications_clocks_setting", "sw_power_cap", "sync_boost", "display_clock_setting",  # NVML
    "ppt_power", "ppt0", "ppt1", "ppt2", "ppt3", "spl", "fppt", "sppt", "sppt_apu",  # AMD package power tracking
})
"""Clock events that are a healthy device doing its job, not throttling: idle, clocks an operator set, and
running at the power limit (a dense GEMM holds an H100 or MI300X at its power cap: that is what the limit is
for). Thermal, hardware-slowdown, power-brake, current and reliability events degrade a device."""

_RISING = (
    (names.ECC_CORRECTED, "correctable ECC errors"),
    (names.EDAC_CORRECTED, "correctable CPU memory errors (EDAC)"),
    (names.LINK_ERRORS, "GPU link (NVLink/xGMI) errors"),
    (names.PAGES_RETIRED, "retired memory pages"),
    (names.REMAP_CORRECTED, "rows remapped for correctable errors"),
)


@dataclass(frozen=True)
class Reason:
    """Why a device is not healthy: its ``state``, the ``device`` it names, a short ``code`` and the ``text``."""

    state: str
    device: str
    code: str
    text: str

    def __str__(self) -> str:
        return f"{self.state}: {self.device}: {self.text}"


@dataclass(frozen=True)
class Verdict:
    """One device's state, the reasons for it, and what could not be checked (``name: reason``)."""

    device: str
    state: str
    reasons: tuple[Reason, ...] = ()
    unchecked: tuple[str, ...] = ()

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self.state]

    def describe(self) -> str:
        """Lines for an operator: the state and device, each reason, then what was not checked."""
        lines = [f"{self.state}: {self.device}"]
        lines += [f"  {reason.state}: {reason.text}" for reason in self.reasons]
        lines += [f"  not checked: {item}" for item in self.unchecked]
        return "\n".join(lines)


@dataclass(frozen=True)
class Rollup:
    """A node's or a fleet's state: the worst of its ``members`` (verdicts or rollups), every reason kept."""

    name: str
    state: str
    members: tuple
    reasons: tuple[Reason, ...]

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self.state]

    def count(self, state: str) -> int:
        """Devices in ``state``, counted through nested rollups."""
        return sum(member.count(state) if isinstance(member, Rollup) else member.state == state
                   for member in self.members)

    def describe(self) -> str:
        devices = sum(self.count(state) for state in STATES)
        summary = ", ".join(f"{self.count(state)} {state}" for state in reversed(STATES) if self.count(state))
        lines = [f"{self.state}: {self.name} ({devices} devices: {summary or 'none'})"]
        lines += [f"  {reason}" for reason in self.reasons]
        return "\n".join(lines)


def worst(states: Iterable[str]) -> str:
    """The worst of ``states`` (healthy when there are none).

    >>> worst(["healthy", "failed", "degraded"])
    'failed'
    """
    found = [STATES.index(state) for state in states]
    return STATES[max(found)] if found else HEALTHY


def roll_up(name: str, members) -> Rollup:
    """A node's (or fleet's) state from its devices' verdicts (or its nodes' rollups): worst wins, reasons kept.

    >>> ok, bad = Verdict("cuda:0", "healthy"), Verdict("cuda:1", "degraded", (Reason("degraded", "cuda:1", "mfu", "slow"),))
    >>> node = roll_up("node07", [ok, bad])
    >>> node.state, node.count("degraded"), roll_up("fleet", [node]).state
    ('degraded', 1, 'degraded')
    """
    members = tuple(members)
    for member in members:
        if not isinstance(member, (Verdict, Rollup)):
            raise AccountingTypeError(f"a rollup's members are Verdicts or Rollups, got {member!r}")
    reasons = tuple(reason for member in members for reason in member.reasons)
    return Rollup(name, worst(member.state for member in members), members, reasons)


def _value(snap: Snapshot | None, name: str):
    return None if snap is None else snap.value(name)


def _count_text(count: int, what: str) -> str:
    return f"{count} {what}"


def judge(device: DeviceId | str | None = None, *, before: Snapshot | None = None, after: Snapshot | None = None,
          load: Snapshot | None = None, xids: Counter | None = None, results=(), mfu: float | None = None,
          mfu_floor: float | None = None, throttle_reasons=(), lost: str | None = None, strict: bool = False) -> Verdict:
    """One device's verdict from everything known about its run (each argument optional).

    ``before``/``after``: counter snapshots around the run (``after`` is judged for standing faults;
    the difference for counters rising during the run); ``load``: a snapshot under load, for the PCIe
    link; ``xids``: the Xid events of the window; ``results``: :class:`~accounting.health.results.ResultCheck`
    of its products; ``mfu`` and ``mfu_floor``; ``throttle_reasons`` from the telemetry summary;
    ``lost``: why the device stopped answering, when it did.
    """
    snaps = [snap for snap in (after, load, before) if snap is not None]
    if device is None:
        if not snaps:
            raise AccountingTypeError("judge needs a device or at least one snapshot")
        device = snaps[0].device
    label = device.label if isinstance(device, DeviceId) else str(device)
    reasons: list[Reason] = []
    unchecked: list[str] = []

    def add(state, code, text):
        reasons.append(Reason(state, label, code, text))

    for check in results:
        if not check.ok:
            add(FAILED, "wrong-result", check.reason)
        elif not getattr(check, "checked", True):  # no bound to judge it by: unchecked, not failed
            unchecked.append(check.note)
    for reason in [lost] + [snap.lost for snap in snaps]:
        if reason:
            add(FAILED, "lost", f"device lost: {reason}")
            break

    now = after or load or before
    _standing_faults(now, add)
    if before is not None and after is not None:
        _rising(before, after, add)
    elif now is not None:
        unchecked.append("rising counters: no reading " + ("before" if before is None else "after") + " the run")
    _link(load, after, add, unchecked)
    _power(now, add)
    _xids(xids, add, unchecked)

    if mfu is not None and mfu_floor is not None and mfu < mfu_floor:
        add(DEGRADED, "mfu", f"MFU {mfu:.3f} below its floor {mfu_floor:.3f}")
    slowed = [reason for reason in throttle_reasons if reason not in ROUTINE_CLOCK_EVENTS]
    if slowed:
        add(DEGRADED, "throttled", "throttled: " + ", ".join(slowed))
    if now is None:
        unchecked.append("health counters: none read")
    else:
        unchecked += [f"{name}: {reason}" for name, reason in now.unavailable().items()]
    if strict:
        for item in unchecked:
            add(DEGRADED, "unchecked", f"not checked: {item}")
    state = worst(reason.state for reason in reasons)
    ordered = tuple(sorted(reasons, key=lambda reason: -STATES.index(reason.state)))
    return Verdict(label, state, ordered, tuple(unchecked))


def judge_window(window: Window, **evidence) -> Verdict:
    """:func:`judge` with a :class:`~accounting.health.counters.Window`'s readings and Xids."""
    return judge(before=window.before, after=window.after, load=window.load, xids=window.xids, **evidence)


def _standing_faults(now: Snapshot | None, add) -> None:
    if now is None:
        return
    count = now.value(names.ECC_UNCORRECTED)
    if count:
        add(FAILED, "ecc-uncorrectable", _count_text(count, "uncorrectable ECC errors since the driver loaded"))
    count = now.value(names.ECC_DEFERRED)
    if count:
        add(FAILED, "ecc-deferred", _count_text(count, "deferred (poisoned) uncorrectable ECC errors"))
    if now.value(names.REMAP_FAILURE):
        add(FAILED, "remap-failure", "row remapping failed: no spare row left")
    if now.value(names.REMAP_PENDING):
        add(FAILED, "remap-pending", "a row remap is pending: it applies only at the next GPU reset")
    if now.value(names.PAGES_PENDING):
        add(FAILED, "retirement-pending", "a page retirement is pending: it applies only at the next reset")
    count = now.value(names.PAGES_UNRESERVABLE)
    if count:
        add(FAILED, "pages-unreservable", _count_text(count, "bad memory pages that could not be reserved"))
    count = now.value(names.EDAC_UNCORRECTED)
    if count:
        add(FAILED, "edac-uncorrectable", _count_text(count, "uncorrectable CPU memory errors (EDAC) since boot"))


def _rising(before: Snapshot, after: Snapshot, add) -> None:
    for name, what in _RISING:
        old, new = before.value(name), after.value(name)
        if old is not None and new is not None and new > old:
            add(DEGRADED, f"rising:{name}", f"{new - old} more {what} during the run ({old} before, {new} after)")
    old, new = before.value(names.MACHINE_CHECKS), after.value(names.MACHINE_CHECKS)
    if old is not None and new is not None and new > old:
        add(FAILED, "machine-check", f"{new - old} machine-check exceptions during the run")
    old, new = before.value(names.ECC_UNCORRECTED), after.value(names.ECC_UNCORRECTED)
    if old is not None and new is not None and new > old:
        add(FAILED, "ecc-uncorrectable-rising", f"{new - old} of them during the run")


def _link(load: Snapshot | None, after: Snapshot | None, add, unchecked) -> None:
    width_snap = load or after
    if width_snap is not None:
        width, top = width_snap.value(names.PCIE_WIDTH), width_snap.value(names.PCIE_WIDTH_MAX)
        if width is not None and top is not None and width < top:
            add(DEGRADED, "pcie-width", f"PCIe link x{width}, below its maximum x{top}")
        down, up = width_snap.value(names.LINKS_DOWN), width_snap.value(names.LINKS_UP)
        if down:
            add(DEGRADED, "links-down", f"GPU links {', '.join(map(str, down))} down ({len(up or ())} up)")
    if load is None:
        if after is not None and after.value(names.PCIE_GENERATION) is not None:
            unchecked.append("PCIe generation: not read under load (an idle link trains down)")
        return
    for current, top, unit in ((names.PCIE_GENERATION, names.PCIE_GENERATION_MAX, "Gen"),
                               (names.PCIE_SPEED, names.PCIE_SPEED_MAX, "GT/s")):
        value, most = load.value(current), load.value(top)
        if value is not None and most is not None and value < most:
            shown = (f"Gen{value}", f"Gen{most}") if unit == "Gen" else (f"{value:g} GT/s", f"{most:g} GT/s")
            add(DEGRADED, "pcie-speed", f"PCIe link trained to {shown[0]} under load, below its maximum {shown[1]}")


def _power(now: Snapshot | None, add) -> None:
    if now is None:
        return
    limit, default = now.value(names.POWER_LIMIT_W), now.value(names.POWER_DEFAULT_LIMIT_W)
    if limit is not None and default is not None and limit < default:
        add(DEGRADED, "power-capped", f"power limit {limit:g} W, below its default {default:g} W")


def _xids(xids: Counter | None, add, unchecked) -> None:
    if xids is None:
        return
    if not xids.available:
        unchecked.append(f"{names.XIDS}: {xids.reason}")
        return
    for xid in dict.fromkeys(xids.value):
        if xid in FAILED_XIDS:
            add(FAILED, f"xid-{xid}", f"Xid {xid} during the run: {FAILED_XIDS[xid]}")
        else:
            meaning = WATCH_XIDS.get(xid, "see NVIDIA's Xid catalog")
            add(DEGRADED, f"xid-{xid}", f"Xid {xid} during the run: {meaning}")
