"""Saved runs and the baseline chosen from them (``accounting.gate.storage``): what mutation testing found
unchecked (issue 15).

The truths: which identity fields the plugin's own ``machine_mismatch`` compares for the device
kinds given (CPU benchmarks: the host CPU; GPU ones: the accelerator), pytest-benchmark's folder
per machine id, and whole messages a user acts on.
"""

import pytest

from accounting.errors import AccountingError
from accounting.gate.storage import choose_baseline, hardware_difference, load_run, machine_id, run_files
from accounting.bench.identity import machine_mismatch
from tests.gate_runs import CPU, MATMUL, OTHER_CPU, document, write

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
