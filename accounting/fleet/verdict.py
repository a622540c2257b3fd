"""The verdict on rank 0: stragglers, configuration drift, slow or wrong collectives, failed and hung ranks.

Pure functions of the gathered records (see :mod:`accounting.fleet.results`), tested on crafted figures.

- **straggler**: a rank whose best TFLOP/s for a dtype is below ``fraction ×`` the median of the *other*
  ranks' best (the median, so the bad rank cannot drag its own yardstick down; ``fraction`` from
  ``benchmarks.json``, ``fleet.straggler_fraction``);
- **slow memory** and **often slowest**: the same rule on the rank's memory bandwidth, and on its share of
  the collective rows in which it was the slowest (:mod:`accounting.fleet.figures`; fractions in
  ``fleet.figure_fractions``);
- **slow link**: a directed point-to-point link below its fraction of the median of the other pairs' links,
  both ends named (:mod:`accounting.fleet.links`);
- **busy**: a rank that shared its cores or its device with other work (:mod:`accounting.fleet.neighbours`);
  its low figures are named in that flag, not as a straggler's, and the verdict says it was busy;
- **below floor** / **above peak** / **wrong result**: a rank whose best MFU for a dtype is under the dtype's
  absolute floor, or over the ceiling (a wrong peak, a faster mode than the dtype's), or whose checked product was
  wrong — the report's own verdict on that rank;
- **drift**: a rank whose device model, driver, CUDA/ROCm or torch version (:data:`~accounting.fleet.identity.DRIFT_FIELDS`)
  differs from the majority's — or every rank, naming each value, when no value has a majority;
- **wrong values**: a collective whose checked result had wrong elements on any rank (nccl-tests' ``#wrong``);
- **slow collective**: a collective whose best bus bandwidth over its message sizes (launch-bound sizes
  aside) is below its scope's minimum (``--min-busbw``, :mod:`accounting.fleet.thresholds`);
- **impossible**: a rank whose best figure for a dtype is more than its SMs can do at the highest clock its window
  read (:func:`impossible_flags`);
- **failed** / **left out** / **hung**: a rank that raised (its error), that its group left out of a scope's
  collectives because it failed there, or that never reached a barrier.

>>> [flag.message for flag in stragglers("float32", {0: 100.0, 1: 98.0, 2: 60.0}, fraction=0.9)]
['rank 2 float32: best 60 TFLOP/s < 0.9 × 99 (median of the other ranks)']
"""

import statistics
from collections import Counter
from dataclasses import asdict, dataclass

from accounting._units import GB, TERA
from accounting.bench.matrix import DEFAULT_BUSY_CPU_SHARE, DEFAULT_FIGURE_FRACTIONS
from accounting.fleet.collectives import algbw, busbw, launch_bound
from accounting.fleet.figures import (
    above_peers,
    bandwidth_by_rank,
    below_peers,
    slowest_shares,
)
from accounting.fleet.identity import DRIFT_FIELDS
from accounting.fleet.links import common_end, link_rows, slow_links
from accounting.fleet.neighbours import neighbours
from accounting.fleet.thresholds import as_table, judged_scope, minimum_for
from accounting.hardware.flops_per_clock import IMPOSSIBLE  # a rank's best figure failed the physical check
from accounting.report.accumulation import dtype_label
from accounting.report.verdict import ABOVE_PEAK, BELOW_FLOOR, WRONG_RESULT

STRAGGLER = "straggler"
FLOOR = BELOW_FLOOR
OVER_PEAK = ABOVE_PEAK
WRONG_PRODUCT = WRONG_RESULT
"""A rank whose report found a product wrong (Freivalds' check or the repeat check): its device failed."""
DRIFT = "drift"
WRONG = "wrong values"
SLOW_COLLECTIVE = "slow collective"
FAILED = "failed"
LEFT_OUT = "left out"
HUNG = "hung"
SLOW_MEMORY = "slow memory"
OFTEN_SLOWEST = "often slowest"
SLOW_LINK = "slow link"
BUSY = "busy"

TIME_OVER_RANKS = "mean"
"""How a row's time is taken over its ranks: their mean, as nccl-tests reports by default (``-a 1``)."""

HEALTHY = "healthy"
FLAGGED = "flagged"
BUSY_ONLY = "busy"
"""The verdict when every flag is a busy rank's: the fleet was not measured alone, nothing else was found."""


@dataclass(frozen=True)
class Flag:
    """One thing wrong: its ``kind`` (a constant above), the rank it concerns (``None``: a group), a message,
    what it is about where that is one name (the dtype of a straggler, the field that drifted, the figure),
    and for a link both its ends (``ranks``)."""

    kind: str
    rank: int | None
    message: str
    subject: str | None = None
    ranks: tuple | None = None

    def as_dict(self) -> dict:
        """The flag as plain JSON values; ``ranks`` only where the flag has two ends (a link)."""
        out = asdict(self)
        if self.ranks is None:
            del out["ranks"]
        else:
            out["ranks"] = list(self.ranks)
        return out


def _g(value: float) -> str:
    return f"{value:.3g}"


def stragglers(dtype: str, best: dict, *, fraction: float) -> list[Flag]:
    """Ranks whose ``best[rank]`` (TFLOP/s, or any rate) is below ``fraction ×`` the median of the others'
    (an fp8 dtype named with its accumulation, :mod:`accounting.report.accumulation`)."""
    label = dtype_label(dtype)
    return [Flag(STRAGGLER, rank, f"rank {rank} {label}: best {_g(value)} TFLOP/s < {fraction:g} × "
                                  f"{_g(median)} (median of the other ranks)", subject=dtype)
            for rank, value, median in below_peers(best, fraction=fraction)]


MEMORY_FIGURE = "memory bandwidth"
SLOWEST_FIGURE = "slowest share"


def figure_flags(records, rows, *, fractions: dict) -> list[Flag]:
    """Memory bandwidth below its fraction of the other ranks' median; a rank slowest in the collectives far more
    often than the others (:mod:`accounting.fleet.figures`). Each flag names the figure and the rank."""
    flags = []
    fraction = fractions["memory_bandwidth"]
    for rank, value, median in below_peers(bandwidth_by_rank(records), fraction=fraction):
        flags.append(Flag(SLOW_MEMORY, rank, f"rank {rank} {MEMORY_FIGURE}: copy {value / GB:.3g} GB/s < "
                                             f"{fraction:g} × {median / GB:.3g} (median of the other ranks)",
                          subject=MEMORY_FIGURE))
    shares = slowest_shares(rows)
    fraction = fractions["slowest_share"]
    for rank, share, median in above_peers(shares, fraction=fraction):
        flags.append(Flag(OFTEN_SLOWEST, rank, f"rank {rank} {SLOWEST_FIGURE}: the slowest in {share:.0%} of its "
                                               f"{shares[rank]['rows']} collective rows > {median:.0%} (median of the "
                                               f"other ranks) / {fraction:g}", subject=SLOWEST_FIGURE))
    return flags


def link_flags(rows, *, fraction: float) -> list[Flag]:
    """Wrong elements received over a link; a link below ``fraction ×`` the median of the other pairs' links
    (:func:`accounting.fleet.links.slow_links`), both ends named, and the common end of every slow link."""
    flags = [Flag(WRONG, None, f"point-to-point {row['scope']} rank {row['src']} → rank {row['dst']}: {row['wrong']} "
                               "wrong element(s) received", subject="p2p", ranks=(row["src"], row["dst"]))
             for row in rows if row["wrong"]]
    slow = slow_links(rows, fraction=fraction)
    shared = common_end(slow)
    for row, median in slow:
        common = f"; rank {shared} is an end of every slow link" if shared is not None else ""
        flags.append(Flag(SLOW_LINK, None, f"{row['scope']} link rank {row['src']} → rank {row['dst']}: "
                                           f"{row['bytes_per_s'] / GB:.3g} GB/s < {fraction:g} × {median / GB:.3g} "
                                           f"(median of the other pairs' links){common}",
                          subject=f"{row['src']}->{row['dst']}", ranks=(row["src"], row["dst"])))
    return flags


def busy_flags(found: dict, low: list[Flag]) -> list[Flag]:
    """One flag per busy rank (:func:`accounting.fleet.neighbours.neighbours`), naming its low figures (``low``:
    the figure flags of that rank, which it replaces): they are not the device's."""
    flags = []
    for rank, entry in sorted(found.items()):
        if not entry["busy"]:
            continue
        figures = [flag.message.split(": ", 1)[1] if ": " in flag.message else flag.message
                   for flag in low if flag.rank == rank]
        said = f"; its low figures are not the device's: {'; '.join(figures)}" if figures else ""
        flags.append(Flag(BUSY, rank, f"rank {rank} shared its device with other work: {entry['why']}{said}",
                          subject=entry["where"]))
    return flags


def drift(identities: dict) -> list[Flag]:
    """Ranks whose :data:`DRIFT_FIELDS` differ from the majority (``identities``: rank -> identity dict).

    >>> same = {"name": "H100", "driver": "550", "runtime": "CUDA 12.4", "torch": "2.5"}
    >>> [flag.message for flag in drift({0: same, 1: same, 2: {**same, "driver": "535"}})]
    ["rank 2 driver '535' differs from the majority's '550' (ranks 0, 1)"]
    """
    flags = []
    count = len(identities)
    for field in DRIFT_FIELDS:
        values = {rank: identity.get(field) for rank, identity in identities.items()}
        tally = Counter(values.values())
        if len(tally) < 2:
            continue
        value, votes = tally.most_common(1)[0]
        if votes * 2 > count:
            holders = ", ".join(str(rank) for rank, held in sorted(values.items()) if held == value)
            for rank, held in sorted(values.items()):
                if held != value:
                    flags.append(Flag(DRIFT, rank, f"rank {rank} {field} {held!r} differs from the majority's "
                                                   f"{value!r} (ranks {holders})", subject=field))
            continue
        spread = "; ".join(f"{held!r} on ranks {', '.join(str(r) for r, v in sorted(values.items()) if v == held)}"
                           for held in tally)
        for rank in sorted(values):
            flags.append(Flag(DRIFT, rank, f"rank {rank} {field}: no majority ({spread})", subject=field))
    return flags


def best_by_dtype(records) -> dict:
    """``{dtype: {rank: best FLOP/s}}`` over the ranks whose report measured the dtype."""
    best: dict = {}
    for rank, record in enumerate(records):
        report = (record or {}).get("report")
        if not report:
            continue
        for dtype, section in report["dtypes"].items():
            if section.get("best"):
                best.setdefault(dtype, {})[rank] = section["best"]["flops_per_s"]
    return best


def floor_flags(records) -> list[Flag]:
    """Ranks whose report judged a dtype below its MFU floor, above the peak (a wrong peak or timer), or found one
    of its products wrong (``wrong result``: the device failed, :mod:`accounting.fleet.health`).

    >>> wrong = {"status": "wrong result", "message": "wrong result: float32 64x64x64 product wrong: row 3"}
    >>> [(flag.kind, flag.rank) for flag in floor_flags([None, {"report": {"dtypes": {"float32": {"verdict": wrong}}}}])]
    [('wrong result', 1)]
    """
    flags = []
    for rank, record in enumerate(records):
        report = (record or {}).get("report")
        for dtype, section in (report or {}).get("dtypes", {}).items():
            status = section["verdict"]["status"]
            if status in (FLOOR, OVER_PEAK, WRONG_PRODUCT):
                flags.append(Flag(status, rank, f"rank {rank} {dtype}: {section['verdict']['message']}", subject=dtype))
    return flags


def impossible_flags(records) -> list[Flag]:
    """Ranks whose best figure for a dtype fails the physical check (more than the SMs can do at the highest clock
    its window read, :func:`accounting.hardware.flops_per_clock.physical_check`): no reading caught the clock the
    work ran at, or the timer is wrong, so the figure is not compared as it stands.

    >>> best = {"flops_per_s": 7.931e14, "tags": ["impossible: 793.1 TFLOP/s > 132 SMs × 4096 FLOP/clock × 1350 MHz"]}
    >>> [flag.message for flag in impossible_flags([{"report": {"dtypes": {"bfloat16": {"best": best}}}}])]
    ['rank 0 bfloat16: best 793 TFLOP/s fails the physical check: 793.1 TFLOP/s > 132 SMs × 4096 FLOP/clock × 1350 MHz']
    """
    flags = []
    for rank, record in enumerate(records):
        report = (record or {}).get("report")
        for dtype, section in (report or {}).get("dtypes", {}).items():
            best = section.get("best") or {}
            for tag in best.get("tags") or ():
                if tag.startswith(f"{IMPOSSIBLE}:"):
                    label = dtype_label(dtype)
                    flags.append(Flag(IMPOSSIBLE, rank, f"rank {rank} {label}: best {_g(best['flops_per_s'] / TERA)} "
                                                        f"TFLOP/s fails the physical check:{tag.split(':', 1)[1]}",
                                      subject=dtype))
    return flags


def collective_rows(records) -> list[dict]:
    """One row per scope, group, collective and size, as nccl-tests reports it: ``seconds`` is the *mean*
    over the group's ranks of their seconds per call (nccl-tests' default ``-a 1``; README "Arguments"),
    algbw and busbw come from it. Kept beside it: every rank's own seconds, the slowest rank and its
    time, the wrong elements summed, the nodes the group spans (from the ranks' hosts), and
    ``launch_bound`` (any rank spent :data:`~accounting.fleet.collectives.LAUNCH_BOUND_FRACTION` of its
    time per call launching calls: the figure is the launch rate, not the link's)."""
    hosts = {rank: ((record or {}).get("identity") or {}).get("host") for rank, record in enumerate(records)}
    rows: dict = {}
    for rank, record in enumerate(records):
        for scope, entry in ((record or {}).get("collectives") or {}).items():
            for timed in entry["results"]:
                ranks = tuple(timed.get("ranks", entry["ranks"]))
                key = (scope, ranks, timed["collective"], timed["bytes"])
                row = rows.setdefault(key, {
                    "scope": scope, "ranks": list(ranks), "collective": timed["collective"], "bytes": timed["bytes"],
                    "count": timed["count"], "type": timed["type"], "redop": timed["redop"], "root": timed["root"],
                    "seconds_by_rank": {}, "iterations": timed["iterations"], "wrong": 0, "launch_bound": False,
                })
                row["seconds_by_rank"][rank] = timed["seconds"]
                row["wrong"] += timed["wrong"]
                row["launch_bound"] |= launch_bound(timed["seconds"], timed.get("launch_seconds"))
    result = []
    for row in rows.values():
        seconds = statistics.fmean(row["seconds_by_rank"].values())
        slowest = max(row["seconds_by_rank"], key=row["seconds_by_rank"].get)
        spanned = {hosts.get(rank) for rank in row["ranks"]}
        row.update(seconds=seconds, time_over_ranks=TIME_OVER_RANKS, slowest_rank=slowest,
                   slowest_seconds=row["seconds_by_rank"][slowest], nodes=None if None in spanned else len(spanned),
                   algbw_bytes_per_s=algbw(row["bytes"], seconds),
                   busbw_bytes_per_s=busbw(row["collective"], row["bytes"], seconds, len(row["ranks"])))
        row["seconds_by_rank"] = {str(rank): value for rank, value in sorted(row["seconds_by_rank"].items())}
        result.append(row)
    return result


def best_busbw(rows) -> dict:
    """``{(scope, ranks, collective): (best busbw, launch-bound)}``: the best over the sizes that are not
    launch-bound, or over every size (and ``True``) when all of them are."""
    grouped: dict = {}
    for row in rows:
        grouped.setdefault((row["scope"], tuple(row["ranks"]), row["collective"]), []).append(row)
    best = {}
    for key, group in grouped.items():
        bandwidth = [row for row in group if not row.get("launch_bound")]
        chosen = bandwidth or group
        best[key] = (max(row["busbw_bytes_per_s"] for row in chosen), not bandwidth)
    return best


def collective_flags(rows, *, min_busbw_gbps=None) -> list[Flag]:
    """Wrong values in any row; a collective (per scope and group) whose best busbw is under its minimum.

    ``min_busbw_gbps``: a number of GB/s for every scope, or a table per scope and collective
    (:mod:`accounting.fleet.thresholds`); a world on one node meets the ``intra-node`` minimum.
    """
    flags = []
    nodes = {}
    for row in rows:
        where = f"{row['scope']} {row['collective']} ({len(row['ranks'])} ranks)"
        if row["wrong"]:
            flags.append(Flag(WRONG, None, f"{where} at {row['bytes']} B: {row['wrong']} wrong element(s)"))
        nodes[(row["scope"], tuple(row["ranks"]), row["collective"])] = row.get("nodes")
    table = as_table(min_busbw_gbps)
    for (scope, ranks, collective), (value, launch_only) in best_busbw(rows).items():
        judged = judged_scope(scope, nodes[(scope, ranks, collective)])
        minimum = minimum_for(table, judged, collective)
        if minimum is not None and value < minimum * GB:
            bound = " (every size launch-bound)" if launch_only else ""
            flags.append(Flag(SLOW_COLLECTIVE, None,
                              f"{scope} {collective} ranks {list(ranks)}: best busbw {value / GB:.3g} GB/s{bound} < "
                              f"minimum {minimum:g} GB/s for {judged} {collective}", subject=collective))
    return flags


def left_out_flags(records) -> list[Flag]:
    """Ranks their group left out of a scope's collectives because they failed (each once per scope)."""
    seen: dict = {}
    for record in records:
        for scope, entry in ((record or {}).get("collectives") or {}).items():
            for stop in entry.get("interrupted", []):
                if set(stop["failed_ranks"]) >= set(stop["ranks"]):
                    continue  # every rank failed: the collective's fault, not a device's
                for rank in stop["failed_ranks"]:
                    where = stop["collective"] + (f" at {stop['bytes']} B" if stop["bytes"] else "")
                    seen.setdefault((scope, rank), f"rank {rank} left out of the {scope} collectives: it failed at "
                                                   f"{where}; the other ranks went on without it")
    return [Flag(LEFT_OUT, rank, message, subject=scope) for (scope, rank), message in sorted(seen.items())]


def per_rank_figures(records, rows, found: dict) -> dict:
    """``{rank: {...}}``: the figures compared across ranks besides TFLOP/s (memory bandwidth, slowest share)
    and the rank's neighbours, for the text, the JSON and the plot."""
    bandwidth = bandwidth_by_rank(records)
    shares = slowest_shares(rows)
    return {str(rank): {"memory_bytes_per_s": bandwidth.get(rank), "slowest_share": shares.get(rank),
                        "neighbours": found.get(rank)}
            for rank, record in enumerate(records) if record}


def judge(records, *, fraction: float, min_busbw_gbps=None, hung=(), figure_fractions=None,
          busy_cpu_share: float | None = None) -> dict:
    """Everything flagged about the fleet, the collective rows, the links and the per-rank figures, as plain
    JSON values.

    ``min_busbw_gbps``: ``None`` (bus bandwidths reported, not judged), a number of GB/s, or a table
    per scope and collective (:mod:`accounting.fleet.thresholds`). ``figure_fractions`` (per figure of
    ``fleet.figure_fractions``) and ``busy_cpu_share`` default to benchmarks.json's defaults. A busy rank's
    low figures are named in its busy flag, first, instead of as a straggler's.
    """
    fractions = {**DEFAULT_FIGURE_FRACTIONS, **(figure_fractions or {})}
    busy_share = DEFAULT_BUSY_CPU_SHARE if busy_cpu_share is None else busy_cpu_share
    flags = [Flag(HUNG, rank, f"rank {rank} never reached the barrier (it hangs or died)") for rank in hung]
    for rank, record in enumerate(records):
        for error in (record or {}).get("errors", []):
            flags.append(Flag(FAILED, rank, f"rank {rank} failed while {error['phase']}: {error['error']}"))
        for error in ((record or {}).get("p2p") or {}).get("errors", []):
            flags.append(Flag(FAILED, rank, f"rank {rank} failed while timing its point-to-point links: {error}"))
    flags += left_out_flags(records)
    rows = collective_rows(records)
    low = []
    for dtype, best in best_by_dtype(records).items():
        low += stragglers(dtype, {rank: value / TERA for rank, value in best.items()}, fraction=fraction)
    low += figure_flags(records, rows, fractions=fractions)
    found = neighbours(records, busy_cpu_share=busy_share)
    busy = {rank for rank, entry in found.items() if entry["busy"]}
    flags += busy_flags(found, low)
    flags += [flag for flag in low if flag.rank not in busy]
    flags += floor_flags(records)
    flags += impossible_flags(records)
    identities = {rank: record["identity"] for rank, record in enumerate(records) if record and record.get("identity")}
    flags += drift(identities)
    flags += collective_flags(rows, min_busbw_gbps=min_busbw_gbps)
    links = link_rows(records)
    flags += link_flags(links, fraction=fractions["p2p_link"])
    if not flags:
        verdict = HEALTHY
    else:
        verdict = BUSY_ONLY if all(flag.kind == BUSY for flag in flags) else FLAGGED
    return {"verdict": verdict, "flags": [flag.as_dict() for flag in flags], "collectives": rows, "links": links,
            "figures": per_rank_figures(records, rows, found)}
