"""accounting.acceptance.gpu_checks on a fake device, and what the summary makes of their record (no GPU here).

The fake device runs a product in ``per_call_s`` at full clock; between calls timed one by one (a spin, events, a
synchronize) it idles, and a duty-cycled device stays at its boost clock where back-to-back work is capped: the
fake's products run ``capped`` times slower while more than ``busy_share`` of recent device time was busy. That is
the recorded H200's behaviour in kind (792.6 TFLOP/s call by call, 684-689 back to back), so the check's arithmetic
and its ratios are seen to come out of the timings, not from constants.
"""

import json
from pathlib import Path

import pytest
import torch

from accounting.acceptance.expected import AGREEMENT, expected_headline
from accounting.acceptance.figures import anchor_step_figures, gpu_check_figures, sweep_row_figures
from accounting.acceptance.gpu_checks import (
    HOT_ROUNDS,
    POWER_CAP,
    hot_rounds,
    run_gpu_checks,
    share_with,
    sustained_windows,
)
from accounting.acceptance.summary import gpu_checks, render
from accounting.errors import AccountingError
from accounting.telemetry.readings import Reading
from accounting.timing import BackToBack, Timing
from tests.test_acceptance_clock import FakeDevice

H200_RUN = Path(__file__).resolve().parent / "data" / "hosts" / "nvidia-h200"
FLOPS = 2 * 4608 * 6208 * 5632


class CappedDevice(FakeDevice):
    """A :class:`FakeDevice` whose products slow by ``capped`` when the device was busy back to back."""

    def __init__(self, per_call_s, capped=1.16, launch_s=1e-5, sync_s=2e-5):
        super().__init__(per_call_s=per_call_s, launch_s=launch_s, sync_s=sync_s)
        self.full_s, self.capped = per_call_s, capped

    def call(self):
        idle = self.host_time + self.launch_s > self.device_time  # the device had drained: the limiter eased
        self.per_call_s = self.full_s if idle else self.full_s * self.capped
        super().call()


def _time_fn_style(device, calls=50):
    """Call by call as time_fn does: synchronize, events around one product, wait for it; the median call."""
    samples = []
    for _ in range(calls):
        device.synchronize()
        start = device.record()
        device.call()
        end = device.record()
        device.synchronize()
        samples.append(device.elapsed(start, end))
    return Timing.from_samples(samples, flops=FLOPS, device="cpu")


def test_sustained_windows_soak_then_take_turns_and_give_the_ratio_to_one_event_pair():
    device = CappedDevice(per_call_s=FLOPS / 826e12)  # the recorded burst figure at the boost clock
    record = sustained_windows(device, device.call, flops=FLOPS, package_time=lambda: _time_fn_style(device),
                               soak_s=0.05, window_s=0.02, pairs=3)
    assert [w["how"] for w in record["windows"]] == ["time_fn", "one_event_pair"] * 3
    call_by_call = record["median_tflops"]["time_fn"]
    back_to_back = record["median_tflops"]["one_event_pair"]
    # each call alone, after the device drained: its launch and the product at the full clock between the events
    assert call_by_call == pytest.approx(FLOPS / (device.full_s + device.launch_s) / 1e12)
    assert back_to_back == pytest.approx(826 / 1.16, rel=1e-2)  # capped, but for the first call after a launch
    assert call_by_call / back_to_back > 1.1
    assert record["time_fn_over_one_event_pair"] == pytest.approx(call_by_call / back_to_back)
    assert record["back_to_back_over_one_event_pair"] is None
    # the one-event-pair windows are sized from the soak: at least window_s of device time each
    assert all(w["seconds"] >= 0.02 for w in record["windows"] if w["how"] == "one_event_pair")
    assert record["soak"]["seconds"] >= 0.05


def test_the_package_s_back_to_back_window_takes_its_turn_and_its_ratio_is_reported():
    device = CappedDevice(per_call_s=1e-3)
    made = []

    def back_to_back():
        made.append(device.log.count("call"))
        return BackToBack(calls=10, seconds=0.0125, chunks=((10, 0.0125),), flops=FLOPS)

    record = sustained_windows(device, device.call, flops=FLOPS, package_time=lambda: _time_fn_style(device, 5),
                               package_back_to_back=back_to_back, soak_s=0.01, window_s=0.01, pairs=2)
    assert [w["how"] for w in record["windows"]] == ["time_fn", "back_to_back", "one_event_pair"] * 2
    assert len(made) == 2 and made[0] < made[1]
    assert record["median_tflops"]["back_to_back"] == pytest.approx(FLOPS * 10 / 0.0125 / 1e12)
    assert record["back_to_back_over_one_event_pair"] == pytest.approx(
        record["median_tflops"]["back_to_back"] / record["median_tflops"]["one_event_pair"])


def test_each_window_keeps_its_telemetry_and_the_figures_show_the_clock_beside_the_figure():
    device = CappedDevice(per_call_s=FLOPS / 826e12)

    class Window:
        clocks = iter(range(1400, 2000, 5))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            clock = float(next(self.clocks))
            self.summary = {"clock_mhz_min": clock, "clock_mhz_median": clock + 1, "clock_mhz_max": clock + 2,
                            "power_w_median": 690.0, "throttle_reasons": [POWER_CAP]}

    record = sustained_windows(device, device.call, flops=FLOPS, package_time=lambda: _time_fn_style(device),
                               window=Window, soak_s=0.02, window_s=0.01, pairs=3)
    assert record["soak"]["clock_mhz_min"] == 1400.0
    assert [w["clock_mhz_min"] for w in record["windows"]] == [1405.0, 1410.0, 1415.0, 1420.0, 1425.0, 1430.0]
    figures = gpu_check_figures({"gpu_checks": {"sustained_windows": {"dtype": "bfloat16", "shape": [4608, 6208, 5632],
                                                                      **record}}}, "NVIDIA H200", step="clock-check")
    by_name = {f.name: f for f in figures}
    loop = by_name["bfloat16 4608x6208x5632 after a soak, one event pair, back to back"]
    assert loop.note == "clock min/median/max 1420/1421/1422 MHz; 690 W; sw_power_cap"  # medians over its turns
    assert loop.expected == expected_headline("NVIDIA H200", "bfloat16", "sustained")  # mamf-finder's MSMF ± 5 %
    assert by_name["bfloat16 4608x6208x5632 after a soak, time_fn, call by call"].expected is None
    ratio = by_name["bfloat16 4608x6208x5632 after a soak: time_fn / one event pair"]
    assert ratio.value == pytest.approx(record["time_fn_over_one_event_pair"]) and ratio.expected is None


def test_the_recorded_h200_back_to_back_windows_are_in_range_and_its_time_fn_figure_is_not_judged():
    """The figures' verdicts, fed the recorded H200's facts: the 2-s windows (684-689) against mamf-finder's MSMF,
    the time_fn figure (792.6) without an expectation, the ratio beside them."""
    recorded = json.loads((H200_RUN / "sdpa-kernels-and-sustained-window.json").read_text())["sustained_windows"]
    windows = [{"how": "one_event_pair", "tflops": w["tflops"], "clock_mhz_min": w["clock_min"],
                "clock_mhz_median": w["clock_median"], "clock_mhz_max": w["clock_max"]} for w in recorded[1:]]
    loop = sorted(w["tflops"] for w in windows)[1]
    record = {"dtype": "bfloat16", "shape": [4608, 6208, 5632], "windows": windows,
              "median_tflops": {"time_fn": 792.6, "one_event_pair": loop},
              "time_fn_over_one_event_pair": 792.6 / loop, "back_to_back_over_one_event_pair": None}
    verdicts = {f.name.split(", ", 1)[-1]: f.verdict for f in gpu_check_figures({"gpu_checks": {
        "sustained_windows": record}}, "NVIDIA H200", step="clock-check")}
    assert verdicts == {"one event pair, back to back": "in range", "time_fn, call by call": "no expectation",
                        "bfloat16 4608x6208x5632 after a soak: time_fn / one event pair": "no expectation"}


def test_hot_rounds_read_each_round_while_it_runs_and_after_its_synchronize():
    device = FakeDevice(per_call_s=1.4e-3)
    readings = iter([Reading(0.0, clock_mhz=1455.0, power_w=690.0, throttle_reasons=(POWER_CAP,)),  # during
                     Reading(0.0, clock_mhz=1980.0, power_w=250.0, throttle_reasons=())] * 3)  # after the sync
    order = []

    def read():
        order.append(device.log[-1])
        return next(readings)

    record = hot_rounds(device, device.call, read, rounds=3)
    assert order == ["call", "sync"] * 3  # the first reading with the round queued, the second after it finished
    assert record["during"]["power_cap_share"] == 1.0 and record["after_sync"]["power_cap_share"] == 0.0
    assert record["during"]["clock_mhz_median"] == 1455.0 and record["after_sync"]["clock_mhz_median"] == 1980.0
    assert record["after_sync"]["power_w_median"] == 250.0 and len(record["after_sync"]["per_round"]) == 3
    figures = gpu_check_figures({"gpu_checks": {"hot_rounds": {"dtype": "bfloat16", "shape": [8192] * 3, **record}}},
                                "NVIDIA H200", step="clock-check")
    assert [(f.value, f.note.split(";")[0]) for f in figures] == [(1.0, "3 rounds"), (0.0, "3 rounds")]
    assert HOT_ROUNDS == 200


def test_a_check_not_made_is_a_figure_without_a_value_that_says_why():
    figures = gpu_check_figures({"gpu_checks": {"sustained_windows": {"error": "OutOfMemoryError: CUDA out of memory"},
                                                "hot_rounds": {"skipped": "no telemetry: pynvml is not installed"}}},
                                "NVIDIA H200", step="clock-check")
    assert [(f.value, f.verdict, f.note) for f in figures] == [
        (None, "no expectation", "not measured: OutOfMemoryError: CUDA out of memory"),
        (None, "no expectation", "not measured: no telemetry: pynvml is not installed")]
    assert gpu_check_figures({}, "NVIDIA H200", step="clock-check") == []


def test_shares_count_rounds_with_the_reason_and_bad_counts_are_refused():
    assert share_with([(POWER_CAP,), ()], POWER_CAP) == 0.5 and share_with([], POWER_CAP) is None
    with pytest.raises(AccountingError, match="rounds must be positive, got 0"):
        hot_rounds(FakeDevice(), lambda: None, lambda: Reading(0.0), rounds=0)
    with pytest.raises(AccountingError, match="pairs must be positive"):
        sustained_windows(FakeDevice(), lambda: None, flops=FLOPS, package_time=None, pairs=0)
    assert AGREEMENT[0] < 1 < AGREEMENT[1]


def test_the_report_s_fastest_sweep_rows_stand_beside_their_clock():
    """The recorded report's rows carry one clock each: the summary says so; a row with min/median/max shows them."""
    report = json.loads((H200_RUN / "report.json").read_text())
    figures = sweep_row_figures(report, step="report")
    bf16 = [f for f in figures if f.name.startswith("bfloat16 ")]
    rows = sorted((r for r in report["dtypes"]["bfloat16"]["measurements"]), key=lambda r: r["tflops"], reverse=True)
    assert [f.value for f in bf16] == [r["tflops"] for r in rows[:3]]
    assert bf16[0].note.startswith(f"clock {rows[0]['clock_mhz']:.0f} MHz (the row gives one clock")
    row = dict(rows[0], clock_mhz_min=1392.0, clock_mhz_median=1400.0, clock_mhz_max=1900.0, tags=[])
    [figure] = sweep_row_figures({"dtypes": {"bfloat16": {"measurements": [row]}}}, step="report")
    assert figure.note == "clock min/median/max 1392/1400/1900 MHz"


def test_the_step_runs_the_clock_check_then_adds_the_gpu_checks_to_its_json(tmp_path, monkeypatch):
    from accounting.acceptance import gpu_checks

    path = tmp_path / "clock-check.json"
    if not torch.cuda.is_available():
        assert gpu_checks.main([str(path)]) == 2
        assert not path.exists()  # no GPU: the clock check refused, nothing else ran

    def clock_check_main(argv):
        path.write_text(json.dumps({"checks": [], "argv": argv}))
        return 1  # a disagreement: the step's status stays it

    monkeypatch.setattr(gpu_checks.clock_check, "main", clock_check_main)
    monkeypatch.setattr(gpu_checks, "run_gpu_checks", lambda device: {"hot_rounds": {"skipped": f"on {device}"}})
    assert gpu_checks.main(["--device", "cuda:1", str(path)]) == 1
    document = json.loads(path.read_text())
    assert document["argv"] == ["--device", "cuda:1", str(path)]
    assert document["gpu_checks"] == {"hot_rounds": {"skipped": "on cuda:1"}}


def test_the_anchor_s_steps_give_their_kernel_and_alloc_retries_and_an_older_document_gives_no_value():
    document = {"steps": {"package": {"attention_kernel": "cudnn", "alloc_retries": [0, 0, 0], "alloc_retries_total": 0},
                          "hugging_face": {"attention_kernel": "cudnn", "alloc_retries": [0, 2, None],
                                           "alloc_retries_total": None}}}
    figures = anchor_step_figures(document, step="model-anchor")
    assert [(f.name, f.value, f.note) for f in figures] == [
        ("Hugging Face step: num_alloc_retries in its timed steps", None, "attention cudnn (0, 2, ?)"),
        ("package step: num_alloc_retries in its timed steps", 0, "attention cudnn (0, 0, 0)")]
    older = anchor_step_figures({"attention_kernels": {"hugging_face": "flash"}, "steps": {"hugging_face": {}}},
                                step="model-anchor")
    assert [(f.value, f.note) for f in older] == [(None, "attention flash"), (None, "attention not recorded")]
    assert anchor_step_figures({"skipped": "needs transformers"}, step="model-anchor") == []


def test_the_summary_says_which_gpu_check_was_made_skipped_or_not_made_and_why():
    steps = [{"name": "clock-check", "status": "passed"}, {"name": "report", "status": "failed", "reason": "exit 4"},
             {"name": "model-anchor", "status": "skipped", "reason": "needs transformers, not installed here"}]
    rounds = {"dtype": "bfloat16", "shape": [8192] * 3, "skipped": "no telemetry: pynvml is not installed"}
    sustained = {"dtype": "bfloat16", "shape": [4608, 6208, 5632], "median_tflops": {"time_fn": 790.0,
                 "one_event_pair": 686.0}, "time_fn_over_one_event_pair": 790 / 686, "windows": []}
    figures = [f.as_dict() for f in gpu_check_figures({"gpu_checks": {"sustained_windows": sustained,
                                                                      "hot_rounds": rounds}}, None, step="clock-check")]
    checks = {c["step"] + ":" + c["check"].split()[0]: (c["status"], c["reason"]) for c in gpu_checks(steps, figures)}
    assert checks == {
        "clock-check:time_fn": ("made", "3 figures"),
        "clock-check:each": ("not made", "not measured: no telemetry: pynvml is not installed"),
        "report:the": ("not made", "report failed and gave no such figure: exit 4"),
        "model-anchor:Hugging": ("skipped", "needs transformers, not installed here")}
    text = render({"steps": [dict(s, seconds=1.0, budget_s=2.0) for s in steps], "figures": figures})
    assert "| each round's throttle reasons after its synchronize, over 200 hot rounds | clock-check | not made |" in text


class SimulatedOps:
    """``time_loop``'s device seam on the simulated H200: its synchronize, virtual clock and events."""

    def __init__(self, gpu):
        self.gpu = gpu

    def synchronize(self):
        self.gpu.synchronize()

    def now(self):
        return self.gpu.now()

    def record(self):
        event = self.gpu.event()
        event.record()
        return event

    def elapsed(self, start, end):
        end.synchronize()
        return start.elapsed_time(end) / 1e3


def test_on_the_simulated_h200_time_fn_reads_the_burst_and_one_event_pair_the_recorded_2_s_windows(monkeypatch):
    """The step's checks end to end on a device calibrated on the recorded H200 (792.6 TFLOP/s call by call at
    1890 MHz, 684-689 back to back at the capped 1455 MHz): the check tells the two apart as the real GPU is expected
    to, the package's back-to-back window agrees with the independent loop, and the hot rounds are read capped."""
    from tests.support.simulated_gpu import SimulatedH200

    gpu = SimulatedH200().install(monkeypatch)  # pynvml, the event clock time_fn and time_back_to_back take
    found = run_gpu_checks("cuda:0", ops=SimulatedOps(gpu), case_factory=gpu.case_factory, sampler=gpu.sampler)
    record = found["sustained_windows"]
    medians = record["median_tflops"]
    assert medians["one_event_pair"] == pytest.approx(686.6, rel=0.02)  # the recorded 2-s windows' middle
    assert medians["time_fn"] == pytest.approx(792.6, rel=0.03)  # the recorded time_fn sweep row
    assert record["back_to_back_over_one_event_pair"] == pytest.approx(1.0, abs=0.02)
    loop = [w for w in record["windows"] if w["how"] == "one_event_pair"]
    assert all(w["clock_mhz_median"] == pytest.approx(1455, rel=0.03) for w in loop)
    assert all("sw_power_cap" in w["throttle_reasons"] for w in loop)
    rounds = found["hot_rounds"]
    assert rounds["rounds"] == HOT_ROUNDS and rounds["shape"] == [8192] * 3
    assert rounds["during"]["power_cap_share"] == 1.0  # capped while each round runs


def test_each_headline_figure_stands_beside_its_window_s_clock_min_median_max():
    """The recorded report's bf16 sustained window read 1980 MHz at every reading (its min and max; that record has
    no median): the figure's note says so."""
    from accounting.acceptance.figures import report_figures

    report = json.loads((H200_RUN / "report.json").read_text())
    telemetry = report["dtypes"]["bfloat16"]["headlines"]["sustained"]["telemetry"]
    [figure] = [f for f in report_figures(report, "NVIDIA H200", step="report") if f.name == "bfloat16 sustained"]
    assert f"clock min/median/max {telemetry['clock_mhz_min']:.0f}/?/{telemetry['clock_mhz_max']:.0f} MHz" in figure.note
