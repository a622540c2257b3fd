"""Peak tables, name matching, the CPU estimate and device detection — all without a GPU."""

import math
import os

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from accounting.hardware import cpu_clock, cpu_facts, cpu_peak, devices, peaks
from accounting.hardware.cpu_clock import VectorClock, measure_cpu_ghz
from accounting.hardware.cpu_facts import cpu_flags
from accounting.timing import time_matmul
from accounting.hardware.devices import DeviceInfo, detect_device
from accounting.hardware.cpu_clock import cpu_clock_ghz
from accounting.hardware.cpu_facts import physical_cores
from accounting.errors import AccountingError, AccountingTypeError
from accounting.hardware.peaks import (
    PEAK_TFLOPS_ENV,
    PeakUnknownWarning,
    chip_row,
    device_peak_flops,
    find_chip,
    peak_bandwidth,
    peak_flops,
)
from accounting.hardware.cpu_peak import cpu_flops_per_cycle, cpu_matmul_path, cpu_native_paths, cpu_peak_flops

# Every device-name string of the reference (shared/reference/accelerators.md), with the row it
# belongs to and that row's FP32 / TF32 / BF16 / FP8 / INT8 dense figures (TFLOP/s, TOPS) and
# bandwidth (TB/s), transcribed by hand from the reference table. None: "—" there.
NAMED_ROWS = [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 66.9, 494.7, 989.4, 1978.9, 1978.9, 3.35),
    ("NVIDIA H100 PCIe", "H100 PCIe", 51.2, 378, 756, 1513, 1513, 2.0),
    ("NVIDIA H100 NVL", "H100 NVL (one GPU)", 60, 417.5, 835.5, 1670.5, 1670.5, 3.9),
    ("NVIDIA H200", "H200 SXM", 66.9, 494.7, 989.4, 1978.9, 1978.9, 4.8),
    ("NVIDIA H200 NVL", "H200 NVL", 60, 417.5, 835.5, 1670.5, 1670.5, 4.8),
    ("NVIDIA B200", "B200", 75, 1100, 2250, 4500, 4500, 7.7),
    ("NVIDIA GB200", "GB200 (per GPU)", 80, 1250, 2500, 5000, 5000, 8.0),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM", 19.5, 156, 312, None, 624, 1.555),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM", 19.5, 156, 312, None, 624, 2.039),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe", 19.5, 156, 312, None, 624, 1.555),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe", 19.5, 156, 312, None, 624, 1.935),
    ("NVIDIA A10", "A10", 31.2, 62.5, 125, None, 250, 0.6),
    ("NVIDIA A10G", "A10G", 31.2, 62.5, 125, None, 250, 0.6),
    ("NVIDIA L4", "L4", 30.3, 60, 121, 242.5, 242.5, 0.3),
    ("NVIDIA L40S", "L40S", 91.6, 183, 362, 733, 733, 0.864),
    ("Tesla T4", "T4", 8.1, None, None, None, 130, 0.32),
    ("Tesla V100-SXM2-16GB", "V100 SXM2", 15.7, None, None, None, None, 0.9),
    ("Tesla V100-PCIE-32GB", "V100 PCIe", 14.0, None, None, None, None, 0.9),
    ("NVIDIA GeForce RTX 4090", "RTX 4090", 82.6, 82.6, 165.2, 330.3, 660.6, 1.008),
    ("NVIDIA GeForce RTX 3090", "RTX 3090", 35.6, 35.6, 71, None, 284, 0.936),
    ("AMD Instinct MI300X", "MI300X", 163.4, 653.7, 1307.4, 2614.9, 2614.9, 5.3),
    # float32: the FP32 matrix rate rocBLAS SGEMM runs at (47.9 per GCD), where the reference lists the vector rate (24)
    ("AMD Instinct MI250X/MI250", "MI250X (per GCD, as torch sees it)", 47.9, None, 191.5, None, 191.5, 1.6),
]
REFERENCE_ROWS = {
    "H100 SXM", "H100 PCIe", "H100 NVL (one GPU)", "H200 SXM", "H200 NVL", "B200", "GB200 (per GPU)",
    "A100 SXM", "A100 PCIe", "A10", "A10G", "L4", "L40S", "T4", "V100 SXM2", "V100 PCIe", "RTX 4090",
    "RTX 3090", "MI300X", "MI250X (per GCD, as torch sees it)",
}
COLUMNS = ("float32", "tf32", "bfloat16", "float8_e4m3fn", torch.int8)


@pytest.mark.parametrize("name, row, figures", [pytest.param(case[0], case[1], case[2:], id=case[0]) for case in NAMED_ROWS])
def test_every_reference_name_resolves_to_its_row(name, row, figures):
    assert find_chip(name).row == row
    for column, expected in zip(COLUMNS, figures[:5]):
        if expected is None:
            with pytest.warns(PeakUnknownWarning, match=r"has no published .* rate; pass override_tflops="):
                assert peak_flops(name, column) is None
        else:
            assert peak_flops(name, column) == pytest.approx(expected * 1e12)
    assert peak_bandwidth(name) == pytest.approx(figures[5] * 1e12)


def test_every_reference_row_is_reached_by_some_name():
    assert {find_chip(case[0]).row for case in NAMED_ROWS} == REFERENCE_ROWS


@pytest.mark.parametrize("name, row", [
    pytest.param("nvidia h100 80gb hbm3", "H100 SXM", id="lower-case"),
    pytest.param("  NVIDIA  H100  PCIe ", "H100 PCIe", id="extra-spaces"),
    pytest.param("NVIDIA A100-SXM4-80GB", "A100 SXM", id="a100-not-a10"),
    pytest.param("NVIDIA A10G", "A10G", id="a10g-not-a10"),
    pytest.param("NVIDIA H200 NVL", "H200 NVL", id="h200-nvl-not-h200"),
    pytest.param("NVIDIA H100 NVL", "H100 NVL (one GPU)", id="h100-nvl-not-pcie"),
    pytest.param("NVIDIA GB200", "GB200 (per GPU)", id="gb200-not-b200"),
    pytest.param("NVIDIA L40S", "L40S", id="l40s-not-l4"),
    pytest.param("NVIDIA GH200 480GB", "GH200 (96GB HBM3)", id="gh200-not-h200"),
    pytest.param("AMD Instinct MI300A", "MI300A", id="mi300a-not-mi300x"),
    pytest.param("AMD Instinct MI325X", "MI325X", id="mi325x-not-mi300x"),
])
def test_look_alike_names_stay_apart(name, row):
    assert find_chip(name).row == row


@pytest.mark.parametrize("name, not_row", [
    pytest.param("NVIDIA L40", "L4", id="l40-is-not-l4-or-l40s"),
    pytest.param("Tesla V100S-PCIE-32GB", "V100 PCIe", id="v100s-is-not-v100"),
    pytest.param("NVIDIA GeForce RTX 4090 D", "RTX 4090", id="4090d-is-not-4090"),
    pytest.param("NVIDIA GeForce RTX 3090 Ti", "RTX 3090", id="3090ti-is-not-3090"),
    pytest.param("NVIDIA A100", "A10", id="bare-a100-is-not-a10"),
    pytest.param("NVIDIA B100", "B200", id="b100-is-not-b200"),
])
def test_unknown_look_alikes_are_unknown_not_a_neighbour(name, not_row):
    assert find_chip(name) is None
    with pytest.warns(PeakUnknownWarning, match=rf"^no peak FLOP/s for device '{name}': it is not in the peak table; "
                                                rf"pass override_tflops= \(pytest: --peak-tflops\) or set \${PEAK_TFLOPS_ENV}"):
        assert peak_flops(name, "bf16") is None


def test_ambiguous_h100_asks_for_an_override():
    with pytest.warns(PeakUnknownWarning, match=r"could be H100 SXM, H100 PCIe or H100 NVL"):
        assert peak_flops("NVIDIA H100", "bf16") is None


@pytest.mark.parametrize("arch, row", [("gfx942:sramecc+:xnack-", "MI300X"), ("gfx90a", "MI250X (per GCD, as torch sees it)")])
def test_rocm_arch_resolves_an_unrecognised_name(arch, row):
    assert find_chip("", arch=arch).row == row
    assert find_chip("AMD Radeon Graphics", arch=arch).row == row


def test_chip_row_resolves_a_device_by_name_then_rocm_arch():
    radeon = DeviceInfo("cuda", "AMD Radeon Graphics", 0, 2**30, arch="gfx942:sramecc+:xnack-")
    assert chip_row(radeon) == "MI300X"
    assert chip_row(DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 2**30)) == "H100 SXM"
    assert chip_row(DeviceInfo("cuda", "AMD Radeon Graphics", 0, 2**30)) is None
    assert chip_row(DeviceInfo("cpu", "NVIDIA H100 80GB HBM3", None, 2**30)) is None  # a CPU has no table row
    with pytest.raises(AccountingTypeError, match="'NVIDIA H100 80GB HBM3'"):
        chip_row("NVIDIA H100 80GB HBM3")


def test_sparse_rates_double_tensor_dtypes_only():
    dense = peak_flops("NVIDIA H100 80GB HBM3", "bf16")
    assert peak_flops("NVIDIA H100 80GB HBM3", "bf16", sparse=True) == 2 * dense
    with pytest.warns(PeakUnknownWarning, match=r"no 2:4-sparse float32 rate"):
        assert peak_flops("NVIDIA H100 80GB HBM3", "float32", sparse=True) is None
    with pytest.warns(PeakUnknownWarning, match=r"V100 SXM2 has no 2:4-sparse float16 rate"):
        assert peak_flops("Tesla V100-SXM2-16GB", "fp16", sparse=True) is None


def test_float64_uses_fp64_tensor_cores_where_present():
    assert peak_flops("NVIDIA A100-SXM4-80GB", torch.float64) == pytest.approx(19.5e12)  # FP64 TC
    assert peak_flops("Tesla V100-SXM2-16GB", torch.float64) == pytest.approx(7.8e12)  # no FP64 TC


def test_both_fp8_formats_read_one_rate():
    assert peak_flops("NVIDIA L4", torch.float8_e5m2) == peak_flops("NVIDIA L4", "fp8") == pytest.approx(242.5e12)


@pytest.mark.parametrize("dtype, error, message", [
    ("float128", AccountingError, r"^unknown floating-point format 'float128'"),
    (3, AccountingTypeError, r"^expected a torch dtype or its name, got 3"),
])
def test_bad_dtype_is_rejected(dtype, error, message):
    with pytest.raises(error, match=message):
        peak_flops("NVIDIA L4", dtype)


def test_bad_device_name_type_is_rejected():
    with pytest.raises(AccountingTypeError, match=r"^device_name must be a string, got 42"):
        peak_flops(42, "bf16")


# ---- CPU estimate ------------------------------------------------------------------------------

SPR = {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8"}


@pytest.mark.parametrize("flags, vendor, dtype, per_cycle", [
    pytest.param({"avx2", "fma", "avx512f"}, None, "float32", 64, id="avx512-fp32"),
    pytest.param({"avx2", "fma", "avx512f"}, None, "float64", 32, id="avx512-fp64-half"),
    pytest.param({"avx2", "fma"}, None, "float32", 32, id="avx2-fma"),
    pytest.param({"avx"}, None, "float32", 16, id="avx-no-fma"),
    pytest.param(set(), None, "float32", 8, id="sse-baseline"),
    pytest.param({"avx2", "fma", "avx512f"}, "amd", "float32", 32, id="zen4-split-avx512"),
    pytest.param({"avx2", "fma", "avx512f", "avx512_vp2intersect"}, "amd", "float32", 64, id="zen5-full-avx512"),
    pytest.param(SPR, "intel", "bfloat16", 1024, id="amx-bf16"),
    pytest.param(SPR, "intel", "float16", 128, id="spr-fp16-no-amx-fp16"),
    pytest.param(SPR | {"amx_fp16"}, "intel", "float16", 1024, id="amx-fp16"),
    pytest.param(SPR, "intel", torch.int8, 2048, id="amx-int8"),
    pytest.param({"avx512f", "avx512_bf16"}, None, "bf16", 128, id="avx512-bf16"),
    pytest.param({"avx2", "fma"}, None, "bf16", 32, id="bf16-via-fp32"),
    pytest.param({"avx2", "fma", "f16c"}, None, "fp16", 32, id="fp16-via-fp32"),
])
def test_cpu_flops_per_cycle_from_synthetic_flags(flags, vendor, dtype, per_cycle):
    assert cpu_flops_per_cycle(dtype, flags, vendor=vendor)[0] == per_cycle
    assert cpu_peak_flops(dtype, flags=flags, cores=3, ghz=2.0, vendor=vendor) == pytest.approx(3 * 2.0e9 * per_cycle)


@given(
    flags=st.sets(st.sampled_from(sorted(SPR | {"avx", "amx_fp16", "avx512_vp2intersect"}))),
    cores=st.integers(1, 512),
    ghz=st.floats(0.5, 6.0),
)
def test_cpu_peak_scales_with_cores_and_clock_and_fp64_is_half(flags, cores, ghz):
    one = cpu_peak_flops("float32", flags=flags, cores=1, ghz=1.0)
    assert cpu_peak_flops("float32", flags=flags, cores=cores, ghz=ghz) == pytest.approx(one * cores * ghz)
    assert cpu_peak_flops("float64", flags=flags, cores=cores, ghz=ghz) == pytest.approx(
        cpu_peak_flops("float32", flags=flags, cores=cores, ghz=ghz) / 2)
    # A native low-precision path is never slower than float32.
    assert cpu_peak_flops("bf16", flags=flags, cores=1, ghz=1.0) >= one


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(dtype="tf32"), AccountingError, r"^no CPU computes tf32 matmuls natively"),
    (dict(dtype="fp8"), AccountingError, r"^no CPU computes fp8 matmuls natively"),
    (dict(dtype="float32", cores=0), AccountingError, r"^cores must be a positive integer, got 0"),
    (dict(dtype="float32", cores=1.5), AccountingTypeError, r"^cores must be a non-negative integer, got 1.5"),
    (dict(dtype="float32", cores=True), AccountingTypeError, r"^cores must be a non-negative integer, got True"),
    (dict(dtype="float32", ghz=-2.0), AccountingError, r"^ghz must be positive, got -2.0"),
    (dict(dtype="float32", ghz=math.inf), AccountingError, r"^ghz must be finite, got inf"),
    (dict(dtype="float32", flags="avx2"), AccountingTypeError, r"^flags must be a collection of flag names"),
])
def test_cpu_peak_rejects_bad_input(kwargs, error, message):
    kwargs = {"flags": {"avx2", "fma"}, "cores": 2, "ghz": 2.0, **kwargs}
    with pytest.raises(error, match=message):
        cpu_peak_flops(**kwargs)


CPUINFO = """\
processor\t: {p}
vendor_id\t: GenuineIntel
model name\t: {model}
physical id\t: 0
core id\t\t: {core}
cpu MHz\t\t: {mhz}
flags\t\t: fpu sse2 avx avx2 fma avx512f
"""


@pytest.fixture
def fake_cpu(tmp_path, monkeypatch):
    """Point the device seam at a fake /proc/cpuinfo (4 logical CPUs, 2 cores with SMT) and no cpufreq."""
    def make(model="Intel(R) Xeon(R) Processor", mhz=(2700.0, 2700.0, 2650.0, 2600.0), cpufreq_khz=None,
             measured_ghz=None, vector=None):
        text = "\n".join(CPUINFO.format(p=p, model=model, core=p // 2, mhz=mhz[p]) for p in range(4))
        (tmp_path / "cpuinfo").write_text(text)
        cpu_facts._parsed_cpuinfo.cache_clear()  # parsed once per path and process: reread the new text
        monkeypatch.setattr(cpu_facts, "PROC_CPUINFO", tmp_path / "cpuinfo")
        cpufreq = tmp_path / "cpuinfo_max_freq"
        if cpufreq_khz is not None:
            cpufreq.write_text(f"{cpufreq_khz}\n")
        monkeypatch.setattr(cpu_clock, "_CPUFREQ_MAX", cpufreq)
        monkeypatch.setattr(cpu_facts.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
        monkeypatch.delenv(cpu_clock.CPU_GHZ_ENV, raising=False)
        monkeypatch.setattr(cpu_clock, "measured_cpu_ghz", lambda: measured_ghz)
        monkeypatch.setattr(cpu_clock, "measured_vector_clock", lambda: vector)
    return make


def test_clock_prefers_cpufreq_max(fake_cpu):
    fake_cpu(model="Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", cpufreq_khz=3900000)
    assert cpu_clock_ghz() == (3.9, "cpufreq cpuinfo_max_freq")


def test_clock_is_measured_where_cpufreq_is_hidden(fake_cpu):
    fake_cpu(model="Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", measured_ghz=3.456)
    assert cpu_clock_ghz() == (3.46, cpu_clock.SCALAR_CLOCK_SOURCE)


def test_clock_under_vector_load_comes_before_cpufreq_and_the_scalar_one_stays_beside_it(fake_cpu):
    vector = VectorClock(ghz=3.123, per_core_ghz=(3.1, 3.146), isa="AVX-512", latency_cycles=4)
    fake_cpu(cpufreq_khz=3900000, measured_ghz=3.456, vector=vector)
    assert cpu_clock_ghz() == (3.12, cpu_clock.VECTOR_CLOCK_SOURCE)
    info = detect_device("cpu")
    assert (info.clock_ghz, info.scalar_clock_ghz) == (3.12, 3.46)


def test_measured_clock_is_at_least_what_a_single_thread_matmul_implies():
    """The measured clock must make the one-core peak an upper bound on one core's matmul
    rate (ratio of two figures taken back to back in this run: MFU on one core may not exceed 1).

    The clock is measured afresh right after the matmul (measure_cpu_ghz, not the
    session-cached measured_cpu_ghz), so both see the same machine state."""
    if measure_cpu_ghz() is None:
        pytest.skip("the clock cannot be measured on this platform")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(512, 512), torch.randn(512, 512)
        seconds = time_matmul(a, b).median
        ghz = measure_cpu_ghz()
    finally:
        torch.set_num_threads(threads)
    one_core_peak = cpu_peak_flops("float32", flags=cpu_flags(), cores=1, ghz=ghz)
    assert 2 * 512**3 / seconds <= 1.05 * one_core_peak


def test_clock_falls_back_to_model_name(fake_cpu):
    fake_cpu(model="Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz")
    assert cpu_clock_ghz() == (2.5, "model name")


def test_clock_falls_back_to_the_highest_cpu_mhz(fake_cpu):
    fake_cpu()
    assert cpu_clock_ghz() == (2.7, "/proc/cpuinfo cpu MHz")


def test_clock_override_from_environment(fake_cpu, monkeypatch):
    fake_cpu(cpufreq_khz=3900000)
    monkeypatch.setenv(cpu_clock.CPU_GHZ_ENV, "3.1")
    assert cpu_clock_ghz() == (3.1, "$ACCOUNTING_CPU_GHZ")
    monkeypatch.setenv(cpu_clock.CPU_GHZ_ENV, "fast")
    with pytest.raises(AccountingError, match=r"^\$ACCOUNTING_CPU_GHZ must be a positive number of GHz, got 'fast'"):
        cpu_clock_ghz()


def test_physical_cores_count_smt_siblings_once(fake_cpu, monkeypatch):
    fake_cpu()
    assert physical_cores() == 2
    monkeypatch.setattr(cpu_facts.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert physical_cores() == 1  # both allowed CPUs are threads of core 0


def test_detection_reads_cpuinfo_and_asks_torch_once(fake_cpu, monkeypatch):
    fake_cpu()
    reads, probes = [], []
    read = cpu_facts.read_text
    monkeypatch.setattr(cpu_facts, "read_text", lambda path: reads.append(path) or read(path))
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: probes.append(1) or {"avx2": True})
    cpu_facts._torch_cpu_capabilities.cache_clear()
    try:
        for _ in range(2):
            info = detect_device("cpu")
        assert reads.count(cpu_facts.PROC_CPUINFO) == 1 and probes == [1]
        assert info.cores == 2 and "avx2" in info.cpu_flags
    finally:
        cpu_facts._torch_cpu_capabilities.cache_clear()  # forget the fake probe


def test_driver_version_asks_nvml_once(monkeypatch):
    import sys
    from types import SimpleNamespace

    inits = []
    fake = SimpleNamespace(nvmlInit=lambda: inits.append(1), nvmlSystemGetDriverVersion=lambda: b"550.54.15")
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    devices._driver_version.cache_clear()
    try:
        assert [devices._driver_version() for _ in range(3)] == ["550.54.15"] * 3
        assert inits == [1]
    finally:
        devices._driver_version.cache_clear()  # forget the fake driver


def test_detected_cpu_peak_uses_the_fake_machine(fake_cpu, monkeypatch):
    fake_cpu()
    monkeypatch.setattr(devices, "cpu_flags", lambda: frozenset({"avx2", "fma", "avx512f"}))
    info = detect_device("cpu")
    assert (info.cores, info.clock_ghz, info.vendor) == (2, 2.7, "intel")
    assert device_peak_flops(info, "float32") == pytest.approx(2 * 2.7e9 * 64)


# ---- the device in use -----------------------------------------------------------------------

CPU_INFO = DeviceInfo("cpu", "test CPU", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}), cores=4, clock_ghz=3.0)
H100_INFO = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 80 * 2**30, compute_capability=(9, 0))


def test_device_peak_reads_the_table_for_cuda_and_estimates_the_cpu():
    assert device_peak_flops(H100_INFO, "bf16") == pytest.approx(989.4e12)
    assert device_peak_flops(CPU_INFO, "float32") == pytest.approx(4 * 3.0e9 * 32)


def test_device_peak_override_beats_table_and_environment(monkeypatch):
    monkeypatch.setenv(PEAK_TFLOPS_ENV, "700")
    assert device_peak_flops(H100_INFO, "bf16") == pytest.approx(700e12)
    assert device_peak_flops(H100_INFO, "bf16", override_tflops=650) == pytest.approx(650e12)
    monkeypatch.setenv(PEAK_TFLOPS_ENV, "-1")
    with pytest.raises(AccountingError, match=r"^\$ACCOUNTING_PEAK_TFLOPS must be a positive number of TFLOP/s, got '-1'"):
        device_peak_flops(H100_INFO, "bf16")


def test_device_peak_has_no_cpu_tf32(monkeypatch):
    monkeypatch.delenv(PEAK_TFLOPS_ENV, raising=False)
    with pytest.warns(PeakUnknownWarning, match=r"^tf32 is a CUDA tensor-core mode; a CPU has no tf32 matmul units, so no tf32 peak"):
        assert device_peak_flops(CPU_INFO, "tf32") is None


def test_a_cpu_without_a_clock_is_described_but_has_no_peak(fake_cpu, monkeypatch):
    fake_cpu(mhz=("", "", "", ""))
    info = detect_device("cpu")
    assert info.clock_ghz is None and info.cores == 2
    with pytest.warns(PeakUnknownWarning, match=r"^no clock for CPU 'Intel\(R\) Xeon\(R\) Processor' \(cannot find "
                                                r"this CPU's clock .*\); pass override_tflops="):
        assert device_peak_flops(info, "float32") is None
    # The hint names the dtype being measured: the override is that dtype's peak.
    with pytest.warns(PeakUnknownWarning, match=r"to the device's dense bfloat16 TFLOP/s$"):
        assert device_peak_flops(info, "bf16") is None
    assert device_peak_flops(info, "float32", override_tflops=1.0) == 1e12


def test_device_peak_rejects_a_non_device_info():
    with pytest.raises(AccountingTypeError, match=r"^info must be a DeviceInfo"):
        device_peak_flops("cpu", "float32")


def test_detect_device_defaults_to_cpu_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert detect_device().kind == "cpu"


@pytest.mark.parametrize("device, message", [
    pytest.param("cuda", r"^device 'cuda' is not available: torch.cuda.is_available\(\) is False", id="no-cuda"),
    pytest.param("mps", r"^device 'mps' is not supported: only cpu and cuda are", id="mps"),
    pytest.param("tpu:0", r"^unknown device 'tpu:0'", id="nonsense"),
])
def test_detect_device_names_what_it_cannot_use(monkeypatch, device, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(AccountingError, match=message):
        detect_device(device)


def test_detect_device_rejects_an_index_past_the_last_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(AccountingError, match=r"^device 'cuda:3' is not available: 1 CUDA device\(s\) present"):
        detect_device("cuda:3")


def test_detect_device_rejects_a_non_device():
    with pytest.raises(AccountingTypeError, match=r"^device must be a string, torch.device or DeviceInfo, got 3"):
        detect_device(3)


# ---- rows and paths no other test reaches -------------------------------------------------------


def test_bandwidth_of_an_unknown_device_is_none_with_a_warning():
    with pytest.warns(PeakUnknownWarning, match=r"^no peak bandwidth for device 'NVIDIA Jetson AGX Orin': it is not in the table$"):
        assert peak_bandwidth("NVIDIA Jetson AGX Orin") is None


# VPDPBUSD (Intel SDM vol. 2, "VPDPBUSD"; Intrinsics Guide _mm512_dpbusd_epi32 / _mm256_dpbusd_avx_epi32):
# each int32 lane adds four u8×s8 products, so a register of `bits` does bits/8 multiply-adds,
# 2 ops each; two ports issue one a cycle each, as for FMA (the table's convention).
@pytest.mark.parametrize("flags, register_bits, path", [
    pytest.param({"avx2", "fma", "avx512f", "avx512_vnni"}, 512, "AVX512-VNNI", id="avx512-vnni"),
    pytest.param({"avx2", "fma", "avx_vnni"}, 256, "AVX-VNNI", id="avx-vnni"),
])
def test_int8_vnni_rates_follow_the_instruction(flags, register_bits, path):
    multiply_adds = register_bits // 8
    assert cpu_flops_per_cycle(torch.int8, flags) == (multiply_adds * 2 * 2, path)
    assert cpu_flops_per_cycle("int8", flags)[0] > cpu_flops_per_cycle("float32", flags)[0]


@pytest.mark.parametrize("flags, vendor, dtype, path", [
    pytest.param({"avx2", "fma"}, None, torch.int8, "AVX2+FMA (via float32)", id="int8-without-vnni"),
    pytest.param({"avx2", "fma", "avx512f"}, "amd", "float32", "AVX-512 (Zen 4, 256-bit units)", id="zen4"),
    pytest.param({"avx2", "fma", "avx512f"}, "amd", "float64", "AVX-512 (Zen 4, 256-bit units) (FP64)", id="zen4-fp64"),
    pytest.param({"AVX512F", "AVX512_VP2INTERSECT"}, "amd", "float32", "AVX-512", id="upper-case-flags-zen5"),
    pytest.param({"avx"}, None, "float32", "AVX", id="avx"),
    pytest.param(set(), None, "bf16", "SSE (via float32)", id="bf16-on-sse"),
    pytest.param({"amx_tile", "amx_fp16", "avx512_fp16"}, "intel", "fp16", "AMX-FP16", id="amx-fp16"),
    pytest.param({"amx_int8"}, "intel", torch.int8, "SSE (via float32)", id="amx-int8-needs-tiles"),
])
def test_the_path_is_named(flags, vendor, dtype, path):
    assert cpu_flops_per_cycle(dtype, flags, vendor=vendor)[1] == path


@pytest.fixture
def detected_cpu(monkeypatch):
    """Fake what accounting.hardware detects (the names as it imported them), recording each call."""
    calls = []

    def detect(flags, vendor, cores=3, clock=(2.5, "cpufreq cpuinfo_max_freq")):
        monkeypatch.setattr(cpu_peak, "cpu_flags", lambda: calls.append("flags") or frozenset(flags))
        monkeypatch.setattr(cpu_peak, "cpu_vendor", lambda: calls.append("vendor") or vendor)
        monkeypatch.setattr(cpu_peak, "physical_cores", lambda: calls.append("cores") or cores)
        monkeypatch.setattr(cpu_peak, "cpu_clock_ghz", lambda: calls.append("clock") or clock)
        return calls
    return detect


@pytest.mark.parametrize("vendor, per_cycle", [
    pytest.param("amd", 32, id="zen4-split-units"),  # shared/reference/accelerators.md: AMD Zen 4 AVX-512, 32
    pytest.param("intel", 64, id="intel-full-width"),  # AVX-512 (2 FMA units): 64
])
def test_cpu_peak_detects_everything_not_given(detected_cpu, vendor, per_cycle):
    calls = detected_cpu({"avx2", "fma", "avx512f"}, vendor)
    assert cpu_peak_flops("float32") == pytest.approx(3 * 2.5e9 * per_cycle)
    assert sorted(calls) == ["clock", "cores", "flags", "vendor"]


def test_cpu_peak_detects_only_what_is_not_given(detected_cpu):
    calls = detected_cpu({"avx2", "fma", "avx512f"}, "amd")
    assert cpu_peak_flops("float32", vendor="intel") == pytest.approx(3 * 2.5e9 * 64)  # the given vendor wins
    assert sorted(calls) == ["clock", "cores", "flags"]
    calls.clear()
    assert cpu_peak_flops("float32", flags={"avx2", "fma"}, cores=5, ghz=2.0) == pytest.approx(5 * 2.0e9 * 32)
    assert calls == []  # nothing to detect


# ---- what mutation testing found untested (README, "Development") ------------------------------

# AMD Zen 4 (EPYC 9004, Ryzen 7000): AVX-512 with BF16 and VNNI but no AVX512-FP16 or VP2INTERSECT
# (AMD "Zen 4" ISA: AMD64 Architecture Programmer's Manual, CPUID Fn0000_0007; /proc/cpuinfo of an EPYC 9654).
ZEN4 = frozenset({"avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"})


def test_a_zen4_without_a_native_fp16_path_computes_it_at_its_split_float32_rate():
    """The float32 fallback keeps the vendor: on Zen 4 that is 32 FLOPs/cycle (reference: "AMD Zen 4
    AVX-512 | 32"), not the full-width 64."""
    assert cpu_flops_per_cycle("fp16", ZEN4, vendor="amd") == (32, "AVX-512 (Zen 4, 256-bit units) (via float32)")
    zen4 = DeviceInfo("cpu", "AMD EPYC 9654", None, 2**30, cpu_flags=ZEN4, cores=2, clock_ghz=3.0, vendor="amd")
    assert device_peak_flops(zen4, "float32") == pytest.approx(2 * 3.0e9 * 32)
    assert device_peak_flops(zen4, "fp16") == device_peak_flops(zen4, "float32")


def test_device_peak_of_a_gpu_passes_sparsity_and_the_rocm_arch_on(monkeypatch):
    monkeypatch.delenv(PEAK_TFLOPS_ENV, raising=False)
    # H100 SXM datasheet: BF16 1979 TFLOP/s with sparsity, 989.4 dense (reference table).
    assert device_peak_flops(H100_INFO, "bf16", sparse=True) == pytest.approx(1978.8e12)
    # A gfx942 whose driver prints no model number is the MI300X row: BF16 1307.4 dense (AMD datasheet).
    radeon = DeviceInfo("cuda", "AMD Radeon Graphics", 0, 2**30, arch="gfx942:sramecc+:xnack-")
    assert device_peak_flops(radeon, "bf16") == pytest.approx(1307.4e12)


@pytest.mark.parametrize("override, error, message", [
    pytest.param(-1, AccountingError, r"^override_tflops must be positive, got -1$", id="negative"),
    pytest.param("700", AccountingTypeError, r"^override_tflops must be a real number, got '700'$", id="string"),
])
def test_a_bad_peak_override_is_named(override, error, message):
    with pytest.raises(error, match=message):
        device_peak_flops(H100_INFO, "bf16", override_tflops=override)


def test_the_environment_override_may_carry_spaces(monkeypatch):
    monkeypatch.setenv(PEAK_TFLOPS_ENV, " 312 \n")
    assert device_peak_flops(CPU_INFO, "float32") == pytest.approx(312e12)
    monkeypatch.setenv(PEAK_TFLOPS_ENV, "   ")  # blank: no override, the estimate
    assert device_peak_flops(CPU_INFO, "float32") == pytest.approx(4 * 3.0e9 * 32)


# AMD CDNA 3 white paper: 256 MB Infinity Cache behind the 4 MB L2 of each XCD (the L2 torch reports).
INFINITY_CACHE_BYTES = 256 * 2**20


@pytest.mark.parametrize("info, expected", [
    pytest.param(DeviceInfo("cuda", "AMD Radeon Graphics", 0, 2**30, l2_cache_bytes=4 * 2**20, arch="gfx942"),
                 INFINITY_CACHE_BYTES, id="mi300x-known-only-by-arch"),
    pytest.param(DeviceInfo("cuda", "NVIDIA L40", 0, 2**30, l2_cache_bytes=96 * 2**20), 96 * 2**20,
                 id="unknown-chip-its-reported-l2"),
    pytest.param(DeviceInfo("cuda", "NVIDIA L40", 0, 2**30), devices.UNREPORTED_CACHE_BYTES,
                 id="nothing-reported-the-assumed-size"),
    pytest.param(CPU_INFO, 0, id="cpu-no-device-cache"),
])
def test_last_level_cache_is_the_largest_known_cache(info, expected):
    assert peaks.last_level_cache_bytes(info) == expected


@pytest.mark.parametrize("function", [peaks.last_level_cache_bytes, chip_row])
def test_cache_and_row_lookups_reject_a_name_in_place_of_a_device_info(function):
    with pytest.raises(AccountingTypeError, match=r"^info must be a DeviceInfo \(see detect_device\), got 'NVIDIA L4'$"):
        function("NVIDIA L4")


@pytest.mark.parametrize("function, args, kwargs, message", [
    pytest.param(peak_flops, ("NVIDIA B100", "bf16"), {}, r"it is not in the peak table; .* dense bfloat16 TFLOP/s$",
                 id="unknown-chip"),
    pytest.param(peak_flops, ("NVIDIA A100-SXM4-80GB", "fp8"), {},
                 r"^A100 SXM .* has no published fp8 rate; .* dense fp8 TFLOP/s$", id="no-rate"),
    pytest.param(peak_flops, ("Tesla T4", "fp16"), {"sparse": True},
                 r"^T4 has no 2:4-sparse float16 rate; .* dense float16 TFLOP/s$", id="no-sparse-rate"),
    pytest.param(peak_bandwidth, ("NVIDIA B100",), {},
                 r"^no peak bandwidth for device 'NVIDIA B100': it is not in the table$", id="bandwidth-unknown-chip"),
    pytest.param(peak_bandwidth, ("AMD Instinct MI308X",), {}, r": MI308X has no published bandwidth$",
                 id="bandwidth-unpublished"),
])
def test_an_unknown_peak_warns_at_the_callers_line_and_says_which_peak_to_give(function, args, kwargs, message):
    """The warning points at the line that asked (stacklevel=2), where the user can act on it."""
    with pytest.warns(PeakUnknownWarning, match=message) as record:
        assert function(*args, **kwargs) is None
    if "MUTANT_UNDER_TEST" not in os.environ:  # mutmut calls through a trampoline: one frame more
        assert [warning.filename for warning in record] == [__file__]  # not hardware.py, nor pytest's caller


def test_bandwidth_of_a_card_known_only_by_its_rocm_arch():
    # AMD Instinct MI300X datasheet: 5.3 TB/s HBM3 (reference table).
    assert peak_bandwidth("AMD Radeon Graphics", arch="gfx942:sramecc+:xnack-") == pytest.approx(5.3e12)


def test_an_unknown_rocm_arch_leaves_a_card_without_a_model_number_unknown():
    # gfx1100 is RDNA 3 (Radeon RX 7900 XTX, ROCm's GPU specifications table), which the peak table has no row for.
    assert find_chip("AMD Radeon Graphics", arch="gfx1100") is None
    assert chip_row(DeviceInfo("cuda", "AMD Radeon Graphics", 0, 2**30, arch="gfx1100")) is None


@pytest.mark.parametrize("info, dtype", [
    pytest.param(CPU_INFO, "fp8", id="a-dtype-no-cpu-runs"),
    pytest.param(DeviceInfo("cpu", "test CPU", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}), cores=4), "float32", id="no-cpu-clock"),
])
def test_an_unknown_device_peak_warns_at_the_callers_line(info, dtype, monkeypatch):
    monkeypatch.delenv(PEAK_TFLOPS_ENV, raising=False)
    with pytest.warns(PeakUnknownWarning) as record:
        assert device_peak_flops(info, dtype) is None
    if "MUTANT_UNDER_TEST" not in os.environ:  # mutmut calls through a trampoline: one frame more
        assert [warning.filename for warning in record] == [__file__]


CPUINFO_FLAGS = ["avx", "avx2", "fma", "avx512f", "avx512_vp2intersect", "avx512_bf16", "avx512_fp16", "avx512_vnni",
                 "avx_vnni", "amx_tile", "amx_bf16", "amx_fp16", "amx_int8"]
"""The ISA flags /proc/cpuinfo prints that decide a matmul path (Linux's names)."""


@pytest.mark.parametrize("dtype", ["float64", "float32", "tf32", "bfloat16", "float16", "float8_e4m3fn", "int8"])
def test_native_paths_are_the_paths_some_cpu_really_takes_natively(dtype):
    """cpu_native_paths names exactly the native paths cpu_matmul_path picks over every flag set and vendor."""
    import itertools

    taken = set()
    for count in range(len(CPUINFO_FLAGS) + 1):
        for flags in itertools.combinations(CPUINFO_FLAGS, count):
            for vendor in (None, "amd"):
                path = cpu_matmul_path(dtype, set(flags), vendor=vendor)
                if path is not None and path.native:
                    taken.add(path.name.removesuffix(" (FP64)"))
    assert set(cpu_native_paths(dtype)) == taken  # float64 runs on float32's units; tf32, fp8: no CPU path at all


def test_a_cpus_peak_follows_its_own_flags_not_this_hosts(monkeypatch):
    """AVX2+FMA: two 8-lane FMA units, 32 float32 FLOPs a cycle; AVX alone: an 8-lane add and multiply, 16.

    The two devices differ only in their flags; this host can have at most one of the two sets,
    so a peak read from the host's own flags would get one of them wrong.
    """
    monkeypatch.delenv(PEAK_TFLOPS_ENV, raising=False)
    fma = DeviceInfo("cpu", "some CPU", None, 2**30, cpu_flags=frozenset({"avx", "avx2", "fma"}), cores=4, clock_ghz=3.0)
    avx = DeviceInfo("cpu", "some CPU", None, 2**30, cpu_flags=frozenset({"avx"}), cores=4, clock_ghz=3.0)
    assert device_peak_flops(fma, "float32") == 4 * 3.0e9 * 32
    assert device_peak_flops(avx, "float32") == 4 * 3.0e9 * 16
