"""The pytest plugin: GPU skip rules, shape fitting, sync inside the timed call, machine info and its guard."""

import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch

from accounting.bench import fixture as plugin
from accounting.bench import identity, shapes
from accounting.bench import plugin as hooks
from accounting.hardware.cpu_clock import MEASURED_CLOCK_SOURCES
from accounting.hardware.devices import DeviceInfo
from accounting.bench.fixture import FlopsBenchmark
from accounting.bench.identity import (
    accounting_machine_info,
    machine_mismatch,
    pytest_benchmark_compare_machine_info,
    pytest_benchmark_update_machine_info,
)
from accounting.bench.shapes import fitted_shape, plan_shape
from accounting.bench.skips import gpu_skip_reason, shape_mode

# ---- skip rules ------------------------------------------------------------------------------


def _fake_cuda(monkeypatch, *, available, capability=(9, 0), name="NVIDIA H100 80GB HBM3", arch=None):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    props = SimpleNamespace(major=capability[0], minor=capability[1], total_memory=80 * 2**30,
                            multi_processor_count=132, L2_cache_size=50 * 2**20, gcnArchName=arch)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)


def test_no_cuda_skips_every_gpu_test_with_the_reason(monkeypatch):
    _fake_cuda(monkeypatch, available=False)
    assert gpu_skip_reason().startswith("no CUDA device: torch.cuda.is_available() is False")
    assert gpu_skip_reason("bf16").startswith("no CUDA device")


@pytest.mark.parametrize("capability, dtype, skipped", [
    pytest.param((8, 0), "fp8", True, id="a100-no-fp8"),
    pytest.param((8, 6), "float8_e5m2", True, id="ampere-consumer-no-fp8"),
    pytest.param((8, 9), "fp8", False, id="ada-fp8"),
    pytest.param((9, 0), "fp8", False, id="hopper-fp8"),
    pytest.param((7, 0), "bf16", False, id="volta-bf16-not-a-capability-skip"),
])
def test_fp8_is_skipped_below_capability_8_9(monkeypatch, capability, dtype, skipped):
    _fake_cuda(monkeypatch, available=True, capability=capability, name="NVIDIA Test GPU")
    reason = gpu_skip_reason(dtype)
    if skipped:
        assert reason == (f"fp8 matmul (torch._scaled_mm) needs compute capability >= 8.9; "
                          f"NVIDIA Test GPU is {capability[0]}.{capability[1]}")
    else:
        assert reason is None


def test_collection_marks_gpu_items_skipped_and_leaves_others(monkeypatch):
    _fake_cuda(monkeypatch, available=False)

    class Item:
        def __init__(self, gpu):
            self.gpu, self.added = gpu, []

        def get_closest_marker(self, name):
            return object() if name == "gpu" and self.gpu else None

        def add_marker(self, marker):
            self.added.append(marker)

    gpu_item, cpu_item = Item(True), Item(False)
    hooks.pytest_collection_modifyitems(None, [gpu_item, cpu_item])
    assert cpu_item.added == []
    (marker,) = gpu_item.added
    assert marker.mark.name == "skip" and marker.mark.kwargs["reason"].startswith("no CUDA device")


@pytest.mark.parametrize("option, markexpr, mode", [
    ("auto", "", "quick"),
    ("auto", "cpu", "full"),
    ("auto", "gpu", "full"),
    ("auto", "gpu and not slow", "full"),
    ("auto", "not gpu", "quick"),
    ("auto", "slow", "quick"),
    ("full", "", "full"),
    ("quick", "cpu", "quick"),
])
def test_shape_mode_follows_the_marker_expression(option, markexpr, mode):
    config = SimpleNamespace(getoption=lambda name, default=None: {"matmul_shapes": option, "markexpr": markexpr}[name])
    assert shape_mode(config) == mode


# ---- shapes that fit free memory ---------------------------------------------------------------


def test_a_shape_that_fits_is_kept():
    assert plan_shape((8192, 8192, 8192), "bf16", 80 * 2**30) == ((8192, 8192, 8192), "")


def test_a_shape_is_shrunk_to_the_faked_free_memory(monkeypatch):
    monkeypatch.setattr(shapes, "free_memory_bytes", lambda device: 2**29)  # 0.5 GiB "free"
    shape, note = fitted_shape((16384, 16384, 16384), "float32", "cpu")
    assert shape == (4096, 4096, 4096)  # 3 × 64 MiB fits 0.8 × 512 MiB; 8192 (3 × 256 MiB) does not
    assert note == "shrunk from 16384x16384x16384 to fit 0.5 GiB free"


def test_a_shape_that_cannot_fit_is_skipped_not_crashed(monkeypatch):
    monkeypatch.setattr(shapes, "free_memory_bytes", lambda device: 2**18)  # 256 KiB "free": not even 256³ bf16 (384 KiB)
    with pytest.raises(pytest.skip.Exception, match=r"^8192x8192x8192 bfloat16 does not fit 0.0 GiB free, even shrunk"):
        fitted_shape((8192, 8192, 8192), "bf16", "cpu")


# ---- the fixture: sync inside the timed call ---------------------------------------------------


class FakeBenchmark:
    """Stands in for pytest-benchmark's fixture: runs pedantic's setup/target and logs the order."""

    def __init__(self, log, seconds=0.5):
        self.log, self.seconds, self.extra_info, self.stats = log, seconds, {}, None

    def pedantic(self, target, setup, rounds, warmup_rounds, iterations):
        assert iterations == 1
        for _ in range(warmup_rounds + rounds):
            setup()
            self.log.append("clock start")
            target()
            self.log.append("clock stop")
        self.stats = SimpleNamespace(stats=SimpleNamespace(median=self.seconds))


def test_flops_benchmark_synchronizes_inside_the_timed_call(monkeypatch):
    log = []
    monkeypatch.setattr(plugin, "synchronize", lambda device: log.append(f"sync {device}"))
    config = SimpleNamespace(getoption=lambda name, default=None: None)
    runner = FlopsBenchmark(FakeBenchmark(log), config)
    runner._infos["cpu"] = DeviceInfo("cpu", "fake CPU", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}),
                                      cores=1, clock_ghz=1.0)
    result = runner(lambda: log.append("fn"), flops=8e9, dtype="float32", device="cpu", rounds=2, warmup_rounds=1)
    one_round = ["sync cpu", "clock start", "fn", "sync cpu", "clock stop"]
    assert log == one_round * 3  # setup syncs (untimed); the timed target ends with a sync
    assert result.mfu == pytest.approx(8e9 / 0.5 / 32e9)  # 1 core × 1 GHz × 32 FLOPs/cycle (AVX2+FMA)
    extra = runner.benchmark.extra_info
    assert extra["flops"] == 8_000_000_000 and extra["dtype"] == "float32" and extra["device"] == "fake CPU"
    assert extra["achieved_tflops"] == pytest.approx(0.016) and extra["mfu"] == pytest.approx(result.mfu)


def test_flops_benchmark_takes_the_peak_override_option():
    config = SimpleNamespace(getoption=lambda name, default=None: {"peak_tflops": 0.016}.get(name))
    runner = FlopsBenchmark(FakeBenchmark([]), config)
    result = runner(lambda: None, flops=8e9, dtype="float32", device="cpu", rounds=1, warmup_rounds=0)
    assert result.mfu == pytest.approx(1.0)


def test_flops_benchmark_detects_each_device_once_per_session(monkeypatch):
    detected = []
    monkeypatch.setattr(plugin, "detect_device", lambda device: detected.append(str(device)) or str(device))
    config = SimpleNamespace(getoption=lambda name, default=None: None, stash=pytest.Stash())
    make_fixture = plugin.flops_benchmark.__wrapped__  # the fixture's body, as pytest runs it for each test
    for _test in range(3):  # three tests, three fixtures, one session (one config)
        assert make_fixture(FakeBenchmark([]), config).device_info("cuda:1") == "cuda:1"
    assert detected == ["cuda:1"]


@pytest.mark.parametrize("operands, flushed", [
    pytest.param((torch.ones(256, 256),) * 2, True, id="operands-fit-L2"),
    pytest.param((torch.ones(4096, 4096), torch.ones(256, 256)), False, id="operands-exceed-L2"),
    pytest.param((), True, id="operands-unknown"),
])
def test_flops_benchmark_flushes_l2_by_the_shared_rule(monkeypatch, operands, flushed):
    from accounting import timing

    log = []
    clock = SimpleNamespace(flush_cache=lambda: log.append("flush"))
    monkeypatch.setattr(plugin, "clock_for", lambda device, **options: clock)
    monkeypatch.setattr(plugin, "synchronize", lambda device: None)
    monkeypatch.setattr(timing, "flush_bytes", lambda device: 50 * 2**20)  # 50 MiB, as an H100
    monkeypatch.setattr(plugin, "flush_bytes", lambda device: 50 * 2**20)
    monkeypatch.setattr(plugin, "time_fn", lambda fn, **kwargs: timing.Timing.from_samples([1.0]))  # no real events
    config = SimpleNamespace(getoption=lambda name, default=None: None)
    runner = FlopsBenchmark(FakeBenchmark(log), config, infos={"cuda:0": plugin.DeviceInfo("cuda", "fake GPU", 0, 2**30)})
    runner(lambda: None, flops=1, dtype="bf16", device="cuda:0", rounds=1, warmup_rounds=0, peak=1e15,
           operands=operands)
    assert ("flush" in log) is flushed


# ---- machine info and the comparison guard -----------------------------------------------------

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


# ---- end to end: another project, its own kernel, a doctored baseline --------------------------

PROJECT_TEST = textwrap.dedent("""
    import pytest, torch

    def test_my_kernel(flops_benchmark):
        a = torch.ones(128, 128)
        result = flops_benchmark(lambda: a @ a, flops=2 * 128**3, dtype="float32", rounds=3)
        assert result.mfu > 0

    @pytest.mark.gpu
    def test_on_gpu():
        pass
""")


FAKE_A100_CONFTEST = textwrap.dedent("""
    from accounting.bench import identity as pytest_plugin

    _real = pytest_plugin.accounting_machine_info

    def _a100(device=None):
        return {**_real(), "accelerator": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0",
                "sm_count": 108, "gpu_memory_bytes": 85_000_000_000}

    pytest_plugin.accounting_machine_info = _a100
""")


def _pytest(project, *args):
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("ACCOUNTING_PEAK_TFLOPS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--benchmark-storage",
         f"file://{project / 'store'}", *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=120,
    )


def test_an_installed_project_gets_flops_in_its_json_and_a_doctored_baseline_is_refused(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    error\n")
    (tmp_path / "test_project.py").write_text(PROJECT_TEST)

    saved = _pytest(tmp_path, "--benchmark-autosave")
    assert saved.returncode == 0, saved.stdout + saved.stderr
    assert "no CUDA device" in saved.stdout or torch.cuda.is_available()
    (baseline,) = (tmp_path / "store").glob("*/0001_*.json")
    data = json.loads(baseline.read_text())
    extra = data["benchmarks"][0]["extra_info"]
    assert extra["flops"] == 2 * 128**3 and extra["dtype"] == "float32" and 0 < extra["mfu"] <= 1.05
    assert data["machine_info"]["accounting"]["cpu_cores"] >= 1

    same = _pytest(tmp_path, "--benchmark-compare=0001")
    assert same.returncode == 0, same.stdout + same.stderr

    # The baseline says H100 on a 26-core Xeon; this run (made to look like an A100 box) must refuse to
    # compare. Its benchmark runs on the CPU, so the CPU is what differs and what the error names.
    doctored = json.loads(baseline.read_text())
    doctored["machine_info"]["accounting"].update(H100)
    (baseline.parent / baseline.name.replace("0001_", "0002_")).write_text(json.dumps(doctored))
    (tmp_path / "conftest.py").write_text(FAKE_A100_CONFTEST)
    refused = _pytest(tmp_path, "--benchmark-compare=0002")
    assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stdout + refused.stderr
    here = accounting_machine_info("cpu")
    threads = doctored["machine_info"]["accounting"]["cpu_threads"]
    assert threads == here["cpu_threads"] == torch.get_num_threads()
    assert (f"ERROR: --benchmark-compare: the baseline was recorded on CPU Xeon (26 cores, {threads} threads) but this "
            f"run is on CPU {here['cpu_model']} ({here['cpu_cores']} cores, {threads} threads)") in refused.stderr


def test_a_baseline_with_another_thread_count_is_refused_like_other_hardware():
    """OMP_NUM_THREADS=1 and the default time different things on the same CPU: never compared."""
    here = accounting_machine_info("cpu")
    assert here["cpu_threads"] == torch.get_num_threads()
    other = {**here, "cpu_threads": here["cpu_threads"] + 1}
    assert machine_mismatch(here, other) == ["cpu_threads"]
    assert machine_mismatch(here, dict(here)) == []


def test_flops_benchmark_mfu_on_cuda_comes_from_device_events_not_the_host_clock(monkeypatch):
    """The host clock around fn()+synchronize holds the launch; on CUDA the MFU uses the event-timed median."""
    from accounting.timing import Timing

    log, timed = [], []
    monkeypatch.setattr(plugin, "clock_for", lambda device, **options: SimpleNamespace(flush_cache=lambda: None))
    monkeypatch.setattr(plugin, "flush_bytes", lambda device: 50 * 2**20)
    monkeypatch.setattr(plugin, "synchronize", lambda device: None)

    def device_timer(fn, **kwargs):
        timed.append(kwargs)
        return Timing.from_samples([0.4] * kwargs["repeats"], device=kwargs["device"])

    monkeypatch.setattr(plugin, "time_fn", device_timer)
    config = SimpleNamespace(getoption=lambda name, default=None: None)
    runner = FlopsBenchmark(FakeBenchmark(log, seconds=0.5), config,
                            infos={"cuda:0": DeviceInfo("cuda", "fake GPU", 0, 2**30)})
    result = runner(lambda: None, flops=10**12, dtype="bf16", device="cuda:0", rounds=7, warmup_rounds=0, peak=5e12,
                    operands=(torch.ones(4),), flush_cache=True)
    assert [(kw["device"], kw["repeats"], kw["flush_cache"]) for kw in timed] == [(torch.device("cuda", 0), 7, True)]
    assert result.median_s == 0.4 and result.mfu == pytest.approx(10**12 / 0.4 / 5e12)
    extra = runner.benchmark.extra_info
    assert extra["host_median_s"] == 0.5 and extra["device_median_s"] == 0.4


# ---- the guard knows which benchmarks it compares (issue 8 item 10) -------------------------------

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


def test_a_benchmark_timed_at_another_shape_than_its_baseline_is_refused():
    """fitted_shape may shrink a shape to free memory; the test id stays, so the shape itself is checked."""
    session = SimpleNamespace(compared_mapping={
        "0001_base.json": {"test_gpu_matmul[bfloat16-16384x16384x16384]": {"extra_info": {"shape": [16384] * 3}}}})
    config = SimpleNamespace(getoption=lambda name, default=None: None, _benchmarksession=session)
    benchmark = FakeBenchmark([])
    benchmark.fullname = "test_gpu_matmul[bfloat16-16384x16384x16384]"
    runner = FlopsBenchmark(benchmark, config)
    with pytest.raises(pytest.fail.Exception, match=r"^--benchmark-compare: test_gpu_matmul\[bfloat16-16384x16384x16384\] "
                                                    r"timed 16384x16384x16384 in the baseline 0001_base.json but "
                                                    r"8192x8192x8192 in this run"):
        runner(lambda: None, flops=1, dtype="float32", device="cpu", shape=(8192,) * 3, rounds=1, warmup_rounds=0)
    assert benchmark.log == [], "refused before anything was timed"
    runner(lambda: None, flops=1, dtype="float32", device="cpu", shape=(16384,) * 3, rounds=1, warmup_rounds=0,
           peak=1e12)


def test_the_documented_ci_command_on_a_fresh_cache_passes_and_says_nothing_was_compared(tmp_path):
    """README's CI command with an empty --benchmark-storage: no baseline is not an error (exit 0, not 4)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    error\n"
                                         "    default:Can't compare. No benchmark files:pytest_benchmark.logger.PytestBenchmarkWarning\n")
    (tmp_path / "test_project.py").write_text(PROJECT_TEST)
    first = _pytest(tmp_path, "--benchmark-compare", "--benchmark-compare-fail=median:10%")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "--benchmark-compare found no saved baseline" in first.stdout
    assert "--benchmark-compare-fail was not applied" in first.stdout
    # A named baseline that does not exist is a wrong name, not a fresh cache: pytest-benchmark's error stands.
    named = _pytest(tmp_path, "--benchmark-compare=0042", "--benchmark-compare-fail=median:10%")
    assert named.returncode == pytest.ExitCode.USAGE_ERROR, named.stdout + named.stderr
