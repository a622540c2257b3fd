"""The gate replayed on the first real GPU's runs (one H200: tests/data/hosts/nvidia-h200.md, "The gate").

There the gate passed over its first baseline run and every current run as "disturbed", for an
idle clock read before any work (345 MHz) and a power cap the GPU reported under full load, and
so could pass anything. The truths here are the recorded files themselves: what the recorded
runs' own telemetry read during their rounds, their raw rounds, and what the old gate printed
(``gate-save.log``, ``gate-check.log``); a throttled run is built from the recorded telemetry by
changing only the throttle reason the device would have reported.
"""

import copy
import statistics

import pytest

from accounting.gate.cli import _reject
from accounting.gate.decide import judge
from accounting.gate.gpu_rounds import ROUNDS_KEY, saved_run_lines
from accounting.gate.guard import disturbances, recorded_disturbances
from accounting.gate.render import render_text, rows
from accounting.gate.stats import Decision
from accounting.gate.storage import choose_baseline, load_run, parse_run
from tests.support.gate_runs import H200, h200_baseline_files, h200_current, h200_document

BF16 = "tests/benchmarks/test_matmul.py::test_gpu_matmul[bfloat16-8192x8192x8192-cuda:0]"
FP16 = "tests/benchmarks/test_matmul.py::test_gpu_matmul[float16-8192x8192x8192-cuda:0]"


def _threshold(kind, name):
    return 10


def _baselines():
    return [load_run(path) for path in h200_baseline_files()]


def _judge(current_documents, baselines=None):
    current = [parse_run(document, f"current-{number}.json")
               for number, document in enumerate(current_documents, start=1)]
    return judge(baselines if baselines is not None else _baselines(), current, threshold_for=_threshold)


def _verdict(result, name):
    return next(verdict for verdict in result.verdicts if verdict.name == name)


def test_the_recorded_runs_read_the_idle_clock_before_and_the_working_clock_in_their_rounds():
    """What made the old gate call them disturbed, and what they hold to judge them by instead."""
    first = h200_document(h200_baseline_files()[0])
    assert first["accounting_gate"]["before"]["clock_mhz_mean"] == 345.0
    assert first["accounting_gate"]["after"]["clock_mhz_mean"] == 1980.0
    assert "the clock moved from 345 to 1980 MHz during the run" in (H200 / "gate-save.log").read_text()
    for path in h200_baseline_files():
        for bench in h200_document(path)["benchmarks"]:
            assert ROUNDS_KEY not in bench["extra_info"]  # saved before runs recorded each round
            assert bench["extra_info"]["telemetry"]["clock_mhz_mean"] == 1980.0


def test_both_recorded_baseline_runs_are_accepted():
    files = h200_baseline_files()
    identity = load_run(files[-1]).machine
    baseline = choose_baseline(files, identity, 2, reject=_reject, kinds={"cuda"})
    assert [run.label for run in baseline.runs] == [path.name for path in files]
    assert baseline.skipped == ()


def test_the_idle_clock_before_a_gpu_run_disturbs_it_no_more_but_a_cpu_clock_that_moves_still_does():
    guard = h200_document(h200_baseline_files()[0])["accounting_gate"]
    assert recorded_disturbances(guard) == []
    as_cpu = {key: {name: value for name, value in guard[key].items() if name not in ("device", "clock_source")}
              for key in ("before", "after")}
    assert disturbances(as_cpu["before"], as_cpu["after"]) == ["the clock moved from 345 to 1980 MHz during the run"]


def test_the_recorded_current_run_is_judged_and_the_table_says_no_change():
    result = _judge([h200_current()])
    bf16, fp16 = _verdict(result, BF16), _verdict(result, FP16)
    assert not any("disturbed" in note for note in result.notes)
    assert bf16.disturbed_values == () and fp16.disturbed_values == ()
    # The ratio is the recorded rounds' own: the current run's fastest round over the baseline runs' fastest (their
    # geometric mean: the gate compares mean logs).
    current = h200_current()["benchmarks"]
    fastest = {bench["fullname"]: min(bench["stats"]["data"]) for bench in current}
    baseline = statistics.geometric_mean(min(b["stats"]["data"]) for path in h200_baseline_files()
                                 for b in h200_document(path)["benchmarks"] if b["fullname"] == BF16)
    assert bf16.comparison.ratio == pytest.approx(fastest[BF16] / baseline)
    assert bf16.decision is Decision.NO_CHANGE
    row = dict(zip((verdict.name for verdict in result.verdicts), rows(result)))[BF16]
    assert row[7] == "no change"
    assert row[6] == "too few runs"  # 2 baseline runs and 1 current one cannot reach p <= 0.01: it says so
    assert " @ 1980 MHz" in row[2] and " @ 1624 MHz" in row[3]  # the clock beside each side's time
    # fp16: judged too; its two baseline runs' fastest rounds are 5.5 % apart (1.470, 1.550 ms), which 1 current run
    # cannot see through: inconclusive for the noise, not for a disturbance.
    assert fp16.comparison is not None and fp16.decision is Decision.INCONCLUSIVE
    assert "disturbed" not in fp16.reason
    assert "Gate: pass: 1 no change, 1 inconclusive" in render_text(result)


def _throttled_in_the_middle(document, name, rounds=range(8, 13), reason="hw_thermal_slowdown"):
    """``document`` with ``name``'s rounds recorded one by one: the recorded window's clock and power in each,
    and in ``rounds`` (1-based) the clock the pytest step read under load (1440 MHz) with ``reason``."""
    bench = next(b for b in document["benchmarks"] if b["fullname"] == name)
    window = bench["extra_info"]["telemetry"]
    count = len(bench["stats"]["data"])
    hot = {number for number in rounds}
    bench["extra_info"][ROUNDS_KEY] = {
        "clock_mhz": [1440.0 if number in hot else window["clock_mhz_mean"] for number in range(1, count + 1)],
        "power_w": [690.0 if number in hot else window["power_w_mean"] for number in range(1, count + 1)],
        "throttle_reasons": [[reason] if number in hot else [] for number in range(1, count + 1)],
    }
    return document


def test_a_run_throttled_in_the_middle_of_its_rounds_is_still_disturbed_and_says_where():
    current = _throttled_in_the_middle(h200_document(h200_baseline_files()[1]), BF16)
    result = _judge([current])
    bf16, fp16 = _verdict(result, BF16), _verdict(result, FP16)
    assert bf16.current_values == () and len(bf16.disturbed_values) == 1
    assert bf16.decision is Decision.INCONCLUSIVE
    (note,) = [note for note in result.notes if "disturbed" in note]
    assert note.startswith(BF16) and "rounds 8-12 of 20 throttled (hw_thermal_slowdown) at 1440 MHz, 690 W" in note
    assert bf16.reason.endswith("current run current-1.json not used, disturbed during its timed rounds: rounds 8-12 "
                                "of 20 throttled (hw_thermal_slowdown) at 1440 MHz, 690 W")  # the row's own reason
    assert "@ MHz: the device's clock during the timed rounds" in render_text(result)  # the legend says what @ is
    assert fp16.current_values != ()  # the other benchmark of the same run is judged


@pytest.mark.parametrize("reason", ["hw_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown"])
def test_each_thermal_or_hardware_slowdown_disturbs_and_the_power_cap_does_not(reason):
    slowed = _throttled_in_the_middle(h200_document(h200_baseline_files()[1]), BF16, reason=reason)
    capped = _throttled_in_the_middle(h200_document(h200_baseline_files()[1]), BF16, reason="sw_power_cap")
    assert _verdict(_judge([slowed]), BF16).current_values == ()
    assert _verdict(_judge([capped]), BF16).current_values != ()


def test_a_window_throttled_by_heat_disturbs_the_recorded_current_run():
    current = h200_current()
    bench = next(b for b in current["benchmarks"] if b["fullname"] == BF16)
    bench["extra_info"]["telemetry"]["throttle_reasons"] = ["sw_power_cap", "hw_thermal_slowdown"]
    result = _judge([current])
    assert _verdict(result, BF16).current_values == ()
    assert any("rounds 1-20 of 20 (one telemetry window) throttled (hw_thermal_slowdown) at 1624 MHz" in note
               for note in result.notes)


def test_a_clock_far_below_the_baselines_without_the_power_cap_disturbs_and_with_it_does_not():
    current = h200_current()
    bench = next(b for b in current["benchmarks"] if b["fullname"] == BF16)
    window = bench["extra_info"]["telemetry"]
    assert window["throttle_reasons"] == ["sw_power_cap"] and window["clock_mhz_mean"] < 1980 * 0.95  # as recorded
    assert _verdict(_judge([copy.deepcopy(current)]), BF16).current_values != ()
    window["throttle_reasons"] = []  # the same clock with no reason the device gives: a locked or failing clock
    result = _judge([current])
    assert _verdict(result, BF16).current_values == ()
    assert any("outside the baseline runs' 1980-1980 MHz" in note for note in result.notes)


def test_another_process_on_the_gpu_during_the_rounds_disturbs_them():
    current = h200_current()
    bench = next(b for b in current["benchmarks"] if b["fullname"] == FP16)
    bench["extra_info"]["telemetry"]["tags"] = ["busy: other processes hold 12 GiB on the device"]
    result = _judge([current])
    assert _verdict(result, FP16).current_values == () and _verdict(result, BF16).current_values != ()
    assert any("other processes hold 12 GiB on the device" in note for note in result.notes)


def _with_settings(document, **settings):
    document["accounting_gate"]["before"]["settings"] = {"power_limit_w": 700.0, "applications_sm_clock_mhz": 1980,
                                                          "applications_memory_clock_mhz": 3201, **settings}
    return document


@pytest.mark.parametrize("change, words", [
    ({"power_limit_w": 500.0}, "power limit 700 W in the baseline, 500 W here"),
    ({"applications_sm_clock_mhz": 1500}, "application SM clock 1980 MHz in the baseline, 1500 MHz here"),
])
def test_runs_under_another_power_limit_or_application_clock_are_not_compared_and_it_says_why(change, words):
    baselines = [parse_run(_with_settings(h200_document(path)), str(path)) for path in h200_baseline_files()]
    result = _judge([_with_settings(h200_current(), **change)], baselines=baselines)
    for verdict in result.verdicts:
        assert verdict.decision is None and words in verdict.reason
    same = _judge([_with_settings(h200_current())], baselines=baselines)
    assert all(verdict.comparison is not None for verdict in same.verdicts)
    one_other = [baselines[0], parse_run(_with_settings(h200_document(h200_baseline_files()[1]), **change), "x.json")]
    mixed = _judge([_with_settings(h200_current())], baselines=one_other)
    assert any(note.startswith("baseline run x.json not compared: taken under other settings") for note in mixed.notes)
    assert all(len(verdict.baseline_values) == 1 for verdict in mixed.verdicts)


def test_gate_save_says_nothing_of_the_recorded_runs_and_names_rounds_it_will_leave_out():
    assert [saved_run_lines(run) for run in _baselines()] == [[], []]  # no warm-up recorded, nothing disturbed
    throttled = parse_run(_throttled_in_the_middle(h200_document(h200_baseline_files()[1]), BF16), "0003_x.json")
    (line,) = saved_run_lines(throttled)
    assert line == (f"{BF16}: rounds 8-12 of 20 throttled (hw_thermal_slowdown) at 1440 MHz, 690 W; "
                    "it will be left out")


def test_baseline_runs_throttled_in_their_rounds_are_left_out_and_a_benchmark_without_any_is_inconclusive():
    baselines = [parse_run(_throttled_in_the_middle(h200_document(path), BF16), str(path))
                 for path in h200_baseline_files()]
    result = _judge([h200_current()], baselines=baselines)
    bf16, fp16 = _verdict(result, BF16), _verdict(result, FP16)
    assert bf16.decision is Decision.INCONCLUSIVE and bf16.baseline_values == ()
    assert bf16.reason == "re-measure: every baseline run was measured on a disturbed machine"
    assert sum(note.startswith(f"{BF16}: baseline run ") for note in result.notes) == 2
    assert len(fp16.baseline_values) == 2  # the same runs' other benchmark is a baseline as ever
