"""The gate's statistics against independent truths: scipy, exact enumeration, Holm's step-down rule,
and synthetic runs (identical distributions stay quiet at the stated rate; a shift is caught).

Every expected value comes from an independent truth: scipy's ``permutation_test`` (exact and random),
scipy's t distribution and ``ttest_ind``, exact enumeration of the splits with ``itertools``, or the
definition of Holm's procedure. None restates the module's formula.
"""

import itertools
import math
import statistics
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from accounting.errors import AccountingError
from accounting.gate.stats import (
    ALPHA,
    CONFIDENCE,
    Decision,
    compare_runs,
    holm,
    log_spread,
    min_pvalue,
    permutation_test,
    ratio_interval,
    runs_needed,
    slow_outliers,
    smallest_convictable,
)

# Log run-medians: distinct values of a realistic scale (a few % apart), small samples.
log_medians = st.lists(st.floats(min_value=-5.0, max_value=-3.0, allow_nan=False), min_size=2, max_size=7, unique=True)
"""(scipy's permutation_test wants two values per sample; one current run is checked by brute force below)"""
run_medians = st.lists(st.integers(100, 200), min_size=1, max_size=8, unique=True).map(
    lambda tenths: [value / 1e4 for value in tenths])
"""Medians 10.0–20.0 ms, distinct (scipy warns about catastrophic cancellation on identical data)."""


def _tie_free(baseline, current):
    """No other split's sum lies within rounding of the observed one (an exact tie, e.g. -3 + -5 = -4 + -4,
    is counted by our test but may be missed by scipy's float tolerance on the difference of means)."""
    pooled, observed = baseline + current, sum(current)
    splits = itertools.combinations(range(len(pooled)), len(current))
    rounding = 1e-6 * max(1.0, sum(abs(value) for value in pooled))  # well above the test's own tolerance
    near = sum(abs(sum(pooled[i] for i in chosen) - observed) < rounding for chosen in splits)
    return near == 1


def _scipy_exact(baseline, current, alternative):
    return scipy_stats.permutation_test(
        (np.asarray(current), np.asarray(baseline)), lambda x, y: np.mean(x) - np.mean(y),
        permutation_type="independent", alternative=alternative, n_resamples=np.inf, vectorized=False,
    ).pvalue


@settings(max_examples=40)
@given(baseline=log_medians, current=log_medians)
@example(baseline=[-4.2, -4.19, -4.21], current=[-4.0, -3.99])
def test_exact_permutation_p_values_match_scipy(baseline, current):
    assume(_tie_free(baseline, current))  # ties: see test_ties_count_against_significance
    result = permutation_test(baseline, current)
    assert result.method == "exact" and result.splits == math.comb(len(baseline) + len(current), len(current))
    # The truth: every split enumerated in exact rational arithmetic (no rounding at all).
    pooled, observed = [Fraction(value) for value in baseline + current], sum(map(Fraction, current))
    sums = [sum(pooled[i] for i in chosen) for chosen in itertools.combinations(range(len(pooled)), len(current))]
    assert result.p_greater == pytest.approx(sum(total >= observed for total in sums) / len(sums), abs=1e-12)
    assert result.p_less == pytest.approx(sum(total <= observed for total in sums) / len(sums), abs=1e-12)
    # scipy agrees up to one split: its tie tolerance on a difference of float means can miss the
    # observed split itself (seen: baseline of 4 runs, current [-3, -4, -5, -3.5, -3.75, -4.5]).
    assert result.p_greater == pytest.approx(_scipy_exact(baseline, current, "greater"), abs=1.01 / len(sums))
    assert result.p_less == pytest.approx(_scipy_exact(baseline, current, "less"), abs=1.01 / len(sums))


def test_ties_count_against_significance():
    """Every split of identical values is as extreme as the observed one: p = 1 both ways."""
    result = permutation_test([0.5, 0.5, 0.5], [0.5, 0.5])
    assert (result.p_greater, result.p_less) == (1.0, 1.0)


@pytest.mark.parametrize("baseline_size, current_size", [
    pytest.param(3, 2, id="3-vs-2"), pytest.param(10, 1, id="10-vs-1"), pytest.param(10, 4, id="10-vs-4"),
])
def test_the_smallest_p_is_reached_by_a_complete_separation_and_by_nothing_else(baseline_size, current_size):
    baseline = list(np.linspace(1.0, 2.0, baseline_size))
    above = list(np.linspace(3.0, 4.0, current_size))
    assert permutation_test(baseline, above).p_greater == pytest.approx(min_pvalue(baseline_size, current_size))
    # Brute force: among every split, only the one with the largest values on the current side is as extreme.
    pooled = baseline + above
    sums = [sum(pooled[i] for i in chosen) for chosen in itertools.combinations(range(len(pooled)), current_size)]
    assert sum(total >= sum(above) - 1e-12 for total in sums) / len(sums) == pytest.approx(
        min_pvalue(baseline_size, current_size))


def test_runs_needed_is_the_first_size_whose_smallest_p_reaches_the_level():
    for baseline_size, alpha in ((10, ALPHA / 3), (5, ALPHA), (20, 0.05)):
        needed = runs_needed(baseline_size, alpha)
        assert min_pvalue(baseline_size, needed) <= alpha < min_pvalue(baseline_size, needed - 1)


def test_random_splits_are_seeded_never_zero_and_agree_with_scipy():
    rng = np.random.default_rng(1)
    baseline, current = rng.normal(0, 1, 25), rng.normal(0.3, 1, 12)
    result = permutation_test(baseline, current, exact_limit=1000)
    again = permutation_test(baseline, current, exact_limit=1000)
    assert result.method == "random" and result.p_greater == again.p_greater and result.p_greater > 0
    reference = scipy_stats.permutation_test(
        (current, baseline), lambda x, y, axis: np.mean(x, axis=axis) - np.mean(y, axis=axis),
        permutation_type="independent", alternative="greater", n_resamples=20_000, random_state=2).pvalue
    assert result.p_greater == pytest.approx(reference, abs=0.02)  # two Monte Carlo estimates of one p


def test_only_random_splits_count_the_observed_one_so_a_complete_separation_is_not_zero():
    result = permutation_test(np.arange(30.0), np.arange(100.0, 110.0), exact_limit=10, n_resamples=99)
    assert result.p_greater == pytest.approx(1 / 100)


@settings(max_examples=40)
@given(baseline=run_medians.filter(lambda values: len(values) >= 2), current=run_medians)
def test_the_ratio_interval_is_scipys_t_interval_on_log_medians(baseline, current):
    interval = ratio_interval(baseline, current)
    reference = scipy_stats.ttest_ind(np.log(current), np.log(baseline), equal_var=True)
    if len(baseline) + len(current) - 2 < 1 or not math.isfinite(reference.statistic):
        return  # no spread at all: scipy has no interval either
    low, high = reference.confidence_interval(confidence_level=0.90)
    assert interval.ratio == pytest.approx(math.exp(np.mean(np.log(current)) - np.mean(np.log(baseline))))
    assert (interval.low, interval.high) == pytest.approx((math.exp(low), math.exp(high)), rel=1e-9)


def _holm_step_down(pvalues, alpha):
    """Holm (1979) as written: reject in increasing order while p_(j) <= alpha / (m - j + 1)."""
    rejected = set()
    for rank, (position, p) in enumerate(sorted(enumerate(pvalues), key=lambda pair: pair[1])):
        if p > alpha / (len(pvalues) - rank):
            break
        rejected.add(position)
    return rejected


@settings(max_examples=60)
@given(pvalues=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8), alpha=st.sampled_from([0.01, 0.05, 0.1]))
def test_holm_adjusted_p_values_reject_what_the_step_down_procedure_rejects(pvalues, alpha):
    adjusted = holm(pvalues)
    assert {position for position, p in enumerate(adjusted) if p <= alpha} == _holm_step_down(pvalues, alpha)
    assert all(p <= q <= 1 for p, q in zip(pvalues, adjusted))


# ---- synthetic runs --------------------------------------------------------------------------

BETWEEN_RUN_SPREAD = 0.08
"""Log-normal sigma of run medians between processes: 12–17.5 ms around 15 ms, as measured on our CI machine."""
TRIALS = 300


def _runs(rng, count, factor=1.0):
    return 0.015 * factor * np.exp(rng.normal(0.0, BETWEEN_RUN_SPREAD, count))


def test_identical_distributions_give_no_regression_at_the_stated_rate():
    rng = np.random.default_rng(11)
    decisions = [compare_runs(_runs(rng, 10), _runs(rng, 4), threshold=0.10).decision for _ in range(TRIALS)]
    # The permutation test alone would fire at most ALPHA of the time; the 10 % floor only removes firings.
    allowed = ALPHA * TRIALS + 3 * math.sqrt(ALPHA * TRIALS)
    assert decisions.count(Decision.REGRESSION) <= allowed
    p_values = [permutation_test(np.log(_runs(rng, 10)), np.log(_runs(rng, 4))).p_greater for _ in range(TRIALS)]
    assert sum(p <= 0.05 for p in p_values) <= 0.05 * TRIALS + 3 * math.sqrt(0.05 * TRIALS)


PINNED_SPREAD = 0.04
"""... with the gate's defaults on that machine — one thread, each run's fastest round, slow outlier baseline
runs set aside: 0.015-0.03 between the kept baseline runs of the error-rate script; 0.04 leaves room."""


def _pinned(rng, count, factor=1.0):
    return 0.025 * factor * np.exp(rng.normal(0.0, PINNED_SPREAD, count))


def test_a_quarter_slower_is_caught_and_a_quarter_faster_is_an_improvement():
    rng = np.random.default_rng(12)
    slower = [compare_runs(_pinned(rng, 8), _pinned(rng, 3, 1.25), threshold=0.10).decision for _ in range(100)]
    faster = [compare_runs(_pinned(rng, 8), _pinned(rng, 3, 0.75), threshold=0.10).decision for _ in range(100)]
    assert slower.count(Decision.REGRESSION) >= 95
    assert faster.count(Decision.IMPROVEMENT) >= 95
    assert Decision.REGRESSION not in faster and Decision.IMPROVEMENT not in slower


def test_a_regression_must_clear_the_threshold_with_its_whole_interval():
    """Significant, ratio of means above 1.10, but one slow process in three: not sure enough to fail CI."""
    base = [0.02584, 0.02457, 0.02499, 0.02527, 0.02541, 0.02510, 0.02517, 0.02506]
    current = [0.03385, 0.02640, 0.02589]  # measured: unchanged code, one process in a slow episode
    result = compare_runs(base, current, threshold=0.10)
    assert result.p_slower <= ALPHA and result.ratio >= 1.10 and result.ci_low < 1.10
    assert result.decision is Decision.INCONCLUSIVE


def test_one_current_run_can_clear_a_benchmark_but_never_convict_it():
    rng = np.random.default_rng(13)
    quiet = 0.015 * np.exp(rng.normal(0.0, 0.02, 10))  # a quiet machine: 2 % between runs
    assert compare_runs(quiet, [float(np.median(quiet))], threshold=0.10).decision is Decision.NO_CHANGE
    base = _runs(rng, 10)
    noisy = compare_runs(base, [float(np.median(base))], threshold=0.10)  # 8 %: one run cannot exclude 10 %
    assert noisy.decision is Decision.INCONCLUSIVE and noisy.ci_high >= 1.10
    far_slower = compare_runs(base, [float(np.median(base)) * 2], threshold=0.10)
    assert far_slower.decision is Decision.INCONCLUSIVE
    assert far_slower.reason.startswith("re-measure: 10 baseline and 1 current run(s) cannot reach p ≤ 0.01")
    assert far_slower.reason.endswith("it takes 3 current runs")


def test_a_significant_change_below_the_threshold_is_no_change():
    base = [0.0150, 0.0151, 0.0149, 0.0150, 0.01505, 0.01495]
    slightly = [0.0156, 0.0157, 0.01565, 0.01555]  # 4 % slower, every current run above every baseline run
    result = compare_runs(base, slightly, threshold=0.10)
    assert result.p_slower <= ALPHA and result.decision is Decision.NO_CHANGE


def test_one_baseline_run_cannot_tell_noise_from_change_however_many_current_runs():
    result = compare_runs([0.015], [0.03] * 6, threshold=0.10)
    assert result.decision is Decision.INCONCLUSIVE and result.reason.startswith("cannot tell noise from change")


def test_a_straddling_ratio_is_inconclusive_with_the_p_value_named():
    base = [0.0150, 0.0160, 0.0140, 0.0155, 0.0145, 0.0150]
    current = [0.0165, 0.0150, 0.0175, 0.0160]  # 1.08× on average, p = 0.02
    result = compare_runs(base, current, threshold=0.10)
    assert result.decision is Decision.INCONCLUSIVE
    assert result.reason.startswith("re-measure: ") and "neither shown nor excluded" in result.reason


@pytest.mark.parametrize("baseline, current, threshold, message", [
    pytest.param([0.01, 0.0], [0.01], 0.1, r"^baseline run medians has a time that is not positive", id="zero"),
    pytest.param([0.01, float("nan")], [0.01], 0.1, r"^baseline run medians has a value that is not finite", id="nan"),
    pytest.param([0.01, 0.01], [], 0.1, r"^current run medians must be a non-empty list", id="empty"),
    pytest.param([0.01, 0.01], [0.01], 10, r"^threshold must be a fraction in \(0, 1\), got 10$", id="percent"),
])
def test_bad_samples_are_refused_with_the_value(baseline, current, threshold, message):
    with pytest.raises(AccountingError, match=message):
        compare_runs(baseline, current, threshold=threshold)


def _exact_spread(rng, size, spread, centre=0.0):
    """``size`` log values whose sample standard deviation is exactly ``spread`` around ``centre``."""
    values = rng.standard_normal(size)
    return centre + (values - values.mean()) / values.std(ddof=1) * spread


@given(baseline_size=st.integers(4, 12), current_size=st.integers(2, 6),
       spread=st.floats(0.005, 0.3), threshold=st.sampled_from([0.05, 0.10, 0.25]))
def test_the_smallest_convictable_slowdown_puts_the_interval_s_low_end_on_the_threshold(
        baseline_size, current_size, spread, threshold):
    """Truth: the t interval itself, on runs with exactly that spread on both sides and that slowdown."""
    smallest = smallest_convictable(spread, baseline_size, current_size, threshold=threshold)
    assume(smallest is not None)
    rng = np.random.default_rng(baseline_size * 100 + current_size)
    base = _exact_spread(rng, baseline_size, spread)
    current = _exact_spread(rng, current_size, spread, centre=math.log(smallest))
    interval = ratio_interval(np.exp(base), np.exp(current))
    assert interval.ratio == pytest.approx(smallest, rel=1e-9)
    assert interval.low == pytest.approx(1 + threshold, rel=1e-9)


@pytest.mark.parametrize("baseline_size", [2, 3, 5, 10])
@pytest.mark.parametrize("current_size", [1, 2, 3, 4, 5])
def test_no_convictable_slowdown_exactly_where_not_even_a_tenfold_one_is_a_regression(baseline_size, current_size):
    """Truth: :func:`compare_runs` on a tenfold slowdown, every current run slower than every baseline run."""
    rng = np.random.default_rng(7)
    base = np.exp(_exact_spread(rng, baseline_size, 0.02, centre=math.log(0.015)))
    current = 10 * np.exp(_exact_spread(rng, current_size, 0.02, centre=math.log(0.015))) if current_size > 1 \
        else np.array([0.15])
    convicted = compare_runs(base, current, threshold=0.10).decision is Decision.REGRESSION
    assert (smallest_convictable(0.02, baseline_size, current_size, threshold=0.10) is not None) == convicted


@pytest.mark.parametrize("spread", [-0.1, math.nan, math.inf])
def test_a_spread_that_is_not_a_standard_deviation_is_refused_by_value(spread):
    with pytest.raises(AccountingError, match=rf"^spread must be a finite standard deviation of log values, got {spread!r}$"):
        smallest_convictable(spread, 10, 5, threshold=0.1)


@given(values=st.lists(st.floats(1e-4, 1.0), min_size=2, max_size=12))
def test_log_spread_is_the_sample_standard_deviation_of_the_logs(values):
    assert log_spread(values) == pytest.approx(statistics.stdev(math.log(value) for value in values), rel=1e-9, abs=1e-12)


def test_one_run_has_no_spread():
    assert math.isnan(log_spread([0.015]))


@pytest.mark.parametrize("baseline_size, current_size, alpha, confidence", [
    pytest.param(2, 1, 0.5, CONFIDENCE, id="one-degree-of-freedom"),  # 3 runs reach p = 1/3 <= 0.5
    pytest.param(5, 5, 1 / math.comb(10, 5), CONFIDENCE, id="smallest-p-exactly-alpha"),
    pytest.param(6, 4, ALPHA, 0.80, id="another-interval-level"),
])
def test_the_edges_of_what_can_be_convicted_still_put_the_low_end_on_the_threshold(baseline_size, current_size, alpha,
                                                                                   confidence):
    """Truth as above: the t interval at ``confidence`` on runs with exactly that spread and that slowdown."""
    spread, threshold = 0.05, 0.10
    smallest = smallest_convictable(spread, baseline_size, current_size, threshold=threshold, alpha=alpha,
                                    confidence=confidence)
    assert smallest is not None
    rng = np.random.default_rng(3)
    base = _exact_spread(rng, baseline_size, spread)
    # One current run adds no squares: the pooled spread is the baseline's alone.
    current = (_exact_spread(rng, current_size, spread, centre=math.log(smallest)) if current_size > 1
               else np.array([math.log(smallest)]))
    interval = ratio_interval(np.exp(base), np.exp(current), confidence=confidence)
    assert interval.low == pytest.approx(1 + threshold, rel=1e-9)


def test_runs_without_noise_convict_exactly_beyond_the_threshold():
    """Zero spread: the interval is the ratio itself, so 1 + threshold is the smallest slowdown convicted."""
    smallest = smallest_convictable(0.0, 10, 5, threshold=0.10)
    interval = ratio_interval([0.015] * 10, [0.015 * smallest] * 5)
    assert smallest == pytest.approx(1.10) and interval.low == pytest.approx(1.10)


def test_a_time_that_is_not_positive_is_named_in_the_spread():
    with pytest.raises(AccountingError, match=r"^run values has a time that is not positive: \[0.015, 0.0\]$"):
        log_spread([0.015, 0.0])


def test_compare_runs_decides_at_the_interval_level_it_is_given():
    """Truth: scipy's pooled t interval on the log values at each level; 1.14x on 5 % noise is beyond 10 % at 80 % only."""
    base = [0.0150, 0.0162, 0.0141, 0.0158, 0.0146, 0.0155, 0.0139, 0.0160]
    current = [value * 1.145 for value in base[::-1]]
    reference = scipy_stats.ttest_ind(np.log(current), np.log(base), equal_var=True)
    for confidence, decision in ((0.80, Decision.REGRESSION), (CONFIDENCE, Decision.INCONCLUSIVE)):
        comparison = compare_runs(base, current, threshold=0.10, confidence=confidence)
        low, high = reference.confidence_interval(confidence_level=confidence)
        assert (comparison.ci_low, comparison.ci_high) == pytest.approx((math.exp(low), math.exp(high)), rel=1e-9)
        assert comparison.decision is decision and comparison.confidence == confidence


# ---- the permutation test -------------------------------------------------------------------

BASE = [0.0150, 0.0147, 0.0153, 0.0149, 0.0151, 0.0148]


def _enumerated(baseline, current):
    """(p_greater, p_less, splits) by listing every split of the pooled values (ties count as extreme)."""
    pooled = list(baseline) + list(current)
    observed = sum(current)
    sums = [sum(pooled[i] for i in chosen) for chosen in itertools.combinations(range(len(pooled)), len(current))]
    greater = sum(total >= observed - 1e-12 for total in sums)
    less = sum(total <= observed + 1e-12 for total in sums)
    return greater / len(sums), less / len(sums), len(sums)


@pytest.mark.parametrize("baseline, current", [
    pytest.param([1.0, 2.0, 3.0, 4.5], [2.5, 3.5], id="interleaved"),
    pytest.param([5.0, 6.0, 7.0], [1.0, 2.0], id="current-lower"),
    pytest.param([1.0, 3.0, 2.0, 2.0], [2.0], id="one-current-tied"),
])
def test_the_exact_test_reports_both_tails_its_statistic_and_its_sizes(baseline, current):
    result = permutation_test(baseline, current)
    p_greater, p_less, splits = _enumerated(baseline, current)
    assert (result.p_greater, result.p_less, result.splits, result.method) == pytest.approx(
        (p_greater, p_less, splits, "exact"))
    assert result.statistic == pytest.approx(np.mean(current) - np.mean(baseline))
    assert (result.baseline_size, result.current_size) == (len(baseline), len(current))


def test_the_exact_limit_is_inclusive():
    """binom(5, 2) = 10 splits: a limit of 10 still enumerates them, 9 draws random splits."""
    assert permutation_test([1.0, 2.0, 3.0], [4.0, 5.0], exact_limit=10).method == "exact"
    random = permutation_test([1.0, 2.0, 3.0], [4.0, 5.0], exact_limit=9, n_resamples=500)
    assert (random.method, random.splits) == ("random", 501)


def test_random_splits_estimate_both_tails_as_scipy_does():
    rng = np.random.default_rng(5)
    baseline, current = rng.normal(0.0, 1.0, 20), rng.normal(-0.4, 1.0, 9)
    result = permutation_test(baseline, current, exact_limit=100, n_resamples=4_000)
    assert result.method == "random" and result.splits == 4_001
    for alternative, ours in (("greater", result.p_greater), ("less", result.p_less)):
        reference = scipy_stats.permutation_test(
            (current, baseline), lambda x, y, axis: np.mean(x, axis=axis) - np.mean(y, axis=axis),
            permutation_type="independent", alternative=alternative, n_resamples=20_000, random_state=3).pvalue
        assert ours == pytest.approx(reference, abs=0.03)
    assert result.p_less < 0.2 < result.p_greater, "the current sample was drawn lower"


@pytest.mark.parametrize("baseline, current", [
    pytest.param([0.0, 0.0], [1.0, 1.0], id="separated-2-vs-2"),
    pytest.param([0.0, 1.0, 2.0, 3.0], [2.5, 1.5, 3.5], id="interleaved"),
    pytest.param([1.0, 1.0, 2.0], [1.0, 2.0], id="ties"),
])
def test_random_splits_estimate_the_exact_p_of_the_same_data(baseline, current):
    """Each random split draws ``c`` of the pooled values without replacement, so 9 999 of them estimate the
    exact p within a few standard errors (sqrt(p(1 − p)/10⁴) ≤ 0.005)."""
    exact_greater, exact_less, _ = _enumerated(baseline, current)
    result = permutation_test(baseline, current, exact_limit=1)
    assert result.method == "random"
    assert (result.p_greater, result.p_less) == pytest.approx((exact_greater, exact_less), abs=0.015)


def test_exact_decimal_and_fraction_inputs_are_numbers():
    """Run medians read with ``json.loads(..., parse_float=Decimal)`` or computed as fractions are numbers too."""
    baseline, current = [0.0150, 0.0147, 0.0153], [0.0187, 0.0190]
    as_floats = permutation_test(baseline, current)
    assert permutation_test([Decimal(str(v)) for v in baseline], [Fraction(str(v)) for v in current]) == as_floats


def test_random_splits_are_the_seeds_and_a_different_seed_draws_differently():
    rng = np.random.default_rng(6)
    baseline, current = rng.normal(0.0, 1.0, 20), rng.normal(0.2, 1.0, 9)
    first = permutation_test(baseline, current, exact_limit=100, n_resamples=999)
    other = permutation_test(baseline, current, exact_limit=100, n_resamples=999, seed=1)
    assert first == permutation_test(baseline, current, exact_limit=100, n_resamples=999, seed=0)
    assert first.p_greater != other.p_greater


def test_random_splits_count_ties_against_significance():
    """Identical values: every random split is as extreme as the observed one both ways."""
    result = permutation_test([2.0] * 20, [2.0] * 10, exact_limit=10, n_resamples=99)
    assert (result.p_greater, result.p_less) == (1.0, 1.0)


def test_a_split_equal_up_to_rounding_counts_as_extreme():
    """0.1 + 0.2 and 0.3 differ in the last bit; as splits they are the same sum, so both count."""
    baseline, current = [0.1, 0.2, 5.0], [0.3, 5.0]
    result = permutation_test(baseline, current)
    exact = _enumerated([round(v, 9) for v in baseline], [round(v, 9) for v in current])
    assert (result.p_greater, result.p_less) == pytest.approx(exact[:2])


def _exact_rational(baseline, current):
    """(p_greater, p_less) over every split, in exact rational arithmetic on the decimals as written."""
    pooled = [Fraction(str(value)) for value in baseline + current]
    observed = sum(Fraction(str(value)) for value in current)
    sums = [sum(pooled[i] for i in chosen) for chosen in itertools.combinations(range(len(pooled)), len(current))]
    return (sum(total >= observed for total in sums) / len(sums), sum(total <= observed for total in sums) / len(sums))


def test_a_tie_lost_to_rounding_at_a_large_scale_still_counts():
    """1001.8 + 1005.4 = 1003.0 + 1004.2 exactly, but their float sums differ by 2.3e-13 (two ulps at 2000):
    the tolerance scales with the values, so this split still counts as extreme, as exact arithmetic says."""
    baseline, current = [1001.8, 1008.6, 1005.4], [1003.0, 1004.2]
    assert sum([1001.8, 1005.4]) != sum(current)
    result = permutation_test(baseline, current)
    assert (result.p_greater, result.p_less) == pytest.approx(_exact_rational(baseline, current))


@pytest.mark.parametrize("values, message", [
    pytest.param([[1.0, 2.0], [3.0, 4.0]], r"^baseline must be a non-empty list of numbers, got ", id="2d"),
    pytest.param([], r"^baseline must be a non-empty list of numbers, got \[\]$", id="empty"),
    pytest.param([1.0, float("inf")], r"^baseline has a value that is not finite: \[1.0, inf\]$", id="inf"),
])
def test_samples_that_are_not_a_list_of_finite_numbers_are_named(values, message):
    with pytest.raises(AccountingError, match=message):
        permutation_test(values, [1.0])
    with pytest.raises(AccountingError, match=message.replace("baseline", "current")):
        permutation_test([1.0], values)


# ---- the smallest p and the runs it takes -----------------------------------------------------


@pytest.mark.parametrize("baseline_size, current_size", [(10, 1), (10, 3), (4, 4), (1, 5)])
def test_the_smallest_p_is_one_split_of_all(baseline_size, current_size):
    splits = sum(1 for _ in itertools.combinations(range(baseline_size + current_size), current_size))
    assert min_pvalue(baseline_size, current_size) == pytest.approx(1 / splits)


def test_runs_needed_gives_up_at_its_cap():
    """One baseline run: c current runs give c + 1 splits, so p ≤ 0.01 needs 99 of them."""
    assert runs_needed(1, 0.01, cap=98) is None
    assert runs_needed(1, 0.01, cap=99) == 99
    assert runs_needed(1, 0.01) is None, "the default cap is below 99"
    assert runs_needed(2, 0.01) == next(c for c in itertools.count(1) if 2 / ((c + 2) * (c + 1)) <= 0.01)
    # The default cap is 50 runs: p ≤ 1/51 takes exactly 50 current runs, p ≤ 1/52 takes 51.
    assert runs_needed(1, 1 / 51) == 50 and runs_needed(1, 1 / 52) is None


def test_at_least_one_current_run_is_needed_even_when_any_p_would_do():
    assert runs_needed(10, 1.0) == 1


# ---- the ratio interval ----------------------------------------------------------------------


@pytest.mark.parametrize("confidence", [0.80, CONFIDENCE, 0.99])
def test_the_interval_is_scipys_at_any_confidence_with_its_degrees_of_freedom(confidence):
    baseline, current = [10.0, 11.0, 9.0, 10.5], [12.0, 12.5, 11.5]
    interval = ratio_interval(baseline, current, confidence=confidence)
    reference = scipy_stats.ttest_ind(np.log(current), np.log(baseline), equal_var=True)
    low, high = reference.confidence_interval(confidence_level=confidence)
    assert (interval.low, interval.high) == pytest.approx((math.exp(low), math.exp(high)), rel=1e-9)
    assert (interval.confidence, interval.degrees_of_freedom) == (confidence, reference.df)


def test_one_run_each_side_has_a_ratio_and_no_interval():
    interval = ratio_interval([10.0], [12.0], confidence=0.8)
    assert interval.ratio == pytest.approx(1.2) and (interval.degrees_of_freedom, interval.confidence) == (0, 0.8)
    assert math.isnan(interval.low) and math.isnan(interval.high)
    two = ratio_interval([10.0, 11.0], [12.0])
    assert two.degrees_of_freedom == 1 and math.isfinite(two.high)


@pytest.mark.parametrize("values", [[0.01, -0.01], [0.01, 0.0]])
def test_a_time_that_is_not_positive_is_named(values):
    with pytest.raises(AccountingError, match=r"^current has a time that is not positive: "):
        ratio_interval([0.01, 0.02], values)
    with pytest.raises(AccountingError, match=r"^baseline has a time that is not positive: "):
        ratio_interval(values, [0.01, 0.02])


# ---- Holm --------------------------------------------------------------------------------------


def test_holm_adjusts_by_the_number_still_in_play_and_keeps_the_order():
    """Holm (1979): the j-th smallest p is multiplied by m − j + 1, capped at 1, never below an earlier one."""
    assert holm([0.04, 0.001, 0.03]) == pytest.approx([0.06, 0.003, 0.06])
    assert holm([0.02]) == [0.02]
    assert holm([0.5, 0.6]) == [1.0, 1.0]
    assert holm([]) == []


# ---- compare_runs ------------------------------------------------------------------------------


def test_a_regression_carries_every_figure_it_was_decided_from():
    slower = [0.0187, 0.0190, 0.0186, 0.0189]
    result = compare_runs(BASE, slower, threshold=0.10)
    test = permutation_test(np.log(BASE), np.log(slower))
    interval = ratio_interval(BASE, slower)
    assert result.decision is Decision.REGRESSION
    assert (result.ratio, result.ci_low, result.ci_high, result.confidence) == (
        interval.ratio, interval.low, interval.high, CONFIDENCE)
    assert (result.p_slower, result.p_faster) == (test.p_greater, test.p_less)
    assert (result.alpha, result.threshold, result.baseline_runs, result.current_runs) == (ALPHA, 0.10, 6, 4)
    assert result.min_pvalue == pytest.approx(1 / 210) and result.method == "exact"
    assert result.reason == f"{interval.ratio:.3g}× slower, p = {test.p_greater:.2g} ≤ 0.01"


def test_an_improvement_is_named_with_how_much_faster():
    faster = [0.0120, 0.0119, 0.0121, 0.0118]
    result = compare_runs(BASE, faster, threshold=0.10)
    assert result.decision is Decision.IMPROVEMENT and result.p_faster <= ALPHA
    assert result.reason == f"{np.mean(BASE) / np.mean(faster):.3g}× faster, p = {result.p_faster:.2g} ≤ 0.01"
    assert result.reason.startswith("1.25× faster")


def test_a_change_exactly_at_the_threshold_counts():
    """The interval's lower end ≥ 1 + threshold is a regression, its upper end ≤ 1 / (1 + threshold) an
    improvement (both inclusive)."""
    base = [1.0, 1.01, 0.99, 1.0, 1.005, 0.995]
    current = [1.2 * value for value in base[:4]]
    exactly = ratio_interval(base, current).low - 1
    assert compare_runs(base, current, threshold=exactly).decision is Decision.REGRESSION
    assert compare_runs(base, current, threshold=exactly * 1.001).decision is not Decision.REGRESSION
    inverse_high = ratio_interval(current, base).high
    inverse = compare_runs(current, base, threshold=(1 / inverse_high - 1) * 0.999999)
    assert inverse.decision is Decision.IMPROVEMENT


def _exact_threshold_for_inverse(ratio):
    """The threshold t whose 1 / (1 + t) is ``ratio`` exactly in floating point (searched over a few ulps)."""
    guess = 1 / ratio - 1
    for step in range(-8, 9):
        candidate = guess
        for _ in range(abs(step)):
            candidate = np.nextafter(candidate, np.inf if step > 0 else -np.inf)
        if 1 / (1 + candidate) == ratio:
            return float(candidate)
    pytest.skip("no threshold gives this ratio exactly")


def test_a_speedup_exactly_at_the_threshold_is_an_improvement():
    base = [1.0, 1.01, 0.99, 1.0, 1.005, 0.995]
    current = [value / 1.2 for value in base[:4]]
    high = ratio_interval(base, current).high
    try:
        threshold = _exact_threshold_for_inverse(high)
    except pytest.skip.Exception:  # no exact one: the largest threshold whose 1 / (1 + t) still reaches it
        threshold = 1 / high - 1
        while 1 / (1 + threshold) < high:
            threshold = float(np.nextafter(threshold, -1.0))
    assert compare_runs(base, current, threshold=threshold).decision is Decision.IMPROVEMENT
    ratio, larger = ratio_interval(base, current).high, threshold
    while 1 / (1 + larger) >= ratio:  # the first threshold the interval's upper end no longer reaches
        larger = float(np.nextafter(larger, 1.0))
    assert compare_runs(base, current, threshold=larger).decision is not Decision.IMPROVEMENT


def test_a_significant_speedup_below_the_threshold_is_no_change():
    """Every current run faster than every baseline run, but by 4 %: significant, not large."""
    base = [0.0150, 0.0151, 0.0149, 0.0150, 0.01505, 0.01495]
    slightly = [0.01440, 0.01445, 0.01435, 0.01442]
    result = compare_runs(base, slightly, threshold=0.10)
    assert result.p_faster <= ALPHA and result.decision is Decision.NO_CHANGE


@pytest.mark.parametrize("side", ["slower", "faster"])
def test_a_p_value_exactly_at_alpha_is_significant(side):
    """p ≤ α, not p < α: with the p-values given by p_adjust, exactly α decides, the next float up does not."""
    current = [0.0190, 0.0188, 0.0191, 0.0189] if side == "slower" else [0.0120, 0.0119, 0.0121, 0.0118]
    decided = Decision.REGRESSION if side == "slower" else Decision.IMPROVEMENT

    def exactly(p):
        return (lambda p_slower, p_faster: (p, 1.0)) if side == "slower" else (lambda p_slower, p_faster: (1.0, p))

    assert compare_runs(BASE, current, threshold=0.10, p_adjust=exactly(ALPHA)).decision is decided
    above = float(np.nextafter(ALPHA, 1.0))
    assert compare_runs(BASE, current, threshold=0.10, p_adjust=exactly(above)).decision is not decided


def test_sizes_whose_smallest_p_equals_the_level_can_reach_it():
    """6 baseline and 4 current runs: the smallest p is 1/210; at α = 1/210 the sizes are enough, so an
    undecided benchmark is 'neither shown nor excluded', not 'cannot reach'."""
    straddling = [0.0165, 0.0150, 0.0175, 0.0160]
    alpha = 1 / math.comb(10, 4)
    result = compare_runs(BASE, straddling, threshold=0.10, alpha=alpha)
    assert result.decision is Decision.INCONCLUSIVE and "neither shown nor excluded" in result.reason
    above = compare_runs(BASE, straddling, threshold=0.10, alpha=float(np.nextafter(alpha, 0.0)))
    assert "cannot reach" in above.reason


def test_no_change_names_the_threshold_and_the_bound():
    result = compare_runs(BASE, [0.0150, 0.0151, 0.0149], threshold=0.10)
    assert result.decision is Decision.NO_CHANGE and result.ci_high < 1.10
    assert result.reason == f"a slowdown of 10 % is excluded (upper bound {result.ci_high:.3g}×)"


def test_an_upper_bound_at_the_threshold_is_not_no_change():
    """The bound must be strictly below 1 + threshold to exclude the slowdown."""
    base, current = [10.0, 11.0, 9.0, 10.0], [12.0]
    high = ratio_interval(base, current).high
    assert compare_runs(base, current, threshold=high - 1).decision is Decision.INCONCLUSIVE
    assert compare_runs(base, current, threshold=(high - 1) * 1.0001).decision is Decision.NO_CHANGE


def test_a_family_raises_the_bar_the_sizes_must_reach():
    """4 current runs against 6 reach p = 1/210 at best: enough in a family of 2 (level 0.005), not in a family
    of 3 (0.0033), and the reason says how many current runs would be (counted here by enumeration)."""
    slow = [0.0187, 0.0160, 0.0150, 0.0175]
    pair = compare_runs(BASE, slow, threshold=0.10, family=2)
    assert "cannot reach" not in pair.reason
    result = compare_runs(BASE, slow, threshold=0.10, family=3)
    needed = next(c for c in itertools.count(1) if 1 / math.comb(6 + c, c) <= 0.01 / 3)
    assert result.decision is Decision.INCONCLUSIVE
    assert result.reason == (f"re-measure: 6 baseline and 4 current run(s) cannot reach p ≤ 0.0033 "
                             f"(smallest p {1 / 210:.2g}); it takes {needed} current runs")


def test_p_adjust_replaces_both_p_values_and_decides_with_them():
    slower = [0.0187, 0.0190, 0.0186, 0.0189]
    seen = []

    def adjust(p_slower, p_faster):
        seen.append((p_slower, p_faster))
        return 0.5, 0.25

    result = compare_runs(BASE, slower, threshold=0.10, p_adjust=adjust)
    test = permutation_test(np.log(BASE), np.log(slower))
    assert seen == [(test.p_greater, test.p_less)]
    assert (result.p_slower, result.p_faster) == (0.5, 0.25)
    assert result.decision is Decision.INCONCLUSIVE
    assert result.reason.endswith("beyond the 10 % threshold (p = 0.5)")


def test_a_lower_alpha_withholds_a_regression():
    slower = [0.0187, 0.0190, 0.0186, 0.0189]
    result = compare_runs(BASE, slower, threshold=0.10, alpha=0.001)
    assert result.decision is not Decision.REGRESSION and result.alpha == 0.001


def test_more_baseline_runs_is_the_advice_when_current_runs_cannot_help():
    """Two baseline runs at α = 0.0001: c current runs give binom(c + 2, 2) splits, fewer than 10⁴ up to the cap."""
    result = compare_runs([0.015, 0.0151], [0.03, 0.031], threshold=0.10, alpha=0.0001)
    assert result.decision is Decision.INCONCLUSIVE and result.reason.endswith("it takes more baseline runs")


@pytest.mark.parametrize("threshold", [0, 1, True, -0.1, 1.5])
def test_a_threshold_outside_the_open_interval_is_refused(threshold):
    with pytest.raises(AccountingError, match=rf"^threshold must be a fraction in \(0, 1\), got {threshold!r}$"):
        compare_runs(BASE, BASE, threshold=threshold)


def test_thresholds_just_inside_the_interval_are_accepted():
    assert compare_runs(BASE, BASE, threshold=0.999).threshold == 0.999
    assert compare_runs(BASE, BASE, threshold=1e-6).threshold == 1e-6


def test_below_a_scale_of_one_the_tie_tolerance_is_a_billionth_not_more():
    """Values summing to less than 1: the tolerance is 1e-9 absolute, so a split 1.5e-9 above the observed one
    (ten million ulps) is a real difference, not a tie, as exact arithmetic on the decimals says."""
    baseline, current = [0.1, 0.3000000015], [0.3]
    result = permutation_test(baseline, current)
    assert (result.p_greater, result.p_less) == pytest.approx(_exact_rational(baseline, current))
    assert result.p_less == pytest.approx(2 / 3)


def _threshold_whose_inverse_is(ratio):
    """A threshold t with 1 / (1 + t) == ratio exactly in floating point, or None (searched over a few ulps)."""
    candidate = 1 / ratio - 1
    for _ in range(8):
        candidate = float(np.nextafter(candidate, -np.inf))
    for _ in range(17):
        if 1 / (1 + candidate) == ratio:
            return candidate
        candidate = float(np.nextafter(candidate, np.inf))
    return None


def test_an_upper_bound_exactly_at_the_inverse_threshold_is_an_improvement():
    """'the interval's upper end ≤ 1 / (1 + threshold)' is inclusive: found on the first speed-up whose upper
    end some threshold hits exactly (about every other one does; 1 / (1 + t) skips every other float)."""
    base = [1.0, 1.01, 0.99, 1.0, 1.005, 0.995]
    for step in range(40):
        current = [value / (1.2 + step / 1000) for value in base[:4]]
        high = ratio_interval(base, current).high
        threshold = _threshold_whose_inverse_is(high)
        if threshold is not None:
            break
    else:
        pytest.fail("no speed-up of 1.200-1.239x has an upper end that a threshold hits exactly")
    result = compare_runs(base, current, threshold=threshold)
    assert result.p_faster <= ALPHA and result.ci_high == 1 / (1 + threshold)
    assert result.decision is Decision.IMPROVEMENT


@pytest.mark.parametrize("values, message", [
    pytest.param([0.02, 0.0, 0.02, 0.02, 0.02], r"^baseline run values has a time that is not positive: ",
                 id="zero"),
    pytest.param([0.02, float("inf"), 0.02, 0.02, 0.02], r"^baseline run values has a value that is not finite: ",
                 id="inf"),
])
def test_a_bad_baseline_run_value_is_named_as_one(values, message):
    with pytest.raises(AccountingError, match=message):
        slow_outliers(values, threshold=0.1)


def test_a_run_exactly_a_thresholds_worth_slower_stays():
    """'slower than the history by *more than* the threshold': six runs at 1.0 (no spread) and one at exactly
    1 + t is not set aside; the next float up is. t is dyadic, so 1 + t is exact, and chosen where
    log(1 + t) == log1p(t) in floating point, so the run sits exactly on the limit."""
    history = [1.0] * 6
    threshold = next((t for t in (0.25, 0.5, 0.125, 0.375, 0.0625, 0.75, 0.1875)
                      if float(np.log(np.array([*history, 1 + t]))[-1]) == math.log1p(t)), None)
    assert threshold is not None, "log and log1p disagree on every dyadic threshold tried"
    assert slow_outliers([*history, 1 + threshold], threshold=threshold) == []
    assert slow_outliers([*history, float(np.nextafter(1 + threshold, 2.0))], threshold=threshold) == [6]


def test_a_tie_lost_to_rounding_in_large_values_still_counts_as_a_tie():
    """Truth: every split enumerated in exact decimal arithmetic (Fraction), where 0.1 + 0.2 = 0.3 + 0.0 is a tie.

    In floats around 1e6 the two sums differ by about 2e-10, far above an absolute 1e-9-scale tolerance
    divided by the values' size; the tolerance has to grow with them.
    """
    baseline_text, current_text = ["1000000.3", "1000000.0"], ["1000000.1", "1000000.2"]
    pooled = [Fraction(Decimal(text)) for text in baseline_text + current_text]
    observed = sum(pooled[2:])
    sums = [sum(pooled[i] for i in chosen) for chosen in itertools.combinations(range(4), 2)]
    result = permutation_test([float(text) for text in baseline_text], [float(text) for text in current_text])
    assert result.p_greater == pytest.approx(sum(total >= observed for total in sums) / len(sums), rel=1e-12)
    assert result.p_less == pytest.approx(sum(total <= observed for total in sums) / len(sums), rel=1e-12)
