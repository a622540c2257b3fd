"""Change points in a benchmark's saved history: where its run values stepped, how far, how surely.

A per-pull-request gate compares one change with the runs just before it, so a slowdown that
creeps in by 3 % a merge never fails it, and after a few merges the baseline itself has moved.
Only the history shows that. This module finds the steps in one benchmark's series of run
values (each run reduced as ``check`` reduces it: its fastest round by default), oldest first.

**The method.** Detection is PELT (Killick, Fearnhead and Eckley, "Optimal detection of
changepoints with a linear computational cost", JASA 2012) with the squared-error cost on
the *log* run values, so a step is a ratio of geometric means, as everywhere in the gate. It
is ruptures' ``KernelCPD(kernel="linear")`` (Truong, Oudre and Vayatis, "Selective review of
offline change point detection methods", Signal Processing 2020), an exact penalised
segmentation in C: a thousand runs take about a millisecond. Each change point it finds is
then tested as E-divisive tests its candidates (Matteson and James, "A nonparametric approach
for multiple change point analysis of multivariate data", JASA 2014; MongoDB's
signal-processing-algorithms and Apache Otava): a permutation test within the segment between
its neighbours, whose null distribution is the *largest* split statistic of each permuted
segment, so the p-value pays for the split having been chosen. The statistic is the
standardised difference of the two sides' mean logs (the CUSUM), where E-divisive uses an
energy distance. Change points with p above :data:`ALPHA` are merged away one at a time,
weakest first, and their neighbours re-tested (Hunter's merge step: Fleming et al., "Hunter:
using change point detection to hunt for performance regressions", ICPE 2023).

Why not E-divisive itself, installed: Otava 0.8 pins ``numpy==2.2.*`` and ``scipy<1.17``
and brings BigQuery, Postgres and Slack clients; signal-processing-algorithms 2.1 needs
``numpy<2`` and Python 3.11 only, from source. Neither installs beside this project's numpy
and scipy. ruptures needs only those two.

**The parameters.**

- :data:`MIN_SEGMENT` (3): the fewest runs on each side of a change point. A single slow run,
  or two, is a neighbour on the host for seconds (docs/benchmarks-and-gate.md, "Slow outliers
  in the history"), not a merge; three runs at a new level are a step. It also means the
  baseline window after the last change point always holds at least 3 runs, and that a
  history needs ``2 × MIN_SEGMENT`` runs before anything can be found (:func:`min_runs`).
- :data:`PENALTY` (16 per change point, in units of ``noise² · log n``; the Schwarz (BIC)
  penalty for a mean shift is 2): the noise is estimated robustly, from the median absolute
  first difference of the logs, which a step does not inflate, with a floor
  (:data:`NOISE_FLOOR`) so a series of identical values is not cut at every run. Measured with
  ``python -m studies.gate_change_points`` on the gate's calm-host noise, the penalty hardly
  moves the false change points of flat histories (the permutation test and the outlier screen
  hold those); a low one splits a step into a step and a stray, and a creep into pieces: from 4
  to 16 the strays next to a 1.25× step in 30-run histories fell from 6 to 4 in 100 and those of
  a 1.10× one from 3 to 0, while 10-run histories still found a creep of 3 % a run in 75 of
  100 (62 at 20).
- :data:`ALPHA` (0.05) and :data:`PERMUTATIONS` (999, seeded): the permutation test's level
  and resolution (its smallest p is 1/1000). At 0.01 no step could be found in 10 runs (once the
  split's choice is paid for, 5 runs against 5 barely reach it) and flat histories gave none;
  at 0.05, 83 of 100 10-run histories showed a 1.25× step, and 1–4 of 100 flat histories of 10,
  30 or 100 runs a false change point (the target is 1 in 20). A false one costs ``check`` only
  baseline runs (its window starts there), never a false alarm.
- No window: the whole series given is segmented at once (Otava's sliding window of 50 runs
  serves streams of tens of thousands of points; the gate's histories are hundreds). Limit the
  runs with the history command's options instead.
- Slow outlier runs are set aside first (:func:`isolated_slow_runs`): a run slower than the
  median of the runs on *each* side of it by the gate's outlier rule
  (:func:`accounting.gate.stats.slow_outliers`). A step is not above the runs after it, so it
  is never screened; a lone slow process is above both sides.

>>> series = [0.0250, 0.0252, 0.0249, 0.0251, 0.0250, 0.0253, 0.0249, 0.0251,
...           0.0312, 0.0314, 0.0311, 0.0313, 0.0312, 0.0315, 0.0311, 0.0313]
>>> found = detect(series)
>>> [(point.index, round(point.ratio, 2), point.p_value <= ALPHA) for point in found.change_points]
[(8, 1.25, True)]
>>> detect([0.025] * 5).change_points
Traceback (most recent call last):
...
accounting.gate.changepoints.TooFewRuns: change-point detection needs at least 6 runs (3 on each side of a change), got 5
"""

import itertools
import math
from dataclasses import dataclass

import numpy as np

from accounting.errors import AccountingError
from accounting.gate.stats import CONFIDENCE, OUTLIER_SPREADS, ratio_interval

MIN_SEGMENT = 3
"""Fewest runs on each side of a change point (and in the baseline window after the last one)."""
PENALTY = 16.0
"""PELT's cost of one more change point, in units of ``noise² · log(runs)`` (BIC's is 2)."""
NOISE_FLOOR = 0.002
"""Smallest run-to-run noise (sd of log values) assumed: 0.2 %, below any measured CPU or GPU history."""
ALPHA = 0.05
"""A change point stays when its permutation p-value is at most this."""
PERMUTATIONS = 999
"""Permutations per test; the smallest p is ``1 / (PERMUTATIONS + 1)``."""
SEED = 0
"""The permutations come from a seeded generator, so the same history gives the same answer."""
SCREEN_NEIGHBOURS = 3
"""Runs on each side whose median a run is compared with when screening slow outliers."""


class TooFewRuns(AccountingError):
    """A series shorter than :func:`min_runs`: nothing can be looked for in it (the message says how many)."""


def min_runs(min_segment: int = MIN_SEGMENT) -> int:
    """The fewest runs in which a change point can be found: ``min_segment`` on each side.

    >>> min_runs()
    6
    """
    return 2 * min_segment


@dataclass(frozen=True)
class ChangePoint:
    """One step in a series: ``index`` is the first run after it (0-based, among the runs given)."""

    index: int
    ratio: float
    """Level after / level before (geometric means of the two segments' kept runs): 1.25 is 25 % slower."""
    low: float
    high: float
    """The ratio's t interval (:func:`accounting.gate.stats.ratio_interval`, at ``confidence``)."""
    p_value: float
    """Permutation p-value of the step within its neighbours' segment (two-sided; see the module docstring)."""
    runs_before: int
    runs_after: int
    """Kept runs in the segments either side (slow outliers not counted)."""
    confidence: float = CONFIDENCE


@dataclass(frozen=True)
class Detection:
    """What :func:`detect` found in one series."""

    change_points: tuple
    """:class:`ChangePoint`, oldest first."""
    levels: tuple
    """``(first index, end index, level)`` of each segment: its runs' geometric mean (seconds)."""
    outliers: tuple
    """Indices of the runs set aside as slow outliers before detection."""
    noise: float
    """The robust run-to-run noise the penalty was scaled by (sd of log values)."""


def _check_values(values) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise AccountingError(f"run values must be a list of positive, finite seconds, got {values!r}")
    return array


def isolated_slow_runs(logs, *, threshold: float, neighbours: int = SCREEN_NEIGHBOURS) -> list[int]:
    """Indices of runs slower than the runs on *both* sides of them by the gate's outlier rule.

    A run is set aside when its log value exceeds the median of the ``neighbours`` runs before it
    and the median of the ``neighbours`` runs after it each by more than ``max(log(1 + threshold),
    OUTLIER_SPREADS × robust spread)``, the spread being 1.4826 × the median absolute first
    difference of the logs over √2. The first and last runs have one side only and are judged on it.
    It is repeated without the runs found, until none is found: in a run of three slow ones the
    middle one is found first, then the two ends (a slow episode of the host, not a merge).

    >>> logs = np.log([0.025, 0.0251, 0.0249, 0.035, 0.025, 0.0252, 0.0312, 0.0311, 0.0313, 0.0312])
    >>> isolated_slow_runs(logs, threshold=0.1)   # the 1.4x run, not the step at 6
    [3]
    """
    logs = np.asarray(logs, dtype=float)
    if logs.size < 2 * neighbours + 1:
        return []
    limit = max(math.log1p(threshold), OUTLIER_SPREADS * _noise(logs))
    slow = set()
    while True:  # again without those found: the two ends of a run of three slow ones hide behind the middle one
        kept = [index for index in range(logs.size) if index not in slow]
        found = set()
        for position, index in enumerate(kept):
            sides = [logs[kept[max(0, position - neighbours):position]],
                     logs[kept[position + 1:position + 1 + neighbours]]]
            sides = [side for side in sides if side.size]
            if all(logs[index] - float(np.median(side)) > limit for side in sides):
                found.add(index)
        if not found or len(kept) - len(found) < 2 * neighbours + 1:
            return sorted(slow | found) if len(kept) - len(found) >= 2 * neighbours + 1 else sorted(slow)
        slow |= found


def _noise(logs: np.ndarray) -> float:
    """Robust sd of the logs from their first differences (a step moves one difference, not the median)."""
    if logs.size < 3:
        return NOISE_FLOOR
    return max(NOISE_FLOOR, 1.4826 * float(np.median(np.abs(np.diff(logs)))) / math.sqrt(2))


def _split_statistics(segment: np.ndarray, min_segment: int) -> np.ndarray:
    """|standardised mean difference| of every split of ``segment`` (rows: permutations) leaving
    ``min_segment`` on each side; column ``j`` is the split before position ``min_segment + j``."""
    size = segment.shape[-1]
    sums = np.cumsum(segment, axis=-1)
    total = sums[..., -1:]
    left = np.arange(min_segment, size - min_segment + 1)
    before = sums[..., left - 1]
    difference = before / left - (total - before) / (size - left)
    return np.abs(difference) * np.sqrt(left * (size - left) / size)


def split_p_value(segment, split: int, *, min_segment: int = MIN_SEGMENT, permutations: int = PERMUTATIONS,
                  seed: int = SEED) -> float:
    """Permutation p-value of a step before position ``split`` of ``segment`` (log values).

    The observed statistic is the split's standardised mean difference; each permutation
    contributes its *largest* one over every allowed split, so choosing the split from the data
    is paid for (E-divisive's test). ``(1 + as large) / (1 + permutations)``.

    >>> round(split_p_value([0.0, 0.01, -0.01, 0.0, 0.2, 0.21, 0.19, 0.2], 4), 3)  # exactly: 2 of 70 orders
    0.021
    """
    segment = np.asarray(segment, dtype=float)
    scale = float(np.std(segment)) or 1.0
    centred = (segment - segment.mean()) / scale  # the statistic is invariant to it; keeps sums exact
    observed = float(_split_statistics(centred, min_segment)[split - min_segment])
    generator = np.random.default_rng(seed)
    shuffled = generator.permuted(np.tile(centred, (permutations, 1)), axis=1)
    largest = _split_statistics(shuffled, min_segment).max(axis=1)
    tolerance = 1e-9 * max(1.0, observed)
    return (1 + int(np.count_nonzero(largest >= observed - tolerance))) / (1 + permutations)


def detect(values, *, threshold: float = 0.10, alpha: float = ALPHA, min_segment: int = MIN_SEGMENT,
           penalty: float = PENALTY, permutations: int = PERMUTATIONS, seed: int = SEED,
           confidence: float = CONFIDENCE) -> Detection:
    """The change points of one series of run values (seconds, oldest first); see the module docstring.

    ``threshold``: the regression threshold (a fraction), the least a slow outlier run must exceed
    its neighbours by. An error, naming the count, when there are fewer than ``2 × min_segment``
    runs after slow outliers are set aside.
    """
    import ruptures  # deferred: start-up cost (about 0.8 s, scipy.linalg); only a history needs it

    array = _check_values(values)
    logs_all = np.log(array)
    outliers = isolated_slow_runs(logs_all, threshold=threshold)
    kept = np.array([index for index in range(array.size) if index not in set(outliers)], dtype=int)
    needed = min_runs(min_segment)
    if kept.size < needed:
        set_aside = f" ({len(outliers)} slow outlier run(s) set aside)" if outliers else ""
        raise TooFewRuns(f"change-point detection needs at least {needed} runs ({min_segment} on each side of a "
                              f"change), got {kept.size}{set_aside}")
    logs = logs_all[kept]
    noise = _noise(logs)
    cost = penalty * noise ** 2 * math.log(logs.size)
    ends = ruptures.KernelCPD(kernel="linear", min_size=min_segment, jump=1).fit(logs).predict(pen=cost)
    splits = [int(end) for end in ends[:-1]]
    tested = _tested(logs, splits, min_segment, permutations, seed)
    while tested and max(p for _, p in tested) > alpha:
        weakest = max(range(len(tested)), key=lambda position: tested[position][1])
        splits.pop(weakest)
        tested = _tested(logs, splits, min_segment, permutations, seed)
    bounds = [0, *splits, logs.size]
    points = []
    for position, (split, p_value) in enumerate(tested):
        before = array[kept[bounds[position]:split]]
        after = array[kept[split:bounds[position + 2]]]
        interval = ratio_interval(before, after, confidence=confidence)
        points.append(ChangePoint(int(kept[split]), interval.ratio, interval.low, interval.high, p_value,
                                  before.size, after.size, confidence))
    levels = []
    for start, stop in itertools.pairwise(bounds):
        first = int(kept[start])
        end = int(kept[stop]) if stop < kept.size else int(array.size)
        levels.append((first, end, float(np.exp(logs[start:stop].mean()))))
    return Detection(tuple(points), tuple(levels), tuple(outliers), noise)


def _tested(logs, splits, min_segment, permutations, seed) -> list:
    """``(split, p-value)`` of each split, each tested within the segment between its neighbours."""
    bounds = [0, *splits, logs.size]
    return [(split, split_p_value(logs[bounds[position]:bounds[position + 2]], split - bounds[position],
                                  min_segment=min_segment, permutations=permutations, seed=seed))
            for position, split in enumerate(splits)]
