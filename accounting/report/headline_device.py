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
    """Repetitions timed in one telemetry window (``Summary.to_dict()``): each timed alone (``samples``: seconds per
    repetition), or run back to back (``calls`` in ``seconds``; ``samples``: seconds per call of each stretch)."""

    samples: tuple[float, ...]
    telemetry: dict | None = None
    calls: int | None = None
    """Calls run back to back in the window (``None``: one per sample, each timed alone)."""
    seconds: float | None = None
    """The back-to-back window's time, first event to last (``None``: the samples' sum)."""

    @property
    def call_count(self) -> int:
        """The window's calls: ``calls`` where they ran back to back, else one per sample.

        >>> Window((0.5, 0.25)).call_count, Window((0.5,), calls=40, seconds=20.0).call_count
        (2, 40)
        """
        return self.calls if self.calls is not None else len(self.samples)

    @property
    def window_s(self) -> float:
        """The window's time: first event to last where the calls ran back to back, else the samples' sum."""
        return self.seconds if self.seconds is not None else sum(self.samples)


class HeadlineDevice(Protocol):
    """What the headline logic needs from a device: timed repetitions, a clock to plan by, a way to idle."""

    def repeat(self, dtype: str, shape: tuple[int, int, int], repeats: int, *, seconds: float | None = None) -> Window:
        """``repeats`` single calls timed in one telemetry window; with ``seconds``, calls back to back (no pause
        between them) until that much time has passed (at most ``repeats``): a sustained window lasts its time even
        when calls run slower than planned (a loaded host)."""

    def clock(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


@dataclass(frozen=True)
class Candidate:
    """A sweep shape: its FLOPs per call and seconds per call (the sweep's median)."""

    shape: tuple[int, int, int]
    flops: int
    seconds: float
