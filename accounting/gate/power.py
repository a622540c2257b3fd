"""What a verdict could have seen: the gate's power, and the smallest slowdown it detects with 95 % power.

"No change" says only that the runs did not show a slowdown; how large a slowdown they *could*
have shown depends on their noise and how many there were. This module answers that, per
benchmark, from the data the verdict was reached on (the log spread of the run values and the
two sample sizes), so a verdict reads "no change larger than 7 %" and a benchmark too noisy for
its threshold is named as such.

**The model.** Run values are log-normal: each side's log values are normal with a common
standard deviation ``spread`` (:func:`accounting.gate.stats.log_spread`), a slowdown ``r`` moves
the current side's mean by ``log r``. The gate's permutation test over runs is, for such data,
the two-sample t test on log values (its large-sample counterpart; the simulation in
``tests/test_gate_power.py`` checks the figures against the permutation test itself). With
``K`` baseline and ``c`` current runs, ``se = sqrt(1/K + 1/c)``, ``ν = K + c − 2`` degrees of
freedom and ``s`` the pooled sample spread (``s/σ ~ sqrt(χ²_ν/ν)``):

- **shown slower** (``p ≤ α``): ``d̂ ≥ t(1 − α, ν) · s · se``; its chance is the noncentral t
  tail ``P(T_ν(λ) ≥ t(1 − α, ν))`` with ``λ = log r / (σ · se)`` (:func:`detection_power`);
- **convicted** (the gate's regression, :func:`accounting.gate.stats.compare_runs`): shown slower
  *and* the ratio's interval above the threshold, ``d̂ − t((1 + confidence)/2, ν) · s · se ≥
  log(1 + threshold)``. Both conditions share ``s``, so the chance is one integral over the
  spread's χ distribution: ``E_s[1 − Φ((max(t_α s se, log(1 + threshold) + t_c s se) − log r) /
  (σ se))]`` (:func:`conviction_power`).

Where the sizes cannot reach ``α`` at all (the permutation test's smallest p,
:func:`min_pvalue`, is above it) nothing is detectable: ``None``. The limits the sizes and the
threshold set whatever the power live here too: :func:`min_pvalue`, :func:`runs_needed` and
:func:`smallest_convictable` (the slowdown convicted about half the time, for the cap's note).

:func:`minimum_detectable_effect` inverts them: the smallest slowdown (a ratio) found with
``power`` (95 %). Its "shown slower" form is the number a verdict reports: it needs no
threshold, so it says what the noise allows whatever threshold is asked for, and a benchmark
whose detectable slowdown is above its threshold is *too noisy for its threshold*
(:func:`too_noisy`): a slowdown of the threshold's size would be missed more than 5 % of the time.

>>> round(minimum_detectable_effect(0.02, 10, 5, alpha=0.01), 3)   # a calm hour's spread, 10 + 5 runs
1.05
>>> round(minimum_detectable_effect(0.02, 10, 5, alpha=0.01, threshold=0.10), 3)   # convicted past 10 %
1.143
>>> minimum_detectable_effect(0.02, 10, 1, alpha=0.01) is None   # one current run never reaches p <= 0.01
True
"""

import math

import numpy as np

from accounting.errors import AccountingError
from accounting.gate.levels import ALPHA, CONFIDENCE

POWER = 0.95
"""The chance of detection a "minimum detectable effect" is quoted at."""
LARGEST_EFFECT = 100.0
"""The search for a minimum detectable effect stops at this ratio: beyond it, ``None`` (nothing useful)."""


def min_pvalue(baseline_size: int, current_size: int) -> float:
    """The smallest one-sided p the exact permutation test can give for these sizes: ``1/binom(K+c, c)``.

    >>> min_pvalue(10, 1), round(min_pvalue(10, 3), 5)
    (0.09090909090909091, 0.0035)
    """
    return 1.0 / math.comb(baseline_size + current_size, current_size)


def runs_needed(baseline_size: int, alpha: float, *, cap: int = 50) -> int | None:
    """The fewest current runs for which :func:`min_pvalue` reaches ``alpha`` (``None`` beyond ``cap``).

    >>> runs_needed(10, 0.01 / 3), runs_needed(5, 0.01), runs_needed(1, 0.01)
    (4, 4, None)
    """
    for current in range(1, cap + 1):
        if min_pvalue(baseline_size, current) <= alpha:
            return current
    return None


def smallest_convictable(spread: float, baseline_size: int, current_size: int, *, threshold: float,
                         alpha: float = ALPHA, confidence: float = CONFIDENCE) -> float | None:
    """The smallest slowdown the gate can call a regression, given the runs' noise and how many there are.

    A regression needs the ratio's interval to start above ``1 + threshold``
    (:func:`accounting.gate.stats.compare_runs`). Where both sides' log values spread by ``spread``
    (their standard deviation: :func:`accounting.gate.stats.log_spread` of the baseline), that takes a typical slowdown of at least
    ``(1 + threshold) · exp(t · spread · sqrt(1/K + 1/c))``, with ``t`` the interval's
    Student t quantile on ``K + c − 2`` degrees of freedom (the spread moves from one set of
    runs to the next, so a slowdown this size is caught about half of the time; somewhat
    larger ones nearly always). ``None`` when no slowdown can be convicted: the sizes cannot
    reach ``alpha`` (:func:`min_pvalue`), or there is no degree of freedom.

    What the noise costs, at a 10 % threshold with 10 baseline and 5 current runs: a log
    spread of 0.02 convicts from about 1.12×, one of 0.13 only from about 1.25× (and then
    only half the time). Spreads measured on a shared VM in calm and busy hours:
    docs/benchmarks-and-gate.md.

    >>> round(smallest_convictable(0.02, 10, 5, threshold=0.10), 3), round(smallest_convictable(0.13, 10, 5, threshold=0.10), 3)
    (1.122, 1.248)
    >>> smallest_convictable(0.02, 10, 1, threshold=0.10) is None   # one current run never reaches p <= 0.01
    True
    """
    from scipy import stats as scipy_stats  # deferred: start-up cost; only a verdict needs scipy

    if not math.isfinite(spread) or spread < 0:
        raise AccountingError(f"spread must be a finite standard deviation of log values, got {spread!r}")
    freedom = baseline_size + current_size - 2
    if freedom < 1 or min_pvalue(baseline_size, current_size) > alpha:
        return None
    quantile = scipy_stats.t.ppf(1 - (1 - confidence) / 2, freedom)
    return (1 + threshold) * math.exp(quantile * spread * math.sqrt(1 / baseline_size + 1 / current_size))


def _check(spread: float, baseline_size: int, current_size: int) -> None:
    if not isinstance(spread, (int, float)) or not math.isfinite(spread) or spread < 0:
        raise AccountingError(f"spread must be a finite standard deviation of log values, got {spread!r}")
    for name, size in (("baseline_size", baseline_size), ("current_size", current_size)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise AccountingError(f"{name} must be a positive number of runs, got {size!r}")


def _reachable(baseline_size: int, current_size: int, alpha: float) -> bool:
    return baseline_size + current_size - 2 >= 1 and min_pvalue(baseline_size, current_size) <= alpha


def detection_power(effect: float, spread: float, baseline_size: int, current_size: int, *, alpha: float) -> float:
    """The chance that a slowdown of ``effect`` (a ratio) is shown slower at one-sided level ``alpha``.

    The noncentral t tail of the module docstring; 0 where the sizes cannot reach ``alpha``.
    With no spread at all, 1 for any slowdown and ``alpha``'s worth for none.

    >>> round(detection_power(1.0, 0.05, 10, 10, alpha=0.05), 3)   # no slowdown: the false-alarm rate
    0.05
    """
    from scipy import special, stats as scipy_stats  # deferred: start-up cost; only a verdict needs scipy

    _check(spread, baseline_size, current_size)
    if not _reachable(baseline_size, current_size, alpha):
        return 0.0
    freedom = baseline_size + current_size - 2
    critical = scipy_stats.t.ppf(1 - alpha, freedom)
    if spread == 0:
        return 1.0 if effect > 1 else alpha
    noncentrality = math.log(effect) / (spread * math.sqrt(1 / baseline_size + 1 / current_size))
    return 1.0 - float(special.nctdtr(freedom, noncentrality, critical))  # the noncentral t's upper tail


def conviction_power(effect: float, spread: float, baseline_size: int, current_size: int, *, alpha: float,
                     threshold: float, confidence: float = CONFIDENCE) -> float:
    """The chance that the gate calls a slowdown of ``effect`` a regression: shown slower and surely past ``threshold``.

    One integral over the pooled spread's χ distribution (module docstring); 0 where the sizes
    cannot reach ``alpha``.

    >>> round(conviction_power(1.25, 0.02, 10, 5, alpha=0.01, threshold=0.10), 3)
    1.0
    >>> round(conviction_power(1.10, 0.02, 10, 5, alpha=0.01, threshold=0.10), 3)   # at 10 %: the interval's 5 %
    0.05
    """
    from scipy import integrate, special, stats as scipy_stats  # deferred: start-up cost; only a verdict needs scipy

    _check(spread, baseline_size, current_size)
    if not _reachable(baseline_size, current_size, alpha):
        return 0.0
    freedom = baseline_size + current_size - 2
    scale = math.sqrt(1 / baseline_size + 1 / current_size)
    significant = scipy_stats.t.ppf(1 - alpha, freedom)
    interval = scipy_stats.t.ppf(1 - (1 - confidence) / 2, freedom)
    limit, shift = math.log1p(threshold), math.log(effect)
    if spread == 0:
        return 1.0 if shift > limit else 0.0

    def given(ratio: float) -> float:  # ratio = s / σ
        needed = max(significant * ratio * spread * scale, limit + interval * ratio * spread * scale)
        return float(special.ndtr((shift - needed) / (spread * scale)))

    chi = scipy_stats.chi(freedom, scale=1 / math.sqrt(freedom))
    low, high = chi.ppf(1e-10), chi.ppf(1 - 1e-10)
    value, _ = integrate.quad(lambda ratio: given(ratio) * chi.pdf(ratio), low, high, limit=200)
    return min(1.0, max(0.0, value))


def minimum_detectable_effect(spread: float, baseline_size: int, current_size: int, *, alpha: float,
                              power: float = POWER, threshold: float | None = None,
                              confidence: float = CONFIDENCE) -> float | None:
    """The smallest slowdown (a ratio, 1.07 = 7 %) detected with ``power``: shown slower, or with ``threshold``
    also convicted (:func:`conviction_power`). ``None`` where no slowdown up to :data:`LARGEST_EFFECT` is.

    >>> round(minimum_detectable_effect(0.066, 8, 8, alpha=0.01), 3)   # a noisy A/B job after 8 pairs
    1.157
    """
    from scipy import optimize, special, stats as scipy_stats  # deferred: start-up cost; only a verdict needs scipy

    _check(spread, baseline_size, current_size)
    if not 0 < power < 1:
        raise AccountingError(f"power must be a probability in (0, 1), got {power!r}")
    if not _reachable(baseline_size, current_size, alpha):
        return None
    if threshold is None and spread > 0:  # solve for the noncentrality directly: one noncentral t tail per step
        freedom = baseline_size + current_size - 2
        critical = float(scipy_stats.t.ppf(1 - alpha, freedom))
        start = critical + float(special.ndtri(power))  # the normal approximation, a bracket's centre
        low, high = max(0.0, start - 3), start + 3
        def tail(value: float) -> float:  # P(T_freedom(value) >= critical): the noncentral t's upper tail
            return 1.0 - float(special.nctdtr(freedom, value, critical))

        while tail(high) < power:
            low, high = high, 2 * high
        noncentrality = optimize.brentq(lambda value: tail(value) - power, low, high, xtol=1e-6)
        log_effect = noncentrality * spread * math.sqrt(1 / baseline_size + 1 / current_size)
        return float(math.exp(log_effect)) if log_effect <= math.log(LARGEST_EFFECT) else None

    def chance(effect: float) -> float:
        if threshold is None:
            return detection_power(effect, spread, baseline_size, current_size, alpha=alpha)
        return conviction_power(effect, spread, baseline_size, current_size, alpha=alpha, threshold=threshold,
                                confidence=confidence)

    floor = 1.0 + (threshold or 0.0)
    if spread == 0:
        return floor
    if chance(LARGEST_EFFECT) < power:
        return None
    return float(math.exp(optimize.brentq(lambda log_effect: chance(math.exp(log_effect)) - power,
                                          math.log(floor), math.log(LARGEST_EFFECT), xtol=1e-6)))


def pooled_spread(baseline, current) -> float:
    """The pooled sd of the log values of both sides (the ``s`` of the t interval); ``nan`` with no degree of freedom.

    >>> round(pooled_spread([1.0, 1.02, 0.98], [1.1, 1.12]), 4)
    0.0179
    """
    logs = [np.log(np.asarray(side, dtype=float)) for side in (baseline, current)]
    freedom = sum(side.size for side in logs) - 2
    if freedom < 1:
        return math.nan
    return float(math.sqrt(sum(((side - side.mean()) ** 2).sum() for side in logs) / freedom))


def too_noisy(detectable: float | None, threshold: float) -> bool:
    """Whether a benchmark's noise hides a slowdown of its threshold's size: its detectable slowdown is above it.

    ``None`` (sizes that cannot reach the level at all) is not noise but too few runs: ``False``.

    >>> too_noisy(1.07, 0.10), too_noisy(1.12, 0.10), too_noisy(None, 0.10)
    (False, True, False)
    """
    return detectable is not None and detectable > 1 + threshold


def percent(detectable: float | None) -> str:
    """A detectable slowdown as the text a verdict prints.

    >>> percent(1.0712), percent(1.25), percent(None)
    ('7.1 %', '25 %', 'too few runs')
    """
    if detectable is None:
        return "too few runs"
    return f"{(detectable - 1) * 100:.2g} %" if detectable < 1.1 else f"{(detectable - 1) * 100:.3g} %"
