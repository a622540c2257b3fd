"""A GPU benchmark's telemetry round by round, and its warm-up to the working clock.

A GPU idles at a few hundred MHz between jobs (an H200: 345 MHz) and rises to its working clock
once work starts; at full load the power cap then moves the clock with the power (an H200 between
1410 and 1980 MHz). Two things follow for a benchmark's timed rounds, both done here on CUDA only
(the CPU benchmarks' timing is untouched):

- :func:`warm_to_working_clock` runs the benchmark's call before its timed rounds until the
  clock has settled — :data:`SETTLE_READINGS` readings, at least :data:`SETTLE_SPACING_S` apart,
  within :data:`SETTLE_TOLERANCE` of one another — or :data:`WARM_MAX_S` has passed, and says how
  long that took (``extra_info["warmup"]``). The clock is read *during* the calls, by a
  :class:`DeviceReadings` thread: read after a call's synchronize it would be the idle edge's (a
  capped GPU reads its boost clock again there), and the warm-up would settle on a clock no call ran at;
- :class:`RoundReadings` reads the device *during* the timed rounds, from the same kind of thread every
  :data:`ROUND_INTERVAL_S`, and pytest-benchmark's ``teardown`` after each round marks where it ended
  (nothing is read there: the round has just synchronized, the device is at its idle edge, its power a
  reading of the gap and its ``sw_power_cap`` perhaps already cleared). Each round keeps the readings
  taken between the previous round's end and its own (its untimed setup, an L2 flush, is GPU work too);
  a round shorter than the interval has none of its own and takes the reading nearest in time within the
  timed rounds (``samples`` says which: 0). The saved run keeps each round's clock, power, temperature and
  throttle reasons beside its time (``extra_info["telemetry_rounds"]``, lists in round order, ``read``
  saying how they were taken). The regression gate judges a disturbance and tells a slower clock from a
  slower product from them (:mod:`accounting.gate.gpu_rounds`).

A reading the backend cannot give is ``None``; a backend that fails stops the recording (the
timing goes on) and the record says so.

>>> from accounting.telemetry.readings import Reading
>>> class Rising:
...     clocks = iter([345.0, 1200.0, 1980.0, 1980.0, 1975.0])
...     def read(self, *, edge):
...         return Reading(0.0, clock_mhz=next(self.clocks))
>>> ticks = iter(range(100))
>>> readings = DeviceReadings(Rising(), thread=False, now=lambda: 0.03 * next(ticks))
>>> warm = warm_to_working_clock(readings.sample, readings)   # here each call takes one reading while it runs
>>> warm["settled"], warm["calls"], warm["clock_mhz_first"], warm["clock_mhz_settled"]
(True, 5, 345.0, 1975.0)
"""

import math
import statistics
import threading
import time

import torch

from accounting.errors import AccountingTypeError
from accounting.telemetry.gpu import open_gpu_backend
from accounting.telemetry.readings import GPU_INTERVAL_S, NoBackend

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
"""What is kept of each round's readings (``extra_info["telemetry_rounds"]``): the median clock and power, the
highest temperature, every throttle reason seen."""
ROUND_INTERVAL_S = GPU_INTERVAL_S
"""Seconds between the thread's readings during the rounds (the telemetry window's rate: NVML's power updates
every 20-100 ms)."""
ROUNDS_SILENT_S = 60.0
"""The reading thread stops itself when no round has ended for this long (pytest-benchmark stopped calling
``teardown``: the rounds failed)."""
TIMING_METHOD = "warmed to the working clock read during the calls; rounds read during them"
"""How a GPU benchmark's rounds are timed (the warm-up before them, how they are read), kept in the machine
identity (:mod:`accounting.bench.identity`, ``gpu_timing``): each changes the gaps and the clock the rounds run
at, so runs timed another way (the H200's saved gate baselines: no warm-up, no per-round readings) are not
compared with these. Change it whenever either changes."""
READ_DURING = (f"during the rounds, every {ROUND_INTERVAL_S * 1e3:.0f} ms by a thread; a round without a reading of "
               "its own (samples 0) has the one nearest in time")
"""``telemetry_rounds["read"]``: how the readings were taken (runs saved before read them after each round)."""


def warm_to_working_clock(call, readings, *, max_s: float = WARM_MAX_S) -> dict:
    """Run ``call()`` until the device's clock, as ``readings`` (a :class:`DeviceReadings`) read it while the calls
    ran, has settled.

    ``call`` is one untimed round (the cache flush, the benchmark's call, a synchronize). After each call the clocks
    read since the previous one ended are taken (at least :data:`SETTLE_SPACING_S` apart, by the readings' own times);
    a call shorter than the readings' interval may have none, and the calls go on until readings come. Returns the
    record kept in ``extra_info["warmup"]``: seconds, calls, the first and last clock read, and whether it settled.
    Where the device gives no clock (a reading without one) or nothing is read before ``max_s``, ``settled`` is
    ``None``; a backend that fails stops the warm-up (``error`` says why).
    """
    if not isinstance(readings, DeviceReadings):
        raise AccountingTypeError(f"readings must be a DeviceReadings (the device read while the calls run), "
                                  f"not {type(readings).__name__} {readings!r}")
    started = ended = readings.now()
    calls, clocks, last_at = 0, [], -math.inf
    settled, no_clock = None, False
    while True:
        call()
        calls += 1
        previous, ended = ended, readings.now()
        for when, reading in readings.taken(previous, ended):
            if reading.clock_mhz is None:
                no_clock = True
                break
            if when - last_at >= SETTLE_SPACING_S:
                clocks.append(float(reading.clock_mhz))
                last_at = when
        if no_clock or readings.error is not None:
            break
        recent = clocks[-SETTLE_READINGS:]
        if len(recent) == SETTLE_READINGS and max(recent) <= min(recent) * (1 + SETTLE_TOLERANCE):
            settled = True
            break
        if ended - started >= max_s:
            settled = False if clocks else None
            break
    record = {"seconds": round(readings.now() - started, 4), "calls": calls,
              "clock_mhz_first": clocks[0] if clocks else None, "clock_mhz_settled": clocks[-1] if clocks else None,
              "settled": settled}
    if readings.error is not None:
        record["error"] = f"warm-up readings stopped: {readings.error}"
    return record


class DeviceReadings:
    """Reads ``backend`` from a thread every ``interval_s`` while the device works: ``(time, reading)`` pairs that
    :meth:`taken` hands back by time, for the warm-up and (:class:`RoundReadings`) the timed rounds.

    ``thread=False`` starts no thread: whoever drives the device calls :meth:`sample` (a test, a simulated GPU in
    its own time). ``now``: the clock the readings are placed on. A backend that fails stops the readings
    (``error`` says why); the thread also stops itself after :data:`ROUNDS_SILENT_S` with no work seen ending
    (:meth:`_last_seen`), and on :meth:`close` (or leaving a ``with`` block).

    >>> from accounting.telemetry.readings import Reading
    >>> class Backend:
    ...     def read(self, *, edge):
    ...         return Reading(0.0, clock_mhz=1455.0)
    >>> ticks = iter(range(10))
    >>> with DeviceReadings(Backend(), thread=False, now=lambda: next(ticks)) as readings:
    ...     readings.sample()
    >>> [(when, reading.clock_mhz) for when, reading in readings.taken(0, 5)]
    [(1, 1455.0)]
    """

    def __init__(self, backend, *, interval_s: float = ROUND_INTERVAL_S, now=time.perf_counter, thread: bool = True):
        self.backend = backend
        self.interval_s = interval_s
        self._now = now
        self._begun = now()
        self._samples = []
        self._error = None
        self._error_at = None
        self._stop = threading.Event()
        self._thread = None
        if thread:
            self._thread = threading.Thread(target=self._run, name="device-readings", daemon=True)
            self._thread.start()

    def now(self) -> float:
        """The time on the readings' clock."""
        return self._now()

    @property
    def error(self) -> str | None:
        """Why the readings stopped early (the backend failed), or ``None``."""
        return self._error

    def sample(self) -> None:
        """Read the device now (the thread's reading; without a thread, the caller's)."""
        if self._error is not None:
            return
        try:
            reading = self.backend.read(edge=False)
        except Exception as error:  # noqa: BLE001 - a failing backend ends the recording, never the timing
            self._error, self._error_at = f"{type(error).__name__}: {error}", self._now()
            return
        self._samples.append((self._now(), reading))

    def taken(self, after: float, until: float) -> list:
        """The ``(time, reading)`` pairs read after ``after`` and up to ``until``, in order."""
        return [(when, reading) for when, reading in list(self._samples) if after < when <= until]

    def _last_seen(self) -> float:
        """When work was last seen ending (here: when the readings began)."""
        return self._begun

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self._error is not None or self._now() - self._last_seen() > ROUNDS_SILENT_S:
                return
            self.sample()

    def close(self) -> None:
        """Stop the thread; the readings taken stay."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False


class RoundReadings(DeviceReadings):
    """Reads ``backend`` during the timed rounds; pass :meth:`teardown` as pytest-benchmark ``pedantic``'s teardown.

    ``warmup_rounds``: the calls ``pedantic`` makes before the timed ones (the first timed round begins when the
    last of them ends); ``rounds``: the timed rounds (teardowns beyond them, as pytest-benchmark's profiling
    calls, are not counted). ``interval_s``, ``now`` and ``thread`` as :class:`DeviceReadings`' (the round ends
    are placed on ``now`` too).

    >>> from accounting.telemetry.readings import Reading
    >>> class Backend:
    ...     clock = iter([1980.0, 1410.0, 1440.0])
    ...     def read(self, *, edge):
    ...         return Reading(0.0, clock_mhz=next(self.clock), throttle_reasons=("sw_power_cap",))
    >>> times = iter(range(100))
    >>> recorder = RoundReadings(Backend(), warmup_rounds=1, rounds=2, thread=False, now=lambda: next(times))
    >>> recorder.teardown()                      # the warm-up call ends: the first timed round begins
    >>> recorder.sample(); recorder.sample(); recorder.teardown()   # two readings during round 1
    >>> recorder.sample(); recorder.teardown()   # one during round 2
    >>> record = recorder.record()
    >>> record["clock_mhz"], record["throttle_reasons"], record["samples"]
    ([1695.0, 1440.0], [['sw_power_cap'], ['sw_power_cap']], [2, 1])
    """

    def __init__(self, backend, *, warmup_rounds: int, rounds: int, interval_s: float = ROUND_INTERVAL_S,
                 now=time.perf_counter, thread: bool = True):
        self.warmup_rounds = warmup_rounds
        self.rounds = rounds
        self._calls = 0
        self._ends = []  # before the thread starts: it reads them
        super().__init__(backend, interval_s=interval_s, now=now, thread=thread)

    def _last_seen(self) -> float:
        return self._ends[-1] if self._ends else self._begun

    def teardown(self, *args, **kwargs) -> None:  # noqa: ARG002 - pedantic passes the target's arguments
        """Mark the end of a round (nothing is read here: see the module docstring)."""
        self._calls += 1
        timed = self._calls - self.warmup_rounds
        if timed < 1:
            self._begun = self._now()  # a warm-up call ended: the timed rounds begin after it
        elif timed <= self.rounds:
            self._ends.append(self._now())
            if timed == self.rounds:
                self.close()

    def _nearest(self, at: float, first: float, last: float):
        """The reading taken during the timed rounds (``first``..``last``) nearest in time to ``at``."""
        during = [(abs(when - at), reading) for when, reading in self._samples if first < when <= last]
        return min(during, key=lambda pair: pair[0])[1] if during else None

    def record(self) -> dict:
        """The rounds' readings as ``extra_info["telemetry_rounds"]``: a list per field, one entry per round read."""
        self.close()
        ends = self._ends
        if self._error_at is not None:
            ends = [end for end in ends if end < self._error_at]
        record = {field: [] for field in (*ROUND_FIELDS, "samples")}
        start = self._begun
        for end in ends:
            own = [reading for when, reading in self._samples if start < when <= end]
            readings = own or [reading for reading in [self._nearest((start + end) / 2, self._begun, ends[-1])]
                               if reading is not None]
            for field, value in _round_values(readings).items():
                record[field].append(value)
            record["samples"].append(len(own))
            start = end
        record["read"] = READ_DURING
        if self._error is not None:
            record["error"] = f"round readings stopped after round {len(ends)}: {self._error}"
        return record


def _median(values):
    values = [value for value in values if value is not None]
    return statistics.median(values) if values else None


def _round_values(readings) -> dict:
    """One round's :data:`ROUND_FIELDS` from its readings (each ``None``, reasons empty, where it has none)."""
    reasons = []
    for reading in readings:
        reasons.extend(name for name in reading.throttle_reasons if name not in reasons)
    temperatures = [reading.temperature_c for reading in readings if reading.temperature_c is not None]
    return {"clock_mhz": _median(reading.clock_mhz for reading in readings),
            "power_w": _median(reading.power_w for reading in readings),
            "temperature_c": max(temperatures) if temperatures else None,
            "throttle_reasons": reasons}


def open_round_backend(device):
    """The telemetry backend that reads CUDA ``device`` round by round; ``None`` on the CPU or where no backend
    answers (no NVML, no AMD SMI: the rounds are then timed without readings)."""
    if getattr(device, "type", None) != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    backend = open_gpu_backend(index)
    return None if isinstance(backend, NoBackend) else backend
