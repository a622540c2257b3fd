"""A report row's physical check reads its figure against the highest clock its window saw, so one low reading in
the window (a stale one from the shape before, an idle edge) cannot make a figure the SMs can give impossible, and
a window that never read a clock high enough still fails it.

Truths: the recorded H200 (``tests/data/hosts/nvidia-h200/``): its device properties (132 SMs, compute capability
9.0), the bf16 row of the budget-60 report timed at the sustained shape (4608×6208×5632, 792.6 TFLOP/s, read at
1890 MHz), and its datasheet bf16 peak (989.4 TFLOP/s dense at 1830 MHz on 132 SMs, the H100 whitepaper's clock),
which gives the lowest clock at which 132 SMs can deliver the row's figure. The window's readings come through the
package's NVML backend from a fake NVML, as a real window's do.
"""

import copy

import pytest

from accounting.fleet.verdict import IMPOSSIBLE, judge
from accounting.hardware.devices import DeviceInfo
from accounting.hardware.peaks import peak_flops
from accounting.report.results import dtype_section
from accounting.report.saturation import figure_check, physical_facts, withheld_because
from accounting.report.sweep import MatmulMeasurement
from accounting.report.verdict import UNKNOWN
from accounting.telemetry.gpu_nvml import NvmlBackend
from accounting.telemetry.sampler import summarise
from tests.support import h200_report_replay as recorded
from tests.support.fake_nvml import SW_POWER_CAP, FakeGpu, FakeNvml

SHAPE = [4608, 6208, 5632]


def recorded_row() -> dict:
    """The budget-60 report's bf16 row at the sustained shape."""
    rows = recorded.load("report-bf16-budget60.json")["dtypes"]["bfloat16"]["measurements"]
    (row,) = [row for row in rows if [row["m"], row["k"], row["n"]] == SHAPE]
    return row


def lowest_possible_mhz(flops_per_s: float) -> float:
    """The clock below which the H200's SMs cannot deliver ``flops_per_s`` of dense bf16 (datasheet rate per clock)."""
    sms = recorded.physical()[1]
    per_sm_per_clock = peak_flops("NVIDIA H200", "bf16") / (sms * 1830e6)
    return flops_per_s / (sms * per_sm_per_clock) / 1e6


def window(clocks_mhz) -> dict:
    """A window's telemetry with these SM clock readings (power-capped at 690 W), read through NvmlBackend."""
    gpu = FakeGpu(power_limit_mw=700e3, throttle_mask=SW_POWER_CAP, power_mw=690e3)
    backend = NvmlBackend(FakeNvml([gpu]), 0)
    readings = []
    for position, clock in enumerate(clocks_mhz):
        gpu.clock_mhz = clock
        readings.append(backend.read(edge=position in (0, len(clocks_mhz) - 1)))
    return summarise("cuda:0", backend, readings).to_dict()


def section(clocks_mhz) -> dict:
    """The bf16 section of the recorded row timed in a window with these clock readings."""
    row = recorded_row()
    done = MatmulMeasurement("bfloat16", row["m"], row["k"], row["n"], row["flops"], row["seconds"], row["iqr_s"],
                             row["repeats"], phase=row["phase"], telemetry=window(clocks_mhz))
    return dtype_section("bfloat16", [done], peak=peak_flops("NVIDIA H200", "bf16"), floor=0.5, bandwidth=None,
                         spec_bandwidth=None, physical=recorded.physical())


def fleet_flags(found: dict) -> list[dict]:
    rank = copy.deepcopy(recorded.load("fleet.json")["ranks"][0])
    rank["report"]["dtypes"]["bfloat16"] = found
    return [flag for flag in judge([rank], fraction=0.9)["flags"] if flag["kind"] == IMPOSSIBLE]


def impossible_tags(found: dict) -> list[str]:
    return [tag for tag in found["best"]["tags"] if tag.startswith(f"{IMPOSSIBLE}:")]


def test_a_stale_low_reading_does_not_make_the_recorded_row_impossible():
    row = recorded_row()
    # one reading left from the shape before, one at the window's start, one while the product ran: the median
    # (1400 MHz) is below the lowest clock that gives the figure, the clock the product ran at is above it
    clocks = [1392.0, 1400.0, 1900.0]
    assert sorted(clocks)[1] < lowest_possible_mhz(row["flops_per_s"]) < max(clocks)
    found = section(clocks)
    assert impossible_tags(found) == []
    assert found["verdict"]["status"] != UNKNOWN and found["verdict"]["healthy"] is not None
    assert fleet_flags(found) == []


def test_a_window_that_never_read_the_clock_the_figure_needs_still_fails_and_names_its_highest_clock():
    row = recorded_row()
    clocks = [1392.0, 1400.0, 1410.0]
    assert max(clocks) * 1.02 < lowest_possible_mhz(row["flops_per_s"])  # beyond the check's margin
    found = section(clocks)
    (tag,) = impossible_tags(found)
    assert "× 1410 MHz ×" in tag
    assert found["verdict"]["status"] == UNKNOWN
    (flag,) = fleet_flags(found)
    assert flag["subject"] == "bfloat16" and "1410 MHz" in flag["message"]


@pytest.mark.parametrize("clocks", [[1900.0], [1392.0, 1900.0, 1900.0, 1400.0]])
def test_the_row_passes_whenever_its_window_read_the_clock_it_ran_at(clocks):
    assert impossible_tags(section(clocks)) == []


def test_a_sustained_window_is_judged_at_its_highest_clock_too():
    row = recorded_row()
    reasons = withheld_because(window([1392.0, 1400.0, 1900.0]), seconds=2.0, flops_per_s=row["flops_per_s"],
                               dtype="bfloat16", physical=recorded.physical()) or ""
    assert f"{IMPOSSIBLE}:" not in reasons


def test_a_rocm_gpu_reporting_hoppers_capability_gets_no_nvidia_ceiling_in_the_report():
    # torch on ROCm reports gfx90a (MI250X, one GCD: 110 CUs) as compute capability 9.0
    mi250x = DeviceInfo("cuda", "AMD Instinct MI250X/MI250", 0, 64 * 2**30, compute_capability=(9, 0),
                        multiprocessors=110, arch="gfx90a:sramecc+:xnack-", runtime="ROCm 6.2")
    assert figure_check(10 * peak_flops(mi250x.name, "bf16"), "bfloat16", 1700.0, physical_facts(mi250x)) is None


def test_each_row_carries_its_windows_clock_spread_beside_its_figure():
    """The acceptance summary shows the sweep's rows with the clock their window read, lowest to highest: a row
    quoted at one clock may have run part of its window at another."""
    clocks = [1392.0, 1400.0, 1900.0, 1455.0]
    row = section(clocks)["best"]
    assert (row["clock_mhz_min"], row["clock_mhz_median"], row["clock_mhz_max"]) == (
        min(clocks), (1400.0 + 1455.0) / 2, max(clocks))
