"""The fleet document as text for a terminal: a per-rank table, the collectives as nccl-tests prints
them, then notes and flags. Pure functions of the document (:mod:`accounting.fleet.results`).

>>> print(busbw_cell(None), busbw_cell(2.5e9))
— 2.50
"""

from accounting._units import GB
from accounting.console import NOT_KNOWN, fraction, table, tflops
from accounting.fleet.thresholds import as_table, judged_scope, minimum_for
from accounting.fleet.verdict import best_busbw

MICRO = 1e6


def busbw_cell(bytes_per_s) -> str:
    """Bytes/s as GB/s with two decimals (10⁹ bytes, as nccl-tests), or ``—``."""
    return NOT_KNOWN if bytes_per_s is None else f"{bytes_per_s / GB:.2f}"


def _number(value, digits: int = 0) -> str:
    return NOT_KNOWN if value is None else f"{value:.{digits}f}"


def _dtypes(document: dict) -> list[str]:
    seen = []
    for record in document["ranks"]:
        for dtype in ((record or {}).get("report") or {}).get("dtypes", {}):
            if dtype not in seen:
                seen.append(dtype)
    return seen


def _flagged_kinds(document: dict) -> dict:
    kinds: dict = {}
    for flag in document["flags"]:
        if flag["rank"] is not None:
            kinds.setdefault(flag["rank"], [])
            if flag["kind"] not in kinds[flag["rank"]]:
                kinds[flag["rank"]].append(flag["kind"])
    return kinds


def rank_rows(document: dict) -> tuple[list[str], list[list[str]]]:
    """Header and one row per rank: host, device, best TFLOP/s and MFU per dtype, bandwidth, telemetry, flags."""
    dtypes = _dtypes(document)
    header = ["rank", "host", "device"]
    for dtype in dtypes:
        header += [f"{dtype} TFLOP/s", "MFU"]
    header += ["copy GB/s", "clock MHz", "power W", "temp °C", "throttle", "flags"]
    kinds = _flagged_kinds(document)
    hung = set(document["hung_ranks"])
    rows = []
    for rank, record in enumerate(document["ranks"]):
        record = record or {}
        identity = record.get("identity") or {}
        report = record.get("report") or {}
        telemetry = record.get("telemetry") or {}
        row = [str(rank), identity.get("host", NOT_KNOWN), _device(identity)]
        for dtype in dtypes:
            section = report.get("dtypes", {}).get(dtype) or {}
            best = section.get("best")
            row += [tflops(best and best["flops_per_s"]), fraction(section.get("mfu"))]
        bandwidth = (report.get("bandwidth") or {}).get("measured_bytes_per_s")
        row += [busbw_cell(bandwidth), _number(telemetry.get("clock_mhz_mean")), _number(telemetry.get("power_w_mean")),
                _number(telemetry.get("temperature_c_max")), ",".join(telemetry.get("throttle_reasons") or ()) or NOT_KNOWN]
        marks = list(kinds.get(rank, []))
        if rank in hung and "hung" not in marks:
            marks.append("hung")
        row.append(", ".join(marks) or "ok")
        rows.append(row)
    return header, rows


def _device(identity: dict) -> str:
    if not identity:
        return NOT_KNOWN
    name = identity.get("name", "?")
    if identity.get("kind") == "cpu":
        cpus = identity.get("cpus")
        return f"{name} ({len(cpus)} CPU{'s' if len(cpus) != 1 else ''})" if cpus else name
    return f"{identity.get('device')} {name}" + (f" [{identity['pci_bus_id']}]" if identity.get("pci_bus_id") else "")


def collective_table(document: dict) -> list[str]:
    """nccl-tests' columns (size, count, type, redop, root, time, algbw, busbw, #wrong) per scope and
    collective; the time is the mean over the group's ranks (nccl-tests' default), the slowest rank beside it,
    and ``launch-bound`` marks a size whose time is the host's launch rate rather than the link's."""
    rows = []
    for row in document["collectives"]:
        rows.append([row["scope"], row["collective"], str(len(row["ranks"])), str(row["bytes"]), str(row["count"]),
                     row["type"], row["redop"], str(row["root"]), f"{row['seconds'] * MICRO:.1f}",
                     busbw_cell(row["algbw_bytes_per_s"]), busbw_cell(row["busbw_bytes_per_s"]), str(row["wrong"]),
                     str(row["slowest_rank"]), "launch-bound" if row.get("launch_bound") else ""])
    if not rows:
        return ["Collectives: none timed"]
    header = ["scope", "collective", "ranks", "size (B)", "count (elements)", "type", "redop", "root", "time (us)",
              "algbw (GB/s)", "busbw (GB/s)", "#wrong", "slowest rank", "note"]
    title = ("Collectives (time per call: the mean over ranks, as nccl-tests' default -a 1; GB/s = 10^9 B/s; "
             "busbw = algbw × nccl-tests' factor; launch-bound: the host launching calls set the pace, not the link):")
    return [title, table(header, rows, indent="  ")]


def _best_busbw_lines(document: dict) -> list[str]:
    wrong: dict = {}
    nodes: dict = {}
    for row in document["collectives"]:
        key = (row["scope"], tuple(row["ranks"]), row["collective"])
        wrong[key] = wrong.get(key, 0) + row["wrong"]
        nodes[key] = row.get("nodes")
    table_ = as_table(document["settings"].get("min_busbw_gbps"))
    lines = []
    for key, (value, launch_only) in best_busbw(document["collectives"]).items():
        scope, ranks, collective = key
        minimum = minimum_for(table_, judged_scope(scope, nodes[key]), collective)
        status = "FAILED" if wrong[key] or (minimum is not None and value < minimum * GB) else "OK"
        judged = "not judged" if minimum is None else f"minimum {minimum:g}"
        bound = " (every size launch-bound)" if launch_only else ""
        lines.append(f"  {scope} {collective} ({len(ranks)} ranks): best busbw {value / GB:.2f} GB/s{bound} "
                     f"({judged}), #wrong {wrong[key]}  {status}")
    if lines and table_ is None:
        lines.append("  (no --min-busbw given: bus bandwidths are reported, not judged)")
    return lines


def render(document: dict) -> str:
    """The whole fleet as text."""
    settings = document["settings"]
    head = (f"Fleet: {settings['world_size']} rank(s)" + (f" ({settings['backend']})" if settings["backend"] else "")
            + f", budget {settings['budget_s']:g} s per rank, straggler below {settings['straggler_fraction']:g} × "
              "the median of the other ranks")
    loads = [((record or {}).get("report") or {}).get("machine", {}).get("load_average_1min") for record in document["ranks"]]
    loads = [load for load in loads if load is not None]
    if loads:
        head += f"; load average {max(loads):.1f} before measuring"
    header, rows = rank_rows(document)
    blocks = [[head], ["Ranks (best of each rank's matmul sweep):", table(header, rows, indent="  ")],
              collective_table(document)]
    best = _best_busbw_lines(document)
    if best:
        blocks.append(["Bus bandwidth:"] + best)
    if document["notes"]:
        blocks.append(["Notes:"] + [f"  - {note}" for note in document["notes"]])
    flags = [f"  {flag['kind']}: {flag['message']}" for flag in document["flags"]]
    blocks.append(["Verdict: " + document["verdict"] + (f" ({len(flags)} flag(s))" if flags else "")] + flags)
    return "\n\n".join("\n".join(block) for block in blocks)
