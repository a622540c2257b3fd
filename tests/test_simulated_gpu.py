"""The simulated H200 (:mod:`tests.support.simulated_gpu`): first that it reproduces the recorded H200 facts it was
calibrated on, then the package's own measuring code run against it.

Truths: ``tests/data/hosts/nvidia-h200/`` — the four 2-s back-to-back windows of the report's sustained shape
(``sdpa-kernels-and-sustained-window.json``: 684.1–689.1 TFLOP/s, median clock 1455–1500 MHz, 685–691 W, software
power cap, limit 700 W), the ``time_fn`` sweep row of the same shape (``report-bf16-budget60.json``: 792.6 TFLOP/s,
1890 MHz), and mamf-finder's fp8 MSMF (``mamf-fp8.txt``: 1244.5 TFLOP/s at 1325 MHz).
"""

import statistics

import pytest

from accounting.hardware.devices import DeviceInfo
from accounting.report import headlines as phase
from accounting.report.headlines import Candidate, measure_headlines, sustained
from accounting.report.measure import MatmulTimer
from tests.support import h200_report_replay as recorded
from tests.support.simulated_gpu import SimulatedGpuSampler, SimulatedH200

SHAPE = (4608, 6208, 5632)
"""The report's sustained shape on the recorded H200 (the 2-s windows ran it)."""
FLOPS = 2 * SHAPE[0] * SHAPE[1] * SHAPE[2]
H200 = DeviceInfo("cuda", "NVIDIA H200", 0, 150_109_880_320, compute_capability=(9, 0), multiprocessors=132)


def recorded_windows():
    return recorded.sustained_windows()["sustained_windows"]


def sweep_row():
    """The budget-60 report's time_fn sweep row of the sustained shape."""
    rows = recorded.load("report-bf16-budget60.json")["dtypes"]["bfloat16"]["measurements"]
    return next(row for row in rows if (row["m"], row["k"], row["n"]) == SHAPE)


def within(value, low, high, rel):
    return low * (1 - rel) <= value <= high * (1 + rel)


@pytest.fixture
def gpu(monkeypatch):
    return SimulatedH200().install(monkeypatch)


def back_to_back(gpu, calls, flops=FLOPS, dtype="bfloat16"):
    """``calls`` products queued between one pair of events, sampled: ``(TFLOP/s, telemetry)`` (no package code)."""
    with gpu.sampler("cuda:0") as sampler:
        gpu.synchronize()
        start, end = gpu.event(), gpu.event()
        start.record()
        for _ in range(calls):
            gpu.product(flops, dtype)
        end.record()
        end.synchronize()
    return flops * calls / (start.elapsed_time(end) / 1e3) / 1e12, sampler.summary.to_dict()


# ---- calibration: the recorded facts, reproduced ------------------------------------------------------------------


def test_back_to_back_windows_read_as_the_recorded_2_s_windows(gpu):
    windows = recorded_windows()
    back_to_back(gpu, windows[0]["calls"])  # window 0 settled the clock; 1-3 ran settled
    for window in windows[1:]:
        tflops, telemetry = back_to_back(gpu, window["calls"])
        assert within(tflops, 684.1, 689.1, 0.02)
        assert telemetry["clock_mhz_median"] == pytest.approx(1455, rel=0.03)
        assert within(telemetry["energy_j"] / telemetry["duration_s"], 685, 691, 0.03)
        assert within(telemetry["power_w_median"], 685, 691, 0.03)
        assert telemetry["throttle_reasons"] == ["sw_power_cap"]
        assert telemetry["power_limit_w"] == recorded.sustained_windows()["power_limit_w"]
        assert telemetry["duration_s"] == pytest.approx(window["seconds"], rel=0.03)


def test_time_fn_timing_reads_as_the_recorded_sweep_row(gpu):
    """The sweep's own timing (``time_fn``: a spin and a synchronize around each call) of the same shape: the limiter
    averages, so the clock stays near 1890 MHz and the figure near 792.6 TFLOP/s."""
    row = sweep_row()
    measurement = MatmulTimer(H200, target_s=0.2, case_factory=gpu.case_factory, telemetry="cuda:0")("bfloat16", *SHAPE)
    assert measurement.repeats == row["repeats"]
    assert FLOPS / measurement.seconds / 1e12 == pytest.approx(row["tflops"], rel=0.03)
    assert measurement.telemetry["clock_mhz_median"] == pytest.approx(row["clock_mhz"], rel=0.03)
    # The recorded row read 645 W (median of its instant readings); the simulation holds the window's average at the
    # 700 W limit: its instant power is a 5 ms mean, not what Hopper's instant field reports (not modelled).
    assert measurement.telemetry["power_w_median"] <= 1.1 * row["power_w"]


def test_fp8_back_to_back_reads_as_mamf_finders_msmf(gpu):
    """fp8's rate at its capped clock is predicted, not calibrated: mamf-fp8.txt's MSMF, 1244.5 TFLOP/s at 1325 MHz."""
    flops = 2 * 8448 * 8192 * 16384
    back_to_back(gpu, 500, flops, "float8_e4m3fn")
    tflops, telemetry = back_to_back(gpu, 1000, flops, "float8_e4m3fn")
    assert tflops == pytest.approx(1244.5, rel=0.03)
    assert telemetry["clock_mhz_median"] == pytest.approx(1325, rel=0.03)


# ---- the package's measuring code on it ---------------------------------------------------------------------------


def test_the_sustained_figure_is_the_back_to_back_figure_at_the_capped_clock(gpu):
    """Timed call by call (a spin and a synchronize around each), the window read ≈ 790 TFLOP/s near 1890 MHz: the
    burst again. Back to back it reads what the recorded 2-s windows read."""
    timer = MatmulTimer(H200, target_s=0.2, case_factory=gpu.case_factory, telemetry="cuda:0")
    candidate = Candidate(SHAPE, FLOPS, sweep_row()["seconds"])
    product_j, product_flops = gpu.product_energy_j, gpu.product_flops
    headline, windows = sustained(timer, "bfloat16", [candidate], deadline=timer.clock() + 8.0,
                                  physical=recorded.physical())
    assert headline.published, headline.reason
    assert within(headline.tflops, 684.1, 689.1, 0.02)
    assert headline.clock_mhz == pytest.approx(1455, rel=0.03)
    assert headline.seconds >= phase.SUSTAINED_TARGET_S
    assert headline.saturation.startswith("power")
    # J/TFLOP is the products' energy over their work: nothing else ran in the window to count
    truth = (gpu.product_energy_j - product_j) / (gpu.product_flops - product_flops) * 1e12
    assert headline.j_per_tflop == pytest.approx(truth, rel=0.02)


def test_the_headline_phase_ends_within_its_wall_budget(gpu):
    timer = MatmulTimer(H200, target_s=0.2, case_factory=gpu.case_factory, telemetry="cuda:0")
    row = sweep_row()
    candidates = {"bfloat16": [Candidate(SHAPE, FLOPS, row["seconds"]),
                               Candidate((4608, 6144, 5632), 2 * 4608 * 6144 * 5632, 0.0003995)],
                  "float32": [Candidate((8192, 8192, 8192), 2 * 8192**3, 2 * 8192**3 / 54.0e12)],
                  "float8_e4m3fn": [Candidate((8448, 8192, 16384), 2 * 8448 * 8192 * 16384, 0.0016)]}
    budget = 12.0
    started = gpu.now()
    found = measure_headlines(timer, candidates, budget_s=budget, physical=recorded.physical())
    assert gpu.now() - started <= budget
    # fp8 back to back is power-saturated and reads what mamf-finder's MSMF read (1244.5 TFLOP/s at 1325 MHz)
    fp8 = found["headlines"]["float8_e4m3fn"]["sustained"]
    assert fp8.published, fp8.reason
    assert fp8.tflops == pytest.approx(1244.5, rel=0.03) and fp8.clock_mhz == pytest.approx(1325, rel=0.03)


def test_the_soak_heats_with_the_dtype_that_draws_the_most_power_and_shows_each_windows_early_and_late_clock(gpu):
    timer = MatmulTimer(H200, target_s=0.2, case_factory=gpu.case_factory, telemetry="cuda:0")
    candidates = {"float32": [Candidate((8192, 8192, 8192), 2 * 8192**3, 2 * 8192**3 / 54.0e12)],
                  "bfloat16": [Candidate(SHAPE, FLOPS, sweep_row()["seconds"])]}
    found = measure_headlines(timer, candidates, budget_s=10.0, physical=recorded.physical())
    soaked = found["soak"]
    assert soaked.dtype == "bfloat16"
    # bf16 back to back is held at its capped clock (the recorded 1455 MHz), not float32's boost
    assert soaked.saturated_clock_mhz == pytest.approx(1455, rel=0.03)
    shown = soaked.to_dict()["early_late_mhz"]
    assert len(shown) == len(soaked.windows) >= 2
    for (early, late), window in zip(shown, soaked.windows):
        assert (early, late) == (window.telemetry["clock_mhz_early"], window.telemetry["clock_mhz_late"])
    # the late halves read the capped clock bf16 settles at back to back
    assert statistics.median([late for _early, late in shown]) == pytest.approx(1455, rel=0.03)


def test_the_sweeps_window_opens_after_the_operands_exist_and_the_untimed_calls_ran(gpu, monkeypatch):
    """No reading of the window is from before the shape's work: the untimed first call (and its warm-ups) have
    run when the window opens."""
    opened = []

    class Opening(SimulatedGpuSampler):
        def __enter__(self):
            opened.append(gpu.products)
            return super().__enter__()

    from accounting.report import measure
    monkeypatch.setattr(measure, "Sampler", lambda device, **kwargs: Opening(gpu, device))
    timer = MatmulTimer(H200, target_s=0.2, case_factory=gpu.case_factory, telemetry="cuda:0")
    before = gpu.products
    measurement = timer("bfloat16", *SHAPE)
    (products_at_open,) = opened
    untimed = products_at_open - before
    assert untimed >= 1
    assert gpu.products - before == untimed + measurement.repeats  # every timed call ran inside the window


def test_a_back_to_back_window_keeps_the_gpu_busy_from_its_first_event_to_its_last(gpu):
    """No spin, no flush, no host synchronize that lets the GPU run dry: the window's time is its products' time,
    and it ends within a call of the seconds asked for."""
    from accounting.timing import time_back_to_back

    busy = gpu.busy_s
    window = time_back_to_back(lambda: gpu.product(FLOPS), seconds=0.5, device="cuda:0", max_calls=10_000,
                               flops=FLOPS, clock=gpu.event_clock())
    gaps = window.seconds - (gpu.busy_s - busy)
    assert 0 <= gaps <= 1e-4 * window.seconds  # only the first call's launch, after the start event
    assert window.calls == gpu.products
    assert abs(window.seconds - 0.5) <= max(window.per_call_s)
