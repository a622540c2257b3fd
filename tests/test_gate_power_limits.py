"""The limits of what the gate can convict: the smallest p the sizes allow, the runs a level needs, and the smallest
convictable slowdown, against exact enumeration and the gate's own verdicts (moved here with them from
``accounting.gate.stats`` to ``accounting.gate.power``; imported from ``stats``, where they are still exported)."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from accounting.errors import AccountingError
from accounting.gate.stats import (
    ALPHA,
    CONFIDENCE,
    Decision,
    compare_runs,
    min_pvalue,
    ratio_interval,
    runs_needed,
    smallest_convictable,
)


def test_runs_needed_is_the_first_size_whose_smallest_p_reaches_the_level():
    for baseline_size, alpha in ((10, ALPHA / 3), (5, ALPHA), (20, 0.05)):
        needed = runs_needed(baseline_size, alpha)
        assert min_pvalue(baseline_size, needed) <= alpha < min_pvalue(baseline_size, needed - 1)


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
