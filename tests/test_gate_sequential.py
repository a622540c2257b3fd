"""The sequential A/B test holds its stated α over every look: checked by simulation on synthetic jobs drawn from
recorded runs (tests/data), against the fixed-level test repeated after every pair, which does not; the closed
test across a matrix; the budget's parsing and round prediction; ``gate check --budget`` on a loaded machine."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from accounting.errors import AccountingError
from accounting.gate.budget import RoundClock, parse_budget, plan
from accounting.gate.levels import ALPHA
from accounting.gate.sequential import closed_pvalues, confidence_sequence, decide, wealth

DATA = Path(__file__).resolve().parent / "data"
JOBS = 2000
LOOKS = 60
THRESHOLD = 0.05


def recorded_series() -> list:
    """Every recorded benchmark's rounds in time order, as log values less their median: the noise of unchanged
    code on the 2-vCPU VM (three processes of the CPU quick shape) and on the H200 (the gate's saved runs and the
    GPU suite's run), each a series of its own."""
    files = [*sorted((DATA / "saved-before-layering").glob("*.json")),
             *sorted((DATA / "hosts" / "nvidia-h200" / "gate-storage").glob("*.json")),
             DATA / "hosts" / "nvidia-h200" / "pytest-gpu.json"]
    series = []
    for path in files:
        for bench in json.loads(path.read_text())["benchmarks"]:
            rounds = np.log(np.asarray(bench["stats"].get("data") or [], dtype=float))
            if rounds.size >= 20:
                series.append(rounds - np.median(rounds))
    return series


def recorded_sequence() -> np.ndarray:
    """The 2-vCPU VM's three recorded processes' rounds one after another, in time order (188 rounds, saved seconds
    apart): a stretch of the host's own drift and slow spells."""
    files = sorted((DATA / "saved-before-layering").glob("*.json"))
    rounds = [np.log(np.asarray(bench["stats"]["data"], dtype=float))
              for path in files for bench in json.loads(path.read_text())["benchmarks"]]
    return np.concatenate([values - np.median(values) for values in rounds])


def synthetic_jobs(generator, *, in_order: bool, looks: int = LOOKS) -> np.ndarray:
    """``JOBS`` unchanged jobs of ``looks`` pairs. Resampled (``in_order=False``): each draws its run values from one
    recorded series. In order: each is a window of consecutive recorded rounds (no wrapping round), keeping the
    host's drift and slow spells, A and B alternating first in each pair as the gate runs them. Returns their log
    ratios (B − A)."""
    series = recorded_series()
    sequence = recorded_sequence()
    ratios = np.empty((JOBS, looks))
    a_first = np.arange(1, looks + 1) % 2 == 1
    for job in range(JOBS):
        if in_order:
            start = generator.integers(sequence.size - 2 * looks + 1)
            runs = sequence[start:start + 2 * looks]
        else:
            runs = generator.choice(series[generator.integers(len(series))], size=2 * looks)
        first, second = runs[0::2], runs[1::2]
        ratios[job] = np.where(a_first, second - first, first - second)
    return ratios


def binomial_margin(rate: float, jobs: int) -> float:
    """Three binomial standard deviations of a rate estimated over ``jobs``."""
    return 3 * math.sqrt(rate * (1 - rate) / jobs)


def convicted(ratios, centre) -> np.ndarray:
    """At each look, whether the verdict's two bets both hold: slower at all at α, beyond ``centre`` at 10 %."""
    from accounting.gate.sequential import FUTILITY_LEVEL

    return (wealth(ratios, 0.0) >= 1 / ALPHA) & (wealth(ratios, centre) >= 1 / FUTILITY_LEVEL)


@pytest.mark.parametrize("in_order", [False, True])
def test_false_alarms_over_every_look_stay_within_alpha_on_recorded_noise(in_order):
    """Unchanged code convicted at most α of the time, though the test looks after every one of 60 pairs; the
    fixed-level test repeated at each look does not hold it."""
    looks = 40 if in_order else LOOKS  # windows of 80 consecutive rounds: 109 distinct ones in the recorded 188
    ratios = synthetic_jobs(np.random.default_rng(7), in_order=in_order, looks=looks)
    assert len(recorded_series()) >= 10 and ratios.shape == (JOBS, looks) and JOBS >= 1000
    alarms = (wealth(ratios, 0.0) >= 1 / ALPHA).any(axis=1).mean()
    assert alarms <= ALPHA + binomial_margin(ALPHA, JOBS)
    # The same jobs judged by a one-sided t test at p <= α after every pair from the third: many more alarms.
    counts = np.arange(1, looks + 1)
    means = np.cumsum(ratios, axis=1) / counts
    squares = np.cumsum(ratios ** 2, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        spread = np.sqrt((squares - counts * means ** 2) / (counts - 1))
        t = means / (spread / np.sqrt(counts))
    critical = scipy_stats.t.ppf(1 - ALPHA, np.maximum(counts - 1, 1))
    naive = (np.nan_to_num(t, nan=-np.inf)[:, 2:] >= critical[2:]).any(axis=1).mean()
    assert naive > ALPHA + binomial_margin(ALPHA, JOBS)


def test_a_slowdown_exactly_at_the_threshold_is_convicted_at_most_one_time_in_ten():
    """The size condition: B slowed by exactly the threshold (the hardest case of "not beyond it") convicted at most
    :data:`FUTILITY_LEVEL` of the time over 60 looks, though it is surely slower at all."""
    from accounting.gate.sequential import FUTILITY_LEVEL

    centre = math.log1p(THRESHOLD)
    ratios = synthetic_jobs(np.random.default_rng(17), in_order=False) + centre
    rate = convicted(ratios, centre).any(axis=1).mean()
    assert rate <= FUTILITY_LEVEL + binomial_margin(FUTILITY_LEVEL, JOBS)
    assert (wealth(ratios, 0.0) >= 1 / ALPHA).any(axis=1).mean() > 2 * FUTILITY_LEVEL  # the size held it back


def test_a_matrix_holds_alpha_family_wise_with_the_closed_test():
    """Four unchanged benchmarks per job, their noise drawn independently (the hardest case for sharing nothing):
    the closed test rejects a true null only when the average of all four e-processes reaches 1/α."""
    generator = np.random.default_rng(11)
    matrix = np.stack([synthetic_jobs(generator, in_order=False) for _ in range(4)])
    paths = wealth(matrix, 0.0)
    alarms = (paths.mean(axis=0) >= 1 / ALPHA).any(axis=1).mean()
    assert alarms <= ALPHA + binomial_margin(ALPHA, JOBS)
    # Each benchmark alone, with no price for the matrix, alarms more often in some job than the family may.
    alone = (paths >= 1 / ALPHA).any(axis=2).any(axis=0).mean()
    assert alone >= alarms


def test_the_recorded_noise_still_lets_a_slowdown_of_twice_the_threshold_be_convicted():
    centre = math.log1p(THRESHOLD)
    ratios = synthetic_jobs(np.random.default_rng(3), in_order=False) + 2 * centre
    assert convicted(ratios, centre).any(axis=1).mean() >= 0.5  # α is not held by never convicting


def test_the_closed_test_matches_an_exhaustive_search_over_every_set():
    from itertools import combinations

    generator = np.random.default_rng(5)
    for _ in range(30):
        values = list(generator.lognormal(3.0, 2.0, size=5))
        for index, p in enumerate(closed_pvalues(values)):
            smallest = min(sum(values[j] for j in subset) / len(subset) for size in range(1, 6)
                           for subset in combinations(range(5), size) if index in subset)
            assert p == pytest.approx(1.0 if smallest <= 1 else min(1.0, 1 / smallest))


def test_decisions_stand_once_made_and_the_interval_agrees_with_them():
    clear = [(number, math.log(1.0) + 0.01 * (-1) ** number) for number in range(1, 20)]
    figures = decide({"mm": clear}, {"mm": 0.05})["mm"]
    assert figures.decision == "no change" and figures.high < 1.05
    low, high = confidence_sequence([value for _, value in clear[:figures.pairs - 1]])
    assert math.exp(high) >= 1.05  # one pair fewer had not cleared it: the stop came at the first look it could


@pytest.mark.parametrize("text, seconds", [("600", 600.0), ("600s", 600.0), ("10m", 600.0), ("0.5h", 1800.0)])
def test_a_budget_is_read_in_seconds_minutes_or_hours(text, seconds):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["0", "-5m", "ten", "10x", ""])
def test_a_bad_budget_is_an_error_naming_it(text):
    with pytest.raises(AccountingError, match=f"got {text!r}"):
        parse_budget(text)


def test_the_next_round_is_predicted_from_measured_rounds_of_its_size():
    clock = RoundClock()
    clock.add(16, 95.0)  # the first round also collected the suite
    clock.add(16, 60.0)
    assert clock.predict(3) == 60.0  # not measured yet: a smaller round costs at most what a larger one did
    clock.add(3, 14.0)
    assert clock.predict(3) == 14.0 and clock.fits(3, 580.0, 600.0) and not clock.fits(3, 590.0, 600.0)


def test_a_plan_names_a_budget_that_would_cover_what_the_threshold_needs():
    tight = plan(0.06, 0.05, seconds_per_pair=10.0, budget_s=120.0, used_s=30.0)
    assert not tight.fits and tight.pairs is not None
    assert tight.budget_needed_s == pytest.approx(30.0 + tight.pairs * 10.0)
    wide = plan(0.06, 0.05, seconds_per_pair=10.0, budget_s=tight.budget_needed_s, used_s=30.0)
    assert wide.fits and f"--budget {math.ceil(tight.budget_needed_s / 60)}m" in tight.text()


def test_the_verdict_replays_the_looks_as_the_vectorised_test_does():
    """``decide`` on one benchmark: a regression exactly when its two bets hold (1/α against no change, 1/level
    against the threshold) before the futility bet reaches 1/level (a decision, once made, stands), on 120 jobs of 30 pairs from the recorded noise, half unchanged and half
    slowed by twice the threshold."""
    from accounting.gate.sequential import FUTILITY_LEVEL

    centre = math.log1p(THRESHOLD)
    ratios = synthetic_jobs(np.random.default_rng(13), in_order=False)[:120, :30]
    ratios[60:] += 2 * centre
    slower = convicted(ratios, centre)
    same = wealth(ratios, centre, direction=-1) >= 1 / FUTILITY_LEVEL
    first_slower = np.where(slower.any(axis=1), slower.argmax(axis=1), 99)
    first_same = np.where(same.any(axis=1), same.argmax(axis=1), 99)
    expected = np.where(first_slower < first_same, "regression", np.where(first_same < 99, "no change", "inconclusive"))
    found = [decide({"mm": list(enumerate(row, start=1))}, {"mm": THRESHOLD})["mm"].decision for row in ratios]
    assert found == expected.tolist() and {"regression", "no change"} <= set(found)
