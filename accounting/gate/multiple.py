"""The p-values of a whole matrix of benchmarks, adjusted so that one false alarm anywhere stays rare.

One false regression fails the whole CI run, so the error to control is the chance of *any*
false alarm — the family-wise rate — not the false discovery rate (Benjamini–Hochberg):

- :func:`holm` (``check``): Holm's step-down adjustment, valid under any dependence between
  benchmarks, which share one process and one machine;
- :func:`joint_permutation_test` (``ab``): Westfall and Young's single-step min-P over a joint
  permutation of the runs, which pays nothing for a matrix whose benchmarks share their luck.

>>> holm([0.004, 0.02])
[0.008, 0.02]
"""

import itertools
import math
from dataclasses import dataclass

import numpy as np

from accounting.errors import AccountingError
from accounting.gate.levels import EXACT_LIMIT, RANDOM_RESAMPLES, SEED


def holm(pvalues) -> list[float]:
    """Holm's step-down adjusted p-values: ``p̃_(j) = max_{i≤j} min(1, (m − i + 1) · p_(i))``.

    A benchmark is significant at family-wise level α when its adjusted p is ≤ α.

    >>> holm([0.01, 0.04, 0.03])
    [0.03, 0.06, 0.06]
    """
    pvalues = [float(p) for p in pvalues]
    order = sorted(range(len(pvalues)), key=lambda position: pvalues[position])
    adjusted = [1.0] * len(pvalues)
    running = 0.0
    for rank, position in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[position]))
        adjusted[position] = running
    return adjusted


@dataclass(frozen=True)
class JointPValues:
    """One benchmark's one-sided p-values from :func:`joint_permutation_test`: raw, and adjusted for the matrix."""

    p_greater: float
    p_less: float
    adjusted_greater: float
    adjusted_less: float


def _label_matrix(units: int, current: int, observed: np.ndarray, *, exact_limit: int, n_resamples: int,
                  seed: int) -> np.ndarray:
    """Every way (or ``n_resamples`` random ways, plus the observed one) to call ``current`` of ``units`` current."""
    splits = math.comb(units, current)
    if splits <= exact_limit:
        labels = np.zeros((splits, units), dtype=bool)
        for row, chosen in enumerate(itertools.combinations(range(units), current)):
            labels[row, list(chosen)] = True
        return labels
    generator = np.random.default_rng(seed)
    labels = generator.permuted(np.tile(observed, (n_resamples, 1)), axis=1)
    return np.vstack([observed[None, :], labels])


def _pvalues_against(reference: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """For each query row and column (a benchmark): the share of ``reference`` rows whose statistic is at least
    the query's (up to rounding), i.e. the permutation p-value of that statistic."""
    count = reference.shape[0]
    pvalues = np.empty(queries.shape)
    for column in range(reference.shape[1]):
        finite = reference[:, column][np.isfinite(reference[:, column])]
        scale = max(float(np.abs(finite).max()) if finite.size else 1.0, 1e-12)
        ordered = np.sort(reference[:, column])
        pvalues[:, column] = (count - np.searchsorted(ordered, queries[:, column] - 1e-9 * scale, side="left")) / count
    return pvalues


def joint_permutation_test(samples: dict, *, exact_limit: int = EXACT_LIMIT, n_resamples: int = RANDOM_RESAMPLES,
                           seed: int = SEED) -> dict:
    """Per benchmark, one-sided permutation p-values, and the same adjusted for the whole matrix by min-P.

    ``samples``: benchmark name -> ``(baseline, current)``, each a dict of run (a pytest process:
    any hashable label) -> that benchmark's log value in that run. A run holds several benchmarks,
    so the labels "baseline" and "current" are permuted *over runs*, for all benchmarks at once:
    each labelling gives every benchmark its statistic, the difference of its mean log values
    (current − baseline) over the runs it has (a labelling that leaves one of its sides empty is
    as extreme as none). A benchmark's raw p is the share of labellings whose statistic is at least
    its observed one; its adjusted p is the share of labellings in which the *smallest* raw p over
    the matrix is at most its own: Westfall and Young's single-step min-P (1993), which holds the
    family-wise error rate at α across the matrix as Holm does, without Holm's assumption of nothing
    about the dependence between benchmarks. They share their processes, so their luck is alike and
    the most extreme labellings of one are those of another; Holm then pays for a matrix of m
    benchmarks with p ≤ α/m each, which 16 benchmarks in an A/B job reach only after 7 pairs
    (1/binom(14, 7)), where min-P convicts 16 slowed benchmarks after 5, as it convicts one.

    Exact over every labelling up to ``exact_limit`` of them, else ``n_resamples`` seeded random
    ones plus the observed one (as :func:`permutation_test`).

    >>> slow = {"b1": 1.3, "b2": 1.31, "b3": 1.29}
    >>> samples = {name: ({f"a{i}": 1.0 + 0.01 * i for i in range(5)}, {f"b{i}": value + 0.01 * i for i in range(5)})
    ...            for name, value in slow.items()}
    >>> result = joint_permutation_test(samples)
    >>> round(result["b1"].p_greater, 5), round(result["b1"].adjusted_greater, 5)   # 1/252 both: no price for 3
    (0.00397, 0.00397)
    """
    if not samples:
        return {}
    names = list(samples)
    baseline_units = {unit for base, _ in samples.values() for unit in base}
    current_units = {unit for _, current in samples.values() for unit in current}
    both = baseline_units & current_units
    if both:
        raise AccountingError(f"runs on both sides of a comparison: {sorted(map(str, both))}")
    units = sorted(baseline_units | current_units, key=str)
    position = {unit: index for index, unit in enumerate(units)}
    observed = np.zeros(len(units), dtype=bool)
    observed[[position[unit] for unit in current_units]] = True
    values = np.full((len(units), len(names)), np.nan)
    for column, name in enumerate(names):
        base, current = samples[name]
        for unit, value in (*base.items(), *current.items()):
            values[position[unit], column] = value
    present = ~np.isnan(values)
    filled = np.where(present, values, 0.0)
    labels = _label_matrix(len(units), int(observed.sum()), observed, exact_limit=exact_limit,
                           n_resamples=n_resamples, seed=seed)
    labels = np.vstack([observed[None, :], labels])  # row 0: the observed labelling; the rest: the reference
    chosen = labels.astype(float)
    count_current = chosen @ present
    sum_current = chosen @ filled
    count_all, sum_all = present.sum(axis=0), filled.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        difference = sum_current / count_current - (sum_all - sum_current) / (count_all - count_current)
    defined = (count_current > 0) & (count_current < count_all)
    greater = np.where(defined, difference, -np.inf)[1:]
    less = np.where(defined, -difference, -np.inf)[1:]
    observed_greater = np.where(defined[0], difference[0], -np.inf)
    observed_less = np.where(defined[0], -difference[0], -np.inf)
    results = {}
    for statistic, observed_statistic, key in ((greater, observed_greater, "greater"), (less, observed_less, "less")):
        raw = _pvalues_against(statistic, observed_statistic[None, :])[0]
        smallest = _pvalues_against(statistic, statistic).min(axis=1)  # each labelling's smallest p over the matrix
        adjusted = np.array([np.count_nonzero(smallest <= p + 1e-12) / statistic.shape[0] for p in raw])
        results[key] = (raw, np.maximum(adjusted, raw))
    return {name: JointPValues(float(results["greater"][0][column]), float(results["less"][0][column]),
                               float(results["greater"][1][column]), float(results["less"][1][column]))
            for column, name in enumerate(names)}
