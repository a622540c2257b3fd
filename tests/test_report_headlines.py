"""Burst and sustained headlines, validity tags and energy: on a fake device, through a fake NVML, and for real."""

import json
import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from accounting.hardware.cpu_clock import vector_clock_supported
from accounting.report import headlines as phase
from accounting.report import measure as measuring
from accounting.report import run
from accounting.report import thermal_soak
from accounting.report.headlines import Candidate, Window, measure_headlines, soak, sustained
from accounting.report.render import render
from accounting.report.results import BandwidthMeasurement, dtype_section
from accounting.report.sweep import MatmulMeasurement
from accounting.telemetry.sampler import snapshot
from accounting.telemetry.validity import window_extra_info
from accounting.timing import BackToBack, Timing
from tests.support.fake_nvml import SW_POWER_CAP, FakeGpu, FakeNvml
from tests.support.simulated_telemetry import SimulatedSampler

ROOT = Path(__file__).resolve().parents[1]


class FakeDevice:
    """A device whose clock settles from ``boost`` to ``settled`` MHz with time constant ``tau`` seconds.

    A call's time scales with FLOPs over ``rate × clock / boost``; ``jitter[shape]`` spreads its repetitions.
    """

    def __init__(self, *, boost=1980.0, settled=1500.0, tau=3.0, rate=1e12, jitter=None, seed=0, power_w=700.0):
        self.now = 0.0
        self.efficiency = {}  # shape: share of ``rate`` it reaches (1 where not given)
        self.boost, self.settled, self.tau, self.rate = boost, settled, tau, rate
        self.jitter = jitter or {}
        self.random = random.Random(seed)
        self.power_w = power_w
        self.windows = []

    def clock_mhz(self) -> float:
        return round(self.settled + (self.boost - self.settled) * math.exp(-self.now / self.tau))

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds

    def repeat(self, dtype, shape, repeats, *, seconds=None):
        before = self.clock_mhz()
        samples = []
        for _ in range(repeats):
            if seconds is not None and sum(samples) >= seconds:
                break
            m, k, n = shape
            call = 2 * m * k * n / (self.rate * self.efficiency.get(shape, 1.0) * self.clock_mhz() / self.boost)
            call *= 1 + self.jitter.get(shape, 0.0) * self.random.uniform(-1, 1)
            self.now += call
            samples.append(call)
        after = self.clock_mhz()
        duration = sum(samples)
        telemetry = {"clock_mhz_mean": (before + after) / 2, "clock_mhz_max": max(before, after),
                     "power_w_mean": self.power_w, "power_w_max": self.power_w,
                     "energy_j": self.power_w * duration if duration >= 1 else None, "energy_source": "counter",
                     "throttle_reasons": [], "unavailable": {} if duration >= 1 else {"energy_j": "short window"}}
        self.windows.append((shape, telemetry))
        return Window(tuple(samples), telemetry)


def candidate(size, device: FakeDevice):
    flops = 2 * size**3
    return Candidate((size, size, size), flops, flops / device.rate)


def test_the_soak_ends_within_20_s_once_a_settling_clock_is_flat():
    device = FakeDevice(tau=2.0)
    result = soak(device, "bf16", candidate(4096, device), max_s=phase.SOAK_MAX_S)
    assert result.ended == "flat"
    assert result.seconds < phase.SOAK_MAX_S
    assert thermal_soak.clock_is_flat(result.clocks) and not thermal_soak.clock_is_flat(result.clocks[:-1])
    assert result.saturated_clock_mhz == pytest.approx(sum(result.clocks[-3:]) / 3)
    assert result.saturated_clock_mhz == pytest.approx(device.settled, abs=2 * thermal_soak.FLAT_MHZ)


def test_a_clock_that_never_settles_ends_the_soak_at_its_limit():
    device = FakeDevice()
    device.clock_mhz = lambda: 1500 + 20 * (len(device.windows) % 2)  # swings window to window
    result = soak(device, "bf16", candidate(4096, device), max_s=5.0)
    assert result.ended == "time limit"
    assert 5.0 - 2 * phase.SOAK_CHUNK_S <= result.seconds <= 5.0 + phase.SOAK_CHUNK_S  # planned by predicted times


def test_the_sustained_window_runs_back_to_back_for_seconds_and_its_figure_is_work_over_time():
    device = FakeDevice(tau=1e-3)
    shape = candidate(4096, device)
    headline, windows = sustained(device, "bf16", [shape], deadline=1e9)
    window = windows[-1][0]
    assert headline.published and headline.reason is None
    # planned at the boost clock's speed, calls slower than planned (the settled clock) still stop at the target
    assert phase.SUSTAINED_TARGET_S <= sum(window.samples) < phase.SUSTAINED_TARGET_S + 2 * shape.seconds
    assert headline.seconds == pytest.approx(sum(window.samples))
    assert headline.flops_per_s == pytest.approx(shape.flops * len(window.samples) / sum(window.samples))
    assert headline.j_per_tflop == pytest.approx(window.telemetry["energy_j"] / (shape.flops * len(window.samples) / 1e12))
    assert headline.energy_unavailable is None


def test_a_window_whose_calls_run_five_times_faster_than_planned_still_lasts_its_seconds():
    device = FakeDevice(tau=1e-3)
    shape = candidate(4096, device)
    planned_slow = Candidate(shape.shape, shape.flops, 5 * shape.seconds)  # a noisy sweep saw it five times slower
    headline, windows = sustained(device, "bf16", [planned_slow], deadline=1e9)
    assert headline.published and headline.seconds >= phase.SUSTAINED_TARGET_S


def test_the_fastest_candidate_as_timed_now_is_sustained_not_the_sweeps_first():
    device = FakeDevice(tau=1e-3)
    slow, fast = candidate(1024, device), candidate(4096, device)  # the sweep (wrongly) listed the slow one first
    slow = Candidate(slow.shape, slow.flops, slow.seconds / 10)
    device.efficiency = {slow.shape: 0.5}
    headline, windows = sustained(device, "bf16", [slow, fast], deadline=1e9)
    assert [window[1].shape for window in windows[:2]] == [slow.shape, fast.shape]
    assert headline.shape == fast.shape


def test_a_jittery_window_is_published_but_tagged_unsteady():
    device = FakeDevice(tau=1e-3)
    shape = candidate(4096, device)
    device.jitter = {shape.shape: 0.3}
    found = measure_headlines(device, {"bf16": [shape]}, budget_s=30.0)
    steady = found["headlines"]["bf16"]["sustained"]
    assert steady.published and steady.spreads[0] > phase.UNSTEADY_SPREAD
    assert [tag for tag in steady.tags if tag.startswith("unsteady: the window's repetitions spread")]


def test_a_budget_too_short_for_a_one_second_window_withholds_the_figure_and_says_what_would_reach_it():
    device = FakeDevice()
    headline, windows = sustained(device, "bf16", [candidate(4096, device)], deadline=0.5)
    assert not headline.published and windows == []
    assert headline.reason == "the budget left 0.45 s for the window, under the 1 s a sustained figure needs"
    assert headline.needs_s == pytest.approx(1.0 - 0.45)
    found = measure_headlines(FakeDevice(), {"bf16": [candidate(4096, device)]}, budget_s=1.0,
                              budget_advice=lambda extra: f"--budget {60 + extra:.1f} would reach it")
    steady = found["headlines"]["bf16"]["sustained"]
    assert not steady.published and steady.reason.endswith(f"--budget {60 + steady.needs_s:.1f} would reach it")


@pytest.mark.parametrize("seed", range(10))
def test_burst_is_never_below_sustained(seed):
    device = FakeDevice(seed=seed, tau=1.5)
    shapes = [candidate(size, device) for size in (4096, 3072, 2048)]
    device.jitter = {shape.shape: 0.01 * (seed % 4) for shape in shapes}
    found = measure_headlines(device, {"bf16": shapes}, budget_s=30.0)
    burst, steady = found["headlines"]["bf16"]["burst"], found["headlines"]["bf16"]["sustained"]
    assert steady.published
    assert burst.flops_per_s >= steady.flops_per_s
    assert found["run_max_clock_mhz"] == max(telemetry["clock_mhz_max"] for _, telemetry in device.windows)


def test_a_burst_below_097_of_the_highest_clock_is_withheld_and_boosting_is_tagged():
    device = FakeDevice(tau=1.5)
    shapes = [candidate(4096, device)]
    high = {"clock_mhz_max": 2100.0}  # a sweep window saw a higher clock than the burst ran at
    found = measure_headlines(device, {"bf16": shapes}, budget_s=30.0, sweep_telemetry=[high])
    burst = found["headlines"]["bf16"]["burst"]
    assert not burst.published
    assert burst.reason.startswith("withheld: its clock ") and "0.97 × the run's highest 2100 MHz" in burst.reason
    # a boosting sustained candidate: its window ran above 1.04 × the settled clock
    device = FakeDevice(tau=1e9)  # never settles below boost: the soak's "saturated" clock is the boost clock...
    found = measure_headlines(device, {"bf16": shapes}, budget_s=30.0)
    assert not any(tag.startswith("boosting") for tag in found["headlines"]["bf16"]["sustained"].tags)
    headline = phase._tagged(found["headlines"]["bf16"]["sustained"], saturated_clock=1800.0)
    assert [tag for tag in headline.tags if tag.startswith("boosting")] == ["boosting: 1980 MHz > 1.04 × the saturated 1800 MHz"]


def test_a_burst_found_in_a_back_to_back_window_carries_that_windows_calls_and_time():
    """A back-to-back window's samples are per-call times of its stretches between events, not its calls: a burst
    picked from one says how many calls ran and for how long, from the window itself."""
    shape = Candidate((1024, 1024, 1024), 2 * 1024**3, 1e-3)
    telemetry = {"clock_mhz_max": 1980.0, "throttle_reasons": []}
    alone = Window((1.2e-3,) * 5, telemetry)
    back_to_back = Window((1.0e-3, 1.1e-3, 1.05e-3), telemetry, calls=1900, seconds=2.0)
    burst = phase._burst_headline("bf16", [(alone, shape), (back_to_back, shape)], 1980.0, "cuda:0")
    assert burst.flops_per_s == pytest.approx(shape.flops / 1.0e-3)
    assert (burst.repeats, burst.seconds) == (1900, 2.0)


def test_a_verdict_from_a_tagged_number_names_the_tag():
    throttled = {"throttle_reasons": ["hw_slowdown"], "clock_mhz_mean": 900.0}
    done = MatmulMeasurement("bfloat16", 1024, 1024, 1024, 2 * 1024**3, 1e-3, 0.0, 5, telemetry=throttled)
    section = dtype_section("bfloat16", [done], peak=8e12, floor=0.5, bandwidth=None, spec_bandwidth=None)
    assert section["verdict"]["status"] == "below floor"
    assert section["verdict"]["tags"] == ["throttled: hw_slowdown"]
    assert section["verdict"]["message"].endswith("— from a tagged number (throttled: hw_slowdown)")
    clean = dtype_section("bfloat16", [MatmulMeasurement("bfloat16", 1024, 1024, 1024, 2 * 1024**3, 1e-3, 0.0, 5)],
                          peak=4e12, floor=0.5, bandwidth=None, spec_bandwidth=None)
    assert clean["verdict"]["tags"] == [] and "tagged" not in clean["verdict"]["message"]


def test_benchmark_extra_info_from_a_short_window_flags_energy():
    info = window_extra_info({"energy_j": None, "unavailable": {"energy_j": "window of 40.0 ms is shorter"},
                              "throttle_reasons": []}, work_flops=10**12)
    assert info["tflop_per_j"] is None and info["energy_unavailable"] == "window of 40.0 ms is shorter"
    assert info["tags"] == []


# ---- the whole report, timed by a fake, read through a fake NVML ------------------------------------------


class ThrottlingNvml(FakeNvml):
    """Throttles (sw_power_cap, lower clock) from its ``throttle_from``-th window on."""

    def __init__(self, *, throttle_from=None, sibling_utilisation=0):
        super().__init__([FakeGpu(), FakeGpu(utilisation_pct=sibling_utilisation)])
        self.throttle_from = throttle_from

    def nvmlInit(self):  # noqa: N802 - pynvml's name
        super().nvmlInit()
        if self.throttle_from is not None and self.initialised >= self.throttle_from:
            self.gpus[0].throttle_mask, self.gpus[0].clock_mhz = SW_POWER_CAP, 1410.0


class SimulatedClock:
    """A clock that moves only by the time the fake matmuls 'take' (plus 0.1 ms a reading).

    The report's budget is then spent the same way on a loaded host as on an idle one: with the
    real clock, a busy machine (mutation testing's workers, CI neighbours) used up the 0.3 s budget in
    Python overhead before the sustained phase saw the throttle, and the test failed by chance.
    """

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        self.now += 1e-4
        return self.now

    def advance(self, seconds):
        self.now += seconds


@pytest.fixture
def fake_timing(monkeypatch):
    """Matmuls and copies that take no real time: each call 'takes' FLOPs / 0.1 TFLOP/s, larger shapes a bit
    faster, on the :class:`SimulatedClock` this fixture returns."""
    simulated = SimulatedClock()

    class Case:
        def __init__(self, m, k, n):
            self.flops, self.operands, self.fn = 2 * m * k * n, (), lambda: None

    def fake_time_fn(fn, *, device, warmup, repeats, min_time_s, max_repeats, flops, flush_cache, clock=None):
        per_call = flops / (1e11 * (1 + math.log2(flops) / 100))
        count = max(repeats, min(max_repeats, math.ceil(min_time_s / per_call)))  # time_fn's rule
        samples = [per_call * (1 + 0.001 * (i % 3)) for i in range(count)]
        simulated.advance(sum(samples))
        return Timing.from_samples(samples, flops=flops)

    def fake_back_to_back(fn, *, seconds, device, max_calls, flops):
        per_call = flops / (1e11 * (1 + math.log2(flops) / 100))
        count = min(max_calls, max(1, math.ceil(seconds / per_call)))
        simulated.advance(count * per_call)
        return BackToBack(calls=count, seconds=count * per_call, chunks=((count, count * per_call),), flops=flops)

    monkeypatch.setattr(measuring, "matmul_case", lambda dtype, m, k, n, device: Case(m, k, n))
    monkeypatch.setattr(measuring, "time_fn", fake_time_fn)
    monkeypatch.setattr(measuring, "time_back_to_back", fake_back_to_back)
    monkeypatch.setattr(measuring, "flops_mismatch", lambda flops, counted: None)  # the fake products compute nothing
    monkeypatch.setattr(run.measuring, "measure_bandwidth", lambda info: BandwidthMeasurement(2**29, 0.01, 0.0, 10))
    monkeypatch.setattr(measuring.MatmulTimer, "sleep", lambda self, seconds: simulated.advance(seconds))
    monkeypatch.setattr(measuring, "Sampler", lambda device, measure_clock: SimulatedSampler(device, simulated))
    return simulated


class NoProgress:
    def update(self, done_s, text):
        pass


REPORT_BUDGET_S = 12.0
"""Simulated seconds: enough for a one-second sustained window after the sweep and the soak."""


def fake_report(monkeypatch, nvml, clock) -> tuple[dict, str]:
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    plan = run.prepare(device="cpu", dtypes=["float32"], budget_s=REPORT_BUDGET_S)
    report = run.build_report(plan, progress=NoProgress(), started=clock(), clock=clock, telemetry="cuda:0",
                              check_results=False)  # the fake products compute nothing to check
    return report, render(report)


def test_a_gpu_that_throttles_mid_sweep_is_reported_throttled_with_the_reason(monkeypatch, fake_timing):
    report, text = fake_report(monkeypatch, ThrottlingNvml(throttle_from=3), fake_timing)
    section = report["dtypes"]["float32"]
    assert "throttled: sw_power_cap" in section["headlines"]["sustained"]["tags"]
    assert "throttled: sw_power_cap" in section["headlines"]["burst"]["tags"]
    rows = section["measurements"]
    assert rows[0]["tags"] == [] and rows[0]["clock_mhz"] == 1980.0  # before the throttle
    assert any("throttled: sw_power_cap" in row["tags"] for row in rows[2:])
    assert "throttled: sw_power_cap" in text
    if section["best"]["tags"] and section["verdict"]["healthy"] is not None:  # an above-peak verdict judges nothing
        assert "from a tagged number (throttled: sw_power_cap)" in section["verdict"]["message"]
    json.dumps(report, allow_nan=False)


def test_a_clean_gpu_gets_no_tag(monkeypatch, fake_timing):
    report, text = fake_report(monkeypatch, ThrottlingNvml(), fake_timing)
    section = report["dtypes"]["float32"]
    assert all(row["tags"] == [] for row in section["measurements"])
    assert section["headlines"]["burst"]["tags"] == [] and section["headlines"]["burst"]["published"]
    assert section["headlines"]["sustained"]["published"] and section["headlines"]["sustained"]["clock_mhz"] == 1980.0
    assert "throttled" not in text and "busy" not in text and "tagged" not in section["verdict"]["message"]
    assert report["telemetry"]["run_max_clock_mhz"] == 1980.0 and report["telemetry"]["run_max_power_w"] == 650.0


@pytest.mark.parametrize("utilisation, busy", [pytest.param(50, True, id="busy-sibling"),
                                               pytest.param(3, False, id="idle-sibling")])
def test_a_busy_sibling_tags_the_report_and_an_idle_one_does_not(monkeypatch, fake_timing, utilisation, busy):
    report, text = fake_report(monkeypatch, ThrottlingNvml(sibling_utilisation=utilisation), fake_timing)
    tag = f"busy: GPU 1: {utilisation}% utilised, 1.0 GiB used"
    assert (tag in report["dtypes"]["float32"]["headlines"]["burst"]["tags"]) is busy
    assert (tag in text) is busy


# ---- a real report on this CPU ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_cpu_report(tmp_path_factory):
    path = tmp_path_factory.mktemp("headlines") / "report.json"
    command = [sys.executable, "-m", "accounting", "report", "--device", "cpu", "--dtypes", "float32",
               "--budget", "12", "--quiet", "--json", str(path)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300,
                            env={**os.environ, "PYTHONWARNINGS": "error"})
    assert result.returncode == 0, result.stderr
    return json.loads(path.read_text()), result.stdout


@pytest.mark.slow  # the report runs as a process of its own
def test_a_real_cpu_report_carries_burst_and_sustained_each_with_a_clock(real_cpu_report):
    if snapshot("cpu", measure_clock=False).clock_source is None and not phase_clock_measurable():
        pytest.skip("this CPU shows no clock and it cannot be measured here")
    report, text = real_cpu_report
    figures = report["dtypes"]["float32"]["headlines"]
    burst, steady = figures["burst"], figures["sustained"]
    assert burst["clock_mhz"] > 100
    if not steady["published"]:  # a loaded 2-core VM may leave the window no time: it says what would reach it
        assert re.search(r"--budget \d+ would reach it$", steady["reason"]), steady["reason"]
        return
    assert steady["clock_mhz"] > 100 and steady["tflops"] > 0 and burst["flops_per_s"] >= steady["flops_per_s"]
    assert len(steady["spreads"]) == 1 and steady["seconds"] >= phase.SUSTAINED_MIN_S
    assert "saturation-unknown" in " ".join(steady["tags"]), "a CPU reports no power limit"
    assert "Burst and sustained" in text
    assert re.search(r"^\s+float32\s+sustained\s+[0-9.]+\s", text, re.MULTILINE)


def phase_clock_measurable() -> bool:
    return vector_clock_supported()


def test_a_lead_in_runs_before_the_window_where_the_budget_allows_and_not_where_it_does_not():
    device = FakeDevice(tau=1e-3)
    shape = candidate(1024, device)
    _headline, windows = sustained(device, "bf16", [shape], deadline=1e9)
    lead_in, window = windows[-2][0], windows[-1][0]
    assert phase.LEAD_IN_S <= sum(lead_in.samples) < phase.LEAD_IN_S + 2 * shape.seconds
    assert sum(window.samples) >= phase.SUSTAINED_TARGET_S
    tight = FakeDevice(tau=1e-3)
    headline, windows = sustained(tight, "bf16", [shape], deadline=1.1 + phase.WINDOW_OVERHEAD_S)
    assert len(windows) == 1 and headline.seconds >= phase.SUSTAINED_MIN_S


class GpuWindows(FakeDevice):
    """A GPU's windows: ``telemetry`` (NVML-like readings) merged into each window's."""

    def __init__(self, telemetry, **kwargs):
        super().__init__(tau=1e-3, **kwargs)
        self.gpu_telemetry = telemetry

    def repeat(self, dtype, shape, repeats, *, seconds=None):
        window = super().repeat(dtype, shape, repeats, seconds=seconds)
        samples = int(sum(window.samples) / 0.02) + 2
        return Window(window.samples, {**window.telemetry, "backend": "nvml", "samples": samples,
                                       **self.gpu_telemetry})


def test_a_gpu_window_that_is_not_saturated_or_still_settling_is_withheld_and_says_a_soak_may_reach_it():
    cool = GpuWindows({"power_w_median": 300.0, "power_limit_w": 700.0, "throttle_reasons": [],
                       "clock_mhz_median": 1980.0, "clock_mhz_early": 1980.0, "clock_mhz_late": 1980.0})
    found = measure_headlines(cool, {"bf16": [candidate(2048, cool)]}, budget_s=12.0)
    steady = found["headlines"]["bf16"]["sustained"]
    assert not steady.published
    assert steady.reason.startswith("withheld: not power-saturated: 300 W < 0.9 × the enforced limit 700 W")
    assert "a 20 s thermal soak may reach it" in steady.reason and "power-suspect" in " ".join(steady.tags)
    settling = GpuWindows({"power_w_median": 690.0, "power_limit_w": 700.0, "throttle_reasons": ["sw_power_cap"],
                           "clock_mhz_median": 1500.0, "clock_mhz_early": 1650.0, "clock_mhz_late": 1455.0})
    steady = measure_headlines(settling, {"bf16": [candidate(2048, settling)]}, budget_s=12.0)["headlines"]["bf16"][
        "sustained"]
    assert not steady.published and "the clock was still moving: 1650 MHz in the first half" in steady.reason
    saturated = GpuWindows({"power_w_median": 690.0, "power_limit_w": 700.0, "throttle_reasons": ["sw_power_cap"],
                            "clock_mhz_median": 1455.0, "clock_mhz_early": 1460.0, "clock_mhz_late": 1455.0})
    steady = measure_headlines(saturated, {"bf16": [candidate(2048, saturated)]}, budget_s=12.0)["headlines"]["bf16"][
        "sustained"]
    assert steady.published and steady.saturation == "power 690 W ≥ 0.9 × the enforced limit 700 W"
    assert steady.clock_mhz == 1455.0 and steady.power_w == 690.0
