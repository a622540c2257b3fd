"""The fleet's verdict on crafted records: stragglers, drift, hung and failed ranks, below-floor and above-peak
dtypes, slow and wrong collectives; every kind of flag with its message and subject, and what is not flagged.

The truths: the median of the other ranks by ``statistics.median``, nccl-tests' bus-bandwidth factors
(doc/PERFORMANCE.md: all-reduce 2(n−1)/n, all-gather (n−1)/n, broadcast 1) applied to crafted times, and
majorities counted by hand.
"""

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accounting.fleet import verdict
from accounting.report.verdict import ABOVE_PEAK, BELOW_FLOOR

H100 = {"name": "NVIDIA H100 80GB HBM3", "driver": "550.54", "runtime": "CUDA 12.4", "torch": "2.5.1"}


def _section(tflops, status="healthy", message="ok"):
    best = None if tflops is None else {"flops_per_s": tflops * 1e12}
    return {"best": best, "verdict": {"status": status, "message": message}}


def _record(dtypes=None, *, identity=H100, collectives=None, errors=()):
    record = {"identity": identity, "errors": list(errors), "collectives": collectives or {}}
    if dtypes is not None:
        record["report"] = {"dtypes": dtypes}
    return record


def _timed(collective, nbytes, seconds, wrong=0, iterations=5):
    return {"collective": collective, "bytes": nbytes, "count": nbytes // 4, "type": "float",
            "redop": "sum" if collective != "broadcast" else "none", "root": 0 if collective == "broadcast" else -1,
            "seconds": seconds, "iterations": iterations, "wrong": wrong}


@given(values=st.lists(st.floats(0.01, 1000.0), min_size=1, max_size=9), fraction=st.floats(0.5, 0.99))
def test_a_straggler_is_below_fraction_of_the_median_of_the_others(values, fraction):
    best = dict(enumerate(values))
    flagged = {flag.rank for flag in verdict.stragglers("bf16", best, fraction=fraction)}
    expected = {rank for rank, value in best.items() if len(best) > 1
                and value < fraction * statistics.median([v for r, v in best.items() if r != rank])}
    assert flagged == expected


def test_one_slow_rank_of_eight_is_named_and_no_healthy_one():
    best = {rank: 700.0 + rank for rank in range(8)}
    best[5] = 0.67 * 700
    assert [flag.rank for flag in verdict.stragglers("bfloat16", best, fraction=0.9)] == [5]


@pytest.mark.parametrize("identities, expected", [
    pytest.param([H100] * 4, [], id="all-agree"),
    pytest.param([H100, H100, {**H100, "driver": "535.1"}], [(2, "driver")], id="one-driver"),
    pytest.param([H100, {**H100, "torch": "2.4"}, {**H100, "name": "NVIDIA A100"}],
                 [(2, "name"), (1, "torch")], id="two-ranks-two-fields"),
    pytest.param([H100, {**H100, "runtime": "CUDA 12.1"}], [(0, "runtime"), (1, "runtime")], id="no-majority"),
])
def test_drift_names_ranks_off_the_majority(identities, expected):
    flags = verdict.drift(dict(enumerate(identities)))
    assert [(flag.rank, flag.subject) for flag in flags] == expected


def test_collective_rows_take_the_mean_over_ranks_as_nccl_tests_and_sum_wrong_elements():
    """nccl-tests' default ``-a 1`` reports the mean over ranks of the time per call (README, "Arguments"),
    and computes algbw and busbw from it; the slowest rank stays beside it."""
    times = (0.010, 0.013, 0.011)
    records = [{"collectives": {"world": {"ranks": [0, 1, 2], "results": [_timed("all_reduce", 12 * 2**20, s, w)]}}}
               for s, w in zip(times, (0, 2, 1))]
    (row,) = verdict.collective_rows(records)
    mean = statistics.fmean(times)
    assert row["seconds"] == pytest.approx(mean) and row["time_over_ranks"] == "mean"
    assert (row["slowest_rank"], row["slowest_seconds"], row["wrong"]) == (1, 0.013, 3)
    assert row["busbw_bytes_per_s"] == pytest.approx(12 * 2**20 / mean * 4 / 3)
    busbw_gbps = row["busbw_bytes_per_s"] / 1e9
    flags = verdict.collective_flags([row], min_busbw_gbps=busbw_gbps * 1.01)
    assert [flag.kind for flag in flags] == [verdict.WRONG, verdict.SLOW_COLLECTIVE]
    assert verdict.collective_flags([row], min_busbw_gbps=busbw_gbps * 0.99)[1:] == []


def test_a_fleet_with_nothing_wrong_is_healthy():
    records = [_record({"bfloat16": _section(700.0 + rank)}) for rank in range(3)]
    result = verdict.judge(records, fraction=0.9, min_busbw_gbps=None)
    assert {key: result[key] for key in ("verdict", "flags", "collectives", "links")} == {
        "verdict": verdict.HEALTHY, "flags": [], "collectives": [], "links": []}
    assert not any(figures["neighbours"]["busy"] for figures in result["figures"].values())


def test_hung_and_failed_ranks_are_named_with_the_phase_and_error():
    records = [_record({"bfloat16": _section(700.0)}),
               _record(errors=[{"phase": "measuring", "error": "CUDA error: an illegal memory access"}]),
               None]
    result = verdict.judge(records, fraction=0.9, hung=[2])
    assert result["verdict"] == verdict.FLAGGED
    assert result["flags"] == [
        {"kind": verdict.HUNG, "rank": 2, "message": "rank 2 never reached the barrier (it hangs or died)",
         "subject": None},
        {"kind": verdict.FAILED, "rank": 1,
         "message": "rank 1 failed while measuring: CUDA error: an illegal memory access", "subject": None},
    ]


def test_a_straggler_is_judged_in_tflops_against_the_median_of_the_others():
    tflops = {0: 700.0, 1: 690.0, 2: 400.0, 3: 710.0}
    records = [_record({"bfloat16": _section(value)}) for value in tflops.values()]
    flags = verdict.judge(records, fraction=0.9)["flags"]
    median = statistics.median([700.0, 690.0, 710.0])
    assert flags == [{"kind": verdict.STRAGGLER, "rank": 2, "subject": "bfloat16",
                      "message": f"rank 2 bfloat16: best 400 TFLOP/s < 0.9 × {median:.3g} (median of the other ranks)"}]


def test_a_rank_exactly_at_the_fraction_is_not_a_straggler():
    best = {0: 100.0, 1: 100.0, 2: 90.0}
    assert verdict.stragglers("float32", best, fraction=0.9) == []
    assert [flag.rank for flag in verdict.stragglers("float32", {**best, 2: 89.99}, fraction=0.9)] == [2]


def test_one_rank_alone_has_no_peers_and_is_never_a_straggler():
    assert verdict.stragglers("float32", {0: 1.0}, fraction=0.9) == []


def test_best_figures_come_only_from_ranks_whose_report_measured_the_dtype():
    records = [
        _record({"bfloat16": _section(700.0), "float32": _section(None)}),
        None,
        _record(),  # no report: it failed before measuring
        _record({"bfloat16": _section(300.0), "float32": _section(60.0)}),
    ]
    assert verdict.best_by_dtype(records) == {"bfloat16": {0: 700e12, 3: 300e12}, "float32": {3: 60e12}}


def test_below_floor_and_above_peak_are_flagged_with_the_reports_message_and_healthy_is_not():
    records = [
        _record({"bfloat16": _section(700.0), "float32": _section(10.0, BELOW_FLOOR, "MFU 0.1 % < floor 1 %")}),
        _record({"bfloat16": _section(1500.0, ABOVE_PEAK, "MFU 152 % > 100 %: a wrong peak?")}),
        None,
        _record(),
    ]
    flags = [flag.as_dict() for flag in verdict.floor_flags(records)]
    assert flags == [
        {"kind": BELOW_FLOOR, "rank": 0, "message": "rank 0 float32: MFU 0.1 % < floor 1 %", "subject": "float32"},
        {"kind": ABOVE_PEAK, "rank": 1, "message": "rank 1 bfloat16: MFU 152 % > 100 %: a wrong peak?",
         "subject": "bfloat16"},
    ]


def test_drift_with_a_majority_names_the_majority_and_its_ranks():
    identities = {0: H100, 1: {**H100, "torch": "2.4.0"}, 2: H100, 3: H100}
    assert [flag.as_dict() for flag in verdict.drift(identities)] == [
        {"kind": verdict.DRIFT, "rank": 1, "subject": "torch",
         "message": "rank 1 torch '2.4.0' differs from the majority's '2.5.1' (ranks 0, 2, 3)"}]


def test_half_and_half_is_no_majority_and_every_rank_is_named():
    """2 of 4 is not more than half: neither driver can be called the odd one out."""
    identities = {0: H100, 1: {**H100, "driver": "535.1"}, 2: H100, 3: {**H100, "driver": "535.1"}}
    flags = verdict.drift(identities)
    assert [(flag.rank, flag.subject) for flag in flags] == [(rank, "driver") for rank in range(4)]
    assert flags[0].message == "rank 0 driver: no majority ('550.54' on ranks 0, 2; '535.1' on ranks 1, 3)"
    assert {flag.kind for flag in flags} == {verdict.DRIFT}


def test_a_missing_field_is_a_value_of_its_own():
    identities = {0: H100, 1: H100, 2: {key: value for key, value in H100.items() if key != "runtime"}}
    (flag,) = verdict.drift(identities)
    assert (flag.rank, flag.subject) == (2, "runtime")
    assert flag.message == "rank 2 runtime None differs from the majority's 'CUDA 12.4' (ranks 0, 1)"


def test_ranks_without_an_identity_are_left_out_of_the_drift_vote():
    records = [_record({}), _record({}, identity={**H100, "driver": "535.1"}), _record({}, identity=None), None]
    flags = verdict.judge(records, fraction=0.9)["flags"]
    assert [(flag["rank"], flag["subject"]) for flag in flags] == [(0, "driver"), (1, "driver")], \
        "two identities that disagree: no majority, both named; the ranks without one are not"


def _world(seconds_by_rank, *, scope="world", ranks=(0, 1, 2, 3), sizes=(2**20, 2**24), wrong=None):
    wrong = wrong or {}
    return [{"collectives": {scope: {"ranks": list(ranks), "results": [
        _timed("all_reduce", size, seconds * size / 2**20, wrong.get((rank, size), 0)) for size in sizes]}}}
        for rank, seconds in seconds_by_rank.items()]


def test_collective_rows_keep_the_timed_fields_and_take_the_mean_over_ranks():
    records = _world({0: 0.001, 1: 0.002, 2: 0.0015, 3: 0.001})
    rows = verdict.collective_rows(records)
    assert [(row["scope"], row["bytes"]) for row in rows] == [("world", 2**20), ("world", 2**24)]
    small = rows[0]
    assert (small["collective"], small["ranks"], small["count"], small["type"], small["redop"], small["root"],
            small["iterations"]) == ("all_reduce", [0, 1, 2, 3], 2**18, "float", "sum", -1, 5)
    assert small["seconds_by_rank"] == {"0": 0.001, "1": 0.002, "2": 0.0015, "3": 0.001}
    mean = statistics.fmean([0.001, 0.002, 0.0015, 0.001])
    assert (small["slowest_rank"], small["seconds"]) == (1, pytest.approx(mean))
    assert small["algbw_bytes_per_s"] == pytest.approx(2**20 / mean)
    assert small["busbw_bytes_per_s"] == pytest.approx(2**20 / mean * 2 * 3 / 4)
    assert small["wrong"] == 0


def test_wrong_elements_are_summed_over_ranks_and_named_per_size():
    records = _world({0: 0.001, 1: 0.001, 2: 0.001}, ranks=(0, 1, 2), wrong={(0, 2**24): 2, (2, 2**24): 5})
    rows = verdict.collective_rows(records)
    flags = [flag.as_dict() for flag in verdict.collective_flags(rows, min_busbw_gbps=None)]
    assert flags == [{"kind": verdict.WRONG, "rank": None, "subject": None,
                      "message": f"world all_reduce (3 ranks) at {2**24} B: 7 wrong element(s)"}]


def test_a_slow_collective_is_judged_by_its_best_size_per_scope_and_group():
    """Each intra-node group is judged on its own; a group is slow only if no size reached the minimum
    (the largest size comes first here, so the best is not simply the last row)."""
    fast = [{"collectives": {"intra": {"ranks": [0, 1], "results": [
        _timed("broadcast", 2**26, 2**26 / 20e9), _timed("broadcast", 2**20, 1e-3)]}}} for _ in range(2)]
    slow = [{"collectives": {"intra": {"ranks": [2, 3], "results": [
        _timed("broadcast", 2**26, 2**26 / 5e9), _timed("broadcast", 2**20, 1e-3)]}}} for _ in range(2)]
    rows = verdict.collective_rows(fast + slow)
    assert len(rows) == 4
    flags = verdict.collective_flags(rows, min_busbw_gbps=10)
    assert [flag.as_dict() for flag in flags] == [{
        "kind": verdict.SLOW_COLLECTIVE, "rank": None, "subject": "broadcast",
        "message": "intra broadcast ranks [2, 3]: best busbw 5 GB/s < minimum 10 GB/s for intra broadcast"}]
    slow_best = max(row["busbw_bytes_per_s"] for row in rows if row["ranks"] == [2, 3])
    assert verdict.collective_flags(rows, min_busbw_gbps=slow_best / 1e9) == [], "reaching the minimum is enough"
    assert verdict.collective_flags(rows, min_busbw_gbps=None) == []


def test_a_collective_that_barely_moved_is_judged_by_its_own_figure():
    """4 bytes in 10 s is 0.4 B/s: below a minimum of 0.5 B/s, however absurd both figures are."""
    records = [{"collectives": {"world": {"ranks": [0, 1], "results": [_timed("broadcast", 4, 10.0)]}}}] * 2
    rows = verdict.collective_rows(records)
    assert rows[0]["busbw_bytes_per_s"] == pytest.approx(0.4)
    assert [flag.kind for flag in verdict.collective_flags(rows, min_busbw_gbps=0.5e-9)] == [
        verdict.SLOW_COLLECTIVE]


def test_judge_gathers_every_kind_in_order_and_returns_the_rows():
    records = [
        _record({"bfloat16": _section(700.0)}, collectives={"world": {"ranks": [0, 1, 2], "results": [
            _timed("all_gather", 3 * 2**20, 0.01, wrong=1)]}}),
        _record({"bfloat16": _section(300.0, BELOW_FLOOR, "MFU low")}, identity={**H100, "torch": "2.4"},
                collectives={"world": {"ranks": [0, 1, 2], "results": [_timed("all_gather", 3 * 2**20, 0.01)]}}),
        _record({"bfloat16": _section(710.0)}, errors=[{"phase": "gathering", "error": "timeout"}],
                collectives={"world": {"ranks": [0, 1, 2], "results": [_timed("all_gather", 3 * 2**20, 0.02)]}}),
    ]
    result = verdict.judge(records, fraction=0.9, min_busbw_gbps=1000, hung=[4])
    kinds = [(flag["kind"], flag["rank"]) for flag in result["flags"]]
    assert kinds == [(verdict.HUNG, 4), (verdict.FAILED, 2), (verdict.STRAGGLER, 1), (BELOW_FLOOR, 1),
                     (verdict.DRIFT, 1), (verdict.WRONG, None), (verdict.SLOW_COLLECTIVE, None)]
    (row,) = result["collectives"]
    mean = statistics.fmean([0.01, 0.01, 0.02])
    assert row["busbw_bytes_per_s"] == pytest.approx(3 * 2**20 / mean * 2 / 3) and row["slowest_rank"] == 2
