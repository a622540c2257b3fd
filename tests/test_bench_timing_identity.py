"""The GPU benchmarks' timing method is part of their work's identity: the H200's recorded gate baselines, timed
before the warm-up to the working clock and the readings during the rounds, are not compared with runs timed now.

The truths: the recorded runs themselves (tests/data/hosts/nvidia-h200/gate-storage: no ``warmup`` and no
``telemetry_rounds`` in any benchmark, no ``gpu_timing`` in their identity), and the identity this package writes
today on the same H200 (its own ``accounting_machine_info``, the device facts the recorded runs hold).
"""

from pathlib import Path

import pytest

from accounting.bench import identity
from accounting.bench.identity import MACHINE_INFO_KEY, accounting_machine_info, pytest_benchmark_compare_machine_info
from accounting.errors import AccountingError
from accounting.gate.storage import choose_baseline, load_run, read_document
from accounting.hardware.devices import DeviceInfo

STORAGE = Path(__file__).parent / "data" / "hosts" / "nvidia-h200" / "gate-storage"


@pytest.fixture
def h200_today(monkeypatch):
    """This package's identity of the recorded H200 as it would write it today."""
    saved = load_run(sorted(STORAGE.glob("*.json"))[0]).machine
    gpu = DeviceInfo("cuda", saved["accelerator"], 0, saved["gpu_memory_bytes"],
                     compute_capability=tuple(int(part) for part in saved["compute_capability"].split(".")),
                     multiprocessors=saved["sm_count"], runtime=saved["runtime"], driver=saved["driver"])
    real = identity.detect_device
    monkeypatch.setattr(identity, "detect_device", lambda device: gpu if str(device).startswith("cuda") else real(device))
    return accounting_machine_info("cuda:0")


def test_the_recorded_h200_baselines_were_timed_the_old_way():
    runs = [load_run(path) for path in sorted(STORAGE.glob("*.json"))]
    assert len(runs) == 2
    for run in runs:
        assert "gpu_timing" not in run.machine
        assert all("warmup" not in bench.extra_info and "telemetry_rounds" not in bench.extra_info
                   for bench in run.benchmarks.values())


def test_the_gate_passes_over_baselines_timed_the_old_way_and_names_why(h200_today):
    files = sorted(STORAGE.glob("*.json"))
    with pytest.raises(AccountingError, match=r"no usable baseline run: .*: timed another way \(gpu_timing None, "
                                              r"here 'warmed to the working clock"):
        choose_baseline(files, h200_today, 2, kinds={"cuda"})
    same_hardware = {key: value for key, value in h200_today.items() if key != "gpu_timing"}
    assert len(choose_baseline(files, same_hardware, 2, kinds={"cuda"}).runs) == 2, "only the timing differs"


def test_compare_refuses_them_saying_they_were_timed_another_way(h200_today):
    saved = read_document(sorted(STORAGE.glob("*.json"))[0])
    with pytest.raises(pytest.UsageError, match=r"timed another way \(gpu_timing: None -> 'warmed to the working"):
        pytest_benchmark_compare_machine_info(config=None, benchmarksession=None,
                                              machine_info={MACHINE_INFO_KEY: h200_today}, compared_benchmark=saved)
