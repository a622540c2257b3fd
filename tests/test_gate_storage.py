"""Saved runs: read, checked, and the baseline chosen; every bad input named, never a traceback or a pass.

The truths: which identity fields the plugin's own ``machine_mismatch`` compares for the device kinds
given (CPU benchmarks: the host CPU; GPU ones: the accelerator), pytest-benchmark's folder per machine
id, and whole messages a user acts on.
"""

import json
import re

import pytest

from accounting.bench.identity import machine_mismatch
from accounting.errors import AccountingError
from accounting.gate.storage import (
    MIN_ROUNDS,
    choose_baseline,
    hardware_difference,
    load_run,
    machine_id,
    run_files,
)
from tests.support.gate_runs import COPY, CPU, LOADED, MATMUL, OTHER_CPU, QUIET, document, rounds, write


def test_a_saved_run_keeps_raw_rounds_identity_and_guard(tmp_path):
    path = write(tmp_path, "0001_x.json", document({MATMUL: 0.015}, guard=QUIET))
    run = load_run(path)
    bench = run.benchmarks[MATMUL]
    assert bench.median == pytest.approx(0.015) and len(bench.rounds) == 10 and bench.kind == "cpu"
    assert run.machine == CPU and run.guard == QUIET and run.label == "0001_x.json"


def _with_rounds(data):
    doc = document({MATMUL: 0.015})
    doc["benchmarks"][0]["stats"]["data"] = data
    return doc


def _without(*path):
    doc = document({MATMUL: 0.015})
    target = doc
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return doc


@pytest.mark.parametrize("content, message", [
    pytest.param("{not json", r"not valid JSON \(.*\); delete or replace the file$", id="corrupt"),
    pytest.param("", r"not valid JSON", id="empty-file"),
    pytest.param(json.dumps([1, 2]), r"not a pytest-benchmark run \(no 'benchmarks' list\)$",
                 id="not-a-run"),
    pytest.param(_without("machine_info", "accounting"),
                 r"no machine_info\['accounting'\], so it cannot be shown to come from this hardware",
                 id="no-identity"),
    pytest.param(_without("benchmarks", 0, "stats", "data"),
                 rf"benchmark {MATMUL.replace('[', '.').replace(']', '.')} has no raw rounds \(stats.data\); "
                 r"save runs with --benchmark-save-data$", id="no-raw-rounds"),
    pytest.param(_with_rounds(rounds(0.015)[:-1] + [0.0]), r"round 9 is 0.0; every round must be a positive, finite",
                 id="zero-round"),
    pytest.param(_with_rounds(rounds(0.015)[:-1] + [float("nan")]), r"round 9 is nan; every round must be",
                 id="nan-round"),
    pytest.param(_with_rounds(rounds(0.015)[:-1] + [-1.0]), r"round 9 is -1.0", id="negative-round"),
    pytest.param(_with_rounds(rounds(0.015)[:-1] + ["0.01"]), r"round 9 is '0.01'", id="text-round"),
    pytest.param(_with_rounds({"a": 1}), r"stats.data must be a list of seconds, got \{'a': 1\}$", id="data-not-list"),
])
def test_bad_saved_runs_are_named(tmp_path, content, message):
    path = write(tmp_path, "0001_x.json", content)
    with pytest.raises(AccountingError, match=r"^" + re.escape(str(tmp_path)) + r"/0001_x\.json: (benchmark \S+:? )?" + message):
        load_run(path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(AccountingError, match=r"^cannot read saved run '.*nowhere.json': No such file or directory$"):
        load_run(tmp_path / "nowhere.json")


def test_a_benchmark_twice_in_one_run_is_refused(tmp_path):
    doc = document({MATMUL: 0.015})
    doc["benchmarks"].append(doc["benchmarks"][0])
    with pytest.raises(AccountingError, match=r"appears twice$"):
        load_run(write(tmp_path, "0001_x.json", doc))


def test_run_files_are_numbered_runs_of_this_interpreter_oldest_first(tmp_path):
    for name in ("0010_c.json", "0002_b.json", "0001_a.json", "notes.json", "0003_d.txt"):
        write(tmp_path / "Linux-CPython-3.11-64bit", name, document({MATMUL: 0.015}))
    write(tmp_path / "Linux-CPython-3.12-64bit", "0004_other.json", document({MATMUL: 0.015}))
    names = [path.name for path in run_files(tmp_path, "Linux-CPython-3.11-64bit")]
    assert names == ["0001_a.json", "0002_b.json", "0010_c.json"]
    assert run_files(tmp_path / "missing", "Linux-CPython-3.11-64bit") == []


def test_the_baseline_is_the_last_k_runs_of_this_hardware_skipping_others(tmp_path):
    folder = tmp_path / "m"
    paths = [write(folder, f"{number:04}_run.json", document({MATMUL: 0.015}, machine=machine))
             for number, machine in enumerate([CPU, CPU, OTHER_CPU, CPU, CPU], start=1)]
    baseline = choose_baseline(paths, CPU, 3)
    assert [run.label for run in baseline.runs] == ["0002_run.json", "0004_run.json", "0005_run.json"]
    assert baseline.skipped == (("0003_run.json", "other hardware (cpu_model 'Intel Xeon', here 'AMD EPYC', "
                                                  "cpu_cores 4, here 2)"),)


def test_a_rejected_run_is_passed_over_for_an_older_one(tmp_path):
    paths = [write(tmp_path, f"{number:04}_run.json", document({MATMUL: 0.015}, guard=guard))
             for number, guard in enumerate([QUIET, QUIET, LOADED], start=1)]
    baseline = choose_baseline(paths, CPU, 2, reject=lambda run: "loaded" if run.guard is LOADED or
                               run.guard == LOADED else None)
    assert [run.label for run in baseline.runs] == ["0001_run.json", "0002_run.json"]
    assert baseline.skipped == (("0003_run.json", "loaded"),)


def test_only_other_hardware_in_storage_is_an_error_naming_it(tmp_path):
    paths = [write(tmp_path, "0001_run.json", document({MATMUL: 0.015}, machine=OTHER_CPU))]
    with pytest.raises(AccountingError, match=r"^no usable baseline run: 0001_run.json: other hardware \(cpu_model "
                                              r"'Intel Xeon', here 'AMD EPYC'"):
        choose_baseline(paths, CPU, 5)
    with pytest.raises(AccountingError, match=r"^no saved runs to compare with; save baselines first"):
        choose_baseline([], CPU, 5)


def test_a_corrupt_file_among_the_baseline_runs_is_an_error_not_a_smaller_baseline(tmp_path):
    paths = [write(tmp_path, "0001_run.json", document({MATMUL: 0.015})), write(tmp_path, "0002_run.json", "{")]
    with pytest.raises(AccountingError, match=r"0002_run.json: not valid JSON"):
        choose_baseline(paths, CPU, 5)


@pytest.mark.parametrize("count", [0, -1, True, 2.5])
def test_the_baseline_size_must_be_a_positive_integer(count):
    with pytest.raises(AccountingError, match=rf"^the number of baseline runs must be a positive integer, got {count!r}$"):
        choose_baseline([], CPU, count)


# ---- the hardware that counts, the machine's folder, dates, names and malformed entries --------------------

GPU_HOST = dict(CPU, accelerator="NVIDIA H100 80GB HBM3", compute_capability="9.0", sm_count=132,
                gpu_memory_bytes=80 * 2**30)
SAME_GPU_OTHER_HOST = dict(OTHER_CPU, accelerator="NVIDIA H100 80GB HBM3", compute_capability="9.0", sm_count=132,
                           gpu_memory_bytes=80 * 2**30)


def test_the_kinds_compared_decide_which_hardware_counts(tmp_path):
    """The same GPU in another host: CPU benchmarks cannot use its runs, GPU benchmarks can."""
    assert machine_mismatch(GPU_HOST, SAME_GPU_OTHER_HOST, {"cpu"}) and not machine_mismatch(
        GPU_HOST, SAME_GPU_OTHER_HOST, {"cuda"})
    assert hardware_difference(GPU_HOST, SAME_GPU_OTHER_HOST, {"cpu"}) == (
        "cpu_model 'Intel Xeon', here 'AMD EPYC', cpu_cores 4, here 2")
    assert hardware_difference(GPU_HOST, SAME_GPU_OTHER_HOST, {"cuda"}) == ""
    paths = [write(tmp_path, "0001_run.json", document({MATMUL: 0.015}, machine=SAME_GPU_OTHER_HOST))]
    assert [run.label for run in choose_baseline(paths, GPU_HOST, 1, kinds={"cuda"}).runs] == ["0001_run.json"]
    with pytest.raises(AccountingError) as caught:
        choose_baseline(paths, GPU_HOST, 1, kinds={"cpu"})
    assert str(caught.value) == ("no usable baseline run: 0001_run.json: other hardware (cpu_model 'Intel Xeon', here "
                                 "'AMD EPYC', cpu_cores 4, here 2); save baselines on this machine kind, on a quiet "
                                 "machine, first")


def test_a_baseline_of_one_run_is_the_newest(tmp_path):
    paths = [write(tmp_path, f"{number:04}_run.json", document({MATMUL: 0.015})) for number in (1, 2, 3)]
    assert [run.label for run in choose_baseline(paths, CPU, 1).runs] == ["0003_run.json"]


def test_run_files_look_in_the_folder_of_the_machine_named(tmp_path):
    other = "Other-Interpreter-64bit"
    assert other != machine_id()
    write(tmp_path / other, "0001_a.json", document({MATMUL: 0.015}))
    write(tmp_path / machine_id(), "0001_here.json", document({MATMUL: 0.015}))
    assert [path.name for path in run_files(tmp_path, other)] == ["0001_a.json"]
    assert [path.name for path in run_files(tmp_path)] == ["0001_here.json"]


@pytest.mark.parametrize("stats", ["fast", [0.1, 0.2], None])
def test_stats_that_are_not_a_mapping_are_named_as_missing_rounds(tmp_path, stats):
    data = document({MATMUL: 0.015})
    data["benchmarks"][0]["stats"] = stats
    with pytest.raises(AccountingError) as caught:
        load_run(write(tmp_path, "0001_run.json", data))
    assert str(caught.value).endswith(f"0001_run.json: benchmark {MATMUL} has no raw rounds (stats.data); save runs "
                                      "with --benchmark-save-data")


def test_a_run_keeps_its_date_each_benchmarks_name_and_drops_malformed_extras(tmp_path):
    data = document({MATMUL: 0.015})
    data["benchmarks"][0]["extra_info"] = "not a mapping"
    data["accounting_gate"] = ["not", "a", "mapping"]
    run = load_run(write(tmp_path, "0001_run.json", data))
    assert run.datetime == data["datetime"] and run.guard is None
    bench = run.benchmarks[MATMUL]
    assert bench.name == MATMUL and bench.extra_info == {} and bench.kind is None


@pytest.mark.parametrize("change, message", [
    pytest.param(lambda data: data.update(machine_info=["x"]), "no machine_info['accounting'], so it cannot be shown to "
                 "come from this hardware; save runs with the accounting package installed", id="machine-info-list"),
    pytest.param(lambda data: data["benchmarks"].insert(0, "x"), "benchmarks[0] has no 'fullname'", id="entry-text"),
    pytest.param(lambda data: data["benchmarks"][0].update(fullname=""), "benchmarks[0] has no 'fullname'",
                 id="empty-fullname"),
])
def test_malformed_entries_are_named_whole(tmp_path, change, message):
    data = document({MATMUL: 0.015})
    change(data)
    with pytest.raises(AccountingError) as caught:
        load_run(write(tmp_path, "0001_run.json", data))
    assert str(caught.value) == f"{tmp_path / '0001_run.json'}: {message}"


def test_a_benchmark_with_too_few_rounds_is_read_with_its_problem_said(tmp_path):
    """Too few rounds is no error of the file (it stopped the whole gate before): the benchmark says why it cannot
    be judged, and the others of the run are read as usual."""
    data = document({MATMUL: rounds(0.015, MIN_ROUNDS - 1), COPY: 0.01})
    run = load_run(write(tmp_path, "0001_x.json", data))
    assert run.benchmarks[MATMUL].problem.startswith(f"timed in {MIN_ROUNDS - 1} round(s); the gate needs at least "
                                                     f"{MIN_ROUNDS} per run")
    assert run.benchmarks[COPY].problem is None and run.benchmarks[COPY].median == pytest.approx(0.01)
