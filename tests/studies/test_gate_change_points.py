"""The change-point study: its synthetic histories plant what they say, and a small run of it reports its table."""

import math

import numpy as np
import pytest

from studies import gate_change_points as study


@pytest.mark.parametrize("scenario, total", [("step 1.25x", 1.25), ("step 1.10x", 1.10), ("creep 3%x5", 1.03 ** 5)])
def test_the_planted_change_is_the_difference_from_the_flat_history_of_the_same_noise(scenario, total):
    flat = np.log(study.synthetic(30, "flat", seed=4).values)
    changed = np.log(study.synthetic(30, scenario, seed=4).values)
    history = study.synthetic(30, scenario, seed=4)
    difference = changed - flat
    assert np.allclose(difference[:history.first_changed], 0)
    assert difference[-1] == pytest.approx(math.log(total))
    assert np.all(np.diff(difference) >= -1e-12)  # never back down: a step or a ramp


def test_found_counts_a_change_point_within_one_run_of_the_ramp():
    history = study.History((0.025,) * 30, 13, 17)
    assert study.found([12], history) and study.found([18], history) and not study.found([11, 19], history)


def test_a_small_run_prints_its_table(capsys):
    assert study.main(["--noise", "calm", "--histories", "2", "--no-timing"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("method  noise  planted")
    assert len([line for line in out.splitlines() if line.startswith("gate    calm ")]) == len(study.SCENARIOS) * len(
        study.LENGTHS)


def test_the_late_step_is_planted_after_two_thirds_of_the_runs():
    history = study.synthetic(30, "late step 1.10x", noise="plain5", seed=2)
    flat = study.synthetic(30, "flat", noise="plain5", seed=2)
    assert (history.first_changed, history.last_changed) == (20, 20)
    assert np.allclose(np.log(np.array(history.values) / np.array(flat.values))[20:], math.log(1.10))


@pytest.mark.parametrize("argv, message", [
    pytest.param(["--histories", "0"], "--histories must be a positive integer, got 0", id="no-histories"),
    pytest.param(["--floor", "0.9"], "--floor must be an autocorrelation in [0, 0.5], got 0.9", id="floor"),
    pytest.param(["--alpha", "1"], "--alpha must be a level in (0, 1), got 1.0", id="alpha"),
])
def test_bad_options_are_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        study.main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_the_best_split_is_where_a_clear_step_is_and_the_oracle_column_counts_it():
    history = study.synthetic(30, "late step 1.10x", noise="calm", seed=3)
    assert study.best_split(history) == 20   # calm noise (sd 0.014): a 10 % step is unmistakable
    (row,) = study.measure(noise="plain5", histories=4, lengths=(30,), scenarios=("step 1.25x",))
    expected = sum(study.found([study.best_split(study.synthetic(30, "step 1.25x", noise="plain5", seed=seed))],
                               study.synthetic(30, "step 1.25x", noise="plain5", seed=seed)) for seed in range(4))
    assert row["best_split_within_1"] == expected


def test_with_no_step_the_location_bound_is_the_chance_a_window_of_three_holds_it():
    """Nothing to see: the Bayes rule's window of 3 of the 25 allowed starts holds a uniform start 3/25 of the time."""
    assert study.location_bound(30, 1.0, 0.05, histories=4000) == pytest.approx(3 / 25, abs=0.02)


def test_the_location_bound_is_above_what_the_best_split_achieves_knowing_less():
    """The best split knows neither the levels nor the step's size, so it cannot place the step more often."""
    generator = np.random.default_rng(11)
    hits, trials = 0, 400
    for _ in range(trials):
        first = int(generator.integers(study.MIN_SEGMENT, 30 - study.MIN_SEGMENT + 1))
        logs = generator.normal(0, 0.05, 30)
        logs[first:] += math.log(1.10)
        history = study.History(tuple(np.exp(logs)), first, first)
        hits += study.found([study.best_split(history)], history)
    bound = study.location_bound(30, 1.10, 0.05, histories=2000)
    assert hits / trials < bound < 0.95   # and the 19 of 20 is above even the bound
