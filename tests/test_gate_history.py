"""``accounting gate history``: the step and the merge that started it, the identity and bad-input rules of
``check``, the run and benchmark limits, the outputs; and ``check``'s baseline window after a recent step."""

import json
import re

import numpy as np
import pytest

from accounting.gate import cli
from accounting.gate.changepoints import detectable_step
from accounting.gate.storage import machine_id
from tests.support.cli_runs import run_main
from tests.support.gate_runs import (
    COPY,
    LOADED,
    MATMUL,
    OTHER_CPU,
    QUIET,
    document,
    write,
)

STEP_AT = 12
"""0-based position of the first slow run of the planted history (file 0013_main.json)."""


def _value(number, step):
    noise = 1 + 0.004 * np.sin(number * 2.1)  # deterministic, small, unlike any step
    return 0.0150 * noise * (1.25 if step and number > STEP_AT else 1)


def _commit(number):
    return {"id": f"{number:02d}" + "a" * 38, "branch": "main", "dirty": False}


@pytest.fixture
def history(tmp_path):
    """24 saved runs; MATMUL steps 1.25× at run 13 (commit 13aaa…), COPY stays flat."""
    folder = tmp_path / ".benchmarks" / machine_id()
    for number in range(1, 25):
        write(folder, f"{number:04}_main.json",
              document({MATMUL: _value(number, True), COPY: _value(number, False)}, guard=QUIET,
                       datetime=f"2026-11-{number:02d}T10:00:00+00:00", commit=_commit(number)))
    return tmp_path / ".benchmarks"


def _folder(storage):
    return storage / machine_id()


def test_the_step_is_named_with_its_first_run_date_and_commit(history, capsys, monkeypatch):
    monkeypatch.delenv(cli.SUMMARY_ENV, raising=False)
    status, out, err = run_main(["gate", "history", "--storage", str(history)], capsys)
    assert (status, err) == (0, "")
    assert out.startswith("History: 1 change point(s) in 1 of 2 benchmark(s), 24 runs (0001 … 0024, 2026-11-01 to "
                          "2026-11-24)\n")
    row = next(line for line in out.splitlines() if line.startswith("+"))
    assert "0013_main.json" in row and "2026-11-13" in row and "13aaaaaaaaaa (main)" in row and "1.25" in row
    assert "test_copy: no change point in 24 runs" in out


def test_json_and_markdown_carry_the_same_change_point(history, tmp_path, capsys):
    markdown = tmp_path / "h.md"
    status, out, _ = run_main(["gate", "history", "--storage", str(history), "--json", "-", "--markdown",
                               str(markdown)], capsys)
    assert status == 0
    data = json.loads(out)
    matmul = next(bench for bench in data["benchmarks"] if bench["name"] == MATMUL)
    (point,) = matmul["change_points"]
    assert (point["run"], point["commit"], point["branch"]) == ("0013_main.json", _commit(13)["id"], "main")
    assert point["previous_run"]["run"] == "0012_main.json"
    assert point["ratio_low"] < 1.25 < point["ratio_high"] and point["p_value"] <= 0.05
    assert [level["first_index"] for level in matmul["levels"]] == [0, STEP_AT]
    assert len(matmul["runs"]) == 24 and matmul["runs"][0]["value_s"] == pytest.approx(min(
        document({MATMUL: _value(1, True)})["benchmarks"][0]["stats"]["data"]))
    assert "| + | test_cpu_matmul[float32-1024x1024x1024] | 0013_main.json | 2026-11-13 |" in markdown.read_text()


def test_the_plot_is_a_png(history, tmp_path, capsys):
    status, out, _ = run_main(["gate", "history", "--storage", str(history), "--plot", str(tmp_path / "h.png")],
                              capsys)
    assert status == 0 and f"Plot written to {tmp_path / 'h.png'}" in out and (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("options, runs, steps", [
    pytest.param(["--to-run", "12"], 12, 0, id="runs-before-the-step"),
    pytest.param(["--from-run", "5", "--to-run", "20"], 16, 1, id="run-range"),
    pytest.param(["--since", "2026-11-06", "--until", "2026-11-20"], 15, 1, id="date-range"),
    pytest.param(["--last", "10"], 10, 0, id="last-runs-after-the-step"),
    pytest.param(["-k", "copy"], 24, 0, id="one-benchmark"),
])
def test_the_limits_choose_runs_and_benchmarks(history, capsys, options, runs, steps):
    status, out, _ = run_main(["gate", "history", "--storage", str(history), "--json", "-", *options], capsys)
    data = json.loads(out)
    assert status == 0 and len(data["runs"]) == runs
    assert sum(len(bench["change_points"]) for bench in data["benchmarks"]) == steps


def test_runs_from_other_hardware_and_disturbed_runs_are_passed_over_and_named(history, capsys):
    write(_folder(history), "0007_main.json", document({MATMUL: 0.015, COPY: 0.015}, machine=OTHER_CPU, guard=QUIET))
    write(_folder(history), "0008_main.json", document({MATMUL: 0.015, COPY: 0.015}, guard=LOADED))
    status, out, _ = run_main(["gate", "history", "--storage", str(history)], capsys)
    assert status == 0 and ", 22 runs (" in out
    assert "run 0007_main.json passed over: other hardware (cpu_model 'Intel Xeon', here 'AMD EPYC'" in out
    assert "run 0008_main.json passed over: load average 3.5" in out


@pytest.mark.parametrize("case, line", [
    pytest.param("corrupt", r"0005_main.json: not valid JSON", id="corrupt"),
    pytest.param("date", r"--since must be an ISO date or datetime .* got '1/11/2026'", id="bad-date"),
    pytest.param("order", r"--from-run 9 is after --to-run 3", id="range-backwards"),
    pytest.param("pattern", r"no benchmark matches 'nothing'", id="no-such-benchmark"),
])
def test_bad_input_is_one_line_and_exit_2(history, capsys, case, line):
    options = {"corrupt": [], "date": ["--since", "1/11/2026"],
               "order": ["--from-run", "9", "--to-run", "3"], "pattern": ["-k", "nothing"]}[case]
    if case == "corrupt":
        write(_folder(history), "0005_main.json", "{not json")
    status, out, err = run_main(["gate", "history", "--storage", str(history), *options], capsys)
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("accounting gate history: error: ")
    assert re.search(line, err)


def test_too_few_runs_are_said_plainly(history, capsys):
    status, out, _ = run_main(["gate", "history", "--storage", str(history), "--last", "4"], capsys)
    assert status == 0
    assert f"{MATMUL}: change-point detection needs at least 6 runs (3 on each side of a change), got 4" in out


def _current(tmp_path, seconds, count):
    return [write(tmp_path, f"current-{index}.json", document({MATMUL: seconds, COPY: 0.015}, guard=QUIET))
            for index in range(count)]


def test_check_compares_with_the_runs_after_a_recent_step_not_across_it(history, tmp_path, capsys):
    # the last 10 saved runs hold the step (runs 15-24 are all after it): ask for 16, which reach across it
    files = _current(tmp_path, 0.0150 * 1.25, 3)
    status, out, _ = run_main(["gate", "compare", "--storage", str(history), "--baselines", "16", *files], capsys)
    assert status == 0
    row = next(line for line in out.splitlines() if "test_cpu_matmul" in line and "runs)" in line)
    assert "(12 runs)" in row and row.rstrip().endswith("no change            —")
    assert (f"{MATMUL}: the history itself stepped 1.25" in out and "at run 0013_main.json (2026-11-13, commit "
            "13aaaaaaaaaa on main); its baseline is the 12 run(s) since, not across the step" in out)


def test_a_corrupt_file_older_than_the_baseline_window_does_not_stop_check(history, tmp_path, capsys):
    # the step search reads further back than the baseline; a bad old file costs the search, not the verdict
    write(_folder(history), "0002_main.json", "{not json")
    files = _current(tmp_path, 0.0150 * 1.25, 3)
    status, out, _ = run_main(["gate", "compare", "--storage", str(history), "--baselines", "5", *files], capsys)
    assert status == 0
    assert "history not searched for steps: " in out and "0002_main.json: not valid JSON" in out
    row = next(line for line in out.splitlines() if "test_cpu_matmul" in line and "runs)" in line)
    assert "(5 runs)" in row


def test_an_empty_storage_is_no_runs_not_bad_input(tmp_path, capsys):
    """The README's `gate history --plot history.png` on a machine that saved nothing (`gate save -- -m gpu` without
    a GPU) answers that there are no runs, exit status 0; it stopped with exit status 2 before."""
    status, out, err = run_main(["gate", "history", "--storage", str(tmp_path / "none"), "--plot",
                                 str(tmp_path / "history.png")], capsys)
    assert status == 0 and err == ""
    assert out.startswith("History: no runs") and "accounting gate save" in out
    assert not (tmp_path / "history.png").exists()


def test_each_benchmark_says_how_small_a_step_its_noise_lets_the_search_find(history, capsys):
    status, out, _ = run_main(["gate", "history", "--storage", str(history), "--json", "-"], capsys)
    data = json.loads(out)
    copy = next(bench for bench in data["benchmarks"] if bench["name"] == COPY)
    kept = len(copy["runs"]) - len(copy["outlier_indices"])
    assert copy["detectable_step_ratio"] == pytest.approx(detectable_step(copy["noise_log_sd"], kept))
    assert copy["too_noisy"] is (copy["detectable_step_ratio"] > 1 + copy["threshold"])
    status, text, _ = run_main(["gate", "history", "--storage", str(history)], capsys)
    percent = (copy["detectable_step_ratio"] - 1) * 100
    assert re.search(rf"test_copy: no change point in 24 runs \(noise: sd of log values [0-9.]+\), so no step larger "
                     rf"than {percent:.2g} % at the middle of them", text)


def test_a_ten_percent_step_in_runs_that_spread_by_five_percent_is_named_at_its_run(tmp_path, capsys):
    # Each run's level log-normal with sd 0.05, 12 rounds a run, 1.10x from the 21st of 30 runs: the earlier method's
    # penalty hid such a step entirely. This history (seed 5) is one the search places exactly; it finds about 7 in 20
    # within a run (docs/benchmarks-and-gate.md), and no method places more than about 16 in 20 from the runs alone.
    generator = np.random.default_rng(5)
    levels = 0.025 * np.exp(generator.normal(0, 0.05, 30))
    levels[20:] *= 1.10
    rounds = levels[:, None] * (1 + np.abs(generator.normal(0, 0.02, (30, 12))))
    folder = tmp_path / ".benchmarks" / machine_id()
    for number in range(1, 31):
        write(folder, f"{number:04}_main.json", document({MATMUL: list(rounds[number - 1])}, guard=QUIET,
                                                           datetime=f"2026-11-{number:02d}T10:00:00+00:00",
                                                           commit=_commit(number)))
    status, out, _ = run_main(["gate", "history", "--storage", str(tmp_path / ".benchmarks"), "--json", "-"], capsys)
    (bench,) = json.loads(out)["benchmarks"]
    (point,) = bench["change_points"]
    assert status == 0 and point["run"] == "0021_main.json" and point["ratio_low"] < 1.10 < point["ratio_high"]
    assert bench["too_noisy"] is (bench["detectable_step_ratio"] > 1.10)
