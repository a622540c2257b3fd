"""Validity tags at their edges, from a real :class:`~accounting.telemetry.Summary` and from its dict.

Each threshold's strict side, where a tag's figures come from, and every field of a benchmark's
``extra_info``. The truths are the tags' definitions in the module docstring (a strict "below"/"above"/
"more than"), byte counts written out in powers of 1024, and FLOPs over joules.
"""

import pytest

from accounting.telemetry.readings import Summary
from accounting.telemetry.validity import (
    BOOSTING,
    BUSY,
    POWER_SUSPECT,
    THROTTLED,
    tag_names,
    validity_tags,
    window_extra_info,
)

GIB = 2**30


def summary(**readings):
    return Summary(device="cuda:0", backend="nvml", duration_s=2.0, samples=100, logical_cpus=16, **readings)


@pytest.mark.parametrize("as_dict", [False, True], ids=["summary", "dict"])
def test_every_tag_at_once_from_a_summary_or_its_dict(as_dict):
    window = summary(throttle_reasons=("hw_slowdown",), power_w_mean=900.0, power_w_median=500.0,
                     power_limit_w=700.0, clock_mhz_mean=1800.0,
                     other_process_memory_bytes=3 * GIB, busy_siblings=("GPU 1: 50% utilised, 1.0 GiB used",))
    tags = validity_tags(window.to_dict() if as_dict else window, saturated_clock_mhz=1500.0)
    assert tags == [
        "throttled: hw_slowdown",
        "power-suspect: 500 W < 0.9 × the enforced power limit, 700 W",
        "boosting: 1800 MHz > 1.04 × the saturated 1500 MHz",
        "busy: other processes hold 3.00 GiB on the device; GPU 1: 50% utilised, 1.0 GiB used",
    ]
    assert tag_names(tags) == [THROTTLED, POWER_SUSPECT, BOOSTING, BUSY]


def test_no_summary_and_no_readings_earn_no_tag():
    assert validity_tags(None, power_limit_w=700.0, saturated_clock_mhz=1500.0) == []
    assert validity_tags(summary(), power_limit_w=700.0, saturated_clock_mhz=1500.0) == []
    assert validity_tags(object(), power_limit_w=700.0, saturated_clock_mhz=1500.0) == [], \
        "an object without the readings has none"


def test_power_is_suspect_strictly_below_nine_tenths_of_the_enforced_limit():
    assert validity_tags(summary(power_w_mean=630.0), power_limit_w=700.0) == []
    assert tag_names(validity_tags(summary(power_w_mean=629.9), power_limit_w=700.0)) == [POWER_SUSPECT]
    assert tag_names(validity_tags(summary(power_w_median=629.9, power_limit_w=700.0))) == [POWER_SUSPECT], \
        "the window's own enforced-limit reading"
    assert validity_tags(summary(power_w_mean=0.0), power_limit_w=0.0) == [], "no limit to compare with"
    assert validity_tags(summary(power_w_mean=100.0), power_limit_w=None) == []


@pytest.mark.parametrize("reason", ["sw_power_cap", "hw_power_brake_slowdown", "sw_thermal_slowdown",
                                    "hw_thermal_slowdown", "ppt_power"])
def test_a_window_at_its_power_or_thermal_limit_is_not_power_suspect_whatever_it_read(reason):
    window = summary(power_w_median=300.0, power_limit_w=700.0, throttle_reasons=(reason,))
    assert tag_names(validity_tags(window)) == [THROTTLED]
    assert tag_names(validity_tags(summary(power_w_median=300.0, power_limit_w=700.0,
                                           throttle_reasons=("hw_slowdown",)))) == [THROTTLED, POWER_SUSPECT]


def test_boosting_is_strictly_above_1_04_times_the_saturated_clock():
    assert validity_tags(summary(clock_mhz_mean=1560.0), saturated_clock_mhz=1500.0) == []
    assert tag_names(validity_tags(summary(clock_mhz_mean=1560.1), saturated_clock_mhz=1500.0)) == [BOOSTING]
    assert validity_tags(summary(clock_mhz_mean=1560.1), saturated_clock_mhz=None) == []
    assert validity_tags(summary(clock_mhz_mean=0.0), saturated_clock_mhz=0.0) == []


def test_busy_is_more_than_2_gib_held_by_others_or_a_busy_sibling():
    assert validity_tags(summary(other_process_memory_bytes=2 * GIB)) == []
    assert validity_tags(summary(other_process_memory_bytes=2 * GIB + 1)) == [
        "busy: other processes hold 2.00 GiB on the device"]
    assert validity_tags(summary(busy_siblings=("GPU 2: 90% utilised", "GPU 3: 6.0 GiB used"))) == [
        "busy: GPU 2: 90% utilised; GPU 3: 6.0 GiB used"]


def test_tag_names_split_at_the_first_colon_only():
    assert tag_names(["busy: GPU 1: 50% utilised", "throttled: hw_slowdown"]) == [BUSY, THROTTLED]
    assert tag_names([]) == []


def test_extra_info_records_the_window_and_its_energy_efficiency():
    window = summary(clock_mhz_mean=1410.0, clock_mhz_min=1305.0, power_w_mean=400.0, temperature_c_max=71.0,
                     throttle_reasons=("hw_slowdown",), energy_j=80.0, energy_source="counter",
                     other_process_memory_bytes=GIB)
    info = window_extra_info(window, work_flops=4 * 10**14, power_limit_w=500.0)
    assert info == {
        "clock_mhz_mean": 1410.0, "clock_mhz_min": 1305.0, "power_w_mean": 400.0, "temperature_c_max": 71.0,
        "throttle_reasons": ["hw_slowdown"], "energy_j": 80.0, "energy_source": "counter",
        "tflop_per_j": 400.0 / 80.0, "energy_unavailable": None, "power_w_median": 400.0, "power_limit_w": 500.0,
        "other_process_memory_bytes": GIB,
        "tags": ["throttled: hw_slowdown", "power-suspect: 400 W < 0.9 × the enforced power limit, 500 W"],
    }


def test_extra_info_without_energy_says_why_or_that_there_was_no_telemetry():
    no_energy = window_extra_info(summary(unavailable={"energy_j": "no counter"}), work_flops=10**12)
    assert (no_energy["tflop_per_j"], no_energy["energy_unavailable"]) == (None, "no counter")
    nothing = window_extra_info(None, work_flops=10**12)
    assert (nothing["tflop_per_j"], nothing["energy_unavailable"], nothing["throttle_reasons"], nothing["tags"]) == (
        None, "no telemetry", [], [])
