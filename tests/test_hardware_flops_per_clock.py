"""The dense FLOP/clock/SM table against the vendors' dense peaks, and the physical check on recorded H200 figures.

Truths: the datasheet peaks (:func:`accounting.hardware.peaks.peak_flops`, the table of
``/work/shared/reference/accelerators.md``), each part's SM count and maximum clock from its whitepaper or
datasheet (written out below with the source), and the recorded H200 run (its device properties and report).
"""

import json
from pathlib import Path

import pytest

from accounting.hardware.devices import DeviceInfo
from accounting.hardware.flops_per_clock import (
    FLOPS_PER_CLOCK_PER_SM,
    PHYSICAL_MARGIN,
    physical_check,
    physical_check_record,
)
from accounting.hardware.peaks import peak_flops

RECORDED = Path(__file__).parent / "data" / "hosts" / "nvidia-h200"

# (device name as torch reports it, compute capability, SMs, maximum boost clock MHz); sources: NVIDIA A100
# whitepaper (108 SMs, 1410 MHz), A10 datasheet (72 SMs, 1695 MHz), L4 / L40S datasheets and the Ada whitepaper
# (58 SMs, 2040 MHz; 142 SMs, 2520 MHz), H100 whitepaper (SXM5: 132 SMs, 1980 MHz; PCIe: 114 SMs, 1755 MHz), and
# the recorded H200's own device properties (132 multiprocessors, clock_rate 1,980,000 kHz).
PARTS = [
    ("NVIDIA A100-SXM4-80GB", (8, 0), 108, 1410),
    ("NVIDIA A10", (8, 6), 72, 1695),
    ("NVIDIA L4", (8, 9), 58, 2040),
    ("NVIDIA L40S", (8, 9), 142, 2520),
    ("NVIDIA H100 80GB HBM3", (9, 0), 132, 1980),
    ("NVIDIA H100 PCIe", (9, 0), 114, 1755),
    ("NVIDIA H200", (9, 0), 132, 1980),
]
COLUMN_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "tf32": "tf32", "fp8": "fp8", "float32": "fp32"}
COLUMN_OF = {"bfloat16": "bfloat16", "float16": "float16", "tf32": "tf32", "float8_e4m3fn": "fp8", "float32": "float32"}


@pytest.mark.parametrize("name, capability, sms, max_mhz", PARTS, ids=[part[0] for part in PARTS])
def test_every_entry_gives_the_datasheet_peak_at_a_clock_the_part_can_run(name, capability, sms, max_mhz):
    """peak ÷ (SMs × entry) is the clock the vendor quotes the peak at: at most the part's maximum clock, and
    more than half of it (so neither twice nor half the entry would fit the datasheet)."""
    for column, rate in FLOPS_PER_CLOCK_PER_SM[capability].items():
        peak = peak_flops(name, COLUMN_DTYPE[column])
        if peak is None:
            continue
        implied_mhz = peak / (sms * rate) / 1e6
        assert max_mhz / 2 < implied_mhz <= max_mhz * 1.01, (name, column, implied_mhz)


def test_every_architecture_in_the_table_is_checked_by_a_part():
    assert {part[1] for part in PARTS} == set(FLOPS_PER_CLOCK_PER_SM)


def test_the_h100_tensor_peak_is_132_sms_at_1830_mhz_and_its_fp32_peak_at_1980_mhz():
    assert 132 * FLOPS_PER_CLOCK_PER_SM[(9, 0)]["bfloat16"] * 1830e6 == pytest.approx(peak_flops("NVIDIA H200", "bf16"),
                                                                                      rel=1e-3)
    assert 132 * FLOPS_PER_CLOCK_PER_SM[(9, 0)]["float32"] * 1980e6 == pytest.approx(peak_flops("NVIDIA H200", "fp32"),
                                                                                     rel=1e-3)


def recorded_device():
    report = json.loads((RECORDED / "report-bf16-budget60.json").read_text())
    device = report["machine"]["device"]
    return report, tuple(device["compute_capability"]), device["multiprocessors"]


def test_the_recorded_793_at_1350_mhz_sustained_figure_fails_the_physical_check():
    report, capability, sms = recorded_device()
    steady = report["dtypes"]["bfloat16"]["headlines"]["sustained"]
    why = physical_check(steady["flops_per_s"], capability, "bfloat16", multiprocessors=sms,
                         clock_mhz=steady["clock_mhz"])
    assert why is not None and why.startswith("impossible: 793.1 TFLOP/s > 132 SMs")
    burst = report["dtypes"]["bfloat16"]["headlines"]["burst"]  # 826 at 1980 MHz: possible
    assert physical_check(burst["flops_per_s"], capability, "bfloat16", multiprocessors=sms,
                          clock_mhz=burst["clock_mhz"]) is None


def test_the_recorded_2_s_windows_pass_the_physical_check():
    recorded = json.loads((RECORDED / "sdpa-kernels-and-sustained-window.json").read_text())
    props = recorded["props"]
    for window in recorded["sustained_windows"]:
        assert physical_check(window["tflops"] * 1e12, (props["major"], props["minor"]), "bfloat16",
                              multiprocessors=props["multi_processor_count"], clock_mhz=window["clock_median"]) is None


def test_the_check_is_strict_at_the_margin_and_passes_what_it_cannot_judge():
    ceiling = 132 * 4096 * 1455e6 * PHYSICAL_MARGIN
    assert physical_check(ceiling, (9, 0), "bf16", multiprocessors=132, clock_mhz=1455.0) is None
    assert physical_check(ceiling * 1.0001, (9, 0), "bf16", multiprocessors=132, clock_mhz=1455.0) is not None
    assert physical_check(1e18, (10, 0), "bf16", multiprocessors=148, clock_mhz=1000.0) is None
    assert physical_check(1e18, (9, 0), "bf16", multiprocessors=None, clock_mhz=1000.0) is None
    assert physical_check(1e18, (9, 0), "bf16", multiprocessors=132, clock_mhz=None) is None


def test_the_recorded_pytest_gpu_matmuls_pass_the_benchmarks_physical_check_and_a_slower_clock_fails_them():
    recorded = json.loads((RECORDED / "pytest-gpu.json").read_text())
    capability, sms = recorded_device()[1:]
    h200 = DeviceInfo("cuda", "NVIDIA H200", 0, 2**37, compute_capability=capability, multiprocessors=sms)
    matmuls = [bench["extra_info"] for bench in recorded["benchmarks"] if bench["name"].startswith("test_gpu_matmul")]
    assert len(matmuls) == 10
    for info in matmuls:
        rate, clock = info["achieved_tflops"] * 1e12, info["telemetry"]["clock_mhz_mean"]
        assert physical_check_record(h200, info["dtype"], rate, clock)["ok"] is True, info["dtype"]
        # read against 0.7 × the lowest clock at which the SMs could give it, the same figure is impossible
        assert physical_check_record(h200, info["dtype"], rate, clock * 0.7 * rate / (
            sms * FLOPS_PER_CLOCK_PER_SM[capability][COLUMN_OF[info["dtype"]]] * clock * 1e6))["ok"] is False


# torch on ROCm fills compute capability with the gfx version's digits: gfx90a (MI210, MI250X) reads (9, 0),
# Hopper's; gfx942 (MI300X) (9, 4). The MI250X's figures: per GCD (one torch device) 110 CUs at up to 1700 MHz,
# 191.5 TFLOP/s dense bf16 (AMD's datasheet, the peak table's entry).
MI250X_GCD = DeviceInfo("cuda", "AMD Instinct MI250X/MI250", 0, 64 * 2**30, compute_capability=(9, 0),
                        multiprocessors=110, arch="gfx90a:sramecc+:xnack-", runtime="ROCm 6.2")
MI300X = DeviceInfo("cuda", "AMD Instinct MI300X", 0, 192 * 2**30, compute_capability=(9, 4), multiprocessors=304,
                    arch="gfx942:sramecc+:xnack-", runtime="ROCm 6.2")


@pytest.mark.parametrize("info", [MI250X_GCD, MI300X], ids=["gfx90a", "gfx942"])
@pytest.mark.parametrize("times_peak", [1.0, 3.0])
def test_a_rocm_gpu_is_not_judged_by_nvidia_rates_whatever_capability_torch_reports(info, times_peak):
    """Neither its datasheet peak nor three times it (no clock can give that) is judged: the table is NVIDIA's."""
    rate = times_peak * peak_flops(info.name, "bf16")
    record = physical_check_record(info, "bfloat16", rate, 1700.0)
    assert record["ok"] is None and record["ceiling_flops_per_s"] is None
    assert record["reason"].startswith("physical check not made") and "AMD" in record["reason"]
    assert info.arch.split(":")[0] in record["reason"]


def test_a_rocm_gpu_without_an_arch_name_is_still_not_judged_by_nvidia_rates():
    unnamed = DeviceInfo("cuda", "AMD Radeon Graphics", 0, 2**34, compute_capability=(9, 0), multiprocessors=110,
                         runtime="ROCm 6.2")
    assert physical_check_record(unnamed, "bfloat16", 1e18, 1700.0)["ok"] is None


def test_the_same_capability_on_an_nvidia_gpu_is_still_judged():
    h100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 80 * 2**30, compute_capability=(9, 0), multiprocessors=132,
                      runtime="CUDA 12.4")
    assert physical_check_record(h100, "bfloat16", 3 * peak_flops(h100.name, "bf16"), 1980.0)["ok"] is False
