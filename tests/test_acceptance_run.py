"""accounting.acceptance.cli and .outputs: the whole run with fake steps, OUTDIR's file limit, and .ci/gpu on this CPU.

The run is driven by a fake step runner (no process is started): it writes what each step would write,
so the summary, its rewriting after every step, the order, the budget handed to each step and the exit
status are all seen. The slow test runs ``bash .ci/gpu`` itself on this machine, which has no GPU.
"""

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch

from accounting.acceptance import cli
from accounting.acceptance.outputs import ARCHIVE, MAX_FILES, check_outdir, over_limit, pack
from accounting.acceptance.plan import BUDGETS_S
from accounting.acceptance.steps import FAILED, PASSED, SKIPPED, Outcome
from accounting.acceptance.summary import GPU_CHECKS
from accounting.errors import AccountingError

ROOT = Path(__file__).resolve().parents[1]
CI_RUN_ENV = "ACCOUNTING_GPU_CHECK_OUTDIR"
"""Set by .ci/run to the OUTDIR of the run it made in a clean environment; the slow test then checks that run."""

GPU_PROBE = {"gpu": True, "no_gpu_reason": None, "nccl": True, "torch": "2.13.0+cu130", "cuda": "13.0",
             "devices": [{"index": 0, "name": "NVIDIA H200", "total_bytes": 150 * 10**9, "free_bytes": 149 * 10**9,
                          "compute_capability": "9.0", "multiprocessors": 132}],
             "missing_optional": ["ruptures", "beartype"], "missing_needed": [], "import_errors": [],
             "plugin_registered": False, "python_version": "3.12.3",
             "model": {"name": "tinyllama-1.1b", "batch": 4, "why": "tinyllama-1.1b at batch 4: fits 138.77 GiB free"}}


class FakeSteps:
    """Plays every step: the probe writes ``probe``; the others end as ``statuses`` says (default passed)."""

    def __init__(self, out: Path, probe=GPU_PROBE, statuses=None, seconds=10.0, clock=None, write=None):
        self.out, self.probe, self.statuses, self.seconds = out, probe, statuses or {}, seconds
        self.clock, self.write = clock, write or {}
        self.calls = []

    def __call__(self, step, *, log_dir, time_left_s, cwd, env):
        listed = len(json.loads((self.out / "summary.json").read_text())["steps"]) if self.calls else 0
        self.calls.append((step.name, time_left_s, listed, env["PYTHONPATH"].split(os.pathsep)[0]))
        if step.skip:
            return Outcome(step.name, step.what, SKIPPED, 0.0, step.budget_s, step.skip, gpu=step.gpu)
        if self.clock is not None:
            self.clock.now += self.seconds
        (Path(log_dir) / step.log_name).write_text("log\n")
        if step.name == "probe":
            Path(step.command[-1]).write_text(json.dumps(self.probe))
            return Outcome("probe", step.what, PASSED, self.seconds, step.budget_s, gpu=False)
        for name, text in self.write.get(step.name, {}).items():
            (self.out / name).write_text(text)
        status = self.statuses.get(step.name, PASSED)
        return Outcome(step.name, step.what, status, self.seconds, step.budget_s, "broke" if status == FAILED else "",
                       gpu=step.gpu)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _run(tmp_path, **kwargs):
    out = tmp_path / "out"
    clock = Clock()
    steps = FakeSteps(out, clock=clock, **kwargs)
    record = cli.Run(out, root=ROOT, runner=steps, clock=clock, budget_s=470, stderr=io.StringIO()).execute()
    return record, steps, out


def test_every_step_runs_in_order_and_the_summary_is_rewritten_after_each(tmp_path):
    record, steps, out = _run(tmp_path)
    assert [name for name, *_ in steps.calls] == ["probe", "pytest-collect", *BUDGETS_S]
    assert [listed for _name, _left, listed, _path in steps.calls] == list(range(len(BUDGETS_S) + 2))
    assert {path for *_rest, path in steps.calls} == {str(ROOT)}  # the checkout first on PYTHONPATH
    assert record["result"] == "held"
    assert json.loads((out / "summary.json").read_text())["result"] == "held"


def test_each_step_is_handed_what_is_left_of_the_run_s_budget(tmp_path):
    _record, steps, _out = _run(tmp_path)
    # the collection is skipped on a GPU machine: no time passes for it
    lefts = [470.0, 460.0] + [460.0 - 10 * index for index in range(len(BUDGETS_S))]
    assert [left for _name, left, *_ in steps.calls] == lefts


def _a_gpu_this_process_must_not_start(monkeypatch):
    """torch says a GPU is here, as on a lent machine; whatever would initialise CUDA in this process fails the test."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("the acceptance run's own process initialised CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "_lazy_init", refuse)
    monkeypatch.setattr(torch.cuda, "init", refuse)


def test_the_run_s_own_process_never_initialises_cuda(tmp_path, monkeypatch):
    """A CUDA context in the run's process (about 0.5 GB) would be another process on the GPU for every step: the
    plan, the model size included, is read from the probe's record, and nothing else asks the GPU."""
    _a_gpu_this_process_must_not_start(monkeypatch)
    record, steps, _out = _run(tmp_path)
    assert not torch.cuda.is_initialized()
    model = {step["name"]: step for step in record["steps"]}["model-mfu"]
    assert model["status"] == PASSED and "--model tinyllama-1.1b --batch 4" in model["what"]
    assert [name for name, *_ in steps.calls] == ["probe", "pytest-collect", *BUDGETS_S]


def test_a_failed_step_does_not_stop_the_run_and_fails_its_exit_status(tmp_path):
    record, steps, _out = _run(tmp_path, statuses={"report-quick": FAILED})
    assert len(steps.calls) == len(BUDGETS_S) + 2
    assert record["result"] == "did not hold"
    assert cli.exit_status(record["result"]) == 1
    assert [step["reason"] for step in record["steps"] if step["status"] == FAILED] == ["broke"]


def test_the_gate_check_needs_the_gate_save_to_have_passed(tmp_path):
    record, steps, _out = _run(tmp_path, statuses={"gate-save": FAILED})
    check = next(step for step in record["steps"] if step["name"] == "gate-check")
    assert (check["status"], check["reason"]) == (SKIPPED, "needs gate-save to have passed (it failed)")


def test_a_figure_out_of_range_fails_a_run_whose_steps_all_passed(tmp_path):
    report = {"dtypes": {"bfloat16": {"headlines": {"burst": {"flops_per_s": 400e12, "shape": [8192] * 3}}}},
              "health": {"state": "healthy"}, "verdict": "healthy"}
    record, _steps, _out = _run(tmp_path, write={"report": {"report.json": json.dumps(report)}})
    [figure] = record["figures"]
    assert (figure["name"], figure["verdict"]) == ("bfloat16 burst", "below")
    assert record["result"] == "did not hold"
    report_step = next(step for step in record["steps"] if step["name"] == "report")
    assert report_step["headline"] == "health healthy, verdict healthy"


def test_the_clock_check_s_gpu_checks_land_in_the_summary(tmp_path):
    sustained = {"dtype": "bfloat16", "shape": [4608, 6208, 5632], "windows": [
        {"how": "one_event_pair", "tflops": 686.0, "clock_mhz_min": 1410.0, "clock_mhz_median": 1455.0,
         "clock_mhz_max": 1500.0, "power_w_median": 690.0, "throttle_reasons": ["sw_power_cap"]}],
        "median_tflops": {"time_fn": 792.6, "one_event_pair": 686.0}, "time_fn_over_one_event_pair": 792.6 / 686.0}
    clock = {"checks": [], "gpu_checks": {"sustained_windows": sustained, "hot_rounds": {"error": "RuntimeError: x"}}}
    record, _steps, out = _run(tmp_path, write={"clock-check": {"logs/clock-check.json": json.dumps(clock)}})
    checks = {c["check"].split(",")[0]: c["status"] for c in record["gpu_checks"]}
    assert list(checks.values()) == ["made", "not made", "not made", "not made"]
    text = (out / "summary.md").read_text()
    assert "| clock-check | bfloat16 4608x6208x5632 after a soak, one event pair, back to back | 686.0 TFLOP/s | " \
           "671.6–742.4 | in range | clock min/median/max 1410/1455/1500 MHz; 690 W; sw_power_cap |" in text


def test_without_a_gpu_every_gpu_step_is_skipped_and_the_run_passes_as_no_gpu(tmp_path):
    probe = dict(GPU_PROBE, gpu=False, devices=[], no_gpu_reason="no CUDA device: torch.cuda.is_available() is False")
    record, steps, out = _run(tmp_path, probe=probe)
    assert record["result"] == "no GPU" and cli.exit_status(record["result"]) == 0
    assert cli.verify_no_gpu_run(record, [p.name for p in out.iterdir()]) == []
    assert f"| clock-check | skipped | 0.0 | {BUDGETS_S['clock-check']:g} |" in (out / "summary.md").read_text()
    assert [(c["check"], c["status"], c["reason"]) for c in record["gpu_checks"]] == [
        (what, SKIPPED, "no CUDA device: torch.cuda.is_available() is False") for what, _step, _words in GPU_CHECKS]


def test_a_probe_that_finds_the_package_broken_fails_and_skips_the_rest(tmp_path):
    probe = dict(GPU_PROBE, import_errors=["accounting.gate.changepoints: ModuleNotFoundError: No module named 'x'"])
    record, _steps, _out = _run(tmp_path, probe=probe)
    probe_step, *gpu_steps = record["steps"]
    assert probe_step["status"] == FAILED and probe_step["reason"].startswith("the package does not import: ")
    assert {step["status"] for step in gpu_steps} == {SKIPPED}
    assert record["result"] == "did not hold"


def test_outdir_keeps_at_most_eight_files_and_the_logs_go_into_one_archive(tmp_path):
    extra = {f"extra{index}.json": "{}" for index in range(6)}
    record, _steps, out = _run(tmp_path, write={"report": {"report.json": "{}", "report.png": "png", **extra}})
    names = sorted(path.name for path in out.iterdir())
    assert len(names) == MAX_FILES and ARCHIVE in names and "summary.md" in names and "report.json" in names
    assert sorted(record["files"]) == names
    with tarfile.open(out / ARCHIVE) as archive:
        archived = archive.getnames()
    assert "logs/probe.log" in archived and "logs/probe.json" in archived
    assert {f"logs/{name}" for name in extra} - set(archived) == {f"logs/{n}" for n in names if n in extra}


@pytest.mark.parametrize("names, moved", [
    pytest.param(["summary.md", "summary.json", "logs.tar.gz"], [], id="within"),
    pytest.param(["a", "b", "c", "summary.md", "report.json", "logs.tar.gz"], ["b", "c"], id="others-first"),
    pytest.param(["report.png", "fleet.json", "summary.json", "summary.md", "logs.tar.gz"], ["report.png"],
                 id="least-important"),
])
def test_over_limit_moves_what_is_least_important_and_never_the_archive(names, moved):
    assert over_limit(names, limit=4) == moved


def test_pack_archives_the_logs_folder_and_removes_it(tmp_path):
    out = check_outdir(tmp_path / "out")
    (out / "logs" / "step.log").write_text("hello")
    (out / "summary.md").write_text("s")
    assert pack(out) == []
    assert sorted(p.name for p in out.iterdir()) == ["logs.tar.gz", "summary.md"]
    with tarfile.open(out / "logs.tar.gz") as archive:
        assert archive.extractfile("logs/step.log").read() == b"hello"


def test_a_non_empty_outdir_is_refused(tmp_path):
    (tmp_path / "old.md").write_text("x")
    with pytest.raises(AccountingError, match=r"^OUTDIR '.*' is not empty \(1 entries\): give a new or empty"):
        check_outdir(tmp_path)
    with pytest.raises(AccountingError, match=r"^OUTDIR '.*old\.md' exists and is not a directory$"):
        check_outdir(tmp_path / "old.md")


def test_the_command_refuses_a_non_empty_outdir_with_exit_status_2(tmp_path, capsys):
    (tmp_path / "old.md").write_text("x")
    with pytest.raises(SystemExit) as stopped:
        cli.main([str(tmp_path)])
    assert stopped.value.code == 2
    assert "is not empty" in capsys.readouterr().err


def _record(**changes):
    record = {"elapsed_s": 8.0, "steps": [
        {"name": "probe", "status": PASSED, "reason": "", "gpu": False},
        {"name": "report", "status": SKIPPED, "reason": "no CUDA device", "gpu": True},
        {"name": "fleet", "status": SKIPPED, "reason": "no CUDA device", "gpu": True}],
        "gpu_checks": [{"check": what, "step": step, "status": SKIPPED, "reason": "no CUDA device"}
                       for what, step, _words in GPU_CHECKS]}
    record.update(changes)
    return record


_MADE = [{"check": "the sweep rows' clock", "step": "report", "status": "made", "reason": "3 figures"}]


@pytest.mark.parametrize("record, files, problems", [
    pytest.param(_record(), ["summary.md"], [], id="right"),
    pytest.param(_record(elapsed_s=121.0), ["summary.md"], ["the run took 121 s, not under 120 s"], id="too-slow"),
    pytest.param(_record(steps=[{"name": "probe", "status": FAILED, "reason": "exit 1", "gpu": False},
                                {"name": "fleet", "status": SKIPPED, "reason": "x", "gpu": True}]), [],
                 ["the probe did not pass: exit 1"], id="probe-failed"),
    pytest.param(_record(steps=[{"name": "probe", "status": PASSED, "gpu": False},
                                {"name": "report", "status": PASSED, "reason": "", "gpu": True},
                                {"name": "fleet", "status": SKIPPED, "reason": " ", "gpu": True}]), [],
                 ["report was passed, not skipped: no reason", "fleet was skipped without a reason"], id="ran-or-no-reason"),
    pytest.param(_record(steps=[{"name": "probe", "status": PASSED, "gpu": False},
                                {"name": "pytest-collect", "status": FAILED, "reason": "exit status 2", "gpu": False},
                                {"name": "fleet", "status": SKIPPED, "reason": "x", "gpu": True}]), [],
                 ["pytest-collect did not pass: exit status 2"], id="gpu-files-do-not-collect"),
    pytest.param(_record(), [f"f{index}" for index in range(9)],
                 ["OUTDIR holds 9 files, more than 8: f0, f1, f2, f3, f4, f5, f6, f7, f8"], id="too-many-files"),
    pytest.param(_record(gpu_checks=_MADE), [],
                 ["the GPU check 'the sweep rows' clock' was made, not skipped with a reason"], id="a-gpu-check-made"),
    pytest.param({key: value for key, value in _record().items() if key != "gpu_checks"}, [],
                 ["the summary lists no check that needs a real GPU"], id="no-gpu-checks-listed"),
])
def test_verify_no_gpu_run_names_each_problem(record, files, problems):
    assert cli.verify_no_gpu_run(record, files) == problems


@pytest.mark.slow
def test_ci_gpu_on_this_cpu_machine_skips_every_gpu_step_with_its_reason(tmp_path):
    """.ci/gpu end to end here. Under .ci/run (CI) the run it made in a clean environment without ruptures, beartype
    and nvidia-ml-py is checked instead of making a second one: the same command, the stricter environment."""
    outdir = os.environ.get(CI_RUN_ENV)
    if outdir and (Path(outdir) / "summary.json").exists():
        out, seconds = Path(outdir), None
    else:
        out = tmp_path / "gpu-run"
        started = time.monotonic()
        completed = subprocess.run(["bash", str(ROOT / ".ci" / "gpu"), str(out)], capture_output=True, text=True,
                                   timeout=cli.NO_GPU_MAX_S, env={**os.environ, "PYTHON": sys.executable})
        seconds = time.monotonic() - started
        assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
        assert completed.stdout.startswith("# GPU acceptance run")  # the summary is printed last, on stdout
    record = json.loads((out / "summary.json").read_text())
    assert cli.verify_no_gpu_run(record, [path.name for path in out.iterdir()]) == []
    assert seconds is None or seconds < cli.NO_GPU_MAX_S
    assert len(list(out.iterdir())) <= MAX_FILES


def test_an_interrupted_run_still_leaves_its_summary_so_far_and_its_logs_packed(tmp_path):
    out = tmp_path / "out"

    class Interrupting(FakeSteps):
        def __call__(self, step, **kwargs):
            if step.name == "report":
                raise KeyboardInterrupt
            return super().__call__(step, **kwargs)

    steps = Interrupting(out, clock=Clock())
    with pytest.raises(KeyboardInterrupt):
        cli.Run(out, root=ROOT, runner=steps, clock=steps.clock, stderr=io.StringIO()).execute()
    record = json.loads((out / "summary.json").read_text())
    assert [step["name"] for step in record["steps"]] == ["probe", "pytest-collect", "clock-check", "report-quick",
                                                          "fault-injection"]
    assert sorted(path.name for path in out.iterdir()) == ["logs.tar.gz", "summary.json", "summary.md"]


def test_only_runs_the_chosen_steps_and_a_step_budget_replaces_the_default(tmp_path):
    out = tmp_path / "out"
    steps = FakeSteps(out, clock=Clock())
    record = cli.Run(out, root=ROOT, runner=steps, clock=steps.clock, stderr=io.StringIO(), only=("report", "fleet"),
                     step_budgets={"report": 200.0}).execute()
    ran = {step["name"]: step for step in record["steps"] if step["status"] == PASSED}
    assert list(ran) == ["probe", "report", "fleet"]
    assert ran["report"]["budget_s"] == 200.0 and ran["fleet"]["budget_s"] == BUDGETS_S["fleet"]
    skipped = {step["name"]: step["reason"] for step in record["steps"] if step["status"] == SKIPPED}
    assert skipped["clock-check"] == "not selected (--only report,fleet)"
    assert skipped["pytest-collect"] == "a GPU is here: the pytest-gpu step collects these files itself"
    assert record["result"] == "held"


@pytest.mark.parametrize("argv, message", [
    pytest.param(["--only", "reprot"], "--only: unknown step 'reprot'; the steps: pytest-collect, ", id="unknown-step"),
    pytest.param(["--step-budget", "fleet=-3"], "--step-budget is NAME=SECONDS with SECONDS a positive number",
                 id="negative-budget"),
    pytest.param(["--budget", "0"], "--budget must be a positive number of seconds, got 0.0", id="zero-budget"),
])
def test_bad_arguments_end_with_one_line_and_exit_status_2(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as stopped:
        cli.main([str(tmp_path / "out"), *argv])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_step_whose_outputs_cannot_be_read_fails_and_the_run_goes_on(tmp_path):
    broken = {"checks": [{"dtype": "bfloat16"}]}  # no ratios: a clock check cut short while writing

    class Writing(FakeSteps):
        def __call__(self, step, **kwargs):
            outcome = super().__call__(step, **kwargs)
            if step.name == "clock-check":
                (self.out / "logs" / "clock-check.json").write_text(json.dumps(broken))
            return outcome

    out = tmp_path / "out"
    steps = Writing(out, clock=Clock())
    record = cli.Run(out, root=ROOT, runner=steps, clock=steps.clock, stderr=io.StringIO()).execute()
    clock = next(step for step in record["steps"] if step["name"] == "clock-check")
    assert (clock["status"], clock["reason"]) == (FAILED, "its outputs could not be read: KeyError: 'package_over_events'")
    assert record["steps"][-1]["name"] == "gate-check" and record["result"] == "did not hold"
