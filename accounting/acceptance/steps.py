"""One step of the acceptance run: a command with its own time budget, run to an outcome that is never lost.

A step is a command line (a pytest run, a report, the fleet under ``torchrun``) with the exit status
that means it held. :func:`run_step` starts it in a session of its own, writes its output to its
log, and waits at most its budget (or what is left of the whole run's, if less). A step that
overruns is stopped — the whole process group, so ``torchrun``'s workers go too: SIGTERM, then
SIGKILL after :data:`KILL_GRACE_S` — and recorded as *failed* with the budget it ran past. A step
that cannot run here (no GPU, a missing package) is *skipped* with its reason and never started.
Nothing raises: a command that cannot even start is a failed step with the reason, and the next
step runs.

>>> step = Step("probe", "what is here", ("true",), budget_s=5, skip="no reason to run")
>>> run_step(step, log_dir=".", time_left_s=100).status
'skipped'
"""

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from accounting.errors import AccountingError

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
"""A step's outcome: it held; it ran and did not hold (or overran, or could not start); it did not run, with why."""

KILL_GRACE_S = 5.0
"""After SIGTERM, how long a stopped step's processes get to exit before SIGKILL."""
MIN_STEP_S = 5.0
"""When the whole run has less than this left (and less than the step's own budget), the step is skipped instead
of being started only to be killed."""
LOG_TAIL_CHARACTERS = 300
"""How much of the end of a failed step's log its reason quotes."""


@dataclass(frozen=True)
class Step:
    """A command to run, and what makes it hold.

    ``expect_status``: the exit status that means it held (the fault-injection step expects 4).
    ``skip``: why it cannot run here; it is then never started. ``check``: called after the
    expected exit status, returns a reason it did not hold after all (read from its outputs), or
    ``None``. ``env``: variables added for this step only.
    """

    name: str
    what: str
    command: tuple[str, ...]
    budget_s: float
    expect_status: int = 0
    skip: str | None = None
    check: Callable[[], str | None] | None = None
    env: dict = field(default_factory=dict)
    gpu: bool = True

    def __post_init__(self):
        if not self.name or not self.name.replace("-", "").isalnum():
            raise AccountingError(f"a step name is letters, digits and '-', got {self.name!r}")
        if not (self.budget_s > 0):
            raise AccountingError(f"step {self.name}: budget_s must be positive, got {self.budget_s!r}")

    @property
    def log_name(self) -> str:
        return f"{self.name}.log"


@dataclass(frozen=True)
class Outcome:
    """What became of one step: ``status``, the seconds it took, and why it failed or was skipped."""

    name: str
    what: str
    status: str
    seconds: float
    budget_s: float
    reason: str = ""
    exit_status: int | None = None
    headline: str = ""
    gpu: bool = True

    def as_dict(self) -> dict:
        return {"name": self.name, "what": self.what, "status": self.status, "seconds": round(self.seconds, 3),
                "budget_s": self.budget_s, "reason": self.reason, "exit_status": self.exit_status,
                "headline": self.headline, "gpu": self.gpu}

    def with_headline(self, headline: str) -> "Outcome":
        return replace(self, headline=headline)


def _tail(log: Path) -> str:
    """The last non-empty lines of a log, up to :data:`LOG_TAIL_CHARACTERS`, on one line."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    tail = ""
    for line in reversed(lines):
        joined = f"{line} | {tail}" if tail else line
        if len(joined) > LOG_TAIL_CHARACTERS:
            break
        tail = joined
    if not tail and lines:
        tail = "…" + lines[-1][-LOG_TAIL_CHARACTERS:]
    return tail


def stop_group(process, *, signal_group=os.killpg, grace_s: float = KILL_GRACE_S) -> None:
    """Stop ``process`` and everything it started (its session's process group): SIGTERM, then SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        try:
            signal_group(process.pid, sig)
        except ProcessLookupError:
            return  # already gone
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_step(step: Step, *, log_dir, time_left_s: float, cwd=None, env=None, launch=subprocess.Popen,
             clock=time.monotonic, signal_group=os.killpg) -> Outcome:
    """Run ``step`` within ``min(step.budget_s, time_left_s)`` seconds; its output goes to ``log_dir/<name>.log``.

    ``launch`` (``subprocess.Popen``'s signature), ``clock`` and ``signal_group`` (``os.killpg``'s)
    can be replaced: the tests pass fakes to check the budget handling without processes.
    """
    def outcome(status, seconds=0.0, reason="", exit_status=None):
        return Outcome(step.name, step.what, status, seconds, step.budget_s, reason, exit_status, gpu=step.gpu)

    if step.skip:
        return outcome(SKIPPED, reason=step.skip)
    limit = min(step.budget_s, time_left_s)
    if time_left_s < min(MIN_STEP_S, step.budget_s):
        return outcome(SKIPPED, reason=f"out of time: {max(time_left_s, 0):.0f} s left of the run's budget, "
                                      f"under the {MIN_STEP_S:g} s a step needs")
    log = Path(log_dir) / step.log_name
    environment = {**(os.environ if env is None else env), **step.env}
    started = clock()
    with open(log, "w") as handle:
        handle.write(f"$ {' '.join(step.command)}\n")
        handle.flush()
        try:
            process = launch(list(step.command), cwd=cwd, env=environment, stdout=handle, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as error:
            return outcome(FAILED, clock() - started, f"cannot start {step.command[0]}: {error.strerror or error}")
        try:
            status = process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            stop_group(process, signal_group=signal_group)
            handle.write(f"\n[acceptance] stopped: still running after {limit:g} s\n")
            return outcome(FAILED, clock() - started,
                           f"killed: still running after its budget of {limit:g} s", None)
        except BaseException:  # the run itself interrupted or terminated: leave no step running behind it
            stop_group(process, signal_group=signal_group)
            raise
    seconds = clock() - started
    if status != step.expect_status:
        tail = _tail(log)
        return outcome(FAILED, seconds, f"exit status {status}, expected {step.expect_status}"
                                        + (f": {tail}" if tail else ""), status)
    try:
        problem = step.check() if step.check is not None else None
    except (OSError, ValueError, KeyError, TypeError) as error:  # an output missing or malformed
        problem = f"its output could not be read: {type(error).__name__}: {error}"
    if problem:
        return outcome(FAILED, seconds, problem, status)
    return outcome(PASSED, seconds, "", status)
