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
  the host's speed during the job falls on both sides alike;
- the verdict is the saved-history gate's own (:func:`accounting.gate.decide.judge`: the
  permutation test over runs, the ratio's interval, Holm across the matrix, the load guard,
  slow outliers set aside), with A's runs as the baseline and B's as the current runs, with
  two differences: an 80 % interval in place of 90 % (:data:`AB_CONFIDENCE`: why), and slow
  outliers set aside on *both* sides, each against its own median (below: why);
- ``start_pairs`` pairs are run for every benchmark, then pairs of only the inconclusive
  ones (``-p accounting.gate._select``), up to ``max_pairs`` in all. Only the first pair runs
  the user's arguments as given (collecting the whole suite); the later ones collect just the
  benchmarks the first pair ran, by node id.
- the p-values are adjusted across the matrix by a joint permutation of the runs (min-P,
  :func:`accounting.gate.stats.joint_permutation_test`), not Holm's: every benchmark of an A/B
  job is measured in the same processes, and Holm would make a matrix of 16 slowed benchmarks
  wait 7 pairs for a verdict one benchmark reaches in 5.

Why the pairs' runs are compared as two groups, not pair by pair: on a shared host a
process's luck predicts little of its neighbour's (consecutive processes' log fastest rounds
are barely autocorrelated), so a paired (sign-flip) test would only lose power (its smallest
p is 2⁻ⁿ against 1/binom(2n, n)). What interleaving removes is the drift over minutes. How
often the two-group verdict convicts a slowdown, in replays of kept unchanged processes and
in live jobs, is measured in docs/benchmarks-and-gate.md ("Interleaved A/B" and "Measured
error rates of ab").

Why both sides are screened for slow outliers (:func:`accounting.gate.stats.slow_outliers`),
where the saved-history gate screens only its history: there the current runs are few and a
slow one may be the regression itself; here B has as many runs as A, and a regression moves
B's own median with it, so only B's strays are set aside. Screening A alone biases unchanged
jobs upward: A's slow runs are dropped and B's kept, so unchanged code reads slower than it
is. Screening both sides decides more unchanged jobs *no change*, after fewer pairs, with about
the same detection (replayed figures: docs/benchmarks-and-gate.md).

>>> from accounting.gate.stats import min_pvalue
>>> min_pvalue(4, 4) > 0.01 >= min_pvalue(5, 5)   # 5 pairs are the fewest that can convict alone: 1/252
True
"""

import os
from dataclasses import dataclass, replace
from pathlib import Path

from accounting.errors import AccountingError
from accounting.gate.decide import GateResult, judge, noise_notes
from accounting.gate.guard import recorded_disturbances
from accounting.gate.stats import ALPHA
from accounting.gate.storage import hardware_difference, load_run

AB_CONFIDENCE = 0.80
"""Two-sided level of the ratio's interval in an A/B verdict: a regression's ratio must be above
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
DEFAULT_MAX_PAIRS = 8
"""Pairs in all, the re-measured suspects' included: 16 pytest processes. A lower cap ends a job
sooner and convicts fewer slowdowns, a higher one convicts more and takes longer (job times and
replays at 6, 8 and 10 pairs: docs/benchmarks-and-gate.md)."""


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


def _usable_a(a_runs, load_guard: bool):
    """A's runs the verdict may use, those the load guard leaves out, and a note for each of those."""
    if not load_guard:
        return list(a_runs), [], []
    used, left_out, notes = [], [], []
    for run in a_runs:
        reasons = recorded_disturbances(run.guard)
        if reasons:
            left_out.append(run)
            notes.append(f"A run {run.label} not used, measured on a disturbed machine: {'; '.join(reasons)}")
        else:
            used.append(run)
    return used, left_out, notes


def _verdict(a_runs, b_runs, config, *, notes, load_guard, metric):
    _identity_check([*a_runs, *b_runs])
    used, left_out, skipped = _usable_a(a_runs, load_guard)
    return judge(used, b_runs, threshold_for=config.regression_threshold, alpha=ALPHA,
                 notes=[*skipped, *notes], load_guard=load_guard, metric=metric or config.regression_metric,
                 disturbed_baseline=left_out, baseline_grows=True, confidence=AB_CONFIDENCE, screen_current=True,
                 joint=True)


def nothing_ran(runner) -> GateResult:
    """The verdict on runs in which no benchmark ran (``-m gpu`` without a GPU): nothing compared, said so."""
    note = (f"no benchmark ran with the pytest arguments {' '.join(runner.pytest_args)!r} (all skipped, deselected "
            "or none collected); nothing to compare. `pytest -rs` with the same arguments shows why they were skipped")
    return GateResult((), (note, *runner.notes), (), ())


def gate_ab(runner_a, runner_b, config, *, start_pairs: int = DEFAULT_START_PAIRS,
            max_pairs: int = DEFAULT_MAX_PAIRS, load_guard: bool = True, metric: str | None = None,
            progress=lambda text: None):
    """Run A and B in alternating pairs, then pairs of the suspects only, and decide.

    ``runner_a`` / ``runner_b``: :class:`accounting.gate.measure.Runner` instances for the two
    trees (their ``cwd`` and ``env`` differ; they should share ``own_runs``, so that the load
    guard counts both as the gate's own work). Returns ``(result, A runs, B runs, pairs run)``.
    """
    if not 1 <= start_pairs <= max_pairs:
        raise AccountingError(f"the pairs must satisfy 1 <= --start-pairs <= --max-pairs, got {start_pairs} and "
                              f"{max_pairs}")
    a_runs, b_runs = [], []

    def run_pair(number, only):
        order = (("A", runner_a, a_runs), ("B", runner_b, b_runs))
        ran = False
        for label, runner, runs in (order if number % 2 else order[::-1]):
            mine = None if only is None else [name for name in only if name in runner.node_ids]
            measured = runner.run(f"{label.lower()}-{number}", only=mine if mine else None)
            progress(f"pair {number}, {label}: {measured.summary} ({measured.duration_s:.1f} s)")
            if measured.path is not None:
                runs.append(load_run(measured.path))
                ran = True
        return ran

    if not run_pair(1, None):
        return nothing_ran(runner_b), a_runs, b_runs, 1
    ran_first = sorted({name for run in (*a_runs, *b_runs) for name in run.benchmarks})
    for number in range(2, start_pairs + 1):
        run_pair(number, ran_first)  # the benchmarks the first pair ran, by node id: no whole-suite collection
    result = _verdict(a_runs, b_runs, config, notes=[*runner_a.notes, *runner_b.notes], load_guard=load_guard,
                      metric=metric)
    pairs = start_pairs
    while result.suspects and pairs < max_pairs:
        pairs += 1
        progress(f"re-measuring {len(result.suspects)} inconclusive benchmark(s): pair {pairs} of at most {max_pairs}")
        run_pair(pairs, list(result.suspects))
        result = _verdict(a_runs, b_runs, config, notes=[*runner_a.notes, *runner_b.notes], load_guard=load_guard,
                          metric=metric)
    notes = [f"A/B: {pairs} interleaved pair(s) of fresh processes, A = the baseline tree, B = the current tree"]
    if result.suspects:
        notes.append(f"still inconclusive after {pairs} pairs (the cap, --max-pairs): {', '.join(result.suspects)}")
        notes += noise_notes(result, current_runs=max_pairs, cap_option="--max-pairs")
    return replace(result, notes=(*result.notes, *notes)), a_runs, b_runs, pairs
