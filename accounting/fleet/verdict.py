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
- **slow collective**: a collective whose best bus bandwidth over its message sizes is below ``--min-busbw``;
- **failed** / **hung**: a rank that raised (its error), or that never reached a barrier.

>>> [flag.message for flag in stragglers("float32", {0: 100.0, 1: 98.0, 2: 60.0}, fraction=0.9)]
['rank 2 float32: best 60 TFLOP/s < 0.9 × 99 (median of the other ranks)']
"""

import statistics
from collections import Counter
from dataclasses import asdict, dataclass

from accounting._units import GB, TERA
from accounting.fleet.collectives import algbw, busbw
from accounting.fleet.identity import DRIFT_FIELDS
from accounting.report.verdict import ABOVE_PEAK, BELOW_FLOOR

STRAGGLER = "straggler"
FLOOR = BELOW_FLOOR
OVER_PEAK = ABOVE_PEAK
DRIFT = "drift"
WRONG = "wrong values"
SLOW_COLLECTIVE = "slow collective"
FAILED = "failed"
HUNG = "hung"

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
    """One row per scope, group, collective and size: every rank's seconds per call, the slowest rank's
    time (the collective is done when the last rank is), algbw and busbw from it, and wrong elements summed."""
    rows: dict = {}
    for rank, record in enumerate(records):
        for scope, entry in ((record or {}).get("collectives") or {}).items():
            ranks = tuple(entry["ranks"])
            for timed in entry["results"]:
                key = (scope, ranks, timed["collective"], timed["bytes"])
                row = rows.setdefault(key, {
                    "scope": scope, "ranks": list(ranks), "collective": timed["collective"], "bytes": timed["bytes"],
                    "count": timed["count"], "type": timed["type"], "redop": timed["redop"], "root": timed["root"],
                    "seconds_by_rank": {}, "iterations": timed["iterations"], "wrong": 0,
                })
                row["seconds_by_rank"][rank] = timed["seconds"]
                row["wrong"] += timed["wrong"]
    result = []
    for row in rows.values():
        slowest = max(row["seconds_by_rank"], key=row["seconds_by_rank"].get)
        seconds = row["seconds_by_rank"][slowest]
        row.update(seconds=seconds, slowest_rank=slowest, algbw_bytes_per_s=algbw(row["bytes"], seconds),
                   busbw_bytes_per_s=busbw(row["collective"], row["bytes"], seconds, len(row["ranks"])))
        row["seconds_by_rank"] = {str(rank): value for rank, value in sorted(row["seconds_by_rank"].items())}
        result.append(row)
    return result


def collective_flags(rows, *, min_busbw_bytes_per_s: float | None) -> list[Flag]:
    """Wrong values in any row; a collective (per scope and group) whose best busbw is under the minimum."""
    flags = []
    best: dict = {}
    for row in rows:
        where = f"{row['scope']} {row['collective']} ({len(row['ranks'])} ranks)"
        if row["wrong"]:
            flags.append(Flag(WRONG, None, f"{where} at {row['bytes']} B: {row['wrong']} wrong element(s)"))
        key = (row["scope"], tuple(row["ranks"]), row["collective"])
        best[key] = max(best.get(key, 0.0), row["busbw_bytes_per_s"])
    if min_busbw_bytes_per_s is not None:
        for (scope, ranks, collective), value in best.items():
            if value < min_busbw_bytes_per_s:
                flags.append(Flag(SLOW_COLLECTIVE, None,
                                  f"{scope} {collective} ranks {list(ranks)}: best busbw {value / GB:.3g} GB/s < "
                                  f"--min-busbw {min_busbw_bytes_per_s / GB:g} GB/s"))
    return flags


def judge(records, *, fraction: float, min_busbw_bytes_per_s: float | None = None, hung=()) -> dict:
    """Everything flagged about the fleet, and the collective rows, as plain JSON values."""
    flags = [Flag(HUNG, rank, f"rank {rank} never reached the barrier (it hangs or died)") for rank in hung]
    for rank, record in enumerate(records):
        for error in (record or {}).get("errors", []):
            flags.append(Flag(FAILED, rank, f"rank {rank} failed while {error['phase']}: {error['error']}"))
    for dtype, best in best_by_dtype(records).items():
        flags += stragglers(dtype, {rank: value / TERA for rank, value in best.items()}, fraction=fraction)
    flags += floor_flags(records)
    identities = {rank: record["identity"] for rank, record in enumerate(records) if record and record.get("identity")}
    flags += drift(identities)
    rows = collective_rows(records)
    flags += collective_flags(rows, min_busbw_bytes_per_s=min_busbw_bytes_per_s)
    return {"verdict": FLAGGED if flags else HEALTHY, "flags": [flag.as_dict() for flag in flags],
            "collectives": rows}
