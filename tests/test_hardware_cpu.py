"""The CPU: FLOPs per cycle on each ISA path, the clock its peak uses, its physical cores, and its estimated peak.

The truths are the vendors' instruction tables (FMA, VNNI and AMX widths, Zen 4's split AVX-512), a fake
``/proc/cpuinfo`` for what the device seam reads, and one real single-thread matmul against the measured clock.
"""

import itertools
import math
import os

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from accounting.errors import AccountingError, AccountingTypeError
from accounting.hardware import cpu_clock, cpu_facts, cpu_peak, devices, vector_clock
from accounting.hardware.cpu_clock import VectorClock, cpu_clock_ghz, measure_cpu_ghz
from accounting.hardware.cpu_facts import cpu_flags, physical_cores
from accounting.hardware.cpu_peak import cpu_flops_per_cycle, cpu_matmul_path, cpu_native_paths, cpu_peak_flops
from accounting.hardware.devices import DeviceInfo, detect_device
from accounting.hardware.peaks import PEAK_TFLOPS_ENV, PeakUnknownWarning, device_peak_flops
from accounting.timing import time_matmul

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


CPUINFO_FLAGS = ["avx", "avx2", "fma", "avx512f", "avx512_vp2intersect", "avx512_bf16", "avx512_fp16", "avx512_vnni",
                 "avx_vnni", "amx_tile", "amx_bf16", "amx_fp16", "amx_int8"]
"""The ISA flags /proc/cpuinfo prints that decide a matmul path (Linux's names)."""


@pytest.mark.parametrize("dtype", ["float64", "float32", "tf32", "bfloat16", "float16", "float8_e4m3fn", "int8"])
def test_native_paths_are_the_paths_some_cpu_really_takes_natively(dtype):
    """cpu_native_paths names exactly the native paths cpu_matmul_path picks over every flag set and vendor."""
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


# ---- a fake /proc/cpuinfo: the clock, the cores, detection -------------------------------------------------

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


def test_one_cores_matmul_never_beats_the_one_core_peak_from_the_clock_measured_on_it():
    """The peak's clock must make the one-core peak an upper bound on one core's matmul rate (ratio of two figures
    taken back to back in this run, on one pinned core: MFU on one core may not exceed 1).

    The clock is the peak's own, measured afresh on that core right after the matmul: with every FMA unit busy
    (measure_vector_clock) where it can be, else the scalar clock (measure_cpu_ghz), the fallback the peak uses.
    A clock measured under lighter load failed this on a Xeon guest (154 GFLOP/s from a 132.9 GFLOP/s "peak")."""
    flags, vendor, family, model, cpus = vector_clock._cpu_facts()
    if not cpu_clock.vector_clock_supported() and measure_cpu_ghz() is None:
        pytest.skip("the clock cannot be measured on this platform")
    threads, allowed = torch.get_num_threads(), os.sched_getaffinity(0)
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {cpus[0]})  # this thread: the matmul and both clock measurements run on one core
    try:
        a, b = torch.randn(512, 512), torch.randn(512, 512)
        seconds = time_matmul(a, b).median
        vector = cpu_clock.measure_vector_clock(facts=(flags, vendor, family, model, [cpus[0]]))
        ghz = vector.ghz if vector is not None else measure_cpu_ghz()
    finally:
        os.sched_setaffinity(0, allowed)
        torch.set_num_threads(threads)
    one_core_peak = cpu_peak_flops("float32", flags=flags, vendor=vendor, cores=1, ghz=ghz)
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


def test_detected_cpu_peak_uses_the_fake_machine(fake_cpu, monkeypatch):
    fake_cpu()
    monkeypatch.setattr(devices, "cpu_flags", lambda: frozenset({"avx2", "fma", "avx512f"}))
    info = detect_device("cpu")
    assert (info.cores, info.clock_ghz, info.vendor) == (2, 2.7, "intel")
    assert device_peak_flops(info, "float32") == pytest.approx(2 * 2.7e9 * 64)


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
