"""``accounting gate save|check|compare|ab|history``: the arguments, their one-line errors, and the runs.

- ``save -- PYTEST_ARGS``: run the benchmarks (``--runs`` fresh processes) and save each in the
  storage as a baseline run, raw rounds and load-guard readings included.
- ``check -- PYTEST_ARGS``: run them once, compare with the last ``--baselines`` saved runs of
  this hardware, re-measure the inconclusive ones in up to ``--max-extra-runs`` fresh
  processes (only those benchmarks), then print the verdict; with ``--budget 10m``, re-measure
  by time instead (:mod:`accounting.gate.budget`), and say so when the machine stayed too loaded.
  The current runs are not saved as baselines (a regression must not become the new normal);
  ``--keep`` keeps them.
- ``ab --baseline-dir DIR -- PYTEST_ARGS``: interleaved A/B pairs within ``--budget``, decided by a
  test valid at every look (:mod:`accounting.gate.ab`, :mod:`accounting.gate.sequential`).
- ``compare CURRENT.json...``: the same verdict for runs you made yourself
  (``pytest --benchmark-save-data --benchmark-json=CURRENT.json``), without re-measuring.
- ``history``: the change points of every benchmark in the saved runs of this hardware, each
  with the first run after it (date, commit, branch): which merge made it slower
  (:mod:`accounting.gate.history`; its arguments and run: :mod:`accounting.gate.cli_history`). ``check`` and ``compare`` compare a benchmark whose history
  stepped within their baseline window with the runs after the step only.

Exit status: 0 no sure regression (inconclusive benchmarks are named, not failed), 1 a
sure regression, 2 bad input (one line on stderr), 130 interrupted.
"""

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
import tempfile
import time

from accounting.bench.matrix import BENCHMARKS_ENV, load_benchmarks
from accounting.console import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    OneLineParser,
    check_writable,
    require_matplotlib,
)
from accounting.errors import AccountingError
from accounting.gate.ab import (
    DEFAULT_START_PAIRS,
    Trees,
    gate_ab,
    nothing_ran,
    tree_environment,
)
from accounting.gate.budget import DEFAULT_BUDGET_S, RoundClock, parse_budget
from accounting.gate.decide import judge, noise_notes, with_threshold
from accounting.gate.gpu_rounds import saved_run_lines
from accounting.gate.guard import recorded_disturbances
from accounting.gate.history import (
    CHECK_HISTORY_RUNS,
    last_steps,
)
from accounting.gate.measure import Runner, servers_ready
from accounting.gate.cli_history import (
    HISTORY_DESCRIPTION,
    SUMMARY_ENV,
    history_arguments,
    positive_count,
    run_history,
)
from accounting.gate.plot import write_history_plot
from accounting.gate.render import render_markdown, render_text, verdicts_to_json
from accounting.gate.stats import ALPHA, Decision
from accounting.gate.storage import (
    DEFAULT_STORAGE,
    RUN_METRICS,
    choose_baseline,
    hardware_difference,
    load_run,
    machine_id,
    run_files,
)
from accounting.hardware.devices import cuda_available

EXIT_REGRESSION = 1
DEFAULT_BASELINES = 10
"""Baseline runs compared with: 10 let 3 current runs reach p = 1/286 and 4 reach 1/1001."""
DEFAULT_MAX_EXTRA_RUNS = 4
"""Fresh processes a ``check`` may add for its suspects: with 10 baseline runs, 1 + 4 current runs
reach p ≤ 0.01/3 (Holm's smallest level for a matrix of 3) and beyond; each adds one pytest start-up
(about 5 s on a CPU) plus the suspects' rounds."""

DESCRIPTION = (
    "A regression gate that tells noise from a real slowdown. It compares the current runs of a "
    "pytest-benchmark suite with the last K runs saved on the same hardware (raw rounds, "
    "--benchmark-save-data), one summary per pytest process, and decides each benchmark: regression "
    "(slower beyond doubt, one-sided permutation test over runs at p <= 0.01 Holm-adjusted, AND by more "
    "than regression.threshold_percent in benchmarks.json), no change, improvement, or inconclusive "
    "(re-measured in fresh processes, a bounded number of times). Runs taken on a loaded or throttled "
    "machine are left out and named."
)
AB_DESCRIPTION = (
    "Interleaved A/B: run the benchmarks of the base revision (A, checked out in --baseline-dir) and of this tree "
    "(B) in alternating fresh pytest processes, in pairs whose order flips each time, so that the host's drift "
    "over minutes falls on both alike; then decide each benchmark as `gate check` does, with A's runs as the "
    "baseline. No saved history is needed. Benchmarks still undecided get more pairs, of them only, until each is "
    "decided or the time budget (--budget) is spent; the verdict holds its false-alarm rate over every look "
    "(a sequential test on the pairs' log ratios). For shared CI hosts whose speed drifts "
    "(docs/benchmarks-and-gate.md)."
)
EPILOG = (
    "exit status: 0 no sure regression (inconclusive benchmarks are listed, not failed), 1 a sure "
    "regression, 2 bad input, 130 interrupted. The Markdown table is appended to $GITHUB_STEP_SUMMARY "
    f"when it is set. Environment: {BENCHMARKS_ENV} (another benchmarks.json). "
    "Example: accounting gate save --runs 10 --threads 1 -- -m cpu -k 1024; "
    "accounting gate check --threads 1 -- -m cpu -k 1024"
)


def non_negative_count(text: str) -> int:
    """A count that may be zero (``--max-extra-runs 0``: never re-measure)."""
    if text.strip() == "0":
        return 0
    try:
        return positive_count(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}") from None


def threshold_fraction(text: str) -> float:
    """A ``--threshold`` value: the smallest slowdown that counts, as a fraction in (0, 1).

    >>> threshold_fraction("0.05")
    0.05
    >>> threshold_fraction("5")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be a fraction in (0, 1) (0.05 = 5 %), got '5'
    """
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a fraction in (0, 1) (0.05 = 5 %), got {text!r}")
    return value


def budget_seconds(text: str) -> float:
    """A ``--budget`` value in seconds: ``600``, ``600s``, ``10m``, ``1h`` (:func:`accounting.gate.budget.parse_budget`).

    >>> budget_seconds("10m")
    600.0
    """
    try:
        return parse_budget(text)
    except AccountingError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--budget ")) from None


def _storage_argument(parser):
    parser.add_argument("--storage", metavar="DIR", default=DEFAULT_STORAGE,
                        help="pytest-benchmark's storage (--benchmark-storage); runs are read from "
                             "DIR/<machine id>/NNNN_*.json. Default: %(default)r")


def _device_argument(parser):
    parser.add_argument("--device", metavar="DEVICE", default=None,
                        help="device the load guard reads (clock, temperature, throttling) before and after each "
                             "run. Default: cuda:0 when CUDA is available, else cpu")


def _threads_argument(parser):
    parser.add_argument("--threads", metavar="N", type=positive_count, default=None,
                        help="CPU threads of the benchmarks (OMP_NUM_THREADS and MKL_NUM_THREADS for each pytest "
                             "process). On a VM with few vCPUs, --threads 1 cuts the noise between processes "
                             "several-fold (docs/benchmarks-and-gate.md). Runs saved with another count are not "
                             "compared. Default: torch's own, one per core")


def _pytest_arguments(parser):
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS",
                        help="arguments for pytest, after --, e.g. -- -m cpu -k 1024")


def _compare_arguments(parser):
    _storage_argument(parser)
    parser.add_argument("--baselines", metavar="K", type=positive_count, default=DEFAULT_BASELINES,
                        help="compare with the last K saved runs of this hardware. Default: %(default)r")
    _verdict_arguments(parser)


def _verdict_arguments(parser):
    parser.add_argument("--benchmarks-json", metavar="PATH", default=None,
                        help=f"benchmarks.json with the regression thresholds. Default: ${BENCHMARKS_ENV} or "
                             "./benchmarks.json")
    parser.add_argument("--markdown", metavar="PATH", default=None,
                        help=f"also write the table as Markdown to PATH (it is appended to ${SUMMARY_ENV} anyway "
                             "when that is set)")
    parser.add_argument("--plot", metavar="PATH", default=None,
                        help="draw each benchmark's history (saved runs, current runs, decision) to PATH as PNG")
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="also write the verdict as JSON to PATH: per benchmark its decision, ratio, interval, p, "
                             "and the smallest slowdown its runs could have detected (detectable_ratio, too_noisy)")
    parser.add_argument("--threshold", metavar="FRACTION", type=threshold_fraction, default=None,
                        help="the smallest slowdown that counts, for every benchmark (0.05 = 5 %%): a regression must be "
                             "surely above it. Each row's 'detectable' column says whether the runs' noise allows it. "
                             "Default: benchmarks.json's regression thresholds")
    parser.add_argument("--metric", choices=sorted(RUN_METRICS), default=None,
                        help="what each run's rounds are reduced to before runs are compared. Default: "
                             "benchmarks.json's regression.metric (min: interference only ever adds time)")
    parser.add_argument("--no-load-guard", dest="load_guard", action="store_false",
                        help="use runs taken on a loaded or throttled machine as they are (the summary says so); "
                             "for machines that are never quiet, at the price of the gate's error rates")


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``gate`` actions, on ``parser`` (the ``gate`` sub-command of ``python -m accounting``)."""
    actions = parser.add_subparsers(dest="gate_command", metavar="ACTION", parser_class=OneLineParser)
    actions.required = True
    save = actions.add_parser("save", help="run the benchmarks and save each run as a baseline",
                              description="Run the benchmarks in --runs fresh pytest processes and save each in the "
                                          "storage with raw rounds and load-guard readings.", epilog=EPILOG)
    _storage_argument(save)
    save.add_argument("--runs", metavar="N", type=positive_count, default=1,
                      help="how many pytest processes to save (seed a new storage with 10). Default: %(default)r")
    _device_argument(save)
    _threads_argument(save)
    _pytest_arguments(save)
    save.set_defaults(run=run, parser=save)

    check = actions.add_parser("check", help="run the benchmarks, re-measure suspects, fail on a sure regression",
                               description=DESCRIPTION, epilog=EPILOG)
    _compare_arguments(check)
    check.add_argument("--max-extra-runs", metavar="R", type=non_negative_count, default=None,
                       help="fresh pytest processes the inconclusive benchmarks may get, one at a time, before the "
                            f"verdict. Default: {DEFAULT_MAX_EXTRA_RUNS}, or no cap with --budget")
    check.add_argument("--budget", metavar="DURATION", type=budget_seconds, default=None,
                       help="re-measure the inconclusive benchmarks, and runs the load guard set aside, until each is "
                            "decided or this time is spent (600, 600s, 10m), the next run planned from the seconds "
                            "the last ones took; a verdict still kept from benchmarks by load then says the machine "
                            "was loaded. Default: none (at most --max-extra-runs)")
    check.add_argument("--min-runs", metavar="N", type=positive_count, default=1,
                       help="current runs of every benchmark before the suspects are re-measured, so a no change "
                            "has power behind it (a GPU gate: 5 against 5 baseline runs); counted in "
                            "--max-extra-runs, which is raised to N - 1 where lower. Default: %(default)r")
    _measuring_arguments(check, kept="the current runs")

    compare = actions.add_parser("compare", help="decide runs made elsewhere (no re-measuring)",
                                 description=DESCRIPTION, epilog=EPILOG)
    _compare_arguments(compare)
    compare.add_argument("current", nargs="+", metavar="CURRENT.json",
                         help="current runs: pytest --benchmark-save-data --benchmark-json=CURRENT.json, one file "
                              "per process")
    compare.set_defaults(run=run, parser=compare)

    ab = actions.add_parser("ab", help="run the base revision (A) and this one (B) in alternating processes, decide",
                            description=AB_DESCRIPTION, epilog=EPILOG)
    ab.add_argument("--baseline-dir", metavar="DIR", required=True,
                    help="a checkout of the base revision (git worktree add ../base origin/main); A runs there")
    ab.add_argument("--start-pairs", metavar="N", type=positive_count, default=DEFAULT_START_PAIRS,
                    help="A/B pairs of every benchmark before the first verdict. Default: %(default)r")
    ab.add_argument("--budget", metavar="DURATION", type=budget_seconds, default=DEFAULT_BUDGET_S,
                    help="the job's time: undecided benchmarks get more pairs until each is decided or the next pair "
                         "would end past it (600, 600s, 10m, 1h). Default: 10m")
    ab.add_argument("--max-pairs", metavar="M", type=positive_count, default=None,
                    help="an upper bound on the pairs in all; the pairs after the first N run only the undecided "
                         "benchmarks. Default: none (the budget ends the job)")
    ab.add_argument("--plan", action="store_true",
                    help="run the start pairs only and say, from their spread, how many pairs --threshold needs on "
                         "this runner and whether --budget covers them (else which budget or threshold would)")
    ab.add_argument("--fresh-interpreters", dest="fork_server", action="store_false",
                    help="start every pytest process as a new Python interpreter instead of forking it from a "
                         "server that imported torch once (3-4 s more per process; accounting.gate.forkserver)")
    _verdict_arguments(ab)
    _measuring_arguments(ab, kept="the A and B runs")

    history = actions.add_parser("history", help="the change points of each benchmark's saved history, and the "
                                                 "runs (commits) that started them",
                                 description=HISTORY_DESCRIPTION, epilog=EPILOG)
    history_arguments(history, storage_argument=_storage_argument)
    history.set_defaults(run=run, parser=history)
    return parser


def _measuring_arguments(parser, *, kept: str):
    """What an action that runs pytest and decides takes last: the device, threads, --keep, the pytest arguments."""
    _device_argument(parser)
    _threads_argument(parser)
    parser.add_argument("--keep", metavar="DIR", default=None,
                        help=f"keep {kept} (JSON and pytest logs) in DIR instead of a temporary directory")
    _pytest_arguments(parser)
    parser.set_defaults(run=run, parser=parser)


def _pytest_args(args) -> list:
    values = list(args.pytest_args or [])
    return values[1:] if values[:1] == ["--"] else values


def _device(args) -> str:
    return args.device or ("cuda:0" if cuda_available() else "cpu")


def _progress(stderr, text):
    print(f"accounting gate: {text}", file=stderr, flush=True)


def _save(args, runner, stderr) -> int:
    ran = None  # after the first run: its benchmarks by node id, so later runs collect only those
    for number in range(1, args.runs + 1):
        measured = runner.run(f"save-{number}", storage=args.storage, only=ran)
        if measured.path is None:
            _progress(stderr, f"nothing saved: no benchmark ran ({measured.summary}); `pytest -rs` with the same "
                              "arguments shows why they were skipped")
            break
        saved = load_run(measured.path)
        ran = sorted(saved.benchmarks) if ran is None else ran
        disturbed = recorded_disturbances(saved.guard)
        state = f"; disturbed, will be passed over: {'; '.join(disturbed)}" if disturbed else ""
        _progress(stderr, f"saved {measured.path} ({measured.summary}, {measured.duration_s:.1f} s){state}")
        for line in saved_run_lines(saved):  # GPU benchmarks: their warm-up, rounds the gate will leave out
            _progress(stderr, f"  {line}")
    for note in runner.notes:
        _progress(stderr, note)
    return EXIT_OK


def _reject(run):
    return "; ".join(recorded_disturbances(run.guard)) or None


def _verdict(storage, baselines, config, current, *, notes=(), load_guard=True, metric=None):
    identity = current[0].machine
    kinds = {bench.kind or "cpu" for run in current for bench in run.benchmarks.values()}
    for run in current[1:]:
        difference = hardware_difference(identity, run.machine, kinds)
        if difference:
            raise AccountingError(f"{run.path}: the current runs come from different hardware ({difference})")
    baseline = choose_baseline(run_files(storage, machine_id()), identity, baselines,
                               reject=_reject if load_guard else None, kinds=kinds)
    skipped = [f"baseline run {label} passed over: {why}" for label, why in baseline.skipped]
    metric = metric or config.regression_metric
    names = {name for run in current for name in run.benchmarks}
    try:
        history = choose_baseline(run_files(storage, machine_id()), identity, max(baselines, CHECK_HISTORY_RUNS),
                                  reject=_reject if load_guard else None, kinds=kinds)
    except AccountingError as error:  # an older file the baseline does not need: judge without the history
        history, skipped = None, [*skipped, f"history not searched for steps: {error}"]
    steps = {} if history is None else {
        name: step for name, step in last_steps(history.runs, baseline.runs, metric=metric,
                                                threshold_for=config.regression_threshold).items()
        if name in names}
    result = judge(list(baseline.runs), current, threshold_for=config.regression_threshold, alpha=ALPHA,
                   notes=[*skipped, *notes, *(_step_note(name, step, baseline.runs) for name, step in steps.items())],
                   load_guard=load_guard, metric=metric,
                   baseline_from={name: step.run.label for name, step in steps.items()})
    return baseline, result


def _step_note(name, step, baseline_runs) -> str:
    """The note ``check`` prints for a benchmark whose history stepped within its baseline window."""
    point, run = step.point, step.run
    commit = f", commit {run.commit_id[:12]}" + (f" on {run.branch}" if run.branch else "") if run.commit_id else ""
    interval = f" [{point.low:.3f}, {point.high:.3f}]" if point.low == point.low else ""
    labels = [saved.label for saved in baseline_runs]
    kept = len(labels) - labels.index(run.label)
    return (f"{name}: the history itself stepped {point.ratio:.3f}×{interval} (p = {point.p_value:.2g}) at run "
            f"{run.label} ({run.date}{commit}); its baseline is the {kept} run(s) since, not across the step "
            "(accounting gate history)")


def _write_outputs(args, result, baseline_runs, current, stdout):
    print(render_text(result), file=stdout, flush=True)
    markdown = render_markdown(result)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf8") as handle:
            handle.write(markdown + "\n")
    summary = os.environ.get(SUMMARY_ENV)
    if summary:
        with open(summary, "a", encoding="utf8") as handle:
            handle.write(markdown + "\n")
    if args.json:
        with open(args.json, "w", encoding="utf8") as handle:
            json.dump(verdicts_to_json(result), handle, indent=2)
    if args.plot:
        disturbed = {run.path for run in current if _reject(run)} if args.load_guard else set()
        write_history_plot(result, list(baseline_runs), current, args.plot, disturbed=disturbed)
        print(f"Plot written to {args.plot}", file=stdout)


def _loaded(result) -> str:
    """Why the machine was too loaded to judge the benchmarks still inconclusive for it ("" where none are): every
    current run of a benchmark set aside as disturbed, or more of them set aside than kept (one quiet run in a
    budget's worth of loaded ones judges little, and the pass must not read as a quiet machine's)."""
    held = [verdict for verdict in result.verdicts if verdict.decision is Decision.INCONCLUSIVE
            and len(verdict.disturbed_values) > len(verdict.current_values)]
    if not held:
        return ""
    if all(not verdict.current_values for verdict in held):
        return (f"the machine was loaded: every current run of {len(held)} benchmark(s) was measured on a disturbed "
                "machine")
    disturbed = sum(len(verdict.disturbed_values) for verdict in held)
    runs = disturbed + sum(len(verdict.current_values) + len(verdict.current_outlier_values) for verdict in held)
    return (f"the machine was loaded: {disturbed} of the {runs} current runs of {len(held)} benchmark(s) still "
            "inconclusive were measured on a disturbed machine")


def gate_check(runner, config, *, storage: str, baselines: int, max_extra_runs: int | None = DEFAULT_MAX_EXTRA_RUNS,
               load_guard: bool = True, metric: str | None = None, progress=lambda text: None, min_runs: int = 1,
               budget_s: float | None = None, clock=time.monotonic, started: float | None = None):
    """One gated run: a pytest process, then up to ``max_extra_runs`` more for the suspects only (the first
    ``min_runs - 1`` of them for every benchmark the first ran: ``--min-runs``).

    ``budget_s``: re-measure while the next run, predicted from the seconds the measured ones took, still ends
    inside it (counted from ``started``); ``max_extra_runs`` (``None``: no cap) stays an upper bound. Benchmarks
    whose every current run was loaded are re-measured like any suspect; when the budget leaves some so, the
    result's ``loaded`` says the machine was loaded. Without a budget, the saved-history rule as it always was.

    Returns ``(result, baseline, current runs, extra runs taken)``; the caller renders and exits.
    """
    started = clock() if started is None else started
    if max_extra_runs is None:
        max_extra_runs = DEFAULT_MAX_EXTRA_RUNS if budget_s is None else math.inf
    rounds = RoundClock()
    began = clock()
    measured = runner.run("current-1")
    progress(f"run 1: {measured.summary} ({measured.duration_s:.1f} s)")
    if measured.path is None:  # -m gpu on a machine without one: nothing to compare, and no baseline needed
        return nothing_ran(runner), None, [], 0
    current = [load_run(measured.path)]
    rounds.add(len(current[0].benchmarks), clock() - began)
    baseline, result = _verdict(storage, baselines, config, current, notes=runner.notes, load_guard=load_guard,
                                metric=metric)
    extra, max_extra_runs, spent = 0, max(max_extra_runs, min_runs - 1), False
    while (result.suspects or len(current) < min_runs) and extra < max_extra_runs:
        upcoming = len(current[0].benchmarks) if extra + 1 < min_runs else len(result.suspects)
        if not rounds.fits(upcoming, clock() - started, budget_s):
            spent = True
            break
        extra += 1
        if extra < min_runs:
            only = sorted(current[0].benchmarks)
            progress(f"measuring every benchmark again in a fresh process (run {extra + 1} of at least {min_runs})")
        else:
            only = result.suspects
            progress(f"re-measuring {len(result.suspects)} inconclusive benchmark(s) in a fresh process "
                     f"({extra} of at most {max_extra_runs})")
        began = clock()
        measured = runner.run(f"current-{extra + 1}", only=only)
        rounds.add(len(only), clock() - began)
        progress(f"run {extra + 1}: {measured.summary} ({measured.duration_s:.1f} s)")
        if measured.path is not None:
            current.append(load_run(measured.path))
        baseline, result = _verdict(storage, baselines, config, current, notes=runner.notes, load_guard=load_guard,
                                    metric=metric)
    if budget_s is not None:
        used = clock() - started
        result = dataclasses.replace(result, notes=(*result.notes, f"budget: {used:.0f} s of {budget_s:.0f} s used "
                                                    f"({100 * used / budget_s:.0f} %), {1 + extra} run(s)"))
    if result.suspects:
        why = "the budget ran out: --budget" if spent else "the cap, --max-extra-runs"
        notes = [f"still inconclusive after {extra} extra run(s) ({why}): {', '.join(result.suspects)}"]
        if math.isfinite(max_extra_runs):
            notes += noise_notes(result, current_runs=1 + max_extra_runs)
        result = dataclasses.replace(result, notes=(*result.notes, *notes))
    if budget_s is not None and load_guard:
        result = dataclasses.replace(result, loaded=_loaded(result))
    return result, baseline, current, extra


def _ab(args, config, workdir, stdout, stderr, started, reader_options) -> int:
    trees = Trees(args.baseline_dir).check()
    own_runs = []
    runners = [Runner(_pytest_args(args), device=_device(args), cwd=folder, workdir=workdir, threads=args.threads,
                      env=tree_environment(folder, os.environ), own_runs=own_runs, fork_server=args.fork_server,
                      **reader_options)
               for folder in (trees.baseline_dir, os.getcwd())]
    with servers_ready(*runners):
        result, a_runs, b_runs, pairs = gate_ab(*runners, config, start_pairs=args.start_pairs,
                                                max_pairs=args.max_pairs, budget_s=args.budget,
                                                load_guard=args.load_guard, metric=args.metric,
                                                progress=lambda text: _progress(stderr, text), started=started,
                                                plan_only=args.plan)
    _write_outputs(args, result, a_runs, b_runs, stdout)
    print(f"Gate took {time.monotonic() - started:.0f} s ({2 * pairs} pytest processes).", file=stdout)
    return EXIT_REGRESSION if result.failed else EXIT_OK


def _check(args, config, runner, stdout, stderr, started) -> int:
    result, baseline, current, extra = gate_check(runner, config, storage=args.storage, baselines=args.baselines,
                                                  max_extra_runs=args.max_extra_runs, load_guard=args.load_guard,
                                                  metric=args.metric, progress=lambda text: _progress(stderr, text),
                                                  min_runs=args.min_runs, budget_s=args.budget, started=started)
    _write_outputs(args, result, baseline.runs if baseline is not None else [], current, stdout)
    print(f"Gate took {time.monotonic() - started:.0f} s ({1 + extra} pytest process(es)).", file=stdout)
    return EXIT_REGRESSION if result.failed else EXIT_OK


def _prepare(args):
    """The thresholds, and output paths tried before anything is measured (as the report does)."""
    config = with_threshold(load_benchmarks(args.benchmarks_json), args.threshold)
    for path, option in ((args.markdown, "--markdown"), (args.plot, "--plot"), (args.json, "--json")):
        if path is not None:
            check_writable(path, option)
    if args.plot is not None:
        require_matplotlib()
    return config


def run(args: argparse.Namespace, *, parser: argparse.ArgumentParser, stdout=None, stderr=None, started=None,
        reader=None) -> int:
    """Run a parsed ``gate`` action; bad input ends it with ``parser``'s one-line error (exit status 2).

    ``reader`` replaces the telemetry reading of the load guard (tests).
    """
    started = time.monotonic() if started is None else started
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    workdir = None
    keep = getattr(args, "keep", None)
    try:
        if args.gate_command == "history":
            return run_history(args, stdout, reject=_reject)
        if args.gate_command == "compare":
            config = _prepare(args)
            current = [load_run(path) for path in args.current]
            baseline, result = _verdict(args.storage, args.baselines, config, current, load_guard=args.load_guard,
                                        metric=args.metric)
            _write_outputs(args, result, baseline.runs, current, stdout)
            return EXIT_REGRESSION if result.failed else EXIT_OK
        pytest_args = _pytest_args(args)
        options = {"reader": reader} if reader is not None else {}
        if args.gate_command == "ab":
            config = _prepare(args)
            workdir = args.keep or tempfile.mkdtemp(prefix="accounting-gate-ab-")
            if args.max_pairs is not None and args.start_pairs > args.max_pairs:
                raise AccountingError(f"--start-pairs {args.start_pairs} is above --max-pairs {args.max_pairs}")
            return _ab(args, config, workdir, stdout, stderr, started, options)
        if args.gate_command == "check":
            config = _prepare(args)
            workdir = args.keep or tempfile.mkdtemp(prefix="accounting-gate-")
        else:
            workdir = tempfile.mkdtemp(prefix="accounting-gate-")
        runner = Runner(pytest_args, device=_device(args), workdir=workdir, threads=args.threads, **options)
        if args.gate_command == "save":
            return _save(args, runner, stderr)
        return _check(args, config, runner, stdout, stderr, started)
    except AccountingError as error:
        keep = workdir  # a failed run's pytest log, which the message points to, stays
        parser.error(str(error))
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=stderr)
        return EXIT_INTERRUPTED
    finally:
        if workdir is not None and workdir != keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return EXIT_BAD_INPUT  # not reached: parser.error exits
