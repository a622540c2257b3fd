"""The GPU path against what a first real GPU would show (issue 8), tested on the CPU with fakes.

Each test stands in for a device property, a torch version, a flag or a driver, as
tests/test_report_gpu_paths.py does: torch.cuda is faked where the code under test reads it.
"""

from types import SimpleNamespace

import pytest
import torch

from accounting.hardware import devices as device_module
from accounting import timing
from accounting.hardware.devices import UNREPORTED_CACHE_BYTES, detect_device, l2_cache_bytes
from accounting.report.measure import MatmulTimer

GIB = 2**30


def torch_2_4_properties(**overrides):
    """What ``torch.cuda.get_device_properties`` gives on torch 2.4: no ``L2_cache_size`` (torch 2.5 added it)."""
    fields = dict(name="NVIDIA H100 80GB HBM3", major=9, minor=0, total_memory=80 * GIB, multi_processor_count=132)
    fields.update(overrides)
    return SimpleNamespace(**fields)


@pytest.fixture
def fake_cuda(monkeypatch):
    """``fake_cuda(props, count=1, hip=None)``: torch.cuda answers as a machine with ``count`` such devices."""

    def install(props, *, count=1, hip=None, cuda_version="12.4"):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: props.name)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (props.major, props.minor))
        monkeypatch.setattr(torch.version, "hip", hip, raising=False)
        monkeypatch.setattr(torch.version, "cuda", None if hip else cuda_version, raising=False)
        monkeypatch.setattr(device_module, "_driver_version", lambda: None)
        return props

    return install


# ---- item 2: torch 2.4 -----------------------------------------------------------------------


def test_torch_2_4_properties_without_l2_size_give_a_conservative_cache(fake_cuda):
    fake_cuda(torch_2_4_properties())
    assert l2_cache_bytes("cuda:0") == UNREPORTED_CACHE_BYTES
    info = detect_device("cuda:0")
    assert info.l2_cache_bytes is None, "an unreported L2 is not invented in the device description"
    small = torch.ones(1024, 1024)  # 4 MiB: fits any L2, so it must still be flushed
    assert timing.should_flush_l2("cuda:0", small)


def test_reported_l2_size_is_used_when_torch_has_it(fake_cuda):
    fake_cuda(torch_2_4_properties(L2_cache_size=50 * 2**20))
    assert l2_cache_bytes("cuda:0") == detect_device("cuda:0").l2_cache_bytes == 50 * 2**20


def test_out_of_memory_is_recognised_without_the_torch_2_5_alias(monkeypatch):
    """torch 2.4 may lack ``torch.OutOfMemoryError``; ``torch.cuda.OutOfMemoryError`` is there since 1.13."""
    error_class = torch.cuda.OutOfMemoryError
    monkeypatch.delattr(torch, "OutOfMemoryError", raising=False)
    from accounting.report import measure

    def out_of_memory(dtype, m, k, n, device):
        raise error_class("CUDA error: tried to allocate 8.00 GiB")  # no "out of memory" in the text

    monkeypatch.setattr(measure, "matmul_case", out_of_memory)
    monkeypatch.setattr(measure, "release_cached_memory", lambda device: None)
    h100 = device_module.DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 80 * GIB)
    assert MatmulTimer(h100, target_s=0.1)("bfloat16", 65536, 65536, 65536) is None


# ---- items 4 and 6: TF32 set the new way (torch >= 2.9) ---------------------------------------

from accounting.hardware.precision import float32_matmul_mode, tf32_enabled  # noqa: E402
from accounting.bench.identity import accounting_machine_info  # noqa: E402

FP32_FLAGS = [("generic", "all")] + [(backend, op) for backend in ("cuda", "mkldnn") for op in ("all", "matmul", "conv", "rnn")]
LINKED = (("cuda", "matmul"), ("mkldnn", "matmul"))  # what set_float32_matmul_precision writes (ATen Context.cpp)
new_api = pytest.mark.skipif(not hasattr(torch._C, "_get_fp32_precision_getter"),
                             reason=f"torch {torch.__version__} has no per-backend fp32_precision flags (2.9+)")


def tf32_state():
    """Every per-backend flag as set, and the legacy global (read with the linked flags at "ieee", where torch
    cannot call the state mixed; the flags are put back)."""
    raw = {flag: torch._C._get_fp32_precision_getter(*flag) for flag in FP32_FLAGS}
    for flag in LINKED:
        torch._C._set_fp32_precision_setter(*flag, "ieee")
    legacy = torch.get_float32_matmul_precision()
    for flag in LINKED:
        torch._C._set_fp32_precision_setter(*flag, raw[flag])
    return legacy, raw


def set_tf32_state(state):
    legacy, raw = state
    torch.set_float32_matmul_precision(legacy)
    for flag, value in raw.items():
        torch._C._set_fp32_precision_setter(*flag, value)


@pytest.fixture
def tf32_restored():
    """Whatever a test does to the TF32 flags, the next test starts from the state before it."""
    if not hasattr(torch._C, "_get_fp32_precision_getter"):
        yield
        return
    before = tf32_state()
    yield
    set_tf32_state(before)


@new_api
def test_machine_info_reads_tf32_set_the_new_way(tf32_restored):
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
        torch.get_float32_matmul_precision()  # what torch itself does in this state
    flags = accounting_machine_info("cpu")["tf32"]
    assert flags["cuda_matmul"] is True and flags["cuda_matmul_fp32_precision"] == "tf32"
    assert flags["float32_matmul_precision"] is None, "unreadable in a mixed state: recorded as unknown, not guessed"


@new_api
def test_tf32_enabled_follows_inherited_flags(tf32_restored):
    torch.backends.fp32_precision = "tf32"  # generic: cuda matmul "none" inherits it
    torch.backends.cuda.matmul.fp32_precision = "none"
    assert tf32_enabled()
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    assert not tf32_enabled()


TF32_STARTS = [
    pytest.param(legacy, cuda, mkldnn, id=f"{legacy}-cuda_{cuda}-mkldnn_{mkldnn}")
    for legacy in ("highest", "high", "medium")
    for cuda in ("none", "ieee", "tf32")
    for mkldnn in ("none", "ieee", "tf32", "bf16")
]


@new_api
@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "fp32"])
@pytest.mark.parametrize("legacy, cuda, mkldnn", TF32_STARTS)
def test_float32_matmul_mode_keeps_both_apis_consistent_and_restores_exactly(tf32_restored, legacy, cuda, mkldnn, tf32):
    torch.set_float32_matmul_precision(legacy)
    torch._C._set_fp32_precision_setter("cuda", "matmul", cuda)  # the new API alone: possibly a mixed state
    torch._C._set_fp32_precision_setter("mkldnn", "matmul", mkldnn)
    before = tf32_state()
    with float32_matmul_mode(tf32=tf32):
        assert torch.get_float32_matmul_precision() == ("high" if tf32 else "highest")  # legacy reads: no error
        assert torch.backends.cuda.matmul.allow_tf32 is tf32  # what cuBLAS's allowTF32CuBLAS() checks
        assert torch.backends.cuda.matmul.fp32_precision == ("tf32" if tf32 else "ieee")
        assert tf32_enabled() is tf32
    assert tf32_state() == before


# ---- items 7, 8, 9: the gfx942 family, MI250X float32, the Infinity Cache -----------------------

import warnings  # noqa: E402

from accounting.hardware.devices import DeviceInfo  # noqa: E402
from accounting.hardware.peaks import PeakUnknownWarning, chip_row, find_chip, peak_bandwidth, peak_flops  # noqa: E402

GFX942 = "gfx942:sramecc+:xnack-"


@pytest.mark.parametrize("name, arch, row, bf16_tflops, bandwidth_tbs", [
    pytest.param("AMD Instinct MI300X", GFX942, "MI300X", 1307.4, 5.3, id="mi300x"),
    pytest.param("AMD Radeon Graphics", GFX942, "MI300X", 1307.4, 5.3, id="unnamed-gfx942-is-mi300x"),
    pytest.param("AMD Instinct MI300A", GFX942, "MI300A", 980.6, 5.3, id="mi300a-not-mi300x"),
    pytest.param("AMD Instinct MI325X", GFX942, "MI325X", 1307.4, 6.0, id="mi325x-own-bandwidth"),
    pytest.param("AMD Instinct MI308X", GFX942, "MI308X", None, None, id="mi308x-no-public-figures"),
    pytest.param("AMD Instinct MI210", "gfx90a", None, None, None, id="mi210-not-mi250x"),
])
def test_rocm_arch_is_used_only_when_the_name_says_nothing(name, arch, row, bf16_tflops, bandwidth_tbs):
    info = DeviceInfo("cuda", name, 0, 128 * GIB, arch=arch)
    assert chip_row(info) == row, "floors (chip_floors) follow the same row"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PeakUnknownWarning)
        peak = peak_flops(name, "bf16", arch=arch)
        bandwidth = peak_bandwidth(name, arch=arch)
    assert peak == (None if bf16_tflops is None else pytest.approx(bf16_tflops * 1e12))
    assert bandwidth == (None if bandwidth_tbs is None else pytest.approx(bandwidth_tbs * 1e12))
    assert (len(caught) > 0) is (bf16_tflops is None), "an unknown figure warns; a known one does not"
    if row is not None and bandwidth_tbs is None:
        assert f"{row} has no published bandwidth" in str(caught[-1].message)


def test_every_gfx942_row_has_a_chip_floor_like_mi300x():
    """A healthy MI300A/MI325X (best bf16 about half of spec, as MI300X) must not read "below floor"."""
    from accounting.bench.matrix import load_benchmarks

    config = load_benchmarks()
    for row in ("MI300A", "MI325X"):
        assert config.floor("cuda", "bfloat16", chip=row) == config.floor("cuda", "bfloat16", chip="MI300X") < 0.6


def test_mi250x_float32_peak_is_the_matrix_rate_rocblas_sgemm_runs_at():
    """Per GCD: 110 CUs × 1.7 GHz; CDNA 2 matrix cores do 256 FP32 FLOPs per clock per CU (vector: 128)."""
    matrix = 110 * 256 * 1.7e9
    assert peak_flops("AMD Instinct MI250X/MI250", "float32") == pytest.approx(matrix, rel=2e-3)
    assert peak_flops("AMD Instinct MI250X/MI250", "float32") == peak_flops("AMD Instinct MI250X/MI250", "float64")


def test_mi300x_flush_covers_the_infinity_cache_not_one_xcds_l2(fake_cuda):
    fake_cuda(torch_2_4_properties(name="AMD Instinct MI300X", major=9, minor=4, total_memory=192 * GIB,
                                   multi_processor_count=304, L2_cache_size=4 * 2**20, gcnArchName=GFX942),
              hip="6.2.41133")
    assert timing.flush_bytes("cuda:0") == 256 * 2**20
    operands = torch.empty(100 * 2**20, dtype=torch.uint8, device="meta")  # 100 MiB: past L2, inside the 256 MB
    assert timing.should_flush_l2("cuda:0", operands), "operands held in the Infinity Cache must be flushed"


def test_gh200_has_its_own_rows():
    assert find_chip("NVIDIA GH200 480GB").row == "GH200 (96GB HBM3)"
    assert peak_flops("NVIDIA GH200 480GB", "bf16") == pytest.approx(989.5e12)
    assert peak_bandwidth("NVIDIA GH200 144GB HBM3e") == pytest.approx(4.9e12)
    with pytest.warns(PeakUnknownWarning, match=r"could be GH200 \(96GB HBM3\) or GH200 \(144GB HBM3e\)"):
        assert peak_flops("NVIDIA GH200", "bf16") is None


# ---- worth a test ------------------------------------------------------------------------------


def test_gcn_arch_name_is_not_an_arch_on_cuda_builds(fake_cuda):
    """CUDA builds fill gcnArchName with the device name; only ROCm's is an arch."""
    fake_cuda(torch_2_4_properties(L2_cache_size=50 * 2**20, gcnArchName="NVIDIA H100 80GB HBM3"))
    assert detect_device("cuda:0").arch is None


def test_gcn_arch_name_is_kept_on_rocm(fake_cuda):
    fake_cuda(torch_2_4_properties(name="AMD Radeon Graphics", major=9, minor=4, L2_cache_size=4 * 2**20,
                                   gcnArchName=GFX942), hip="6.2.41133")
    info = detect_device("cuda:0")
    assert info.arch == GFX942 and info.runtime == "ROCm 6.2.41133" and chip_row(info) == "MI300X"


@pytest.mark.parametrize("message", [
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "HIPBLAS_STATUS_ALLOC_FAILED when calling `hipblasLtMatmul( ...)`",
])
def test_blas_allocation_failures_count_as_out_of_memory(monkeypatch, message):
    from accounting.report import measure

    def failing(dtype, m, k, n, device):
        raise RuntimeError(message)

    monkeypatch.setattr(measure, "matmul_case", failing)
    monkeypatch.setattr(measure, "release_cached_memory", lambda device: None)
    h100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 80 * GIB)
    assert MatmulTimer(h100, target_s=0.1)("bfloat16", 32768, 32768, 32768) is None, "the sweep stops growing"


def test_toggling_ecc_on_a_gddr_card_is_the_same_card():
    from accounting.bench.identity import machine_mismatch

    a10 = {"accelerator": "NVIDIA A10", "compute_capability": "8.6", "sm_count": 72, "gpu_memory_bytes": 24 * GIB}
    ecc_on = {**a10, "gpu_memory_bytes": 24 * GIB * 15 // 16}
    assert machine_mismatch(a10, ecc_on) == []
    assert machine_mismatch(a10, {**a10, "gpu_memory_bytes": 12 * GIB}) == ["gpu_memory_bytes"], "a MIG slice is not"
