"""The statistics of the gate: one benchmark, K baseline runs against c current runs.

**The unit is the run (one pytest process), not the round.** Rounds inside one process
share its thread placement, its host clock and its neighbours; on a shared machine an
unchanged benchmark's median moves more from one process to the next than a real slowdown
moves it within one (measured figures: docs/benchmarks-and-gate.md, "Why a gate"). Rounds
of one process are therefore not independent samples of the noise that matters, and a test on pooled
rounds (asv's Mann-Whitney on raw samples) would call every process-to-process wobble
significant. Each run is reduced to one number of its raw rounds (``stats.data``, saved
with ``--benchmark-save-data``), on a log scale: the samples of the tests below are log
run values, so a change is a ratio.

**Which number: the fastest round, by default** (``benchmarks.json``'s ``regression.metric``;
:meth:`accounting.gate.storage.BenchmarkRun.summary`). Interference is one-sided: a
neighbour, an interrupt or a descheduled thread only ever *adds* time to a round, so the
minimum is the round least disturbed, and it moves with the work itself (a slowdown of
the code slows every round, the fastest included). This is the argument of Chen and
Revels, "Robust benchmarking in noisy environments" (2016), which Julia's BenchmarkTools
follows in judging regressions on the minimum. On a machine that a neighbour loads off
and on, processes' medians spread far wider than their minimums (measured figures:
docs/benchmarks-and-gate.md, "How check decides"). The minimum's weakness is a change that
slows only some rounds (a periodic stall in the code): choose ``median`` for suites where
that is the regression to catch. The *threads* matter as much: a multi-threaded matmul on
a VM with few vCPUs waits for its slowest vCPU, whose speed depends on the host's other
tenants; pin the benchmarks to one thread there (``accounting gate --threads 1``).

Two questions, two tools:

- **Is it slower?** :func:`permutation_test` — the difference of mean log-medians
  (current − baseline), one-sided, exact over every split of the runs into a "baseline"
  and a "current" group (Firecracker's A/B permutation test; scipy's
  ``permutation_test(..., permutation_type="independent")``). It is distribution-free
  and needs no guess of the noise's shape; its smallest possible p-value is
  ``1 / binom(K + c, c)`` (asv's ``p_min`` check), so a regression must show in several
  fresh processes, never in one unlucky one: one current run against 10 baseline runs
  can reach p = 1/11 at best, which is never "significant". When the sizes cannot reach
  the level, the answer is *inconclusive, re-measure* (:func:`min_pvalue`), never
  *unchanged*.
- **How much, and can a regression of the threshold's size be excluded?**
  :func:`ratio_interval` — a pooled-variance t interval on the difference of mean
  log-medians, turned into a ratio. With one current run it is the prediction interval
  of a new run over the baseline history (Bencher's approach); it assumes log-normal
  run-to-run noise. Its upper end below the threshold clears a benchmark (*no change*);
  its lower end above the threshold is the second condition of a *regression*, never the
  only one. That second condition only makes a conviction harder, so the permutation
  test's distribution-free bound on false alarms still holds; it is there because runs
  are not quite independent: a host-level slow episode can last several processes. One
  slow process among a few current runs can then put all of them above every baseline run
  with a ratio beyond the threshold, a false alarm under "significant and ratio ≥ 1.10",
  while the interval still reaches below the threshold (a measured case:
  docs/benchmarks-and-gate.md, "How check decides").

:func:`compare_runs` combines them into a :class:`Comparison` with one of four
:class:`Decision` values and the smallest slowdown its runs could have detected
(:mod:`accounting.gate.power`). The matrix's adjustment (:func:`holm`,
:func:`joint_permutation_test`) lives in :mod:`accounting.gate.multiple`, the levels in
:mod:`accounting.gate.levels`; both are re-exported here.

>>> base = [0.0150, 0.0147, 0.0153, 0.0149, 0.0151, 0.0148]
>>> slower = [0.0187, 0.0190, 0.0186, 0.0189]
>>> result = compare_runs(base, slower, threshold=0.10)
>>> result.decision.value, round(result.ratio, 2), round(result.p_slower, 4)
('regression', 1.26, 0.0048)
>>> compare_runs(base, [0.0150], threshold=0.10).decision.value
'no change'
"""

import enum
import itertools
import math
from dataclasses import dataclass

import numpy as np

from accounting.errors import AccountingError
from accounting.gate.levels import ALPHA, CONFIDENCE, EXACT_LIMIT, RANDOM_RESAMPLES, SEED
from accounting.gate.multiple import JointPValues, holm, joint_permutation_test
from accounting.gate.power import min_pvalue, minimum_detectable_effect, pooled_spread, runs_needed, smallest_convictable

__all__ = [  # the matrix's adjustment, the levels and the power figures live beside it and are re-exported here
    "ALPHA", "CONFIDENCE", "EXACT_LIMIT", "RANDOM_RESAMPLES", "SEED", "Comparison", "Decision", "JointPValues",
    "OUTLIER_MIN_RUNS", "OUTLIER_SPREADS", "PermutationResult", "RatioInterval", "compare_runs", "holm",
    "joint_permutation_test", "log_spread", "min_pvalue", "permutation_test", "ratio_interval", "runs_needed",
    "slow_outliers", "smallest_convictable",
]


class Decision(enum.Enum):
    """What the gate says about one benchmark."""

    REGRESSION = "regression"
    """Slower beyond doubt (p ≤ the Holm-adjusted level) *and* by more than the threshold."""
    IMPROVEMENT = "improvement"
    """Faster beyond doubt *and* by more than the threshold."""
    NO_CHANGE = "no change"
    """A slowdown as large as the threshold is excluded (the ratio's upper bound is below it);
    smaller significant changes are "no change" too: significant is not the same as large."""
    INCONCLUSIVE = "inconclusive"
    """Neither shown nor excluded (or measured on a loaded machine): collect more runs."""


@dataclass(frozen=True)
class PermutationResult:
    """One-sided p-values of the permutation test, with what it took to get them."""

    statistic: float
    """mean(current) − mean(baseline)."""
    p_greater: float
    p_less: float
    method: str
    """``"exact"`` (every split enumerated) or ``"random"`` (``RANDOM_RESAMPLES`` splits, +1 counted)."""
    splits: int
    """How many splits the p-values are counted over."""
    baseline_size: int
    current_size: int


def log_spread(values) -> float:
    """The run-to-run noise of run values: the sample standard deviation of their logs (``nan`` for one run).

    >>> round(log_spread([0.025, 0.026, 0.0255, 0.0252]), 4)
    0.017
    """
    logs = np.log(_positive(values, "run values"))
    return float(np.std(logs, ddof=1)) if logs.size > 1 else math.nan


def _as_samples(values, what: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or array.size == 0:
        raise AccountingError(f"{what} must be a non-empty list of numbers, got {values!r}")
    if not np.all(np.isfinite(array)):
        raise AccountingError(f"{what} has a value that is not finite: {values!r}")
    return array


def permutation_test(baseline, current, *, exact_limit: int = EXACT_LIMIT,
                     n_resamples: int = RANDOM_RESAMPLES, seed: int = SEED) -> PermutationResult:
    """Two-sample permutation test of mean(current) − mean(baseline), both one-sided p-values.

    Exact when ``binom(K + c, c) <= exact_limit``: every way of choosing which c of the
    pooled values are "current" is counted, and p is the share of splits whose statistic
    is at least (``p_greater``) / at most (``p_less``) the observed one — ties count
    against significance. Otherwise ``n_resamples`` random splits from a generator seeded
    with ``seed``, the observed split counted too (+1 in numerator and denominator, so
    p is never 0), as scipy does.

    >>> result = permutation_test([1.0, 2.0, 3.0], [4.0, 5.0])
    >>> result.p_greater, result.method, result.splits  # 1 of the 10 splits is as extreme
    (0.1, 'exact', 10)
    """
    baseline = _as_samples(baseline, "baseline")
    current = _as_samples(current, "current")
    pooled = np.concatenate([baseline, current])
    size, chosen = pooled.size, current.size
    # mean(current) − mean(baseline) rises with sum(current) (the total is fixed), so splits
    # are compared by the sum of their "current" values; the tolerance keeps a split equal to
    # the observed one (up to rounding) counted as "as extreme".
    observed = current.sum()
    tolerance = 1e-9 * max(1.0, float(np.abs(pooled).sum()))
    statistic = current.mean() - baseline.mean()
    splits = math.comb(size, chosen)
    if splits <= exact_limit:
        indices = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(size), chosen)),
                              dtype=np.intp, count=splits * chosen).reshape(splits, chosen)
        sums = pooled[indices].sum(axis=1)
        greater = int(np.count_nonzero(sums >= observed - tolerance))
        less = int(np.count_nonzero(sums <= observed + tolerance))
        p_greater, p_less, method = greater / splits, less / splits, "exact"
    else:
        generator = np.random.default_rng(seed)
        sums = generator.permuted(np.tile(pooled, (n_resamples, 1)), axis=1)[:, :chosen].sum(axis=1)
        greater = int(np.count_nonzero(sums >= observed - tolerance)) + 1
        less = int(np.count_nonzero(sums <= observed + tolerance)) + 1
        splits = n_resamples + 1
        p_greater, p_less, method = greater / splits, less / splits, "random"
    return PermutationResult(float(statistic), p_greater, p_less, method, splits, baseline.size, current.size)


@dataclass(frozen=True)
class RatioInterval:
    """current / baseline as a ratio of geometric means of run medians, with its t interval."""

    ratio: float
    low: float
    high: float
    """``nan`` when there is nothing to estimate the spread from (one run on each side)."""
    confidence: float
    degrees_of_freedom: int


def ratio_interval(baseline, current, *, confidence: float = CONFIDENCE) -> RatioInterval:
    """Pooled-variance t interval of ``mean(log current) − mean(log baseline)``, exponentiated.

    ``d ± t(1 − (1 − confidence)/2, K + c − 2) · s · sqrt(1/K + 1/c)``, with ``s²`` the
    pooled variance of the log medians. With ``c = 1`` it is the prediction interval of
    one new run over the K baseline runs.

    >>> interval = ratio_interval([10.0, 11.0, 9.0, 10.0], [12.0])
    >>> round(interval.ratio, 3), round(interval.low, 3), round(interval.high, 3)
    (1.203, 0.97, 1.493)
    """
    from scipy import stats as scipy_stats  # deferred: start-up cost; only a verdict needs scipy

    log_base = np.log(_positive(baseline, "baseline"))
    log_current = np.log(_positive(current, "current"))
    difference = log_current.mean() - log_base.mean()
    freedom = log_base.size + log_current.size - 2
    if freedom < 1:
        return RatioInterval(math.exp(difference), math.nan, math.nan, confidence, freedom)
    squares = ((log_base - log_base.mean()) ** 2).sum() + ((log_current - log_current.mean()) ** 2).sum()
    spread = math.sqrt(squares / freedom) * math.sqrt(1 / log_base.size + 1 / log_current.size)
    half_width = scipy_stats.t.ppf(1 - (1 - confidence) / 2, freedom) * spread
    return RatioInterval(math.exp(difference), math.exp(difference - half_width), math.exp(difference + half_width),
                         confidence, freedom)


def _positive(values, what: str) -> np.ndarray:
    array = _as_samples(values, what)
    if np.any(array <= 0):
        raise AccountingError(f"{what} has a time that is not positive: {values!r}")
    return array


@dataclass(frozen=True)
class Comparison:
    """The verdict on one benchmark, with every figure it was reached from (for the table)."""

    decision: Decision
    reason: str
    """One sentence a reader can act on ("re-measure: ...", "1.27× slower, p = 0.0010 ≤ 0.01")."""
    ratio: float
    """current / baseline (geometric means of run medians): 1.25 is 25 % slower."""
    ci_low: float
    ci_high: float
    confidence: float
    p_slower: float
    """Holm-adjusted when the comparison was made as part of a matrix (:func:`compare_runs`'s ``family``)."""
    p_faster: float
    alpha: float
    threshold: float
    """The smallest change that matters, as a fraction (0.10 = 10 %)."""
    baseline_runs: int
    current_runs: int
    min_pvalue: float
    method: str
    detectable: float | None = None
    """The smallest slowdown (a ratio) these runs' noise and numbers would have shown slower with 95 % power at
    the level the comparison was held to (``alpha / family``): :func:`accounting.gate.power.minimum_detectable_effect`
    on the pooled log spread; ``None`` where no slowdown could be (or no spread was measured)."""


def compare_runs(baseline, current, *, threshold: float, alpha: float = ALPHA, family: int = 1,
                 p_adjust=None, confidence: float = CONFIDENCE) -> Comparison:
    """Decide one benchmark from its run medians (seconds): baseline runs against current runs.

    - **regression**: p_slower ≤ ``alpha`` *and* the interval's lower end ≥ 1 + ``threshold``
      (slower beyond doubt, and surely by more than the threshold);
    - **improvement**: p_faster ≤ ``alpha`` *and* the interval's upper end ≤ 1 / (1 + ``threshold``);
    - **no change**: the interval's upper end < 1 + ``threshold`` (a slowdown that matters is excluded);
    - **inconclusive** otherwise — including when the sizes cannot reach ``alpha`` at all
      (``min_pvalue > alpha / family``) or when there is one baseline run (no noise model).

    ``family`` is the number of benchmarks judged together; ``p_adjust`` maps
    ``(p_slower, p_faster)`` to their Holm-adjusted values (see :mod:`accounting.gate.decide`).
    ``confidence``: the interval's two-sided level (:data:`CONFIDENCE`; ``gate ab`` uses
    :data:`accounting.gate.ab.AB_CONFIDENCE`).

    >>> compare_runs([0.015], [0.019], threshold=0.1).reason
    'cannot tell noise from change: 1 baseline run has no spread to compare with; save more baseline runs'
    """
    if isinstance(threshold, bool) or not 0 < threshold < 1:
        raise AccountingError(f"threshold must be a fraction in (0, 1), got {threshold!r}")
    baseline = _positive(baseline, "baseline run medians")
    current = _positive(current, "current run medians")
    test = permutation_test(np.log(baseline), np.log(current))
    interval = ratio_interval(baseline, current, confidence=confidence)
    p_slower, p_faster = (test.p_greater, test.p_less) if p_adjust is None else p_adjust(test.p_greater, test.p_less)
    smallest = min_pvalue(baseline.size, current.size)
    common = dict(ratio=interval.ratio, ci_low=interval.low, ci_high=interval.high, confidence=interval.confidence,
                  p_slower=p_slower, p_faster=p_faster, alpha=alpha, threshold=threshold,
                  baseline_runs=int(baseline.size), current_runs=int(current.size), min_pvalue=smallest,
                  method=test.method, detectable=_detectable(baseline, current, alpha / family))
    limit = 1 + threshold
    percent = f"{threshold * 100:g} %"
    if baseline.size < 2:
        return Comparison(Decision.INCONCLUSIVE, "cannot tell noise from change: 1 baseline run has no spread to "
                                                 "compare with; save more baseline runs", **common)
    if p_slower <= alpha and interval.low >= limit:
        return Comparison(Decision.REGRESSION, f"{interval.ratio:.3g}× slower, p = {p_slower:.2g} ≤ {alpha:g}", **common)
    if p_faster <= alpha and interval.high <= 1 / limit:
        return Comparison(Decision.IMPROVEMENT, f"{1 / interval.ratio:.3g}× faster, p = {p_faster:.2g} ≤ {alpha:g}",
                          **common)
    if interval.high < limit:
        return Comparison(Decision.NO_CHANGE, f"a slowdown of {percent} is excluded (upper bound "
                                              f"{interval.high:.3g}×)", **common)
    if smallest > alpha / family:
        needed = runs_needed(baseline.size, alpha / family)
        more = f"{needed} current runs" if needed else "more baseline runs"
        return Comparison(Decision.INCONCLUSIVE, f"re-measure: {baseline.size} baseline and {current.size} current "
                                                 f"run(s) cannot reach p ≤ {alpha / family:.2g} (smallest p "
                                                 f"{smallest:.2g}); it takes {more}", **common)
    return Comparison(Decision.INCONCLUSIVE, f"re-measure: {interval.ratio:.3g}× is neither shown nor excluded "
                                             f"beyond the {percent} threshold (p = {p_slower:.2g})", **common)


def _detectable(baseline: np.ndarray, current: np.ndarray, alpha: float) -> float | None:
    spread = pooled_spread(baseline, current)
    if spread != spread:  # nan: one run on each side, no spread to judge by
        return None
    return minimum_detectable_effect(spread, int(baseline.size), int(current.size), alpha=alpha)


OUTLIER_SPREADS = 3.0
"""How many robust standard deviations (1.4826 × MAD of log values) above the history's median a
baseline run must lie, beyond the threshold itself, to be set aside as a slow outlier."""
OUTLIER_MIN_RUNS = 5
"""Fewer baseline runs than this cannot say which of them is the odd one: none is set aside."""


def slow_outliers(baseline, *, threshold: float) -> list[int]:
    """Indices of baseline runs slower than the rest by more than both the threshold and 3 robust spreads.

    Process-level interference is one-sided, like the round-level kind: a neighbour on the
    host for seconds can slow a process *in every round*, so its fastest round does not see
    through it, and a few such runs in a history can pull its mean up far enough that a real
    slowdown is not significant (measured: docs/benchmarks-and-gate.md, "Slow outliers in the
    history"). A baseline run is set aside (and named)
    when its log value exceeds the median of the history's logs by more than
    ``max(log(1 + threshold), OUTLIER_SPREADS × 1.4826 × MAD)`` — slower than the history by a
    regression's worth *and* far outside its spread. Only slow runs: a fast one is no interference.
    The saved-history gate never screens its current runs: a slow current run may be the
    regression itself, and the permutation test already needs several of them to convict.
    ``gate ab``, whose B side has as many runs as A, screens each side against its own median
    (:mod:`accounting.gate.ab`).

    >>> slow_outliers([0.0241, 0.0242, 0.0249, 0.0249, 0.0253, 0.0256, 0.0263, 0.0323, 0.0328, 0.0370], threshold=0.1)
    [7, 8, 9]
    >>> slow_outliers([0.0241, 0.0242, 0.0370], threshold=0.1)  # too few to tell
    []
    """
    values = _positive(baseline, "baseline run values")
    if values.size < OUTLIER_MIN_RUNS:
        return []
    logs = np.log(values)
    centre = float(np.median(logs))
    spread = 1.4826 * float(np.median(np.abs(logs - centre)))
    limit = max(math.log1p(threshold), OUTLIER_SPREADS * spread)
    return [index for index, value in enumerate(logs) if value - centre > limit]
