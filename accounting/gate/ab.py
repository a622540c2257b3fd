"""Interleaved A/B: both revisions measured in one job, in alternating fresh processes (``accounting gate ab``).

The saved-history gate (``gate save`` / ``gate check``) compares today's runs with runs
saved earlier on the same machine kind. On a shared host that is its weakness: the host's
speed drifts over minutes, so a baseline saved in a slow quarter of an hour makes a
slowdown read smaller than it is, and one saved in a fast one makes unchanged code read slow
(measured figures: docs/benchmarks-and-gate.md, "Interleaved A/B"). Firecracker's performance
tests answer this by running A (the base revision) and B (the change) in the same job; this
module does that:

- A runs in ``baseline_dir`` (a checkout of the base revision, e.g. ``git worktree add
  ../base origin/main``), B in the current tree, each in a fresh pytest process with the
  same arguments, with the tree put first on ``PYTHONPATH`` so each imports its own code;
- they alternate in pairs whose order flips each time (A B, B A, A B, …), so a drift of
  the host's speed, and a neighbour's load, fall on both sides alike;
- **a time budget, not a pair count**: ``start_pairs`` pairs are run for every benchmark, then
  one pair at a time of only the benchmarks still undecided (``-p accounting.gate._select``),
  while the next pair, predicted from the seconds the measured ones took
  (:class:`accounting.gate.budget.RoundClock`), still ends inside the budget (10 minutes by
  default); ``max_pairs`` is an upper bound for those who want one. Only the first pair runs
  the user's arguments as given (collecting the whole suite); the later ones collect just the
  benchmarks the first pair ran, by node id;
- **the verdict holds its false-alarm rate over every look** (:mod:`accounting.gate.sequential`):
  each pair gives one log ratio per benchmark, and bets on those ratios convict a benchmark
  when it is surely slower at α = 0.01 family-wise over the whole matrix and slower than its
  threshold with one-sided 90 % confidence, however many pairs were looked at; it clears one (*no change*, the futility stop) when its
  always-valid interval ends below the threshold, so unchanged benchmarks stop costing pairs.
  The rest of the row (values, work, memory, clocks, outliers named) is
  :func:`accounting.gate.decide.judge`'s, with A's runs as the baseline and B's as the current;
- **load is a condition to balance**: a neighbour's load falls on A and B alike, so a pair is
  set aside only when its two sides saw clearly different load (:data:`LOAD_DIFFERENCE_CPUS`) or
  one side was disturbed otherwise (throttled, its clock moved, a device fault); the notes say
  how loaded the job was (:func:`load_note`);
- after the start pairs a plan (:func:`accounting.gate.budget.plan`) says how many pairs the
  threshold needs at the spread measured and whether the budget covers them; ``--plan`` stops there.

Why the pairs' log ratios and not two groups: the two-group permutation test at a fixed number of
runs has no valid form over looks taken while the data come in; the sign symmetry of a pair's log
ratio under "no change" holds at every look whatever the noise's shape, and the betting test builds
on exactly that. It costs clear cases a few pairs (a bet at most doubles the wealth per pair, and
the wealth is averaged over stakes: 9 pairs at least to reach 1/0.01, where the two-group test's
fewest were 5).

>>> from accounting.gate.sequential import wealth
>>> bool(wealth([0.3] * 8, 0.05)[-1] >= 100), bool(wealth([0.3] * 9, 0.05)[-1] >= 100)  # 9 clear pairs at least
(False, True)
"""

import dataclasses
import math
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from accounting.errors import AccountingError
from accounting.gate.budget import DEFAULT_BUDGET_S, Plan, RoundClock, plan
from accounting.gate.decide import GateResult, Verdict, judge
from accounting.gate.guard import FOREIGN_CPU_LIMIT, foreign_cpu_limit, recorded_disturbances, run_load
from accounting.gate.sequential import FUTILITY_LEVEL, decide
from accounting.gate.stats import ALPHA, Comparison, Decision
from accounting.gate.storage import hardware_difference, load_run

AB_CONFIDENCE = 0.80
"""The fixed-pair rule's level, before the sequential test (kept for the studies that replay it).

Two-sided level of the ratio's interval in an A/B verdict: a regression's ratio must be above
the threshold with one-sided 90 % confidence, where the saved-history gate asks 95 %
(:data:`accounting.gate.stats.CONFIDENCE`).

Why A/B may ask less: that 95 % is there for slow episodes of the host that last several
processes — in a saved history they all fall on the current side and read as a slowdown. In
interleaved pairs such an episode falls on A and B alike, and false alarms are held by the
permutation test's ``p <= alpha`` alone. What the interval's level then buys is how surely a
convicted slowdown exceeds the threshold; at 80 % more slowdowns just above the threshold are
convicted, and unchanged jobs are decided after fewer pairs, with no more false alarms
(replayed figures: docs/benchmarks-and-gate.md, "Interleaved A/B").
"""
DEFAULT_START_PAIRS = 3
"""Pairs run for every benchmark before the first verdict: 3 A against 3 B can already exclude a
slowdown (*no change*) on a quiet machine, though not yet convict one (smallest p 1/20)."""
DEFAULT_MAX_PAIRS = None
"""No cap on the pairs by default: the budget ends the job (``--max-pairs`` sets one for those who want one)."""
SEQUENTIAL_CONFIDENCE = 1 - 2 * FUTILITY_LEVEL
"""Level of the always-valid interval an A/B verdict prints (each end at
:data:`accounting.gate.sequential.FUTILITY_LEVEL`, over every look)."""
LOAD_DIFFERENCE_CPUS = 0.5
"""CPUs of other processes' load by which the two runs of a pair may differ before the pair is set aside: half a
CPU is a neighbour busy through most of one side's run and idle through the other's. Less is the load falling on
A and B alike, which alternation balances. The rule looks at the two sides' loads alone, never at which side is
A, so an unchanged pair is as likely kept one way round as the other, and the test's level holds."""


@dataclass(frozen=True)
class Trees:
    """Where A and B run: the base revision's checkout and the changed one (``None``: the current directory)."""

    baseline_dir: str
    current_dir: str | None = None

    def check(self) -> "Trees":
        """Both exist and are directories; A is not B."""
        for label, folder in (("--baseline-dir", self.baseline_dir), ("the current tree", self.current_dir or ".")):
            if not Path(folder).is_dir():
                raise AccountingError(f"{label} is not a directory: {folder!r}")
        if Path(self.baseline_dir).resolve() == Path(self.current_dir or ".").resolve():
            raise AccountingError(f"--baseline-dir {self.baseline_dir!r} is the current tree: A and B would be the same "
                                  "code; check the base revision out elsewhere (git worktree add ../base origin/main)")
        return self


def tree_environment(folder: str, environ: dict) -> dict:
    """Variables for a pytest process run in ``folder``: the folder first on ``PYTHONPATH``.

    >>> tree_environment("/ci/base", {"PYTHONPATH": "/opt/lib"})
    {'PYTHONPATH': '/ci/base:/opt/lib'}
    >>> tree_environment("/ci/base", {})
    {'PYTHONPATH': '/ci/base'}
    """
    existing = environ.get("PYTHONPATH")
    path = str(Path(folder).absolute())
    return {"PYTHONPATH": path if not existing else path + os.pathsep + existing}


def _identity_check(runs):
    first = runs[0]
    kinds = {bench.kind or "cpu" for run in runs for bench in run.benchmarks.values()}
    for run in runs[1:]:
        difference = hardware_difference(first.machine, run.machine, kinds)
        if difference:
            raise AccountingError(f"{run.path}: A and B runs record different hardware or software ({difference}); "
                                  "both trees must run in the same environment")


@dataclass
class Pair:
    """One A/B pair as it ran: its number (the order flips with it), the runs (``None``: nothing ran), seconds."""

    number: int
    a: object = None
    b: object = None
    seconds: float = 0.0
    benchmarks: int = 0


def load_limit(pair: Pair) -> float:
    """How much more other processes' load (CPUs) one side of a pair may have seen than the other before the pair is
    set aside: :data:`LOAD_DIFFERENCE_CPUS`, or the load guard's own limit on a machine large enough for it to be
    more (:func:`accounting.gate.guard.foreign_cpu_limit`)."""
    cpus = None
    for run in (pair.a, pair.b):
        record = (run.guard or {}).get("host_cpu") if run is not None else None
        cpus = cpus or (record or {}).get("cpus")
    return max(LOAD_DIFFERENCE_CPUS, foreign_cpu_limit(cpus))


def sort_pairs(pairs, load_guard: bool):
    """The pairs a verdict may use, and a note for each one set aside: a side disturbed otherwise than by load
    (throttled, its clock moved, a fault), or two sides whose load differed by more than :func:`load_limit`."""
    kept, notes = [], []
    for pair in pairs:
        if pair.a is None or pair.b is None:
            continue
        if not load_guard:
            kept.append(pair)
            continue
        reasons = [f"{label} run {run.label}: {'; '.join(found)}" for label, run in (("A", pair.a), ("B", pair.b))
                   for found in [recorded_disturbances(run.guard, load=False)] if found]
        loads = [run_load(run.guard) for run in (pair.a, pair.b)]
        if not reasons and None not in loads and abs(loads[0] - loads[1]) > load_limit(pair):
            reasons.append(f"other processes used {loads[0]:.2g} CPUs during A's run and {loads[1]:.2g} during B's "
                           f"(unequal load: limit {load_limit(pair):.2g} apart)")
        if reasons:
            notes.append(f"pair {pair.number} not used, measured on a disturbed machine: {'; '.join(reasons)}")
        else:
            kept.append(pair)
    return kept, notes


def load_note(pairs) -> str | None:
    """How loaded the job's machine was: other processes' CPUs during the runs of ``pairs`` (``None``: not read)."""
    loads = sorted(load for pair in pairs for run in (pair.a, pair.b) if run is not None
                   for load in [run_load(run.guard)] if load is not None)
    if not loads:
        return None
    middle = loads[len(loads) // 2]
    state = "quiet" if loads[-1] <= FOREIGN_CPU_LIMIT else "loaded"
    return (f"load: {state}; other processes used {loads[0]:.2g}–{loads[-1]:.2g} CPUs (median {middle:.2g}) during "
            f"the {len(loads)} runs; A and B, alternating, share it")


def pair_ratios(pairs, name: str, metric: str) -> list:
    """``(pair number, log B − log A)`` of one benchmark over the pairs that ran it on both sides, in order."""
    found = []
    for pair in pairs:
        a, b = pair.a.benchmarks.get(name), pair.b.benchmarks.get(name)
        if a is not None and b is not None and not a.problem and not b.problem:
            found.append((pair.number, math.log(b.summary(metric)) - math.log(a.summary(metric))))
    return found


def _sequential_verdict(verdict: Verdict, figures, *, alpha: float, metric: str) -> Verdict:
    """``verdict`` (judge's row: its values, memory, clocks) with the sequential test's decision and figures."""
    decision = Decision(figures.decision)
    percent = f"{verdict.threshold * 100:g} %"
    if decision is Decision.REGRESSION:
        reason = (f"{figures.ratio:.3g}× slower after {figures.pairs} pairs (p = {figures.p_slower:.2g} ≤ {alpha:g} "
                  f"over every look), by more than {percent} (lower bound {figures.low:.3g}×)")
    elif decision is Decision.IMPROVEMENT:
        reason = (f"{1 / figures.ratio:.3g}× faster after {figures.pairs} pairs (p = {figures.p_faster:.2g} ≤ "
                  f"{alpha:g} over every look), by more than {percent}")
    elif decision is Decision.NO_CHANGE:
        reason = f"a slowdown of {percent} is excluded after {figures.pairs} pairs (upper bound {figures.high:.3g}×)"
    else:
        reason = (f"re-measure: {figures.ratio:.3g}× is neither shown nor excluded beyond the {percent} threshold "
                  f"after {figures.pairs} pairs (p = {figures.p_slower:.2g})")
    judged = verdict.reason
    if verdict.comparison is not None and judged.startswith(verdict.comparison.reason):
        reason += judged[len(verdict.comparison.reason):]  # the table's own notes: outliers set aside, clocks
    comparison = Comparison(decision, reason, figures.ratio, figures.low, figures.high, SEQUENTIAL_CONFIDENCE,
                            figures.p_slower, figures.p_faster, alpha, verdict.threshold, figures.pairs,
                            figures.pairs, math.nan, "sequential", figures.detectable)
    return dataclasses.replace(verdict, decision=decision, reason=reason, comparison=comparison, pairs=figures.pairs)


def _verdict(pairs, config, *, notes, load_guard, metric):
    ran = [pair for pair in pairs if pair.a is not None and pair.b is not None]
    if ran:
        _identity_check([run for pair in ran for run in (pair.a, pair.b)])
    kept, skipped = sort_pairs(pairs, load_guard)
    metric = metric or config.regression_metric
    result = judge([pair.a for pair in kept], [pair.b for pair in kept], threshold_for=config.regression_threshold,
                   alpha=ALPHA, notes=[*skipped, *notes], load_guard=load_guard, metric=metric,
                   baseline_grows=True, confidence=SEQUENTIAL_CONFIDENCE, screen_current=True, balanced_load=True)
    judged = {verdict.name: verdict for verdict in result.verdicts if verdict.comparison is not None}
    figures = decide({name: pair_ratios(kept, name, metric) for name in judged},
                     {name: verdict.threshold for name, verdict in judged.items()}, alpha=ALPHA)
    verdicts = tuple(_sequential_verdict(verdict, figures[verdict.name], alpha=ALPHA, metric=metric)
                     if verdict.name in figures else verdict for verdict in result.verdicts)
    judged_names = {verdict.name for verdict in verdicts}
    set_aside = {}
    for pair in ran:
        for run in (pair.a, pair.b):
            for name, bench in run.benchmarks.items():
                if name not in judged_names:
                    set_aside.setdefault(name, bench.kind)
    verdicts += tuple(Verdict(name, kind, config.regression_threshold(kind, name) / 100, Decision.INCONCLUSIVE,
                              "re-measure: every pair was measured on a disturbed machine")
                      for name, kind in sorted(set_aside.items()))
    verdicts = tuple(sorted(verdicts, key=lambda verdict: verdict.name))
    return dataclasses.replace(result, verdicts=verdicts, adjustment="sequential"), kept


def nothing_ran(runner) -> GateResult:
    """The verdict on runs in which no benchmark ran (``-m gpu`` without a GPU): nothing compared, said so."""
    note = (f"no benchmark ran with the pytest arguments {' '.join(runner.pytest_args)!r} (all skipped, deselected "
            "or none collected); nothing to compare. `pytest -rs` with the same arguments shows why they were skipped")
    return GateResult((), (note, *runner.notes), (), ())


def first_plan(kept, result, config, *, metric, seconds_per_pair, budget_s, used_s) -> Plan | None:
    """The plan from the start pairs (:func:`accounting.gate.budget.plan`): the noisiest benchmark's pair spread."""
    metric = metric or config.regression_metric
    spreads = [(float(np.std([value for _, value in found], ddof=1)), verdict.threshold)
               for verdict in result.verdicts if verdict.comparison is not None
               for found in [pair_ratios(kept, verdict.name, metric)] if len(found) >= 2]
    if not spreads:
        return None
    spread, threshold = max(spreads)
    return plan(spread, threshold, seconds_per_pair=seconds_per_pair, budget_s=budget_s, used_s=used_s)


def gate_ab(runner_a, runner_b, config, *, start_pairs: int = DEFAULT_START_PAIRS, max_pairs: int | None = None,
            budget_s: float | None = DEFAULT_BUDGET_S, load_guard: bool = True, metric: str | None = None,
            progress=lambda text: None, started: float | None = None, clock=time.monotonic,
            plan_only: bool = False):
    """Run A and B in alternating pairs, then pairs of the still undecided benchmarks only, and decide.

    ``runner_a`` / ``runner_b``: :class:`accounting.gate.measure.Runner` instances for the two
    trees (their ``cwd`` and ``env`` differ; they should share ``own_runs``, so that the load
    guard counts both as the gate's own work). After ``start_pairs`` pairs of every benchmark, one
    pair of the undecided ones at a time while the next pair, predicted from the measured ones
    (:class:`accounting.gate.budget.RoundClock`), still ends inside ``budget_s`` seconds from ``started``
    (``None``: no budget) and ``max_pairs`` (``None``: no cap) is not reached. ``plan_only``: stop after the
    start pairs, with the plan (:func:`accounting.gate.budget.plan`) in the notes.
    Returns ``(result, A runs, B runs, pairs run)``.
    """
    if start_pairs < 1 or (max_pairs is not None and start_pairs > max_pairs):
        raise AccountingError(f"the pairs must satisfy 1 <= --start-pairs <= --max-pairs, got {start_pairs} and "
                              f"{max_pairs}")
    started = clock() if started is None else started
    pairs, rounds = [], RoundClock()

    def run_pair(number, only):
        order = (("A", runner_a, "a"), ("B", runner_b, "b"))
        pair, began = Pair(number), clock()
        for label, runner, side in (order if number % 2 else order[::-1]):
            mine = None if only is None else [name for name in only if name in runner.node_ids]
            measured = runner.run(f"{label.lower()}-{number}", only=mine if mine else None)
            progress(f"pair {number}, {label}: {measured.summary} ({measured.duration_s:.1f} s)")
            if measured.path is not None:
                setattr(pair, side, load_run(measured.path))
        pair.seconds = clock() - began
        pair.benchmarks = len(only) if only is not None else len(
            {name for run in (pair.a, pair.b) if run is not None for name in run.benchmarks})
        rounds.add(pair.benchmarks, pair.seconds)
        pairs.append(pair)
        return pair.a is not None or pair.b is not None

    def verdict():
        began = clock()
        decided = _verdict(pairs, config, notes=[*runner_a.notes, *runner_b.notes], load_guard=load_guard,
                           metric=metric)
        count, seconds = rounds.rounds[-1]
        rounds.rounds[-1] = (count, seconds + clock() - began)  # a round is its pair and the verdict after it
        return decided

    def a_and_b():
        return [pair.a for pair in pairs if pair.a is not None], [pair.b for pair in pairs if pair.b is not None]

    if not run_pair(1, None):
        return (nothing_ran(runner_b), *a_and_b(), 1)
    ran_first = sorted({name for pair in pairs for run in (pair.a, pair.b) if run is not None for name in run.benchmarks})
    stop = None
    for number in range(2, start_pairs + 1):
        if not rounds.fits(len(ran_first), clock() - started, budget_s):
            stop = "budget"
            break
        run_pair(number, ran_first)  # the benchmarks the first pair ran, by node id: no whole-suite collection
    result, kept = verdict()
    used = clock() - started
    the_plan = first_plan(kept, result, config, metric=metric, seconds_per_pair=rounds.predict(len(ran_first)),
                          budget_s=budget_s, used_s=used)
    if the_plan is not None:
        progress(the_plan.text())
    while result.suspects and not plan_only and stop is None:
        if max_pairs is not None and len(pairs) >= max_pairs:
            stop = "cap"
            break
        if not rounds.fits(len(result.suspects), clock() - started, budget_s):
            stop = "budget"
            break
        progress(f"re-measuring {len(result.suspects)} undecided benchmark(s): pair {len(pairs) + 1} "
                 f"({clock() - started:.0f} s of the {_budget_text(budget_s)} used)")
        run_pair(len(pairs) + 1, list(result.suspects))
        result, kept = verdict()
    used = clock() - started
    notes = [f"A/B: {len(pairs)} interleaved pair(s) of fresh processes, A = the baseline tree, B = the current tree; "
             f"{used:.0f} s of the {_budget_text(budget_s)}"
             + (f" ({100 * used / budget_s:.0f} %)" if budget_s else "") + " used"]
    notes.append(load_note(pairs) or "load: not read (no CPU time or load average recorded)")
    if plan_only:
        notes.append("--plan: only the start pairs were run; the plan above says what a job needs")
    if the_plan is not None and (plan_only or (result.suspects and not the_plan.fits)):
        notes.append(the_plan.text())
    if result.suspects and not plan_only:
        why = ("the budget ran out: --budget" if stop == "budget" else
               f"the cap, --max-pairs {max_pairs}" if stop == "cap" else "nothing left to re-measure")
        notes.append(f"still inconclusive after {len(pairs)} pairs ({why}): {', '.join(result.suspects)}")
    return (replace(result, notes=(*result.notes, *notes)), *a_and_b(), len(pairs))


def _budget_text(budget_s: float | None) -> str:
    return f"budget of {budget_s:.0f} s" if budget_s else "job (no budget)"
