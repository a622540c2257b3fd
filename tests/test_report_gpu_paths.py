"""The report's CUDA-only paths, on the CPU, with a fake GPU standing in where torch.cuda would be."""

import json
import weakref
from types import SimpleNamespace

import pytest
import torch

from accounting import timing
from accounting.bench.matrix import BENCHMARKS_ENV
from accounting.errors import AccountingError
from accounting.hardware.devices import DeviceInfo
from accounting.hardware.peaks import PEAK_TFLOPS_ENV, PeakUnknownWarning, peak_flops
from accounting.report import measure, run
from accounting.report.measure import MatmulTimer, bandwidth_bytes, largest_square
from accounting.timing import Timing, matmul_bytes

GIB = 2**30
H100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 80 * GIB, compute_capability=(9, 0), multiprocessors=132,
                  l2_cache_bytes=50 * 2**20, runtime="CUDA 12.8")
GFX942_UNNAMED = DeviceInfo("cuda", "AMD Radeon Graphics", 0, 192 * GIB, arch="gfx942:sramecc+:xnack-",
                            runtime="ROCm 6.2")
"""An MI300X whose driver prints only a generic name: the table row comes from ``arch``."""
UNKNOWN_GPU = DeviceInfo("cuda", "NVIDIA B100", 0, 192 * GIB, compute_capability=(10, 0))


@pytest.fixture
def fake_gpu(monkeypatch):
    """``prepare`` sees an H100 whose every dtype runs."""
    monkeypatch.setattr(run, "detect_device", lambda device=None: H100)
    monkeypatch.setattr(run, "_probe", lambda dtype, info: None)
    return H100


def test_prepare_uses_the_gpu_table_and_its_spec_bandwidth(fake_gpu):
    plan = run.prepare(device="cuda", dtypes=["bf16", "tf32", "fp8"], budget_s=30.0)
    assert plan.dtypes == ["bfloat16", "tf32", "float8_e4m3fn"]
    assert plan.peaks == {"bfloat16": pytest.approx(989.4e12), "tf32": pytest.approx(494.7e12),
                          "float8_e4m3fn": pytest.approx(1978.9e12)}
    assert plan.spec_bandwidth == pytest.approx(3.35e12)
    assert not any("CPU peaks" in note for note in plan.notes)


def test_other_cuda_devices_are_named_in_a_note(fake_gpu, monkeypatch):
    monkeypatch.setattr(run, "cuda_device_names", lambda: ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"])
    plan = run.prepare(device="cuda", dtypes=["bf16"], budget_s=30.0)
    assert "other CUDA devices, not tested (pick one with --device): cuda:1 NVIDIA A100-SXM4-80GB" in plan.notes


def test_chip_floor_follows_the_rocm_arch_like_the_peak(monkeypatch, tmp_path):
    benchmarks = {
        "regression": {"metric": "median", "threshold_percent": 10},
        "cuda": {"dtypes": ["bf16"], "shapes": [[8192, 8192, 8192]], "floors": {"bf16": 0.6},
                 "chip_floors": {"MI300X": {"bf16": 0.4}}},
    }
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(benchmarks))
    monkeypatch.setenv(BENCHMARKS_ENV, str(path))
    monkeypatch.delenv(PEAK_TFLOPS_ENV, raising=False)
    monkeypatch.setattr(run, "detect_device", lambda device=None: GFX942_UNNAMED)
    monkeypatch.setattr(run, "_probe", lambda dtype, info: None)
    plan = run.prepare(device="cuda", dtypes=["bf16"], budget_s=30.0)
    assert plan.peaks["bfloat16"] == pytest.approx(peak_flops("AMD Instinct MI300X", "bf16"))
    assert plan.floors == {"bfloat16": 0.4}, "the MI300X floor, not the default 0.6"


def test_unknown_gpu_has_no_peak_and_says_how_to_give_one(monkeypatch):
    monkeypatch.setattr(run, "detect_device", lambda device=None: UNKNOWN_GPU)
    monkeypatch.setattr(run, "_probe", lambda dtype, info: None)
    monkeypatch.delenv("ACCOUNTING_PEAK_TFLOPS", raising=False)
    with pytest.warns(PeakUnknownWarning, match="ACCOUNTING_PEAK_TFLOPS"):
        plan = run.prepare(device="cuda", dtypes=["bf16"], budget_s=30.0)
    assert plan.peaks == {"bfloat16": None}
    assert plan.spec_bandwidth is None


def test_peak_override_reaches_the_plan(fake_gpu, monkeypatch):
    monkeypatch.setenv("ACCOUNTING_PEAK_TFLOPS", "500")
    plan = run.prepare(device="cuda", dtypes=["bf16"], budget_s=30.0)
    assert plan.peaks == {"bfloat16": pytest.approx(500e12)}


def test_a_dtype_the_gpu_cannot_run_is_an_error_when_asked_for(monkeypatch):
    monkeypatch.setattr(run, "detect_device", lambda device=None: H100)
    monkeypatch.setattr(run, "_probe", lambda dtype, info: "no FP8 units" if dtype.startswith("float8") else None)
    with pytest.raises(run.AccountingError, match=r"^--dtypes: float8_e4m3fn cannot run on cuda:0: no FP8 units$"):
        run.prepare(device="cuda", dtypes=["bf16", "fp8"], budget_s=30.0)


@pytest.mark.parametrize("free_gib", [79, 4, 3.2])
def test_gpu_bandwidth_copy_is_capped_by_free_memory(free_gib):
    free = int(free_gib * GIB)
    nbytes = bandwidth_bytes(H100, free_bytes=free)
    assert nbytes % 2**20 == 0
    assert 2 * nbytes <= measure.BANDWIDTH_MEMORY_FRACTION * free, "source plus destination leave most memory free"
    assert nbytes >= measure.BANDWIDTH_CACHE_MULTIPLE * H100.l2_cache_bytes, "never a copy the L2 could serve"


@pytest.mark.parametrize("free_gib", [3.1, 1, 0.3])
def test_gpu_bandwidth_is_skipped_when_only_a_cache_sized_copy_fits(monkeypatch, free_gib):
    """With little free memory the copy would come near L2 size and read above spec: skip, with a note."""
    assert bandwidth_bytes(H100, free_bytes=int(free_gib * GIB)) is None
    monkeypatch.setattr(measure, "free_memory_bytes", lambda device: int(free_gib * GIB))
    monkeypatch.setattr(measure, "release_cached_memory", lambda device: None)
    assert measure.measure_bandwidth(H100) is None
    monkeypatch.setattr(run, "free_memory_bytes", lambda device: int(free_gib * GIB))
    monkeypatch.setattr(run, "max_sizes", lambda plan: {"bfloat16": 512})
    monkeypatch.setattr(run.measuring, "MatmulTimer", lambda info, target_s: SimpleNamespace(
        __call__=None, expected_wall_s=lambda per_call: per_call))
    monkeypatch.setattr(run, "Sweep", lambda *args, **kwargs: SimpleNamespace(run=lambda dtypes: {}))
    plan = run.Plan(H100, ["bfloat16"], {"bfloat16": 989.4e12}, {"bfloat16": "table"}, {"bfloat16": 0.6}, 3.35e12,
                    1.0, "cuda")
    report = run.build_report(plan, progress=SimpleNamespace(update=lambda done, text: None), started=0.0,
                              clock=lambda: 0.0)
    assert report["bandwidth"]["measured_bytes_per_s"] is None
    assert (f"memory bandwidth not measured: {free_gib:.1f} GiB free holds no copy of 8 x the 50 MiB "
            "last-level cache; a smaller copy would time the cache") in report["notes"]


def test_bandwidth_buffers_are_released_before_free_memory_is_read_again(monkeypatch):
    """The copy's buffers must not sit in the allocator's cache when the sweep reads free memory."""
    made, events = [], []
    real_ones = torch.ones

    def ones(*args, **kwargs):
        tensor = real_ones(*args, **{**kwargs, "device": "meta"})  # sized, never allocated
        made.append(weakref.ref(tensor))
        return tensor

    monkeypatch.setattr(measure.torch, "ones", ones)
    monkeypatch.setattr(measure, "free_memory_bytes", lambda device: events.append("free") or 80 * GIB)
    monkeypatch.setattr(measure, "release_cached_memory",
                        lambda device: events.append("release" if not made or made[0]() is None else "release-too-early"))
    monkeypatch.setattr(measure, "time_fn", lambda fn, **kwargs: Timing.from_samples([1e-3]))
    done = measure.measure_bandwidth(H100)
    assert done.bytes_moved == 2 * measure.BANDWIDTH_BYTES_GPU
    assert events == ["release", "free", "release"], "released before reading free memory, and after the copy"


def test_gpu_bandwidth_copy_dwarfs_the_l2_when_memory_allows():
    roomy, tight = bandwidth_bytes(H100, free_bytes=79 * GIB), bandwidth_bytes(H100, free_bytes=4 * GIB)
    assert roomy >= 10 * H100.l2_cache_bytes, "a copy that fits in L2 would time the cache, not the memory"
    assert tight < roomy, "less free memory, smaller copy"


def test_largest_square_on_a_gpu():
    roomy = largest_square("bf16", 80 * GIB, fraction=0.8)
    assert roomy % 128 == 0 and matmul_bytes(roomy, roomy, roomy, "bf16") <= 0.8 * 80 * GIB
    assert largest_square("bf16", 80 * GIB, fraction=0.8, cap=4096) == 4096, "the cap wins over free memory"
    size = largest_square("float32", 2 * GIB, fraction=0.8)
    budget = 0.8 * 2 * GIB
    assert size % 128 == 0
    assert 3 * size**2 * 4 <= budget < 3 * (size + 128) ** 2 * 4, "the largest that fits, no larger"


class FakeCase:
    def __init__(self, operand_bytes):
        self.operands = (torch.empty(operand_bytes, dtype=torch.uint8, device="meta"),)  # sized, never allocated
        self.flops = 2 * 64**3
        self.calls = 0

    def fn(self):
        self.calls += 1
        return torch.ones(64, 64) @ torch.ones(64, 64)  # the work its flops say: the sweep counts a warm-up call


@pytest.mark.parametrize(
    "operand_bytes, flush",
    [pytest.param(6 * 2**20, True, id="fits-in-l2-flushed"), pytest.param(600 * 2**20, False, id="larger-than-l2")],
)
def test_gpu_timer_flushes_l2_only_for_operands_that_fit(monkeypatch, operand_bytes, flush):
    seen = {}
    case = FakeCase(operand_bytes)
    monkeypatch.setattr(measure, "matmul_case", lambda dtype, m, k, n, device: case)
    monkeypatch.setattr(measure, "synchronize", lambda device: None)
    monkeypatch.setattr(timing, "flush_bytes", lambda device: H100.l2_cache_bytes)

    def fake_time_fn(fn, **kwargs):
        seen.update(kwargs)
        return Timing.from_samples([1e-3] * 5, flops=kwargs["flops"], device=kwargs["device"])

    monkeypatch.setattr(measure, "time_fn", fake_time_fn)
    done = MatmulTimer(H100, target_s=0.1)("bfloat16", 64, 64, 64)
    assert seen["flush_cache"] is flush
    assert seen["device"] == torch.device("cuda", 0)
    assert done.seconds == pytest.approx(1e-3) and done.repeats == 5
    assert case.calls == 1 + measure.WARMUP_CALLS_FAST, "the untimed call and the warm-ups before time_fn"


def test_out_of_memory_gives_none_so_the_sweep_stops_growing(monkeypatch):
    def out_of_memory(dtype, m, k, n, device):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    emptied = []
    monkeypatch.setattr(measure, "matmul_case", out_of_memory)
    monkeypatch.setattr(measure, "release_cached_memory", emptied.append)
    assert MatmulTimer(H100, target_s=0.1)("bfloat16", 65536, 65536, 65536) is None
    assert emptied == [torch.device("cuda", 0)]


def test_out_of_memory_is_recognised_without_the_torch_2_5_alias(monkeypatch):
    """torch 2.4 may lack ``torch.OutOfMemoryError``; ``torch.cuda.OutOfMemoryError`` is there since 1.13."""
    error_class = torch.cuda.OutOfMemoryError
    monkeypatch.delattr(torch, "OutOfMemoryError", raising=False)

    def out_of_memory(dtype, m, k, n, device):
        raise error_class("CUDA error: tried to allocate 8.00 GiB")  # no "out of memory" in the text

    monkeypatch.setattr(measure, "matmul_case", out_of_memory)
    monkeypatch.setattr(measure, "release_cached_memory", lambda device: None)
    h100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 80 * GIB)
    assert MatmulTimer(h100, target_s=0.1)("bfloat16", 65536, 65536, 65536) is None


@pytest.mark.parametrize("message", [
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "HIPBLAS_STATUS_ALLOC_FAILED when calling `hipblasLtMatmul( ...)`",
])
def test_blas_allocation_failures_count_as_out_of_memory(monkeypatch, message):
    def failing(dtype, m, k, n, device):
        raise RuntimeError(message)

    monkeypatch.setattr(measure, "matmul_case", failing)
    monkeypatch.setattr(measure, "release_cached_memory", lambda device: None)
    h100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 80 * GIB)
    assert MatmulTimer(h100, target_s=0.1)("bfloat16", 32768, 32768, 32768) is None, "the sweep stops growing"


def test_operands_are_freed_before_the_cache_is_released(monkeypatch):
    """An out-of-memory error in the first call: the case's operands must be gone when the cache is handed back."""

    class OutOfMemoryCase(FakeCase):
        def fn(self):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    made = []

    def make_case(dtype, m, k, n, device):
        case = OutOfMemoryCase(operand_bytes=3 * 2**30)
        made.append(weakref.ref(case))
        return case

    alive_at_release = []
    monkeypatch.setattr(measure, "matmul_case", make_case)
    monkeypatch.setattr(measure, "synchronize", lambda device: None)
    monkeypatch.setattr(measure, "release_cached_memory", lambda device: alive_at_release.append(made[0]() is not None))
    assert MatmulTimer(H100, target_s=0.1)("bfloat16", 32768, 32768, 32768) is None
    assert alive_at_release == [False]


def test_other_runtime_errors_are_not_swallowed(monkeypatch):
    def broken(dtype, m, k, n, device):
        raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED")

    monkeypatch.setattr(measure, "matmul_case", broken)
    with pytest.raises(RuntimeError, match="CUBLAS_STATUS_NOT_SUPPORTED"):
        MatmulTimer(H100, target_s=0.1)("float8_e4m3fn", 1024, 1024, 1024)


@pytest.mark.parametrize("nbytes, message", [
    pytest.param(0, "nbytes must be a positive integer, got 0", id="zero"),
    pytest.param(-1, "nbytes must be a non-negative integer, got -1", id="negative"),
])
def test_bandwidth_copy_size_is_checked(nbytes, message):
    with pytest.raises(AccountingError, match=f"^{message}$"):
        measure.measure_bandwidth(H100, nbytes=nbytes)


def test_largest_square_rejects_negative_free_memory():
    with pytest.raises(AccountingError, match=r"^free_bytes must be a non-negative integer, got -1$"):
        largest_square("bf16", -1)
