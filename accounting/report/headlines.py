"""Burst and sustained headlines per dtype, each with the clock and power it ran at (after mamf-finder v4).

One best figure hides a 15–20 % gap: a GPU boosts on shapes that draw well below its
power limit and settles lower once hot and power-saturated. So, after the sweep:

- **burst** — the best single timed repetition, measured after a short idle (the
  best sweep shape, ``BURST_REPEATS`` repetitions), published only when the clock of
  its window is at least ``BURST_CLOCK_FRACTION`` × the run's highest clock and the figure
  passes the physical check (:mod:`accounting.hardware.flops_per_clock`). Every repetition
  of the sustained phase is a burst candidate too, so burst ≥ sustained.
- **sustained** — after a thermal soak (:mod:`accounting.report.thermal_soak`: a large matmul of the dtype that
  draws the most power for at most ``SOAK_MAX_S``, ended early once the clock is flat),
  the top ``TOP_CANDIDATES`` sweep shapes are timed ``CANDIDATE_REPEATS`` times each and
  the fastest runs back to back (:func:`accounting.timing.time_back_to_back`: calls queued between one pair of
  events, no spin or synchronize between them), a ``LEAD_IN_S`` lead-in and then a window of at least one
  second (two where the budget allows), telemetry sampled throughout; the figure is the window's work over its time
  (first event to last), at the median clock of its readings and the energy counter's average power, published only
  with evidence of saturation
  (:mod:`accounting.report.saturation`), else withheld with the reason and the budget that
  would reach it.

Energy per unit of work comes from the sustained window (joules per TFLOP; the energy
counter over a window of a second or more). Nothing here touches torch or a device: a
:class:`~accounting.report.headline_device.HeadlineDevice` times repetitions and reports each
window's telemetry, so the logic is tested with fakes.

>>> trimmed_centre([1.0, 1.1, 1.2, 1.3, 9.0])
1.2
>>> round(spread([0.99, 1.0, 1.02]), 3)
0.03
"""

import math
import statistics
from dataclasses import asdict, dataclass, field, replace

from accounting.report.accumulation import case_options, default_key, split_key
from accounting.report.headline_device import Candidate, HeadlineDevice, Window
from accounting.report.saturation import (
    SUSTAINED_MIN_S,
    SUSTAINED_TARGET_S,
    figure_check,
    saturation_evidence,
    saturation_tags,
    soak_may_help,
    window_average_power_w,
    withheld_because,
)
from accounting.report.thermal_soak import SOAK_CHUNK_S, SOAK_MAX_S, SOAK_SHARE, Soak, soak, soak_dtype
from accounting.telemetry.validity import POWER_SUSPECT, summary_clock_mhz, tag_names, validity_tags, window_power_w

BURST_CLOCK_FRACTION = 0.97
BURST_REPEATS = 5
IDLE_S = 1.0
"""Idle before each burst (shortened to a tenth of a dtype's share on small budgets)."""
TOP_CANDIDATES = 3
CANDIDATE_REPEATS = 5
TRIM_FRACTION = 0.2
"""The trimmed centre drops this share of the repetitions at each end, then averages the rest."""
LEAD_IN_S = 0.25
"""Before its sustained window a dtype's shape runs this long untimed-for-the-figure (where the budget allows), so
the clock has settled on this dtype's load (the previous dtype's, or the soak's, differs) before the window opens."""
WINDOW_HEADROOM = 10.0
"""A sustained window may make this many times the calls planned, so calls faster than planned (a plan from a
noisy ranking) still fill its seconds; the seconds, not the count, end it."""
UNSTEADY_SPREAD = 0.03
"""A sustained window whose repetitions' interquartile range exceeds this share of their median is ``unsteady``."""
OVERRUN_SHARE = 0.25
"""A dtype's sustained window may overrun the budget by at most this share of its part (see :func:`sustained`)."""
UNSTEADY = "unsteady"
"""The tag of a sustained figure whose window's repetitions spread more than ``UNSTEADY_SPREAD``."""
WINDOW_OVERHEAD_S = 0.05
"""Planning allowance per timed window (telemetry edges, operands), on top of the repetitions."""
TERA = 1e12


def trimmed_centre(samples, fraction: float = TRIM_FRACTION) -> float:
    """Mean of ``samples`` after dropping ``floor(fraction × n)`` of them at each end (a symmetric trim)."""
    ordered = sorted(samples)
    drop = math.floor(fraction * len(ordered))
    kept = ordered[drop:len(ordered) - drop] or ordered
    return statistics.fmean(kept)


def spread(samples) -> float:
    """``(max − min) / median`` of ``samples``."""
    return (max(samples) - min(samples)) / statistics.median(samples)


def reproduce_command(dtype: str, shape, device: str, repeats: int, *, seconds: float | None = None) -> str:
    """A shell command that times ``shape`` the way the headline did (the package's own matmul case and timer):
    ``repeats`` calls each timed alone (:func:`accounting.timing.time_fn`, a burst), or with ``seconds`` calls back to
    back for that long (:func:`accounting.timing.time_back_to_back`, a sustained window).

    ``dtype`` may be a headline key naming an fp8 accumulation (:mod:`accounting.report.accumulation`).

    >>> reproduce_command("float32", (1024, 512, 256), "cpu", 9)  # doctest: +ELLIPSIS
    'python -c "from accounting.timing import matmul_case, time_fn; c = matmul_case(\\'float32\\', 1024, 512, 256, ...'
    >>> "fp8_fast_accum=False" in reproduce_command(default_key("float8_e4m3fn"), (64, 64, 64), "cuda:0", 9)
    True
    >>> "time_back_to_back(c.fn, seconds=2.07," in reproduce_command("bfloat16", (64, 64, 64), "cuda:0", 4400, seconds=2.07)
    True
    """
    m, k, n = shape
    name, accumulation = split_key(dtype)
    options = "".join(f", {key}={value!r}" for key, value in case_options(accumulation).items())
    case = f"c = matmul_case('{name}', {m}, {k}, {n}, '{device}'{options}); "
    if seconds is not None:
        return (f"python -c \"from accounting.timing import matmul_case, time_back_to_back; {case}"
                f"w = time_back_to_back(c.fn, seconds={seconds:.3g}, device='{device}', max_calls={repeats}, "
                f"flops=c.flops); print(w.flop_per_s / 1e12, 'TFLOP/s')\"")
    return (f"python -c \"from accounting.timing import matmul_case, time_fn; {case}"
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
    seconds: float | None = None
    """How long the figure's window of repetitions ran."""
    clock_mhz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    """The power limit the device enforced during the window (NVML's), where it says."""
    saturation: str | None = None
    """What shows a sustained window was saturated (its power against the limit, or a throttle reason)."""
    energy_j: float | None = None
    energy_source: str | None = None
    j_per_tflop: float | None = None
    tags: tuple[str, ...] = ()
    reason: str | None = None
    command: str | None = None
    telemetry: dict | None = field(default=None, repr=False)
    spreads: tuple[float, ...] = ()
    """The sustained window's spread (interquartile range over median of its repetitions)."""
    energy_unavailable: str | None = None
    """Why ``energy_j`` is ``None`` (from the telemetry), when it is."""
    needs_s: float | None = None
    """Headline seconds that were missing for the sustained window (withheld for want of budget)."""
    accumulation: str | None = None
    """How an fp8 product accumulated (``"fast"`` or ``"default"``); ``None`` for other dtypes."""

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
    work_tflop = flops * window.call_count / TERA
    return joules, window.telemetry.get("energy_source"), joules / work_tflop, None


def _fits(device: HeadlineDevice, deadline: float, repeats: int, seconds: float, overhead_s: float = WINDOW_OVERHEAD_S,
          windows: int = 1, then_s: float = 0.0) -> bool:
    return device.clock() + repeats * seconds + windows * overhead_s + then_s <= deadline


def window_spread(samples) -> float:
    """Interquartile range over median of a window's repetitions (its steadiness; single outliers do not move it).

    >>> window_spread([1.0] * 10 + [2.0])
    0.0
    """
    if len(samples) < 4:
        return spread(samples)
    quartiles = statistics.quantiles(samples, n=4)
    return (quartiles[2] - quartiles[0]) / statistics.median(samples)


def _rank(device, dtype, candidates, deadline, overhead_s, windows) -> tuple[Candidate, float]:
    """The candidate to sustain and its seconds per call: the fastest of up to ``TOP_CANDIDATES`` timed
    ``CANDIDATE_REPEATS`` times each (by their trimmed centre), where that leaves room for the window."""
    trials = []
    for candidate in candidates:
        if len(trials) == TOP_CANDIDATES or len(candidates) == 1:
            break
        if not _fits(device, deadline, CANDIDATE_REPEATS, candidate.seconds, overhead_s, 2, SUSTAINED_MIN_S):
            continue
        window = device.repeat(dtype, candidate.shape, CANDIDATE_REPEATS)
        windows.append((window, candidate))
        trials.append((candidate, trimmed_centre(window.samples)))
    if not trials:
        return candidates[0], candidates[0].seconds
    return max(trials, key=lambda trial: trial[0].flops / trial[1])


def _most_calls(seconds: float, per_call: float) -> int:
    """The calls a window of ``seconds`` may make: ``WINDOW_HEADROOM`` × those planned at ``per_call`` seconds each
    (the window stops once ``seconds`` of them have passed)."""
    return max(1, math.ceil(WINDOW_HEADROOM * seconds / per_call)) if per_call > 0 else 1


def sustained(device: HeadlineDevice, dtype: str, candidates: list[Candidate], *, deadline: float,
              device_name: str = "cpu", overhead_s: float = WINDOW_OVERHEAD_S, overrun_s: float = 0.0,
              physical=None, target_s: float = SUSTAINED_TARGET_S) -> tuple[Headline, list[tuple[Window, Candidate]]]:
    """The sustained headline of ``dtype`` from its ``candidates`` (best first), and every window it timed.

    The fastest candidate (ranked when there is time) runs back to back for ``target_s`` or what is left
    before ``deadline``, at least ``SUSTAINED_MIN_S`` (which may overrun the deadline by ``overrun_s``);
    the figure is the window's work over its time, and it is published only as
    :func:`accounting.report.saturation.withheld_because` allows (``physical``: ``(compute capability,
    SM count)`` for the physical check). A window the budget cannot give is not run: the headline is
    withheld with ``needs_s``, the headline seconds that were missing.
    """
    windows: list[tuple[Window, Candidate]] = []
    if not candidates:
        return Headline(split_key(dtype)[0], "sustained", False, reason="no candidate shape to sustain"), windows
    chosen, per_call = _rank(device, dtype, candidates, deadline, overhead_s, windows)
    room = deadline - device.clock() - overhead_s
    seconds = min(target_s, room)
    if room - seconds < LEAD_IN_S + overhead_s and room >= SUSTAINED_MIN_S + LEAD_IN_S + overhead_s:
        seconds = room - LEAD_IN_S - overhead_s  # a shorter window, and the lead-in before it
    if seconds < SUSTAINED_MIN_S:
        if SUSTAINED_MIN_S > room + overrun_s:
            return Headline(split_key(dtype)[0], "sustained", False, shape=chosen.shape, flops=chosen.flops, reason=(
                f"the budget left {max(room, 0.0):.2f} s for the window, under the {SUSTAINED_MIN_S:g} s a "
                "sustained figure needs"), needs_s=SUSTAINED_MIN_S - max(room, 0.0)), windows
        seconds = SUSTAINED_MIN_S
    if room - seconds >= LEAD_IN_S + overhead_s:  # the clock settles on this dtype's load before the window
        lead_in = device.repeat(dtype, chosen.shape, _most_calls(LEAD_IN_S, per_call), seconds=LEAD_IN_S)
        windows.append((lead_in, chosen))
    window = device.repeat(dtype, chosen.shape, _most_calls(seconds, per_call), seconds=seconds)
    windows.append((window, chosen))
    return _sustained_headline(dtype, window, chosen, device_name, physical), windows


def _sustained_headline(dtype, window: Window, candidate: Candidate, device_name, physical) -> Headline:
    joules, source, per_tflop, why = _energy(window, candidate.flops)
    seconds = window.window_s
    calls = window.call_count
    rate = candidate.flops * calls / seconds if seconds > 0 else None
    name = split_key(dtype)[0]
    reason = withheld_because(window.telemetry, seconds=seconds, flops_per_s=rate, dtype=name, physical=physical)
    steadiness = window_spread(window.samples)
    return Headline(
        name, "sustained", reason is None, flops_per_s=rate,
        shape=candidate.shape, flops=candidate.flops, repeats=calls, seconds=seconds,
        clock_mhz=summary_clock_mhz(window.telemetry), power_w=window_average_power_w(window.telemetry),
        power_limit_w=_telemetry_value(window.telemetry, "power_limit_w"),
        saturation=saturation_evidence(window.telemetry), energy_j=joules, energy_source=source,
        j_per_tflop=per_tflop, energy_unavailable=why, telemetry=window.telemetry, spreads=(steadiness,),
        reason=None if reason is None else f"withheld: {reason}",
        command=reproduce_command(dtype, candidate.shape, device_name, calls,
                                  seconds=seconds if window.seconds is not None else None),
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


def headline_budget_advice(extra_s: float) -> str:
    """What a withheld sustained figure says it would take, where the caller knows no more than the headline phase.

    >>> headline_budget_advice(0.42)
    '0.4 s more for the headline phase would reach it'
    """
    return f"{extra_s:.1f} s more for the headline phase would reach it"


def measure_headlines(device: HeadlineDevice, candidates: dict[str, list[Candidate]], *, budget_s: float,
                      device_name: str = "cpu", sweep_telemetry=(), physical=None,
                      budget_advice=headline_budget_advice, accumulations=None) -> dict:
    """Burst and sustained headlines for every dtype within ``budget_s``; also the soak and the run's maxima.

    ``candidates`` per dtype: the sweep's shapes, fastest first. ``sweep_telemetry``: the
    sweep's windows' telemetry, so the run's highest clock and power count them too.
    ``physical``: ``(compute capability, SM count)`` for the physical check of every figure;
    ``budget_advice(extra_headline_s)``: the words a sustained figure withheld for want of time ends with
    (the report names the ``--budget`` that would reach it). ``accumulations``: per dtype, the fp8
    accumulation its products used (``"fast"``/``"default"``), named on its figures.
    Returns ``{"headlines": {dtype: {"burst": Headline, "sustained": Headline}}, "soak": Soak,
    "run_max_clock_mhz": ..., "run_max_power_w": ..., "power_limit_w": ...}``.
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
        # The soak runs the most power-hungry dtype's largest measured shape that fits a soak window, in what
        # the sustained phase (ranking and a SUSTAINED_MIN_S window per dtype) leaves of the budget.
        heating = soak_dtype(dtypes)
        first = candidates[heating]
        fitting = [candidate for candidate in first if candidate.seconds <= SOAK_CHUNK_S] or first[-1:]
        large = max(fitting, key=lambda candidate: candidate.flops)
        needed = sum(4 * overhead + CANDIDATE_REPEATS * TOP_CANDIDATES * min(c.seconds for c in candidates[d])
                     + SUSTAINED_MIN_S + LEAD_IN_S for d in dtypes)
        left = budget_s - (device.clock() - started) - needed
        soak_s = min(SOAK_MAX_S, SOAK_SHARE * budget_s, left)
        if soak_s >= large.seconds + overhead:
            soaked = soak(device, heating, large, max_s=soak_s)
        else:
            soaked = Soak(dtype=heating, shape=large.shape, ended="skipped: the budget left no time")
    results = {}
    sustained_windows = {}
    for position, dtype in enumerate(dtypes):
        remaining = budget_s - (device.clock() - started)
        deadline = device.clock() + remaining / (len(dtypes) - position)
        results[dtype], windows = sustained(device, dtype, candidates[dtype], deadline=deadline, device_name=device_name,
                                            overhead_s=overhead, overrun_s=OVERRUN_SHARE * budget_s / len(dtypes),
                                            physical=physical)
        sustained_windows[dtype] = windows
    every_window = [window for window, _ in bursts.values()] + soaked.windows + [
        window for windows in sustained_windows.values() for window, _candidate in windows]
    telemetry = [window.telemetry for window in every_window] + list(sweep_telemetry)
    run_max_clock = _highest(telemetry, "clock_mhz_max")
    run_max_power = _highest(telemetry, "power_w_max")
    limits = [value for value in (_telemetry_value(summary, "power_limit_w") for summary in telemetry) if value]
    headlines = {}
    for dtype in dtypes:
        pool = [bursts[dtype]] + sustained_windows[dtype]
        accumulation = (accumulations or {}).get(dtype)
        steady = _advised(results[dtype], soaked, budget_advice)
        headlines[dtype] = {
            "burst": replace(_burst_headline(dtype, pool, run_max_clock, device_name, physical),
                             accumulation=accumulation),
            "sustained": replace(_tagged(steady, _saturated_clock(soaked, dtype)), accumulation=accumulation),
        }
    return {"headlines": headlines, "soak": soaked, "run_max_clock_mhz": run_max_clock, "run_max_power_w": run_max_power,
            "power_limit_w": min(limits) if limits else None}


def _saturated_clock(soaked: Soak, dtype: str):
    """The soak's settled clock where ``dtype`` is what it soaked with (``None`` otherwise): each dtype saturates
    its power at a clock of its own (the recorded H200: bf16 at 1455 MHz, fp8 at 1325), so another dtype's settled
    clock says nothing about whether this one was still boosting."""
    if soaked.dtype is None or split_key(soaked.dtype)[0] != split_key(dtype)[0]:
        return None
    return soaked.saturated_clock_mhz


def _highest(telemetry, name):
    values = [value for value in (_telemetry_value(summary, name) for summary in telemetry) if value is not None]
    return max(values) if values else None


def _advised(headline: Headline, soaked: Soak, budget_advice) -> Headline:
    """A withheld sustained figure's reason, ending with what would reach it."""
    if headline.published or not headline.reason:
        return headline
    if headline.needs_s is not None:
        return replace(headline, reason=f"{headline.reason}; {budget_advice(headline.needs_s)}")
    if soak_may_help(headline.telemetry) and soaked.seconds < SOAK_MAX_S:
        soak_more = SOAK_MAX_S - soaked.seconds
        return replace(headline, reason=f"{headline.reason}; a {SOAK_MAX_S:g} s thermal soak may reach it: "
                                        f"{budget_advice(soak_more)}", needs_s=soak_more)
    return headline


def _tagged(headline: Headline, saturated_clock) -> Headline:
    if headline.telemetry is None:
        return headline
    tags = validity_tags(headline.telemetry, saturated_clock_mhz=saturated_clock)
    tags += saturation_tags(headline.telemetry) if headline.published else []
    if headline.spreads and headline.spreads[0] > UNSTEADY_SPREAD:
        tags.append(f"{UNSTEADY}: the window's repetitions spread {headline.spreads[0]:.1%} "
                    f"(interquartile range over median) > {UNSTEADY_SPREAD:.0%}")
    return replace(headline, tags=tuple(tags))


def _burst_headline(dtype, pool, run_max_clock, device_name, physical=None) -> Headline:
    rate, window, candidate, _seconds = _best_repetition(pool)
    # Its window's highest clock, against the run's highest: the same statistic on both sides, so the
    # noise of a measured clock (a VM's CPU: two readings per window) does not withhold it alone.
    clock = _window_clock_max(window.telemetry)
    # A burst is by definition not power-saturated (an idle device, a few products): power-suspect says nothing.
    tags = tuple(tag for tag in validity_tags(window.telemetry) if tag_names([tag]) != [POWER_SUSPECT])
    common = dict(flops_per_s=rate, shape=candidate.shape, flops=candidate.flops, repeats=window.call_count,
                  seconds=window.window_s, clock_mhz=clock, power_w=window_power_w(window.telemetry),
                  power_limit_w=_telemetry_value(window.telemetry, "power_limit_w"), tags=tags,
                  telemetry=window.telemetry,
                  command=reproduce_command(dtype, candidate.shape, device_name, BURST_REPEATS))
    name = split_key(dtype)[0]  # a headline key may name an fp8 accumulation
    impossible = figure_check(rate, name, clock, physical)
    if impossible:
        return Headline(name, "burst", False, reason=f"withheld: {impossible}", **common)
    if clock is None or run_max_clock is None:
        return Headline(name, "burst", True,
                        reason=f"clock unknown: the {BURST_CLOCK_FRACTION} × highest-clock rule was not checked", **common)
    if clock < BURST_CLOCK_FRACTION * run_max_clock:
        return Headline(name, "burst", False, reason=(
            f"withheld: its clock {clock:.0f} MHz < {BURST_CLOCK_FRACTION} × the run's highest {run_max_clock:.0f} MHz"),
            **common)
    return Headline(name, "burst", True, **common)
