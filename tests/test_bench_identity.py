"""Machine identity in saved runs and the compare guard: what is recorded, which fields must match for the
benchmarks a baseline holds, and what is refused."""

import pytest
import torch

from accounting.bench import identity
from accounting.bench.identity import (
    accounting_machine_info,
    machine_mismatch,
    pytest_benchmark_compare_machine_info,
    pytest_benchmark_update_machine_info,
)
from accounting.hardware.cpu_clock import MEASURED_CLOCK_SOURCES
from tests.support.tf32_flags import new_api

GIB = 2**30
H100 = {"accelerator": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "sm_count": 132,
        "gpu_memory_bytes": 85_000_000_000, "cpu_model": "Xeon", "cpu_cores": 26}


def test_machine_info_is_extended_and_volatile_fields_dropped():
    machine_info = {"node": "runner-1234", "cpu": {"brand_raw": "Xeon", "hz_actual": [2700000000, 0],
                                                   "hz_actual_friendly": "2.7000 GHz"}}
    pytest_benchmark_update_machine_info(None, machine_info)
    assert "node" not in machine_info
    assert machine_info["cpu"] == {"brand_raw": "Xeon"}
    accounting = machine_info["accounting"]
    assert accounting == accounting_machine_info()  # stable from call to call
    assert accounting["torch"] == torch.__version__
    assert accounting["cpu_cores"] >= 1
    if accounting["cpu_clock_source"] in MEASURED_CLOCK_SOURCES:  # jitters run to run: kept out of the identity
        assert accounting["cpu_clock_ghz"] is None and accounting["cpu_peak_float32_tflops"] is None
    else:
        assert accounting["cpu_peak_float32_tflops"] > 0
    assert set(accounting["tf32"]) == {"cuda_matmul", "cuda_matmul_fp32_precision", "float32_matmul_precision", "cudnn"}


@pytest.mark.parametrize("saved, differing", [
    pytest.param(H100, [], id="same"),
    pytest.param({**H100, "cpu_model": "EPYC"}, [], id="host-cpu-irrelevant-for-gpus"),
    pytest.param({**H100, "accelerator": "NVIDIA H100 PCIe", "sm_count": 114}, ["accelerator", "sm_count"], id="pcie"),
    pytest.param({**H100, "gpu_memory_bytes": 100_000_000_000}, ["gpu_memory_bytes"], id="nvl-memory"),
    pytest.param({"accelerator": None, "cpu_model": "Xeon", "cpu_cores": 26},
                 ["accelerator", "compute_capability", "sm_count", "gpu_memory_bytes"], id="cpu-baseline"),
])
def test_machine_mismatch_fields(saved, differing):
    assert machine_mismatch(H100, saved) == differing


def test_cpu_only_runs_compare_the_cpu():
    here = {"accelerator": None, "cpu_model": "Xeon", "cpu_cores": 2}
    assert machine_mismatch(here, {**here, "cpu_cores": 4}) == ["cpu_cores"]
    assert machine_mismatch(here, {**here, "cpu_model": "EPYC"}) == ["cpu_model"]
    # Only CPU benchmarks can run without an accelerator: a GPU box's baseline with this CPU compares.
    assert machine_mismatch(here, {**H100, "cpu_model": "Xeon", "cpu_cores": 2}) == []


def _compare(current, saved):
    return pytest_benchmark_compare_machine_info(
        config=None, benchmarksession=None, machine_info={"accounting": current},
        compared_benchmark={"machine_info": {"accounting": saved} if saved is not None else {}},
    )


def test_compare_guard_fails_on_a_different_accelerator():
    saved = {**H100, "accelerator": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "sm_count": 108}
    with pytest.raises(pytest.UsageError, match=(
        r"^--benchmark-compare: the baseline was recorded on NVIDIA A100-SXM4-80GB \(compute capability 8.0, "
        r"108 SMs\) but this run is on NVIDIA H100 80GB HBM3 \(compute capability 9.0, 132 SMs\) "
        r"\(accelerator: 'NVIDIA A100-SXM4-80GB' -> 'NVIDIA H100 80GB HBM3', ")):
        _compare(H100, saved)
    assert _compare(H100, dict(H100)) is None


def test_compare_guard_fails_on_a_baseline_without_hardware_facts():
    with pytest.raises(pytest.UsageError, match=r"^--benchmark-compare: the saved baseline has no accounting machine info"):
        _compare(H100, None)


def test_a_baseline_with_another_thread_count_is_refused_like_other_hardware():
    """OMP_NUM_THREADS=1 and the default time different things on the same CPU: never compared."""
    here = accounting_machine_info("cpu")
    assert here["cpu_threads"] == torch.get_num_threads()
    other = {**here, "cpu_threads": here["cpu_threads"] + 1}
    assert machine_mismatch(here, other) == ["cpu_threads"]
    assert machine_mismatch(here, dict(here)) == []


def test_toggling_ecc_on_a_gddr_card_is_the_same_card():
    a10 = {"accelerator": "NVIDIA A10", "compute_capability": "8.6", "sm_count": 72, "gpu_memory_bytes": 24 * GIB}
    ecc_on = {**a10, "gpu_memory_bytes": 24 * GIB * 15 // 16}
    assert machine_mismatch(a10, ecc_on) == []
    assert machine_mismatch(a10, {**a10, "gpu_memory_bytes": 12 * GIB}) == ["gpu_memory_bytes"], "a MIG slice is not"


@new_api
def test_machine_info_reads_tf32_set_the_new_way(tf32_restored):
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
        torch.get_float32_matmul_precision()  # what torch itself does in this state
    flags = accounting_machine_info("cpu")["tf32"]
    assert flags["cuda_matmul"] is True and flags["cuda_matmul_fp32_precision"] == "tf32"
    assert flags["float32_matmul_precision"] is None, "unreadable in a mixed state: recorded as unknown, not guessed"


# ---- the guard knows which benchmarks it compares ----------------------------------------------------------


def _baseline(*kinds):
    return [{"fullname": f"test_{i}", "extra_info": {"device_kind": kind} if kind else {}} for i, kind in enumerate(kinds)]


@pytest.mark.parametrize("kinds, saved, differing", [
    pytest.param(("cpu",), {**H100, "cpu_model": "EPYC"}, ["cpu_model"], id="cpu-benchmarks-on-gpu-boxes-compare-the-cpu"),
    pytest.param(("cuda",), {**H100, "cpu_model": "EPYC"}, [], id="gpu-benchmarks-ignore-the-host-cpu"),
    pytest.param((None,), {**H100, "cpu_model": "EPYC"}, ["cpu_model"], id="unknown-benchmarks-compare-the-cpu"),
    pytest.param(("cuda", "cpu"), {**H100, "sm_count": 114, "cpu_cores": 8}, ["sm_count", "cpu_cores"], id="both"),
])
def test_compare_guard_compares_what_the_baselines_benchmarks_ran_on(kinds, saved, differing):
    assert machine_mismatch(H100, saved, identity.baseline_kinds({"benchmarks": _baseline(*kinds)})) == differing


def test_cpu_benchmarks_saved_on_another_gpu_box_are_refused():
    """`pytest -m cpu --benchmark-compare` on two GPU boxes with the same GPU and different CPUs."""
    with pytest.raises(pytest.UsageError, match=r"^--benchmark-compare: the baseline was recorded on CPU EPYC \(26 cores\) "
                                                r"but this run is on CPU Xeon \(26 cores\) \(cpu_model: 'EPYC' -> 'Xeon'\)"):
        pytest_benchmark_compare_machine_info(
            config=None, benchmarksession=None, machine_info={"accounting": H100},
            compared_benchmark={"machine_info": {"accounting": {**H100, "cpu_model": "EPYC"}},
                                "benchmarks": _baseline("cpu")})


def test_a_gpu_box_without_its_gpu_still_skips_gpu_baselines_quietly():
    here = {"accelerator": None, "cpu_model": "Xeon", "cpu_cores": 26}
    assert machine_mismatch(here, H100, identity.baseline_kinds({"benchmarks": _baseline("cuda")})) == []
