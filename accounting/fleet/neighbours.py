"""Busy neighbours per rank, not per host: other work on the cores or the device a rank measured with.

A load average is the host's; two ranks of one host read the same one. What is a rank's own:

- a CPU rank pinned to its cores (:func:`accounting.fleet.launch.pin_cpu`): the share of those cores' time
  other processes took (``/proc/stat``'s ``cpuN`` lines less the rank's own CPU time,
  :class:`accounting.telemetry.cpu.ForeignCpuWindow`), while it measured its device (the telemetry
  summary's ``foreign_cpu_share``) and while it timed the collectives and links (``record["neighbours"]``);
- a GPU rank: the memory other processes hold on its device (NVML's running processes, the telemetry
  summary's ``other_process_memory_bytes``), busy above the validity tags' ``busy`` line.

Where several ranks of a host share cores (more ranks than cores), each one's figure holds its fleet
peers' work too: it is reported as shared, not called a neighbour.

>>> record = {"identity": {"host": "vm", "kind": "cpu", "cpus": [1]},
...           "telemetry": {"foreign_cpu_share": 0.48, "foreign_cpus": [1]}, "neighbours": None}
>>> found = neighbours([{"identity": {"host": "vm", "kind": "cpu", "cpus": [0]}, "telemetry": {}}, record],
...                    busy_cpu_share=0.1)
>>> found[1]["busy"], found[1]["share"], found[1]["where"]
(True, 0.48, 'CPU 1')
"""

from accounting._units import readable_bytes
from accounting.telemetry.validity import BUSY_OTHER_PROCESS_BYTES

WINDOWS = (("telemetry", "while it measured its device"), ("neighbours", "while it timed the collectives and links"))
"""Where a rank's foreign CPU share is read, and how the verdict says when."""


def _cpus(cpus) -> str:
    cpus = list(cpus or ())
    return ("CPU " if len(cpus) == 1 else "CPUs ") + ",".join(map(str, cpus))


def neighbours(records, *, busy_cpu_share: float) -> dict:
    """``{rank: {...}}`` for every rank with a record: ``share`` (the largest foreign share of its cores over
    its windows, or of its device's memory), ``where`` (its cores or device), ``windows`` (share per window),
    ``shared_with`` (fleet ranks on the same cores), ``busy`` and ``why`` (the verdict's words, or ``None``)."""
    identities = {rank: (record or {}).get("identity") or {} for rank, record in enumerate(records)}
    found = {}
    for rank, record in enumerate(records):
        if not record:
            continue
        identity = identities[rank]
        telemetry = record.get("telemetry") or {}
        entry = {"share": None, "where": None, "windows": {}, "shared_with": [], "busy": False, "why": None,
                 "other_process_memory_bytes": telemetry.get("other_process_memory_bytes")}
        mine = set(identity.get("cpus") or ())
        if identity.get("kind") == "cpu" and mine:
            entry["shared_with"] = sorted(peer for peer, other in identities.items() if peer != rank
                                          and other.get("host") == identity.get("host")
                                          and mine & set(other.get("cpus") or ()))
            entry["where"] = _cpus(sorted(mine))
            for key, when in WINDOWS:
                window = record.get(key) or {}
                if window.get("foreign_cpu_share") is not None:
                    entry["windows"][when] = window["foreign_cpu_share"]
            if entry["windows"]:
                entry["share"] = max(entry["windows"].values())
            if entry["share"] is not None and entry["share"] > busy_cpu_share and not entry["shared_with"]:
                parts = [f"{share:.0%} {when}" for when, share in entry["windows"].items()]
                first, rest = parts[0].split(" ", 1)
                entry.update(busy=True, why=f"other processes took {first} of its {entry['where']} {rest}"
                                            + "".join(f" and {part}" for part in parts[1:]))
        held = entry["other_process_memory_bytes"]
        if identity.get("kind") != "cpu" and held is not None:
            memory = identity.get("memory_bytes")
            entry["where"] = identity.get("device")
            entry["share"] = held / memory if memory else None
            if held > BUSY_OTHER_PROCESS_BYTES:
                entry.update(busy=True, why=f"other processes hold {readable_bytes(held)} on its device "
                                            f"{identity.get('device')}")
        found[rank] = entry
    return found
