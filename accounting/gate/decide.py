"""The gate's verdict on a whole matrix: every benchmark of the baseline and current runs.

:func:`judge` pairs benchmarks by fullname (the node id), leaves out current runs that the
load guard calls disturbed (:mod:`accounting.gate.guard`), adjusts the matrix's p-values
with Holm (:func:`accounting.gate.stats.holm`) and decides each benchmark with
:func:`accounting.gate.stats.compare_runs` at its own threshold (``benchmarks.json``:
per benchmark, else per device kind, else the default). A benchmark on one side only is
listed as *not compared*, with the side it is missing from — never silently dropped.

>>> from accounting.gate.storage import BenchmarkRun, SavedRun
>>> def run(path, median):
...     rounds = tuple(median * (1 + 0.01 * step) for step in (-2, -1, 0, 1, 2))
...     return SavedRun(path, {}, {"t::mm": BenchmarkRun("t::mm", rounds, {"device_kind": "cpu"})})
>>> result = judge([run(f"{i:04}_base.json", 0.015 + 0.0001 * i) for i in range(6)],
...                [run(f"current-{i}.json", 0.019 + 0.0001 * i) for i in range(4)], threshold_for=lambda kind, name: 10)
>>> [(verdict.name, verdict.decision.value) for verdict in result.verdicts], result.regressions[0].name
([('t::mm', 'regression')], 't::mm')
"""

import statistics
from dataclasses import dataclass

import numpy as np

from accounting.gate.guard import clock_mismatch, recorded_disturbances, run_clock_mhz
from accounting.gate.stats import (
    ALPHA,
    CONFIDENCE,
    Comparison,
    Decision,
    compare_runs,
    holm,
    log_spread,
    permutation_test,
    slow_outliers,
    smallest_convictable,
)
from accounting.gate.storage import check_run_metric

DEFAULT_METRIC = "min"
"""Each run's rounds are reduced to their minimum unless ``benchmarks.json`` or ``--metric`` says otherwise."""


@dataclass(frozen=True)
class Verdict:
    """One benchmark's row: its run medians on both sides and the decision (``None``: not compared)."""

    name: str
    kind: str | None
    threshold: float
    """The smallest slowdown that counts, as a fraction (0.10 = 10 %)."""
    decision: Decision | None
    reason: str
    baseline_values: tuple = ()
    """Each baseline run reduced to one number (seconds; the result's ``metric`` of its rounds), oldest first."""
    current_values: tuple = ()
    """... of each current run the comparison used (disturbed runs left out)."""
    disturbed_values: tuple = ()
    """... of each current run the load guard left out."""
    outlier_values: tuple = ()
    """... of each baseline run set aside as a slow outlier (:func:`accounting.gate.stats.slow_outliers`)."""
    current_outlier_values: tuple = ()
    """... of each current run set aside as a slow outlier (only where :func:`judge` screens them: ``gate ab``)."""
    comparison: Comparison | None = None

    @property
    def baseline_value(self) -> float | None:
        """The median over the baseline runs of their values (seconds)."""
        return statistics.median(self.baseline_values) if self.baseline_values else None

    @property
    def current_value(self) -> float | None:
        """The median over the current runs used of their values (seconds)."""
        return statistics.median(self.current_values) if self.current_values else None


@dataclass(frozen=True)
class GateResult:
    """Every benchmark's verdict, in name order, and the notes the summary prints under the table."""

    verdicts: tuple
    notes: tuple
    baseline_runs: tuple
    """File names of the baseline runs, oldest first."""
    current_runs: tuple
    alpha: float = ALPHA
    metric: str = DEFAULT_METRIC
    """What each run was reduced to: the ``min``, ``median`` or ``mean`` of its rounds."""
    baseline_grows: bool = False
    """Re-measuring adds baseline runs too (``gate ab``: each pair brings an A run), so every
    inconclusive benchmark is worth re-measuring, not only those with a baseline spread."""
    confidence: float = CONFIDENCE
    """Two-sided level of each ratio's interval (the table's header says it)."""

    @property
    def regressions(self) -> list[Verdict]:
        """The benchmarks the gate fails on."""
        return [verdict for verdict in self.verdicts if verdict.decision is Decision.REGRESSION]

    @property
    def suspects(self) -> list[str]:
        """Inconclusive benchmarks that fresh runs could decide (with a baseline spread, or a baseline that grows)."""
        return [verdict.name for verdict in self.verdicts
                if verdict.decision is Decision.INCONCLUSIVE and (self.baseline_grows or len(verdict.baseline_values) >= 2)]


def _current_disturbances(runs, baseline_runs) -> dict:
    """Current run path -> reasons it cannot be used (load guard, or a clock unlike the baseline's)."""
    clocks = [clock for clock in (run_clock_mhz(run.guard) for run in baseline_runs) if clock]
    baseline_clock = statistics.median(clocks) if clocks else None
    reasons = {}
    for run in runs:
        found = recorded_disturbances(run.guard)
        mismatch = clock_mismatch(run_clock_mhz(run.guard), baseline_clock)
        if mismatch:
            found.append(mismatch)
        if found:
            reasons[run.path] = found
    return reasons


def judge(baseline_runs, current_runs, *, threshold_for, alpha: float = ALPHA, notes=(),
          load_guard: bool = True, metric: str = DEFAULT_METRIC, disturbed_baseline=(),
          baseline_grows: bool = False, confidence: float = CONFIDENCE, screen_current: bool = False,
          baseline_from=None) -> GateResult:
    """Decide every benchmark of ``current_runs`` against ``baseline_runs`` (lists of :class:`SavedRun`).

    ``threshold_for(kind, name)`` gives a benchmark's threshold in percent
    (:meth:`accounting.bench.matrix.BenchConfig.regression_threshold`); ``notes`` are
    carried into the result (e.g. the baseline runs that were passed over). ``load_guard=False``
    uses every current run whatever its readings say (and says so in the notes). ``metric``
    reduces each run's rounds to one number (:meth:`BenchmarkRun.summary`; why the minimum is
    the default: :mod:`accounting.gate.stats`). ``disturbed_baseline``: baseline runs the load
    guard left out (``gate ab``'s A runs); a benchmark whose every baseline run is among them is
    *inconclusive*, not *not compared*. ``baseline_grows``: see :attr:`GateResult.baseline_grows`.
    ``confidence``: the two-sided level of the ratio's interval (:func:`compare_runs`).
    ``screen_current``: set slow outliers of the current runs aside too, each side against its own
    median (:func:`accounting.gate.stats.slow_outliers`); for ``gate ab``, where both sides are
    interleaved runs of one job (why: :mod:`accounting.gate.ab`).
    ``baseline_from``: benchmark name -> label of the first baseline run its comparison may use
    (the first run after the last change point of its history, :func:`accounting.gate.history.last_steps`);
    older baseline runs are left out of that benchmark's baseline, so it is not compared across a step.
    """
    check_run_metric(metric)
    notes = list(notes)
    if len(baseline_runs) == 1:
        notes.append("only 1 baseline run: the gate cannot tell noise from change; save more baseline runs")
    disturbed = _current_disturbances(current_runs, baseline_runs) if load_guard else {}
    if not load_guard:
        notes.append("load guard off: runs on a loaded or throttled machine are used as they are")
    for run in current_runs:
        if run.path in disturbed:
            notes.append(f"{run.label} not used, measured on a disturbed machine: {'; '.join(disturbed[run.path])}")
    names = sorted({name for run in (*baseline_runs, *current_runs) for name in run.benchmarks})
    rows = {}
    for name in names:
        base = [run.benchmarks[name] for run in _window(baseline_runs, (baseline_from or {}).get(name))
                if name in run.benchmarks]
        clean = [run.benchmarks[name] for run in current_runs if name in run.benchmarks and run.path not in disturbed]
        noisy = [run.benchmarks[name] for run in current_runs if name in run.benchmarks and run.path in disturbed]
        kind = next((bench.kind for bench in (*clean, *noisy, *base) if bench.kind), None)
        threshold = threshold_for(kind, name) / 100
        kept, set_aside = _screened([bench.summary(metric) for bench in base], threshold)
        current = [bench.summary(metric) for bench in clean]
        current_kept, current_set_aside = _screened(current, threshold) if screen_current else (tuple(current), ())
        rows[name] = dict(kind=kind, threshold=threshold, baseline_values=kept, outlier_values=set_aside,
                          current_values=current_kept, disturbed_values=tuple(bench.summary(metric) for bench in noisy),
                          current_outlier_values=current_set_aside)
    comparable = [name for name, row in rows.items() if len(row["baseline_values"]) >= 2 and row["current_values"]]
    raw = {}
    for name in comparable:
        test = permutation_test(np.log(rows[name]["baseline_values"]), np.log(rows[name]["current_values"]))
        raw[name] = (test.p_greater, test.p_less)
    slower = dict(zip(comparable, holm([raw[name][0] for name in comparable])))
    faster = dict(zip(comparable, holm([raw[name][1] for name in comparable])))
    verdicts = []
    for name, row in rows.items():
        kind, threshold = row.pop("kind"), row.pop("threshold")
        if not row["baseline_values"] and not row["outlier_values"] and any(
                name in run.benchmarks for run in disturbed_baseline):
            verdicts.append(Verdict(name, kind, threshold, Decision.INCONCLUSIVE,
                                    "re-measure: every baseline run was measured on a disturbed machine", **row))
        elif not row["baseline_values"] and not row["outlier_values"]:
            verdicts.append(Verdict(name, kind, threshold, None, "no baseline: a new benchmark, or one the baseline "
                                                                  "runs did not run", **row))
        elif not row["current_values"] and not row["disturbed_values"]:
            verdicts.append(Verdict(name, kind, threshold, None, "not in the current run(s): deselected, skipped or "
                                                                  "failed", **row))
        elif not row["current_values"]:
            verdicts.append(Verdict(name, kind, threshold, Decision.INCONCLUSIVE,
                                    "re-measure: every current run was measured on a disturbed machine", **row))
        else:
            comparison = compare_runs(
                row["baseline_values"], row["current_values"], threshold=threshold, alpha=alpha,
                family=max(1, len(comparable)), confidence=confidence,
                p_adjust=(lambda p_slower, p_faster, name=name: (slower[name], faster[name])) if name in slower else None)
            reason = comparison.reason
            for side, key in (("baseline", "outlier_values"), ("current", "current_outlier_values")):
                if row[key]:
                    reason += (f" ({len(row[key])} slow outlier {side} run(s) set aside: "
                               f"{', '.join(f'{value * 1e3:.3g} ms' for value in row[key])})")
            verdicts.append(Verdict(name, kind, threshold, comparison.decision, reason, **row, comparison=comparison))
    return GateResult(tuple(verdicts), tuple(notes), tuple(run.label for run in baseline_runs),
                      tuple(run.label for run in current_runs), alpha, metric, baseline_grows, confidence)


def _window(runs, first_label):
    """``runs`` from the one labelled ``first_label`` on (all of them when it is ``None`` or not among them).

    >>> from accounting.gate.storage import SavedRun
    >>> [run.label for run in _window([SavedRun(f"000{i}_a.json", {}, {}) for i in range(4)], "0002_a.json")]
    ['0002_a.json', '0003_a.json']
    """
    labels = [run.label for run in runs]
    return list(runs)[labels.index(first_label):] if first_label in labels else list(runs)


def _screened(values, threshold: float) -> tuple[tuple, tuple]:
    """``values`` split into (those kept, the slow outliers set aside), each in the order given.

    >>> _screened([0.0241, 0.0242, 0.0249, 0.0253, 0.0370], 0.1)
    ((0.0241, 0.0242, 0.0249, 0.0253), (0.037,))
    """
    outliers = set(slow_outliers(values, threshold=threshold)) if values else set()
    return (tuple(value for index, value in enumerate(values) if index not in outliers),
            tuple(values[index] for index in sorted(outliers)))


def noise_notes(result, *, current_runs: int, cap_option: str = "--max-extra-runs") -> list[str]:
    """What the baseline noise of each still-inconclusive benchmark lets the gate convict (a line each).

    :func:`accounting.gate.stats.smallest_convictable` with the benchmark's baseline spread,
    its baseline runs and ``current_runs`` (the most the gate may take; ``cap_option`` sets that).
    """
    lines = []
    for verdict in result.verdicts:
        if verdict.name not in result.suspects or len(verdict.baseline_values) < 2:
            continue
        spread = log_spread(verdict.baseline_values)
        smallest = smallest_convictable(spread, len(verdict.baseline_values), current_runs,
                                        threshold=verdict.threshold, alpha=result.alpha,
                                        confidence=result.confidence)
        reach = (f"convicts a slowdown from about {smallest:.3g}× up" if smallest is not None
                 else "cannot reach the significance level at all")
        lines.append(f"{verdict.name}: its {len(verdict.baseline_values)} baseline runs spread by {spread:.2g} (sd of "
                     f"the logs of their {result.metric}); with {current_runs} current runs the gate {reach}. Less "
                     f"noise (a quieter machine, --threads 1) or a larger {cap_option} lowers that")
    return lines
