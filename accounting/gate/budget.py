"""The gate's time budget: how long a job may take, what the next round will cost, and what the budget can see.

``gate ab --budget 10m`` (and ``gate check --budget``) keeps re-measuring the benchmarks still undecided
until each is decided or the budget is spent. Before each round it predicts the round's seconds from
the rounds already measured (:class:`RoundClock`) and starts it only if the job still ends inside the
budget. A round of fewer benchmarks than any measured one is predicted at the cost of the smallest
measured round (pessimistic: a process's start-up does not shrink with its benchmarks) until one of
its size has been measured.

:func:`plan` says, from the spread of the first pairs' log ratios, how many pairs a threshold needs on
this runner (simulated with the gate's own sequential test, :mod:`accounting.gate.sequential`) and
whether the budget covers them; where it does not, which budget or which threshold would.

>>> parse_budget("10m"), parse_budget("600"), parse_budget("90s"), parse_budget("1.5h")
(600.0, 600.0, 90.0, 5400.0)
"""

import math
from dataclasses import dataclass, field

import numpy as np

from accounting.errors import AccountingError
from accounting.gate.levels import ALPHA, SEED
from accounting.gate.sequential import FUTILITY_LEVEL, POWER, wealth

DEFAULT_BUDGET_S = 600.0
"""A job's default budget: 10 minutes, what a typical CI job grants a benchmark step."""
MARGIN = 1.1
"""A round is started only when the job's time so far plus 1.1 times the round's prediction fits the budget."""
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
PLAN_JOBS = 400
"""Simulated jobs per plan figure (seeded: the same spread gives the same plan)."""
PLAN_MAX_PAIRS = 400
"""The most pairs a plan looks ahead; beyond it a threshold is out of reach on this runner."""
PLAN_THRESHOLDS = (0.01, 0.02, 0.03, 0.05, 0.075, 0.10, 0.15, 0.20, 0.25, 0.30, 0.50)
"""The thresholds a plan tries when the one asked for does not fit the budget."""


def parse_budget(text) -> float:
    """A budget in seconds from ``600``, ``600s``, ``10m`` or ``1.5h``; a clear error naming anything else.

    >>> parse_budget("ten minutes")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: --budget must be a positive duration such as 600, 600s, 10m or 1h, got 'ten minutes'
    """
    raw = str(text).strip().lower()
    unit = UNITS.get(raw[-1:], None) if raw else None
    number = raw[:-1] if unit is not None else raw
    try:
        value = float(number) * (unit or 1.0)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise AccountingError(f"--budget must be a positive duration such as 600, 600s, 10m or 1h, got {text!r}")
    return value


@dataclass
class RoundClock:
    """Measured rounds (benchmarks in the round, seconds it took), and the prediction of the next one.

    >>> clock = RoundClock()
    >>> clock.add(16, 64.0); clock.add(16, 60.0); clock.add(4, 20.0)
    >>> clock.predict(4), clock.predict(2), clock.predict(16)
    (20.0, 20.0, 60.0)
    """

    rounds: list = field(default_factory=list)

    def add(self, benchmarks: int, seconds: float) -> None:
        self.rounds.append((int(benchmarks), float(seconds)))

    def predict(self, benchmarks: int) -> float:
        """Seconds of a round of ``benchmarks``: the latest measured round of that size; else the smallest larger
        one measured (the first round, which collects the whole suite, only when there is nothing else)."""
        rounds = self.rounds[1:] or self.rounds
        if not rounds:
            return 0.0
        same = [seconds for count, seconds in rounds if count == benchmarks]
        if same:
            return same[-1]
        larger = [(count, seconds) for count, seconds in rounds if count > benchmarks]
        if larger:
            smallest = min(count for count, _ in larger)
            return [seconds for count, seconds in larger if count == smallest][-1]
        return max(seconds for _, seconds in rounds) * benchmarks / max(count for count, _ in rounds)

    def fits(self, benchmarks: int, used_s: float, budget_s: float | None) -> bool:
        """Whether a round of ``benchmarks`` still ends inside ``budget_s`` after ``used_s`` (``None``: no budget)."""
        return budget_s is None or used_s + MARGIN * self.predict(benchmarks) <= budget_s


def _first_crossing(paths: np.ndarray, limit: float) -> np.ndarray:
    crossed = paths >= limit
    return np.where(crossed.any(axis=-1), crossed.argmax(axis=-1) + 1, PLAN_MAX_PAIRS + 1)


def pairs_needed(spread: float, threshold: float, *, alpha: float = ALPHA) -> int | None:
    """Pairs after which, 95 % of the time, a slowdown of twice ``threshold`` is convicted (slower at ``alpha``,
    beyond the threshold at :data:`FUTILITY_LEVEL`, at one look) and unchanged code is cleared (*no change*), by
    the sequential test, where pairs' log ratios spread by ``spread`` (their standard deviation). ``None``: more than :data:`PLAN_MAX_PAIRS`.

    >>> pairs_needed(0.02, 0.05) < pairs_needed(0.09, 0.05)   # more noise, more pairs
    True
    """
    if not math.isfinite(spread) or spread < 0:
        raise AccountingError(f"the pairs' spread must be a finite standard deviation, got {spread!r}")
    if not 0 < threshold < 1:
        raise AccountingError(f"threshold must be a fraction in (0, 1), got {threshold!r}")
    noise = max(spread, 1e-6) * np.random.default_rng(SEED).standard_normal((PLAN_JOBS, PLAN_MAX_PAIRS))
    centre = math.log1p(threshold)
    slowed = 2 * centre + noise
    convict = _first_crossing(np.minimum(wealth(slowed, 0.0) * alpha, wealth(slowed, centre) * FUTILITY_LEVEL), 1.0)
    clear = _first_crossing(wealth(noise, centre, direction=-1), 1 / FUTILITY_LEVEL)
    needed = int(max(np.quantile(convict, POWER, method="higher"), np.quantile(clear, POWER, method="higher")))
    return needed if needed <= PLAN_MAX_PAIRS else None


@dataclass(frozen=True)
class Plan:
    """What a job can see on this runner: the pairs a threshold needs, and whether the budget covers them."""

    threshold: float
    spread: float
    """Standard deviation of the first pairs' log ratios (the noisiest benchmark's)."""
    seconds_per_pair: float
    pairs: int | None
    """Pairs needed (:func:`pairs_needed`); ``None``: more than :data:`PLAN_MAX_PAIRS`."""
    budget_s: float | None
    used_s: float
    fits: bool
    budget_needed_s: float | None
    """The budget that would cover the pairs (``None``: none would, within the plan's horizon)."""
    threshold_that_fits: float | None
    """The smallest of :data:`PLAN_THRESHOLDS` the budget covers (``None``: none)."""

    def text(self) -> str:
        """One sentence for the progress lines and, where the budget falls short, the verdict's notes."""
        head = (f"plan: the first pairs' log ratios spread by {self.spread:.2g} (sd); at --threshold "
                f"{self.threshold:g} about {self.pairs if self.pairs is not None else f'more than {PLAN_MAX_PAIRS}'} "
                f"pairs decide a benchmark (a {100 * ((1 + self.threshold) ** 2 - 1):.3g} % slowdown convicted and "
                f"unchanged code cleared, 95 % of the time), {self.seconds_per_pair:.0f} s a pair")
        if self.budget_s is None:
            return head
        if self.fits:
            return head + f": the budget of {self.budget_s:.0f} s covers them"
        ways = []
        if self.budget_needed_s is not None:
            ways.append(f"--budget {math.ceil(self.budget_needed_s / 60)}m")
        if self.threshold_that_fits is not None:
            ways.append(f"--threshold {self.threshold_that_fits:g}")
        would = (" or ".join(ways) + " would") if ways else "no budget or threshold within reach would: a quieter runner"
        return head + f": the budget of {self.budget_s:.0f} s does not cover them; {would}"


def plan(spread: float, threshold: float, *, seconds_per_pair: float, budget_s: float | None, used_s: float = 0.0,
         alpha: float = ALPHA) -> Plan:
    """The plan for ``threshold`` at the first pairs' ``spread`` and measured ``seconds_per_pair``.

    >>> quiet = plan(0.02, 0.05, seconds_per_pair=10.0, budget_s=600.0, used_s=30.0)
    >>> quiet.fits, quiet.threshold_that_fits
    (True, 0.05)
    >>> noisy = plan(0.15, 0.05, seconds_per_pair=10.0, budget_s=600.0, used_s=30.0)
    >>> noisy.fits, noisy.threshold_that_fits is None or noisy.threshold_that_fits > 0.05
    (False, True)
    """
    def covered(pairs):
        return pairs is not None and (budget_s is None or used_s + pairs * seconds_per_pair <= budget_s)

    needed = pairs_needed(spread, threshold, alpha=alpha)
    fits = covered(needed)
    budget_needed = None if needed is None else used_s + needed * seconds_per_pair
    smallest = threshold if fits else next(
        (candidate for candidate in PLAN_THRESHOLDS if candidate > threshold
         and covered(pairs_needed(spread, candidate, alpha=alpha))), None)
    return Plan(threshold, spread, seconds_per_pair, needed, budget_s, used_s, fits, budget_needed, smallest)
