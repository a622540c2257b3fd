"""The verdict on rank 0: stragglers, configuration drift, slow or wrong collectives, failed and hung ranks.

Pure functions of the gathered records (see :mod:`accounting.fleet.results`), tested on crafted figures.

- **straggler**: a rank whose best TFLOP/s for a dtype is below ``fraction ×`` the median of the *other*
  ranks' best (the median, so the bad rank cannot drag its own yardstick down; ``fraction`` from
  ``benchmarks.json``, ``fleet.straggler_fraction``);
- **below floor** / **above peak**: a rank whose best MFU for a dtype is under the dtype's absolute floor, or
  over the ceiling (a wrong peak, a faster mode than the dtype's) — the report's own verdict on that rank;
- **drift**: a rank whose device model, driver, CUDA/ROCm or torch version (:data:`~accounting.fleet.identity.DRIFT_FIELDS`)
  differs from the majority's — or every rank, naming each value, when no value has a majority;
- **wrong values**: a collective whose checked result had wrong elements on any rank (nccl-tests' ``#wrong``);
- **slow collective**: a collective whose best bus bandwidth over its message sizes (launch-bound sizes
  aside) is below its scope's minimum (``--min-busbw``, :mod:`accounting.fleet.thresholds`);
- **failed** / **left out** / **hung**: a rank that raised (its error), that its group left out of a scope's
  collectives because it failed there, or that never reached a barrier.

>>> [flag.message for flag in stragglers("float32", {0: 100.0, 1: 98.0, 2: 60.0}, fraction=0.9)]
['rank 2 float32: best 60 TFLOP/s < 0.9 × 99 (median of the other ranks)']
"""

import statistics
from collections import Counter
from dataclasses import asdict, dataclass

from accounting._units import GB, TERA
from accounting.fleet.collectives import algbw, busbw, launch_bound
from accounting.fleet.identity import DRIFT_FIELDS
from accounting.fleet.thresholds import as_table, judged_scope, minimum_for
from accounting.report.verdict import ABOVE_PEAK, BELOW_FLOOR

STRAGGLER = "straggler"
FLOOR = BELOW_FLOOR
OVER_PEAK = ABOVE_PEAK
DRIFT = "drift"
WRONG = "wrong values"
SLOW_COLLECTIVE = "slow collective"
FAILED = "failed"
LEFT_OUT = "left out"
HUNG = "hung"

TIME_OVER_RANKS = "mean"
"""How a row's time is taken over its ranks: their mean, as nccl-tests reports by default (``-a 1``)."""

HEALTHY = "healthy"
FLAGGED = "flagged"


@dataclass(frozen=True)
class Flag:
    """One thing wrong: its ``kind`` (a constant above), the rank it concerns (``None``: a group), a message,
    and what it is about where that is one name (the dtype of a straggler, the field that drifted)."""

    kind: str
    rank: int | None
    message: str
    subject: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _g(value: float) -> str:
    return f"{value:.3g}"


def stragglers(dtype: str, best: dict, *, fraction: float) -> list[Flag]:
    """Ranks whose ``best[rank]`` (FLOP/s, or any rate) is below ``fraction ×`` the median of the others'."""
    flags = []
    for rank, value in sorted(best.items()):
        peers = [other for peer, other in best.items() if peer != rank]
        if not peers:
            continue
        median = statistics.median(peers)
        if value < fraction * median:
            flags.append(Flag(STRAGGLER, rank, f"rank {rank} {dtype}: best {_g(value)} TFLOP/s < {fraction:g} × "
                                               f"{_g(median)} (median of the other ranks)", subject=dtype))
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
    """Ranks whose report judged a dtype below its MFU floor, or above the peak (a wrong peak or timer)."""
    flags = []
    for rank, record in enumerate(records):
        report = (record or {}).get("report")
        for dtype, section in (report or {}).get("dtypes", {}).items():
            status = section["verdict"]["status"]
            if status in (FLOOR, OVER_PEAK):
                flags.append(Flag(status, rank, f"rank {rank} {dtype}: {section['verdict']['message']}", subject=dtype))
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


def judge(records, *, fraction: float, min_busbw_gbps=None, hung=()) -> dict:
    """Everything flagged about the fleet, and the collective rows, as plain JSON values.

    ``min_busbw_gbps``: ``None`` (bus bandwidths reported, not judged), a number of GB/s, or a table
    per scope and collective (:mod:`accounting.fleet.thresholds`).
    """
    flags = [Flag(HUNG, rank, f"rank {rank} never reached the barrier (it hangs or died)") for rank in hung]
    for rank, record in enumerate(records):
        for error in (record or {}).get("errors", []):
            flags.append(Flag(FAILED, rank, f"rank {rank} failed while {error['phase']}: {error['error']}"))
    flags += left_out_flags(records)
    for dtype, best in best_by_dtype(records).items():
        flags += stragglers(dtype, {rank: value / TERA for rank, value in best.items()}, fraction=fraction)
    flags += floor_flags(records)
    identities = {rank: record["identity"] for rank, record in enumerate(records) if record and record.get("identity")}
    flags += drift(identities)
    rows = collective_rows(records)
    flags += collective_flags(rows, min_busbw_gbps=min_busbw_gbps)
    return {"verdict": FLAGGED if flags else HEALTHY, "flags": [flag.as_dict() for flag in flags],
            "collectives": rows}
