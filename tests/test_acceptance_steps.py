"""accounting.acceptance.steps: each step within its budget, an overrun killed and recorded, nothing lost.

The budget handling is checked with a fake process (no process is started) whose ``wait`` runs past the
limit it is given; one slow test stops a real process group: a sleeping shell and its child.
"""

import signal
import subprocess
import time
from pathlib import Path

import pytest

from accounting.acceptance.steps import FAILED, KILL_GRACE_S, MIN_STEP_S, PASSED, SKIPPED, Step, run_step, stop_group
from accounting.errors import AccountingError


class FakeProcess:
    """A process that exits with ``status`` after ``runs_s`` seconds, or ignores SIGTERM when told to."""

    def __init__(self, status=0, runs_s=0.0, ignores_term=False, output=""):
        self.pid = 4242
        self.status, self.runs_s, self.ignores_term, self.output = status, runs_s, ignores_term, output
        self.waits, self.signals = [], []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        if self.signals and (self.signals[-1] == signal.SIGKILL or not self.ignores_term):
            return -self.signals[-1]
        if timeout is not None and self.runs_s > timeout:
            raise subprocess.TimeoutExpired("fake", timeout)
        return self.status


class FakeLauncher:
    def __init__(self, process):
        self.process, self.calls = process, []

    def __call__(self, command, **kwargs):
        self.calls.append((command, kwargs))
        kwargs["stdout"].write(self.process.output)
        return self.process

    def signal_group(self, pid, sig):
        assert pid == self.process.pid
        self.process.signals.append(sig)


def _run(step, process, tmp_path, time_left_s=1000.0):
    launcher = FakeLauncher(process)
    outcome = run_step(step, log_dir=tmp_path, time_left_s=time_left_s, launch=launcher,
                       signal_group=launcher.signal_group, env={})
    return outcome, launcher


def test_a_step_that_overruns_its_budget_is_stopped_and_recorded_as_failed(tmp_path):
    outcome, launcher = _run(Step("report", "r", ("python", "-m", "x"), budget_s=30), FakeProcess(runs_s=100), tmp_path)
    assert outcome.status == FAILED
    assert outcome.reason == "killed: still running after its budget of 30 s"
    assert launcher.process.waits[0] == 30
    assert launcher.process.signals == [signal.SIGTERM]
    assert launcher.calls[0][1]["start_new_session"] is True  # its own process group: torchrun's workers go too
    assert "stopped: still running after 30 s" in (tmp_path / "report.log").read_text()


def test_the_limit_is_the_run_s_time_left_when_that_is_shorter(tmp_path):
    outcome, launcher = _run(Step("report", "r", ("x",), budget_s=30), FakeProcess(runs_s=20), tmp_path, time_left_s=12)
    assert launcher.process.waits[0] == 12
    assert outcome.reason == "killed: still running after its budget of 12 s"


def test_sigkill_follows_when_sigterm_is_ignored(tmp_path):
    process = FakeProcess(runs_s=100, ignores_term=True)
    _run(Step("fleet", "f", ("x",), budget_s=10), process, tmp_path)
    assert process.signals == [signal.SIGTERM, signal.SIGKILL]
    assert process.waits == [10, KILL_GRACE_S, KILL_GRACE_S]


@pytest.mark.parametrize("expect, status, outcome_status", [
    pytest.param(0, 0, PASSED, id="zero-expected"),
    pytest.param(4, 4, PASSED, id="fault-injection-exits-4"),
    pytest.param(4, 0, FAILED, id="fault-not-caught"),
    pytest.param(0, 3, FAILED, id="degraded"),
])
def test_the_expected_exit_status_decides(tmp_path, expect, status, outcome_status):
    outcome, _ = _run(Step("s", "w", ("x",), budget_s=10, expect_status=expect),
                      FakeProcess(status=status, output="first line\nlast words\n"), tmp_path)
    assert outcome.status == outcome_status
    assert outcome.exit_status == status
    if outcome_status == FAILED:
        assert outcome.reason.startswith(f"exit status {status}, expected {expect}: ")
        assert outcome.reason.endswith("first line | last words")


def test_a_check_of_the_outputs_can_still_fail_a_step_that_exited_as_expected(tmp_path):
    step = Step("s", "w", ("x",), budget_s=10, check=lambda: "the report's health is 'healthy', not 'failed'")
    outcome, _ = _run(step, FakeProcess(), tmp_path)
    assert (outcome.status, outcome.reason) == (FAILED, "the report's health is 'healthy', not 'failed'")


def test_an_output_that_cannot_be_read_fails_the_step_with_why(tmp_path):
    def check():
        raise FileNotFoundError(2, "No such file or directory", "fault.json")

    outcome, _ = _run(Step("s", "w", ("x",), budget_s=10, check=check), FakeProcess(), tmp_path)
    assert outcome.status == FAILED
    assert outcome.reason.startswith("its output could not be read: FileNotFoundError")


def test_a_skipped_step_is_never_started(tmp_path):
    outcome, launcher = _run(Step("s", "w", ("x",), budget_s=10, skip="no CUDA device"), FakeProcess(), tmp_path)
    assert (outcome.status, outcome.reason, outcome.seconds) == (SKIPPED, "no CUDA device", 0.0)
    assert launcher.calls == []


def test_a_step_offered_too_little_time_is_skipped_not_started(tmp_path):
    outcome, launcher = _run(Step("s", "w", ("x",), budget_s=10), FakeProcess(), tmp_path, time_left_s=MIN_STEP_S - 0.5)
    assert outcome.status == SKIPPED
    assert outcome.reason.startswith("out of time: 4 s left of the run's budget")
    assert launcher.calls == []


def test_a_command_that_cannot_start_is_a_failed_step(tmp_path):
    def launch(command, **kwargs):
        raise FileNotFoundError(2, "No such file or directory")

    outcome = run_step(Step("s", "w", ("no-such-program",), budget_s=10), log_dir=tmp_path, time_left_s=100,
                       launch=launch, env={})
    assert (outcome.status, outcome.reason) == (FAILED, "cannot start no-such-program: No such file or directory")


def test_the_step_s_environment_adds_its_own_variables(tmp_path):
    _outcome, launcher = _run(Step("s", "w", ("x",), budget_s=10, env={"EXTRA": "1"}), FakeProcess(), tmp_path)
    assert launcher.calls[0][1]["env"] == {"EXTRA": "1"}


@pytest.mark.parametrize("name, budget, match", [
    pytest.param("bad name", 10, r"^a step name is letters, digits and '-', got 'bad name'$", id="space"),
    pytest.param("ok", 0, r"^step ok: budget_s must be positive, got 0$", id="zero-budget"),
    pytest.param("ok", float("nan"), r"^step ok: budget_s must be positive, got nan$", id="nan-budget"),
])
def test_a_malformed_step_is_refused(name, budget, match):
    with pytest.raises(AccountingError, match=match):
        Step(name, "w", ("x",), budget_s=budget)


def test_stop_group_returns_quietly_when_the_group_is_already_gone():
    def gone(pid, sig):
        raise ProcessLookupError

    stop_group(FakeProcess(), signal_group=gone)


@pytest.mark.slow
def test_a_real_overrunning_step_and_its_child_are_killed(tmp_path):
    """A shell that starts a sleeping child and sleeps itself: both end at the budget, not a minute later."""
    pid_file = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pid_file}; sleep 60"
    started = time.monotonic()
    outcome = run_step(Step("sleeper", "w", ("sh", "-c", script), budget_s=1.5), log_dir=tmp_path, time_left_s=100)
    elapsed = time.monotonic() - started
    assert outcome.status == FAILED and outcome.reason == "killed: still running after its budget of 1.5 s"
    assert elapsed < 1.5 + KILL_GRACE_S
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        if state in ("gone", "Z"):
            break
        time.sleep(0.05)
    assert state in ("gone", "Z"), f"the child {child} survived its step ({state})"


def test_an_interrupted_run_stops_the_running_step_before_it_unwinds(tmp_path):
    class Interrupted(FakeProcess):
        def wait(self, timeout=None):
            if not self.signals:
                raise KeyboardInterrupt
            return super().wait(timeout)

    process = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        _run(Step("fleet", "f", ("x",), budget_s=10), process, tmp_path)
    assert process.signals == [signal.SIGTERM]
