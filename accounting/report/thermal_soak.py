"""The thermal soak before the sustained headlines: a large matmul until the device's clock is flat.

A GPU boosts while cool and settles lower once hot and power-saturated; the sustained figures
(:mod:`accounting.report.headlines`) are measured after it settles. The soak runs one shape in windows of
about ``SOAK_CHUNK_S`` (one clock reading each) for at most ``SOAK_MAX_S``, ended early once the last
``FLAT_READINGS`` readings lie within ``FLAT_MHZ``; the mean of those is the saturated clock.

>>> Soak().to_dict()["ended"]
'not run'
"""

import statistics
from dataclasses import dataclass, field

from accounting.report.headline_device import Candidate, HeadlineDevice
from accounting.telemetry.validity import summary_clock_mhz

SOAK_MAX_S = 20.0
SOAK_SHARE = 0.4
"""The soak takes at most this share of the headline budget (and never more than ``SOAK_MAX_S``)."""
SOAK_CHUNK_S = 0.5
"""The soak is timed in windows of about this long; each gives one clock reading."""
FLAT_READINGS = 3
FLAT_MHZ = 5.0


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
    ended: str = "not run"
    saturated_clock_mhz: float | None = None
    windows: list = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "shape": list(self.shape) if self.shape else None, "seconds": self.seconds,
                "clocks_mhz": list(self.clocks), "ended": self.ended, "saturated_clock_mhz": self.saturated_clock_mhz}


def soak(device: HeadlineDevice, dtype: str, candidate: Candidate, *, max_s: float) -> Soak:
    """Run ``candidate`` in windows of about ``SOAK_CHUNK_S`` until the clock is flat or ``max_s`` has passed."""
    result = Soak(dtype=dtype, shape=candidate.shape)
    per_window = max(1, round(SOAK_CHUNK_S / candidate.seconds)) if candidate.seconds > 0 else 1
    started = device.clock()
    while device.clock() - started + per_window * candidate.seconds <= max_s or not result.windows:
        window = device.repeat(dtype, candidate.shape, per_window)
        result.windows.append(window)
        result.clocks.append(summary_clock_mhz(window.telemetry))
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
