"""Burst and sustained headlines per dtype, each with the clock and power it ran at (after mamf-finder v4).

One best figure hides a 15–20 % gap: a GPU boosts on shapes that draw well below its
power limit and settles lower once hot and power-saturated. So, after the sweep:

- **burst** — the best single timed repetition, measured after a short idle (the
  best sweep shape, ``BURST_REPEATS`` repetitions), published only when the clock of
  its window is at least ``BURST_CLOCK_FRACTION`` × the run's highest clock. Every
  repetition of the sustained phase is a burst candidate too, so burst ≥ sustained.
- **sustained** — after a thermal soak (a large matmul for at most ``SOAK_MAX_S``,
  ended early once the clock is flat: ``FLAT_READINGS`` readings within ``FLAT_MHZ``),
  the top ``TOP_CANDIDATES`` sweep shapes are timed ``CANDIDATE_REPEATS`` times each and
  ranked by their trimmed centre; the best then must hold still through a lock-in of
  ``LOCK_IN_REPEATS`` repetitions whose spread ((max − min) / median) is at most
  ``LOCK_IN_MAX_SPREAD``, else the next candidate is tried. When none holds still, the
  steadiest is published with the tag ``unsteady`` (a noisy machine still gets a
  figure, marked; the spreads are in the JSON).

Energy per unit of work comes from the sustained lock-in window (joules per TFLOP).
Nothing here touches torch or a device: a :class:`HeadlineDevice` times repetitions
and reports each window's telemetry, so the logic is tested with fakes.

>>> trimmed_centre([1.0, 1.1, 1.2, 1.3, 9.0])
1.2
>>> round(spread([0.99, 1.0, 1.02]), 3)
0.03
"""

import math
import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Protocol

from accounting.telemetry.validity import validity_tags

BURST_CLOCK_FRACTION = 0.97
BURST_REPEATS = 5
IDLE_S = 1.0
"""Idle before each burst (shortened to a tenth of a dtype's share on small budgets)."""
SOAK_MAX_S = 20.0
SOAK_SHARE = 0.4
"""The soak takes at most this share of the headline budget (and never more than ``SOAK_MAX_S``)."""
SOAK_CHUNK_S = 0.5
"""The soak is timed in windows of about this long; each gives one clock reading."""
FLAT_READINGS = 3
FLAT_MHZ = 5.0
TOP_CANDIDATES = 3
CANDIDATE_REPEATS = 5
TRIM_FRACTION = 0.2
"""The trimmed centre drops this share of the repetitions at each end, then averages the rest."""
LOCK_IN_REPEATS = 9
LOCK_IN_MAX_SPREAD = 0.03
OVERRUN_SHARE = 0.25
"""A dtype's sustained lock-in may overrun the budget by at most this share of its part (see :func:`sustained`)."""
UNSTEADY = "unsteady"
"""The tag of a sustained figure whose lock-in never held within ``LOCK_IN_MAX_SPREAD``."""
WINDOW_OVERHEAD_S = 0.05
"""Planning allowance per timed window (telemetry edges, operands), on top of the repetitions."""
TERA = 1e12


@dataclass(frozen=True)
class Window:
    """Single repetitions timed together: seconds per repetition and the window's telemetry (``Summary.to_dict()``)."""

    samples: tuple[float, ...]
    telemetry: dict | None = None


class HeadlineDevice(Protocol):
    """What the headline logic needs from a device: timed repetitions, a clock to plan by, a way to idle."""

    def repeat(self, dtype: str, shape: tuple[int, int, int], repeats: int) -> Window: ...

    def clock(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


@dataclass(frozen=True)
class Candidate:
    """A sweep shape: its FLOPs per call and seconds per call (the sweep's median)."""

    shape: tuple[int, int, int]
    flops: int
    seconds: float


def trimmed_centre(samples, fraction: float = TRIM_FRACTION) -> float:
    """Mean of ``samples`` after dropping ``floor(fraction × n)`` of them at each end (a symmetric trim)."""
    ordered = sorted(samples)
    drop = math.floor(fraction * len(ordered))
    kept = ordered[drop:len(ordered) - drop] or ordered
    return statistics.fmean(kept)


def spread(samples) -> float:
    """``(max − min) / median`` of ``samples``."""
    return (max(samples) - min(samples)) / statistics.median(samples)


def clock_is_flat(clocks, *, readings: int = FLAT_READINGS, within_mhz: float = FLAT_MHZ) -> bool:
    """Whether the last ``readings`` clocks lie within ``within_mhz`` of each other.

    >>> clock_is_flat([1980, 1700, 1502, 1500, 1503]), clock_is_flat([1980, 1700, 1500])
    (True, False)
    """
    last = [clock for clock in clocks[-readings:] if clock is not None]
    return len(last) == readings and max(last) - min(last) <= within_mhz


def reproduce_command(dtype: str, shape, device: str, repeats: int) -> str:
    """A shell command that times ``shape`` the way the headline did (the package's own matmul case and timer).

    >>> reproduce_command("float32", (1024, 512, 256), "cpu", 9)  # doctest: +ELLIPSIS
    'python -c "from accounting.timing import matmul_case, time_fn; c = matmul_case(\\'float32\\', 1024, 512, 256, ...'
    """
    m, k, n = shape
    return (f"python -c \"from accounting.timing import matmul_case, time_fn; "
            f"c = matmul_case('{dtype}', {m}, {k}, {n}, '{device}'); "
            f"t = time_fn(c.fn, device='{device}', repeats={repeats}, min_time_s=0); "
            f"print(c.flops / t.median / 1e12, 'TFLOP/s')\"")


@dataclass(frozen=True)
class Headline:
    """One published (or withheld) headline figure; ``reason`` says why one is withheld."""

    dtype: str
    kind: str
    published: bool
    flops_per_s: float | None = None
    shape: tuple[int, int, int] | None = None
    flops: int | None = None
    repeats: int = 0
    clock_mhz: float | None = None
    power_w: float | None = None
    energy_j: float | None = None
    energy_source: str | None = None
    j_per_tflop: float | None = None
    tags: tuple[str, ...] = ()
    reason: str | None = None
    command: str | None = None
    telemetry: dict | None = field(default=None, repr=False)
    spreads: tuple[float, ...] = ()
    """Lock-in spreads of the candidates tried (sustained only), in order."""
    energy_unavailable: str | None = None
    """Why ``energy_j`` is ``None`` (from the telemetry), when it is."""

    @property
    def tflops(self) -> float | None:
        return None if self.flops_per_s is None else self.flops_per_s / TERA

    def to_dict(self) -> dict:
        """Plain JSON values."""
        out = asdict(self)
        out["shape"] = list(self.shape) if self.shape else None
        out["tags"] = list(self.tags)
        out["spreads"] = list(self.spreads)
        out["tflops"] = self.tflops
        return out


def _telemetry_value(telemetry, name):
    return None if telemetry is None else telemetry.get(name)


def _energy(window: Window, flops: int):
    """``(joules, source, J per TFLOP, reason)`` of a window of repetitions of ``flops`` each."""
    joules = _telemetry_value(window.telemetry, "energy_j")
    if joules is None:
        why = (window.telemetry or {}).get("unavailable", {}).get("energy_j", "no telemetry")
        return None, None, None, why
    work_tflop = flops * len(window.samples) / TERA
    return joules, window.telemetry.get("energy_source"), joules / work_tflop, None


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
        result.clocks.append(_telemetry_value(window.telemetry, "clock_mhz_mean"))
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


def _fits(device: HeadlineDevice, deadline: float, repeats: int, seconds: float, overhead_s: float = WINDOW_OVERHEAD_S,
          windows: int = 1) -> bool:
    return device.clock() + repeats * seconds + windows * overhead_s <= deadline


@dataclass
class _Trial:
    candidate: Candidate
    window: Window
    centre: float


def sustained(device: HeadlineDevice, dtype: str, candidates: list[Candidate], *, deadline: float,
              device_name: str = "cpu", overhead_s: float = WINDOW_OVERHEAD_S,
              overrun_s: float = 0.0) -> tuple[Headline, list[tuple[Window, Candidate]]]:
    """The sustained headline of ``dtype`` from its top ``candidates`` (best first), and every window it timed.

    When no candidate fits before ``deadline``, the cheapest one's lock-in still runs if its
    repetitions take at most ``overrun_s``.
    """
    windows: list[tuple[Window, Candidate]] = []
    trials = []
    fitting = [candidate for candidate in candidates
               if _fits(device, deadline, CANDIDATE_REPEATS + LOCK_IN_REPEATS, candidate.seconds, overhead_s, 2)]
    if not fitting and candidates:
        # Nothing fits what is left (a loaded machine made the earlier phases slow): the cheapest
        # candidate's lock-in still runs when it is short next to the budget, so a figure exists.
        cheapest = min(candidates, key=lambda candidate: candidate.seconds)
        if LOCK_IN_REPEATS * cheapest.seconds <= overrun_s:
            fitting = [cheapest]
    if len(fitting) == 1:  # nothing to rank: the lock-in's repetitions are its trimmed centre
        trials.append(_Trial(fitting[0], None, fitting[0].seconds))
    for candidate in fitting if len(fitting) > 1 else []:  # the fastest that fit, at most TOP_CANDIDATES
        if len(trials) == TOP_CANDIDATES:
            break
        if not _fits(device, deadline, CANDIDATE_REPEATS + LOCK_IN_REPEATS, candidate.seconds, overhead_s, 2):
            continue
        window = device.repeat(dtype, candidate.shape, CANDIDATE_REPEATS)
        windows.append((window, candidate))
        trials.append(_Trial(candidate, window, trimmed_centre(window.samples)))
    if not trials:
        return Headline(dtype, "sustained", False, reason="the budget left no time for a candidate's repetitions"), windows
    trials.sort(key=lambda trial: trial.candidate.flops / trial.centre, reverse=True)
    spreads, lock_ins = [], []
    for position, trial in enumerate(trials):
        # Planned by what the candidate window measured (its trimmed centre), not by the sweep's figure.
        per_call = trial.centre if trial.window is not None else trial.candidate.seconds
        fits = _fits(device, deadline, LOCK_IN_REPEATS, per_call, overhead_s)
        last_chance = not spreads and position == len(trials) - 1 and LOCK_IN_REPEATS * per_call <= overrun_s
        if not (fits or last_chance or len(trials) == 1):
            continue
        lock_in = device.repeat(dtype, trial.candidate.shape, LOCK_IN_REPEATS)
        windows.append((lock_in, trial.candidate))
        spreads.append(spread(lock_in.samples))
        lock_ins.append((lock_in, trial.candidate))
        if spreads[-1] <= LOCK_IN_MAX_SPREAD:
            return _sustained_headline(dtype, lock_in, trial.candidate, spreads, device_name), windows
    if not spreads:
        return Headline(dtype, "sustained", False,
                        reason="the budget left no time for a lock-in after the candidates' repetitions"), windows
    # No candidate held still: the steadiest is published, tagged as such (a noisy machine still gets a figure).
    position = min(range(len(spreads)), key=spreads.__getitem__)
    lock_in, candidate = lock_ins[position]
    tried = ", ".join(f"{value:.1%}" for value in spreads)
    headline = _sustained_headline(dtype, lock_in, candidate, spreads, device_name)
    unsteady = f"{UNSTEADY}: no candidate held still (lock-in spreads {tried} > {LOCK_IN_MAX_SPREAD:.0%})"
    return replace(headline, reason=unsteady), windows


def _sustained_headline(dtype, lock_in: Window, candidate: Candidate, spreads, device_name) -> Headline:
    joules, source, per_tflop, why = _energy(lock_in, candidate.flops)
    return Headline(
        dtype, "sustained", True, flops_per_s=candidate.flops / trimmed_centre(lock_in.samples),
        shape=candidate.shape, flops=candidate.flops, repeats=len(lock_in.samples),
        clock_mhz=_telemetry_value(lock_in.telemetry, "clock_mhz_mean"),
        power_w=_telemetry_value(lock_in.telemetry, "power_w_mean"), energy_j=joules, energy_source=source,
        j_per_tflop=per_tflop, energy_unavailable=why, telemetry=lock_in.telemetry, spreads=tuple(spreads),
        command=reproduce_command(dtype, candidate.shape, device_name, LOCK_IN_REPEATS),
    )


def burst(device: HeadlineDevice, dtype: str, candidate: Candidate, *, idle_s: float, share_s: float) -> Window:
    """Idle ``idle_s``, then time up to ``BURST_REPEATS`` single repetitions of the best shape (0.15 of ``share_s`` at most)."""
    device.sleep(idle_s)
    repeats = max(1, min(BURST_REPEATS, int(0.15 * share_s / candidate.seconds))) if candidate.seconds > 0 else BURST_REPEATS
    return device.repeat(dtype, candidate.shape, repeats)


def _best_repetition(windows_with_candidates):
    """``(flops_per_s, window, candidate, seconds)`` of the fastest single repetition over the windows."""
    best = None
    for window, candidate in windows_with_candidates:
        for seconds in window.samples:
            rate = candidate.flops / seconds
            if best is None or rate > best[0]:
                best = (rate, window, candidate, seconds)
    return best


def _window_clock_max(telemetry):
    return _telemetry_value(telemetry, "clock_mhz_max")


def measure_headlines(device: HeadlineDevice, candidates: dict[str, list[Candidate]], *, budget_s: float,
                      device_name: str = "cpu", sweep_telemetry=()) -> dict:
    """Burst and sustained headlines for every dtype within ``budget_s``; also the soak and the run's maxima.

    ``candidates`` per dtype: the sweep's shapes, fastest first. ``sweep_telemetry``: the
    sweep's windows' telemetry, so the run's highest clock and power count them too.
    Returns ``{"headlines": {dtype: {"burst": Headline, "sustained": Headline}}, "soak": Soak,
    "run_max_clock_mhz": ..., "run_max_power_w": ...}``.
    """
    dtypes = [dtype for dtype, shapes in candidates.items() if shapes]
    started = device.clock()
    share = budget_s / max(len(dtypes), 1)
    idle_s = min(IDLE_S, 0.1 * share)
    bursts = {}
    candidates = {dtype: list(shapes) for dtype, shapes in candidates.items()}
    overhead = WINDOW_OVERHEAD_S
    for dtype in dtypes:
        best = candidates[dtype][0]
        before = device.clock()
        window = burst(device, dtype, best, idle_s=idle_s, share_s=share)
        # What a window costs beyond its repetitions (telemetry edges: on a VM's CPU, clock measurements).
        overhead = max(overhead, device.clock() - before - idle_s - sum(window.samples))
        bursts[dtype] = (window, best)
        # The sweep timed this shape once, perhaps while the machine was busy: plan by the fresh median too.
        candidates[dtype][0] = replace(best, seconds=min(best.seconds, statistics.median(window.samples)))
    soaked = Soak()
    if dtypes:
        # The soak runs the first dtype's largest measured shape that fits a soak window, in what the
        # sustained phase (its cheapest candidate's repetitions, per dtype) leaves of the budget.
        first = candidates[dtypes[0]]
        fitting = [candidate for candidate in first if candidate.seconds <= SOAK_CHUNK_S] or first[-1:]
        large = max(fitting, key=lambda candidate: candidate.flops)
        needed = sum(3 * overhead + (CANDIDATE_REPEATS + LOCK_IN_REPEATS) * min(c.seconds for c in candidates[d])
                     for d in dtypes)
        left = budget_s - (device.clock() - started) - needed
        soak_s = min(SOAK_MAX_S, SOAK_SHARE * budget_s, left)
        if soak_s >= large.seconds + overhead:
            soaked = soak(device, dtypes[0], large, max_s=soak_s)
        else:
            soaked = Soak(dtype=dtypes[0], shape=large.shape, ended="skipped: the budget left no time")
    results = {}
    sustained_windows = {}
    for position, dtype in enumerate(dtypes):
        remaining = budget_s - (device.clock() - started)
        deadline = device.clock() + remaining / (len(dtypes) - position)
        results[dtype], windows = sustained(device, dtype, candidates[dtype], deadline=deadline, device_name=device_name,
                                            overhead_s=overhead, overrun_s=OVERRUN_SHARE * budget_s / len(dtypes))
        sustained_windows[dtype] = windows
    every_window = [window for window, _ in bursts.values()] + soaked.windows + [
        window for windows in sustained_windows.values() for window, _candidate in windows]
    telemetry = [window.telemetry for window in every_window] + list(sweep_telemetry)
    clocks = [_window_clock_max(summary) for summary in telemetry]
    clocks = [clock for clock in clocks if clock is not None]
    powers = [_telemetry_value(summary, "power_w_max") for summary in telemetry]
    powers = [power for power in powers if power is not None]
    run_max_clock = max(clocks) if clocks else None
    run_max_power = max(powers) if powers else None
    headlines = {}
    for dtype in dtypes:
        pool = [bursts[dtype]] + sustained_windows[dtype]
        headlines[dtype] = {
            "burst": _burst_headline(dtype, pool, run_max_clock, run_max_power, device_name),
            "sustained": _tagged(results[dtype], run_max_power, soaked.saturated_clock_mhz),
        }
    return {"headlines": headlines, "soak": soaked, "run_max_clock_mhz": run_max_clock, "run_max_power_w": run_max_power}


def _tagged(headline: Headline, run_max_power, saturated_clock) -> Headline:
    if not headline.published:
        return headline
    tags = validity_tags(headline.telemetry, run_max_power_w=run_max_power, saturated_clock_mhz=saturated_clock)
    if headline.reason and headline.reason.startswith(UNSTEADY):
        tags.append(headline.reason)
    return replace(headline, tags=tuple(tags))


def _burst_headline(dtype, pool, run_max_clock, run_max_power, device_name) -> Headline:
    rate, window, candidate, _seconds = _best_repetition(pool)
    # Its window's highest clock, against the run's highest: the same statistic on both sides, so the
    # noise of a measured clock (a VM's CPU: two readings per window) does not withhold it alone.
    clock = _window_clock_max(window.telemetry)
    tags = tuple(validity_tags(window.telemetry, run_max_power_w=run_max_power))
    common = dict(flops_per_s=rate, shape=candidate.shape, flops=candidate.flops, repeats=len(window.samples),
                  clock_mhz=clock, power_w=_telemetry_value(window.telemetry, "power_w_mean"), tags=tags,
                  telemetry=window.telemetry,
                  command=reproduce_command(dtype, candidate.shape, device_name, BURST_REPEATS))
    if clock is None or run_max_clock is None:
        return Headline(dtype, "burst", True, reason="clock unknown: the 0.97 × highest-clock rule was not checked",
                        **common)
    if clock < BURST_CLOCK_FRACTION * run_max_clock:
        return Headline(dtype, "burst", False, reason=(
            f"withheld: its clock {clock:.0f} MHz < {BURST_CLOCK_FRACTION} × the run's highest {run_max_clock:.0f} MHz"),
            **common)
    return Headline(dtype, "burst", True, **common)
