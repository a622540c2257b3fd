"""Each rank's device healthy, degraded or failed, rolled up per node (host) and for the fleet: worst wins.

A rank's state starts from its own report's (``report["health"]``: its result checks, health counters, MFU floor,
throttling, as ``accounting report`` judges one device), and adds what only the fleet sees of it, by
:data:`FLAG_STATES`:

- **failed**: a rank that raised (while measuring its device, or later in the collectives or links) or never
  reached a barrier (hung): its device is *lost*, with the error as the reason; a rank its group left out of the
  collectives because it failed there; wrong elements in what it received (a collective's checked result or a
  point-to-point transfer: the rank whose result was wrong, as a wrong product fails the device that computed it);
  a product its report found wrong.
- **degraded**: a straggler (best TFLOP/s below its fraction of the other ranks' median), slow memory, often the
  slowest in the collectives, an end of a slow link (only the common end where one rank is an end of every slow
  link, else both: nothing tells which end is slow), configuration drift, below the MFU floor.
- **healthy, with a note**: a busy rank (other work shared its cores or device). Its low figures are a neighbour's
  doing, not the device's: the busy flag replaces its straggler flags, and its report's below-floor reasons and its
  end of a slow link become notes. A wrong result, an error or a counter still fails or degrades it: other work
  does not make a product wrong. Above the peak is a wrong peak, not a worse device: the report lists it as not
  checked. An impossible figure (above what the SMs can do at the highest clock its window read) is a window that
  missed the work's clock or a timer fault, not a worse device: flagged, and the device's state left to its other
  evidence.

Two findings name no device and are the fleet's own reasons: a collective below its ``--min-busbw``
(degraded: the interconnect) and a collective that raised on *every* rank alike (failed: the collective, its
library or build, not a device).

Exit statuses as the report's: :data:`~accounting.health.states.EXIT_FAILED` (4) when any device failed,
always; :data:`~accounting.health.states.EXIT_DEGRADED` (3) with ``strict`` when one is degraded; else 0.

>>> flags = [{"kind": "straggler", "rank": 1, "message": "rank 1 float32: best 1 TFLOP/s < 0.9 × 2"},
...          {"kind": "busy", "rank": 0, "message": "rank 0 shared its device with other work: CPU 0"}]
>>> records = [{"identity": {"host": "a", "device": "cpu", "kind": "cpu", "cpus": [r]}, "errors": []} for r in (0, 1)]
>>> health = fleet_health(records, flags)
>>> health["state"], [rank["state"] for rank in health["ranks"]], health["exit_status"]
('degraded', ['healthy', 'degraded'], 0)
>>> fleet_health(records, flags, strict=True)["exit_status"], health["ranks"][0]["notes"][0][:22]
(3, 'busy (a neighbour, not')
"""

from accounting.errors import AccountingError
from accounting.fleet.links import common_end
from accounting.fleet.verdict import (
    BUSY,
    DRIFT,
    FAILED,
    FLOOR,
    HUNG,
    IMPOSSIBLE,
    LEFT_OUT,
    OFTEN_SLOWEST,
    OVER_PEAK,
    SLOW_COLLECTIVE,
    SLOW_LINK,
    SLOW_MEMORY,
    STRAGGLER,
    WRONG,
    WRONG_PRODUCT,
)
from accounting.health import states
from accounting.health.states import (
    DEGRADED,
    EXIT_DEGRADED,
    EXIT_FAILED,
    EXIT_HEALTHY,
    HEALTHY,
    Reason,
    Rollup,
    Verdict,
)
from accounting.report.health_section import MFU_CODE, reason_dict

FLAG_STATES = {
    STRAGGLER: DEGRADED, SLOW_MEMORY: DEGRADED, OFTEN_SLOWEST: DEGRADED, SLOW_LINK: DEGRADED, DRIFT: DEGRADED,
    SLOW_COLLECTIVE: DEGRADED, FLOOR: DEGRADED,
    WRONG: states.FAILED, WRONG_PRODUCT: states.FAILED, FAILED: states.FAILED, LEFT_OUT: states.FAILED,
    HUNG: states.FAILED,
    BUSY: HEALTHY, OVER_PEAK: HEALTHY, IMPOSSIBLE: HEALTHY,
}
"""The state each of the fleet's flags puts its rank in (see the module's docstring for why)."""
REPORTED = frozenset({FLOOR, OVER_PEAK, WRONG_PRODUCT})
"""Flags the rank's own report judges in its ``health``: taken from there, and from the flag only for a report
without a health section."""
FROM_RECORDS = frozenset({FAILED, WRONG})
"""Flags taken from the records instead, to name the rank precisely: a rank's errors (a collective that raised on
every rank is the fleet's reason, not a device's) and the wrong elements each rank itself received."""
UNKNOWN_HOST = "unknown host"
LOST = "lost"


def flag_state(kind: str) -> str:
    """The state a flag of ``kind`` puts its rank in; :class:`AccountingError` naming an unknown kind.

    >>> flag_state("straggler"), flag_state("hung"), flag_state("busy")
    ('degraded', 'failed', 'healthy')
    """
    try:
        return FLAG_STATES[kind]
    except KeyError:
        raise AccountingError(f"unknown fleet flag kind {kind!r}; known: {', '.join(FLAG_STATES)}") from None


def _code(kind: str) -> str:
    return kind.replace(" ", "-")


def rank_label(rank: int, identity: dict | None) -> str:
    """A rank's device for an operator: rank, host, device and index, UUID and PCI bus id where known.

    >>> rank_label(3, {"host": "node07", "device": "cuda:3", "kind": "cuda", "uuid": "GPU-9f", "pci_bus_id": "0000:3B:00.0"})
    'rank 3 (node07 cuda:3, GPU-9f, PCI 0000:3B:00.0)'
    >>> rank_label(1, None)
    'rank 1 (no record: host and device unknown)'
    """
    if not identity:
        return f"rank {rank} (no record: host and device unknown)"
    parts = [f"{identity.get('host') or UNKNOWN_HOST} {identity.get('device') or '?'}"]
    if identity.get("uuid"):
        parts.append(identity["uuid"])
    if identity.get("pci_bus_id"):
        parts.append(f"PCI {identity['pci_bus_id']}")
    if identity.get("kind") == "cpu" and identity.get("cpus"):
        parts.append("CPUs " + ",".join(map(str, identity["cpus"])))
    return f"rank {rank} ({', '.join(parts)})"


def collective_wide(records) -> set:
    """``{(scope, collective)}`` that failed on every rank of their group alike: the collective's fault."""
    found = set()
    for record in records:
        for scope, entry in ((record or {}).get("collectives") or {}).items():
            for stop in entry.get("interrupted", []):
                if set(stop["failed_ranks"]) >= set(stop["ranks"]):
                    found.add((scope, stop["collective"]))
    return found


def _wrong_received(record) -> list[str]:
    """What this rank itself received wrong: per collective row and per point-to-point transfer into it."""
    found = []
    for scope, entry in ((record or {}).get("collectives") or {}).items():
        for timed in entry.get("results", []):
            if timed.get("wrong"):
                found.append(f"{timed['wrong']} wrong element(s) in its {scope} {timed['collective']} result at "
                             f"{timed['bytes']} B (ranks {', '.join(map(str, timed.get('ranks') or entry['ranks']))})")
    for timed in (((record or {}).get("p2p") or {}).get("results") or []):
        if timed.get("wrong") and timed.get("dst") == (record or {}).get("rank"):
            found.append(f"{timed['wrong']} wrong element(s) received over the {timed['scope']} link from rank "
                         f"{timed['src']}")
    return found


def _slow_link_ranks(flags) -> dict:
    """``{rank: [messages]}`` for the slow links: the common end alone where there is one, else both ends."""
    links = [flag for flag in flags if flag["kind"] == SLOW_LINK and flag.get("ranks")]
    shared = common_end([({"src": flag["ranks"][0], "dst": flag["ranks"][1]}, None) for flag in links])
    found: dict = {}
    for flag in links:
        for rank in ([shared] if shared is not None else flag["ranks"]):
            found.setdefault(rank, []).append(flag["message"])
    return found


def _report_reasons(report_health: dict, label: str, *, busy: bool) -> tuple[list[Reason], list[str], list[str]]:
    """The report's reasons, named by the rank (a reason about another device of the rank's report, the host
    CPU, says which), what it could not check, and notes: a busy rank's below-floor reasons become notes."""
    devices = report_health.get("devices") or []
    timed = devices[0]["device"] if devices else None
    reasons, notes = [], []
    for reason in report_health.get("reasons", []):
        text = reason["text"] if reason["device"] == timed else f"{reason['device']}: {reason['text']}"
        if busy and reason["code"] == MFU_CODE:
            notes.append(f"not the device's (other work shared it): {text}")
            continue
        reasons.append(Reason(reason["state"], label, reason["code"], text))
    return reasons, list(report_health.get("unchecked", [])), notes


def judge_rank(rank: int, record, flags, *, wide=frozenset()) -> tuple[Verdict, list[str]]:
    """One rank's :class:`~accounting.health.states.Verdict` (its report's health and the fleet's ``flags`` about it,
    :data:`FLAG_STATES`) and its notes. ``record`` ``None``: the rank left none (it hung before the first barrier).
    ``wide``: the ``(scope, collective)`` that failed on every rank, left to the fleet."""
    identity = (record or {}).get("identity")
    label = rank_label(rank, identity)
    mine = [flag for flag in flags if flag.get("rank") == rank]
    busy = [flag for flag in mine if flag["kind"] == BUSY]
    reasons: list[Reason] = []
    notes = [f"busy (a neighbour, not a fault): {flag['message']}" for flag in busy]
    unchecked: list[str] = []
    report = (record or {}).get("report")
    report_health = (report or {}).get("health")
    if report_health:
        found, unchecked, more = _report_reasons(report_health, label, busy=bool(busy))
        reasons += found
        notes += more
    elif record is not None and report is not None:
        unchecked.append("health: this rank's report judged none")
    elif record is not None:
        unchecked.append("health: no report (the device was not measured)")
    for error in (record or {}).get("errors", []):
        if (error.get("scope"), error.get("collective")) in wide:
            continue
        reasons.append(Reason(states.FAILED, label, LOST, f"device lost: raised while {error['phase']}: {error['error']}"))
    for error in (((record or {}).get("p2p") or {}).get("errors") or []):
        reasons.append(Reason(states.FAILED, label, LOST, f"device lost: raised while timing its point-to-point links: "
                                                          f"{error}"))
    reasons += [Reason(states.FAILED, label, "wrong-values", text) for text in _wrong_received(record)]
    for flag in mine:
        kind = flag["kind"]
        state = flag_state(kind)
        if kind in FROM_RECORDS or kind == SLOW_LINK or state == HEALTHY or (kind in REPORTED and report_health):
            continue
        text = flag["message"]
        if kind == HUNG:
            text = f"device lost: {text}"
        reasons.append(Reason(state, label, LOST if kind == HUNG else _code(kind), text))
    for text in _slow_link_ranks(flags).get(rank, []):
        if busy:
            notes.append(f"an end of a slow link while other work shared it (not judged): {text}")
        else:
            reasons.append(Reason(DEGRADED, label, _code(SLOW_LINK), text))
    ordered = tuple(sorted(reasons, key=lambda reason: -states.STATES.index(reason.state)))
    return Verdict(label, states.worst(reason.state for reason in reasons), ordered, tuple(unchecked)), notes


def fleet_reasons(records, flags) -> list[Reason]:
    """What names no device: collectives below their minimum (the interconnect), collectives that raised on every rank."""
    reasons = [Reason(DEGRADED, "interconnect", _code(SLOW_COLLECTIVE), flag["message"])
               for flag in flags if flag["kind"] == SLOW_COLLECTIVE]
    wide = collective_wide(records)
    seen = set()
    for record in records:
        for error in (record or {}).get("errors", []):
            key = (error.get("scope"), error.get("collective"))
            if key in wide and key not in seen:
                seen.add(key)
                reasons.append(Reason(states.FAILED, f"{key[0]} {key[1]}", "collective-failed",
                                      f"raised on every rank alike ({error['error']}): the collective (its library or "
                                      "build) is at fault, not a device"))
    return reasons


def roll_up_fleet(verdicts, hosts, extra=()) -> Rollup:
    """Nodes (``hosts``: each rank's host, ``None`` unknown) as :func:`~accounting.health.states.roll_up` of their ranks,
    and the fleet of its nodes, with ``extra`` reasons (the fleet's own) counted in its state."""
    nodes: dict = {}
    for verdict, host in zip(verdicts, hosts):
        nodes.setdefault(host or UNKNOWN_HOST, []).append(verdict)
    fleet = states.roll_up("fleet", [states.roll_up(host, members) for host, members in nodes.items()])
    if not extra:
        return fleet
    every = fleet.reasons + tuple(extra)
    return Rollup(fleet.name, states.worst([fleet.state, *(reason.state for reason in extra)]), fleet.members, every)


def exit_status(state: str, *, strict: bool = False) -> int:
    """4 when a device failed (always), 3 with ``strict`` when one is degraded, else 0 (as the report's).

    >>> exit_status("failed"), exit_status("degraded"), exit_status("degraded", strict=True), exit_status("healthy")
    (4, 0, 3, 0)
    """
    if state == states.FAILED:
        return EXIT_FAILED
    return EXIT_DEGRADED if state == DEGRADED and strict else EXIT_HEALTHY


def _grouped_unchecked(entries) -> list[str]:
    """What was not checked, each ``device: name: reason`` once for the ranks that share it, names with one reason
    on one line.

    >>> _grouped_unchecked([{"rank": r, "unchecked": ["cpu: edac.ce: a VM", "cpu: edac.ue: a VM"]} for r in (0, 1)])
    ['ranks 0, 1: cpu: edac.ce, edac.ue: a VM']
    """
    by_item: dict = {}
    for entry in entries:
        for item in entry["unchecked"]:
            by_item.setdefault(item, []).append(entry["rank"])
    groups: dict = {}
    for item, ranks in by_item.items():
        device, _, rest = item.partition(": ")
        name, separator, why = rest.partition(": ")
        key = (tuple(ranks), device if separator else item, why if separator else "")
        groups.setdefault(key, []).append(name if separator else "")
    lines = []
    for (ranks, device, why), names in groups.items():
        said = f"{device}: {', '.join(names)}: {why}" if why else device
        lines.append(f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: {said}")
    return lines


def fleet_health(records, flags, *, hung=(), strict: bool = False) -> dict:
    """The fleet's ``health``: ``state``, ``exit_status``, ``strict``, ``ranks`` (each rank's ``rank``, ``host``,
    ``device``, ``uuid``, ``pci_bus_id``, ``label``, ``state``, ``report_state``, ``reasons``, ``unchecked``,
    ``notes``), ``nodes`` (``{host: {state, ranks, reasons}}``), ``reasons`` (every one, the fleet's own included),
    ``unchecked`` (grouped over ranks) and ``notes`` (busy ranks).

    ``records``: the gathered records (``None`` for a rank that left none); ``flags``: the verdict's, as dicts;
    ``hung``: ranks that never reached a barrier (also flagged; a rank hung with no record is still named).
    """
    records = list(records)
    flags = list(flags) + [{"kind": HUNG, "rank": rank, "message": f"rank {rank} never reached the barrier"}
                           for rank in hung if not any(f["kind"] == HUNG and f["rank"] == rank for f in flags)]
    wide = collective_wide(records)
    verdicts, entries = [], []
    for rank, record in enumerate(records):
        verdict, notes = judge_rank(rank, record, flags, wide=wide)
        identity = (record or {}).get("identity") or {}
        report_health = ((record or {}).get("report") or {}).get("health") or {}
        verdicts.append(verdict)
        entries.append({"rank": rank, "host": identity.get("host"), "device": identity.get("device"),
                        "uuid": identity.get("uuid"), "pci_bus_id": identity.get("pci_bus_id"), "label": verdict.device,
                        "state": verdict.state, "report_state": report_health.get("state"),
                        "reasons": [reason_dict(reason) for reason in verdict.reasons],
                        "unchecked": list(verdict.unchecked), "notes": notes})
    hosts = [entry["host"] for entry in entries]
    rollup = roll_up_fleet(verdicts, hosts, fleet_reasons(records, flags))
    nodes = {}
    for node in rollup.members:
        nodes[node.name] = {"state": node.state,
                            "ranks": [entry["rank"] for entry in entries if (entry["host"] or UNKNOWN_HOST) == node.name],
                            "counts": {state: node.count(state) for state in states.STATES},
                            "reasons": [reason_dict(reason) for reason in node.reasons]}
    return {"state": rollup.state, "exit_status": exit_status(rollup.state, strict=strict), "strict": strict,
            "nodes": nodes, "reasons": [reason_dict(reason) for reason in rollup.reasons],
            "unchecked": _grouped_unchecked(entries),
            "notes": [note for entry in entries for note in entry["notes"]], "ranks": entries}


def health_lines(health: dict) -> list[str]:
    """The fleet's Health section: the state and exit status, each node, every failed or degraded device with its
    reasons, busy ranks (neighbours, not faults), what was not checked.

    >>> health = {"state": "failed", "exit_status": 4, "strict": False, "unchecked": [], "notes": [],
    ...           "nodes": {"a": {"state": "failed", "ranks": [0, 1], "counts": {"healthy": 1, "degraded": 0,
    ...                                                                          "failed": 1}}},
    ...           "reasons": [{"state": "failed", "device": "rank 1 (a cpu)", "code": "lost",
    ...                        "text": "device lost: raised while measuring its device: RuntimeError: broken"}]}
    >>> print("\\n".join(health_lines(health)))
    Health: failed (exit status 4)
      node a: failed (ranks 0, 1: 1 failed, 1 healthy)
      failed: rank 1 (a cpu): device lost: raised while measuring its device: RuntimeError: broken
    """
    heading = f"Health: {health['state']} (exit status {health['exit_status']}"
    if health["state"] == DEGRADED and not health.get("strict"):
        heading += f"; {EXIT_DEGRADED} with --strict"
    lines = [heading + ")"]
    for host, node in health["nodes"].items():
        counts = ", ".join(f"{node['counts'][state]} {state}" for state in reversed(states.STATES)
                           if node["counts"].get(state))
        lines.append(f"  node {host}: {node['state']} (ranks {', '.join(map(str, node['ranks']))}: {counts})")
    lines += [f"  {reason['state']}: {reason['device']}: {reason['text']}" for reason in health["reasons"]]
    lines += [f"  {note}" for note in health.get("notes") or ()]
    lines += [f"  not checked: {item}" for item in health.get("unchecked") or ()]
    return lines
