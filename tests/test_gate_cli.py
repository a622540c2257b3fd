"""``accounting gate``: exit statuses, the CI summary, re-measuring only suspects up to the cap, bad input in one line."""

import argparse
import json
import math
import re
import statistics
import textwrap
from pathlib import Path

import numpy as np
import pytest

from accounting.gate import cli
from accounting.gate.measure import Measured, Runner
from accounting.gate.power import minimum_detectable_effect
from accounting.gate.stats import smallest_convictable
from accounting.gate.storage import GUARD_KEY, load_run, machine_id, run_files
from tests.support.cli_runs import run_main
from tests.support.gate_runs import COPY, LOADED, MATMUL, OTHER_CPU, QUIET, document, write

BASE = [0.0150, 0.0152, 0.0148, 0.0151, 0.0149, 0.0150, 0.0153, 0.0147, 0.0150, 0.0151]




@pytest.fixture
def storage(tmp_path):
    """A storage holding ten baseline runs of two benchmarks, in this interpreter's machine folder."""
    folder = tmp_path / ".benchmarks" / machine_id()
    for number, median in enumerate(BASE, start=1):
        write(folder, f"{number:04}_base.json", document({MATMUL: median, COPY: median}, guard=QUIET))
    return tmp_path / ".benchmarks"


def _current(tmp_path, medians_by_name, count, machine=None):
    options = {"machine": machine} if machine else {}
    return [write(tmp_path, f"current-{index}.json",
                  document({name: medians[index] for name, medians in medians_by_name.items()}, guard=QUIET,
                           **options))
            for index in range(count)]


def test_a_sure_regression_exits_1_and_lands_in_the_ci_summary(tmp_path, storage, monkeypatch, capsys):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv(cli.SUMMARY_ENV, str(summary))
    files = _current(tmp_path, {MATMUL: [0.0190, 0.0188, 0.0191, 0.0189], COPY: [0.0150, 0.0151, 0.0149, 0.0150]}, 4)
    status, out, err = run_main(["gate", "compare", "--storage", str(storage), "--metric", "median", "--markdown",
                                 str(tmp_path / "gate.md"), *files], capsys)
    assert (status, err) == (1, "")
    assert out.startswith("Gate: FAIL: 1 regression, 1 no change\n")
    markdown = (tmp_path / "gate.md").read_text()
    assert summary.read_text() == "earlier step\n" + markdown
    assert "| + | test_cpu_matmul[float32-1024x1024x1024] | 15.00 ms (10 runs) | 18.95 ms (4 runs) |" in markdown
    assert "baseline, current: each run's median round, median over runs." in markdown


def test_no_change_exits_0(tmp_path, storage, monkeypatch, capsys):
    monkeypatch.delenv(cli.SUMMARY_ENV, raising=False)
    files = _current(tmp_path, {MATMUL: [0.0150], COPY: [0.0151]}, 1)
    status, out, _ = run_main(["gate", "compare", "--storage", str(storage), *files], capsys)
    assert status == 0 and out.startswith("Gate: pass: 2 no change\n")


def test_the_plot_is_a_png(tmp_path, storage, capsys):
    files = _current(tmp_path, {MATMUL: [0.0190, 0.0188], COPY: [0.0150, 0.0151]}, 2)
    status, out, _ = run_main(["gate", "compare", "--storage", str(storage), "--plot", str(tmp_path / "h.png"),
                               *files], capsys)
    assert status == 0 and f"Plot written to {tmp_path / 'h.png'}" in out
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("case, line", [
    pytest.param("corrupt-current", r"current-0.json: not valid JSON", id="corrupt-current"),
    pytest.param("missing-current", r"cannot read saved run '.*nowhere.json': No such file or directory", id="missing"),
    pytest.param("empty-storage", r"no saved runs to compare with; save baselines first", id="empty-storage"),
    pytest.param("other-hardware", r"no usable baseline run: 0010_base.json: other hardware \(cpu_model 'AMD EPYC', "
                                   r"here 'Intel Xeon'", id="other-hardware"),
    pytest.param("mixed-current", r"current-1.json: the current runs come from different hardware", id="mixed"),
    pytest.param("baselines-zero", r"argument --baselines: must be a positive integer, got '0'", id="baselines-0"),
    pytest.param("zero-round", r"current-0.json: benchmark .* round 0 is 0.0", id="zero-round"),
    pytest.param("threshold-percent", r"argument --threshold: must be a fraction in \(0, 1\) \(0.05 = 5 %\), got '5'",
                 id="threshold-percent"),
])
def test_bad_input_is_one_line_naming_it_and_exit_2(tmp_path, storage, case, line, capsys):
    files = _current(tmp_path, {MATMUL: [0.0150, 0.0150]}, 2)
    options = ["--storage", str(storage)]
    if case == "corrupt-current":
        write(tmp_path, "current-0.json", "{")
    elif case == "missing-current":
        files = [str(tmp_path / "nowhere.json")]
    elif case == "empty-storage":
        options = ["--storage", str(tmp_path / "empty")]
    elif case == "other-hardware":
        files = _current(tmp_path, {MATMUL: [0.0150]}, 1, machine=OTHER_CPU)
    elif case == "mixed-current":
        write(tmp_path, "current-1.json", document({MATMUL: 0.015}, machine=OTHER_CPU))
    elif case == "baselines-zero":
        options += ["--baselines", "0"]
    elif case == "threshold-percent":
        options += ["--threshold", "5"]
    elif case == "zero-round":
        write(tmp_path, "current-0.json", document({MATMUL: [0.0] + [0.015] * 9}))
    status, out, err = run_main(["gate", "compare", *options, *files], capsys)
    assert status == 2 and out == ""
    assert len(err.splitlines()) == 1
    assert err.startswith("accounting gate compare: error: ")
    assert re.search(line, err), err


class FakeRunner:
    """Stands in for :class:`Runner`: each "process" writes a run whose medians come from ``plan``."""

    plan = {}
    calls = []

    def __init__(self, pytest_args, *, device, workdir, **_):
        self.pytest_args, self.workdir, self.notes = pytest_args, workdir, []

    def run(self, name, *, only=None, storage=None):
        number = len(FakeRunner.calls)
        FakeRunner.calls.append((name, only))
        names = only if only is not None else list(FakeRunner.plan)
        medians = {bench: FakeRunner.plan[bench][min(number, len(FakeRunner.plan[bench]) - 1)] for bench in names}
        path = write(Path(self.workdir), f"{name}.json", document(medians, guard=QUIET))
        return Measured(path, 0, 1.0, "1 passed")


@pytest.fixture
def fake_runner(monkeypatch):
    FakeRunner.calls = []
    monkeypatch.setattr(cli, "Runner", FakeRunner)
    return FakeRunner


def test_check_re_measures_only_the_suspect_until_it_is_decided(tmp_path, storage, fake_runner, capsys):
    fake_runner.plan = {MATMUL: [0.0190, 0.0188, 0.0191, 0.0189, 0.0190], COPY: [0.0150]}
    status, out, err = run_main(["gate", "check", "--storage", str(storage), "--keep", str(tmp_path / "kept"),
                                 "--", "-m", "cpu"], capsys)
    assert status == 1 and out.startswith("Gate: FAIL: 1 regression, 1 no change")
    assert fake_runner.calls[0] == ("current-1", None)
    assert all(only == [MATMUL] for _, only in fake_runner.calls[1:])
    # 10 baseline runs, a family of 2 (Holm's smallest level 0.005): 1/286 needs 3 current runs of the suspect.
    assert len(fake_runner.calls) == 3
    assert "re-measuring 1 inconclusive benchmark(s) in a fresh process (2 of at most 4)" in err
    assert (tmp_path / "kept" / "current-3.json").is_file()


def test_check_stops_at_the_cap_and_says_so(tmp_path, storage, fake_runner, capsys):
    fake_runner.plan = {MATMUL: [0.0190, 0.0150, 0.0190, 0.0150, 0.0190, 0.0150], COPY: [0.0150]}
    status, out, _ = run_main(["gate", "check", "--storage", str(storage), "--max-extra-runs", "2", "--",
                               "-m", "cpu"], capsys)
    assert status == 0 and len(fake_runner.calls) == 3
    assert f"Note: still inconclusive after 2 extra run(s) (the cap, --max-extra-runs): {MATMUL}" in out
    # What its baseline's noise lets 1 + 2 current runs convict: the baseline runs' own spread (their fastest
    # rounds are a fixed share of BASE, so the logs spread as BASE's do).
    spread = statistics.stdev(math.log(value) for value in BASE)
    smallest = smallest_convictable(spread, len(BASE), 3, threshold=0.10)
    assert (f"Note: {MATMUL}: its 10 baseline runs spread by {spread:.2g} (sd of the logs of their min); with 3 "
            f"current runs the gate convicts a slowdown from about {smallest:.3g}× up.") in out
    assert out.count("baseline runs spread by") == 1  # the decided benchmark gets no such note


def test_check_min_runs_measures_every_benchmark_that_often_so_no_change_has_power(tmp_path, storage, fake_runner,
                                                                                   capsys):
    fake_runner.plan = {MATMUL: [0.0150, 0.0151, 0.0149], COPY: [0.0151, 0.0150, 0.0152]}
    status, out, err = run_main(["gate", "check", "--storage", str(storage), "--min-runs", "3", "--max-extra-runs",
                                 "0", "--json", str(tmp_path / "v.json"), "--", "-m", "cpu"], capsys)
    assert status == 0 and out.startswith("Gate: pass: 2 no change")
    assert fake_runner.calls == [("current-1", None), ("current-2", sorted([MATMUL, COPY])),
                                 ("current-3", sorted([MATMUL, COPY]))]  # --max-extra-runs raised to 2
    assert "measuring every benchmark again in a fresh process (run 3 of at least 3)" in err
    rows = json.loads((tmp_path / "v.json").read_text())["benchmarks"]
    # 10 baseline and 3 current runs reach Holm's 0.005 (1/286): each no change now says how much it could see.
    assert all(len(row["current_values_s"]) == 3 and row["detectable_ratio"] is not None for row in rows)


def test_check_passes_a_quiet_benchmark_in_one_run(tmp_path, storage, fake_runner, capsys):
    fake_runner.plan = {MATMUL: [0.0150], COPY: [0.0151]}
    status, out, _ = run_main(["gate", "check", "--storage", str(storage), "--", "-m", "cpu"], capsys)
    assert status == 0 and len(fake_runner.calls) == 1 and out.startswith("Gate: pass: 2 no change")


BENCH_MODULE = textwrap.dedent("""
    def test_a(benchmark):
        benchmark.pedantic(sum, args=(range(1000),), rounds=6, iterations=1)

    def test_b(benchmark):
        benchmark.pedantic(sum, args=(range(2000),), rounds=6, iterations=1)
""")


@pytest.mark.slow
def test_real_processes_save_with_guard_readings_and_re_measure_only_the_listed_ids(tmp_path):
    (tmp_path / "test_tiny.py").write_text(BENCH_MODULE)
    readings = []

    def reader(device):
        readings.append(device)
        return dict(QUIET["before"], device=device)

    runner = Runner(["-q", "-p", "no:cacheprovider", "test_tiny.py"], device="cpu", cwd=str(tmp_path),
                    workdir=str(tmp_path / "work"), reader=reader)
    saved = runner.run("save-1", storage=str(tmp_path / "store"))
    run = load_run(saved.path)
    assert saved.returncode == 0 and sorted(run.benchmarks) == ["test_tiny.py::test_a", "test_tiny.py::test_b"]
    assert run.label.startswith("0001_") and run.guard["before"]["device"] == "cpu" and readings == ["cpu", "cpu"]
    assert run.guard["duration_s"] > 0 and run.guard["own_after"] > 0
    only = runner.run("current-2", only=["test_tiny.py::test_b"])
    assert sorted(load_run(only.path).benchmarks) == ["test_tiny.py::test_b"]
    assert json.loads((tmp_path / "work" / "current-2.json").read_text())[GUARD_KEY]["own_before"] > 0


@pytest.mark.slow  # pytest runs as a process of its own
def test_pytest_failing_to_run_is_bad_input_naming_its_exit_status(tmp_path):
    runner = Runner(["--no-such-option"], cwd=str(tmp_path), workdir=str(tmp_path / "work"),
                    reader=lambda device: None)
    with pytest.raises(Exception, match=r"^pytest exited 4 without benchmark results"):
        runner.run("current-1")


def test_the_help_lists_the_exit_statuses(capsys):
    status, help_text, _ = run_main(["gate", "check", "--help"], capsys)
    words = " ".join(help_text.split())
    assert status == 0 and "exit status: 0 no sure regression" in words and "1 a sure regression, 2 bad input" in words


def test_without_the_load_guard_a_loaded_run_is_used_and_the_summary_says_so(tmp_path, storage, capsys):
    loaded = [write(tmp_path, "current-0.json", document({MATMUL: 0.0150, COPY: 0.0150}, guard=LOADED))]
    status, out, _ = run_main(["gate", "compare", "--storage", str(storage), *loaded], capsys)
    assert status == 0 and out.startswith("Gate: pass: 2 inconclusive")
    status, out, _ = run_main(["gate", "compare", "--storage", str(storage), "--no-load-guard", *loaded], capsys)
    assert status == 0 and out.startswith("Gate: pass: 2 no change")
    assert "Note: load guard off: runs on a loaded or throttled machine are used as they are" in out


def test_an_unwritable_output_is_refused_before_anything_runs(tmp_path, storage, fake_runner, capsys):
    status, out, err = run_main(["gate", "check", "--storage", str(storage), "--markdown",
                                 str(tmp_path / "missing" / "gate.md"), "--", "-m", "cpu"], capsys)
    assert status == 2 and out == "" and fake_runner.calls == []
    assert err == f"accounting gate check: error: --markdown '{tmp_path / 'missing' / 'gate.md'}' cannot be written: " \
                  "No such file or directory\n"


@pytest.mark.parametrize("given, cuda, expected", [
    pytest.param(None, True, "cuda:0", id="cuda-default"), pytest.param(None, False, "cpu", id="cpu-default"),
    pytest.param("cuda:1", True, "cuda:1", id="given"),
])
def test_the_guard_reads_the_gpu_when_there_is_one(monkeypatch, given, cuda, expected):
    monkeypatch.setattr(cli, "cuda_available", lambda: cuda)
    assert cli._device(argparse.Namespace(device=given)) == expected


def test_the_metric_comes_from_benchmarks_json_unless_given(tmp_path, storage, capsys):
    """Rounds that are fast except a neighbour-slowed tail: the configured metric (min) passes them,
    --metric median is fooled by the tail."""
    tailed = [0.0150] * 4 + [0.0210] * 6  # the baseline runs: rounds within 1 % of 14.7-15.3 ms
    folder = tmp_path / "tailed"
    config = json.loads(Path("benchmarks.json").read_text())
    files = [write(folder, f"current-{index}.json", document({MATMUL: tailed}, guard=QUIET)) for index in range(4)]
    status, out, _ = run_main(["gate", "compare", "--storage", str(storage), *files], capsys)
    assert config["regression"]["metric"] == "min"
    assert status == 0 and "each run's fastest round (min)" in out
    status, out, _ = run_main(["gate", "compare", "--storage", str(storage), "--metric", "median", *files], capsys)
    assert status == 1 and "each run's median round" in out


OTHER_MODULE = textwrap.dedent("""
    from pathlib import Path

    with Path(__file__).with_name("imports.txt").open("a") as log:  # one line per process that collects this file
        log.write("imported\\n")

    def test_not_a_benchmark():
        pass
""")


@pytest.mark.slow  # pytest runs as processes of their own
def test_a_re_measurement_collects_only_the_files_of_its_node_ids(tmp_path):
    """The suspects' run used to collect the user's whole selection (this project's ~2,000 tests, about 3 s of an
    8.5 s process) only to deselect all but a few; now it collects their files alone."""
    (tmp_path / "test_tiny.py").write_text(BENCH_MODULE)
    (tmp_path / "test_other.py").write_text(OTHER_MODULE)
    runner = Runner(["-q", "-p", "no:cacheprovider"], cwd=str(tmp_path), workdir=str(tmp_path / "work"),
                    reader=lambda device: None)
    first = runner.run("current-1")
    assert sorted(load_run(first.path).benchmarks) == ["test_tiny.py::test_a", "test_tiny.py::test_b"]
    assert runner.node_ids == {"test_tiny.py::test_a": "test_tiny.py::test_a", "test_tiny.py::test_b": "test_tiny.py::test_b"}
    again = runner.run("current-2", only=["test_tiny.py::test_b"])
    assert sorted(load_run(again.path).benchmarks) == ["test_tiny.py::test_b"] and again.summary.startswith("1 passed")
    assert (tmp_path / "imports.txt").read_text().splitlines() == ["imported"]  # the first run's collection only


@pytest.mark.slow  # pytest runs as a process of its own
def test_a_selection_that_runs_no_benchmark_is_nothing_to_compare_not_an_error(tmp_path):
    """`-m gpu` on a machine without CUDA: pytest-benchmark's "Not saving anything" warning, under
    `filterwarnings = error`, failed the process, and the gate stopped with exit status 2."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    error\n")
    (tmp_path / "test_other.py").write_text(OTHER_MODULE)
    runner = Runner(["-q", "-p", "no:cacheprovider"], cwd=str(tmp_path), workdir=str(tmp_path / "work"),
                    reader=lambda device: None)
    measured = runner.run("current-1")
    assert measured.path is None and measured.returncode == 0
    saved = runner.run("save-1", storage=str(tmp_path / "store"))
    assert saved.path is None and run_files(tmp_path / "store") == []


def test_a_threshold_asked_for_on_the_command_line_decides_every_benchmark(tmp_path, storage, monkeypatch, capsys):
    monkeypatch.delenv(cli.SUMMARY_ENV, raising=False)
    slower = [0.0160, 0.0161, 0.0160, 0.0161, 0.0160]  # 7 % slower than BASE, whose runs spread by about 1 %
    files = _current(tmp_path, {MATMUL: slower, COPY: [0.0150, 0.0151, 0.0149, 0.0150, 0.0150]}, 5)
    status, out, _ = run_main(["gate", "compare", "--storage", str(storage), *files], capsys)
    assert status == 0 and out.startswith("Gate: pass: 2 no change\n")   # benchmarks.json's 10 %
    status, out, _ = run_main(["gate", "compare", "--storage", str(storage), "--threshold", "0.05", *files], capsys)
    assert status == 1 and out.startswith("Gate: FAIL: 1 regression, 1 no change\n")
    row = next(line for line in out.splitlines() if line.startswith("+"))
    assert re.search(r"\s[0-9.]+ %\s+regression", row)   # the detectable slowdown, below 5 %: not too noisy



def test_the_json_verdict_carries_what_each_benchmark_could_have_detected(tmp_path, storage, capsys):
    slower = [0.0160, 0.0161, 0.0160, 0.0161, 0.0160]
    files = _current(tmp_path, {MATMUL: slower, COPY: [0.0150, 0.0151, 0.0149, 0.0150, 0.0150]}, 5)
    status, out, _ = run_main(["gate", "compare", "--storage", str(storage), "--json", str(tmp_path / "v.json"),
                               *files], capsys)
    data = json.loads((tmp_path / "v.json").read_text())
    rows = {row["name"]: row for row in data["benchmarks"]}
    assert data["failed"] is (status == 1) and rows[COPY]["decision"] == "no change"
    base = [min(load_run(path).benchmarks[MATMUL].rounds) for path in run_files(storage, machine_id())]
    spread = math.sqrt((statistics.variance(np.log(base)) * 9 + statistics.variance(np.log(slower)) * 4) / 13)
    expected = minimum_detectable_effect(spread, 10, 5, alpha=0.01 / 2)   # Holm over the 2 compared
    assert rows[MATMUL]["detectable_ratio"] == pytest.approx(expected, rel=1e-4)
    assert rows[MATMUL]["too_noisy"] is False and rows[MATMUL]["ratio_low"] < rows[MATMUL]["ratio"]


class LoadedRunner:
    """A runner whose every process (after the first ``quiet`` ones) is measured under a neighbour's load and takes
    10 s on a fake clock."""

    def __init__(self, medians, now, quiet=0):
        self.medians, self.now, self.notes, self.calls, self.quiet = medians, now, [], [], quiet

    def run(self, name, *, only=None, storage=None):
        self.calls.append(only)
        self.now[0] += 10.0
        names = only if only is not None else list(self.medians)
        guard = QUIET if len(self.calls) <= self.quiet else LOADED
        path = write(Path(self.now[1]), f"{name}.json", document({bench: self.medians[bench] for bench in names},
                                                                  guard=guard))
        return Measured(path, 0, 10.0, "1 passed")


def test_one_quiet_run_among_loaded_ones_still_says_the_machine_was_loaded(tmp_path, storage):
    """A neighbour that leaves one quiet run in a budget's worth: the pass names the load, not a quiet machine."""
    from accounting.bench.matrix import load_benchmarks
    from accounting.gate.render import headline

    now = [0.0, str(tmp_path / "runs")]
    slower = statistics.median(BASE) * 1.10   # at the 10 % threshold: one run cannot decide it either way
    runner = LoadedRunner({MATMUL: slower}, now, quiet=1)
    result, _, current, extra = cli.gate_check(runner, load_benchmarks(), storage=str(storage), baselines=10,
                                               budget_s=50.0, clock=lambda: now[0], started=0.0)
    verdict = next(verdict for verdict in result.verdicts if verdict.name == MATMUL)
    assert verdict.decision.value == "inconclusive" and len(verdict.current_values) == 1
    assert extra == 3 and len(verdict.disturbed_values) == 3
    assert result.loaded == ("the machine was loaded: 3 of the 4 current runs of 1 benchmark(s) still inconclusive "
                             "were measured on a disturbed machine")
    assert "the machine was loaded: 3 of the 4" in headline(result)
    # All four quiet: the same inconclusive pass says nothing of load.
    now[0] = 0.0
    quiet = LoadedRunner({MATMUL: slower}, now, quiet=4)
    result, _, _, _ = cli.gate_check(quiet, load_benchmarks(), storage=str(storage), baselines=10, budget_s=50.0,
                                     clock=lambda: now[0], started=0.0)
    assert result.loaded == "" and "loaded" not in headline(result)
    # As many quiet as loaded: the quiet runs judge as much as the loaded would have, and the pass says nothing.
    now[0] = 0.0
    half = LoadedRunner({MATMUL: slower}, now, quiet=2)
    result, _, _, _ = cli.gate_check(half, load_benchmarks(), storage=str(storage), baselines=10, budget_s=50.0,
                                     clock=lambda: now[0], started=0.0)
    verdict = next(verdict for verdict in result.verdicts if verdict.name == MATMUL)
    assert verdict.decision.value == "inconclusive"
    assert len(verdict.current_values) == len(verdict.disturbed_values) == 2 and result.loaded == ""


def test_check_with_a_budget_re_measures_a_loaded_run_and_then_says_the_machine_was_loaded(tmp_path, storage):
    from accounting.bench.matrix import load_benchmarks
    from accounting.gate.render import headline

    now = [0.0, str(tmp_path / "runs")]
    runner = LoadedRunner({MATMUL: 0.0150, COPY: 0.0150}, now)
    result, _, current, extra = cli.gate_check(runner, load_benchmarks(), storage=str(storage), baselines=10,
                                               budget_s=50.0, clock=lambda: now[0], started=0.0)
    # Runs end at 10, 20, 30, 40 s; a fifth (10 s, with its 10 % margin) would end past 50 s.
    assert extra == 3 and now[0] == 40.0 and len(runner.calls) == 4
    assert headline(result).startswith("Gate: pass: 2 inconclusive — the machine was loaded: every current run of 2")
    assert "budget: 40 s of 50 s used (80 %), 4 run(s)" in result.notes
    # Without a budget: the saved-history rule as it was (the cap of 4 extra runs, no word on the load).
    now[0] = 0.0
    plain = LoadedRunner({MATMUL: 0.0150, COPY: 0.0150}, now)
    result, _, _, extra = cli.gate_check(plain, load_benchmarks(), storage=str(storage), baselines=10)
    assert extra == cli.DEFAULT_MAX_EXTRA_RUNS and result.loaded == "" and "the machine" not in headline(result)
