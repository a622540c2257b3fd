"""Change points in a run series: planted steps are found where they were planted, flat series give none,
the permutation p-value agrees with exact enumeration, slow outlier runs are screened and steps are not."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting.errors import AccountingError
from accounting.gate import changepoints
from accounting.gate.changepoints import (
    MIN_SEGMENT,
    TooFewRuns,
    detect,
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
    assert [point.index for point in found] == [step_at]
    point = found[0]
    spread = 4 * 0.005 * math.sqrt(1 / step_at + 1 / (length - step_at))  # 4 standard errors of the planted noise
    assert point.low < point.ratio < point.high and abs(math.log(point.ratio / factor)) < spread
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
    estimate = split_p_value(segment, split, min_segment=2, permutations=4999)
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


def test_the_method_is_ruptures_pelt_on_log_values(monkeypatch):
    seen = {}
    real = __import__("ruptures").KernelCPD

    class Recording(real):
        def predict(self, n_bkps=None, pen=None):
            seen["kernel"], seen["pen"] = self.kernel_name, pen
            return super().predict(n_bkps=n_bkps, pen=pen)

    monkeypatch.setattr("ruptures.KernelCPD", Recording)
    values = _series(30, 15, 1.25)
    found = detect(values)
    noise = found.noise
    assert seen == {"kernel": "linear", "pen": pytest.approx(changepoints.PENALTY * noise ** 2 * math.log(30))}
