"""The gate's two-sample statistics against independent truths: the permutation test, the ratio interval and the
log spread against scipy and exact enumeration (``compare_runs``'s decisions: test_gate_compare.py; Holm:
test_gate_multiple.py; the smallest p and convictable slowdown: test_gate_power_limits.py).

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
    CONFIDENCE,
    log_spread,
    min_pvalue,
    permutation_test,
    ratio_interval,
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


@given(values=st.lists(st.floats(1e-4, 1.0), min_size=2, max_size=12))
def test_log_spread_is_the_sample_standard_deviation_of_the_logs(values):
    assert log_spread(values) == pytest.approx(statistics.stdev(math.log(value) for value in values), rel=1e-9, abs=1e-12)


def test_one_run_has_no_spread():
    assert math.isnan(log_spread([0.015]))


def test_a_time_that_is_not_positive_is_named_in_the_spread():
    with pytest.raises(AccountingError, match=r"^run values has a time that is not positive: \[0.015, 0.0\]$"):
        log_spread([0.015, 0.0])


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


def test_below_a_scale_of_one_the_tie_tolerance_is_a_billionth_not_more():
    """Values summing to less than 1: the tolerance is 1e-9 absolute, so a split 1.5e-9 above the observed one
    (ten million ulps) is a real difference, not a tie, as exact arithmetic on the decimals says."""
    baseline, current = [0.1, 0.3000000015], [0.3]
    result = permutation_test(baseline, current)
    assert (result.p_greater, result.p_less) == pytest.approx(_exact_rational(baseline, current))
    assert result.p_less == pytest.approx(2 / 3)


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
