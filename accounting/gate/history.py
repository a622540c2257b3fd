"""The saved history of one machine identity, its change points per benchmark, and who started each.

``accounting gate save`` on every merge builds a history of the main branch in pytest-benchmark's
storage. This module reads it with ``check``'s rules (:func:`accounting.gate.storage.choose_baseline`:
runs from other hardware and runs the load guard calls disturbed are passed over and named, a
corrupt file is an error naming it), reduces each run of each benchmark as ``check`` does
(:meth:`accounting.gate.storage.BenchmarkRun.summary`), and finds each benchmark's change
points (:func:`accounting.gate.changepoints.detect`), each with the first run after it: its
file, date and, where pytest-benchmark saved them, its commit id and branch. So the question
a team asks first of a worse dashboard — when did it change, and which merge did it — has an
answer, including for a slowdown that crept in by a few percent a merge, which no per-merge
comparison fails.

``check`` uses it too (:func:`last_steps`): a benchmark whose history stepped within the runs
its baseline would take is compared with the runs after the step only, not across it.

>>> from accounting.gate.storage import BenchmarkRun, SavedRun
>>> def run(number, seconds):
...     rounds = tuple(seconds * (1 + 0.001 * step) for step in range(5))
...     return SavedRun(f"{number:04}_main.json", {}, {"t::mm": BenchmarkRun("t::mm", rounds)},
...                     f"2026-11-{number:02}T12:00:00", commit={"id": f"{number:02}" * 20, "branch": "main"})
>>> runs = [run(day, 0.0250 + 0.0001 * (day % 3)) for day in range(1, 9)]
>>> runs += [run(day, 0.0312 + 0.0001 * (day % 3)) for day in range(9, 17)]
>>> result = analyse(runs)
>>> [(step.run.label, step.run.commit_id[:7], round(step.point.ratio, 2)) for step in result.benchmarks[0].steps]
[('0009_main.json', '0909090', 1.25)]
"""

import datetime as dt
import fnmatch
import math
import re
from dataclasses import dataclass
from pathlib import Path

from accounting.errors import AccountingError
from accounting.gate.changepoints import Detection, TooFewRuns, detect, detectable_step
from accounting.gate.decide import DEFAULT_METRIC
from accounting.gate.storage import check_run_metric, choose_baseline, load_run

DEFAULT_THRESHOLD_PERCENT = 10.0
"""Threshold (percent) for screening slow outlier runs where no ``benchmarks.json`` gives one."""
CHECK_HISTORY_RUNS = 100
"""Saved runs ``check`` reads to find the last change point of each benchmark (the newest this many)."""
_NUMBER = re.compile(r"^(\d{4})_")


@dataclass(frozen=True)
class RunInfo:
    """Who a run is: its file, date, and the commit pytest-benchmark recorded (``None`` where it did not)."""

    label: str
    datetime: str | None
    commit_id: str | None
    branch: str | None

    @classmethod
    def of(cls, run) -> "RunInfo":
        commit = run.commit or {}
        text = lambda value: value if isinstance(value, str) and value else None
        return cls(run.label, run.datetime, text(commit.get("id")), text(commit.get("branch")))

    @property
    def date(self) -> str:
        """The date part of its ISO datetime, or ``"—"``."""
        return self.datetime[:10] if self.datetime else "—"


@dataclass(frozen=True)
class Step:
    """A change point and the first run after it."""

    point: object
    """:class:`accounting.gate.changepoints.ChangePoint`."""
    run: RunInfo
    before: RunInfo
    """The last run before it (the merge before the one that did it)."""


@dataclass(frozen=True)
class BenchmarkHistory:
    """One benchmark's series (oldest first) and what was found in it."""

    name: str
    runs: tuple
    """:class:`RunInfo` of each run that has this benchmark."""
    values: tuple
    """Each run's value (seconds: its ``metric`` round)."""
    detection: Detection | None
    steps: tuple = ()
    """:class:`Step` per change point, oldest first."""
    note: str | None = None
    """Why nothing was looked for (too few runs), or ``None``."""
    threshold: float = DEFAULT_THRESHOLD_PERCENT / 100
    """The benchmark's regression threshold (a fraction)."""

    @property
    def detectable(self) -> float | None:
        """The smallest step (a ratio) at the middle of the runs looked in that their noise lets the search find
        with 95 % power (:func:`accounting.gate.changepoints.detectable_step`); ``None`` where nothing was looked for."""
        if self.detection is None:
            return None
        return detectable_step(self.detection.noise, len(self.values) - len(self.detection.outliers))

    @property
    def too_noisy(self) -> bool:
        """A step of the threshold's size would be missed more than 5 % of the time, even at the middle."""
        return self.detectable is not None and self.detectable > 1 + self.threshold


@dataclass(frozen=True)
class HistoryResult:
    """Every benchmark's history, the runs read, and the runs passed over."""

    benchmarks: tuple
    runs: tuple
    """:class:`RunInfo` of every run used, oldest first."""
    skipped: tuple = ()
    """``(file name, why)`` of each run passed over."""
    metric: str = DEFAULT_METRIC
    notes: tuple = ()

    @property
    def steps(self) -> list:
        """``(benchmark name, step)`` of every change point, in name then time order."""
        return [(bench.name, step) for bench in self.benchmarks for step in bench.steps]


@dataclass(frozen=True)
class RunSelection:
    """Which saved runs a history covers: run numbers (``NNNN_``), dates, and the newest ``last``."""

    first: int | None = None
    final: int | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    last: int | None = None

    def numbered(self, files) -> list:
        """``files`` within the run-number range."""
        kept = []
        for path in files:
            match = _NUMBER.match(Path(path).name)
            number = int(match.group(1)) if match else None
            if number is not None and ((self.first is not None and number < self.first)
                                       or (self.final is not None and number > self.final)):
                continue
            kept.append(path)
        return kept

    def dated(self, run) -> bool:
        """Whether ``run``'s date lies in the range (a run without a readable date is kept only with no range)."""
        if self.since is None and self.until is None:
            return True
        when = parse_date(run.datetime, "the run's datetime", source=run.label) if run.datetime else None
        if when is None:
            return False
        return (self.since is None or when >= self.since) and (self.until is None or when <= self.until)


def parse_date(text: str, what: str, *, source: str | None = None, end: bool = False) -> dt.datetime:
    """An ISO date or datetime, as UTC when it names no zone; a bare date with ``end`` is the day's last moment.

    >>> parse_date("2026-11-24", "--since").isoformat()
    '2026-11-24T00:00:00+00:00'
    >>> parse_date("2026-11-24", "--until", end=True).isoformat()
    '2026-11-24T23:59:59.999999+00:00'
    >>> parse_date("24/11/2026", "--since")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: --since must be an ISO date or datetime (2026-11-24, 2026-11-24T12:00), got '24/11/2026'
    """
    try:
        value = dt.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        where = f"{source}: " if source else ""
        raise AccountingError(f"{where}{what} must be an ISO date or datetime (2026-11-24, 2026-11-24T12:00), "
                              f"got {text!r}") from None
    if end and len(text) == 10:
        value = value.replace(hour=23, minute=59, second=59, microsecond=999999)
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def read_history(files, *, identity: dict | None = None, selection: RunSelection = RunSelection(), reject=None,
                 loader=load_run):
    """The runs of ``files`` (oldest first) that a history covers: ``(runs, skipped)``.

    The identity is ``identity`` or, without one, the newest run's, and runs are chosen as
    ``check`` chooses its baseline (:func:`accounting.gate.storage.choose_baseline`, every one
    of them): other hardware and runs ``reject`` gives a reason for are passed over and named.
    An empty selection is an error saying what was asked for.
    """
    files = selection.numbered(list(files))
    if not files:
        raise AccountingError("no saved runs in that range; save runs with accounting gate save first"
                              if selection != RunSelection() else
                              "no saved runs to look through; save runs first (accounting gate save)")
    if identity is None:
        identity = loader(files[-1]).machine
    dated = [path for path in files if selection.dated(loader(path))] if selection.since or selection.until else files
    if not dated:
        raise AccountingError("no saved run in that date range (--since/--until)")
    newest = loader(dated[-1])
    kinds = {bench.kind or "cpu" for bench in newest.benchmarks.values()}
    chosen = choose_baseline(dated, identity, len(dated), loader=loader, reject=reject, kinds=kinds)
    runs = list(chosen.runs)
    if selection.last is not None:
        runs = runs[-selection.last:]
    return runs, chosen.skipped


def analyse(runs, *, metric: str = DEFAULT_METRIC, threshold_for=None, names=None, skipped=(), notes=(),
            **options) -> HistoryResult:
    """Find the change points of every benchmark of ``runs`` (:class:`SavedRun`, oldest first).

    ``threshold_for(kind, name)``: the regression threshold in percent (the outlier screen's
    least excess), as ``check`` takes it. ``names``: fnmatch patterns or substrings of the
    benchmarks to keep (``None``: all). ``options`` go to :func:`accounting.gate.changepoints.detect`.
    A benchmark with too few runs is kept, with a note saying how many it has and needs.
    """
    check_run_metric(metric)
    threshold_for = threshold_for or (lambda kind, name: DEFAULT_THRESHOLD_PERCENT)
    every = sorted({name for run in runs for name in run.benchmarks})
    wanted = [name for name in every if names is None or any(_matches(name, pattern) for pattern in names)]
    if names is not None and not wanted:
        raise AccountingError(f"no benchmark matches {', '.join(map(repr, names))}; the history has "
                              f"{', '.join(every) or 'none'}")
    benchmarks = []
    for name in wanted:
        having = [run for run in runs if name in run.benchmarks and run.benchmarks[name].problem is None]
        if not having:  # every run of it too short to judge (storage.rounds_problem)
            problem = next(run.benchmarks[name].problem for run in runs if name in run.benchmarks)
            benchmarks.append(BenchmarkHistory(name, (), (), None, note=f"{name}: not judged: {problem}"))
            continue
        infos = tuple(RunInfo.of(run) for run in having)
        values = tuple(run.benchmarks[name].summary(metric) for run in having)
        kind = next((run.benchmarks[name].kind for run in having if run.benchmarks[name].kind), None)
        threshold = threshold_for(kind, name) / 100
        try:
            found = detect(values, threshold=threshold, **options)
        except TooFewRuns as error:
            benchmarks.append(BenchmarkHistory(name, infos, values, None, note=f"{name}: {error}", threshold=threshold))
            continue
        steps = tuple(Step(point, infos[point.index], infos[point.index - 1]) for point in found.change_points)
        benchmarks.append(BenchmarkHistory(name, infos, values, found, steps, threshold=threshold))
    return HistoryResult(tuple(benchmarks), tuple(RunInfo.of(run) for run in runs), tuple(skipped), metric,
                         tuple(notes))


def _matches(name: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(name, pattern) or pattern in name


def last_steps(history_runs, baseline_runs, *, metric: str, threshold_for) -> dict:
    """Benchmark -> its last :class:`Step` where that lies among ``baseline_runs`` (``check``'s window).

    ``history_runs``: the newest saved runs of this hardware, oldest first, ending with
    ``baseline_runs``. A benchmark whose last change point is older than the baseline's first
    run, or whose history is too short to look in, is not listed: its baseline stands as it is.
    """
    window = {run.label for run in baseline_runs}
    result = analyse(history_runs, metric=metric, threshold_for=threshold_for)
    return {bench.name: bench.steps[-1] for bench in result.benchmarks
            if bench.steps and bench.steps[-1].run.label in window}


def to_json(result: HistoryResult) -> dict:
    """The history as plain JSON values (``accounting gate history --json``)."""
    def info(run: RunInfo) -> dict:
        return {"run": run.label, "datetime": run.datetime, "commit": run.commit_id, "branch": run.branch}

    def number(value: float):
        return value if math.isfinite(value) else None

    benchmarks = []
    for bench in result.benchmarks:
        detection = bench.detection
        benchmarks.append({
            "name": bench.name,
            "runs": [dict(info(run), value_s=value) for run, value in zip(bench.runs, bench.values)],
            "change_points": [dict(info(step.run), index=step.point.index, ratio=step.point.ratio,
                                   ratio_low=number(step.point.low), ratio_high=number(step.point.high),
                                   confidence=step.point.confidence, p_value=step.point.p_value,
                                   runs_before=step.point.runs_before, runs_after=step.point.runs_after,
                                   previous_run=info(step.before))
                              for step in bench.steps],
            "levels": [{"first_index": first, "end_index": end, "level_s": level}
                       for first, end, level in (detection.levels if detection else ())],
            "outlier_indices": list(detection.outliers) if detection else [],
            "noise_log_sd": detection.noise if detection else None,
            "detectable_step_ratio": bench.detectable,
            "too_noisy": bench.too_noisy,
            "threshold": bench.threshold,
            "note": bench.note,
        })
    return {"metric": result.metric, "runs": [info(run) for run in result.runs],
            "passed_over": [{"run": label, "why": why} for label, why in result.skipped],
            "benchmarks": benchmarks, "notes": list(result.notes)}
