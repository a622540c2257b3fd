"""What a GPU did during a benchmark's timed rounds, and whether that disturbed them.

A GPU idles at a few hundred MHz between jobs and reaches its working clock within a
fraction of a second of work; at full load it is held at its power limit, its clock moving
with the power (an H200 between 1410 and 1980 MHz under matmuls, throttle reason
``sw_power_cap``). So the load guard's readings before and after a pytest process
(:mod:`accounting.gate.guard`) say nothing about the clock the benchmarks ran at: the first
one reads the idle clock. On a GPU, *disturbed* is judged here, per benchmark, from the
telemetry of its timed rounds, against what the same benchmark did in the baseline runs:

- a throttle reason other than the power cap (:data:`NORMAL_AT_FULL_LOAD`) in any round — a
  thermal or hardware slowdown, a power brake — disturbs the benchmark's run;
- another process holding more than :data:`~accounting.gate.guard.OTHER_MEMORY_LIMIT_BYTES`
  on the device during the rounds disturbs it (a busy sibling GPU does not: it shares neither this
  GPU's power limit nor its memory);
- a round's clock outside the baseline runs' own range for the benchmark by more than
  :data:`~accounting.gate.guard.CLOCK_TOLERANCE` disturbs it, unless the power cap explains it:
  a lower clock in rounds the device itself reports as power-capped, or a higher one against
  baseline runs that were power-capped (same work, same power limit — the limits are compared
  exactly, :mod:`accounting.gate.settings`).

The reason names the rounds and the readings. Where a run recorded each round's readings
(``extra_info["telemetry_rounds"]``, written by the ``flops_benchmark`` fixture) they are judged
round by round; an older run has only its telemetry window over all rounds
(``extra_info["telemetry"]``: the mean clock, the reasons seen), judged as one stretch. A run
with neither (every CPU benchmark) is judged by nothing here: the CPU gate's rules are unchanged.

>>> capped = {"telemetry": {"clock_mhz_mean": 1624.0, "power_w_mean": 367.0, "throttle_reasons": ["sw_power_cap"]}}
>>> hot = {"telemetry": {"clock_mhz_mean": 1410.0, "power_w_mean": 690.0, "throttle_reasons": ["hw_thermal_slowdown"]}}
>>> cool = rounds_telemetry({"telemetry": {"clock_mhz_mean": 1980.0, "throttle_reasons": []}}, 20)
>>> rounds_disturbances(rounds_telemetry(capped, 20), [cool])
[]
>>> rounds_disturbances(rounds_telemetry(hot, 20), [cool])
['rounds 1-20 of 20 (one telemetry window) throttled (hw_thermal_slowdown) at 1410 MHz, 690 W']
"""

import math
import statistics
from dataclasses import dataclass

from accounting.bench.round_telemetry import READ_DURING
from accounting.gate.guard import CLOCK_TOLERANCE, NORMAL_AT_FULL_LOAD, OTHER_MEMORY_LIMIT_BYTES
from accounting.telemetry.validity import BUSY, OTHER_PROCESSES_HOLD

SETTING_REASONS = frozenset({"applications_clocks_setting"})
"""Throttle reasons that report a setting, compared exactly between runs rather than judged as a disturbance."""
ROUNDS_KEY = "telemetry_rounds"
"""``extra_info`` key of a benchmark's per-round readings (lists, one entry per timed round)."""
WINDOW_KEY = "telemetry"
"""``extra_info`` key of a benchmark's telemetry window over all its rounds (clock, power, reasons, tags)."""


@dataclass(frozen=True)
class Stretch:
    """Readings over consecutive rounds ``first``..``last`` (1-based): one round, or a window over all of them."""

    first: int
    last: int
    clock_mhz: float | None
    power_w: float | None
    reasons: tuple = ()
    other_memory_bytes: int | None = None
    busy: tuple = ()
    """Words of an older window's ``busy`` tag about other processes on the device (its bytes were not kept)."""


@dataclass(frozen=True)
class RoundsTelemetry:
    """What the device reported during a benchmark's timed rounds: one :class:`Stretch` per round, or one window."""

    rounds: int
    stretches: tuple
    per_round: bool
    window_reasons: tuple = ()
    """Throttle reasons the telemetry window over all rounds saw (it samples between the per-round readings too)."""
    read_during: bool = False
    """Whether the per-round readings were taken during the rounds (runs saved before read after each round)."""

    @property
    def clocks(self) -> list[float]:
        return [stretch.clock_mhz for stretch in self.stretches if stretch.clock_mhz is not None]

    @property
    def clock_mhz(self) -> float | None:
        """The clock the rounds ran at: the median of the rounds' clocks (a window: its mean)."""
        return statistics.median(self.clocks) if self.clocks else None

    @property
    def power_capped(self) -> bool:
        return any(set(stretch.reasons) & NORMAL_AT_FULL_LOAD for stretch in self.stretches)


def _number(value):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _entry(values, index):
    return values[index] if isinstance(values, list) and index < len(values) else None


def rounds_telemetry(extra_info: dict, rounds: int) -> RoundsTelemetry | None:
    """A benchmark's round telemetry from its ``extra_info`` (``None``: it recorded none, as every CPU benchmark).

    >>> per_round = {"telemetry_rounds": {"clock_mhz": [1980, 1410], "throttle_reasons": [[], ["hw_slowdown"]]}}
    >>> [(s.first, s.clock_mhz, s.reasons) for s in rounds_telemetry(per_round, 2).stretches]
    [(1, 1980.0, ()), (2, 1410.0, ('hw_slowdown',))]
    """
    recorded = extra_info.get(ROUNDS_KEY)
    window = extra_info.get(WINDOW_KEY) if isinstance(extra_info.get(WINDOW_KEY), dict) else None
    window_memory, window_busy = _window_sharing(window)
    if isinstance(recorded, dict) and isinstance(recorded.get("clock_mhz"), list):
        stretches = []
        for index in range(len(recorded["clock_mhz"])):
            reasons = _entry(recorded.get("throttle_reasons"), index) or ()
            memory = _number(_entry(recorded.get("other_process_memory_bytes"), index))
            memory = window_memory if memory is None else memory  # read at the window's edges only
            stretches.append(Stretch(index + 1, index + 1, _number(recorded["clock_mhz"][index]),
                                     _number(_entry(recorded.get("power_w"), index)), tuple(reasons),
                                     None if memory is None else int(memory), window_busy))
        return RoundsTelemetry(len(stretches), tuple(stretches), True,
                               tuple((window or {}).get("throttle_reasons") or ()), recorded.get("read") == READ_DURING)
    if window is None:
        return None
    stretch = Stretch(1, rounds, _number(window.get("clock_mhz_mean")), _number(window.get("power_w_mean")),
                      tuple(window.get("throttle_reasons") or ()),
                      None if window_memory is None else int(window_memory), window_busy)
    return RoundsTelemetry(rounds, (stretch,), False)


def _window_sharing(window: dict | None) -> tuple:
    """``(bytes other processes held on the device, their busy tag's words)`` of a telemetry window: its
    ``other_process_memory_bytes`` where kept, else (an older window) the ``busy`` tag's words about other
    processes. A busy sibling GPU, which older tags also named, shares nothing of this GPU and is left out."""
    memory = _number((window or {}).get("other_process_memory_bytes"))
    if memory is not None:
        return memory, ()
    words = [part.strip() for tag in (window or {}).get("tags") or () if str(tag).startswith(f"{BUSY}:")
             for part in str(tag).split(":", 1)[1].split(";") if part.strip().startswith(OTHER_PROCESSES_HOLD)]
    return None, tuple(words)


def _spans(numbers) -> str:
    """Round numbers as ranges: ``1-3, 7``."""
    spans, numbers = [], sorted(numbers)
    start = previous = numbers[0]
    for number in numbers[1:] + [None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        spans.append(f"{start}" if start == previous else f"{start}-{previous}")
        if number is not None:
            start = previous = number
    return ", ".join(spans)


def _readings(stretches) -> str:
    """The clocks and power of ``stretches``, as ranges."""
    parts = []
    for values, unit in (([s.clock_mhz for s in stretches if s.clock_mhz is not None], "MHz"),
                         ([s.power_w for s in stretches if s.power_w is not None], "W")):
        if values:
            low, high = min(values), max(values)
            parts.append(f"{low:.0f} {unit}" if round(low) == round(high) else f"{low:.0f}-{high:.0f} {unit}")
    return f" at {', '.join(parts)}" if parts else ""


def _where(telemetry: RoundsTelemetry, stretches) -> str:
    rounds = [number for stretch in stretches for number in range(stretch.first, stretch.last + 1)]
    word = "round" if len(rounds) == 1 else "rounds"
    window = "" if telemetry.per_round else " (one telemetry window)"
    return f"{word} {_spans(rounds)} of {telemetry.rounds}{window}"


def clock_range(baselines) -> tuple[float, float] | None:
    """The lowest and highest round clock of the baseline runs' telemetry (``None`` where none has a clock)."""
    clocks = [clock for telemetry in baselines if telemetry is not None for clock in telemetry.clocks]
    return (min(clocks), max(clocks)) if clocks else None


def rounds_disturbances(telemetry: RoundsTelemetry | None, baselines=()) -> list[str]:
    """Why a benchmark's rounds were disturbed (empty: they were not), judged against ``baselines`` (the same
    benchmark's :class:`RoundsTelemetry` in the baseline runs; without them the clock rule decides nothing)."""
    if telemetry is None:
        return []
    reasons = []
    names, hit = [], []
    for stretch in telemetry.stretches:
        names.extend(name for name in stretch.reasons
                     if name not in NORMAL_AT_FULL_LOAD | SETTING_REASONS and name not in names)
    if names:
        hit = [s for s in telemetry.stretches if set(s.reasons) & set(names)]
        reasons.append(f"{_where(telemetry, hit)} throttled ({', '.join(names)}){_readings(hit)}")
    between = [name for name in telemetry.window_reasons if name not in NORMAL_AT_FULL_LOAD | SETTING_REASONS
               and not any(name in stretch.reasons for stretch in telemetry.stretches)]
    if between:
        readings = "the rounds' own readings" if telemetry.read_during else "the readings after each round"
        reasons.append(f"throttled ({', '.join(between)}) during the rounds' telemetry window, between {readings}")
    shared = [s for s in telemetry.stretches
              if s.busy or (s.other_memory_bytes is not None and s.other_memory_bytes > OTHER_MEMORY_LIMIT_BYTES)]
    if shared:
        memory = max((s.other_memory_bytes or 0) for s in shared)
        busy = sorted({name for s in shared for name in s.busy})
        what = [f"other processes held {memory / 2**30:.1f} GiB on the device"] if memory > OTHER_MEMORY_LIMIT_BYTES else []
        what += busy
        reasons.append(f"{_where(telemetry, shared)}: {'; '.join(what)}")
    known = [telemetry_ for telemetry_ in baselines if telemetry_ is not None]
    span = clock_range(known)
    if span is not None:
        low, high = span
        baseline_capped = any(other.power_capped for other in known)
        outside = [s for s in telemetry.stretches if s.clock_mhz is not None and s not in hit and (
            (s.clock_mhz < low * (1 - CLOCK_TOLERANCE) and not set(s.reasons) & NORMAL_AT_FULL_LOAD)
            or (s.clock_mhz > high * (1 + CLOCK_TOLERANCE) and not baseline_capped))]
        if outside:
            reasons.append(f"{_where(telemetry, outside)}{_readings(outside)}: outside the baseline runs' "
                           f"{low:.0f}-{high:.0f} MHz by more than {CLOCK_TOLERANCE:.0%}, and not the power cap")
    return reasons


def clock_note(baseline_mhz: float | None, current_mhz: float | None, ratio: float | None) -> str:
    """What the clocks say of a time ratio: a slower clock, or a slower product per clock cycle ("" where unknown).

    The cycles a round took are its time × its clock; their ratio tells a product that needs more
    cycles from one that ran at a lower clock.

    >>> clock_note(1980.0, 1650.0, 1.19)
    'clock 1980 → 1650 MHz (-17 %): per clock cycle 0.992×, a slower clock, not a slower product'
    >>> clock_note(1980.0, 1980.0, 1.10)
    'clock 1980 → 1980 MHz (+0 %): per clock cycle 1.100×, a slower product at the same clock'
    """
    if not baseline_mhz or not current_mhz or ratio is None or not math.isfinite(ratio):
        return ""
    cycles = ratio * current_mhz / baseline_mhz
    change = (current_mhz / baseline_mhz - 1) * 100
    text = f"clock {baseline_mhz:.0f} → {current_mhz:.0f} MHz ({change:+.0f} %): per clock cycle {cycles:.3f}×"
    if abs(current_mhz / baseline_mhz - 1) <= CLOCK_TOLERANCE:
        return text + (", a slower product at the same clock" if ratio > 1 else ", at the same clock")
    if abs(cycles - 1) < abs(ratio - 1) / 2:
        return text + (", a slower clock, not a slower product" if ratio > 1 else ", a faster clock")
    return text + (", a slower product, not only a slower clock" if ratio > 1 else "")


def saved_run_lines(run) -> list[str]:
    """What ``gate save`` says of a saved run's GPU benchmarks (a :class:`accounting.gate.storage.SavedRun`): how long
    their warm-up to the working clock took, and which benchmarks' rounds were disturbed (they will be left out).

    >>> from accounting.gate.storage import BenchmarkRun, SavedRun
    >>> info = {"warmup": {"seconds": 0.12, "calls": 40, "clock_mhz_settled": 1980.0, "settled": True},
    ...         "telemetry": {"clock_mhz_mean": 1410.0, "throttle_reasons": ["hw_slowdown"]}}
    >>> for line in saved_run_lines(SavedRun("0001_a.json", {}, {"t::mm": BenchmarkRun("t::mm", (0.1,) * 5, info)})):
    ...     print(line)
    warm-up to the working clock: 0.12 s (1 of 1 benchmark(s) settled, at 1980 MHz)
    t::mm: rounds 1-5 of 5 (one telemetry window) throttled (hw_slowdown) at 1410 MHz; it will be left out
    """
    lines = []
    warmups = [bench.extra_info.get("warmup") for bench in run.benchmarks.values()]
    warmups = [warm for warm in warmups if isinstance(warm, dict) and _number(warm.get("seconds")) is not None]
    if warmups:
        seconds = [warm["seconds"] for warm in warmups]
        settled = [warm for warm in warmups if warm.get("settled")]
        clocks = sorted({round(warm["clock_mhz_settled"]) for warm in settled
                         if _number(warm.get("clock_mhz_settled")) is not None})
        span = f"{min(seconds):.2f} s" if min(seconds) == max(seconds) else f"{min(seconds):.2f}-{max(seconds):.2f} s"
        at = f", at {clocks[0]} MHz" if len(clocks) == 1 else (f", at {clocks[0]}-{clocks[-1]} MHz" if clocks else "")
        lines.append(f"warm-up to the working clock: {span} ({len(settled)} of {len(warmups)} benchmark(s) "
                     f"settled{at})")
    for name, bench in sorted(run.benchmarks.items()):
        reasons = rounds_disturbances(rounds_telemetry(bench.extra_info, len(bench.rounds)))
        if reasons:
            lines.append(f"{name}: {'; '.join(reasons)}; it will be left out")
    return lines


def screen_rounds(base, current, current_runs, load_guard: bool):
    """A benchmark's ``(path, BenchmarkRun)`` pairs of both sides less those whose timed rounds were disturbed
    (:func:`rounds_disturbances`: the baseline runs judged on their own, the current ones
    against the baseline's), a note per side for each left out (``{"baseline": [...], "current": [...]}``, without
    the benchmark's name), and each path's clock during the rounds."""
    telemetry = {path: rounds_telemetry(bench.extra_info, len(bench.rounds)) for path, bench in (*base, *current)}
    clocks = {path: value.clock_mhz for path, value in telemetry.items() if value is not None}
    notes = {"baseline": [], "current": []}
    if not load_guard:
        return base, current, notes, clocks
    labels = {run.path: run.label for run in current_runs}
    kept = {"baseline": [], "current": []}
    for side, pairs in (("baseline", base), ("current", current)):
        against = [telemetry[path] for path, _ in kept["baseline"]] if side == "current" else ()
        for path, bench in pairs:
            reasons = rounds_disturbances(telemetry[path], against)
            if reasons:
                label = labels.get(path) or path.rsplit("/", 1)[-1]
                notes[side].append(f"{side} run {label} not used, disturbed during its timed rounds: "
                                   f"{'; '.join(reasons)}")
            else:
                kept[side].append((path, bench))
    return kept["baseline"], kept["current"], notes, clocks


def side_clocks(clocks: dict, kept, current_kept) -> dict:
    """The :class:`accounting.gate.decide.Verdict` clock fields: the median clock of each side's runs compared, where recorded."""
    fields = {}
    for key, pairs in (("baseline_clock_mhz", kept), ("current_clock_mhz", current_kept)):
        values = [clocks[path] for path, _ in pairs if clocks.get(path) is not None]
        if values:
            fields[key] = statistics.median(values)
    return fields
