"""The fleet document as text for a terminal: a per-rank table (its figures, its neighbours, its device's health),
the collectives as nccl-tests prints them, the point-to-point matrix, notes and flags, then the Health section
(each node's and the fleet's state, every failed or degraded device named with its reasons). Pure functions of
the document (:mod:`accounting.fleet.results`).

>>> print(busbw_cell(None), busbw_cell(2.5e9))
— 2.50
>>> neighbour_cell({"share": 0.48, "where": "CPU 1", "busy": True, "shared_with": []})
'48% of CPU 1 (busy)'
"""

from accounting._units import GB
from accounting.console import NOT_KNOWN, fraction, table, tflops
from accounting.fleet.health import health_lines
from accounting.fleet.thresholds import as_table, judged_scope, minimum_for
from accounting.fleet.verdict import best_busbw
from accounting.report.accumulation import dtype_label

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
        ranks = flag.get("ranks") or ([flag["rank"]] if flag["rank"] is not None else [])
        for rank in ranks:
            kinds.setdefault(rank, [])
            if flag["kind"] not in kinds[rank]:
                kinds[rank].append(flag["kind"])
    return kinds


def neighbour_cell(entry) -> str:
    """Other work's share of a rank's cores (or its device's memory), where it ran, and whether that made it busy."""
    if not entry or entry.get("share") is None:
        return NOT_KNOWN
    cell = f"{entry['share']:.0%} of {entry['where']}"
    if entry.get("shared_with"):
        return cell + f" (shared with rank {', '.join(map(str, entry['shared_with']))})"
    return cell + (" (busy)" if entry.get("busy") else "")


def _share_cell(entry) -> str:
    return NOT_KNOWN if not entry else f"{entry['share']:.0%} of {entry['rows']}"


def rank_rows(document: dict) -> tuple[list[str], list[list[str]]]:
    """Header and one row per rank: host, device, best TFLOP/s and MFU per dtype, bandwidth, telemetry, flags and
    the device's health (``healthy``, ``degraded``, ``failed``; a failed rank's figures are still shown)."""
    dtypes = _dtypes(document)
    header = ["rank", "host", "device"]
    for dtype in dtypes:
        header += [f"{dtype_label(dtype)} TFLOP/s", "MFU"]
    header += ["copy GB/s", "slowest", "clock MHz", "power W", "temp °C", "throttle", "neighbours", "flags", "health"]
    kinds = _flagged_kinds(document)
    hung = set(document["hung_ranks"])
    health = {entry["rank"]: entry["state"] for entry in (document.get("health") or {}).get("ranks", [])}
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
        figures = (document.get("figures") or {}).get(str(rank)) or {}
        row += [busbw_cell(bandwidth), _share_cell(figures.get("slowest_share")),
                _number(telemetry.get("clock_mhz_mean")), _number(telemetry.get("power_w_mean")),
                _number(telemetry.get("temperature_c_max")), ",".join(telemetry.get("throttle_reasons") or ()) or NOT_KNOWN,
                neighbour_cell(figures.get("neighbours"))]
        marks = list(kinds.get(rank, []))
        if rank in hung and "hung" not in marks:
            marks.append("hung")
        row.append(", ".join(marks) or "ok")
        row.append(health.get(rank, NOT_KNOWN))
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


def link_matrix(document: dict) -> list[str]:
    """The point-to-point links as one matrix per scope: GB/s from the row's rank to the column's, ``—`` where
    the pair was not timed (another node's, or sampled away); and how many rounds ran."""
    links = document.get("links") or []
    if not links:
        return []
    lines = [("Point-to-point links (GB/s = 10^9 B/s, row sends to column; each pair alone with its peer, "
              "both directions; the time is the mean of the two ends'):")]
    for scope in sorted({row["scope"] for row in links}):
        rows = [row for row in links if row["scope"] == scope]
        ranks = sorted({row["src"] for row in rows} | {row["dst"] for row in rows})
        cells = {(row["src"], row["dst"]): busbw_cell(row["bytes_per_s"]) for row in rows}
        body = [[str(src)] + [cells.get((src, dst), "·" if src == dst else NOT_KNOWN) for dst in ranks]
                for src in ranks]
        lines += [f"  {scope}:", table(["from ↓ to →"] + [str(rank) for rank in ranks], body, indent="    ")]
    runs = [((record or {}).get("p2p") or {}) for record in document["ranks"]]
    runs = [run for run in runs if run.get("rounds")]
    if runs:
        done, planned = min(run["rounds_run"] for run in runs), runs[0]["rounds"]
        sampled = "complete" if done >= planned else "sampled: the budget ran out"
        lines.append(f"  {done} of {planned} round(s) of disjoint pairs ran ({sampled}); "
                     f"{runs[0]['bytes']} B per transfer")
    return lines


def render(document: dict) -> str:
    """The whole fleet as text."""
    settings = document["settings"]
    head = (f"Fleet: {settings['world_size']} rank(s)" + (f" ({settings['backend']})" if settings["backend"] else "")
            + f", budget {settings['budget_s']:g} s per rank, straggler below {settings['straggler_fraction']:g} × "
              "the median of the other ranks")
    fractions = settings.get("figure_fractions")
    if fractions:
        head += (f" (memory bandwidth {fractions['memory_bandwidth']:g} ×, point-to-point links {fractions['p2p_link']:g} × "
                 f"the other pairs'; slowest share above the others' ÷ {fractions['slowest_share']:g})")
    if settings.get("busy_cpu_share") is not None:
        head += f"; busy: other work took over {settings['busy_cpu_share']:.0%} of a rank's cores"
    if settings.get("measuring_turns", 1) > 1:
        head += (f"; the CPU ranks of a node measured their own figures in {settings['measuring_turns']} turns, "
                 "one rank at a time")
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
    links = link_matrix(document)
    if links:
        blocks.append(links)
    if document["notes"]:
        blocks.append(["Notes:"] + [f"  - {note}" for note in document["notes"]])
    flags = [f"  {flag['kind']}: {flag['message']}" for flag in document["flags"]]
    blocks.append(["Verdict: " + document["verdict"] + (f" ({len(flags)} flag(s))" if flags else "")] + flags)
    if document.get("health"):
        blocks.append(health_lines(document["health"]))
    return "\n\n".join("\n".join(block) for block in blocks)
