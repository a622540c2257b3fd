"""The gate's power and minimum detectable effect: the formulas against scipy's noncentral t and against the gate's
own verdicts on simulated log-normal runs."""

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from accounting.errors import AccountingError
from accounting.gate.power import (
    conviction_power,
    detection_power,
    minimum_detectable_effect,
    too_noisy,
)
from accounting.gate.stats import Decision, compare_runs, permutation_test


@pytest.mark.parametrize("effect, spread, base, current, alpha", [
    pytest.param(1.05, 0.02, 10, 5, 0.01, id="calm-10-5"),
    pytest.param(1.10, 0.066, 8, 8, 0.01, id="noisy-ab-8-pairs"),
    pytest.param(1.02, 0.006, 5, 5, 0.05, id="quiet-5-5"),
])
def test_detection_power_is_the_simulated_rate_of_a_one_sided_t_test(effect, spread, base, current, alpha):
    generator = np.random.default_rng(3)
    trials = 4000
    baseline = generator.normal(0, spread, (trials, base))
    now = generator.normal(math.log(effect), spread, (trials, current))
    shown = scipy_stats.ttest_ind(now, baseline, axis=1, alternative="greater").pvalue <= alpha
    predicted = detection_power(effect, spread, base, current, alpha=alpha)
    assert shown.mean() == pytest.approx(predicted, abs=4 * math.sqrt(predicted * (1 - predicted) / trials) + 0.005)


@pytest.mark.parametrize("effect, threshold", [pytest.param(1.16, 0.10, id="past-10"),
                                               pytest.param(1.09, 0.05, id="past-5")])
def test_where_the_threshold_decides_conviction_is_scipys_noncentral_t(effect, threshold):
    # alpha = 0.4 makes "shown slower" the weaker condition for every spread that matters, so conviction is the
    # interval condition alone: (d - log(1 + threshold)) / (s se) >= t_c, a noncentral t tail.
    spread, base, current, confidence = 0.03, 10, 6, 0.9
    freedom, scale = base + current - 2, math.sqrt(1 / base + 1 / current)
    noncentrality = (math.log(effect) - math.log1p(threshold)) / (spread * scale)
    expected = scipy_stats.nct.sf(scipy_stats.t.ppf(1 - (1 - confidence) / 2, freedom), freedom, noncentrality)
    got = conviction_power(effect, spread, base, current, alpha=0.4, threshold=threshold, confidence=confidence)
    assert got == pytest.approx(expected, abs=1e-6)


def test_where_significance_decides_conviction_is_detection_power():
    # A threshold far below the noise's reach: only "shown slower" can fail.
    args = dict(alpha=0.01)
    assert conviction_power(1.08, 0.03, 10, 6, threshold=1e-6, confidence=0.5, **args) == pytest.approx(
        detection_power(1.08, 0.03, 10, 6, **args), abs=1e-6)


@pytest.mark.parametrize("spread, base, current, threshold, confidence", [
    pytest.param(0.02, 10, 5, 0.10, 0.90, id="check-10-5-at-10"),
    pytest.param(0.04, 8, 8, 0.05, 0.80, id="ab-8-pairs-at-5"),
])
def test_the_gate_convicts_a_slowdown_of_the_mde_about_95_times_in_100(spread, base, current, threshold, confidence):
    effect = minimum_detectable_effect(spread, base, current, alpha=0.01, threshold=threshold, confidence=confidence)
    generator = np.random.default_rng(11)
    trials = 300
    convicted = 0
    for _ in range(trials):
        baseline = np.exp(generator.normal(0, spread, base))
        now = np.exp(generator.normal(math.log(effect), spread, current))
        result = compare_runs(baseline, now, threshold=threshold, confidence=confidence)
        convicted += result.decision is Decision.REGRESSION
    # The permutation test is a little less powerful than the t test it is modelled by (measured 0.93 and 0.96).
    assert 0.88 <= convicted / trials <= 0.99


def test_the_permutation_test_shows_a_slowdown_of_the_detection_mde_about_95_times_in_100():
    spread, base, current = 0.03, 10, 5
    effect = minimum_detectable_effect(spread, base, current, alpha=0.01)
    generator = np.random.default_rng(5)
    trials = 300
    shown = sum(permutation_test(generator.normal(0, spread, base),
                                 generator.normal(math.log(effect), spread, current)).p_greater <= 0.01
                for _ in range(trials))
    assert 0.88 <= shown / trials <= 0.99


@pytest.mark.parametrize("threshold", [None, 0.05, 0.10])
def test_the_mde_is_where_the_power_reaches_95_percent(threshold):
    spread, base, current = 0.03, 10, 5
    effect = minimum_detectable_effect(spread, base, current, alpha=0.01, threshold=threshold)
    chance = (detection_power(effect, spread, base, current, alpha=0.01) if threshold is None else
              conviction_power(effect, spread, base, current, alpha=0.01, threshold=threshold))
    smaller = (detection_power(effect * 0.99, spread, base, current, alpha=0.01) if threshold is None else
               conviction_power(effect * 0.99, spread, base, current, alpha=0.01, threshold=threshold))
    assert chance == pytest.approx(0.95, abs=1e-4) and smaller < 0.95


def test_more_runs_or_less_noise_detect_smaller_slowdowns():
    assert minimum_detectable_effect(0.02, 10, 8, alpha=0.01) < minimum_detectable_effect(0.02, 10, 4, alpha=0.01)
    assert minimum_detectable_effect(0.01, 10, 4, alpha=0.01) < minimum_detectable_effect(0.02, 10, 4, alpha=0.01)


def test_sizes_that_cannot_reach_alpha_detect_nothing():
    # 4 A against 4 B runs: smallest p 1/70 > 0.01.
    assert minimum_detectable_effect(0.001, 4, 4, alpha=0.01) is None
    assert detection_power(2.0, 0.001, 4, 4, alpha=0.01) == 0 == conviction_power(2.0, 0.001, 4, 4, alpha=0.01,
                                                                                 threshold=0.1)
    assert not too_noisy(None, 0.1) and too_noisy(1.11, 0.1) and not too_noisy(1.09, 0.1)


@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: minimum_detectable_effect(-0.1, 5, 5, alpha=0.01), r"^spread must be a finite standard "
                 r"deviation of log values, got -0\.1$", id="negative-spread"),
    pytest.param(lambda: minimum_detectable_effect(0.1, 0, 5, alpha=0.01), r"^baseline_size must be a positive "
                 r"number of runs, got 0$", id="no-baseline"),
    pytest.param(lambda: detection_power(1.1, 0.1, 5, 2.5, alpha=0.01), r"^current_size must be a positive number "
                 r"of runs, got 2\.5$", id="fractional-runs"),
    pytest.param(lambda: minimum_detectable_effect(0.1, 5, 5, alpha=0.01, power=1.0), r"^power must be a "
                 r"probability in \(0, 1\), got 1\.0$", id="power-one"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(AccountingError, match=message):
        call()
