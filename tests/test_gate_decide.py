"""The verdict on a matrix: pairing by node id, one-sided benchmarks, the load guard, Holm, thresholds.

The truths: a lone benchmark's comparison must be exactly :func:`compare_runs` on the same run values
(a matrix of one adds nothing); p-values across a matrix must be Holm's (the adjusted p of a family of
equal p's is m × p); slow outliers must be those of :func:`slow_outliers` (checked against scipy in
``test_gate_outliers.py``); run-to-run spread is the sample sd of the logs (``statistics.stdev``).
Messages are compared whole: a reader acts on them.
"""

import math
import re
import statistics

import pytest

from accounting.errors import AccountingError
from accounting.gate.decide import judge, noise_notes
from accounting.gate.guard import OwnRun, disturbances, own_load
from accounting.gate.stats import ALPHA, CONFIDENCE, Decision, compare_runs, slow_outliers, smallest_convictable
from accounting.gate.storage import parse_run
from tests.support.gate_runs import COPY, LOADED, MATMUL, QUIET, document, rounds

BASE_MEDIANS = [0.0150, 0.0152, 0.0148, 0.0151, 0.0149, 0.0150, 0.0153, 0.0147]


def _runs(prefix, medians_by_name, guard=QUIET):
    count = len(next(iter(medians_by_name.values())))
    return [parse_run(document({name: medians[index] for name, medians in medians_by_name.items()}, guard=guard),
                      f"{prefix}-{index}.json") for index in range(count)]


def _ten(kind, name):
    return 10


def test_a_regression_in_one_benchmark_leaves_the_other_unchanged():
    base = _runs("base", {MATMUL: BASE_MEDIANS, COPY: BASE_MEDIANS})
    current = _runs("current", {MATMUL: [0.0190, 0.0188, 0.0191, 0.0189], COPY: [0.0150, 0.0151, 0.0149, 0.0150]})
    result = judge(base, current, threshold_for=_ten)
    decisions = {verdict.name: verdict.decision for verdict in result.verdicts}
    assert decisions == {MATMUL: Decision.REGRESSION, COPY: Decision.NO_CHANGE}
    assert [verdict.name for verdict in result.regressions] == [MATMUL] and result.suspects == []


def test_p_values_are_holm_adjusted_across_the_matrix():
    base = _runs("base", {MATMUL: BASE_MEDIANS, COPY: BASE_MEDIANS})
    current = _runs("current", {MATMUL: [0.0190, 0.0188, 0.0191], COPY: [0.0150, 0.0151, 0.0149]})
    result = judge(base, current, threshold_for=_ten)
    matmul = next(verdict for verdict in result.verdicts if verdict.name == MATMUL)
    alone = compare_runs(BASE_MEDIANS, [0.0190, 0.0188, 0.0191], threshold=0.1)
    # 3 current runs against 8: p = 1/165 alone is significant; doubled by Holm for a family of 2 it is not.
    assert alone.decision is Decision.REGRESSION
    assert matmul.comparison.p_slower == pytest.approx(2 * alone.p_slower)
    assert matmul.decision is Decision.INCONCLUSIVE and result.suspects == [MATMUL]


def test_the_threshold_comes_per_benchmark_and_kind():
    base = _runs("base", {MATMUL: BASE_MEDIANS})
    current = _runs("current", {MATMUL: [0.0190, 0.0188, 0.0191, 0.0189]})
    seen = []

    def threshold_for(kind, name):
        seen.append((kind, name))
        return 40  # a 26 % slowdown is below it: significant but not large
    result = judge(base, current, threshold_for=threshold_for)
    assert seen == [("cpu", MATMUL)]
    assert result.verdicts[0].decision is Decision.NO_CHANGE and result.verdicts[0].threshold == 0.4


def test_benchmarks_on_one_side_only_are_listed_not_compared():
    base = _runs("base", {MATMUL: BASE_MEDIANS, COPY: BASE_MEDIANS})
    current = _runs("current", {MATMUL: [0.0150], "tests/new.py::test_new": [0.01]})
    result = judge(base, current, threshold_for=_ten)
    by_name = {verdict.name: verdict for verdict in result.verdicts}
    assert by_name[COPY].decision is None and by_name[COPY].reason.startswith("not in the current run(s)")
    assert by_name["tests/new.py::test_new"].decision is None
    assert by_name["tests/new.py::test_new"].reason.startswith("no baseline")
    assert not result.regressions


def test_a_disturbed_current_run_is_left_out_and_named():
    base = _runs("base", {MATMUL: BASE_MEDIANS})
    loaded = _runs("loaded", {MATMUL: [0.030]}, guard=LOADED)
    result = judge(base, loaded, threshold_for=_ten)
    verdict = result.verdicts[0]
    assert verdict.decision is Decision.INCONCLUSIVE and verdict.disturbed_values == (min(rounds(0.030)),)
    assert verdict.reason == "re-measure: every current run was measured on a disturbed machine"
    assert result.notes[0].startswith("loaded-0.json not used, measured on a disturbed machine: load average 3.5 on 2")
    assert result.suspects == [MATMUL] and not result.regressions


def test_a_current_run_at_another_clock_than_the_baseline_is_disturbed():
    base = _runs("base", {MATMUL: BASE_MEDIANS})
    slow_clock = {"before": dict(QUIET["before"], clock_mhz_mean=2500.0),
                  "after": dict(QUIET["after"], clock_mhz_mean=2500.0)}
    result = judge(base, _runs("current", {MATMUL: [0.018]}, guard=slow_clock), threshold_for=_ten)
    assert result.verdicts[0].decision is Decision.INCONCLUSIVE
    assert "measured at 2500 MHz, the baseline runs at 2995 MHz (-17 %)" in result.notes[0]


def test_one_baseline_run_is_reported_as_unable_to_tell_noise_from_change():
    result = judge(_runs("base", {MATMUL: [0.015]}), _runs("current", {MATMUL: [0.03, 0.03, 0.03]}),
                   threshold_for=_ten)
    assert result.verdicts[0].decision is Decision.INCONCLUSIVE
    assert "only 1 baseline run: the gate cannot tell noise from change" in result.notes[0]
    assert result.suspects == []  # more current runs cannot help: it needs baseline runs


@pytest.mark.parametrize("before, after, own_before, own_after, expected", [
    pytest.param(QUIET["before"], QUIET["after"], 0.0, 0.8, [], id="quiet"),
    pytest.param(dict(QUIET["before"], load_average_1m=1.9), QUIET["after"], 1.2, 0.8, [], id="own-load-only"),
    pytest.param(dict(QUIET["before"], load_average_1m=1.9), QUIET["after"], 0.0, 0.8,
                 ["load average 1.9 on 2 CPUs before the run (1.9 not from the gate; limit 1)"], id="foreign-load"),
    pytest.param(dict(QUIET["before"], throttle_reasons=["sw_thermal_slowdown"]), None, 0.0, 0.0,
                 ["throttled before the run (sw_thermal_slowdown)"], id="throttled"),
    pytest.param(dict(QUIET["before"], busy_siblings=["cuda:1"]), {"other_process_memory_bytes": 6 * 2**30}, 0, 0,
                 ["other processes held 6.0 GiB on the device after the run"], id="shared-gpu"),
    pytest.param({"load_average_1m": None, "clock_mhz_mean": None}, {}, 0.0, 0.0, [], id="nothing-known"),
])
def test_disturbances(before, after, own_before, own_after, expected):
    assert disturbances(before, after, own_before=own_before, own_after=own_after) == expected


def test_own_load_follows_the_kernels_damping():
    """Simulate the kernel's 5-second update of the 1-minute load average for a 2-thread run."""
    decay = math.exp(-5 / 60)
    load = 0.0
    for _ in range(6):  # 30 s busy with 2 threads
        load = load * decay + 2 * (1 - decay)
    for _ in range(2):  # 10 s idle
        load = load * decay
    estimate = own_load([OwnRun(ended=130.0, duration_s=30.0, busy_threads=2.0)], now=140.0)
    assert estimate == pytest.approx(load, rel=1e-9)


def _tailed(fast: float, slow_share: float, count: int = 10) -> list:
    """A run whose rounds are ``fast`` except a share slowed 1.4× by a neighbour (interference only adds time)."""
    slowed = round(count * slow_share)
    return [fast * (1 + 0.002 * index) for index in range(count - slowed)] + [fast * 1.4] * slowed


@pytest.mark.parametrize("metric, truth", [("min", min), ("median", statistics.median), ("mean", statistics.fmean)])
def test_each_run_is_reduced_to_the_metric_of_its_rounds(metric, truth):
    data = {MATMUL: [_tailed(0.015 + 0.0001 * index, 0.1 * index) for index in range(6)]}
    base, current = _runs("base", data), _runs("current", data)
    result = judge(base, current, threshold_for=_ten, metric=metric)
    assert result.metric == metric
    verdict = result.verdicts[0]
    assert sorted(verdict.baseline_values + verdict.outlier_values) == sorted(truth(values) for values in data[MATMUL])


def test_the_fastest_round_sees_through_a_neighbour_that_slows_half_the_rounds():
    """Unchanged code; the current runs lost 50-60 % of their rounds to a neighbour: the median calls it a
    slowdown beyond the threshold, the run minimum does not."""
    base = _runs("base", {MATMUL: [_tailed(0.015 * (1 + 0.003 * (i % 3)), 0.0) for i in range(10)]})
    current = _runs("current", {MATMUL: [_tailed(0.015 * (1 + 0.003 * (i % 3)), 0.6) for i in range(4)]})
    by_median = judge(base, current, threshold_for=_ten, metric="median").verdicts[0]
    by_min = judge(base, current, threshold_for=_ten, metric="min").verdicts[0]
    assert by_median.decision is Decision.REGRESSION
    assert by_min.decision is Decision.NO_CHANGE


def test_a_metric_the_gate_cannot_use_is_named():
    base = _runs("base", {MATMUL: BASE_MEDIANS})
    with pytest.raises(AccountingError, match="got metric 'iqr'"):
        judge(base, base, threshold_for=_ten, metric="iqr")


# Run minimums (seconds) of ten baseline runs measured on our 2-vCPU VM: three processes ran 1.3-1.5x
# slower in every round (a neighbour on the host for seconds), seven did not.
CONTAMINATED = [0.0370, 0.0242, 0.0241, 0.0249, 0.0328, 0.0249, 0.0323, 0.0253, 0.0256, 0.0263]


def test_slow_outlier_baseline_runs_are_set_aside_and_named_so_a_real_slowdown_shows():
    base = _runs("base", {MATMUL: [[value] * 5 for value in CONTAMINATED]})
    slowed = _runs("current", {MATMUL: [[value] * 5 for value in (0.0301, 0.0298, 0.0298)]})  # 1.2x the clean runs
    verdict = judge(base, slowed, threshold_for=_ten).verdicts[0]
    assert sorted(verdict.outlier_values) == sorted(value for value in CONTAMINATED if value > 0.03)
    assert len(verdict.baseline_values) == 7 and verdict.decision is Decision.REGRESSION
    assert "3 slow outlier baseline run(s) set aside: 37 ms, 32.8 ms, 32.3 ms" in verdict.reason
    # Without the screen (the same runs compared as they are), the three outliers hide the slowdown:
    plain = compare_runs(CONTAMINATED, [0.0301, 0.0298, 0.0298], threshold=0.10)
    assert plain.decision is Decision.INCONCLUSIVE


def test_no_outlier_is_set_aside_from_a_clean_history_or_a_short_one():
    clean = _runs("base", {MATMUL: [[value] * 5 for value in BASE_MEDIANS]})
    assert judge(clean, clean[:2], threshold_for=_ten).verdicts[0].outlier_values == ()
    short = _runs("base", {MATMUL: [[value] * 5 for value in CONTAMINATED[:4]]})
    assert judge(short, short[:2], threshold_for=_ten).verdicts[0].outlier_values == ()


# ---- a lone benchmark, the Holm family, disturbed and screened runs, every branch's verdict, noise notes ----

BASE = [0.0150, 0.0152, 0.0148, 0.0151, 0.0149, 0.0150, 0.0153, 0.0147]
SLOWER = [0.0190, 0.0188, 0.0191, 0.0189]


def _flat_runs(prefix, values_by_name, guard=QUIET, kind="cpu"):
    """One saved run per position; each benchmark's rounds are all ``value`` (its min, median and mean)."""
    count = len(next(iter(values_by_name.values())))
    return [parse_run(document({name: [values[index]] * 5 for name, values in values_by_name.items()},
                               guard=guard, kind=kind), f"{prefix}-{index}.json") for index in range(count)]


def _by_name(result):
    return {verdict.name: verdict for verdict in result.verdicts}


@pytest.mark.parametrize("base, current, options", [
    pytest.param(BASE[:4], SLOWER[:2], dict(alpha=0.2), id="alpha-decides"),  # smallest p 1/15: only alpha 0.2 convicts
    pytest.param(BASE[:2], SLOWER[:1], {}, id="cannot-reach"),  # smallest p 1/3: the reason names alpha / family
    pytest.param(BASE, SLOWER, dict(confidence=0.5), id="confidence"),
    pytest.param(BASE, SLOWER, dict(alpha=0.05, confidence=0.99), id="both"),
])
def test_a_lone_benchmark_is_judged_exactly_as_compare_runs_judges_its_run_values(base, current, options):
    result = judge(_flat_runs("base", {MATMUL: base}), _flat_runs("current", {MATMUL: current}), threshold_for=_ten, **options)
    verdict = result.verdicts[0]
    truth = compare_runs(base, current, threshold=0.1, **options)
    assert verdict.comparison == truth
    assert (verdict.decision, verdict.reason) == (truth.decision, truth.reason)
    assert (result.alpha, result.confidence) == (options.get("alpha", ALPHA), options.get("confidence", CONFIDENCE))


def test_alpha_decides_the_lone_benchmark_both_ways():
    base, current = _flat_runs("base", {MATMUL: BASE[:4]}), _flat_runs("current", {MATMUL: SLOWER[:2]})
    assert judge(base, current, threshold_for=_ten, alpha=0.2).verdicts[0].decision is Decision.REGRESSION
    assert judge(base, current, threshold_for=_ten).verdicts[0].decision is Decision.INCONCLUSIVE


def test_the_reach_of_a_matrix_is_alpha_over_the_number_of_benchmarks_compared():
    base = _flat_runs("base", {MATMUL: BASE[:2], COPY: BASE[:2]})
    current = _flat_runs("current", {MATMUL: SLOWER[:1], COPY: SLOWER[:1]})
    for verdict in judge(base, current, threshold_for=_ten).verdicts:
        reached = re.search(r"cannot reach p ≤ ([0-9.e-]+)", verdict.reason)
        assert reached and float(reached.group(1)) == pytest.approx(ALPHA / 2), verdict.reason


def test_two_baseline_runs_make_a_benchmark_part_of_the_holm_family():
    """Two benchmarks with the same runs have the same raw p; Holm for a family of two doubles both."""
    base = _flat_runs("base", {MATMUL: BASE[:2], COPY: BASE[:2]})
    current = _flat_runs("current", {MATMUL: SLOWER[:3], COPY: SLOWER[:3]})
    alone = compare_runs(BASE[:2], SLOWER[:3], threshold=0.1)
    for verdict in judge(base, current, threshold_for=_ten).verdicts:
        assert verdict.comparison.p_slower == pytest.approx(min(1.0, 2 * alone.p_slower))
        assert verdict.comparison.p_faster == pytest.approx(min(1.0, 2 * alone.p_faster))


def test_notes_for_one_baseline_run_and_for_the_guard_switched_off_are_whole_sentences():
    one = judge(_flat_runs("base", {MATMUL: [0.015]}), _flat_runs("current", {MATMUL: SLOWER}), threshold_for=_ten)
    assert one.notes == ("only 1 baseline run: the gate cannot tell noise from change; save more baseline runs",)
    off = judge(_flat_runs("base", {MATMUL: BASE}), _flat_runs("loaded", {MATMUL: SLOWER}, guard=LOADED), threshold_for=_ten,
                load_guard=False, notes=("given",))
    assert off.notes == ("given", "load guard off: runs on a loaded or throttled machine are used as they are")


def test_with_the_guard_off_loaded_runs_are_compared_as_they_are():
    result = judge(_flat_runs("base", {MATMUL: BASE}), _flat_runs("loaded", {MATMUL: SLOWER}, guard=LOADED), threshold_for=_ten,
                   load_guard=False)
    verdict = result.verdicts[0]
    assert verdict.current_values == tuple(SLOWER) and verdict.disturbed_values == ()
    assert verdict.comparison == compare_runs(BASE, SLOWER, threshold=0.1)


def test_a_run_disturbed_for_two_reasons_names_both_in_one_note():
    slow_clock_and_loaded = {"before": dict(LOADED["before"], clock_mhz_mean=2500.0),
                             "after": dict(QUIET["after"], clock_mhz_mean=2500.0), "own_before": 0.0,
                             "own_after": 0.8}
    result = judge(_flat_runs("base", {MATMUL: BASE}), _flat_runs("odd", {MATMUL: [0.018]}, guard=slow_clock_and_loaded),
                   threshold_for=_ten)
    note = result.notes[0]
    assert note.startswith("odd-0.json not used, measured on a disturbed machine: load average 3.5 on 2")
    assert note.endswith("(3.5 not from the gate; limit 1); measured at 2500 MHz, the baseline runs at 2995 MHz (-17 %)")


def test_clean_current_runs_are_never_counted_as_disturbed():
    result = judge(_flat_runs("base", {MATMUL: BASE}), _flat_runs("current", {MATMUL: SLOWER}), threshold_for=_ten)
    verdict = result.verdicts[0]
    assert verdict.disturbed_values == () and verdict.current_values == tuple(SLOWER)


def test_a_run_the_guard_set_aside_lends_none_of_its_benchmarks_to_another_benchmarks_row():
    """A disturbed run without a benchmark must not put anything into that benchmark's row."""
    base = _flat_runs("base", {MATMUL: BASE, COPY: BASE})
    clean = _flat_runs("current", {MATMUL: SLOWER[:2], COPY: SLOWER[:2]})
    loaded_copy_only = _flat_runs("loaded", {COPY: [0.03]}, guard=LOADED)
    rows = _by_name(judge(base, clean + loaded_copy_only, threshold_for=_ten))
    assert rows[MATMUL].disturbed_values == () and rows[COPY].disturbed_values == (0.03,)


@pytest.mark.parametrize("given, seen_kind", [("cpu", "cpu"), (None, None)])
def test_every_verdict_carries_its_kind_and_threshold_whatever_its_branch(given, seen_kind):
    """Each branch: compared, only current, only baseline, every current run disturbed, every baseline run disturbed."""
    seen = []

    def threshold_for(kind, name):
        seen.append(kind)
        return 25
    new, gone, loaded, base_lost = "t::new", "t::gone", "t::loaded", "t::base_lost"
    base = _flat_runs("base", {MATMUL: BASE, gone: BASE, loaded: BASE}, kind=given)
    disturbed_base = _flat_runs("lost", {base_lost: BASE[:3]}, guard=LOADED, kind=given)
    current = (_flat_runs("current", {MATMUL: SLOWER[:3], new: SLOWER[:3], base_lost: SLOWER[:3]}, kind=given)
               + _flat_runs("loaded", {loaded: [0.03]}, guard=LOADED, kind=given))
    rows = _by_name(judge(base, current, threshold_for=threshold_for, disturbed_baseline=disturbed_base))
    assert set(rows) == {MATMUL, new, gone, loaded, base_lost} and set(seen) == {seen_kind}
    for verdict in rows.values():
        assert (verdict.kind, verdict.threshold) == (seen_kind, 0.25), verdict.name
    assert rows[MATMUL].comparison == compare_runs(BASE, SLOWER[:3], threshold=0.25)


def test_each_branch_keeps_the_run_values_it_has_and_says_why_whole():
    new, gone, loaded, base_lost = "t::new", "t::gone", "t::loaded", "t::base_lost"
    base = _flat_runs("base", {gone: BASE, loaded: BASE})
    disturbed_base = _flat_runs("lost", {base_lost: BASE[:3]}, guard=LOADED)
    current = (_flat_runs("current", {new: SLOWER[:3], base_lost: SLOWER[:3]})
               + _flat_runs("loaded", {loaded: [0.03]}, guard=LOADED))
    rows = _by_name(judge(base, current, threshold_for=_ten, disturbed_baseline=disturbed_base))
    assert (rows[new].decision, rows[new].reason) == (
        None, "no baseline: a new benchmark, or one the baseline runs did not run")
    assert rows[new].current_values == tuple(SLOWER[:3]) and rows[new].baseline_values == ()
    assert (rows[gone].decision, rows[gone].reason) == (
        None, "not in the current run(s): deselected, skipped or failed")
    assert rows[gone].baseline_values == tuple(BASE) and rows[gone].current_values == ()
    assert (rows[loaded].decision, rows[loaded].reason) == (
        Decision.INCONCLUSIVE, "re-measure: every current run was measured on a disturbed machine")
    assert rows[loaded].baseline_values == tuple(BASE) and rows[loaded].disturbed_values == (0.03,)
    assert (rows[base_lost].decision, rows[base_lost].reason) == (
        Decision.INCONCLUSIVE, "re-measure: every baseline run was measured on a disturbed machine")
    assert rows[base_lost].current_values == tuple(SLOWER[:3]) and rows[base_lost].baseline_values == ()
    assert rows[base_lost].name == base_lost and rows[base_lost].comparison is None


def test_a_disturbed_baseline_run_of_other_benchmarks_leaves_a_new_one_without_baseline():
    disturbed_base = _flat_runs("lost", {COPY: BASE[:3]}, guard=LOADED)
    rows = _by_name(judge([], _flat_runs("current", {MATMUL: SLOWER[:3]}), threshold_for=_ten,
                          disturbed_baseline=disturbed_base))
    assert rows[MATMUL].decision is None and rows[MATMUL].reason.startswith("no baseline")


def test_clean_baseline_runs_are_compared_even_where_other_baseline_runs_were_disturbed():
    """``gate ab``: some A runs set aside by the guard, the rest clean; the clean ones decide."""
    disturbed_base = _flat_runs("lost", {MATMUL: [0.03, 0.03]}, guard=LOADED)
    result = judge(_flat_runs("base", {MATMUL: BASE}), _flat_runs("current", {MATMUL: SLOWER}), threshold_for=_ten,
                   disturbed_baseline=disturbed_base)
    assert result.verdicts[0].comparison == compare_runs(BASE, SLOWER, threshold=0.1)
    assert result.verdicts[0].decision is Decision.REGRESSION


# Ten current runs, one of them slowed 1.5x by a neighbour; 99.9 ms shows the rounding of the reason's ms.
CURRENT_WITH_OUTLIER = [0.0660, 0.0662, 0.0664, 0.0661, 0.0663, 0.0665, 0.0666, 0.0667, 0.0999, 0.0668]


def test_current_runs_are_screened_only_when_asked_against_their_own_median():
    base, current = _flat_runs("base", {MATMUL: BASE}), _flat_runs("current", {MATMUL: CURRENT_WITH_OUTLIER})
    expected = slow_outliers(CURRENT_WITH_OUTLIER, threshold=0.1)
    assert expected == [8]
    plain = judge(base, current, threshold_for=_ten).verdicts[0]
    assert plain.current_values == tuple(CURRENT_WITH_OUTLIER) and plain.current_outlier_values == ()
    screened = judge(base, current, threshold_for=_ten, screen_current=True).verdicts[0]
    kept = [value for index, value in enumerate(CURRENT_WITH_OUTLIER) if index not in expected]
    assert screened.current_values == tuple(kept) and screened.current_outlier_values == (0.0999,)
    assert screened.comparison == compare_runs(BASE, kept, threshold=0.1)
    assert screened.reason == screened.comparison.reason + " (1 slow outlier current run(s) set aside: 99.9 ms)"


def test_a_screened_current_side_with_too_few_runs_to_judge_sets_nothing_aside():
    screened = judge(_flat_runs("base", {MATMUL: BASE}), _flat_runs("current", {MATMUL: [0.0660, 0.0999]}), threshold_for=_ten,
                     screen_current=True).verdicts[0]
    assert screened.current_outlier_values == () and screened.current_values == (0.0660, 0.0999)


def test_the_labels_of_both_sides_and_whether_the_baseline_grows_are_carried():
    base, current = _flat_runs("base", {MATMUL: [0.015]}), _flat_runs("current", {MATMUL: SLOWER[:2]})
    result = judge(base, current, threshold_for=_ten)
    assert result.baseline_runs == ("base-0.json",) and result.current_runs == ("current-0.json", "current-1.json")
    # One baseline run: inconclusive; only a baseline that grows (gate ab) makes fresh runs worth taking.
    assert result.suspects == []
    assert judge(base, current, threshold_for=_ten, baseline_grows=True).suspects == [MATMUL]


def _suspect_result(**options):
    """MATMUL inconclusive (its p doubled by Holm), COPY unchanged."""
    base = _flat_runs("base", {MATMUL: BASE, COPY: BASE})
    current = _flat_runs("current", {MATMUL: SLOWER[:3], COPY: [0.0150, 0.0151, 0.0149]})
    result = judge(base, current, threshold_for=_ten, **options)
    assert [verdict.name for verdict in result.verdicts if verdict.decision is Decision.INCONCLUSIVE] == [MATMUL]
    return result


@pytest.mark.parametrize("options", [
    pytest.param({}, id="defaults"),
    pytest.param(dict(confidence=0.99, metric="median"), id="wider-interval"),  # 1.12x up, not 1.11x
    pytest.param(dict(alpha=0.0002), id="out-of-reach"),  # 8 against 6 runs: the smallest p is 1/3003
])
def test_noise_notes_give_each_suspect_its_spread_and_the_smallest_slowdown_it_can_convict(options):
    result = _suspect_result(**options)
    lines = noise_notes(result, current_runs=6, cap_option="--max-pairs")
    spread = statistics.stdev(math.log(value) for value in BASE)
    smallest = smallest_convictable(spread, len(BASE), 6, threshold=0.1, alpha=options.get("alpha", ALPHA),
                                    confidence=options.get("confidence", CONFIDENCE))
    reach = (f"convicts a slowdown from about {smallest:.3g}× up" if smallest is not None
             else "cannot reach the significance level at all")
    metric = options.get("metric", "min")
    assert lines == [f"{MATMUL}: its 8 baseline runs spread by {spread:.2g} (sd of the logs of their {metric}); with 6 "
                     f"current runs the gate {reach}. Less noise (a quieter machine, --threads 1) or a larger "
                     f"--max-pairs lowers that"]


def test_noise_notes_say_when_no_number_of_runs_can_reach_the_level():
    result = judge(_flat_runs("base", {MATMUL: BASE[:2]}), _flat_runs("current", {MATMUL: SLOWER[:1]}), threshold_for=_ten)
    assert result.suspects == [MATMUL]
    assert smallest_convictable(statistics.stdev(math.log(v) for v in BASE[:2]), 2, 1, threshold=0.1) is None
    (line,) = noise_notes(result, current_runs=1)
    assert "with 1 current runs the gate cannot reach the significance level at all." in line
    assert line.endswith("or a larger --max-extra-runs lowers that")


def test_noise_notes_skip_what_is_decided_and_what_has_no_spread():
    decided = judge(_flat_runs("base", {MATMUL: BASE}), _flat_runs("current", {MATMUL: SLOWER}), threshold_for=_ten)
    assert decided.verdicts[0].decision is Decision.REGRESSION and noise_notes(decided, current_runs=6) == []
    # A baseline that grows makes a one-run baseline a suspect, but one run has no spread to speak of.
    one = judge(_flat_runs("base", {MATMUL: [0.015]}), _flat_runs("current", {MATMUL: SLOWER[:2]}), threshold_for=_ten,
                baseline_grows=True)
    assert one.suspects == [MATMUL] and noise_notes(one, current_runs=6) == []
