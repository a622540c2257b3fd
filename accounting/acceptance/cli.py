"""``python -m accounting.acceptance OUTDIR`` (``bash .ci/gpu OUTDIR``): every GPU check in one prepared call.

The run, in order: the probe (what this machine has, in a process of its own), then each step of
:func:`accounting.acceptance.plan.build_steps` within its budget, never stopping at a failure; then each
step's headline figures judged against a healthy device's (:mod:`accounting.acceptance.expected`), the
summary written (``summary.md``, ``summary.json``) and rewritten after every step, the logs packed into
one archive, at most 8 files in OUTDIR, and the summary printed last. Progress goes to stderr.

Exit status: 0 when everything held, or when there is no GPU and every GPU step was skipped with its
reason (a CPU machine); 1 when a step failed or a figure is out of its expected range; 2 bad input.

``--verify-no-gpu OUTDIR`` checks a finished run made on a machine without a GPU, as CI does: the probe
passed, every GPU step was skipped with a reason, the run took under ``--max-seconds``, at most 8 files.
"""

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import signal
import sys
import time
from pathlib import Path

from accounting.acceptance.figures import (
    anchor_step_figures,
    clock_figures,
    cuda_model_floor,
    fleet_headline,
    gpu_check_figures,
    model_figures,
    pytest_figures,
    pytest_headline,
    report_figures,
    report_headline,
    sweep_row_figures,
)
from accounting.acceptance.model_anchor import anchor_figures, anchor_headline
from accounting.acceptance.outputs import ARCHIVE, LOGS_DIR, MAX_FILES, SUMMARY_JSON, SUMMARY_MD, check_outdir, over_limit, pack
from accounting.acceptance.plan import (
    ANCHOR_JSON,
    BUDGETS_S,
    FLEET_JSON,
    PROBE_BUDGET_S,
    PYTEST_JSON,
    REPORT_JSON,
    REQUIRES,
    TOTAL_BUDGET_S,
    Machine,
    Paths,
    build_steps,
    gate_verdict,
    saved_runs,
)
from accounting.acceptance.steps import FAILED, PASSED, SKIPPED, Outcome, Step, run_step
from accounting.acceptance.summary import SCHEMA, exit_status, gpu_checks, render, result
from accounting.console import EXIT_BAD_INPUT, EXIT_INTERRUPTED, OneLineParser
from accounting.errors import AccountingError

ROOT = Path(__file__).resolve().parents[2]
"""The checkout the package runs from: every step's working directory (benchmarks.json, tests/)."""
EXIT_TERMINATED = 143
"""The exit status after SIGTERM (128 + 15), as a shell reports it."""
NO_GPU_MAX_S = 120.0
"""What a run on a machine without a GPU may take (CI checks it)."""


def step_environment(root: Path, environ=None) -> dict:
    """The steps' environment: the checkout first on ``PYTHONPATH``, a headless matplotlib, unbuffered output."""
    environ = dict(os.environ if environ is None else environ)
    path = environ.get("PYTHONPATH", "")
    environ["PYTHONPATH"] = str(root) + (os.pathsep + path if path else "")
    environ.setdefault("MPLBACKEND", "Agg")
    environ["PYTHONUNBUFFERED"] = "1"
    return environ


def _read_json(path: Path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def read_step(name: str, out: Path, logs: Path, device_name: str | None) -> tuple[str, list]:
    """A step's headline and figures from what it wrote (nothing where it wrote nothing)."""
    if name == "clock-check":
        document = _read_json(logs / "clock-check.json")
        if not document:
            return "", []
        headline = "; ".join(f"{c['dtype']}: time_matmul/events {c['package_over_events']:.3f}, host/events "
                             f"{c['host_over_events']:.3f}" for c in document.get("checks", []))
        return headline, clock_figures(document, device_name, step=name) + gpu_check_figures(document, device_name,
                                                                                              step=name)
    if name in ("report", "report-quick", "fault-injection", "model-mfu"):
        path = {"report": out / REPORT_JSON, "report-quick": logs / "report-quick.json",
                "fault-injection": logs / "fault.json", "model-mfu": logs / "model.json"}[name]
        document = _read_json(path)
        if not document:
            return "", []
        if name == "model-mfu":
            return report_headline(document), model_figures(document, step=name)
        if name == "fault-injection":
            return report_headline(document), []
        rows = sweep_row_figures(document, step=name) if name == "report" else []
        return report_headline(document), report_figures(document, device_name, step=name) + rows
    if name == "pytest-gpu":
        document = _read_json(out / PYTEST_JSON)
        log = logs / "pytest-gpu.log"
        headline = pytest_headline(log.read_text(errors="replace")) if log.exists() else ""
        return headline, pytest_figures(document, device_name, step=name) if document else []
    if name == "pytest-collect":
        log = logs / "pytest-collect.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        return next((line.strip() for line in reversed(lines) if " collected" in line), ""), []
    if name == "model-anchor":
        document = _read_json(logs / ANCHOR_JSON)
        return (anchor_headline(document), anchor_figures(document, step=name, floor=cuda_model_floor)
                + anchor_step_figures(document, step=name)) if document else ("", [])
    if name == "fleet":
        document = _read_json(out / FLEET_JSON)
        return (fleet_headline(document), []) if document else ("", [])
    if name == "gate-save":
        return f"{saved_runs(logs / 'gate-storage')} runs saved", []
    if name == "gate-check":
        return (gate_verdict(logs / "gate-check.log") if (logs / "gate-check.log").exists() else ""), []
    return "", []


def _probe_headline(found: dict | None) -> str:
    if not found:
        return ""
    devices = found.get("devices") or []
    what = f"{len(devices)} GPU(s): {devices[0]['name']}" if devices else "no GPU"
    left_out = found.get("missing_optional") or []
    return f"torch {found.get('torch')}, {what}" + (f"; left out: {', '.join(left_out)}" if left_out else "")


class Run:
    """One acceptance run into ``out``; ``launch``, ``clock`` and ``stderr`` can be replaced in tests."""

    def __init__(self, out, *, python=sys.executable, root=ROOT, budget_s=TOTAL_BUDGET_S, clock=time.monotonic,
                 runner=run_step, stderr=sys.stderr, only=None, step_budgets=None):
        self.out = check_outdir(Path(out))
        self.logs = self.out / LOGS_DIR
        self.python, self.root, self.budget_s = python, Path(root), budget_s
        self.clock, self.runner, self.stderr = clock, runner, stderr
        self.started = clock()
        self.started_utc = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.env = step_environment(self.root)
        self.outcomes: list[Outcome] = []
        self.figures: list = []
        self.machine: dict | None = None
        self.only = tuple(only) if only else None
        self.step_budgets = dict(step_budgets or {})

    def time_left(self) -> float:
        return self.budget_s - (self.clock() - self.started)

    def _run(self, step: Step) -> Outcome:
        print(f"[acceptance] {step.name}: {'skipped' if step.skip else 'running'} ({step.what})", file=self.stderr,
              flush=True)
        outcome = self.runner(step, log_dir=self.logs, time_left_s=self.time_left(), cwd=self.root, env=self.env)
        if outcome.status != SKIPPED or outcome.reason != step.skip:
            print(f"[acceptance] {step.name}: {outcome.status} in {outcome.seconds:.1f} s"
                  + (f": {outcome.reason}" if outcome.reason else ""), file=self.stderr, flush=True)
        return outcome

    def probe(self) -> tuple[Machine | None, str | None]:
        step = Step("probe", "what this machine has: torch, GPUs, NCCL, packages; every module of the package imported",
                    (self.python, "-m", "accounting.acceptance.probe", str(self.logs / "probe.json")),
                    PROBE_BUDGET_S, gpu=False)
        outcome = self._run(step)
        found = _read_json(self.logs / "probe.json") if outcome.status == PASSED else None
        if outcome.status == PASSED and found is None:
            outcome = dataclasses.replace(outcome, status=FAILED, reason="the probe wrote no readable JSON")
        if found and found.get("import_errors"):
            outcome = dataclasses.replace(outcome, status=FAILED,
                                          reason=f"the package does not import: {'; '.join(found['import_errors'])}")
        self.machine = found
        self.outcomes.append(outcome.with_headline(_probe_headline(found)))
        self.write_summary()
        return (Machine.from_probe(found) if found else None), (outcome.reason or None)

    def record(self, files=None) -> dict:
        steps = [outcome.as_dict() for outcome in self.outcomes]
        figures = [figure.as_dict() for figure in self.figures]
        return {"schema": SCHEMA, "started_utc": self.started_utc, "elapsed_s": round(self.clock() - self.started, 1),
                "budget_s": self.budget_s, "machine": self.machine, "steps": steps, "figures": figures,
                "gpu_checks": gpu_checks(steps, figures), "files": files or [], "result": result(steps, figures)}

    def write_summary(self, files=None) -> dict:
        record = self.record(files)
        (self.out / SUMMARY_JSON).write_text(json.dumps(record, indent=1) + "\n")
        (self.out / SUMMARY_MD).write_text(render(record))
        return record

    def execute(self) -> dict:
        """Run every step; on an interruption, still pack what there is (the summary says how far it got)."""
        try:
            return self._execute()
        except BaseException:
            with contextlib.suppress(Exception):  # the interruption is what the caller must see
                self.write_summary()
                pack(self.out)
            raise

    def _execute(self) -> dict:
        machine, problem = self.probe()
        device_name = machine.device_name if machine else None
        for step in build_steps(machine, Paths(self.root, self.out, self.logs), self.python, probe_problem=problem):
            step = chosen(step, only=self.only, step_budgets=self.step_budgets)
            needed = REQUIRES.get(step.name)
            before = next((o for o in self.outcomes if o.name == needed), None)
            if needed and not step.skip and (before is None or before.status != PASSED):
                step = dataclasses.replace(step, skip=f"needs {needed} to have passed "
                                                      f"(it {before.status if before else 'did not run'})")
            outcome = self._run(step)
            if outcome.status != SKIPPED:
                try:
                    headline, figures = read_step(step.name, self.out, self.logs, device_name)
                except (KeyError, TypeError, ValueError, AttributeError, OSError) as error:  # a malformed output
                    headline, figures = "", []
                    outcome = dataclasses.replace(outcome, status=FAILED, reason="; ".join(filter(None, (
                        outcome.reason, f"its outputs could not be read: {type(error).__name__}: {error}"))))
                outcome = outcome.with_headline(headline)
                self.figures.extend(figures)
            self.outcomes.append(outcome)
            self.write_summary()
        present = [entry.name for entry in self.out.iterdir() if entry.name != LOGS_DIR]
        names = list(dict.fromkeys([*present, SUMMARY_MD, SUMMARY_JSON, ARCHIVE]))
        moved = set(over_limit(names))
        record = self.write_summary(files=[name for name in names if name not in moved])
        pack(self.out)
        return record


STEP_NAMES = ("pytest-collect", *BUDGETS_S)
"""Every step after the probe, by name (what ``--only`` and ``--step-budget`` take)."""


def chosen(step: Step, *, only=None, step_budgets=None) -> Step:
    """``step`` as the command line chose it: skipped when ``only`` leaves it out, with its budget replaced.

    >>> step = Step("fleet", "f", ("x",), budget_s=60)
    >>> chosen(step, only=("report",)).skip
    'not selected (--only report)'
    >>> chosen(step, step_budgets={"fleet": 90.0}).budget_s
    90.0
    """
    if step.name in (step_budgets or {}):
        step = dataclasses.replace(step, budget_s=step_budgets[step.name])
    if only and step.name not in only and not step.skip:
        step = dataclasses.replace(step, skip=f"not selected (--only {','.join(only)})")
    return step


def step_names(text: str) -> tuple[str, ...]:
    """``--only``: comma-separated step names, each one of :data:`STEP_NAMES`.

    >>> step_names("report, fleet")
    ('report', 'fleet')
    >>> step_names("reprot")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: --only: unknown step 'reprot'; the steps: pytest-collect, clock-check, report-quick, fault-injection, report, pytest-gpu, model-mfu, model-anchor, fleet, gate-save, gate-check
    """
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in names or ("",):
        if name not in STEP_NAMES:
            raise argparse.ArgumentTypeError(f"--only: unknown step {name!r}; the steps: {', '.join(STEP_NAMES)}")
    return names


def step_budget(text: str) -> tuple[str, float]:
    """``--step-budget NAME=SECONDS``: one step's budget in place of its default.

    >>> step_budget("pytest-gpu=200")
    ('pytest-gpu', 200.0)
    >>> step_budget("pytest-gpu=0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: --step-budget is NAME=SECONDS with SECONDS a positive number, got 'pytest-gpu=0'
    """
    name, _, seconds = text.partition("=")
    step_names(name)
    try:
        value = float(seconds)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"--step-budget is NAME=SECONDS with SECONDS a positive number, got {text!r}")
    return name.strip(), value


def verify_no_gpu_run(record: dict, files: list[str], *, max_seconds: float = NO_GPU_MAX_S) -> list[str]:
    """What is wrong with a run on a machine without a GPU: each problem in one line (empty when it is right).

    The probe must have passed (the package imports without the optional packages), and so must every other step that
    needs no GPU (the GPU test files collect); every GPU step must be skipped with a reason, the run must take under ``max_seconds``, and OUTDIR must hold at most 8 files.
    """
    problems = []
    steps = record.get("steps") or []
    probe = [step for step in steps if step["name"] == "probe"]
    if not probe or probe[0]["status"] != PASSED:
        problems.append(f"the probe did not pass: {probe[0]['reason'] if probe else 'it did not run'}")
    for step in steps:
        if not step.get("gpu", True) and step["name"] != "probe" and step["status"] != PASSED:
            problems.append(f"{step['name']} did not pass: {step.get('reason') or step['status']}")
    gpu_steps = [step for step in steps if step.get("gpu", True)]
    if not gpu_steps:
        problems.append("the summary lists no GPU step")
    for check in record.get("gpu_checks") or []:
        if check["status"] != SKIPPED or not (check.get("reason") or "").strip():
            problems.append(f"the GPU check '{check['check']}' was {check['status']}, not skipped with a reason")
    if "gpu_checks" not in record:
        problems.append("the summary lists no check that needs a real GPU")
    for step in gpu_steps:
        if step["status"] != SKIPPED:
            problems.append(f"{step['name']} was {step['status']}, not skipped: {step.get('reason') or 'no reason'}")
        elif not (step.get("reason") or "").strip():
            problems.append(f"{step['name']} was skipped without a reason")
    if record.get("elapsed_s", 0) >= max_seconds:
        problems.append(f"the run took {record['elapsed_s']:.0f} s, not under {max_seconds:g} s")
    if len(files) > MAX_FILES:
        problems.append(f"OUTDIR holds {len(files)} files, more than {MAX_FILES}: {', '.join(sorted(files))}")
    return problems


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m accounting.acceptance",
                           description="The GPU acceptance run: pytest -m gpu, the report (standard, quick, fault "
                                       "injection), model MFU, the fleet, the gate, and the timer against an "
                                       "independent clock, each within its budget; the summary in OUTDIR.",
                           epilog="exit status: 0 everything held (or no GPU and every GPU step skipped with its "
                                  "reason); 1 a step failed or a figure is out of its expected range; 2 bad input.")
    parser.add_argument("outdir", metavar="OUTDIR", help="a new or empty directory for at most 8 files")
    parser.add_argument("--budget", metavar="SECONDS", type=float, default=TOTAL_BUDGET_S,
                        help="the whole run's budget (each step also has its own). Default: %(default)g")
    parser.add_argument("--only", metavar="STEPS", type=step_names, default=None,
                        help="run only these steps (comma-separated; the probe always runs), e.g. to rerun one that "
                             f"failed in the device time left. Steps: {', '.join(STEP_NAMES)}")
    parser.add_argument("--step-budget", metavar="NAME=SECONDS", type=step_budget, action="append", default=[],
                        help="give one step another budget (repeatable); the whole run's --budget still bounds it")
    parser.add_argument("--verify-no-gpu", action="store_true",
                        help="check a finished run in OUTDIR made without a GPU (CI): every GPU step skipped with a "
                             "reason, under --max-seconds, at most 8 files")
    parser.add_argument("--max-seconds", metavar="SECONDS", type=float, default=NO_GPU_MAX_S,
                        help="with --verify-no-gpu: the most the run may have taken. Default: %(default)g")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out = Path(args.outdir).resolve()
    if args.verify_no_gpu:
        record = _read_json(out / SUMMARY_JSON)
        if record is None:
            print(f"{parser.prog}: error: no readable {SUMMARY_JSON} in {out}", file=sys.stderr)
            return EXIT_BAD_INPUT
        problems = verify_no_gpu_run(record, [entry.name for entry in out.iterdir()], max_seconds=args.max_seconds)
        for problem in problems:
            print(f"{parser.prog}: {problem}", file=sys.stderr)
        if not problems:
            print(f"{parser.prog}: a run without a GPU, as it should be: every GPU step skipped with its reason, "
                  f"{record['elapsed_s']:.0f} s, {len(list(out.iterdir()))} files")
        return 1 if problems else 0
    if not args.budget > 0:
        parser.error(f"--budget must be a positive number of seconds, got {args.budget!r}")
    try:
        run = Run(out, budget_s=args.budget, only=args.only, step_budgets=dict(args.step_budget))
    except AccountingError as error:
        parser.error(str(error))
    os.chdir(run.root)  # benchmarks.json (the model floors) is read from the checkout
    # Terminated from outside (a lent machine's time limit): unwind, so the running step's processes are stopped.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(EXIT_TERMINATED))
    try:
        record = run.execute()
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted; the summary so far is in {out}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(render(record), end="", flush=True)
    return exit_status(record["result"])
