"""Every per-rank figure the fleet compares across ranks, and the one rule it compares them by.

The straggler rule (:mod:`accounting.fleet.verdict`): a rank is low when its figure is below
``fraction ×`` the median of the *other* ranks' (the median, so the low rank cannot drag its own
yardstick down and one other outlier cannot move it). It is applied to

- best matmul TFLOP/s per dtype (``fleet.straggler_fraction``);
- memory bandwidth, the report's device copy (``fleet.figure_fractions.memory_bandwidth``): a GPU whose
  HBM runs slow still reaches its compute-bound matmul peak;
- the share of the collective rows in which a rank was the slowest (``slowest_share``), where higher is
  worse: flagged above the median of the others' shares ÷ ``fraction`` and above chance (one in ``n``),
  over at least :data:`MIN_SLOWEST_ROWS` rows. A row names a slowest rank only when that rank's time is
  more than :data:`SLOWEST_MARGIN` above the median of the others' (where the row gives per-rank times).

>>> below_peers({0: 21.7, 1: 12.6}, fraction=0.85)
[(1, 12.6, 21.7)]
>>> shares = slowest_shares([{"ranks": [0, 1], "slowest_rank": 1}] * 11 + [{"ranks": [0, 1], "slowest_rank": 0}])
>>> shares[1]
{'share': 0.9166666666666666, 'rows': 12, 'chance': 0.5}
>>> [rank for rank, _share, _median in above_peers(shares, fraction=0.25)]
[1]
"""

import statistics

SLOWEST_MARGIN = 0.05
"""How much slower than the median of the others a rank's time in a collective row must be for the row to
count it as the slowest. The ranks of one collective finish together (each waits for the others inside it):
on two quiet gloo ranks here the per-rank times of 17 rows differed by 0.01–1.7 %, and the later of a
near-tie is the algorithm's structure (a broadcast's receiver finishes after its root), not a slow rank;
without the margin that structure alone made rank 1 "the slowest in 82 % of its rows" on a healthy node."""

MIN_SLOWEST_ROWS = 12
"""Collective rows a rank must have taken part in before its slowest share is judged: with two ranks, being
the slowest in 10 of 12 rows by chance alone has probability 1.9 % (see benchmarks.json's reasoning)."""


def below_peers(values: dict, *, fraction: float) -> list[tuple]:
    """``(rank, value, median of the others)`` for each rank whose value is below ``fraction ×`` that median."""
    low = []
    for rank, value in sorted(values.items()):
        peers = [other for peer, other in values.items() if peer != rank]
        if not peers:
            continue
        median = statistics.median(peers)
        if value < fraction * median:
            low.append((rank, value, median))
    return low


def bandwidth_by_rank(records) -> dict:
    """``{rank: bytes/s}`` of each rank's device copy (the report's memory bandwidth), where measured."""
    bandwidth = {}
    for rank, record in enumerate(records):
        section = (((record or {}).get("report") or {}).get("bandwidth") or {})
        if section.get("measured_bytes_per_s"):
            bandwidth[rank] = section["measured_bytes_per_s"]
    return bandwidth


def slowest_shares(rows) -> dict:
    """``{rank: {"share", "rows", "chance"}}`` over the collective rows of several ranks: the share of the rows
    the rank took part in where it was the slowest, their number, and the share chance alone gives it
    (the mean of one over the ranks of each row)."""
    counts: dict = {}
    for row in rows:
        ranks = [int(rank) for rank in row["ranks"]]
        if len(ranks) < 2:
            continue
        for rank in ranks:
            entry = counts.setdefault(rank, {"slowest": 0, "rows": 0, "chance": 0.0})
            entry["rows"] += 1
            entry["chance"] += 1 / len(ranks)
            entry["slowest"] += int(row["slowest_rank"]) == rank and _distinctly_slowest(row)
    return {rank: {"share": entry["slowest"] / entry["rows"], "rows": entry["rows"],
                   "chance": entry["chance"] / entry["rows"]} for rank, entry in sorted(counts.items())}


def _distinctly_slowest(row) -> bool:
    """Whether the row's slowest rank took more than :data:`SLOWEST_MARGIN` longer than the median of the others
    (a row without per-rank times keeps its ``slowest_rank`` as given)."""
    seconds = row.get("seconds_by_rank")
    if not seconds:
        return True
    slowest = seconds.get(str(row["slowest_rank"]), seconds.get(row["slowest_rank"]))
    others = [value for rank, value in seconds.items() if str(rank) != str(row["slowest_rank"])]
    return slowest is not None and bool(others) and slowest > (1 + SLOWEST_MARGIN) * statistics.median(others)


def above_peers(shares: dict, *, fraction: float, min_rows: int = MIN_SLOWEST_ROWS) -> list[tuple]:
    """``(rank, share, median of the others)`` for each rank slowest more often than the others' median share
    ÷ ``fraction`` and than chance, judged only with ``min_rows`` rows or more."""
    often = []
    for rank, entry in shares.items():
        peers = [other["share"] for peer, other in shares.items() if peer != rank]
        if not peers or entry["rows"] < min_rows:
            continue
        median = statistics.median(peers)
        if entry["share"] > median / fraction and entry["share"] > entry["chance"]:
            often.append((rank, entry["share"], median))
    return often
