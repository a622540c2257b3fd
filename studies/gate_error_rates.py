"""Measure the gate's own error rates on this machine: ``python -m studies.gate_error_rates``.

K baseline runs of one benchmark (the CPU quick shape, a float32 1024³ matmul through the
project's ``flops_benchmark`` fixture and :func:`accounting.timing.matmul_case`), then N
gated reruns with the code unchanged and N with a known slowdown injected into the
benchmarked work, for each ``--factors`` value; it counts how often each fails the gate
(exit status 1) and how each ended, and times every gated run, re-measurements included.

The slowdown is injected without touching library code: the script writes its own small
benchmark module into a temporary directory, whose work is the 1024³ product plus, when
``$ACCOUNTING_GATE_SLOWDOWN`` is ``f > 1``, a second product of
``$ACCOUNTING_GATE_SLOWDOWN_ROWS`` rows. Time is not linear in FLOPs (a thin product runs
at a lower rate, so ``(f − 1)·1024`` rows slow the work by more than ``f``), so the script
first calibrates the rows for each factor in its own process (:func:`studies.gate_slowdown.calibrate_rows`), and
every slowed run measures again, in-process and interleaved, the factor it really injected
(the median of :data:`studies.gate_slowdown.CHECK_PAIRS` ratios of :func:`accounting.timing.time_fn` medians);
the summary prints it beside the intended one. The time of those checks is left out of a gated
run's time, which is the gate's own.

With ``--ab`` it measures ``accounting gate ab`` instead (:mod:`accounting.gate.ab`): no
baseline is saved; each gated job runs A (unchanged) and B (slowed, or not) in interleaved
pairs of fresh processes.

``--benchmarks N`` makes the module a matrix of N such benchmarks (``test_matmul_1024[b00]`` …),
every one slowed alike in a slowed tree, as a change to a shared code path slows a team's whole
matrix; a job fails the gate when any of them is convicted, and the decisions are counted per
benchmark. Only the first benchmark of a slowed run checks the injected factor in-process.

Targets (2-core CPU, N = 20): false alarms ≤ 1/20, a 1.25× slowdown caught ≥ 19/20,
a 1.10× slowdown reported as it is, one gated run ≤ 2 minutes. What it measured, and on which
machines: docs/benchmarks-and-gate.md ("Measured error rates of check" and "... of ab").

>>> parse_factors("1.25,1.1")
(1.25, 1.1)
"""

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from accounting.bench.matrix import load_benchmarks
from accounting.console import OneLineParser, table
from accounting.errors import AccountingError
from accounting.gate.ab import DEFAULT_START_PAIRS, gate_ab
from accounting.gate.budget import DEFAULT_BUDGET_S, pairs_needed, parse_budget
from accounting.gate.cli import DEFAULT_MAX_EXTRA_RUNS, gate_check
from accounting.gate.decide import with_threshold
from accounting.gate.guard import recorded_disturbances
from accounting.gate.measure import Runner, servers_ready
from accounting.gate.stats import Decision, log_spread, smallest_convictable
from accounting.gate.storage import load_run
from studies.gate_neighbour import running as neighbour_running
from studies.gate_power_table import predict
from studies.gate_slowdown import SHAPE, SLOWDOWN_ENV, calibrate_rows, threads_pinned, write_module

DEFAULT_RUNS = 20
DEFAULT_BASELINES = 10
DEFAULT_FACTORS = (1.25, 1.10)
def parse_factors(text: str) -> tuple[float, ...]:
    """``--factors``: comma-separated slowdowns above 1."""
    try:
        factors = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        factors = ()
    if not factors or any(not factor > 1 for factor in factors):
        raise argparse.ArgumentTypeError(f"--factors needs slowdowns above 1, e.g. 1.25,1.1; got {text!r}")
    return factors


def parse_thresholds(text: str) -> tuple[float, ...]:
    """``--thresholds``: comma-separated fractions in (0, 1), each measured as the gate's ``--threshold``.

    >>> parse_thresholds("0.05,0.1")
    (0.05, 0.1)
    """
    try:
        thresholds = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        thresholds = ()
    if not thresholds or any(not 0 < threshold < 1 for threshold in thresholds):
        raise argparse.ArgumentTypeError(f"--thresholds needs fractions in (0, 1), e.g. 0.05,0.1; got {text!r}")
    return thresholds


def _budget(text: str) -> float:
    try:
        return parse_budget(text)
    except AccountingError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return int(text)


@dataclass
class Scenario:
    """One row of the summary: N gated reruns at one injected factor."""

    factor: float
    threshold: float | None = None
    """The gate's ``--threshold`` for these jobs (``None``: benchmarks.json's)."""
    failed: int = 0
    decisions: dict = field(default_factory=dict)
    seconds: list = field(default_factory=list)
    processes: list = field(default_factory=list)
    injected: list = field(default_factory=list)
    set_aside: int = 0
    """Current runs the load guard left out (measured on a disturbed machine)."""
    spreads: list = field(default_factory=list)
    """Each job's baseline spread: the median over its benchmarks of the sd of their baseline runs' logs."""
    thresholds: list = field(default_factory=list)
    """Each job's threshold (a fraction), as its verdicts were held to."""

    def add(self, result, extra: int, seconds: float, current, set_aside: int | None = None) -> None:
        """Count one gated job: ``seconds`` of wall time, less the in-process checks its slowed runs did.

        The check of the injected factor (``check_seconds`` in a run's ``extra_info``) is this
        script's, not the gate's: a real job does not do it, so its time is not the gate's either.
        """
        seconds -= sum(bench.extra_info.get("check_seconds", 0.0) for run in current
                       for bench in run.benchmarks.values())
        for verdict in result.verdicts or (None,):
            label = verdict.decision.value if verdict is not None and verdict.decision is not None else "not compared"
            self.decisions[label] = self.decisions.get(label, 0) + 1
        self.failed += bool(getattr(result, "failed", result.regressions))
        self.seconds.append(seconds)
        self.processes.append(1 + extra)
        self.set_aside += set_aside if set_aside is not None else sum(
            1 for run in current if recorded_disturbances(run.guard))
        self.injected += [bench.extra_info["injected_slowdown"] for run in current for bench in run.benchmarks.values()
                          if "injected_slowdown" in bench.extra_info]
        spreads = [log_spread(verdict.baseline_values) for verdict in result.verdicts
                   if len(verdict.baseline_values) >= 2]
        if spreads:
            self.spreads.append(statistics.median(spreads))
            self.thresholds.append(result.verdicts[0].threshold)


PREVIOUS_MAX_PAIRS = 8
"""The pair cap of ``gate ab`` before its time budget and sequential test: the measured tables were made under it."""


def predicted_lines(scenarios, *, max_pairs: int = PREVIOUS_MAX_PAIRS, jobs: int = 200) -> list[str]:
    """Beside each A/B scenario, what the previous rule's power model (a permutation test at a pair cap) predicts
    at the spread its own jobs measured: for comparing the measured tables made under that rule.

    :func:`studies.gate_power_table.predict` at the median of the jobs' baseline spreads (A's runs), the
    injected factor and the threshold the jobs were held to; one line per scenario with a spread.
    """
    lines = []
    for scenario in scenarios:
        if not scenario.spreads:
            continue
        spread, threshold = statistics.median(scenario.spreads), statistics.median(scenario.thresholds)
        cell = predict(scenario.factor, spread, threshold=threshold, jobs=jobs, max_pairs=max_pairs)
        label = "unchanged" if scenario.factor == 1 else f"{scenario.factor:g}×"
        lines.append(f"{label} at {threshold * 100:g} %: A's spread (median sd of logs) {spread:.3g}; predicted "
                     f"{cell['failed'] * 100:.0f} % of jobs failed after {cell['mean_pairs']:.1f} pairs "
                     f"(python -m studies.gate_power_table --noises {spread:.3g} --effects {scenario.factor:g} "
                     f"--thresholds {threshold:g})")
    return lines


def plan_lines(scenarios) -> list[str]:
    """Beside each A/B scenario, how many pairs the sequential test needs at the spread its own jobs measured.

    :func:`accounting.gate.budget.pairs_needed` at the pairs' spread, √2 times the median of the jobs' baseline
    spreads (A's runs: a pair's log ratio is the difference of two runs' logs), and the threshold the jobs were
    held to; one line per scenario with a spread.
    """
    lines = []
    for scenario in scenarios:
        if not scenario.spreads:
            continue
        spread, threshold = statistics.median(scenario.spreads), statistics.median(scenario.thresholds)
        needed = pairs_needed(math.sqrt(2) * spread, threshold)
        label = "unchanged" if scenario.factor == 1 else f"{scenario.factor:g}×"
        lines.append(f"{label} at {threshold * 100:g} %: A's spread (median sd of logs) {spread:.3g}; the plan says "
                     f"{needed if needed is not None else 'more than 400'} pairs decide a benchmark at that spread")
    return lines


def summary_rows(scenarios, runs: int) -> list[list[str]]:
    """The summary table's cells (see :data:`SUMMARY_HEADER`).

    A scenario's count is of the jobs it ran (fewer than ``runs`` where a deadline stopped the study).

    >>> row = Scenario(1.25, failed=19, decisions={"regression": 19, "inconclusive": 1},
    ...                seconds=[40.0] * 19 + [60.0], processes=[4] * 20, injected=[1.24, 1.27], set_aside=1)
    >>> summary_rows([row], 20)[0]
    ['1.25×', '1.255×', '19/20', '19 regression, 1 inconclusive', '41 s', '60 s', '4', '1/80']
    >>> summary_rows([Scenario(1.1, failed=1, seconds=[40.0] * 17)], 20)[0][2]   # stopped after 17 rounds
    '1/17'
    >>> summary_rows([Scenario(1.1, 0.05)], 20)[0][0]   # gated with --threshold 0.05
    '1.1× at 5 %'
    """
    cells = []
    order = [decision.value for decision in Decision] + ["not compared"]
    for scenario in scenarios:
        decided = ", ".join(f"{scenario.decisions[label]} {label}" for label in order if label in scenario.decisions)
        injected = "unchanged" if scenario.factor == 1 else f"{scenario.factor:g}×"
        if scenario.threshold is not None:
            injected += f" at {scenario.threshold * 100:g} %"
        cells.append([
            injected,
            f"{statistics.median(scenario.injected):.3f}×" if scenario.injected else "—",
            f"{scenario.failed}/{len(scenario.seconds) if scenario.seconds else runs}",
            decided,
            f"{statistics.mean(scenario.seconds):.0f} s" if scenario.seconds else "—",
            f"{max(scenario.seconds):.0f} s" if scenario.seconds else "—",
            f"{statistics.mean(scenario.processes):.3g}" if scenario.processes else "—",
            f"{scenario.set_aside}/{sum(scenario.processes)}",
        ])
    return cells


SUMMARY_HEADER = ["injected", "measured in-process", "failed the gate", "decisions", "mean gated run",
                  "slowest gated run", "pytest processes per gated run", "set aside by the load guard"]


def _load_text() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} logical CPUs"


def spread_text(values, metric: str) -> str:
    """The between-process spread of run values (seconds): range and standard deviation of their logs.

    >>> spread_text([0.012, 0.013, 0.015], "min")
    'run min 12.0–15.0 ms, sd of their logs 0.11 (3 runs)'
    """
    logs = [math.log(value) for value in values]
    deviation = statistics.stdev(logs) if len(logs) > 1 else float("nan")
    return (f"run {metric} {min(values) * 1e3:.1f}–{max(values) * 1e3:.1f} ms, sd of their logs {deviation:.2g} "
            f"({len(values)} runs)")


def _calibrated_env(factor, threads, say) -> dict:
    """The slowed runs' environment for ``factor`` (1: unchanged), its extra rows calibrated in this process."""
    if factor == 1:
        return {SLOWDOWN_ENV: "1"}
    with threads_pinned(threads):
        rows = calibrate_rows(factor)
    say(f"calibrated {factor:g}×: {rows} extra rows (the FLOP share would be {round((factor - 1) * SHAPE[0])})")
    return {SLOWDOWN_ENV: repr(factor), SLOWDOWN_ENV + "_ROWS": str(rows)}


class Deadline:
    """``--stop-after``: rounds of jobs (one per scenario), none started that the slowest round so far says would
    end after ``seconds`` (``None``: no deadline), counted from this object's making.

    >>> [number for number in Deadline(None, print).rounds(3)]
    [1, 2, 3]
    """

    def __init__(self, seconds: float | None, say):
        self.seconds, self.say = seconds, say
        self.started, self.slowest, self.passed = time.monotonic(), 0.0, False

    def rounds(self, runs: int):
        """Round numbers 1 … ``runs``, while the next one fits; the caller runs each round's jobs in the loop."""
        for number in range(1, runs + 1):
            elapsed = time.monotonic() - self.started
            if self.seconds is not None and elapsed + self.slowest > self.seconds:
                self.say(f"stopping before round {number}: {elapsed:.0f} s spent, a round takes "
                         f"{self.slowest:.0f} s, --stop-after {self.seconds:g} s")
                self.passed = True
                return
            began = time.monotonic()
            yield number
            self.slowest = max(self.slowest, time.monotonic() - began)

    def jobs(self, runs: int, factors, thresholds, config, scenarios: list):
        """``(config at its threshold, round number, scenario)`` of each job in turn: per threshold, rounds of one
        job per scenario (unchanged, then each factor), so a slow spell of the host falls on all of them alike and
        a study stopped by its deadline stays balanced. Each threshold's scenarios join ``scenarios`` as it starts.
        """
        for threshold in thresholds:
            if self.passed:
                return
            judged = with_threshold(config, threshold)
            row = [Scenario(factor, threshold) for factor in (1.0, *factors)]
            scenarios += row
            for number in self.rounds(runs):
                for scenario in row:
                    yield judged, number, scenario


def measure_ab(runs: int, factors, *, start_pairs: int = DEFAULT_START_PAIRS, max_pairs: int | None = None,
               budget_s: float | None = DEFAULT_BUDGET_S,
               load_guard: bool = True, threads: int | None = None, workdir: str, stream=sys.stderr,
               fork_server: bool = True, benchmarks: int = 1, thresholds=(None,), stop_after: float | None = None,
               neighbour: int | None = None):
    """Gate ``runs`` interleaved A/B jobs unchanged and at each factor (A: unchanged; B: slowed); the scenarios.

    A and B run the same module in the same folder; only B's environment injects the slowdown,
    as a changed revision would. Each of ``thresholds`` (fractions, the gate's ``--threshold``;
    ``None``: benchmarks.json's) gets its own jobs, every factor at each. With ``stop_after``
    (seconds), no round of jobs starts that the slowest round so far says would end after it. ``neighbour``: a
    seeded noisy neighbour beside the whole study, calibration included (no baselines to keep it from).
    """
    folder = Path(workdir)
    pytest_args = write_module(folder, benchmarks)
    config = load_benchmarks()

    def say(text):
        print(f"error_rates: {text}", file=stream, flush=True)

    say(f"A/B mode: {benchmarks} benchmark(s), {start_pairs} start pairs, at most {max_pairs or 'any number of'} pairs "
        f"within a budget of {budget_s or 'no'} s per gated job ({_load_text()})")
    scenarios = []
    with neighbour_running(neighbour):
        environments = {factor: _calibrated_env(factor, threads, say) for factor in (1.0, *factors)}
        for judged, rerun, scenario in Deadline(stop_after, say).jobs(runs, factors, thresholds, config, scenarios):
            factor, threshold = scenario.factor, scenario.threshold
            label = f"ab{factor:g}" + (f"-t{threshold:g}" if threshold is not None else "")
            own_runs, workdir_of_job = [], str(folder / f"{label}-{rerun}")
            started = time.monotonic()  # the job's time includes starting its fork servers, as gate ab's does
            runners = [Runner(pytest_args, cwd=str(folder), workdir=workdir_of_job, env=environments[side],
                              threads=threads, own_runs=own_runs, fork_server=fork_server)
                       for side in (1.0, factor)]
            with servers_ready(*runners):
                result, a_runs, b_runs, pairs = gate_ab(*runners, judged, start_pairs=start_pairs,
                                                        max_pairs=max_pairs, load_guard=load_guard,
                                                        budget_s=budget_s, started=started)
            seconds = time.monotonic() - started
            unused = 2 * sum(1 for note in result.notes if note.startswith("pair ") and " not used" in note)
            scenario.add(result, 2 * pairs - 1, seconds, [*a_runs, *b_runs], set_aside=unused)
            at = f" at threshold {threshold:g}" if threshold is not None else ""
            say(f"A/B factor {factor:g}{at}, job {rerun}/{runs}: {_job_text(result)}; {pairs} pair(s), "
                f"{seconds:.0f} s")
    return scenarios


def _job_text(result) -> str:
    """One job's decisions: the only benchmark's with its reason, or a matrix's counted."""
    if len(result.verdicts) == 1:
        verdict = result.verdicts[0]
        return f"{verdict.decision.value if verdict.decision else '?'} ({verdict.reason})"
    counts = {}
    for verdict in result.verdicts:
        label = verdict.decision.value if verdict.decision else "not compared"
        counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{count} {label}" for label, count in sorted(counts.items())) or "no benchmark"


def measure(runs: int, baselines: int, factors, *, max_extra_runs: int | None = DEFAULT_MAX_EXTRA_RUNS,
            load_guard: bool = True, threads: int | None = None, workdir: str, stream=sys.stderr, thresholds=(None,),
            budget_s: float | None = None, neighbour: int | None = None, stop_after: float | None = None):
    """Save ``baselines`` runs, then gate ``runs`` reruns unchanged and at each factor; the scenarios.

    ``threads``: the benchmarks' CPU threads (the gate's ``--threads``), also used to calibrate.
    ``thresholds``: as :func:`measure_ab`'s. ``budget_s``: re-measure as ``gate check --budget`` does (then
    ``max_extra_runs`` ``None`` is no cap). ``neighbour``: a seeded noisy neighbour beside the calibration and
    the gated reruns, not the baselines: a baseline saved beside it is one the load guard refuses, where a real
    pull request's job meets a neighbour its main branch's saved runs did not. ``stop_after``: as
    :func:`measure_ab`'s, the reruns interleaved in rounds alike.
    """
    folder = Path(workdir)
    pytest_args = write_module(folder)
    storage = str(folder / "storage")
    config = load_benchmarks()

    def say(text):
        print(f"error_rates: {text}", file=stream, flush=True)

    say(f"saving {baselines} baseline runs ({_load_text()})")
    saver = Runner(pytest_args, cwd=str(folder), workdir=str(folder / "baseline"), env={SLOWDOWN_ENV: "1"},
                   threads=threads)
    values = []
    for number in range(1, baselines + 1):
        measured = saver.run(f"save-{number}", storage=storage)
        saved = load_run(measured.path)
        values += [bench.summary(config.regression_metric) for bench in saved.benchmarks.values()]
        disturbed = recorded_disturbances(saved.guard)
        say(f"baseline {number}/{baselines}: {measured.summary}" + (f"; disturbed: {'; '.join(disturbed)}"
                                                                     if disturbed else ""))
    say(f"baseline {spread_text(values, config.regression_metric)}")
    if len(values) > 1 and max_extra_runs is not None:  # one run has no spread
        threshold = config.regression_threshold("cpu", None) / 100
        smallest = smallest_convictable(log_spread(values), len(values), 1 + max_extra_runs, threshold=threshold)
        say(f"with this spread, {len(values)} baseline and {1 + max_extra_runs} current runs convict a slowdown from "
            "about " + (f"{smallest:.3g}×" if smallest else "— never (too few runs)") + f" at the {threshold:.0%} threshold")
    scenarios = []
    with neighbour_running(neighbour):
        environments = {factor: _calibrated_env(factor, threads, say) for factor in (1.0, *factors)}
        for judged, rerun, scenario in Deadline(stop_after, say).jobs(runs, factors, thresholds, config, scenarios):
            factor, threshold = scenario.factor, scenario.threshold
            label = f"x{factor:g}" + (f"-t{threshold:g}" if threshold is not None else "")
            runner = Runner(pytest_args, cwd=str(folder), workdir=str(folder / f"{label}-{rerun}"),
                            env=environments[factor], threads=threads)
            started = time.monotonic()
            result, _baseline, current, extra = gate_check(
                runner, judged, storage=storage, baselines=baselines, max_extra_runs=max_extra_runs,
                load_guard=load_guard, budget_s=budget_s, started=started)
            seconds = time.monotonic() - started
            scenario.add(result, extra, seconds, current)
            verdict = result.verdicts[0] if result.verdicts else None
            decision = verdict.decision.value if verdict and verdict.decision else "?"
            reason = verdict.reason if verdict else "no benchmark"
            loaded = f"; {result.loaded}" if result.loaded else ""
            say(f"factor {factor:g}, rerun {rerun}/{runs}: {decision} ({reason}{loaded}; {1 + extra} "
                f"process(es), {seconds:.0f} s)")
    return scenarios


def main(argv=None) -> int:
    parser = OneLineParser(prog="python -m studies.gate_error_rates",
                           description="Measure how often the regression gate fails unchanged code (false alarms) "
                                       "and catches injected slowdowns, on this machine.")
    parser.add_argument("--runs", type=_count, default=DEFAULT_RUNS, metavar="N",
                        help="gated reruns per scenario. Default: %(default)r")
    parser.add_argument("--baselines", type=_count, default=DEFAULT_BASELINES, metavar="K",
                        help="baseline runs saved first. Default: %(default)r")
    parser.add_argument("--factors", type=parse_factors, default=DEFAULT_FACTORS, metavar="LIST",
                        help="injected slowdowns, comma-separated. Default: 1.25,1.1")
    parser.add_argument("--thresholds", type=parse_thresholds, default=(None,), metavar="LIST",
                        help="the gate's --threshold values, comma-separated fractions (0.05,0.1): every scenario is "
                             "gated at each. Default: benchmarks.json's thresholds")
    parser.add_argument("--max-extra-runs", type=lambda text: 0 if text == "0" else _count(text),
                        default=None, metavar="R",
                        help=f"the gate's re-measurement cap. Default: {DEFAULT_MAX_EXTRA_RUNS}, none with --budget")
    parser.add_argument("--budget", type=_budget, default=None, metavar="DURATION",
                        help="each gated job's budget (600, 10m), as the gate's --budget. Default: ab's own (10m); "
                             "check: none (the saved-history rule)")
    parser.add_argument("--neighbour", type=int, default=None, metavar="SEED",
                        help="run a noisy neighbour through the study (check: after saving the baselines): one core "
                             "spun on and off at random, half of the time, spells of 2 s on average, seeded "
                             "(studies.gate_neighbour). Default: none")
    parser.add_argument("--threads", type=_count, default=None, metavar="N",
                        help="CPU threads of the benchmarks, as the gate's --threads. Default: torch's own")
    parser.add_argument("--keep", metavar="DIR", default=None, help="keep every run in DIR")
    parser.add_argument("--ab", action="store_true",
                        help="measure `accounting gate ab` instead: each gated job runs A (unchanged) and B (slowed) "
                             "in interleaved pairs; no baselines are saved")
    parser.add_argument("--benchmarks", type=_count, default=1, metavar="N",
                        help="with --ab: a matrix of N benchmarks (each a 1024³ matmul, all slowed alike in a slowed "
                             "tree); a job fails when any is convicted. Default: %(default)r")
    parser.add_argument("--max-pairs", type=_count, default=None, metavar="M",
                        help="with --ab: an upper bound on each job's pairs. Default: none (the budget ends a job)")
    parser.add_argument("--stop-after", type=float, default=None, metavar="SECONDS",
                        help="start no round of jobs (one per scenario) that would end after SECONDS, judged by the "
                             "slowest round so far; the summary counts the jobs run. Default: none")
    parser.add_argument("--no-load-guard", dest="load_guard", action="store_false",
                        help="gate as `accounting gate check --no-load-guard` does (on a machine that is never quiet)")
    parser.add_argument("--fresh-interpreters", dest="fork_server", action="store_false",
                        help="with --ab: as `accounting gate ab --fresh-interpreters` (no fork server)")
    args = parser.parse_args(argv)
    if args.stop_after is not None and not args.stop_after > 0:
        parser.error(f"--stop-after must be a positive number of seconds, got {args.stop_after:g}")
    workdir = args.keep or tempfile.mkdtemp(prefix="accounting-gate-rates-")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    load_before = _load_text()
    started = time.monotonic()
    try:
        if args.ab:
            scenarios = measure_ab(args.runs, args.factors, max_pairs=args.max_pairs, load_guard=args.load_guard,
                                   threads=args.threads, workdir=workdir, fork_server=args.fork_server,
                                   benchmarks=args.benchmarks, thresholds=args.thresholds, stop_after=args.stop_after,
                                   budget_s=args.budget if args.budget is not None else DEFAULT_BUDGET_S,
                                   neighbour=args.neighbour)
        else:
            extra_runs = args.max_extra_runs
            if extra_runs is None and args.budget is None:
                extra_runs = DEFAULT_MAX_EXTRA_RUNS
            scenarios = measure(args.runs, args.baselines, args.factors, max_extra_runs=extra_runs,
                                load_guard=args.load_guard, threads=args.threads, workdir=workdir,
                                thresholds=args.thresholds, budget_s=args.budget, neighbour=args.neighbour,
                                stop_after=args.stop_after)
    except AccountingError as error:
        parser.error(str(error))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    budget = args.budget if args.budget is not None else (DEFAULT_BUDGET_S if args.ab else None)
    plan = (f"interleaved A/B, {args.runs} jobs per scenario, {DEFAULT_START_PAIRS} start pairs, at most "
            f"{args.max_pairs or 'any number of'} pairs" if args.ab else
            f"{args.baselines} baseline runs, {args.runs} gated reruns per scenario, at most "
            f"{args.max_extra_runs if args.max_extra_runs is not None else (DEFAULT_MAX_EXTRA_RUNS if budget is None else 'any number of')} extra runs each")
    plan += f", a budget of {budget:.0f} s a job" if budget else ""
    plan += (f", a noisy neighbour (seed {args.neighbour})" + ("" if args.ab else " beside the gated reruns, not the "
                                                               "baselines")) if args.neighbour is not None else ""
    matrix = f"{args.benchmarks} float32 1024³ matmuls" if args.ab and args.benchmarks > 1 else "float32 1024³ matmul"
    print(f"Gate error rates: {plan}; {matrix} on the CPU, {args.threads or 'default'} thread(s); "
          f"load guard {'on' if args.load_guard else 'OFF'}")
    print(table(SUMMARY_HEADER, summary_rows(scenarios, args.runs)))
    if args.ab:
        print("\n".join(["Pairs the sequential test needs at the measured spread, beside each row:",
                          *plan_lines(scenarios)]))
    print(f"Load: {load_before} at the start, {_load_text()} at the end; {time.monotonic() - started:.0f} s in all.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
