"""The point-to-point matrix on rank 0: every rank's view of its transfers merged into links, and the slow ones.

Pure functions of the gathered records (each rank's ``p2p`` record, :func:`accounting.fleet.p2p.time_links`).
A directed link ``src → dst`` is compared with the links of the *other pairs* of its scope (intra-node with
intra-node, node leaders with node leaders), by the straggler rule: below ``fraction ×`` their median it is
slow, and both its ends are named. A rank that is an end of every slow link (two or more) is named as
the common end: its link or NIC, not its peers'.

>>> views = [{"p2p": {"bytes": 10**6, "results": [
...     {"scope": "intra-node", "src": a, "dst": b, "seconds": 1e-3 * (5 if {a, b} == {0, 2} else 1), "iterations": 3,
...      "wrong": 0} for a in range(3) for b in range(3) if a != b and rank in (a, b)]}} for rank in range(3)]
>>> [(row["src"], row["dst"]) for row, _median in slow_links(link_rows(views), fraction=0.7)]
[(0, 2), (2, 0)]
"""

import statistics

from accounting.fleet.figures import below_peers

TIME_OVER_ENDS = "mean"
"""A link's time per transfer is the mean of its two ends' (as a collective's is the mean over its ranks)."""


def link_rows(records) -> list[dict]:
    """One row per scope and directed link: ``scope``, ``src``, ``dst``, ``bytes``, ``seconds`` (the mean over the
    ends that timed it), ``seconds_by_end``, ``iterations``, ``wrong`` (summed), ``bytes_per_s``."""
    rows: dict = {}
    for rank, record in enumerate(records):
        mine = (record or {}).get("p2p") or {}
        for done in mine.get("results", []):
            key = (done["scope"], done["src"], done["dst"])
            row = rows.setdefault(key, {"scope": done["scope"], "src": done["src"], "dst": done["dst"],
                                        "bytes": mine["bytes"], "seconds_by_end": {}, "iterations": done["iterations"],
                                        "wrong": 0})
            row["seconds_by_end"][str(rank)] = done["seconds"]
            row["wrong"] += done["wrong"]
    result = []
    for row in rows.values():
        row["seconds"] = statistics.fmean(row["seconds_by_end"].values())
        row["time_over_ends"] = TIME_OVER_ENDS
        row["bytes_per_s"] = row["bytes"] / row["seconds"] if row["seconds"] > 0 else None
        result.append(row)
    return sorted(result, key=lambda row: (row["scope"], row["src"], row["dst"]))


def slow_links(rows, *, fraction: float) -> list[tuple[dict, float]]:
    """``(row, median)`` for each link below ``fraction ×`` the median of the links of the other pairs in its scope."""
    slow = []
    for index, row in enumerate(rows):
        if not row["bytes_per_s"]:
            continue
        pair = {row["src"], row["dst"]}
        peers = [other["bytes_per_s"] for other in rows if other["scope"] == row["scope"] and other["bytes_per_s"]
                 and {other["src"], other["dst"]} != pair]
        if not peers:
            continue
        values = {index: row["bytes_per_s"], **{-1 - position: value for position, value in enumerate(peers)}}
        low = [entry for entry in below_peers(values, fraction=fraction) if entry[0] == index]
        if low:
            slow.append((row, statistics.median(peers)))
    return slow


def common_end(slow) -> int | None:
    """The rank that is an end of every slow link, where there are two or more slow pairs (``None`` otherwise).

    >>> common_end([({"src": 2, "dst": 0}, 1.0), ({"src": 1, "dst": 2}, 1.0)])
    2
    """
    pairs = {frozenset((row["src"], row["dst"])) for row, _median in slow}
    if len(pairs) < 2:
        return None
    shared = frozenset.intersection(*pairs)
    return next(iter(shared)) if len(shared) == 1 else None
