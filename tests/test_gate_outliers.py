"""Slow outlier baseline runs: checked against scipy's robust spread, and by what it must never do."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from accounting.errors import AccountingError
from accounting.gate.stats import OUTLIER_MIN_RUNS, OUTLIER_SPREADS, slow_outliers

run_values = st.lists(st.floats(min_value=0.01, max_value=0.05, allow_nan=False), min_size=1, max_size=14)
thresholds = st.sampled_from([0.05, 0.10, 0.25])


@given(values=run_values, threshold=thresholds)
def test_the_rule_is_scipys_median_absolute_deviation_on_logs(values, threshold):
    logs = np.log(values)
    spread = scipy_stats.median_abs_deviation(logs, scale="normal")  # 1.4826 x MAD
    limit = max(math.log1p(threshold), OUTLIER_SPREADS * spread)
    expected = [i for i, value in enumerate(logs) if value - np.median(logs) > limit] if len(values) >= OUTLIER_MIN_RUNS else []
    found = slow_outliers(values, threshold=threshold)
    assert found == expected
    # never a fast run, never half of the history or more, and the same answer in other units
    assert all(values[i] > np.median(values) for i in found)
    assert len(found) < len(values) / 2 or not found
    assert slow_outliers([value * 1e3 for value in values], threshold=threshold) == found


@given(values=st.lists(st.floats(min_value=0.020, max_value=0.021), min_size=OUTLIER_MIN_RUNS, max_size=10),
       factor=st.floats(min_value=1.3, max_value=3.0))
def test_a_run_slower_than_a_tight_history_by_a_regressions_worth_is_found(values, factor):
    planted = [*values, max(values) * factor]
    assert slow_outliers(planted, threshold=0.10) == [len(values)]


def test_a_run_just_inside_the_threshold_stays():
    history = [0.020] * 6
    assert slow_outliers([*history, 0.020 * 1.099], threshold=0.10) == []
    assert slow_outliers([*history, 0.020 * 1.101], threshold=0.10) == [6]


@pytest.mark.parametrize("values", [[0.02, 0.0, 0.02, 0.02, 0.02], [0.02, float("nan"), 0.02, 0.02, 0.02]])
def test_a_bad_value_is_named(values):
    with pytest.raises(AccountingError, match="baseline run values"):
        slow_outliers(values, threshold=0.1)


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
