"""Waiting for a device and reading the clock that times it: the timing half of the device seam.

A GPU runs kernels asynchronously, so a host clock read without :func:`synchronize`
first measures only the launch. :func:`clock_for` hands out the right clock: CUDA
events on a GPU, ``time.perf_counter`` after a synchronize on the CPU.

>>> synchronize("cpu")
>>> type(clock_for("cpu")).__name__
'HostClock'
"""

import time

import torch

from accounting.hardware.devices import as_device, l2_cache_bytes, timed_device

L2_FLUSH_FACTOR = 2
"""The L2 flush writes a buffer this many times the L2 size, so nothing of the operands survives."""

LAUNCH_COVER_CYCLES = 200_000
"""GPU clock cycles of spinning queued before each timed call (100–200 µs at 1–2 GHz): longer than
the host takes to queue an L2 flush, the start event and a Python-level call (tens of µs), so the
call's kernels are queued before the GPU reaches the start event. Costs wall time, not timed time."""


def synchronize(device) -> None:
    """Wait until all work queued on ``device`` has finished (a no-op on the CPU).

    Kernels on a GPU run asynchronously: a host clock read before this measures only
    the launch.

    >>> synchronize("cpu")
    """
    device = as_device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class HostClock:
    """Times with ``time.perf_counter``, synchronizing the device before every read.

    ``synchronize`` and ``now`` can be replaced (tests pass recording fakes).

    >>> clock = HostClock()
    >>> start = clock.mark(); end = clock.mark()
    >>> clock.elapsed(start, end) >= 0
    True
    """

    def __init__(self, synchronize=lambda: None, now=time.perf_counter):
        self.synchronize = synchronize
        self._now = now

    def mark(self):
        """Wait for the device, then read the host clock."""
        self.synchronize()
        return self._now()

    def elapsed(self, start, end) -> float:
        """Seconds between two marks."""
        return end - start

    def flush_cache(self) -> None:
        """Nothing to flush: CPU benchmarks run warm, as real CPU code does."""

    def occupy(self) -> None:
        """Nothing to do: the host clock waits for the device before every read."""


class EventClock:
    """Times a CUDA stream with events recorded on it; no host clock is involved.

    ``mark`` records an event after the work already queued; ``elapsed`` waits for the
    end event and returns the GPU time between the two. ``occupy`` queues a spin
    (``torch.cuda._sleep``) so the GPU is still busy when the start event and the timed
    call are queued behind it: an idle GPU would stamp the start event at once and then
    wait for the host to launch the call (10–20 µs, 5–20% of a 100 µs kernel).
    ``event_factory``, ``synchronize`` and ``sleep`` can be replaced (tests pass recording fakes).
    """

    def __init__(self, device, *, event_factory=None, synchronize=None, l2_cache_bytes=None, sleep=None):
        self.device = as_device(device)
        self._event = event_factory or (lambda: torch.cuda.Event(enable_timing=True))
        self.synchronize = synchronize or (lambda: torch.cuda.synchronize(self.device))
        self._sleep = sleep or self._spin
        self._l2_bytes = l2_cache_bytes
        self._flush_buffer = None

    def _spin(self, cycles: int) -> None:
        with torch.cuda.device(self.device):  # on the timed device's current stream, as mark() records
            torch.cuda._sleep(cycles)

    def occupy(self) -> None:
        """Queue ``LAUNCH_COVER_CYCLES`` of spinning on this device's current stream (does not wait)."""
        self._sleep(LAUNCH_COVER_CYCLES)

    def mark(self):
        """Record an event on this device's current stream (does not wait).

        The stream is this clock's device's, not the current device's: timing ``cuda:1``
        while ``cuda:0`` is current must not time ``cuda:0``'s idle stream.
        """
        event = self._event()
        event.record(torch.cuda.current_stream(self.device))
        return event

    def elapsed(self, start, end) -> float:
        """Wait for ``end``, then the seconds between the events."""
        end.synchronize()
        return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds

    def flush_cache(self) -> None:
        """Overwrite L2 so the next run reads its operands from memory, as a cold call would."""
        with torch.cuda.device(self.device):  # the flush runs on the timed device's current stream
            if self._flush_buffer is None:
                size = self._l2_bytes if self._l2_bytes is not None else l2_cache_bytes(self.device)
                self._flush_buffer = torch.empty(L2_FLUSH_FACTOR * max(size, 1), dtype=torch.int8, device=self.device)
            self._flush_buffer.zero_()


def clock_for(device, *, cache_bytes: int | None = None):
    """The clock that times work on ``device``: CUDA events on a GPU, ``perf_counter`` on the CPU.

    Only those two (see :func:`timed_device`): anything else raises naming the device.
    ``cache_bytes`` sizes a GPU clock's cache flush (default: :func:`l2_cache_bytes`;
    :func:`accounting.timing.flush_bytes` gives the last-level cache).

    >>> type(clock_for("cpu")).__name__
    'HostClock'
    """
    device = timed_device(device)
    if device.type == "cuda":
        return EventClock(device, l2_cache_bytes=cache_bytes)
    return HostClock(synchronize=lambda: synchronize(device))
