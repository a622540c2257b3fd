"""``compare_runs``, the verdict on one benchmark: synthetic runs (identical distributions stay quiet at the stated
rate; a shift is caught), and every edge of its four decisions against the test, the interval and the threshold."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from accounting.errors import AccountingError
from accounting.gate.stats import (
    ALPHA,
    CONFIDENCE,
    Decision,
    compare_runs,
    permutation_test,
    ratio_interval,
)

BASE = [0.0150, 0.0147, 0.0153, 0.0149, 0.0151, 0.0148]


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
