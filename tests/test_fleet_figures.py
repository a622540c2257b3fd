"""Every per-rank figure compared across ranks, the point-to-point matrix and busy neighbours, on crafted records.

The truths: the median of the others by ``statistics.median``; pairs and rounds counted with ``itertools``;
shares of a core computed by hand from crafted ``/proc/stat`` deltas; bandwidths as bytes / seconds.
"""

import itertools
import json
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accounting.bench.matrix import FLEET_FIGURES, parse_benchmarks
from accounting.errors import AccountingError
from accounting.fleet import figures, links, neighbours, p2p, verdict
from accounting.fleet.plot import write_plot
from accounting.fleet.render import render
from accounting.fleet.results import document
from accounting.telemetry.validity import BUSY_OTHER_PROCESS_BYTES

GB = 1e9
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FRACTIONS = {"memory_bandwidth": 0.85, "slowest_share": 0.25, "p2p_link": 0.7}


def _cpu_rank(rank, *, tflops=0.1, copy_gbps=20.0, cpus=None, foreign=None, later=None, host="vm"):
    section = {"best": {"flops_per_s": tflops * 1e12}, "mfu": 0.9, "verdict": {"status": "healthy", "message": "ok"}}
    return {"rank": rank, "identity": {"rank": rank, "host": host, "kind": "cpu", "name": "AMD EPYC", "device": "cpu",
                                       "cpus": [rank] if cpus is None else cpus, "driver": None, "runtime": None,
                                       "torch": "2.13"},
            "report": {"dtypes": {"float32": section}, "bandwidth": {"measured_bytes_per_s": copy_gbps * GB}},
            "telemetry": {"foreign_cpu_share": foreign}, "neighbours": None if later is None else
            {"foreign_cpu_share": later}, "collectives": {}, "errors": []}


def _flags(result, kind):
    return [flag for flag in result["flags"] if flag["kind"] == kind]


# ---- memory bandwidth and the slowest share ------------------------------------------------------------------


def test_a_slow_copy_is_flagged_on_bandwidth_alone_naming_the_figure_and_the_rank():
    """The issue's figures: 12.6 GB/s against 21.7, the matmul level (0.102 vs 0.104)."""
    records = [_cpu_rank(0, tflops=0.104, copy_gbps=21.7), _cpu_rank(1, tflops=0.102, copy_gbps=12.6)]
    result = verdict.judge(records, fraction=0.9, figure_fractions=FRACTIONS)
    assert [(flag["kind"], flag["rank"], flag["subject"]) for flag in result["flags"]] == [
        (verdict.SLOW_MEMORY, 1, "memory bandwidth")]
    assert "rank 1 memory bandwidth: copy 12.6 GB/s < 0.85 × 21.7" in result["flags"][0]["message"]


@given(values=st.lists(st.floats(1.0, 3000.0), min_size=1, max_size=9), fraction=st.floats(0.5, 0.99))
def test_memory_bandwidth_follows_the_straggler_rule(values, fraction):
    records = [_cpu_rank(rank, copy_gbps=value) for rank, value in enumerate(values)]
    flagged = {flag.rank for flag in verdict.figure_flags(records, [], fractions={**FRACTIONS,
                                                                                  "memory_bandwidth": fraction})}
    expected = {rank for rank, value in enumerate(values) if len(values) > 1
                and value * GB < fraction * statistics.median([v * GB for r, v in enumerate(values) if r != rank])}
    assert flagged == expected


def _rows(slowest, ranks=(0, 1)):
    return [{"ranks": list(ranks), "slowest_rank": rank} for rank in slowest]


@given(slowest=st.lists(st.integers(0, 2), min_size=0, max_size=40))
def test_the_slowest_share_is_counted_per_rank_and_judged_against_the_others(slowest):
    shares = figures.slowest_shares(_rows(slowest, ranks=(0, 1, 2)))
    for rank in range(3):
        if slowest:
            assert shares[rank]["share"] == pytest.approx(slowest.count(rank) / len(slowest))
            assert shares[rank]["chance"] == pytest.approx(1 / 3)
    flagged = {rank for rank, _share, _median in figures.above_peers(shares, fraction=0.25)}
    expected = set()
    if len(slowest) >= figures.MIN_SLOWEST_ROWS:
        for rank in range(3):
            share = slowest.count(rank) / len(slowest)
            others = statistics.median(slowest.count(r) / len(slowest) for r in range(3) if r != rank)
            if share > others / 0.25 and share > 1 / 3:
                expected.add(rank)
    assert flagged == expected


def test_the_issues_seven_of_twelve_is_not_flagged_and_eleven_of_twelve_is():
    assert verdict.figure_flags([], _rows([1] * 7 + [0] * 5), fractions=FRACTIONS) == []
    rows = _rows([1] * 11 + [0])
    (flag,) = verdict.figure_flags([], rows, fractions=FRACTIONS)
    assert (flag.kind, flag.rank, flag.subject) == (verdict.OFTEN_SLOWEST, 1, "slowest share")
    assert "the slowest in 92% of its 12 collective rows" in flag.message


def test_too_few_rows_leave_the_slowest_share_unjudged():
    assert verdict.figure_flags([], _rows([1] * (figures.MIN_SLOWEST_ROWS - 1)), fractions=FRACTIONS) == []


# ---- the point-to-point plan ----------------------------------------------------------------------------------


@given(count=st.integers(0, 17))
def test_pair_rounds_cover_every_pair_once_in_rounds_of_disjoint_pairs(count):
    ranks = list(range(100, 100 + count))
    rounds = p2p.pair_rounds(ranks)
    pairs = [pair for round_ in rounds for pair in round_]
    assert sorted(pairs) == list(itertools.combinations(ranks, 2))
    assert all(len({rank for pair in round_ for rank in pair}) == 2 * len(round_) for round_ in rounds)
    assert len(rounds) == (0 if count < 2 else count - 1 + count % 2)


@given(count=st.integers(2, 70))
def test_the_ring_of_node_leaders_links_each_to_the_next_in_at_most_three_rounds(count):
    leaders = [8 * node for node in range(count)]
    rounds = p2p.ring_rounds(leaders)
    pairs = sorted(pair for round_ in rounds for pair in round_)
    ring = {tuple(sorted((leaders[i], leaders[(i + 1) % count]))) for i in range(count)}
    assert pairs == sorted(ring) and len(rounds) <= 3
    assert all(len({rank for pair in round_ for rank in pair}) == 2 * len(round_) for round_ in rounds)


def test_a_plan_alternates_each_nodes_rounds_with_the_leaders_ring_and_never_pairs_a_rank_twice_a_round():
    hosts = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    plan = p2p.plan_links(hosts)
    assert [round_.scope for round_ in plan][:4] == ["intra-node", "inter-node"] * 2
    for round_ in plan:
        ranks = [rank for pair in round_.pairs for rank in pair]
        assert len(ranks) == len(set(ranks))
        same_host = {hosts[low] == hosts[high] for low, high in round_.pairs}
        assert same_host == {round_.scope == "intra-node"}
    intra = sorted(pair for round_ in plan if round_.scope == "intra-node" for pair in round_.pairs)
    assert intra == sorted(pair for node in range(3) for pair in itertools.combinations(range(4 * node, 4 * node + 4), 2))
    inter = sorted(pair for round_ in plan if round_.scope == "inter-node" for pair in round_.pairs)
    assert inter == [(0, 4), (0, 8), (4, 8)]


# ---- links ----------------------------------------------------------------------------------------------------


def _link_records(seconds, *, nbytes=2**20, ranks=3, scope="intra-node"):
    """Each rank's view of every directed link it is an end of; ``seconds[(src, dst)]``."""
    return [{"p2p": {"bytes": nbytes, "rounds": 3, "rounds_run": 3, "results": [
        {"scope": scope, "src": src, "dst": dst, "seconds": value, "iterations": 3, "wrong": 0}
        for (src, dst), value in seconds.items() if rank in (src, dst)], "skipped": [], "errors": []}}
        for rank in range(ranks)]


def test_a_slow_pair_is_named_with_both_ends_and_no_other_link_is():
    seconds = {(a, b): 1e-3 for a in range(3) for b in range(3) if a != b}
    seconds[(0, 2)] = seconds[(2, 0)] = 20e-3
    rows = links.link_rows(_link_records(seconds))
    assert {(row["src"], row["dst"]): row["bytes_per_s"] for row in rows} == {
        pair: 2**20 / value for pair, value in seconds.items()}
    flags = verdict.link_flags(rows, fraction=0.7)
    assert [(flag.kind, flag.ranks) for flag in flags] == [(verdict.SLOW_LINK, (0, 2)), (verdict.SLOW_LINK, (2, 0))]
    assert "intra-node link rank 0 → rank 2" in flags[0].message and "common" not in flags[0].message


def test_the_rank_at_every_slow_links_end_is_named():
    seconds = {(a, b): 1e-3 for a in range(4) for b in range(4) if a != b}
    for peer in (0, 1):
        seconds[(3, peer)] = seconds[(peer, 3)] = 10e-3
    flags = verdict.link_flags(links.link_rows(_link_records(seconds, ranks=4)), fraction=0.7)
    assert {flag.ranks for flag in flags} == {(3, 0), (0, 3), (3, 1), (1, 3)}
    assert all("rank 3 is an end of every slow link" in flag.message for flag in flags)


def test_one_pair_has_no_other_links_to_be_judged_against():
    rows = links.link_rows(_link_records({(0, 1): 1e-3, (1, 0): 50e-3}, ranks=2))
    assert verdict.link_flags(rows, fraction=0.7) == []


def test_a_links_time_is_the_mean_of_its_two_ends_and_wrong_elements_are_flagged():
    records = _link_records({(0, 1): 1e-3, (1, 0): 1e-3}, ranks=2)
    records[1]["p2p"]["results"][0].update(seconds=3e-3, wrong=5)
    (row, _back) = links.link_rows(records)
    assert row["seconds_by_end"] == {"0": 1e-3, "1": 3e-3} and row["seconds"] == pytest.approx(2e-3)
    (flag,) = verdict.link_flags([row], fraction=0.7)
    assert (flag.kind, flag.ranks) == (verdict.WRONG, (0, 1)) and "5 wrong element(s)" in flag.message


# ---- busy neighbours ------------------------------------------------------------------------------------------


def test_a_busy_rank_is_named_busy_first_and_its_low_figure_is_in_that_flag():
    records = [_cpu_rank(0, copy_gbps=21.7, foreign=0.02, later=0.03), _cpu_rank(1, copy_gbps=12.6, foreign=0.48),
               _cpu_rank(2, copy_gbps=21.0, foreign=0.01)]
    result = verdict.judge(records, fraction=0.9, figure_fractions=FRACTIONS, busy_cpu_share=0.1)
    assert [(flag["kind"], flag["rank"]) for flag in result["flags"]] == [(verdict.BUSY, 1)]
    assert result["verdict"] == verdict.BUSY_ONLY
    message = result["flags"][0]["message"]
    assert message.startswith("rank 1 shared its device with other work: other processes took 48% of its CPU 1")
    assert "copy 12.6 GB/s < 0.85 × 21.4" in message
    assert result["figures"]["1"]["neighbours"]["busy"] and not result["figures"]["0"]["neighbours"]["busy"]


def test_a_busy_rank_among_others_wrong_still_makes_the_fleet_flagged():
    records = [_cpu_rank(0, foreign=0.5), _cpu_rank(1, tflops=0.05)]
    result = verdict.judge(records, fraction=0.9, busy_cpu_share=0.1)
    assert [(flag["kind"], flag["rank"]) for flag in result["flags"]] == [(verdict.BUSY, 0), (verdict.STRAGGLER, 1)]
    assert result["verdict"] == verdict.FLAGGED


def test_the_later_window_counts_and_the_largest_share_is_the_ranks():
    found = neighbours.neighbours([_cpu_rank(0, foreign=0.02, later=0.4)], busy_cpu_share=0.1)
    assert found[0]["share"] == 0.4 and found[0]["busy"]
    assert "40% while it timed the collectives and links" in found[0]["why"]


def test_ranks_sharing_cores_are_not_each_others_neighbours():
    records = [_cpu_rank(0, cpus=[0], foreign=0.5), _cpu_rank(1, cpus=[1], foreign=0.0),
               _cpu_rank(2, cpus=[0], foreign=0.5), _cpu_rank(3, cpus=[0], foreign=0.5, host="other")]
    found = neighbours.neighbours(records, busy_cpu_share=0.1)
    assert (found[0]["shared_with"], found[2]["shared_with"], found[3]["shared_with"]) == ([2], [0], [])
    assert [rank for rank, entry in found.items() if entry["busy"]] == [3]


def test_a_gpu_rank_is_busy_when_other_processes_hold_memory_on_its_device():
    def gpu(rank, held):
        return {"identity": {"host": "n", "kind": "cuda", "device": f"cuda:{rank}", "memory_bytes": 80 * 2**30},
                "telemetry": {"other_process_memory_bytes": held}}

    found = neighbours.neighbours([gpu(0, 0), gpu(1, BUSY_OTHER_PROCESS_BYTES + 2**30)], busy_cpu_share=0.1)
    assert not found[0]["busy"] and found[1]["busy"]
    assert found[1]["why"] == "other processes hold 3.00 GiB on its device cuda:1"
    assert found[1]["share"] == pytest.approx(3 / 80)


# ---- the document, the text, the plot, benchmarks.json -------------------------------------------------------

SETTINGS = {"world_size": 3, "backend": "gloo", "budget_s": 20.0, "dtypes": ["float32"], "straggler_fraction": 0.9,
            "figure_fractions": FRACTIONS, "busy_cpu_share": 0.1, "min_busbw_gbps": None, "barrier_timeout_s": 30.0,
            "slow_rank": None}


@pytest.fixture
def crafted():
    records = [_cpu_rank(0, copy_gbps=21.7, foreign=0.0), _cpu_rank(1, copy_gbps=12.6, foreign=0.0),
               _cpu_rank(2, copy_gbps=21.0, foreign=0.48)]
    seconds = {(a, b): 1e-3 for a in range(3) for b in range(3) if a != b}
    seconds[(0, 2)] = seconds[(2, 0)] = 20e-3
    for record, view in zip(records, _link_records(seconds)):
        record.update(view)
    return document(records, settings=SETTINGS, elapsed_s=9.0)


def test_the_document_holds_the_new_figures_and_flags_as_json(crafted):
    kinds = {(flag["kind"], flag["rank"], tuple(flag.get("ranks", ()))) for flag in crafted["flags"]}
    assert kinds == {(verdict.SLOW_MEMORY, 1, ()), (verdict.BUSY, 2, ()), (verdict.SLOW_LINK, None, (0, 2)),
                     (verdict.SLOW_LINK, None, (2, 0))}
    assert crafted["figures"]["1"]["memory_bytes_per_s"] == 12.6e9 and len(crafted["links"]) == 6
    json.loads(json.dumps(crafted, allow_nan=False))


def test_the_text_shows_the_matrix_the_neighbours_and_marks_both_ends_of_a_slow_link(crafted):
    text = render(crafted)
    for piece in ("Point-to-point links", "from ↓ to →", "48% of CPU 2 (busy)", "slow memory: rank 1 memory bandwidth",
                  "busy: rank 2 shared its device with other work", "slow link: intra-node link rank 0 → rank 2",
                  "3 of 3 round(s) of disjoint pairs ran (complete)", "Verdict: flagged"):
        assert piece in text, piece
    rank_lines = {line.split()[0]: line for line in text.splitlines() if line.strip()[:2] in ("0 ", "1 ", "2 ")
                  and "AMD EPYC" in line}
    assert rank_lines["0"].split()[-3:] == ["slow", "link", "degraded"] and "slow memory" in rank_lines["1"]
    assert rank_lines["2"].split()[-1] == "healthy", "busy: its end of the slow link is a neighbour's doing"
    matrix = text[text.index("from ↓ to →"):].splitlines()
    assert matrix[2].split() == ["0", "·", f"{2**20 / 1e-3 / GB:.2f}", f"{2**20 / 20e-3 / GB:.2f}"]


def test_the_plot_draws_the_new_figures(crafted, tmp_path):
    path = tmp_path / "fleet.png"
    write_plot(crafted, str(path))
    assert path.read_bytes()[:8] == PNG_SIGNATURE


def test_benchmarks_json_fractions_are_read_and_bounded():
    base = {"regression": {"metric": "median", "threshold_percent": 10},
            "cpu": {"dtypes": ["float32"], "shapes": [[8, 8, 8]], "floors": {"float32": 0.01}}}
    fleet = parse_benchmarks({**base, "fleet": {"figure_fractions": {"p2p_link": 0.6}, "busy_cpu_share": 0.2}}).fleet
    assert fleet.figure_fractions["p2p_link"] == 0.6 and fleet.busy_cpu_share == 0.2
    assert set(fleet.figure_fractions) == set(FLEET_FIGURES)
    with pytest.raises(AccountingError, match=r"fleet.figure_fractions.memory_bandwidth = 1.5: must be a number"):
        parse_benchmarks({**base, "fleet": {"figure_fractions": {"memory_bandwidth": 1.5}}})
    with pytest.raises(AccountingError, match=r"fleet.busy_cpu_share = 0: must be a number in \(0, 1\)"):
        parse_benchmarks({**base, "fleet": {"busy_cpu_share": 0}})


def test_a_near_tie_in_a_collective_names_no_slowest_rank():
    """Ranks of one collective finish together: the later of a near-tie is not slow (a quiet node here read rank 1
    "slowest" in 82 % of its rows by 0.01-1.7 %); a rank more than the margin slower still counts."""
    from accounting.fleet.figures import SLOWEST_MARGIN, above_peers, slowest_shares

    def row(rank_1_seconds):
        return {"ranks": [0, 1], "slowest_rank": 1, "seconds_by_rank": {"0": 1.0, "1": rank_1_seconds}}

    ties = [row(1.0 + 0.9 * SLOWEST_MARGIN)] * 14 + [{**row(1.0), "slowest_rank": 0}] * 2
    shares = slowest_shares(ties)
    assert shares[1]["share"] == 0 and above_peers(shares, fraction=0.25) == []
    slow = slowest_shares([row(1.0 + 1.1 * SLOWEST_MARGIN)] * 14 + [{**row(1.0), "slowest_rank": 0}] * 2)
    assert slow[1]["share"] == 14 / 16 and [rank for rank, *_ in above_peers(slow, fraction=0.25)] == [1]
