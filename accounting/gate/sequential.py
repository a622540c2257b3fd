"""An A/B verdict that may look after every pair and still holds its false-alarm rate: betting on the pairs' log ratios.

``gate ab`` adds pairs while a benchmark is undecided and decides again after each. A test at a
fixed level repeated after every pair raises the chance of a false alarm with every look (with
6 looks at p ≤ 0.01 about 3 % of unchanged jobs fail instead of 1 %). This module's test holds its
level over *every* look, whenever the job stops (the budget, a cap, every benchmark decided):

**The data.** Pair ``i`` (one A process and one B process, order alternating) gives one log ratio
``dᵢ = log Bᵢ − log Aᵢ`` per benchmark. If B is A slowed by a factor ``r`` and the two processes of a
pair are exchangeable otherwise (interleaving's premise: the host's drift and a neighbour's load
fall on both alike), ``dᵢ − log r`` is symmetric about 0 — whatever the noise's shape, heavy tails
and slow stray processes included.

**The test** (testing by betting; Shafer and Vovk, Waudby-Smith and Ramdas 2023). To show
``log r > μ`` a bettor stakes a fraction ``λ`` of its wealth on each pair: ``Wₙ = ∏ (1 + λ·ψ((dᵢ − μ)/sᵢ))``,
with ``ψ`` the clip to [−1, 1] and ``sᵢ`` a scale fixed from the pairs *before* pair ``i``
(:data:`SCALE_SPREADS` of their standard deviation; 0, a bet on the sign alone, while fewer than 2 came
before). When ``log r ≤ μ``, ``ψ`` of a symmetric variable shifted down has mean ≤ 0, so ``W`` is a
nonnegative supermartingale from 1, and by Ville's inequality ``P(Wₙ ≥ 1/α for some n) ≤ α``: the level
holds over every look and any stopping rule. The wealth is averaged over the stakes :data:`STAKES` (a
mixture of supermartingales is one), so no stake is chosen from the data.

**The verdict** asks two things of a slowdown, as the fixed-pair rule did at one look: that B is slower at
all (the bet against ``μ = 0``, at α over the matrix: this is what holds the false-alarm rate of unchanged
code at α), and that it is slower by more than the threshold with one-sided 90 % confidence (the bet
against ``μ₀ = log(1 + threshold)`` reaching ``1/``:data:`FUTILITY_LEVEL`: a slowdown exactly at the
threshold is convicted at most 10 % of the time). Asking α = 0.01 of the size as well would need about
twice the pairs (simulated: a +10 % change at sd 0.088 and a 5 % threshold, 42 pairs median instead of 22)
for a guarantee about slowdowns no one gates on. The same bets turned round test an improvement, and
``log r < μ₀`` (*no change*, the futility stop).

**The matrix.** Every benchmark of a job has its own wealth; a false alarm anywhere fails the job.
A set of benchmarks' wealths averaged is a supermartingale under all their nulls together, so the
closed test that convicts a benchmark when *every* set containing it averages ≥ 1/α holds the
family-wise rate at α under any dependence between benchmarks (Vovk and Wang's e-value closure).
One slowed benchmark among m unchanged needs about m/α, as Bonferroni; a matrix slowed alike is
convicted when each reaches 1/α, as one benchmark is (:func:`closed_pvalues`).

**The interval** is the always-valid one of the same bets (:func:`confidence_sequence`): every ratio
not yet rejected at :data:`FUTILITY_LEVEL` each side. A benchmark is *no change* when its upper end is
below the threshold — the futility stop: an unchanged benchmark stops costing pairs.

>>> import numpy as np
>>> slowed = np.log(1.10) + 0.02 * np.array([1, -1, 0.5, -0.5, 0.3, -0.2, 0.8, -0.9, 0.1, -0.4, 0.6, -0.7])
>>> bool(wealth(slowed, 0.0)[-1] >= 100 and wealth(slowed, np.log(1.05))[-1] >= 10)  # 12 pairs of a 10 % slowdown
True
>>> bool(wealth(-slowed, np.log(1.05))[-1] >= 100)     # nothing is convicted when B is the faster
False
"""

import math
from dataclasses import dataclass

import numpy as np

from accounting.errors import AccountingError
from accounting.gate.levels import ALPHA

STAKES = np.array([0.25, 0.5, 0.75, 0.95])
"""The fractions of its wealth the bettor may stake on a pair, averaged with equal weight: small stakes win on
noisy pairs, large ones on clear pairs (the largest is below 1, so a pair against the bet never ruins it)."""
SCALE_SPREADS = 1.5
"""Each pair's bet is its log ratio over this many standard deviations of the earlier pairs' log ratios, clipped
to [−1, 1]: a normal pair's bet is then nearly proportional to it, a stray process's at most one unit."""
FUTILITY_LEVEL = 0.10
"""Each end of the always-valid interval (:func:`confidence_sequence`) is held at this level: a benchmark slowed by
more than its threshold is called *no change* at most 10 % of the time, over every look (the interval is an 80 %
one: the level the fixed-pair A/B rule held its *no change* to, there at one look)."""
POWER = 0.95
"""The chance of conviction a minimum detectable effect (:func:`detectable_ratio`) and a plan are quoted at."""
Z_POWER = 1.6448536269514722
"""The standard normal quantile of :data:`POWER`."""


def _check_ratios(values) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim < 1 or not np.all(np.isfinite(array)):
        raise AccountingError(f"log ratios must be finite numbers, got {values!r}")
    return array


def bet_scales(ratios) -> np.ndarray:
    """Each pair's scale, from the pairs before it alone (the last axis is the pairs, in time order).

    :data:`SCALE_SPREADS` times the standard deviation of the earlier log ratios; 0 (a bet on the sign) while
    fewer than 2 came before. It never looks at its own pair, so the bet is fixed before the pair is seen.

    >>> bet_scales([0.0, 0.1, 0.2, 0.3]).round(3).tolist()
    [0.0, 0.0, 0.106, 0.15]
    """
    d = _check_ratios(ratios)
    count = np.arange(d.shape[-1], dtype=float)  # pairs before each
    total = np.cumsum(d, axis=-1) - d
    squares = np.cumsum(d * d, axis=-1) - d * d
    with np.errstate(divide="ignore", invalid="ignore"):
        variance = (squares - total * total / count) / (count - 1)
    spread = np.sqrt(np.clip(np.nan_to_num(variance, nan=0.0), 0.0, None))
    return np.where(count >= 2, SCALE_SPREADS * spread, 0.0)


def _bets(ratios, centre, scales) -> np.ndarray:
    shifted = ratios - centre
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(scales > 0, shifted / np.where(scales > 0, scales, 1.0), np.sign(shifted))
    return np.clip(scaled, -1.0, 1.0)


def wealth(ratios, centre: float, *, direction: int = 1, scales=None) -> np.ndarray:
    """The bettor's wealth after each pair, betting that the log ratios lie ``direction`` (+1 above, −1 below)
    ``centre``; an e-process for "they do not": its chance of ever reaching ``1/α`` is at most α.

    ``ratios``: log ratios ``log B − log A``, pairs along the last axis (more axes: independent jobs).

    >>> wealth([0.1, 0.1, 0.1], 0.0).round(3).tolist()          # pairs each way up: (1 + λ)ⁿ averaged over λ
    [1.612, 2.669, 4.526]
    """
    d = _check_ratios(ratios)
    if direction not in (1, -1):
        raise AccountingError(f"direction must be 1 or -1, got {direction!r}")
    scales = bet_scales(d) if scales is None else scales
    bets = direction * _bets(d, centre, scales)
    factors = 1.0 + STAKES.reshape((-1,) + (1,) * d.ndim) * bets[None, ...]
    return np.exp(np.cumsum(np.log(factors), axis=-1)).mean(axis=0)


def closed_pvalues(evalues) -> list[float]:
    """Each benchmark's family-wise p from the matrix's e-values, by the closed test of their averages.

    A benchmark is convicted at level α when every set of benchmarks containing it averages at least 1/α; its
    p is 1 over the smallest such average (the set: itself and the benchmarks with the smallest e-values).

    >>> [round(p, 4) for p in closed_pvalues([400.0, 0.5, 0.5, 0.5])]   # alone among unchanged: about m/α needed
    [0.01, 1.0, 1.0, 1.0]
    >>> [round(p, 4) for p in closed_pvalues([120.0, 150.0, 110.0])]    # a matrix slowed alike: each at 1/α
    [0.0087, 0.0079, 0.0091]
    """
    values = [max(0.0, float(value)) for value in evalues]
    order = sorted(values)
    pvalues = []
    for index, value in enumerate(values):
        others = order.copy()
        others.remove(value)
        smallest, total = value, value
        for count, other in enumerate(others, start=2):
            total += other
            smallest = min(smallest, total / count)
        pvalues.append(1.0 if smallest <= 1 else min(1.0, 1.0 / smallest))
    return pvalues


def confidence_sequence(ratios, *, level: float = FUTILITY_LEVEL) -> tuple[float, float]:
    """The always-valid interval of the mean log ratio after all the pairs given: the centres whose bets did not
    reach ``1/level`` either way (``-inf``/``inf`` where the pairs cannot yet exclude any).

    >>> low, high = confidence_sequence([0.10, 0.11, 0.09, 0.10, 0.105, 0.095, 0.1, 0.1])
    >>> 0.0 < low < 0.10 < high < 0.2
    True
    """
    d = _check_ratios(ratios)
    if d.ndim != 1 or d.size == 0:
        raise AccountingError(f"a confidence sequence needs a list of pairs' log ratios, got {ratios!r}")
    scales = bet_scales(d)
    limit = 1 / level
    span = float(np.ptp(d)) + float(scales.max()) + 1.0
    ends = []
    for direction in (1, -1):
        def rejected(centre):
            return wealth(d, centre, direction=direction, scales=scales)[-1] >= limit
        far = float(d.mean()) - direction * span  # far below (above): rejected if anything is
        if not rejected(far):
            ends.append(-direction * math.inf)
            continue
        inside, outside = float(d.mean()) + direction * 0.0, far
        if rejected(inside):  # every pair on one side of its own mean cannot happen, but stay safe
            inside = float(d.max()) if direction == 1 else float(d.min())
        for _ in range(50):
            middle = (inside + outside) / 2
            if rejected(middle):
                outside = middle
            else:
                inside = middle
        ends.append(outside)
    return ends[0], ends[1]


def detectable_ratio(ratios, *, alpha: float, threshold: float = 0.0) -> float | None:
    """The smallest slowdown (a ratio) these pairs would have convicted about 95 % of the time at ``alpha``.

    Conviction asks the interval at ``alpha`` to exclude 1 and the one at :data:`FUTILITY_LEVEL` to exclude
    ``1 + threshold``; each lower end sits a radius ``h`` below the pairs' mean, so a slowdown ``r`` is
    shown when its mean clears both with 95 % chance: ``exp(max(h_α, log(1 + threshold) + h₁₀) + z₀.₉₅ ·
    sd / √n)``. ``None`` while the pairs cannot convict anything (too few for the level).

    >>> detectable_ratio([0.0, 0.01, -0.01, 0.005], alpha=0.01) is None   # 4 pairs cannot reach 1/0.01
    True
    """
    d = _check_ratios(ratios)
    if d.size < 2:
        return None
    radii = []
    for level, centre in ((alpha, 0.0), (FUTILITY_LEVEL, math.log1p(threshold))):
        low, _ = confidence_sequence(d, level=level)
        if not math.isfinite(low):
            return None
        radii.append(centre + float(d.mean()) - low)
    return math.exp(max(radii) + Z_POWER * float(np.std(d, ddof=1)) / math.sqrt(d.size))


@dataclass(frozen=True)
class Sequential:
    """One benchmark's sequential verdict on its pairs: figures for the table, and the look it was decided at."""

    decision: str
    """``"regression"``, ``"improvement"``, ``"no change"`` or ``"inconclusive"``."""
    pairs: int
    """Pairs the decision rests on (those up to the look it was reached at)."""
    ratio: float
    """The geometric mean of the pairs' B/A ratios."""
    low: float
    high: float
    """The always-valid 80 % interval of the ratio (each end at :data:`FUTILITY_LEVEL`)."""
    p_slower: float
    """Family-wise, always-valid p of "slower at all" (:func:`closed_pvalues` of the bets against no change)."""
    p_faster: float
    detectable: float | None


def decide(pairs_by_name: dict, thresholds: dict, *, alpha: float = ALPHA) -> dict:
    """Replay the looks: after each pair, decide every benchmark not yet decided; a decision, once made, stands.

    ``pairs_by_name``: benchmark -> list of ``(pair number, log ratio)`` in time order; ``thresholds``: benchmark
    -> its threshold (a fraction). A benchmark is a *regression* when its closed family-wise p of "slower at all"
    is ≤ ``alpha`` and its interval's lower end (each end at :data:`FUTILITY_LEVEL`) is above its threshold at the
    same look; an *improvement* likewise the other way; *no change* when its interval's upper end is below the
    threshold; else *inconclusive*. Returns benchmark -> :class:`Sequential`.

    >>> decide({"mm": [(i, 0.0) for i in range(1, 9)]}, {"mm": 0.05})["mm"].decision
    'no change'
    """
    names = [name for name in pairs_by_name if pairs_by_name[name]]
    if not names:
        return {}
    arrays = {name: np.array([value for _, value in pairs_by_name[name]], dtype=float) for name in names}
    numbers = {name: [number for number, _ in pairs_by_name[name]] for name in names}
    centres = {name: math.log1p(thresholds[name]) for name in names}
    paths = {}
    for name in names:
        d, centre = arrays[name], centres[name]
        scales = bet_scales(d)
        paths[name] = {"slower": wealth(d, 0.0, scales=scales), "faster": wealth(d, 0.0, direction=-1, scales=scales),
                       "slower by more": wealth(d, centre, scales=scales),
                       "faster by more": wealth(d, -centre, direction=-1, scales=scales),
                       "same": wealth(d, centre, direction=-1, scales=scales)}
    looks = sorted({number for name in names for number in numbers[name]})
    decided, at = {}, {}

    def now(name, kind, look):
        taken = int(np.searchsorted(numbers[name], look, side="right"))
        return float(paths[name][kind][taken - 1]) if taken else 1.0, taken

    for look in looks:
        for kind in ("slower", "faster"):
            values = [now(name, kind, look)[0] for name in names]
            for name, p in zip(names, closed_pvalues(values)):
                if name not in decided and p <= alpha and now(name, f"{kind} by more", look)[0] >= 1 / FUTILITY_LEVEL:
                    decided[name] = "regression" if kind == "slower" else "improvement"
                    at[name] = now(name, kind, look)[1]
        for name in names:
            value, taken = now(name, "same", look)
            if name not in decided and taken and value >= 1 / FUTILITY_LEVEL:
                decided[name], at[name] = "no change", taken
    final = {kind: closed_pvalues([float(paths[name][kind][-1]) for name in names]) for kind in ("slower", "faster")}
    results = {}
    for index, name in enumerate(names):
        d = arrays[name][:at.get(name, arrays[name].size)]
        low, high = confidence_sequence(d)
        results[name] = Sequential(decided.get(name, "inconclusive"), int(d.size), math.exp(float(d.mean())),
                                   math.exp(low), math.exp(high), final["slower"][index], final["faster"][index],
                                   detectable_ratio(d, alpha=alpha / len(names), threshold=thresholds[name]))
    return results
