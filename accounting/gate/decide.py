"""The gate's verdict on a whole matrix: every benchmark of the baseline and current runs.

:func:`judge` pairs benchmarks by fullname (the node id), leaves out current runs that the
load guard calls disturbed (:mod:`accounting.gate.guard`), adjusts the matrix's p-values
with Holm (:func:`accounting.gate.stats.holm`) and decides each benchmark with
:func:`accounting.gate.stats.compare_runs` at its own threshold (``benchmarks.json``:
per benchmark, else per device kind, else the default). A benchmark on one side only is
listed as *not compared*, with the side it is missing from — never silently dropped.

Two things are compared exactly, not statistically, because they are exact
(:attr:`accounting.gate.storage.BenchmarkRun.work` and ``.memory``):

- **The work.** A benchmark's FLOPs, shape, dtype and device are recorded by the fixture.
  Baseline runs of other work are not compared with the current ones; where none is left the
  row says *work changed*, from what to what, and gives no time verdict (a 1.25× longer time
  for 1.25× the FLOPs is not a regression of the code, nor is it "no change").
- **Peak memory.** One call's peak is deterministic for the same work: the live-tensor
  tracker's storage bytes exactly, the CUDA allocator's peak up to its rounding. A current
  run above every baseline run by more than :func:`memory_tolerance` is a **memory
  regression**, which fails the gate like a time regression, with no statistics needed.

A benchmark whose runs the gate cannot judge (too few rounds: :func:`accounting.gate.storage.rounds_problem`)
is *not compared*, with that reason; the others are judged as usual.

>>> from accounting.gate.storage import BenchmarkRun, SavedRun
>>> def run(path, median):
...     rounds = tuple(median * (1 + 0.01 * step) for step in (-2, -1, 0, 1, 2))
...     return SavedRun(path, {}, {"t::mm": BenchmarkRun("t::mm", rounds, {"device_kind": "cpu"})})
>>> result = judge([run(f"{i:04}_base.json", 0.015 + 0.0001 * i) for i in range(6)],
...                [run(f"current-{i}.json", 0.019 + 0.0001 * i) for i in range(4)], threshold_for=lambda kind, name: 10)
>>> [(verdict.name, verdict.decision.value) for verdict in result.verdicts], result.regressions[0].name
([('t::mm', 'regression')], 't::mm')
"""

import dataclasses
import statistics
from dataclasses import dataclass

import numpy as np

from accounting.gate.gpu_rounds import clock_note, screen_rounds, side_clocks
from accounting.gate.guard import clock_mismatch, recorded_disturbances, run_clock_mhz
from accounting.gate.power import too_noisy as hides_threshold
from accounting.gate.stats import (
    ALPHA,
    CONFIDENCE,
    Comparison,
    Decision,
    compare_runs,
    holm,
    joint_permutation_test,
    log_spread,
    permutation_test,
    slow_outliers,
    smallest_convictable,
)
from accounting.gate.settings import same_settings
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
    work_change: str = ""
    """How the work differs from the baseline's (``"flops 2147483648 → 2684354560"``), where it does; then no time
    verdict is given."""
    baseline_memory: int | None = None
    """The largest peak memory (bytes) of one call among the baseline runs compared, where recorded."""
    current_memory: int | None = None
    """The smallest peak memory among the current runs, where recorded."""
    memory_source: str | None = None
    """Which figure the memories are (:data:`accounting.gate.storage.MEMORY_KEYS`)."""
    memory_regression: bool = False
    """The current peak is above the baseline's by more than :func:`memory_tolerance`."""
    baseline_clock_mhz: float | None = None
    """The median over the baseline runs compared of the clock their rounds ran at (GPUs: :mod:`accounting.gate.gpu_rounds`),
    where recorded."""
    current_clock_mhz: float | None = None
    """... over the current runs compared."""
    pairs: int | None = None
    """``gate ab``: the A/B pairs its sequential verdict rests on (:mod:`accounting.gate.sequential`); else ``None``."""
    @property
    def detectable(self) -> float | None:
        """The smallest slowdown (a ratio) the compared runs would have shown slower with 95 % power
        (:attr:`accounting.gate.stats.Comparison.detectable`); ``None`` where none could be, or nothing was compared."""
        return self.comparison.detectable if self.comparison is not None else None

    @property
    def too_noisy(self) -> bool:
        """Compared, but a slowdown of the threshold's size would be missed more than 5 % of the time."""
        return self.comparison is not None and hides_threshold(self.detectable, self.threshold)

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

    adjustment: str = "holm"
    """How the p-values were adjusted across the matrix: ``"holm"``, ``"min-p"``
    (:func:`accounting.gate.stats.joint_permutation_test`) or ``"sequential"`` (``gate ab``: always-valid p-values
    over every look, the closed test of the benchmarks' e-values, :mod:`accounting.gate.sequential`)."""
    loaded: str = ""
    """Why the machine was too loaded for a verdict on some benchmarks, when the budget ran out with them still
    undecided for that reason (``gate check``); the headline says so rather than passing silently."""

    @property
    def regressions(self) -> list[Verdict]:
        """The benchmarks slower beyond doubt and by more than their threshold."""
        return [verdict for verdict in self.verdicts if verdict.decision is Decision.REGRESSION]

    @property
    def memory_regressions(self) -> list[Verdict]:
        """The benchmarks whose peak memory rose beyond :func:`memory_tolerance`."""
        return [verdict for verdict in self.verdicts if verdict.memory_regression]

    @property
    def failed(self) -> bool:
        """The gate fails (exit status 1): a time or a memory regression."""
        return bool(self.regressions or self.memory_regressions)

    @property
    def suspects(self) -> list[str]:
        """Inconclusive benchmarks that fresh runs could decide (with a baseline spread, or a baseline that grows)."""
        return [verdict.name for verdict in self.verdicts
                if verdict.decision is Decision.INCONCLUSIVE and (self.baseline_grows or len(verdict.baseline_values) >= 2)]


def _current_disturbances(runs, baseline_runs, *, load: bool = True) -> dict:
    """Current run path -> reasons it cannot be used (load guard, or a clock unlike the baseline's); ``load=False``:
    the load rules left out (:func:`accounting.gate.guard.recorded_disturbances`)."""
    clocks = [clock for clock in (run_clock_mhz(run.guard) for run in baseline_runs) if clock]
    baseline_clock = statistics.median(clocks) if clocks else None
    reasons = {}
    for run in runs:
        found = recorded_disturbances(run.guard, load=load)
        mismatch = clock_mismatch(run_clock_mhz(run.guard), baseline_clock)
        if mismatch:
            found.append(mismatch)
        if found:
            reasons[run.path] = found
    return reasons


def judge(baseline_runs, current_runs, *, threshold_for, alpha: float = ALPHA, notes=(),
          load_guard: bool = True, metric: str = DEFAULT_METRIC, disturbed_baseline=(),
          baseline_grows: bool = False, confidence: float = CONFIDENCE, screen_current: bool = False,
          baseline_from=None, joint: bool = False, balanced_load: bool = False) -> GateResult:
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
    ``joint``: adjust the p-values across the matrix by a joint permutation of the runs (min-P,
    :func:`accounting.gate.stats.joint_permutation_test`) instead of Holm; for ``gate ab``, whose
    benchmarks share their processes.
    ``balanced_load``: other processes' load does not set a current run aside (the load guard's other rules still
    do); for ``gate ab``, whose pairs balance the load and whose caller sets aside pairs of unequal load.
    """
    check_run_metric(metric)
    notes = list(notes)
    baseline_runs, other_settings = same_settings(baseline_runs, current_runs, notes)
    if len(baseline_runs) == 1:
        notes.append("only 1 baseline run: the gate cannot tell noise from change; save more baseline runs")
    disturbed = _current_disturbances(current_runs, baseline_runs, load=not balanced_load) if load_guard else {}
    if not load_guard:
        notes.append("load guard off: runs on a loaded or throttled machine are used as they are")
    for run in current_runs:
        if run.path in disturbed:
            notes.append(f"{run.label} not used, measured on a disturbed machine: {'; '.join(disturbed[run.path])}")
    names = sorted({name for run in (*baseline_runs, *current_runs) for name in run.benchmarks})
    rows, fixed = {}, {}
    for name in names:
        base_all = [(run.path, run.benchmarks[name])
                    for run in _window(baseline_runs, (baseline_from or {}).get(name)) if name in run.benchmarks]
        current_all = [(run.path, run.benchmarks[name]) for run in current_runs if name in run.benchmarks]
        kind = next((bench.kind for _, bench in (*current_all, *base_all) if bench.kind), None)
        threshold = threshold_for(kind, name) / 100
        work = current_all[0][1].work if current_all else {}
        same_work = [(path, bench) for path, bench in base_all if not work_difference(bench.work, work)]
        if not base_all and current_all and other_settings:
            fixed[name] = Verdict(name, kind, threshold, None, f"not compared: every baseline run was taken under "
                                  f"other settings ({other_settings[0]}); runs under different power limits or "
                                  "application clocks are not compared")
            continue
        if base_all and current_all and not same_work:
            change = work_difference(base_all[-1][1].work, work)
            fixed[name] = Verdict(name, kind, threshold, None, f"work changed: {change}; times of different work are "
                                  "not compared", work_change=change)
            continue
        if len(same_work) < len(base_all):
            notes.append(f"{name}: {len(base_all) - len(same_work)} baseline run(s) of other work left out "
                         f"({work_difference(base_all[0][1].work, work)})")
        # Memory is not disturbed by load: the baseline runs the load guard left out count too.
        set_aside_base = [(run.path, run.benchmarks[name]) for run in disturbed_baseline if name in run.benchmarks]
        memory = _memory([*same_work, *((path, bench) for path, bench in set_aside_base
                                        if not work_difference(bench.work, work))], current_all)
        problems = [bench.problem for _, bench in (*same_work, *current_all) if bench.problem]
        base = [(path, bench) for path, bench in same_work if not bench.problem]
        judged_current = [(path, bench) for path, bench in current_all if not bench.problem]
        if problems and (not base or not judged_current):
            fixed[name] = Verdict(name, kind, threshold, None, f"not judged: {problems[0]}", **memory)
            continue
        base, judged_current, round_notes, clocks = screen_rounds(base, judged_current, current_runs, load_guard)
        notes.extend(f"{name}: {note}" for note in (*round_notes["baseline"], *round_notes["current"]))
        clean = [(path, bench.summary(metric)) for path, bench in judged_current if path not in disturbed]
        noisy = [bench.summary(metric) for path, bench in judged_current if path in disturbed]
        noisy += [bench.summary(metric) for path, bench in current_all
                  if not bench.problem and path not in disturbed and (path, bench) not in judged_current]
        kept, set_aside = _screened_pairs([(path, bench.summary(metric)) for path, bench in base], threshold)
        current_kept, current_set_aside = _screened_pairs(clean, threshold) if screen_current else (clean, ())
        rows[name] = {"kind": kind, "threshold": threshold, "kept": kept, "current_kept": current_kept,
                      "memory": {**memory, **side_clocks(clocks, kept, current_kept)},
                      "base_rounds_disturbed": bool(same_work) and not base,
                      "rounds_reason": next(iter(round_notes["current"]), ""),
                      "values": {"baseline_values": tuple(value for _, value in kept),
                                 "outlier_values": tuple(set_aside),
                                 "current_values": tuple(value for _, value in current_kept),
                                 "disturbed_values": tuple(noisy),
                                 "current_outlier_values": tuple(current_set_aside)}}
    comparable = [name for name, row in rows.items() if len(row["kept"]) >= 2 and row["current_kept"]]
    if joint:
        joint_p = joint_permutation_test({name: ({path: np.log(value) for path, value in rows[name]["kept"]},
                                                 {path: np.log(value) for path, value in rows[name]["current_kept"]})
                                          for name in comparable})
        slower = {name: joint_p[name].adjusted_greater for name in comparable}
        faster = {name: joint_p[name].adjusted_less for name in comparable}
    else:
        raw = {}
        for name in comparable:
            test = permutation_test(np.log(rows[name]["values"]["baseline_values"]),
                                    np.log(rows[name]["values"]["current_values"]))
            raw[name] = (test.p_greater, test.p_less)
        slower = dict(zip(comparable, holm([raw[name][0] for name in comparable])))
        faster = dict(zip(comparable, holm([raw[name][1] for name in comparable])))
    verdicts = []
    for name in names:
        if name in fixed:
            verdicts.append(fixed[name])
            continue
        row = rows[name]
        kind, threshold, memory, values = row["kind"], row["threshold"], row["memory"], row["values"]
        if not values["baseline_values"] and not values["outlier_values"] and (row["base_rounds_disturbed"] or any(
                name in run.benchmarks for run in disturbed_baseline)):
            verdicts.append(Verdict(name, kind, threshold, Decision.INCONCLUSIVE,
                                    "re-measure: every baseline run was measured on a disturbed machine", **values,
                                    **memory))
        elif not values["baseline_values"] and not values["outlier_values"]:
            verdicts.append(Verdict(name, kind, threshold, None, "no baseline: a new benchmark, or one the baseline "
                                                                  "runs did not run", **values, **memory))
        elif not values["current_values"] and not values["disturbed_values"] and not values["current_outlier_values"]:
            verdicts.append(Verdict(name, kind, threshold, None, "not in the current run(s): deselected, skipped or "
                                                                  "failed", **values, **memory))
        elif not values["current_values"]:
            verdicts.append(Verdict(name, kind, threshold, Decision.INCONCLUSIVE,
                                    "re-measure: every current run was measured on a disturbed machine"
                                    + (f"; {row['rounds_reason']}" if row["rounds_reason"] else ""), **values,
                                    **memory))
        else:
            comparison = compare_runs(
                values["baseline_values"], values["current_values"], threshold=threshold, alpha=alpha,
                family=1 if joint else max(1, len(comparable)), confidence=confidence,
                p_adjust=(lambda p_slower, p_faster, name=name: (slower[name], faster[name])) if name in slower else None)
            reason = comparison.reason
            note = clock_note(memory.get("baseline_clock_mhz"), memory.get("current_clock_mhz"), comparison.ratio)
            if note and comparison.decision in (Decision.REGRESSION, Decision.IMPROVEMENT):
                reason += f" ({note})"
            for side, key in (("baseline", "outlier_values"), ("current", "current_outlier_values")):
                if values[key]:
                    reason += (f" ({len(values[key])} slow outlier {side} run(s) set aside: "
                               f"{', '.join(f'{value * 1e3:.3g} ms' for value in values[key])})")
            verdicts.append(Verdict(name, kind, threshold, comparison.decision, reason, **values, **memory,
                                    comparison=comparison))
    return GateResult(tuple(verdicts), tuple(notes), tuple(run.label for run in baseline_runs),
                      tuple(run.label for run in current_runs), alpha, metric, baseline_grows, confidence,
                      "min-p" if joint else "holm")


def with_threshold(config, threshold: float | None):
    """``config`` (a :class:`accounting.bench.matrix.BenchConfig`) with one regression threshold for every benchmark
    (``threshold``, a fraction: 0.05 = 5 %), its per-kind and per-benchmark ones dropped; unchanged for ``None``.

    A threshold a team asks for on the command line (``--threshold 0.05``) is meant for the whole matrix.

    >>> from accounting.bench.matrix import load_benchmarks
    >>> config = with_threshold(load_benchmarks(), 0.05)
    >>> config.regression_threshold("cpu", "tests/t.py::test_mm"), config.regression_threshold("cuda")
    (5.0, 5.0)
    """
    if threshold is None:
        return config
    return dataclasses.replace(config, regression_threshold_percent=threshold * 100, regression_per_kind={},
                               regression_per_benchmark={})


def _window(runs, first_label):
    """``runs`` from the one labelled ``first_label`` on (all of them when it is ``None`` or not among them).

    >>> from accounting.gate.storage import SavedRun
    >>> [run.label for run in _window([SavedRun(f"000{i}_a.json", {}, {}) for i in range(4)], "0002_a.json")]
    ['0002_a.json', '0003_a.json']
    """
    labels = [run.label for run in runs]
    return list(runs)[labels.index(first_label):] if first_label in labels else list(runs)


def _screened_pairs(pairs, threshold: float) -> tuple[list, list]:
    """``(run, value)`` pairs split into (the pairs kept, the values of the slow outliers set aside)."""
    _, set_aside = _screened([value for _, value in pairs], threshold)
    outliers = set(set_aside)
    return [pair for pair in pairs if pair[1] not in outliers], list(set_aside)


CUDA_MEMORY_TOLERANCE = 2 * 2**20
"""Bytes a CUDA allocator peak may rise before it is a memory regression: the caching allocator rounds each
request up to 512 bytes and may hand out a whole block of up to 1 MiB more than asked when splitting it would
leave too little (its large-pool rule), so the same work can read up to about 1 MiB apart; 2 MiB covers that
with room, and is far below a buffer a change adds to a benchmark of this suite's sizes (a 1024² float32 matrix
is 4 MiB)."""


def memory_tolerance(source: str) -> int:
    """How many bytes a peak of ``source`` may rise and still be the same memory.

    The live-tensor tracker (``peak_memory_bytes``) counts exact storage bytes: no allocator, no rounding, so
    none. The CUDA allocator's peak (``cuda_peak_allocated_bytes``): :data:`CUDA_MEMORY_TOLERANCE`.

    >>> memory_tolerance("peak_memory_bytes"), memory_tolerance("cuda_peak_allocated_bytes")
    (0, 2097152)
    """
    return CUDA_MEMORY_TOLERANCE if source.startswith("cuda") else 0


def _memory(base, current) -> dict:
    """The memory fields of a :class:`Verdict` from ``(run, BenchmarkRun)`` pairs of both sides."""
    base_memory = [bench.memory for _, bench in base if bench.memory is not None]
    current_memory = [bench.memory for _, bench in current if bench.memory is not None]
    sources = {source for source, _ in (*base_memory, *current_memory)}
    if not base_memory or not current_memory or len(sources) != 1:
        return {}
    source = sources.pop()
    highest, lowest = max(value for _, value in base_memory), min(value for _, value in current_memory)
    return {"baseline_memory": highest, "current_memory": lowest, "memory_source": source,
            "memory_regression": lowest > highest + memory_tolerance(source)}


def work_difference(baseline: dict, current: dict) -> str:
    """How the work recorded in two runs differs (``""``: the same), over the fields both recorded.

    >>> work_difference({"flops": 2147483648, "dtype": "float32"}, {"flops": 2684354560, "dtype": "float32"})
    'flops 2147483648 → 2684354560'
    >>> work_difference({"shape": (1024, 1024, 1024)}, {"shape": (1024, 1024, 2048), "dtype": "bf16"})
    'shape 1024x1024x1024 → 1024x1024x2048'
    """
    def text(value):
        return "x".join(map(str, value)) if isinstance(value, tuple) else str(value)

    return ", ".join(f"{key} {text(baseline[key])} → {text(current[key])}" for key in baseline
                     if key in current and baseline[key] != current[key])


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
