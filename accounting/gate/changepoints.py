"""Change points in a benchmark's saved history: where its run values stepped, how far, how surely.

A per-pull-request gate compares one change with the runs just before it, so a slowdown that
creeps in by 3 % a merge never fails it, and after a few merges the baseline itself has moved.
Only the history shows that. This module finds the steps in one benchmark's series of run
values (each run reduced as ``check`` reduces it: its fastest round by default), oldest first.

**The method: binary segmentation, each split permutation-tested** (E-divisive's scheme:
Matteson and James, "A nonparametric approach for multiple change point analysis of
multivariate data", JASA 2014; MongoDB's signal-processing-algorithms and Apache Otava), in
numpy alone. On the *log* run values (so a step is a ratio of geometric means, as everywhere
in the gate): the split of the whole series with the largest standardised difference of the
two sides' mean logs (the CUSUM statistic, where E-divisive uses an energy distance) is
tested by permutation, its null distribution being the *largest* split statistic of each
permuted series, so the p-value pays for the split having been chosen from the data. A split
with ``p ≤ ALPHA`` is kept and each side is searched the same way, until no side holds one.
Then every kept split is re-tested within the segment between its neighbours, and those with
p above :data:`ALPHA` are merged away one at a time, weakest first (Hunter's merge step:
Fleming et al., "Hunter: using change point detection to hunt for performance regressions",
ICPE 2023).

Why not a penalised segmentation (PELT) first, as before: its penalty has to be set against
false change points of flat histories, and one high enough for that (16 × noise² × log n)
hid every 10 % step in a history whose runs spread by 5 % (the penalty's cost exceeds the
step's gain in fit at any split), though a two-sample t test on the same runs gives t ≈ 4.9.
The permutation test already holds the false change points, so the penalty only cost
detection. Measured side by side with ruptures' PELT and binary segmentation, other costs
included: ``python -m studies.gate_change_points --compare`` (docs/benchmarks-and-gate.md).
Why not E-divisive itself, installed: Otava 0.8 pins ``numpy==2.2.*`` and ``scipy<1.17`` and
brings BigQuery, Postgres and Slack clients; signal-processing-algorithms 2.1 needs
``numpy<2``. And numpy alone means the gate needs no other package on a GPU machine.

**The parameters.**

- :data:`MIN_SEGMENT` (3): the fewest runs on each side of a change point. A single slow run,
  or two, is a neighbour on the host for seconds (docs/benchmarks-and-gate.md, "Slow outliers
  in the history"), not a merge; three runs at a new level are a step. It also means the
  baseline window after the last change point always holds at least 3 runs, and that a
  history needs ``2 × MIN_SEGMENT`` runs before anything can be found (:func:`min_runs`).
- :data:`ALPHA` (0.03) and :data:`PERMUTATIONS` (999, seeded): the permutation test's level
  and resolution (its smallest p is 1/1000). A permutation test assumes exchangeable runs, and a
  shared host's are not quite: consecutive runs correlate. So each observed statistic is first
  read as it would be on independent runs: as a two-sample t at its split, divided by
  ``sqrt((1 + ρ)/(1 − ρ))`` (the variance a lag-1 autocorrelation ρ adds to a segment's mean),
  ρ the runs' own estimate about the pieces' means, at least :data:`MIN_AUTOCORRELATION` (0.28,
  the largest measured). The level and the floor were chosen together against flat histories of
  the calm-host model (the table under :data:`MIN_AUTOCORRELATION`): 1 of 40 flat 30-run histories
  with a false change point (the target is 1 in 20), and ten runs still enough to show a 1.25× step
  (5 against 5: the smallest p of the chosen split is about 2/252).
- No window: the whole series given is segmented at once (Otava's sliding window of 50 runs
  serves streams of tens of thousands of points; the gate's histories are hundreds). Limit the
  runs with the history command's options instead.
- Slow outlier runs are set aside first (:func:`isolated_slow_runs`): a run slower than the
  median of the runs on *each* side of it by the gate's outlier rule
  (:func:`accounting.gate.stats.slow_outliers`). A step is not above the runs after it, so it
  is never screened; a lone slow process is above both sides.

**What it could have found** (:func:`detectable_step`): the smallest step, at the middle of the
runs, found with 95 % power given their noise ``σ``. The split statistic, scaled by the whole
series' spread, is a monotone function of the two-sample t statistic at that split
(``t = C · sqrt((n − 2) / (n − C²))``), so the test's critical value ``c`` (the ``1 − ALPHA``
quantile of the largest split statistic of ``n`` independent normal values, by seeded
simulation) is a t of ``c' = c · sqrt((n − 2) / (n − c²))``; the autocorrelation correction
divides the observed t by ``f = sqrt((1 + ρ)/(1 − ρ))`` (ρ at least :data:`MIN_AUTOCORRELATION`), and a
step of ``log r`` at the middle gives ``t ≈ √n/2 · log r / σ``. Found with 95 % power:
``log r = 2σ (f c' + z₀.₉₅) / √n``. A step nearer an end, with fewer runs on one side, needs more.

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
NOISE_FLOOR = 0.002
"""Smallest run-to-run noise (sd of log values) assumed: 0.2 %, below any measured CPU or GPU history."""
ALPHA = 0.03
"""A change point stays when its permutation p-value is at most this."""
POWER = 0.95
"""The chance of finding a step that :func:`detectable_step` quotes."""
BUMP_LIMIT = 120
"""Segments of up to this many runs are also searched for a level that rises and returns (:func:`bump_p_value`),
where no single split passes; its cost grows with the square of the runs (longer series are split by single
steps first, which leaves their bumps in shorter pieces)."""
PERMUTATIONS = 999
"""Permutations per test; the smallest p is ``1 / (PERMUTATIONS + 1)``."""
SEED = 0
"""The permutations come from a seeded generator, so the same history gives the same answer."""
MIN_AUTOCORRELATION = 0.28
"""The least lag-1 autocorrelation of consecutive runs the tests assume, whatever the runs' own estimate says.

A shared host's runs are not independent: a slow or fast spell lasts several processes (lag-1
autocorrelations of 0.28, 0.11 and −0.11 measured in three busy hours on the 2-vCPU VM; this is the
largest). An estimate from 30 runs is rough and biased low: with it alone 4 of 40 flat 30-run
histories of the calm-host model had a false change point even at p ≤ 0.01. Measured with
``python -m studies.gate_change_points --noise calm --noise plain5 --runs 10 --runs 30 --histories 40
--alpha A --floor F`` (the rows below are three of its cells; docs/benchmarks-and-gate.md):

- p ≤ 0.01, floor 0.15: flat calm 30-run histories with a false change point 1; a 1.10× step in 30 runs of
  5 % noise found within a run 21 (late step: 17); a 1.25× step in 10 calm runs 17 (1999 permutations);
- p ≤ 0.05, floor 0.15: 9; 32 (26); 33;
- p ≤ 0.05, floor 0.28: 3; 30 (20); 33;
- p ≤ 0.03, floor 0.28: 1; 23 (15); 32 (the settings chosen);
- p ≤ 0.05, floor 0.40: 1; 17 (13); 33.
"""
MAX_AUTOCORRELATION = 0.5
"""The largest lag-1 autocorrelation of the runs the tests correct for (an estimate from tens of runs is rough)."""
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
    """The robust run-to-run noise of the kept runs (sd of log values, from their first differences)."""


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


def split_statistics(segment: np.ndarray, min_segment: int) -> np.ndarray:
    """|standardised mean difference| of every split of ``segment`` (rows: permutations) leaving
    ``min_segment`` on each side; column ``j`` is the split before position ``min_segment + j``."""
    size = segment.shape[-1]
    sums = np.cumsum(segment, axis=-1)
    total = sums[..., -1:]
    left = np.arange(min_segment, size - min_segment + 1)
    before = sums[..., left - 1]
    difference = before / left - (total - before) / (size - left)
    return np.abs(difference) * np.sqrt(left * (size - left) / size)


def _autocorrelation(segment: np.ndarray, splits, floor: float = MIN_AUTOCORRELATION) -> float:
    """Lag-1 autocorrelation of ``segment`` about the means of its pieces (cut at ``splits``), within
    [``floor``, :data:`MAX_AUTOCORRELATION`]: the part of the runs' correlation that the step itself does not explain."""
    bounds = [0, *splits, segment.size]
    residuals = np.concatenate([segment[start:stop] - segment[start:stop].mean()
                                for start, stop in itertools.pairwise(bounds)])
    squares = float((residuals ** 2).sum())
    if squares == 0:
        return floor
    return min(MAX_AUTOCORRELATION, max(floor, float((residuals[1:] * residuals[:-1]).sum()) / squares))


def _deflated(statistic: float, size: int, rho: float) -> float:
    """``statistic`` (a split statistic on standardised values) as it would read on independent runs.

    It is a monotone function of the two-sample t at its split, ``C = t · sqrt(n / (n − 2 + t²))``;
    runs with lag-1 autocorrelation ρ inflate the variance of a segment mean by about ``(1 + ρ)/(1 − ρ)``,
    so t is divided by the square root of that and turned back into C, which the permutation null
    (independent orders) is then fair to.
    """
    if rho <= 0 or statistic <= 0:
        return statistic
    ratio = min(statistic ** 2 / size, 1 - 1e-12)
    t = math.sqrt((size - 2) * ratio / (1 - ratio)) * math.sqrt((1 - rho) / (1 + rho))
    return t * math.sqrt(size / (size - 2 + t ** 2))


def split_p_value(segment, split: int, *, min_segment: int = MIN_SEGMENT, permutations: int = PERMUTATIONS,
                  seed: int = SEED, autocorrelation: float | None = None, floor: float = MIN_AUTOCORRELATION) -> float:
    """Permutation p-value of a step before position ``split`` of ``segment`` (log values).

    The observed statistic is the split's standardised mean difference; each permutation
    contributes its *largest* one over every allowed split, so choosing the split from the data
    is paid for (E-divisive's test). ``(1 + as large) / (1 + permutations)``. The observed statistic
    is first read as on independent runs (:func:`_deflated`), at ``autocorrelation`` or, by default, the
    runs' own estimate, at least ``floor``; ``autocorrelation=0`` tests the plain statistic.

    >>> segment = [0.0, 0.01, -0.01, 0.0, 0.2, 0.21, 0.19, 0.2]
    >>> round(split_p_value(segment, 4, autocorrelation=0), 3)  # exactly 2 of 70 orders, 0.029; 999 drawn
    0.021
    >>> round(split_p_value(segment, 4), 3)  # read as on correlated runs: a step this clear stays the extreme one
    0.021
    """
    segment = np.asarray(segment, dtype=float)
    scale = float(np.std(segment)) or 1.0
    centred = (segment - segment.mean()) / scale  # the statistic is invariant to it; keeps sums exact
    observed = float(split_statistics(centred, min_segment)[split - min_segment])
    rho = _autocorrelation(segment, (split,), floor) if autocorrelation is None else autocorrelation
    observed = _deflated(observed, segment.size, rho)
    generator = np.random.default_rng(seed)
    shuffled = generator.permuted(np.tile(centred, (permutations, 1)), axis=1)
    largest = split_statistics(shuffled, min_segment).max(axis=1)
    tolerance = 1e-9 * max(1.0, observed)
    return (1 + int(np.count_nonzero(largest >= observed - tolerance))) / (1 + permutations)


def _bump_statistics(segment: np.ndarray, min_segment: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """|standardised difference| of the runs inside ``[i, j)`` and the rest, for every ``i < j`` leaving
    ``min_segment`` runs inside and on each side (rows: permutations), with the ``i`` and ``j`` of each column."""
    size = segment.shape[-1]
    sums = np.concatenate([np.zeros(segment.shape[:-1] + (1,)), np.cumsum(segment, axis=-1)], axis=-1)
    first, end = np.triu_indices(size + 1, k=min_segment)
    keep = (first >= min_segment) & (end <= size - min_segment)
    first, end = first[keep], end[keep]
    inside = end - first
    total = sums[..., -1:]
    difference = sums[..., end] - sums[..., first] - inside * total / size
    return np.abs(difference) / np.sqrt(inside * (size - inside) / size), first, end


def bump_p_value(segment, first: int, end: int, *, min_segment: int = MIN_SEGMENT, permutations: int = PERMUTATIONS,
                 seed: int = SEED, autocorrelation: float | None = None, floor: float = MIN_AUTOCORRELATION,
                 chunk: int = 200) -> float:
    """Permutation p-value of a level change over ``segment[first:end]`` and back (two change points at once).

    The statistic is that of circular binary segmentation (Olshen et al., "Circular binary segmentation for the
    analysis of array-based DNA copy number data", Biostatistics 2004): the standardised difference between the
    runs inside and outside, its null the *largest* over every such pair of each permuted segment. A single split
    cannot see a level that rises and returns in the middle of a series (either split alone compares it with a
    mixture of both levels); this can. ``autocorrelation``: as in :func:`split_p_value`.

    >>> bump = [0.0, 0.01, -0.01, 0.2, 0.21, 0.19, 0.0, 0.01, -0.01]
    >>> round(bump_p_value(bump, 3, 6, autocorrelation=0), 3)   # exactly 1/84
    0.012
    """
    segment = np.asarray(segment, dtype=float)
    scale = float(np.std(segment)) or 1.0
    centred = (segment - segment.mean()) / scale
    statistics, firsts, ends = _bump_statistics(centred, min_segment)
    position = np.flatnonzero((firsts == first) & (ends == end))
    if position.size == 0:
        raise AccountingError(f"[{first}, {end}) is not a bump of at least {min_segment} runs with {min_segment} on "
                              f"each side in a segment of {segment.size}")
    rho = _autocorrelation(segment, (first, end), floor) if autocorrelation is None else autocorrelation
    observed = _deflated(float(statistics[position[0]]), segment.size, rho)
    generator = np.random.default_rng(seed)
    tolerance = 1e-9 * max(1.0, observed)
    reached = 0
    for start in range(0, permutations, chunk):
        shuffled = generator.permuted(np.tile(centred, (min(chunk, permutations - start), 1)), axis=1)
        reached += int(np.count_nonzero(_bump_statistics(shuffled, min_segment)[0].max(axis=1) >= observed - tolerance))
    return (1 + reached) / (1 + permutations)


def _segment(logs: np.ndarray, start: int, stop: int, *, alpha: float, min_segment: int, permutations: int,
             seed: int, floor: float) -> list[int]:
    """Binary segmentation of ``logs[start:stop]``: the best split if it passes its permutation test, else the best
    bump (up to :data:`BUMP_LIMIT` runs) if that passes; then each piece the same way."""
    if stop - start < 2 * min_segment:
        return []
    segment = logs[start:stop]
    centred = (segment - segment.mean()) / (float(np.std(segment)) or 1.0)
    options = dict(alpha=alpha, min_segment=min_segment, permutations=permutations, seed=seed, floor=floor)
    split = min_segment + int(np.argmax(split_statistics(centred, min_segment)))
    tests = dict(min_segment=min_segment, permutations=permutations, seed=seed, floor=floor)
    if split_p_value(segment, split, **tests) <= alpha:
        return [*_segment(logs, start, start + split, **options), start + split,
                *_segment(logs, start + split, stop, **options)]
    if not 3 * min_segment <= segment.size <= BUMP_LIMIT:
        return []
    statistics, firsts, ends = _bump_statistics(centred, min_segment)
    best = int(np.argmax(statistics))
    first, end = int(firsts[best]), int(ends[best])
    if bump_p_value(segment, first, end, **tests) > alpha:
        return []
    return [*_segment(logs, start, start + first, **options), start + first,
            *_segment(logs, start + first, start + end, **options), start + end,
            *_segment(logs, start + end, stop, **options)]


def detect(values, *, threshold: float = 0.10, alpha: float = ALPHA, min_segment: int = MIN_SEGMENT,
           permutations: int = PERMUTATIONS, seed: int = SEED, confidence: float = CONFIDENCE,
           floor: float = MIN_AUTOCORRELATION) -> Detection:
    """The change points of one series of run values (seconds, oldest first); see the module docstring.

    ``threshold``: the regression threshold (a fraction), the least a slow outlier run must exceed
    its neighbours by. ``floor``: the least lag-1 autocorrelation of the runs assumed
    (:data:`MIN_AUTOCORRELATION`). An error, naming the count, when there are fewer than
    ``2 × min_segment`` runs after slow outliers are set aside.
    """
    if not 0 <= floor <= MAX_AUTOCORRELATION:
        raise AccountingError(f"floor must be an autocorrelation in [0, {MAX_AUTOCORRELATION:g}], got {floor!r}")
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
    splits = _segment(logs, 0, logs.size, alpha=alpha, min_segment=min_segment, permutations=permutations, seed=seed,
                      floor=floor)
    tested = _tested(logs, splits, min_segment, permutations, seed, floor)
    while tested and max(p for _, p in tested) > alpha:
        weakest = max(range(len(tested)), key=lambda position: tested[position][1])
        splits.pop(weakest)
        tested = _tested(logs, splits, min_segment, permutations, seed, floor)
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


def critical_value(runs: int, *, alpha: float = ALPHA, min_segment: int = MIN_SEGMENT, draws: int = 4000,
                   seed: int = SEED) -> float:
    """The ``1 − alpha`` quantile of the largest split statistic of ``runs`` independent normal values (seeded).

    What the permutation test's observed statistic must reach; it grows slowly with the runs (more splits to
    choose from).

    >>> 2.5 < critical_value(30) < critical_value(300) < 4.5
    True
    """
    generator = np.random.default_rng(seed)
    samples = generator.standard_normal((draws, runs))
    samples = (samples - samples.mean(axis=1, keepdims=True)) / samples.std(axis=1, keepdims=True)
    return float(np.quantile(split_statistics(samples, min_segment).max(axis=1), 1 - alpha))


def detectable_step(noise: float, runs: int, *, alpha: float = ALPHA, power: float = POWER,
                    min_segment: int = MIN_SEGMENT) -> float | None:
    """The smallest step (a ratio) at the middle of ``runs`` runs of log noise ``noise`` found with ``power``
    (module docstring: the formula); ``None`` for too few runs to look in.

    >>> round(detectable_step(0.05, 30), 3)   # runs that spread by 5 %: a 10 % step is missed more than 5 % of the time
    1.115
    >>> round(detectable_step(0.014, 30), 3)
    1.031
    """
    from scipy import special  # deferred: start-up cost; only a history's summary needs scipy

    if not math.isfinite(noise) or noise < 0:
        raise AccountingError(f"noise must be a finite standard deviation of log values, got {noise!r}")
    if runs < min_runs(min_segment):
        return None
    critical = critical_value(runs, alpha=alpha, min_segment=min_segment)
    if critical ** 2 >= runs - 2:  # too few runs: no t can reach the critical value
        return None
    critical_t = critical * math.sqrt((runs - 2) / (runs - critical ** 2))
    inflation = math.sqrt((1 + MIN_AUTOCORRELATION) / (1 - MIN_AUTOCORRELATION))
    return float(math.exp(2 * noise * (inflation * critical_t + float(special.ndtri(power))) / math.sqrt(runs)))


def _tested(logs, splits, min_segment, permutations, seed, floor) -> list:
    """``(split, p-value)`` of each split, each tested within the segment between its neighbours."""
    bounds = [0, *splits, logs.size]
    return [(split, split_p_value(logs[bounds[position]:bounds[position + 2]], split - bounds[position],
                                  min_segment=min_segment, permutations=permutations, seed=seed, floor=floor))
            for position, split in enumerate(splits)]
