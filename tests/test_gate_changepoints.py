"""Change points in a run series: planted steps are found where they were planted, flat series give none,
the permutation p-value agrees with exact enumeration, slow outlier runs are screened and steps are not."""

import itertools
import math
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting.errors import AccountingError
from accounting.gate.changepoints import (
    MIN_SEGMENT,
    TooFewRuns,
    bump_p_value,
    detect,
    detectable_step,
    isolated_slow_runs,
    min_runs,
    split_p_value,
)


def _series(length, step_at, factor, *, sd=0.005, seed=0, base=0.025):
    logs = np.random.default_rng(seed).normal(0, sd, length)
    if step_at is not None:
        logs[step_at:] += math.log(factor)
    return list(base * np.exp(logs))


@settings(max_examples=30, deadline=None)
@given(length=st.integers(12, 60), where=st.floats(0, 1), factor=st.sampled_from([1.2, 1.5, 1 / 1.3]),
       seed=st.integers(0, 2**16))
def test_a_planted_step_is_found_at_its_first_run_with_its_size(length, where, factor, seed):
    step_at = MIN_SEGMENT + round(where * (length - 2 * MIN_SEGMENT))
    values = _series(length, step_at, factor, seed=seed)
    found = detect(values).change_points
    # Each further split is tested at ALPHA (0.01) on noise alone, so a stray beside the step is allowed, once.
    assert step_at in [point.index for point in found] and len(found) <= 2
    point = next(point for point in found if point.index == step_at)
    spread = 4 * 0.005 * math.sqrt(1 / step_at + 1 / (length - step_at))  # 4 standard errors of the planted noise
    assert point.low < point.ratio < point.high and abs(math.log(point.ratio / factor)) < spread
    if len(found) == 1:
        assert (point.runs_before, point.runs_after) == (step_at, length - step_at)


def test_flat_series_give_no_change_point():
    counts = [len(detect(_series(40, None, 1, seed=seed)).change_points) for seed in range(20)]
    assert sum(counts) <= 1


def test_identical_values_are_not_cut_at_every_run():
    assert detect([0.025] * 20).change_points == ()


def test_two_steps_each_with_the_run_after_it_and_the_levels_between():
    values = _series(30, 10, 1.25)[:20] + list(np.array(_series(10, None, 1, seed=3)) * 1.25 * 0.8)
    found = detect(values)
    assert [point.index for point in found.change_points] == [10, 20]
    assert [(first, end) for first, end, _ in found.levels] == [(0, 10), (10, 20), (20, 30)]
    levels = [level for _, _, level in found.levels]
    assert levels[1] / levels[0] == pytest.approx(1.25, rel=0.01) and levels[2] / levels[1] == pytest.approx(0.8, rel=0.01)


def _exact_p(segment, split, min_segment):
    """Every ordering of the segment: the share whose largest split statistic reaches the observed one."""
    segment = np.asarray(segment, dtype=float)
    size = len(segment)

    def statistic(values, at):
        left, right = values[:at], values[at:]
        return abs(left.mean() - right.mean()) * math.sqrt(at * (size - at) / size)

    observed = statistic(segment, split)
    orders = list(itertools.permutations(range(size)))
    hits = sum(max(statistic(segment[list(order)], at) for at in range(min_segment, size - min_segment + 1))
               >= observed - 1e-12 for order in orders)
    return hits / len(orders)


@pytest.mark.parametrize("segment, split", [
    pytest.param([0.0, 0.01, -0.01, 0.0, 0.2, 0.21, 0.19], 4, id="clear-step"),
    pytest.param([0.0, 0.05, -0.02, 0.03, 0.01, 0.04, 0.02], 3, id="no-step"),
])
def test_the_permutation_p_value_agrees_with_every_ordering(segment, split):
    exact = _exact_p(segment, split, 2)
    estimate = split_p_value(segment, split, min_segment=2, permutations=4999, autocorrelation=0)
    assert estimate == pytest.approx(exact, abs=0.02)


def test_a_lone_slow_run_is_screened_but_a_step_is_not():
    logs = np.log(_series(20, 12, 1.3, seed=5))
    logs[5] += math.log(1.4)
    assert isolated_slow_runs(logs, threshold=0.1) == [5]


def test_three_slow_runs_in_a_row_are_all_screened():
    logs = np.log(_series(24, None, 1, seed=7))
    logs[8:11] += math.log(1.4)
    assert isolated_slow_runs(logs, threshold=0.1) == [8, 9, 10]
    assert detect(np.exp(logs)).change_points == ()


def test_too_few_runs_say_how_many_are_needed():
    with pytest.raises(TooFewRuns, match=f"needs at least {min_runs()} runs .* got {min_runs() - 1}"):
        detect(_series(min_runs() - 1, None, 1))


@pytest.mark.parametrize("values", [[0.02, -0.01] * 5, [0.02, float("nan")] * 5, [[0.02]] * 10])
def test_bad_values_are_named(values):
    with pytest.raises(AccountingError, match="run values must be a list of positive, finite seconds"):
        detect(values)


def test_it_needs_no_ruptures(monkeypatch):
    monkeypatch.setitem(sys.modules, "ruptures", None)  # import ruptures now raises ImportError
    found = detect(_series(30, 15, 1.25))
    assert [point.index for point in found.change_points] == [15]


def _exact_bump_p(segment, first, end, min_segment):
    """Every ordering of the segment: the share whose largest bump statistic reaches the observed one."""
    segment = np.asarray(segment, dtype=float)
    size = len(segment)

    def statistic(values, i, j):
        inside = j - i
        return abs(values[i:j].sum() - inside * values.mean()) / math.sqrt(inside * (size - inside) / size)

    pairs = [(i, j) for i in range(min_segment, size) for j in range(i + min_segment, size - min_segment + 1)]
    observed = statistic(segment, first, end)
    orders = list(itertools.permutations(range(size)))
    hits = sum(max(statistic(segment[list(order)], i, j) for i, j in pairs) >= observed - 1e-12 for order in orders)
    return hits / len(orders)


@pytest.mark.parametrize("segment, first, end", [
    pytest.param([0.0, 0.01, 0.2, 0.21, 0.19, 0.0, 0.01], 2, 5, id="clear-bump"),
    pytest.param([0.0, 0.05, -0.02, 0.03, 0.01, 0.04, 0.02], 2, 4, id="no-bump"),
])
def test_the_bump_p_value_agrees_with_every_ordering(segment, first, end):
    exact = _exact_bump_p(segment, first, end, 2)
    assert bump_p_value(segment, first, end, min_segment=2, permutations=4999, autocorrelation=0) == pytest.approx(
        exact, abs=0.02)


def test_correlated_runs_make_a_step_less_sure_by_the_variance_their_correlation_adds():
    # On runs correlating by rho, a segment mean's variance grows by (1 + rho) / (1 - rho): the t at the split shrinks by
    # its square root. Checked by enumeration: the p-value at rho equals the plain test's for the shrunken statistic.
    segment = np.array([0.0, 0.03, -0.02, 0.05, 0.09, 0.06, 0.08])
    rho, size = 0.3, len(segment)

    def t_at(values, at):
        left, right = values[:at], values[at:]
        pooled = (((left - left.mean()) ** 2).sum() + ((right - right.mean()) ** 2).sum()) / (size - 2)
        return abs(left.mean() - right.mean()) / math.sqrt(pooled * (1 / at + 1 / (size - at)))

    shrunk = t_at(segment, 3) * math.sqrt((1 - rho) / (1 + rho))
    orders = list(itertools.permutations(range(size)))
    exact = sum(max(t_at(segment[list(order)], at) for at in range(2, size - 1)) >= shrunk - 1e-12
                for order in orders) / len(orders)
    estimate = split_p_value(segment, 3, min_segment=2, permutations=4999, autocorrelation=rho)
    assert estimate == pytest.approx(exact, abs=0.02)
    assert estimate > split_p_value(segment, 3, min_segment=2, permutations=4999, autocorrelation=0)


def test_a_level_that_rises_and_returns_in_the_middle_is_two_change_points():
    values = _series(24, None, 1, seed=9)
    values = values[:8] + [value * 1.2 for value in values[8:16]] + values[16:]
    assert [point.index for point in detect(values).change_points] == [8, 16]


@pytest.mark.parametrize("noise", [0.02, 0.05])
def test_a_step_of_the_detectable_size_is_found_about_95_times_in_100_and_a_smaller_one_much_less(noise):
    runs, histories = 30, 60

    def found(step):
        return sum(bool(detect(_series(runs, runs // 2, step, sd=noise, seed=seed)).change_points)
                   for seed in range(histories))

    step = detectable_step(noise, runs)
    assert found(step) >= 0.9 * histories          # measured 57 of 60 at both noises
    assert found(math.exp(0.7 * math.log(step))) <= 0.75 * histories   # measured 31 of 60: the formula is not lax


def test_the_detectable_step_shrinks_with_more_runs_and_less_noise():
    assert detectable_step(0.05, 100) < detectable_step(0.05, 30) and detectable_step(0.02, 30) < detectable_step(0.05, 30)
    assert detectable_step(0.05, min_runs() - 1) is None


def test_a_higher_correlation_floor_makes_a_step_less_sure_and_a_bad_floor_is_named():
    logs = np.log(_series(24, 12, 1.06, sd=0.03, seed=4))
    loose, strict = split_p_value(logs, 12, floor=0.0), split_p_value(logs, 12, floor=0.5)
    assert loose < strict
    with pytest.raises(AccountingError, match=r"^floor must be an autocorrelation in \[0, 0\.5\], got 0\.9$"):
        detect(_series(24, 12, 1.06), floor=0.9)
