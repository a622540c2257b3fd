"""What the headline phase (:mod:`accounting.report.headlines`) needs from a device, and what it gets back.

A :class:`HeadlineDevice` times single repetitions of a :class:`Candidate` shape in one telemetry
:class:`Window`; the report's timer (:mod:`accounting.report.measure`) is one, and the tests' fakes are others,
so the headline logic never touches torch or a device.

>>> Window((0.5, 0.25)).samples, Candidate((64, 64, 64), 524288, 1e-4).shape
((0.5, 0.25), (64, 64, 64))
"""

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Window:
    """Single repetitions timed together: seconds per repetition and the window's telemetry (``Summary.to_dict()``)."""

    samples: tuple[float, ...]
    telemetry: dict | None = None


class HeadlineDevice(Protocol):
    """What the headline logic needs from a device: timed repetitions, a clock to plan by, a way to idle."""

    def repeat(self, dtype: str, shape: tuple[int, int, int], repeats: int, *, seconds: float | None = None) -> Window:
        """``repeats`` single calls timed in one telemetry window; with ``seconds``, calls until that much time of
        them has passed (at most ``repeats``): a sustained window lasts its time even when calls run slower than
        planned (a loaded host)."""

    def clock(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


@dataclass(frozen=True)
class Candidate:
    """A sweep shape: its FLOPs per call and seconds per call (the sweep's median)."""

    shape: tuple[int, int, int]
    flops: int
    seconds: float
