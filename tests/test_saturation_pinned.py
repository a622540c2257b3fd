"""The sustained window's rules, each at its edge: saturation by power or by a cap bit alone, a half-known clock,
the length and readings at their minimum, and the device that cannot show saturation.

Truths: the recorded H200's 2-s windows of the report's sustained shape (``tests/data/hosts/nvidia-h200/
sdpa-kernels-and-sustained-window.json``: 684–689 TFLOP/s, median clock 1455–1500 MHz, median power 685–691 W
against an enforced 700 W, throttle bitmask 0x4 throughout — nvml.h's ``nvmlClocksEventReasonSwPowerCap``), the
recorded report's 15-ms windows, and nvml.h's reason bits.
"""

import json
from pathlib import Path

import pytest

from accounting.hardware.devices import DeviceInfo
from accounting.report.headlines import Candidate, sustained
from accounting.report.saturation import (
    CLOCK_SETTLED_FRACTION,
    MIN_READINGS,
    SATURATION_POWER_FRACTION,
    SUSTAINED_MIN_S,
    clock_unsettled,
    figure_check,
    is_gpu_window,
    not_saturated,
    physical_facts,
    saturation_evidence,
    saturation_tags,
    soak_may_help,
    window_average_power_w,
    withheld_because,
)
from tests.support import h200_report_replay as replay

H200 = Path(__file__).parent / "data" / "hosts" / "nvidia-h200"
NVML_REASON_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                    0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown"}
"""nvml.h's clocks-event reasons (``nvmlClocksEventReason*``) by bit, in the package's names."""
PHYSICAL = ((9, 0), 132)


def recorded_windows() -> list[dict]:
    """The recorded 2-s windows as the telemetry summary of a sustained window would hold them."""
    recorded = json.loads((H200 / "sdpa-kernels-and-sustained-window.json").read_text())
    windows = []
    for window in recorded["sustained_windows"]:
        reasons = [name for bit, name in NVML_REASON_BITS.items() if window["throttle"] & bit]
        windows.append({"backend": "nvml", "samples": window["samples"], "clock_mhz_median": window["clock_median"],
                        "clock_mhz_max": window["clock_max"], "clock_mhz_early": window["clock_median"],
                        "clock_mhz_late": window["clock_median"],
                        "power_w_median": window["power_median"], "power_limit_w": recorded["power_limit_w"],
                        "throttle_reasons": reasons, "seconds": window["seconds"], "tflops": window["tflops"]})
    return windows


WINDOWS = recorded_windows()


def test_the_recorded_windows_read_as_the_recording_says():
    assert len(WINDOWS) >= 3
    assert all(window["throttle_reasons"] == ["sw_power_cap"] and window["power_limit_w"] == 700 for window in WINDOWS)


@pytest.mark.parametrize("window", WINDOWS, ids=lambda window: f"{window['tflops']}")
def test_a_recorded_window_is_sustained(window):
    assert withheld_because(window, seconds=window["seconds"], flops_per_s=window["tflops"] * 1e12,
                            dtype="bfloat16", physical=PHYSICAL) is None
    assert not not_saturated(window) and not soak_may_help(window)
    assert saturation_tags(window) == []


@pytest.mark.parametrize("window", WINDOWS, ids=lambda window: f"{window['tflops']}")
def test_the_cap_bit_alone_shows_saturation_when_the_power_reads_low(window):
    """The same window with its power read at half the limit (an instant reading at an idle edge): the power cap
    NVML reported still shows saturation, and the evidence names it."""
    low = {**window, "power_w_median": window["power_limit_w"] / 2}
    assert saturation_evidence(low) == "throttle reason sw_power_cap"
    assert not not_saturated(low)
    assert withheld_because(low, seconds=window["seconds"]) is None


@pytest.mark.parametrize("reason, saturating", [("sw_power_cap", True), ("sw_thermal_slowdown", True),
                                                ("hw_thermal_slowdown", True), ("hw_power_brake_slowdown", True),
                                                ("applications_clocks_setting", False), ("gpu_idle", False)])
def test_a_power_or_thermal_reason_is_evidence_and_a_setting_or_idle_is_not(reason, saturating):
    window = {**WINDOWS[0], "power_w_median": 300.0, "throttle_reasons": [reason]}
    evidence = saturation_evidence(window)
    assert (evidence == f"throttle reason {reason}") if saturating else evidence is None
    assert not_saturated(window) is not saturating
    assert soak_may_help(window) is not saturating


def test_power_at_the_fraction_of_the_enforced_limit_is_saturated_and_just_below_it_is_not():
    limit = WINDOWS[0]["power_limit_w"]
    at = {**WINDOWS[0], "throttle_reasons": [], "power_w_median": SATURATION_POWER_FRACTION * limit}
    below = {**at, "power_w_median": SATURATION_POWER_FRACTION * limit - 0.5}
    assert saturation_evidence(at) == (f"power {at['power_w_median']:.0f} W ≥ {SATURATION_POWER_FRACTION} × the "
                                       "enforced limit 700 W")
    assert saturation_evidence(below) is None
    assert withheld_because(below, seconds=2.0) == (
        f"not power-saturated: {below['power_w_median']:.0f} W < {SATURATION_POWER_FRACTION} × the enforced limit "
        "700 W and no power-cap or thermal throttle reason")


def test_without_a_limit_or_a_power_reading_only_a_reason_can_show_saturation():
    window = {**WINDOWS[0], "throttle_reasons": []}
    assert saturation_evidence({**window, "power_limit_w": None}) is None
    assert saturation_evidence({**window, "power_limit_w": 0.0}) is None
    no_power = {**window, "power_w_median": None}
    assert saturation_evidence(no_power) is None
    assert withheld_because(no_power, seconds=2.0) == (
        f"not power-saturated: power unknown < {SATURATION_POWER_FRACTION} × the enforced limit 700 W and no "
        "power-cap or thermal throttle reason")
    unlimited = {**window, "power_w_median": 300.0, "power_limit_w": None}
    assert withheld_because(unlimited, seconds=2.0) == (
        "not power-saturated: 300 W and no power-cap or thermal throttle reason")


def test_the_energy_counters_average_decides_saturation_over_the_readings_median():
    """A recorded window's energy counter says 690 W on average over its 2.06 s: saturated, though its readings'
    median is an idle edge's 300 W; a counter's 500 W over a median of 691 W (instant overshoots) is not. Without
    a counter, or over no seconds, the median stands."""
    window = {**WINDOWS[0], "throttle_reasons": [], "duration_s": 2.06}
    counted = {**window, "power_w_median": 300.0, "energy_j": 690.0 * 2.06, "energy_source": "counter"}
    assert window_average_power_w(counted) == pytest.approx(690.0)
    assert saturation_evidence(counted) == f"power 690 W ≥ {SATURATION_POWER_FRACTION} × the enforced limit 700 W"
    overshoot = {**counted, "power_w_median": 691.0, "energy_j": 500.0 * 2.06}
    assert saturation_evidence(overshoot) is None
    assert withheld_because(overshoot, seconds=2.06).startswith("not power-saturated: 500 W < ")
    assert window_average_power_w({**overshoot, "energy_source": "power×time"}) == 691.0
    assert window_average_power_w({**overshoot, "duration_s": 0.0}) == 691.0
    assert window_average_power_w({**overshoot, "energy_j": None}) == 691.0
    assert window_average_power_w(None) is None


def test_a_clock_with_one_half_unknown_is_not_called_unsettled():
    """A window too short for two halves has an early or a late clock, not both: nothing to compare."""
    assert clock_unsettled({"clock_mhz_early": 1650.0}) is None
    assert clock_unsettled({"clock_mhz_late": 1455.0}) is None
    assert clock_unsettled({"clock_mhz_early": None, "clock_mhz_late": 1455.0}) is None
    assert clock_unsettled(None) is None
    assert clock_unsettled({"clock_mhz_early": 0.0, "clock_mhz_late": 0.0}) is None


def test_the_clock_is_settled_at_the_fraction_and_moving_just_past_it():
    """Halves 45 MHz apart around 1500 MHz: 3 % of their mean, settled; half a MHz more, moving (either way)."""
    assert CLOCK_SETTLED_FRACTION * 1500.0 == 45.0  # the edge these halves sit on
    assert clock_unsettled({"clock_mhz_early": 1522.5, "clock_mhz_late": 1477.5}) is None
    moving = clock_unsettled({"clock_mhz_early": 1523.0, "clock_mhz_late": 1477.5})
    assert moving == "the clock was still moving: 1523 MHz in the first half of the window, 1478 MHz in the second"
    rising = clock_unsettled({"clock_mhz_early": 1477.5, "clock_mhz_late": 1523.0})
    assert rising is not None and rising.startswith("the clock was still moving: 1478 MHz in the first half")


def test_a_saturated_window_whose_clock_still_moved_is_withheld_and_a_soak_may_help():
    window = {**WINDOWS[0], "clock_mhz_early": 1650.0, "clock_mhz_late": 1455.0}
    assert not not_saturated(window)
    assert soak_may_help(window)
    assert withheld_because(window, seconds=2.0) == (
        "the clock was still moving: 1650 MHz in the first half of the window, 1455 MHz in the second")


def test_length_and_readings_at_their_minimum_pass_and_one_under_does_not():
    window = {**WINDOWS[0], "samples": MIN_READINGS}
    assert withheld_because(window, seconds=SUSTAINED_MIN_S) is None
    short = withheld_because({**window, "samples": MIN_READINGS - 1}, seconds=SUSTAINED_MIN_S * 0.999)
    assert short == (f"the window ran {SUSTAINED_MIN_S * 0.999:.3g} s, under the {SUSTAINED_MIN_S:g} s a sustained "
                     f"figure needs; {MIN_READINGS - 1} telemetry readings in the window, under the {MIN_READINGS} a "
                     "sustained figure needs")
    assert withheld_because({**window, "samples": None}, seconds=2.0).startswith("0 telemetry readings in the window")


def test_every_reason_is_given_in_order():
    """Short, few readings, impossible, not saturated, unsettled: all five, joined by '; '."""
    window = {"backend": "nvml", "samples": 2, "clock_mhz_max": 1350.0, "clock_mhz_early": 1650.0,
              "clock_mhz_late": 1350.0, "power_w_median": 300.0, "power_limit_w": 700.0, "throttle_reasons": []}
    reasons = withheld_because(window, seconds=0.015, flops_per_s=793.1e12, dtype="bfloat16",
                               physical=PHYSICAL).split("; ")
    assert [reason.split(" ")[:2] for reason in reasons] == [
        ["the", "window"], ["2", "telemetry"], ["impossible:", "793.1"], ["not", "power-saturated:"],
        ["the", "clock"]]


def test_the_physical_check_is_made_only_with_a_dtype_a_figure_and_the_devices_facts():
    window = {**WINDOWS[0], "clock_mhz_median": 1350.0, "clock_mhz_max": 1350.0}
    assert withheld_because(window, seconds=2.0, flops_per_s=793.1e12, dtype="bfloat16",
                            physical=PHYSICAL).startswith("impossible: 793.1 TFLOP/s > 132 SMs")
    assert withheld_because(window, seconds=2.0, flops_per_s=793.1e12, dtype=None, physical=PHYSICAL) is None
    # judged at the highest clock the window read: a low median (a stale reading) does not make it impossible
    assert withheld_because({**window, "clock_mhz_max": 1980.0}, seconds=2.0, flops_per_s=793.1e12, dtype="bfloat16",
                            physical=PHYSICAL) is None
    assert withheld_because(window, seconds=2.0, flops_per_s=793.1e12, dtype="bfloat16", physical=None) is None
    assert figure_check(None, "bfloat16", 1350.0, PHYSICAL) is None
    assert figure_check(0.0, "bfloat16", 1350.0, PHYSICAL) is None
    assert figure_check(685e12, "bfloat16", 1455.0, PHYSICAL) is None


def test_a_devices_physical_facts_are_its_capability_and_sms_on_a_gpu_only():
    gpu = DeviceInfo("cuda", "NVIDIA H200", 0, 2**37, compute_capability=(9, 0), multiprocessors=132)
    assert physical_facts(gpu) == ((9, 0), 132)
    assert physical_facts(DeviceInfo("cpu", "a CPU", None, 2**30)) is None
    rocm = DeviceInfo("cuda", "AMD Instinct MI250X/MI250", 0, 2**36, compute_capability=(9, 0), multiprocessors=110,
                      arch="gfx90a")
    assert physical_facts(rocm) == (None, 110)  # gfx90a reads (9, 0): not Hopper's capability


@pytest.mark.parametrize("telemetry, gpu", [({"backend": "nvml"}, True), ({"backend": "amdsmi"}, True),
                                            ({"backend": "psutil", "power_limit_w": 350.0}, True),
                                            ({"backend": "psutil"}, False), ({}, False), (None, False)])
def test_a_gpu_window_is_one_read_by_a_gpu_backend_or_with_an_enforced_limit(telemetry, gpu):
    assert is_gpu_window(telemetry) is gpu


def test_a_cpu_window_is_published_tagged_saturation_unknown_not_withheld():
    """A CPU reports neither a limit nor reasons: no readings rule, no saturation rule, and the tag says why."""
    cpu = {"backend": "psutil", "samples": 0, "power_w_median": None}
    assert withheld_because(cpu, seconds=2.0) is None
    assert not not_saturated(cpu) and not soak_may_help(cpu)
    tags = saturation_tags(cpu)
    assert len(tags) == 1 and tags[0].startswith("saturation-unknown: ")  # the name docs/report-and-telemetry.md gives
    assert saturation_tags({"throttle_reasons": ["sw_power_cap"]}) == []  # a reason shows it: no tag
    assert saturation_tags(None) == tags


def test_the_headline_phase_times_a_sustained_window_as_long_as_the_recorded_ones():
    """mamf-finder's MSMF and the recorded H200 windows ran 2 s (2.06 s recorded): a sustained window that the
    budget allows lasts that long, not a second more."""
    device = replay.RecordedH200(1)
    m, k, n = 4608, 6208, 5632  # the recorded windows' shape
    flops = 2 * m * k * n
    candidate = Candidate((m, k, n), flops, flops / (device.window["tflops"] * 1e12))
    headline, _ = sustained(device, "bfloat16", [candidate], deadline=10.0, physical=replay.physical())
    assert headline.published, headline.reason
    assert headline.seconds == pytest.approx(device.window["seconds"], rel=0.1)
