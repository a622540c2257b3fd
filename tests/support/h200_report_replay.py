"""The recorded H200 run's report figures, and a headline device that answers as that H200 did, through a fake NVML.

Sources: ``tests/data/hosts/nvidia-h200/`` (its page ``tests/data/hosts/nvidia-h200.md``): ``report.json`` (the
acceptance run's standard report, budget 40 s), ``report-bf16-budget60.json`` (a bf16 report at budget 60 s),
and ``sdpa-kernels-and-sustained-window.json`` (the report's sustained shape run back to back in four 2-s windows,
NVML sampled every 20 ms: per window its TFLOP/s, seconds, calls, readings, clock median/min/max, power
median/max and throttle mask; the enforced power limit, 700 W; the device properties).

The windows were recorded as those statistics, not reading by reading; :func:`window_readings` lays out a
sequence of readings with exactly the recorded count, median, lowest and highest clock and median and highest
power, the extremes placed one in each half of the window (the order the real readings came in is not known).
"""

import dataclasses
import json
import math
import statistics
from pathlib import Path

from accounting.report.headlines import Window
from accounting.telemetry.gpu_nvml import NvmlBackend
from accounting.telemetry.sampler import summarise
from tests.support.fake_nvml import SW_POWER_CAP, FakeGpu, FakeNvml

RECORDED = Path(__file__).resolve().parents[1] / "data" / "hosts" / "nvidia-h200"
INSTANT_POWER_OVERSHOOT_W = 931.0
"""The highest instant power reading of the recorded run (``report.json``: "the highest in the run, 931 W")."""


def load(name: str) -> dict:
    """One recorded JSON file."""
    return json.loads((RECORDED / name).read_text())


def sustained_windows() -> dict:
    """``sdpa-kernels-and-sustained-window.json``: ``props``, ``power_limit_w`` and ``sustained_windows``."""
    return load("sdpa-kernels-and-sustained-window.json")


def physical() -> tuple:
    """``(compute capability, SM count)`` of the recorded H200, from its device properties."""
    props = sustained_windows()["props"]
    return (props["major"], props["minor"]), props["multi_processor_count"]


def window_readings(window: dict, *, overshoot_w: float | None = None) -> list[tuple[float, float]]:
    """``(clock MHz, power W)`` for each of a recorded window's readings (see the module docstring).

    ``overshoot_w``: one instant power reading that high (the recorded run read 894–931 W on a 700 W card)
    in place of the highest; the window's median is unchanged.
    """
    count = window["samples"]
    clocks = [float(window["clock_median"])] * count
    clocks[1], clocks[-2] = float(window["clock_min"]), float(window["clock_max"])
    power = [float(window["power_median"])] * count
    power[count // 2] = float(overshoot_w if overshoot_w is not None else window["power_max"])
    assert statistics.median(clocks) == window["clock_median"] and statistics.median(power) == window["power_median"]
    return list(zip(clocks, power))


class RecordedH200:
    """A :class:`~accounting.report.headlines.HeadlineDevice` that runs the report's sustained shape as the recorded
    H200 did in its 2-s windows: each call takes ``flops / (the window's TFLOP/s)``, and the window's telemetry is read
    through :class:`~accounting.telemetry.gpu_nvml.NvmlBackend` from a fake NVML fed the recorded readings (instant
    power with one overshoot above the limit, the software power cap engaged, the energy counter advancing at the
    power drawn). ``window`` picks the recorded window (1–3 ran after window 0 had settled the clock)."""

    def __init__(self, window: int = 1, *, overshoot_w: float | None = INSTANT_POWER_OVERSHOOT_W):
        recorded = sustained_windows()
        self.window = recorded["sustained_windows"][window]
        self.gpu = FakeGpu(power_limit_mw=recorded["power_limit_w"] * 1e3, throttle_mask=SW_POWER_CAP, energy_mj=0)
        self.nvml = FakeNvml([self.gpu])
        self.overshoot_w = overshoot_w
        self.now = 0.0
        self.calls = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def repeat(self, dtype, shape, repeats, *, seconds=None) -> Window:
        m, k, n = shape
        per_call = 2 * m * k * n / (self.window["tflops"] * 1e12)
        if seconds is not None:
            repeats = min(repeats, max(1, math.ceil(seconds / per_call)))
        samples = (per_call,) * repeats
        duration = per_call * repeats
        backend = NvmlBackend(self.nvml, 0, now=self.clock)
        planned = window_readings(self.window, overshoot_w=self.overshoot_w)
        count = max(2, min(len(planned), round(duration / 0.02) + 2))  # 20 ms apart, as recorded
        readings = []
        started = self.now
        for position, (clock_mhz, power_w) in enumerate(planned[:count]):
            self.gpu.clock_mhz, self.gpu.power_mw = clock_mhz, power_w * 1e3
            self.now = started + duration * position / (count - 1)
            if position:
                self.gpu.energy_mj += int(power_w * 1e3 * duration / (count - 1))  # mJ over the step
            readings.append(backend.read(edge=position in (0, count - 1)))
        self.now = started + duration
        self.calls.append((dtype, shape, repeats))
        summary = summarise("cuda:0", backend, [dataclasses.replace(r) for r in readings])
        return Window(samples, summary.to_dict())


class SoakingH200(RecordedH200):
    """:class:`RecordedH200` whose soak shape (``soak_shape``) reads, window by window, the SM clocks the budget-60
    report's soak recorded (``report-bf16-budget60.json``: 28 windows of 32768³ bf16, 1350–1460 MHz, power-capped):
    the clock that moved during the soak and that the old report quoted for its sustained figure."""

    def __init__(self, window: int = 1, **kwargs):
        super().__init__(window, **kwargs)
        soak = load("report-bf16-budget60.json")["telemetry"]["soak"]
        self.soak_shape = tuple(soak["shape"])
        self.soak_clocks = list(soak["clocks_mhz"])
        self.soak_windows = 0

    def repeat(self, dtype, shape, repeats, *, seconds=None) -> Window:
        if tuple(shape) != self.soak_shape:
            return super().repeat(dtype, shape, repeats, seconds=seconds)
        clock = self.soak_clocks[self.soak_windows % len(self.soak_clocks)]
        self.soak_windows += 1
        saved = self.window
        self.window = {**saved, "clock_median": clock, "clock_min": clock, "clock_max": clock,
                       "tflops": 677.0}  # the recorded 32768³ rate (report-bf16-budget60.txt)
        try:
            return super().repeat(dtype, shape, repeats, seconds=seconds)
        finally:
            self.window = saved
