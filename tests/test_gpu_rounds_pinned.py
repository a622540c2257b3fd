"""The gate's per-round GPU rules at their edges: what a record reads back as, which rounds a reason names, the
clock rule's bounds, and what the screen keeps, notes and reports per side.

Truths: the rules as the gate states them (a throttle reason other than the power cap disturbs; another process
over the memory limit on the device disturbs, a busy sibling GPU does not; a clock more than the tolerance
outside the baseline runs' range disturbs unless the power cap explains it), on readings shaped like the
recorded H200's (1410–1980 MHz, ``sw_power_cap`` at full load), and nvml.h's reason names.
"""

import math

import pytest

from accounting.bench.round_telemetry import READ_DURING
from accounting.gate.gpu_rounds import (
    clock_note,
    clock_range,
    rounds_disturbances,
    rounds_telemetry,
    saved_run_lines,
    screen_rounds,
    side_clocks,
)
from accounting.gate.guard import CLOCK_TOLERANCE, OTHER_MEMORY_LIMIT_BYTES
from accounting.gate.storage import BenchmarkRun, SavedRun

GIB = 2**30


def per_round(clocks, **lists) -> dict:
    return {"telemetry_rounds": {"clock_mhz": list(clocks), **lists}}


def window(clock=1980.0, power=None, reasons=(), tags=()) -> dict:
    return {"telemetry": {"clock_mhz_mean": clock, "power_w_mean": power, "throttle_reasons": list(reasons),
                          "tags": list(tags)}}


def test_a_per_round_record_reads_back_round_by_round_with_every_field():
    info = {**per_round([1980, 1410, 1500], power_w=[650.0, 700.0, 690.0],
                        throttle_reasons=[[], ["hw_slowdown"], ["sw_power_cap"]],
                        busy_siblings=[[], ["gpu3"], []], other_process_memory_bytes=[0, 5 * GIB, None]),
            **window(1600.0, reasons=["sw_thermal_slowdown"], tags=["busy: gpu7"])}
    found = rounds_telemetry(info, 3)
    assert found.per_round and found.rounds == 3
    assert [(s.first, s.last) for s in found.stretches] == [(1, 1), (2, 2), (3, 3)]
    assert [s.clock_mhz for s in found.stretches] == [1980.0, 1410.0, 1500.0]
    assert [s.power_w for s in found.stretches] == [650.0, 700.0, 690.0]
    assert [s.reasons for s in found.stretches] == [(), ("hw_slowdown",), ("sw_power_cap",)]
    assert [s.other_memory_bytes for s in found.stretches] == [0, 5 * GIB, None]
    assert found.window_reasons == ("sw_thermal_slowdown",)
    assert found.clocks == [1980.0, 1410.0, 1500.0] and found.clock_mhz == 1500.0
    assert found.power_capped


def test_short_lists_bad_numbers_and_no_window_read_as_unknown():
    info = per_round([1980, math.nan, True, "x"], power_w=[700.0])
    found = rounds_telemetry(info, 4)
    assert [s.clock_mhz for s in found.stretches] == [1980.0, None, None, None]
    assert [s.power_w for s in found.stretches] == [700.0, None, None, None]
    assert all(s.reasons == () and s.busy == () and s.other_memory_bytes is None for s in found.stretches)
    assert found.window_reasons == () and not found.power_capped
    assert found.clocks == [1980.0] and found.clock_mhz == 1980.0
    assert rounds_telemetry(per_round([None, None]), 2).clock_mhz is None


def test_a_window_record_is_one_stretch_over_all_rounds_and_no_record_is_none():
    found = rounds_telemetry(window(1624.0, 367.0, ["sw_power_cap"], ["busy: gpu1", "throttled: x"]), 20)
    assert not found.per_round and found.rounds == 20 and len(found.stretches) == 1
    assert not found.read_during  # a window over all rounds has no per-round readings, during or after
    stretch = found.stretches[0]
    assert (stretch.first, stretch.last, stretch.clock_mhz, stretch.power_w) == (1, 20, 1624.0, 367.0)
    assert stretch.reasons == ("sw_power_cap",) and stretch.other_memory_bytes is None
    assert rounds_telemetry({}, 5) is None
    assert rounds_telemetry({"telemetry": "not a window"}, 5) is None
    assert rounds_telemetry({"telemetry_rounds": {"clock_mhz": "not a list"}}, 5) is None
    assert rounds_disturbances(None) == [] and rounds_disturbances(None, [found]) == []


def test_throttled_rounds_are_named_as_spans_with_their_readings():
    reasons = [["hw_slowdown"], ["hw_slowdown"], ["hw_slowdown"], [], [], [], ["hw_slowdown"], []]
    found = rounds_telemetry(per_round([1400, 1500, 1450, 1980, 1980, 1980, 1410, 1980],
                                       power_w=[690.0] * 8, throttle_reasons=reasons), 8)
    assert rounds_disturbances(found) == ["rounds 1-3, 7 of 8 throttled (hw_slowdown) at 1400-1500 MHz, 690 W"]
    one = rounds_telemetry(per_round([1980, 1410], throttle_reasons=[[], ["hw_thermal_slowdown", "hw_slowdown"]]), 2)
    assert rounds_disturbances(one) == ["round 2 of 2 throttled (hw_thermal_slowdown, hw_slowdown) at 1410 MHz"]
    unread = rounds_telemetry(per_round([None], throttle_reasons=[["hw_slowdown"]]), 1)
    assert rounds_disturbances(unread) == ["round 1 of 1 throttled (hw_slowdown)"]


def test_the_power_cap_and_a_setting_are_not_disturbances_and_a_reason_between_readings_is():
    capped = rounds_telemetry(per_round([1455, 1455], throttle_reasons=[["sw_power_cap"],
                                                                        ["applications_clocks_setting"]]), 2)
    assert rounds_disturbances(capped) == []
    between = rounds_telemetry({**per_round([1980, 1980]),
                                **window(reasons=["sw_power_cap", "applications_clocks_setting",
                                                  "hw_thermal_slowdown"])}, 2)
    assert rounds_disturbances(between) == ["throttled (hw_thermal_slowdown) during the rounds' telemetry window, "
                                            "between the readings after each round"]
    seen = rounds_telemetry({**per_round([1980, 1410], throttle_reasons=[[], ["hw_thermal_slowdown"]]),
                             **window(reasons=["hw_thermal_slowdown"])}, 2)
    assert rounds_disturbances(seen) == ["round 2 of 2 throttled (hw_thermal_slowdown) at 1410 MHz"]


def test_another_process_over_the_memory_limit_or_a_busy_sibling_disturbs_and_the_limit_itself_does_not():
    at_limit = rounds_telemetry(per_round([1980, 1980], other_process_memory_bytes=[OTHER_MEMORY_LIMIT_BYTES, 0]), 2)
    assert rounds_disturbances(at_limit) == []
    over = rounds_telemetry(per_round([1980, 1980, 1980],
                                      other_process_memory_bytes=[0, 5 * GIB, OTHER_MEMORY_LIMIT_BYTES + GIB // 2]), 3)
    assert rounds_disturbances(over) == ["rounds 2-3 of 3: other processes held 5.0 GiB on the device"]


def test_busy_siblings_decide_nothing_and_an_older_windows_words_about_other_processes_do():
    """A sibling GPU shares neither this GPU's power limit nor its memory: per round or in the window's busy tag it
    is not a disturbance. A window saved before it kept other processes' bytes says them only in its tag's words."""
    info = {**per_round([1980, 1980, 1980], busy_siblings=[[], ["gpu3"], []],
                        other_process_memory_bytes=[0, 5 * GIB, 0]), **window(tags=["busy: gpu7", "throttled: x"])}
    found = rounds_telemetry(info, 3)
    assert [s.busy for s in found.stretches] == [(), (), ()]
    assert rounds_disturbances(found) == ["round 2 of 3: other processes held 5.0 GiB on the device"]
    assert rounds_disturbances(rounds_telemetry(window(tags=["busy: gpu5"]), 4)) == []
    older = rounds_telemetry(window(tags=["busy: other processes hold 6.00 GiB on the device; gpu5"]), 4)
    assert older.stretches[0].busy == ("other processes hold 6.00 GiB on the device",)
    assert rounds_disturbances(older) == [
        "rounds 1-4 of 4 (one telemetry window): other processes hold 6.00 GiB on the device"]
    kept = {"telemetry": dict(window(tags=["busy: gpu5"])["telemetry"], other_process_memory_bytes=5 * GIB)}
    assert rounds_disturbances(rounds_telemetry(kept, 4)) == [
        "rounds 1-4 of 4 (one telemetry window): other processes held 5.0 GiB on the device"]


def baselines(*clocks, capped=False):
    reasons = ["sw_power_cap"] if capped else []
    return [rounds_telemetry(per_round([clock], throttle_reasons=[reasons]), 1) for clock in clocks]


def test_the_baselines_clock_range_ignores_runs_without_a_clock():
    assert clock_range([None, *baselines(1500, 1400), rounds_telemetry(per_round([None]), 1)]) == (1400.0, 1500.0)
    assert clock_range([None]) is None and clock_range([]) is None


def test_a_clock_at_the_tolerance_below_or_above_the_baselines_is_not_disturbed_and_past_it_is():
    base = baselines(1400, 1500)
    low, high = 1400 * (1 - CLOCK_TOLERANCE), 1500 * (1 + CLOCK_TOLERANCE)
    edges = rounds_telemetry(per_round([low, high]), 2)
    assert rounds_disturbances(edges, base) == []
    past = rounds_telemetry(per_round([low - 1, 1450, high + 1], power_w=[400.0, 500.0, 600.0]), 3)
    assert rounds_disturbances(past, base) == [
        f"rounds 1, 3 of 3 at {low - 1:.0f}-{high + 1:.0f} MHz, 400-600 W: outside the baseline runs' 1400-1500 MHz "
        f"by more than {CLOCK_TOLERANCE:.0%}, and not the power cap"]
    assert rounds_disturbances(past, [None]) == []  # no baseline clock: the rule decides nothing


def test_the_power_cap_explains_a_lower_clock_in_capped_rounds_and_a_higher_one_against_capped_baselines():
    base = baselines(1400, 1500)
    slow_capped = rounds_telemetry(per_round([1000.0], throttle_reasons=[["sw_power_cap"]]), 1)
    assert rounds_disturbances(slow_capped, base) == []
    fast = rounds_telemetry(per_round([1980.0]), 1)
    assert rounds_disturbances(fast, base) != []
    assert rounds_disturbances(fast, [*base, *baselines(1450, capped=True)]) == []
    # the power cap does not explain a higher clock in a capped round against uncapped baselines
    fast_capped = rounds_telemetry(per_round([1980.0], throttle_reasons=[["sw_power_cap"]]), 1)
    assert rounds_disturbances(fast_capped, base) != []


def test_a_throttled_round_is_named_once_not_again_by_the_clock_rule():
    found = rounds_telemetry(per_round([1000.0, 1450.0], throttle_reasons=[["hw_slowdown"], []]), 2)
    assert rounds_disturbances(found, baselines(1400, 1500)) == ["round 1 of 2 throttled (hw_slowdown) at 1000 MHz"]


@pytest.mark.parametrize("baseline, current, ratio, text", [
    (None, 1650.0, 1.2, ""), (1980.0, None, 1.2, ""), (1980.0, 1650.0, None, ""), (1980.0, 1650.0, math.nan, ""),
    (0.0, 1650.0, 1.2, ""),
    (1980.0, 1980.0, 0.95, "clock 1980 → 1980 MHz (+0 %): per clock cycle 0.950×, at the same clock"),
    (1980.0, 1980.0 * (1 + CLOCK_TOLERANCE * 0.8), 1.10,
     "clock 1980 → 2059 MHz (+4 %): per clock cycle 1.144×, a slower product at the same clock"),
    (1650.0, 1980.0, 0.84, "clock 1650 → 1980 MHz (+20 %): per clock cycle 1.008×, a faster clock"),
    (1980.0, 1800.0, 1.30, "clock 1980 → 1800 MHz (-9 %): per clock cycle 1.182×, a slower product, not only a "
                           "slower clock"),
    (1980.0, 2200.0, 0.70, "clock 1980 → 2200 MHz (+11 %): per clock cycle 0.778×"),
])
def test_the_clock_note_for_each_case(baseline, current, ratio, text):
    assert clock_note(baseline, current, ratio) == text


def bench(name, info, rounds=5):
    return BenchmarkRun(name, (0.1,) * rounds, info)


def test_saved_run_lines_give_the_warm_up_span_the_settled_clocks_and_each_disturbed_benchmark():
    warm = [{"seconds": 0.12, "settled": True, "clock_mhz_settled": 1980.0},
            {"seconds": 1.5, "settled": True, "clock_mhz_settled": 1455.4},
            {"seconds": 2.0, "settled": False, "clock_mhz_settled": 1200.0},
            {"seconds": None}, "not a warm-up"]
    benches = {f"t::b{index}": bench(f"t::b{index}", {"warmup": entry}) for index, entry in enumerate(warm)}
    benches["t::hot"] = bench("t::hot", window(1410.0, reasons=["hw_slowdown"]))
    lines = saved_run_lines(SavedRun("0001_a.json", {}, benches))
    assert lines == ["warm-up to the working clock: 0.12-2.00 s (2 of 3 benchmark(s) settled, at 1455-1980 MHz)",
                     "t::hot: rounds 1-5 of 5 (one telemetry window) throttled (hw_slowdown) at 1410 MHz; it will be "
                     "left out"]
    unsettled = {"t::a": bench("t::a", {"warmup": {"seconds": 0.5, "settled": False}})}
    assert saved_run_lines(SavedRun("0002_b.json", {}, unsettled)) == [
        "warm-up to the working clock: 0.50 s (0 of 1 benchmark(s) settled)"]
    assert saved_run_lines(SavedRun("0003_c.json", {}, {"t::cpu": bench("t::cpu", {})})) == []


def test_the_screen_keeps_what_was_not_disturbed_and_notes_the_rest_per_side():
    cool, hot = window(1980.0), window(1410.0, reasons=["hw_slowdown"])
    base = [("runs/0001_cool.json", bench("t::mm", cool)), ("runs/0002_hot.json", bench("t::mm", hot))]
    current = [("current/now.json", bench("t::mm", window(1500.0))), ("current/ok.json", bench("t::mm", cool))]
    labels = [SavedRun("current/ok.json", {}, {}), SavedRun("current/now.json", {}, {})]
    kept_base, kept_current, notes, clocks = screen_rounds(base, current, labels, True)
    assert kept_base == base[:1] and kept_current == current[1:]
    assert notes["baseline"] == ["baseline run 0002_hot.json not used, disturbed during its timed rounds: rounds 1-5 "
                                 "of 5 (one telemetry window) throttled (hw_slowdown) at 1410 MHz"]
    # judged against the kept baseline (1980 MHz) only, not the disturbed one
    assert len(notes["current"]) == 1 and notes["current"][0].startswith(
        "current run now.json not used, disturbed during its timed rounds: rounds 1-5 of 5 (one telemetry window) "
        "at 1500 MHz: outside the baseline runs' 1980-1980 MHz")
    assert clocks == {"runs/0001_cool.json": 1980.0, "runs/0002_hot.json": 1410.0, "current/now.json": 1500.0,
                      "current/ok.json": 1980.0}
    unlabelled = screen_rounds(base, current[:1], [], True)[2]["current"]
    assert unlabelled[0].startswith("current run now.json not used")
    assert screen_rounds(base, current, labels, False) == (base, current, {"baseline": [], "current": []}, clocks)


def test_each_sides_clock_is_the_median_of_its_runs_compared():
    clocks = {"a": 1400.0, "b": 1500.0, "c": 1980.0, "d": 1455.0}
    pairs = [("a", None), ("b", None), ("c", None), ("x", None)]
    assert side_clocks(clocks, pairs, [("d", None)]) == {"baseline_clock_mhz": 1500.0, "current_clock_mhz": 1455.0}
    assert side_clocks(clocks, [("x", None)], []) == {}


def test_a_reason_between_readings_names_how_the_rounds_were_read():
    """Readings taken during the rounds leave only the gaps between them unread; older runs read after each round."""
    during = rounds_telemetry({"telemetry_rounds": {"clock_mhz": [1980, 1980], "read": READ_DURING},
                               **window(reasons=["hw_thermal_slowdown"])}, 2)
    assert during.read_during
    assert rounds_disturbances(during) == ["throttled (hw_thermal_slowdown) during the rounds' telemetry window, "
                                           "between the rounds' own readings"]
    after = rounds_telemetry({"telemetry_rounds": {"clock_mhz": [1980, 1980], "read": "after"},
                              **window(reasons=["hw_thermal_slowdown"])}, 2)
    assert not after.read_during
