"""The thermal soak before the sustained headlines: a large matmul until the device's clock is flat.

A GPU boosts while cool and settles lower once hot and power-saturated; the sustained figures
(:mod:`accounting.report.headlines`) are measured after it settles. The soak runs one shape in windows of
about ``SOAK_CHUNK_S`` (one clock reading each: the window's median) for at most ``SOAK_MAX_S``, ended early once
the last ``FLAT_READINGS`` readings lie within ``FLAT_MHZ``; the mean of those is the saturated clock. Each window runs
its calls back to back (a power limiter averages: pauses between calls would let the clock stay high), and keeps its
early and late clock (the medians of its first and second half of readings), so a soak that was still settling shows.
It heats with the dtype that draws the most power (:func:`soak_dtype`).

>>> Soak().to_dict()["ended"]
'not run'
"""

import statistics
from dataclasses import dataclass, field

from accounting.report.headline_device import Candidate, HeadlineDevice
from accounting.telemetry.validity import summary_clock_mhz

SOAK_MAX_S = 20.0
POWER_ORDER = ("float8", "bfloat16", "float16", "tf32", "float32")
"""Dtypes by the power their products draw, most first: tensor-core products at lower precision draw more per clock.
Recorded on the H200 (tests/data/hosts/nvidia-h200/): fp8 held 693 W at 1325 MHz back to back (mamf-fp8.txt), bf16
690 W at 1455 MHz (sdpa-kernels-and-sustained-window.json); float32 drew 518 W at 1968 MHz (report.json)."""
SOAK_SHARE = 0.4
"""The soak takes at most this share of the headline budget (and never more than ``SOAK_MAX_S``)."""
SOAK_CHUNK_S = 0.5
"""The soak is timed in windows of about this long; each gives one clock reading."""
FLAT_READINGS = 3
FLAT_MHZ = 5.0


def soak_dtype(dtypes) -> str | None:
    """The dtype (or headline key) to soak with: the first of ``dtypes`` that comes earliest in ``POWER_ORDER``
    (names it does not know come last, in their order); ``None`` for none.

    >>> soak_dtype(["float32", "tf32", "bfloat16", "float16", "float8_e4m3fn"])
    'float8_e4m3fn'
    >>> soak_dtype(["float32", "bfloat16"]), soak_dtype(["float64", "float32"]), soak_dtype([])
    ('bfloat16', 'float32', None)
    """
    def rank(dtype):
        return next((position for position, prefix in enumerate(POWER_ORDER) if dtype.startswith(prefix)),
                    len(POWER_ORDER))
    return min(dtypes, key=rank, default=None)


def clock_is_flat(clocks, *, readings: int = FLAT_READINGS, within_mhz: float = FLAT_MHZ) -> bool:
    """Whether the last ``readings`` clocks lie within ``within_mhz`` of each other.

    >>> clock_is_flat([1980, 1700, 1502, 1500, 1503]), clock_is_flat([1980, 1700, 1500])
    (True, False)
    """
    last = [clock for clock in clocks[-readings:] if clock is not None]
    return len(last) == readings and max(last) - min(last) <= within_mhz


@dataclass
class Soak:
    """The thermal soak: how long, the clock readings, why it ended and the settled (saturated) clock."""

    dtype: str | None = None
    shape: tuple[int, int, int] | None = None
    seconds: float = 0.0
    clocks: list = field(default_factory=list)
    early_late: list = field(default_factory=list)
    """Each window's ``(early, late)`` clock: the medians of its first and second half of readings."""
    ended: str = "not run"
    saturated_clock_mhz: float | None = None
    windows: list = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "shape": list(self.shape) if self.shape else None, "seconds": self.seconds,
                "clocks_mhz": list(self.clocks), "early_late_mhz": [list(pair) for pair in self.early_late],
                "ended": self.ended, "saturated_clock_mhz": self.saturated_clock_mhz}


def soak(device: HeadlineDevice, dtype: str, candidate: Candidate, *, max_s: float) -> Soak:
    """Run ``candidate`` back to back in windows of about ``SOAK_CHUNK_S`` until the clock is flat or ``max_s`` has
    passed (planned by the host's clock: each window as long as the last one took)."""
    result = Soak(dtype=dtype, shape=candidate.shape)
    most_calls = max(1, 4 * round(SOAK_CHUNK_S / candidate.seconds)) if candidate.seconds > 0 else 1
    started = device.clock()
    window_wall = SOAK_CHUNK_S
    while device.clock() - started + window_wall <= max_s or not result.windows:
        before = device.clock()
        window = device.repeat(dtype, candidate.shape, most_calls, seconds=SOAK_CHUNK_S)
        window_wall = device.clock() - before
        result.windows.append(window)
        result.clocks.append(summary_clock_mhz(window.telemetry))
        telemetry = window.telemetry or {}
        result.early_late.append((telemetry.get("clock_mhz_early"), telemetry.get("clock_mhz_late")))
        if clock_is_flat(result.clocks):
            result.ended = "flat"
            break
    else:
        result.ended = "time limit"
    result.seconds = device.clock() - started
    settled = [clock for clock in result.clocks[-FLAT_READINGS:] if clock is not None]
    result.saturated_clock_mhz = statistics.fmean(settled) if settled else None
    if not any(clock is not None for clock in result.clocks):
        result.ended += " (no clock readings)"
    return result
