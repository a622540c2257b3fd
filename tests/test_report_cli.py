"""``accounting report`` end to end on the CPU with a tiny budget, and its one-line errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from accounting.flops import MFU_CEILING
from accounting.report import cli
from tests.support.cli_runs import run_main

ROOT = Path(__file__).resolve().parent.parent
TINY_BUDGET = "2"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# The tests that read this run, or start `accounting` themselves, are marked slow: each starts a process.
@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """One real report on the CPU with a tiny budget (shared by the tests that read it)."""
    out = tmp_path_factory.mktemp("report")
    json_path, plot_path = out / "report.json", out / "report.png"
    command = [sys.executable, "-m", "accounting", "report", "--device", "cpu", "--dtypes", "float32,bf16",
               "--budget", TINY_BUDGET, "--json", str(json_path), "--plot", str(plot_path)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120,
                            env={**os.environ, "PYTHONWARNINGS": "error"})
    return result, json.loads(json_path.read_text()) if json_path.exists() else None, plot_path


@pytest.mark.slow
def test_report_runs_and_says_what_it_found(cpu_run):
    result, _report, _plot = cpu_run
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    for heading in ("Device: cpu", "Spec figures it compares against", "Memory bandwidth:", "Matmul sweep",
                    "float32 cases", "bfloat16 cases", "Verdict:", "Health:"):
        assert heading in result.stdout
    assert "%" in result.stderr and "TFLOP/s" in result.stderr, "a progress bar on stderr"


@pytest.mark.slow
def test_json_has_the_documented_fields(cpu_run):
    _result, report, _plot = cpu_run
    assert report is not None
    assert {"schema", "created_utc", "elapsed_s", "settings", "machine", "bandwidth", "dtypes", "notes",
            "verdict"} <= set(report)
    assert report["settings"] == {"device": "cpu", "dtypes": ["float32", "bfloat16"], "budget_s": 2.0,
                                  "level": "standard"}
    device = report["machine"]["device"]
    assert device["kind"] == "cpu" and device["cores"] >= 1 and device["memory_bytes"] > 0
    assert isinstance(device["cpu_flags"], list)
    bandwidth = report["bandwidth"]
    assert bandwidth["bytes_moved"] >= 2 * 256 * 2**20
    assert bandwidth["measured_bytes_per_s"] == pytest.approx(bandwidth["bytes_moved"] / bandwidth["seconds"])
    assert bandwidth["spec_bytes_per_s"] is None, "no spec bandwidth is invented for a CPU"
    health = report["health"]
    assert health["state"] in ("healthy", "degraded") and health["checks"]["failed"] == 0
    assert health["checks"]["products"] == sum(len(section["measurements"]) for section in report["dtypes"].values())
    assert all(row["check"]["ok"] for section in report["dtypes"].values() for row in section["measurements"])


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_json_entry_per_dtype(cpu_run, dtype):
    _result, report, _plot = cpu_run
    section = report["dtypes"][dtype]
    assert 0 < section["mfu"] <= MFU_CEILING
    assert section["peak_flops_per_s"] > 0
    best = section["best"]
    assert best["flops_per_s"] == max(row["flops_per_s"] for row in section["measurements"])
    assert section["mfu"] == pytest.approx(best["flops_per_s"] / section["peak_flops_per_s"])
    for row in section["measurements"]:
        assert row["flops"] == 2 * row["m"] * row["k"] * row["n"]
        assert row["bound"] in ("compute", "memory")
        assert row["arithmetic_intensity"] > 0
    assert section["verdict"]["status"] in ("healthy", "below floor", "unknown", "not judged")
    assert section["judged"] == (section["verdict"]["status"] != "not judged") == (section["native"] is True)


BUDGET_OVERRUN_LIMIT = 10
"""A run may overrun its budget on a loaded machine, but not by this factor: that is a budget ignored."""


@pytest.mark.slow
def test_elapsed_covers_the_timed_work_and_respects_the_budget(cpu_run):
    _result, report, _plot = cpu_run
    elapsed = report["elapsed_s"]
    # At least half of a median's repeats took the median or longer, so the calls timed took at least this:
    timed = [report["bandwidth"]] + [row for section in report["dtypes"].values() for row in section["measurements"]]
    least_timed_s = sum(0.5 * done["seconds"] * done["repeats"] for done in timed)
    assert 0 < least_timed_s <= elapsed, "elapsed_s counts the whole run, not just part of it"
    assert elapsed < BUDGET_OVERRUN_LIMIT * float(TINY_BUDGET)


@pytest.mark.slow
def test_plot_is_a_real_png(cpu_run):
    _result, _report, plot = cpu_run
    data = plot.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000


REPORT_ERROR = "accounting report: error: "
NO_SUCH_GPU = 100
"""A CUDA index no machine has (cuda:7 exists on an 8-GPU node; torch cannot address 128 and up)."""


@pytest.fixture(params=["cpu-only-host", "8-gpu-host"])
def any_host(request, monkeypatch):
    """Runs a test as on a machine without CUDA and as on an 8-GPU node (CUDA faked present): a test whose
    outcome depends on the host it runs on fails in one of the two."""
    if request.param == "8-gpu-host":
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    else:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return request.param


@pytest.mark.parametrize(
    "argv, line",
    [
        pytest.param(["--device", "cpu", "--dtypes", "int4"], REPORT_ERROR + "--dtypes: unknown floating-point format 'int4'; known: ",
                     id="unknown-dtype"),
        pytest.param(["--device", "cpu", "--dtypes", ","], REPORT_ERROR + "argument --dtypes: --dtypes needs at least one dtype name",
                     id="empty-dtypes"),
        pytest.param(["--device", "cpu", "--dtypes", "tf32"], REPORT_ERROR + "--dtypes: tf32 cannot run on cpu: tf32 is a CUDA tensor-core mode",
                     id="tf32-on-cpu"),
        pytest.param(["--device", "tpu"], REPORT_ERROR + "unknown device 'tpu'", id="unknown-device"),
        pytest.param(["--device", f"cuda:{NO_SUCH_GPU}"], REPORT_ERROR + f"device 'cuda:{NO_SUCH_GPU}' is not available",
                     id="unavailable-device"),
        pytest.param(["--device", "cuda:4096"], REPORT_ERROR + "device 'cuda:4096': index 4096 is out of the range",
                     id="index-torch-wraps"),
        pytest.param(["--device", "cpu", "--budget", "0"], REPORT_ERROR + "argument --budget: --budget must be a positive number of seconds, got '0'",
                     id="zero-budget"),
        pytest.param(["--device", "cpu", "--budget", "-5"], REPORT_ERROR + "argument --budget: --budget must be a positive number of seconds, got '-5'",
                     id="negative-budget"),
        pytest.param(["--device", "cpu", "--budget", "nan"], REPORT_ERROR + "argument --budget: --budget must be a positive number of seconds, got 'nan'",
                     id="nan-budget"),
        pytest.param(["--device", "cpu", "--budget", "soon"], REPORT_ERROR + "argument --budget: --budget must be a positive number of seconds, got 'soon'",
                     id="words-budget"),
        pytest.param(["--device", "cpu", "--json", "/nonexistent-dir/r.json"],
                     REPORT_ERROR + "--json '/nonexistent-dir/r.json' cannot be written: No such file or directory",
                     id="json-dir-missing"),
        pytest.param(["--device", "cpu", "--plot", "."], REPORT_ERROR + "--plot '.' cannot be written: it is a directory", id="plot-is-a-directory"),
        pytest.param(["--frobnicate"], "accounting: error: unrecognized arguments: --frobnicate", id="unknown-option"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(argv, line, capsys, any_host):
    budget = [] if "--budget" in argv else ["--budget", "1"]
    status, out, err = run_main(["report", *budget, *argv], capsys)
    assert status == 2
    assert out == "", "nothing was measured"
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(line)


def test_unwritable_file_is_refused_before_measuring(tmp_path, capsys, any_host):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    target = locked / "r.json"
    try:
        if os.access(locked, os.W_OK):
            # root writes anyway: use a file inside a regular file's "directory" instead
            target = tmp_path / "not-a-dir.txt" / "r.json"
            (tmp_path / "not-a-dir.txt").write_text("x")
        status, out, err = run_main(["report", "--device", "cpu", "--budget", "1", "--json", str(target)], capsys)
    finally:
        locked.chmod(0o700)
    assert status == 2 and out == ""
    assert err.startswith(f"accounting report: error: --json {str(target)!r} cannot be written: ")
    assert not target.exists()


def test_no_command_is_an_error(capsys):
    status, _out, err = run_main([], capsys)
    assert status == 2
    assert err.strip().splitlines() == ["accounting: error: the following arguments are required: COMMAND"]


@pytest.mark.slow
def test_bad_argument_from_the_shell_has_no_traceback():
    result = subprocess.run([sys.executable, "-m", "accounting", "report", "--budget", "-1"], capture_output=True,
                            text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 2
    assert result.stderr == "accounting report: error: argument --budget: --budget must be a positive number of seconds, got '-1'\n"


def test_plot_without_matplotlib_is_refused_before_measuring(tmp_path, monkeypatch, capsys, any_host):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    status, out, err = run_main(["report", "--device", "cpu", "--budget", "1", "--plot", str(tmp_path / "r.png")], capsys)
    assert status == 2 and out == ""
    assert err == "accounting report: error: --plot needs matplotlib: pip install matplotlib\n"


def test_ctrl_c_closes_the_bar_once_and_exits_130(monkeypatch, capsys, any_host):
    class RecordingBar:
        def __init__(self, *, stream, **_kwargs):
            self.stream = stream

        def close(self):
            self.stream.write("[bar closed]\n")

    def interrupted(plan, *, progress, started, **_options):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "ProgressBar", RecordingBar)
    monkeypatch.setattr(cli, "build_report", interrupted)
    status, _out, err = run_main(["report", "--device", "cpu", "--dtypes", "float32", "--budget", "1"], capsys)
    assert status == 130
    assert err == "[bar closed]\naccounting report: interrupted\n", "the bar is closed once, before the message"
