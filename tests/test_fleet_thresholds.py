"""Minimum bus bandwidths per scope and collective (``--min-busbw``, benchmarks.json's presets), and
launch-bound sizes kept from passing for bandwidth; on crafted records of a healthy two-node H100 cluster."""

import pytest

from accounting.__main__ import build_parser
from accounting.bench.matrix import (
    FLEET_COLLECTIVES,
    FLEET_SCOPES,
    load_benchmarks,
    parse_benchmarks,
)
from accounting.errors import AccountingError
from accounting.fleet import collectives, scopes, thresholds, verdict
from accounting.fleet.render import render
from accounting.fleet.results import document

NODE_A, NODE_B = "node-a", "node-b"


def _record(rank, host, entries):
    return {"rank": rank, "identity": {"host": host, "rank": rank}, "errors": [], "collectives": entries}


def _timed(collective, nbytes, seconds, launch_seconds=None):
    return collectives.Timed(collective, nbytes, seconds, 10, 0, launch_seconds=launch_seconds).as_dict()


def _seconds_for(busbw_gbps, collective, nbytes, ranks):
    return nbytes * collectives.BUSBW_FACTORS[collective](ranks) / (busbw_gbps * 1e9)


def _healthy_cluster(intra_gbps=420.0, inter_gbps=47.0):
    """Two nodes of two ranks: intra-node busbw ``intra_gbps``, one rail between the nodes ``inter_gbps``
    (a 400 Gb/s rail moves at most 50 GB/s)."""
    size = 2**28
    records = []
    for rank, host in enumerate((NODE_A, NODE_A, NODE_B, NODE_B)):
        intra = [0, 1] if host == NODE_A else [2, 3]
        entries = {"intra-node": {"ranks": intra, "results": [
            _timed(name, size, _seconds_for(intra_gbps, name, size, 2)) for name in collectives.COLLECTIVES]}}
        if rank in (0, 2):
            entries["inter-node"] = {"ranks": [0, 2], "results": [
                _timed(name, size, _seconds_for(inter_gbps, name, size, 2)) for name in collectives.COLLECTIVES]}
        records.append(_record(rank, host, entries))
    return records


def _slow(flags):
    return [flag for flag in flags if flag["kind"] == verdict.SLOW_COLLECTIVE]


def test_one_number_for_every_scope_fails_a_healthy_clusters_inter_node_scope():
    """What the README's multi-node line did: --min-busbw 300 judges one rail against NVLink's figure."""
    flags = verdict.judge(_healthy_cluster(), fraction=0.9, min_busbw_gbps=thresholds.parse_min_busbw("300"))["flags"]
    assert {flag["message"].split()[0] for flag in _slow(flags)} == {"inter-node"}


def test_the_h100_preset_passes_a_healthy_cluster_and_fails_a_downed_link():
    preset = load_benchmarks().fleet.min_busbw_gbps["h100-sxm-ndr400"]
    assert verdict.judge(_healthy_cluster(), fraction=0.9, min_busbw_gbps=preset)["flags"] == []
    tcp = _slow(verdict.judge(_healthy_cluster(inter_gbps=3.0), fraction=0.9, min_busbw_gbps=preset)["flags"])
    assert tcp and all(flag["message"].startswith("inter-node") for flag in tcp), "a fall back to TCP sockets"
    pcie = _slow(verdict.judge(_healthy_cluster(intra_gbps=40.0), fraction=0.9, min_busbw_gbps=preset)["flags"])
    assert {flag["subject"] for flag in pcie} == set(collectives.COLLECTIVES), "NVLink down: every collective"


def test_per_scope_and_per_collective_minimums_parse_and_apply():
    table = thresholds.parse_min_busbw("intra-node=300,inter-node=40,inter-node:broadcast=50")
    flags = _slow(verdict.judge(_healthy_cluster(), fraction=0.9, min_busbw_gbps=table)["flags"])
    assert [flag["subject"] for flag in flags] == ["broadcast"] and "inter-node" in flags[0]["message"]


def test_a_single_nodes_world_is_judged_as_intra_node():
    size, ranks = 2**28, [0, 1]
    records = [_record(rank, NODE_A, {"world": {"ranks": ranks, "results": [
        _timed("all_reduce", size, _seconds_for(100.0, "all_reduce", size, 2))]}}) for rank in ranks]
    assert _slow(verdict.judge(records, fraction=0.9, min_busbw_gbps={"intra-node": {"*": 200}})["flags"])
    assert not _slow(verdict.judge(records, fraction=0.9, min_busbw_gbps={"world": {"*": 200}})["flags"])


@pytest.mark.parametrize("text, message", [
    pytest.param("nvlink=300", "unknown scope 'nvlink'", id="scope"),
    pytest.param("intra-node:allreduce=300", "unknown collective 'allreduce'", id="collective"),
    pytest.param("intra-node=-1", "--min-busbw must be a positive number of GB/s, got '-1'", id="negative"),
    pytest.param("h200-fast", "got 'h200-fast'; presets in benchmarks.json: h100-sxm-ndr400", id="preset"),
])
def test_bad_minimums_name_the_offending_value(text, message):
    with pytest.raises(AccountingError, match=message):
        thresholds.parse_min_busbw(text, load_benchmarks().fleet.min_busbw_gbps)


def test_the_command_line_takes_scopes_and_presets():
    parser = build_parser()
    args = parser.parse_args(["fleet", "--min-busbw", "intra-node=300,inter-node=40"])
    assert args.min_busbw == {"intra-node": {"*": 300.0}, "inter-node": {"*": 40.0}}
    preset = parser.parse_args(["fleet", "--min-busbw", "h100-sxm-ndr400"]).min_busbw
    assert preset == load_benchmarks().fleet.min_busbw_gbps["h100-sxm-ndr400"]


def test_benchmarks_json_presets_are_checked_by_name_and_value():
    base = {"regression": {"metric": "median", "threshold_percent": 10},
            "cpu": {"dtypes": ["float32"], "shapes": [[8, 8, 8]], "floors": {"float32": 0.01}}}
    with pytest.raises(AccountingError, match="fleet.min_busbw_gbps.x.nvlink is not a scope"):
        parse_benchmarks({**base, "fleet": {"min_busbw_gbps": {"x": {"nvlink": {"*": 300}}}}})
    with pytest.raises(AccountingError, match="fleet.min_busbw_gbps.x.inter-node.all_reduce = 'fast'"):
        parse_benchmarks({**base, "fleet": {"min_busbw_gbps": {"x": {"inter-node": {"all_reduce": "fast"}}}}})


def test_the_names_benchmarks_json_is_checked_against_are_the_fleets():
    assert set(FLEET_COLLECTIVES) == set(collectives.COLLECTIVES)
    planned = {scope.name for scope in scopes.plan_scopes([NODE_A, NODE_A, NODE_B, NODE_B])}
    assert planned == set(FLEET_SCOPES)


def _launch_bound_world():
    """A 1 MiB row whose host launches took nearly the whole time per call (the device waited for Python),
    and a 256 MiB row that did not."""
    small, large = 2**20, 2**28
    results = [_timed("all_reduce", small, 10e-6, launch_seconds=9.5e-6),
               _timed("all_reduce", large, _seconds_for(50.0, "all_reduce", large, 2), launch_seconds=12e-6)]
    return [_record(rank, NODE_A, {"world": {"ranks": [0, 1], "results": results}}) for rank in (0, 1)]


def test_a_launch_bound_size_is_marked_and_not_judged_as_bandwidth():
    records = _launch_bound_world()
    rows = verdict.collective_rows(records)
    assert [(row["bytes"], row["launch_bound"]) for row in rows] == [(2**20, True), (2**28, False)]
    assert rows[0]["busbw_bytes_per_s"] > 100e9, "the small row reads faster than the link it cannot measure"
    flags = _slow(verdict.judge(records, fraction=0.9, min_busbw_gbps=100)["flags"])
    assert flags and "best busbw 50 GB/s" in flags[0]["message"], "judged on the size that measures bandwidth"


def test_the_table_says_launch_bound_and_how_the_time_is_taken():
    settings = {"world_size": 2, "backend": "nccl", "budget_s": 60.0, "dtypes": None, "straggler_fraction": 0.9,
                "min_busbw_gbps": None, "barrier_timeout_s": 30.0, "slow_rank": None}
    text = render(document(_launch_bound_world(), settings=settings, elapsed_s=1.0))
    small = next(line for line in text.splitlines() if " 1048576 " in line)
    large = next(line for line in text.splitlines() if f" {2**28} " in line)
    assert small.rstrip().endswith("launch-bound") and not large.rstrip().endswith("launch-bound")
    assert "mean over ranks" in text
