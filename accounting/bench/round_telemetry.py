"""A GPU benchmark's telemetry round by round, and its warm-up to the working clock.

A GPU idles at a few hundred MHz between jobs (an H200: 345 MHz) and rises to its working clock
once work starts; at full load the power cap then moves the clock with the power (an H200 between
1410 and 1980 MHz). Two things follow for a benchmark's timed rounds, both done here on CUDA only
(the CPU benchmarks' timing is untouched):

- :func:`warm_to_working_clock` runs the benchmark's call before its timed rounds until the
  clock has settled — :data:`SETTLE_READINGS` readings, at least :data:`SETTLE_SPACING_S` apart,
  within :data:`SETTLE_TOLERANCE` of one another — or :data:`WARM_MAX_S` has passed, and says how
  long that took (``extra_info["warmup"]``);
- :class:`RoundReadings` reads the device right after each timed round (pytest-benchmark's
  ``teardown``, outside the timed call; the round has just synchronized), so the saved run keeps
  each round's clock, power, temperature and throttle reasons beside its time
  (``extra_info["telemetry_rounds"]``, lists in round order). The regression gate judges a
  disturbance and tells a slower clock from a slower product from them
  (:mod:`accounting.gate.gpu_rounds`).

A reading the backend cannot give is ``None``; a backend that fails stops the recording (the
timing goes on) and the record says so.

>>> from accounting.telemetry.readings import Reading
>>> clocks = iter([345.0, 1200.0, 1980.0, 1980.0, 1975.0])
>>> times = iter([0.0, 0.03, 0.06, 0.09, 0.12, 0.15, 0.18])
>>> warm = warm_to_working_clock(lambda: None, lambda: Reading(0.0, clock_mhz=next(clocks)), now=lambda: next(times))
>>> warm["settled"], warm["calls"], warm["clock_mhz_first"], warm["clock_mhz_settled"]
(True, 5, 345.0, 1975.0)
"""

import math
import time

import torch

from accounting.telemetry.gpu import open_gpu_backend
from accounting.telemetry.readings import NoBackend

SETTLE_READINGS = 3
"""Consecutive clock readings within :data:`SETTLE_TOLERANCE` of one another that make a settled clock."""
SETTLE_TOLERANCE = 0.02
"""How far apart (relative) the settling readings may be: well inside the gate's 5 % clock tolerance."""
SETTLE_SPACING_S = 0.02
"""Least time between two settling readings (NVML's clock is sampled every few ms; power every 20-100 ms)."""
WARM_MAX_S = 2.0
"""The warm-up gives up after this long (an unsteady clock is then recorded as not settled, and the gate sees the
rounds' own clocks)."""
ROUND_FIELDS = ("clock_mhz", "power_w", "temperature_c", "throttle_reasons")
"""What is kept of each round's reading (``extra_info["telemetry_rounds"]``)."""


def warm_to_working_clock(call, read, *, now=time.perf_counter, max_s: float = WARM_MAX_S) -> dict:
    """Run ``call()`` until the device's clock (``read().clock_mhz``, read after each call) has settled.

    ``call`` is one untimed round (the cache flush, the benchmark's call, a synchronize). Returns the record kept
    in ``extra_info["warmup"]``: seconds, calls, the first and last clock read, and whether it settled. Without a
    clock reading (no telemetry) one call is made and ``settled`` is ``None``.
    """
    started = now()
    calls, clocks, last_at = 0, [], -math.inf
    settled = None
    while True:
        call()
        calls += 1
        reading = read()
        at = now()
        clock = getattr(reading, "clock_mhz", None)
        if clock is None:
            break
        if at - last_at >= SETTLE_SPACING_S:
            clocks.append(float(clock))
            last_at = at
        recent = clocks[-SETTLE_READINGS:]
        if len(recent) == SETTLE_READINGS and max(recent) <= min(recent) * (1 + SETTLE_TOLERANCE):
            settled = True
            break
        if at - started >= max_s:
            settled = False
            break
    return {"seconds": round(now() - started, 4), "calls": calls,
            "clock_mhz_first": clocks[0] if clocks else None, "clock_mhz_settled": clocks[-1] if clocks else None,
            "settled": settled}


def _plain(value):
    """A reading's field as JSON keeps it (the throttle reasons' tuple as a list)."""
    return list(value) if isinstance(value, tuple) else value


class RoundReadings:
    """Reads ``backend`` after each timed round: pass :meth:`teardown` as pytest-benchmark ``pedantic``'s teardown.

    ``warmup_rounds``: the calls ``pedantic`` makes before the timed ones (their teardowns are not recorded);
    ``rounds``: the timed rounds (teardowns beyond them, as pytest-benchmark's profiling calls, are not either).

    >>> from accounting.telemetry.readings import Reading
    >>> class Backend:
    ...     clock = iter([1980.0, 1410.0, 1440.0])
    ...     def read(self, *, edge):
    ...         return Reading(0.0, clock_mhz=next(self.clock), throttle_reasons=("sw_power_cap",))
    >>> recorder = RoundReadings(Backend(), warmup_rounds=1, rounds=2)   # the warm-up call is not read
    >>> for _ in range(3):
    ...     recorder.teardown()
    >>> recorder.record()["clock_mhz"], recorder.record()["throttle_reasons"]
    ([1980.0, 1410.0], [['sw_power_cap'], ['sw_power_cap']])
    """

    def __init__(self, backend, *, warmup_rounds: int, rounds: int):
        self.backend = backend
        self.warmup_rounds = warmup_rounds
        self.rounds = rounds
        self._calls = 0
        self._readings = []
        self._error = None

    def teardown(self, *args, **kwargs) -> None:  # noqa: ARG002 - pedantic passes the target's arguments
        """Read the device after a round (a warm-up call's teardown is only counted)."""
        self._calls += 1
        timed = self._calls - self.warmup_rounds
        if timed < 1 or timed > self.rounds or self._error is not None:
            return
        try:
            self._readings.append(self.backend.read(edge=False))
        except Exception as error:  # noqa: BLE001 - a failing backend ends the recording, never the timing
            self._error = f"round readings stopped after round {timed - 1}: {type(error).__name__}: {error}"

    def record(self) -> dict:
        """The rounds' readings as ``extra_info["telemetry_rounds"]``: a list per field, one entry per round read."""
        record = {field: [_plain(getattr(reading, field)) for reading in self._readings] for field in ROUND_FIELDS}
        record["read"] = "after each round"
        if self._error is not None:
            record["error"] = self._error
        return record


def open_round_backend(device):
    """The telemetry backend that reads CUDA ``device`` round by round; ``None`` on the CPU or where no backend
    answers (no NVML, no AMD SMI: the rounds are then timed without readings)."""
    if getattr(device, "type", None) != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    backend = open_gpu_backend(index)
    return None if isinstance(backend, NoBackend) else backend
