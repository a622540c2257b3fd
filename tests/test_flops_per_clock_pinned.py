"""Every FLOP/clock entry exactly, and every way the physical check says it was not made.

Truths: the datasheet peaks (:func:`accounting.hardware.peaks.peak_flops`, the table of
``/work/shared/reference/accelerators.md``) where peak = entry × SMs × the clock the peak is quoted at gives the
printed figure to its last digit; and, for every entry, the architecture whitepapers' dense multiply-adds per
clock per SM (each FMA two FLOPs). A 2 % tolerance lets an entry be off by one and more; these do not.
"""

import math

import pytest

from accounting.hardware.devices import DeviceInfo
from accounting.hardware.flops_per_clock import (
    IMPOSSIBLE,
    PHYSICAL_MARGIN,
    dense_flops_per_s,
    flops_per_clock_per_sm,
    highest_clock_mhz,
    nvidia_capability,
    other_vendor_note,
    physical_check,
    physical_check_note,
    physical_check_record,
)
from accounting.hardware.peaks import peak_flops

# (device name, compute capability, SMs, the clock in MHz its datasheet quotes the peak at, datasheet columns the
# product gives to the printed digit). Sources: H100 whitepaper (SXM5: 132 SMs; tensor peaks at 1830 MHz, FP32 at
# the 1980 MHz boost), A100 whitepaper (108 SMs, 1410 MHz), A10 datasheet (72 SMs, 1695 MHz), L4 and L40S
# datasheets (58 SMs at 2040 MHz, 142 at 2520 MHz). L4's TF32 and FP8 and L40S's BF16, FP16 and FP8 are quoted at
# other clocks and are left out.
EXACT = [
    ("NVIDIA H100 80GB HBM3", (9, 0), 132, 1830, ("bf16", "fp16", "tf32", "fp8")),
    ("NVIDIA H100 80GB HBM3", (9, 0), 132, 1980, ("fp32",)),
    ("NVIDIA A100-SXM4-80GB", (8, 0), 108, 1410, ("bf16", "fp16", "tf32", "fp32")),
    ("NVIDIA A10", (8, 6), 72, 1695, ("bf16", "fp16", "tf32", "fp32")),
    ("NVIDIA L4", (8, 9), 58, 2040, ("bf16", "fp16", "fp32")),
    ("NVIDIA L40S", (8, 9), 142, 2520, ("tf32", "fp32")),
]
CASES = [(name, capability, sms, mhz, column) for name, capability, sms, mhz, columns in EXACT for column in columns]

# Dense multiply-adds per clock per SM, from the whitepapers: GA100 (A100: 4 tensor cores × 256 FP16 FMA, TF32
# half; 64 FP32 cores), GA10x (A10: 4 tensor cores × 128 FP16 FMA, TF32 half; 128 FP32 cores), AD10x (Ada: as
# GA10x, FP8 twice FP16), GH100 (H100: 4 tensor cores × 512 FP16 FMA, TF32 half, FP8 twice; 128 FP32 cores).
WHITEPAPER_FMA = {
    (8, 0): {"bfloat16": 1024, "float16": 1024, "tf32": 512, "float32": 64},
    (8, 6): {"bfloat16": 512, "float16": 512, "tf32": 256, "float32": 128},
    (8, 9): {"bfloat16": 512, "float16": 512, "tf32": 256, "float8_e4m3fn": 1024, "float8_e5m2": 1024, "float32": 128},
    (9, 0): {"bfloat16": 2048, "float16": 2048, "tf32": 1024, "float8_e4m3fn": 4096, "float8_e5m2": 4096,
             "float32": 128},
}
H200 = DeviceInfo("cuda", "NVIDIA H200", 0, 2**37, compute_capability=(9, 0), multiprocessors=132)
DTYPE_OF = {"bf16": "bfloat16", "fp16": "float16", "tf32": "tf32", "fp8": "float8_e4m3fn", "fp32": "float32"}


def verdict(record: dict) -> dict:
    """The record's verdict fields, less the clock it was judged at (the clock it was given: checked here)."""
    return {key: value for key, value in record.items() if key != "clock_mhz"}


def printed(peak: float) -> tuple[float, int]:
    """The datasheet figure in TFLOP/s as printed, and its decimals (the table prints at most one)."""
    figure = round(peak / 1e12, 1)
    return figure, 0 if figure == int(figure) else 1


@pytest.mark.parametrize("name, capability, sms, mhz, column", CASES,
                         ids=[f"{case[0]}-{case[4]}" for case in CASES])
def test_the_entry_times_sms_times_the_quoted_clock_is_the_datasheet_peak_to_its_last_digit(name, capability, sms,
                                                                                           mhz, column):
    figure, decimals = printed(peak_flops(name, column))
    found = dense_flops_per_s(capability, DTYPE_OF[column], multiprocessors=sms, clock_mhz=mhz)
    assert round(found / 1e12, decimals) == figure, (found / 1e12, figure)


def test_the_datasheet_pins_every_hopper_entry_and_every_architectures_fp32_to_the_unit():
    """Where the printed digit allows it, one FLOP/clock more or less per SM no longer gives the datasheet figure."""
    pinned = set()
    for name, capability, sms, mhz, column in CASES:
        figure, decimals = printed(peak_flops(name, column))
        rate = flops_per_clock_per_sm(capability, DTYPE_OF[column])
        if all(round((rate + step) * sms * mhz / 1e6, decimals) != figure for step in (-1, 1)):
            pinned.add((capability, column))
    assert pinned >= {((9, 0), column) for column in ("bf16", "fp16", "tf32", "fp8", "fp32")}
    assert pinned >= {(capability, "fp32") for capability in ((8, 0), (8, 6), (8, 9))}


@pytest.mark.parametrize("capability", sorted(WHITEPAPER_FMA))
def test_every_entry_is_two_flops_per_multiply_add_of_the_whitepaper(capability):
    for dtype, fma in WHITEPAPER_FMA[capability].items():
        assert flops_per_clock_per_sm(capability, dtype) == 2 * fma, (capability, dtype)
    assert flops_per_clock_per_sm(capability, "float64") is None  # FP64 is not in the table: not checked


def test_a_capability_is_read_from_any_sequence_and_an_unknown_one_is_not_in_the_table():
    assert flops_per_clock_per_sm([9, 0], "bf16") == flops_per_clock_per_sm((9, 0), "bfloat16")
    assert flops_per_clock_per_sm(None, "bf16") is None
    assert flops_per_clock_per_sm((10, 0), "bf16") is None
    assert flops_per_clock_per_sm((8, 0), "float8_e4m3fn") is None  # A100 has no FP8 units


def test_the_ceiling_is_not_computed_without_sms_or_a_clock():
    assert dense_flops_per_s((9, 0), "bf16", multiprocessors=0, clock_mhz=1830.0) is None
    assert dense_flops_per_s((9, 0), "bf16", multiprocessors=132, clock_mhz=0.0) is None
    assert dense_flops_per_s((10, 0), "bf16", multiprocessors=132, clock_mhz=1830.0) is None


def test_the_recorded_2_s_window_passes_and_the_impossible_reason_names_the_product():
    """685 TFLOP/s at 1455 MHz (a recorded H200 window) is possible; 793.1 at 1350 MHz (the recorded report) is not,
    and the reason spells out the ceiling it broke: SMs × FLOP/clock × clock × margin."""
    assert physical_check(685.0e12, (9, 0), "bfloat16", multiprocessors=132, clock_mhz=1455.0) is None
    why = physical_check(793.1e12, (9, 0), "bfloat16", multiprocessors=132, clock_mhz=1350.0)
    ceiling = 132 * 2 * WHITEPAPER_FMA[(9, 0)]["bfloat16"] * 1350e6 * PHYSICAL_MARGIN
    assert why == (f"{IMPOSSIBLE}: 793.1 TFLOP/s > 132 SMs × 4096 FLOP/clock × 1350 MHz × {PHYSICAL_MARGIN} = "
                   f"{ceiling / 1e12:.1f} TFLOP/s: the clock was read outside the timed work, or the timer is wrong")


def test_the_margin_is_a_few_percent_not_a_factor():
    """A clock read a moment from the work may be a few percent off, no more: 1.0 < margin < 1.05."""
    assert 1.0 < PHYSICAL_MARGIN < 1.05
    at_clock = 132 * 2 * WHITEPAPER_FMA[(9, 0)]["bfloat16"] * 1455e6
    assert physical_check(at_clock * 1.05, (9, 0), "bf16", multiprocessors=132, clock_mhz=1455.0) is not None


@pytest.mark.parametrize("info, dtype, why", [
    (DeviceInfo("cuda", "a GPU without SM count", 0, 2**34, compute_capability=(9, 0)), "bf16",
     "the device reports no SM count"),
    (DeviceInfo("cuda", "NVIDIA B200", 0, 2**37, compute_capability=(10, 0), multiprocessors=148), "bf16",
     "no dense FLOP/clock/SM for bfloat16 on compute capability 10.0"),
    (DeviceInfo("cuda", "a GPU of unknown capability", 0, 2**34, multiprocessors=100), "float16",
     "no dense FLOP/clock/SM for float16 on this device"),
    (DeviceInfo("cuda", "NVIDIA A100-SXM4-80GB", 0, 2**36, compute_capability=(8, 0), multiprocessors=108),
     "float8_e4m3fn", "no dense FLOP/clock/SM for float8_e4m3fn on compute capability 8.0"),
])
def test_a_check_that_cannot_be_made_says_why_and_is_not_a_verdict(info, dtype, why):
    note = physical_check_note(info.compute_capability, dtype, multiprocessors=info.multiprocessors)
    assert note == f"physical check not made: {why}"
    record = physical_check_record(info, dtype, 1e18, 1980.0)
    assert record["clock_mhz"] == 1980.0
    assert verdict(record) == {"ok": None, "reason": note, "ceiling_flops_per_s": None}


def test_a_record_not_made_for_a_cpu_a_missing_clock_or_a_missing_figure_says_which():
    cpu = DeviceInfo("cpu", "a CPU", None, 2**30)
    assert verdict(physical_check_record(cpu, "float32", 1e11, 3000.0)) == {
        "ok": None, "reason": "physical check not made: not a GPU", "ceiling_flops_per_s": None}
    for clock in (None, 0.0):
        assert physical_check_record(H200, "bf16", 700e12, clock)["clock_mhz"] == clock
        assert verdict(physical_check_record(H200, "bf16", 700e12, clock)) == {
            "ok": None, "reason": "physical check not made: no clock reading in the window",
            "ceiling_flops_per_s": None}
    for figure in (None, 0.0):
        assert verdict(physical_check_record(H200, "bf16", figure, 1455.0)) == {
            "ok": None, "reason": "physical check not made: no figure", "ceiling_flops_per_s": None}
    assert physical_check_note((9, 0), "bf16", multiprocessors=132) is None


def test_a_record_that_was_made_carries_the_ceiling_at_the_clock_and_the_verdict():
    ceiling = 132 * 2 * WHITEPAPER_FMA[(9, 0)]["bfloat16"] * 1455e6
    passed = physical_check_record(H200, "bfloat16", 685e12, 1455.0)
    assert passed["clock_mhz"] == 1455.0  # the clock the figure was judged at
    assert verdict(passed) == {"ok": True, "reason": None, "ceiling_flops_per_s": pytest.approx(ceiling, rel=1e-12)}
    failed = physical_check_record(H200, "bfloat16", 793.1e12, 1350.0)
    assert failed["ok"] is False and failed["reason"].startswith(f"{IMPOSSIBLE}: 793.1 TFLOP/s > 132 SMs")
    assert math.isclose(failed["ceiling_flops_per_s"], 132 * 4096 * 1350e6, rel_tol=1e-12)


MI250X = DeviceInfo("cuda", "AMD Instinct MI250X/MI250", 0, 2**36, compute_capability=(9, 0), multiprocessors=110,
                    arch="gfx90a:sramecc+:xnack-", runtime="ROCm 6.3")


def test_an_amd_gpu_reporting_hoppers_capability_is_not_read_by_nvidias_table():
    """torch on ROCm fills gfx90a's compute capability as (9, 0): Hopper's rates would give an MI250X's figures a
    ceiling that is not its own. It is not checked, and the record says why."""
    record = physical_check_record(MI250X, "bfloat16", 190e12, 1700.0)
    assert verdict(record) == {"ok": None, "reason": other_vendor_note(MI250X), "ceiling_flops_per_s": None}
    assert other_vendor_note(MI250X) == ("physical check not made: no FLOP/clock table for AMD GPUs (gfx90a; its "
                                         "compute capability 9.0 is not NVIDIA's)")
    assert nvidia_capability(MI250X) is None
    no_arch = DeviceInfo("cuda", "AMD Instinct MI300X", 0, 2**37, multiprocessors=304, runtime="ROCm 6.3")
    assert nvidia_capability(no_arch) is None
    assert other_vendor_note(no_arch) == "physical check not made: no FLOP/clock table for AMD GPUs (ROCm 6.3)"
    cuda = DeviceInfo("cuda", "NVIDIA H200", 0, 2**37, compute_capability=(9, 0), multiprocessors=132,
                      runtime="CUDA 12.4")
    assert nvidia_capability(cuda) == (9, 0) and other_vendor_note(cuda) is None
    cpu = DeviceInfo("cpu", "a CPU", None, 2**30, runtime="ROCm 6.3")
    assert nvidia_capability(cpu) is None and other_vendor_note(cpu) is None


def test_the_clock_a_window_is_judged_at_is_its_highest_reading():
    class Summary:
        clock_mhz_max = 1980.0

    assert highest_clock_mhz({"clock_mhz_median": 1400.0, "clock_mhz_max": 1900.0}) == 1900.0
    assert highest_clock_mhz(Summary()) == 1980.0
    assert highest_clock_mhz({"clock_mhz_median": 1400.0}) is None
    assert highest_clock_mhz(object()) is None and highest_clock_mhz(None) is None
