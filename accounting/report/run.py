"""The report from start to end: plan it (device, dtypes, peaks, floors), measure, assemble.

:func:`prepare` does everything that can fail on bad input, quickly and before any
measuring, and returns the :class:`~accounting.report.report_plan.Plan`; :func:`build_report`
then measures within the budget (bandwidth, the sweep or the quick level's one product, the
headlines, the sustained phase) and returns the document of :mod:`accounting.report.results`,
put together by :mod:`accounting.report.assembly`.
"""

import math
import os
import time

from accounting._units import GB
from accounting.bench.matrix import BENCHMARKS_ENV, load_benchmarks
from accounting.console import tflops
from accounting.errors import AccountingError
from accounting.hardware.cpu_clock import CPU_GHZ_ENV
from accounting.hardware.devices import (
    DeviceInfo,
    cuda_device_names,
    detect_device,
    free_memory_bytes,
    release_cached_memory,
)
from accounting.hardware.native import native_matmul
from accounting.hardware.peaks import (
    PEAK_TFLOPS_ENV,
    chip_row,
    device_peak_flops,
    find_chip,
    peak_bandwidth,
)
from accounting.memory import format_name
from accounting.report import headlines as headline_phase
from accounting.report import measure as measuring
from accounting.report.accumulation import DEFAULT, accumulation_note, default_key, is_fp8, split_key
from accounting.report.assembly import (  # noqa: F401 (preview, telemetry_section: importable from here as before)
    check_evidence,
    dtype_sections,
    machine_of,
    preview,
    telemetry_section,
    throttle_reasons_seen,
)
from accounting.report.burn import burn, burn_seconds, burn_size
from accounting.report.checks import ResultChecker
from accounting.report.health_counters import HealthWindows, device_counters, read_under_load
from accounting.report.health_section import checks_document, health_document, judge_devices
from accounting.report.levels import LONG, QUICK, QUICK_SIZE, QUICK_TARGET_S, STANDARD, level_named, report_budget_s
from accounting.report.report_plan import (  # noqa: F401 (describe_device, mfu_against: importable from here as before)
    Plan,
    describe_device,
    mfu_against,
    not_native_note,
    peak_source,
)
from accounting.report.results import assemble, bandwidth_section
from accounting.report.saturation import physical_facts
from accounting.report.sweep import Sweep
from accounting.timing import MEMORY_FRACTION, matmul_case

START_SIZE = {"cpu": 256, "cuda": 512}
"""First ramp size per device kind (smaller GPU products only measure launch overhead)."""

TARGET_SHAPES_PER_DTYPE = 24
"""Each shape is timed for about ``1 / TARGET_SHAPES_PER_DTYPE`` of its dtype's share of the budget
(the wave-aware sweep takes about this many: a ramp of one size per octave, 9 whole-wave seeds,
a K sweep and a refine; at 12, four dtypes on a GPU in 60 s had time for the ramp and little else)…"""
MIN_SHAPE_TARGET_S = 0.02
MAX_SHAPE_TARGET_S = 1.0
"""…but never less than ``MIN_SHAPE_TARGET_S`` nor more than ``MAX_SHAPE_TARGET_S``."""

FINISH_RESERVE_FRACTION = 0.03
"""Share of the budget kept back for rendering, the JSON and the plot."""

HEADLINE_FRACTION = 0.3
"""Share of the measuring budget for the burst and sustained headlines (:mod:`accounting.report.headlines`)."""

BUSY_LOAD_FRACTION = 0.5
"""A 1-minute load average above this share of the logical CPUs means other work is running: say so."""

PROBE_SIZE = 64
"""Edge of the tiny product that checks a dtype runs on the device at all (float8 needs multiples of 16)."""


def _probe(dtype: str, info: DeviceInfo) -> str | None:
    """``None`` when a tiny ``dtype`` product runs on the device, else why not."""
    try:
        matmul_case(dtype, PROBE_SIZE, PROBE_SIZE, PROBE_SIZE, info.device).fn()
    except (AccountingError, RuntimeError, NotImplementedError) as error:
        return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return None


def _floor(config, kind: str, dtype: str, chip: str):
    if config is None:
        return None
    try:
        return config.floor(kind, dtype, chip=chip)
    except AccountingError:
        return None


def prepare(*, device=None, dtypes=None, budget_s: float) -> Plan:
    """Detect the device, settle the dtypes and look up their peaks and floors.

    The default dtypes (``benchmarks.json``) are those the device runs natively
    (:func:`accounting.hardware.native.native_matmul`); each one dropped gets a note saying
    why and how to time it anyway. A dtype asked for with ``dtypes`` that the device
    only emulates is measured, and judged against no floor.

    Raises :class:`AccountingError` (one line, naming the value) for an unknown or
    unavailable device, an unknown dtype or one this device cannot run.
    """
    info = detect_device(device)
    notes = []
    try:
        config = load_benchmarks()
    except AccountingError as error:
        if dtypes is None:
            raise AccountingError(
                f"{error} (the benchmarks file gives the default dtypes: fix it, point ${BENCHMARKS_ENV} "
                "at another, or pass --dtypes)"
            ) from None
        config = None
        notes.append(f"no MFU floors: {error}")
    if dtypes is None:
        chosen = list(config.device(info.kind).dtypes)
        explicit = False
    else:
        chosen = []
        for name in dtypes:
            try:
                canonical = format_name(name)
            except AccountingError as error:
                raise AccountingError(f"--dtypes: {error}") from None
            if canonical not in chosen:
                chosen.append(canonical)
        explicit = True
    answers = {dtype: native_matmul(info, dtype) for dtype in chosen}
    runnable = []
    for dtype in chosen:
        answer = answers[dtype]
        if not explicit and not answer.native:
            notes.append(not_native_note(answer, info))
            continue
        why = _probe(dtype, info) if answer.runs else answer.reason
        if why is None:
            runnable.append(dtype)
        elif explicit:
            raise AccountingError(f"--dtypes: {dtype} cannot run on {info.device}: {why}")
        else:
            notes.append(f"{dtype} skipped: it cannot run on {info.device}: {why}")
    if not runnable:
        raise AccountingError(f"none of the dtypes {', '.join(chosen)} can run on {info.device}")
    chip = find_chip(info.name, arch=info.arch) if info.kind == "cuda" else None
    peaks = {dtype: device_peak_flops(info, dtype) for dtype in runnable}
    sources = {dtype: peak_source(info, dtype, chip) for dtype in runnable}
    floors = {dtype: _floor(config, info.kind, dtype, chip_row(info)) if answers[dtype].native else None
              for dtype in runnable}
    spec_bandwidth = peak_bandwidth(info.name, arch=info.arch) if chip is not None else None
    if info.kind == "cpu":
        notes.append(f"CPU peaks are estimates (clock from {info.clock_source}; override with ${CPU_GHZ_ENV} "
                     f"or ${PEAK_TFLOPS_ENV}); CPUs have no spec bandwidth figure")
    elif len(names := cuda_device_names()) > 1:
        others = [f"cuda:{index} {name}" for index, name in enumerate(names) if index != info.index]
        notes.append(f"other CUDA devices, not tested (pick one with --device): {'; '.join(others)}")
    load = _load_average()
    logical = os.cpu_count() or 1
    if load is not None and load > BUSY_LOAD_FRACTION * logical:
        notes.append(f"load average {load:.1f} on {logical} logical CPUs before measuring: other work is running, "
                     "so figures may read low (CPU matmuls most of all)")
    return Plan(info, runnable, peaks, sources, floors, spec_bandwidth, budget_s, device, notes, load,
                native={dtype: answers[dtype] for dtype in runnable})


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # not on every platform
        return None


def headline_candidates(sweeps: dict) -> dict:
    """Per dtype, the sweep's distinct shapes as headline candidates, fastest first."""
    candidates = {}
    for dtype, measurements in sweeps.items():
        seen, ranked = set(), []
        for done in sorted(measurements, key=lambda done: done.flops_per_second, reverse=True):
            if done.shape not in seen:
                seen.add(done.shape)
                ranked.append(headline_phase.Candidate(done.shape, done.flops, done.seconds))
        candidates[dtype] = ranked
    return candidates


def report_budget_advice(budget_s: float, level: str):
    """``advice(extra_headline_s)``: the ``--budget`` that gives the headline phase ``extra_headline_s`` more.

    The headline phase gets ``HEADLINE_FRACTION`` of what the finishing reserve leaves of the standard part
    (at ``long``, :func:`~accounting.report.levels.report_budget_s`), so each extra second of it costs
    ``1 / (HEADLINE_FRACTION × (1 − FINISH_RESERVE_FRACTION))`` seconds of that part.

    >>> report_budget_advice(60.0, "standard")(1.5)
    '--budget 66 would reach it'
    >>> report_budget_advice(600.0, "long")(1.5)
    '--budget 611 would reach it'
    """
    share = report_budget_s(level, budget_s) / budget_s if budget_s > 0 else 1.0

    def advice(extra_s: float) -> str:
        needed = budget_s + extra_s / (HEADLINE_FRACTION * (1 - FINISH_RESERVE_FRACTION)) / share
        return f"--budget {math.ceil(needed)} would reach it"
    return advice


FP8_DEFAULT_MIN_SHARE_S = 1.5
"""fp8 is measured with default accumulation too when each headline key's part of what the soak leaves of the
headline budget is at least this (a one-second sustained window and its ranking)."""


def with_fp8_default_accumulation(candidates: dict, headline_budget_s: float, notes: list) -> dict:
    """``candidates`` plus, for each fp8 dtype, its shapes again under the default-accumulation key
    (:func:`accounting.report.accumulation.default_key`) where the budget allows; a note says when it does not.
    On ROCm, where torch ignores ``use_fast_accum``, the dtype is its own default key: it is timed once, and a note
    (:func:`accounting.report.accumulation.accumulation_note`) says why there is one figure.

    >>> shapes = {"bfloat16": ["a"], "float8_e4m3fn": ["b"]}
    >>> list(with_fp8_default_accumulation(shapes, 17.0, []))
    ['bfloat16', 'float8_e4m3fn', 'float8_e4m3fn (default accumulation)']
    >>> notes = []; list(with_fp8_default_accumulation(shapes, 3.0, notes)), notes[0][:60]
    (['bfloat16', 'float8_e4m3fn'], 'float8_e4m3fn with default accumulation not measured: the he')
    """
    fp8 = [dtype for dtype, shapes in candidates.items() if shapes and is_fp8(dtype)]
    notes.extend(note for note in map(accumulation_note, fp8) if note)  # ROCm: one kernel, said and timed once
    fp8 = [dtype for dtype in fp8 if default_key(dtype) != dtype]
    if not fp8:
        return candidates
    keys = len([shapes for shapes in candidates.values() if shapes]) + len(fp8)
    share = headline_budget_s * (1 - headline_phase.SOAK_SHARE) / keys
    if share < FP8_DEFAULT_MIN_SHARE_S:
        for dtype in fp8:
            notes.append(f"{dtype} with default accumulation not measured: the headline phase's {headline_budget_s:.1f} s "
                         f"leave {share:.1f} s a figure, under {FP8_DEFAULT_MIN_SHARE_S:g} s (its figures are with "
                         "fast accumulation only)")
        return candidates
    extended = dict(candidates)
    for dtype in fp8:
        extended[default_key(dtype)] = list(candidates[dtype])
    return extended


def fold_accumulations(found: dict, checks: dict) -> dict:
    """The headlines of default-accumulation keys moved under their dtype's ``"default_accumulation"``, each
    sustained figure with its product's result check (``checks``: by key, from the timer)."""
    headlines = found.get("headlines")
    if not headlines:
        return found
    folded = {}
    for key, figures in headlines.items():
        dtype, accumulation = split_key(key)
        if accumulation == DEFAULT and key != dtype:
            figures = dict(figures, check=checks.get(key))
            folded.setdefault(dtype, {})["default_accumulation"] = figures
        else:
            folded.setdefault(dtype, {}).update(figures)
    return {**found, "headlines": folded}


def max_sizes(plan: Plan) -> dict:
    """Largest square size per dtype that fits the device's free memory."""
    free = free_memory_bytes(plan.info.device)
    return {dtype: measuring.largest_square(dtype, free, fraction=MEMORY_FRACTION) for dtype in plan.dtypes}


def sweep_budget_s(budget_s: float, spent_s: float) -> float:
    """The matmul sweep's part of a report's ``budget_s`` once ``spent_s`` is gone (the bandwidth copy):
    what is left after the finishing reserve, less the headlines' share.

    >>> round(sweep_budget_s(60.0, 1.0), 3)
    40.04
    """
    return max(budget_s * (1 - FINISH_RESERVE_FRACTION) - spent_s, 1e-3) * (1 - HEADLINE_FRACTION)


def make_sweep(plan: Plan, *, sweep_budget_s: float, clock=time.monotonic, on_measurement=None, case_factory=None,
               telemetry: str | None = None, checker: ResultChecker | None = None) -> tuple:
    """The report's timer and its wave-aware :class:`~accounting.report.sweep.Sweep` over ``sweep_budget_s``.

    Each shape is timed for about ``1 / TARGET_SHAPES_PER_DTYPE`` of a dtype's share (within
    ``MIN_SHAPE_TARGET_S`` … ``MAX_SHAPE_TARGET_S``); sizes stop where memory does
    (:func:`max_sizes`); the sweep seeds whole waves of the device (:func:`~accounting.report.measure.wave_grid`).
    Returns ``(timer, sweep)``: the timer also times the headlines' single repetitions.
    """
    info = plan.info
    share = sweep_budget_s / len(plan.dtypes)
    target = min(MAX_SHAPE_TARGET_S, max(MIN_SHAPE_TARGET_S, share / TARGET_SHAPES_PER_DTYPE))
    limits = max_sizes(plan)
    timer = (measuring.MatmulTimer(info, target_s=target) if case_factory is None
             else measuring.MatmulTimer(info, target_s=target, case_factory=case_factory))
    timer.telemetry = telemetry or str(info.device)  # the device the sampler reads beside each shape
    timer.checker = checker  # each shape's product checked once, after its timed calls
    sweep = Sweep(timer, budget_s=sweep_budget_s, start_size=START_SIZE.get(info.kind, START_SIZE["cpu"]),
                  max_size=lambda dtype: limits[dtype], clock=clock, on_measurement=on_measurement,
                  expected_wall_s=timer.expected_wall_s, waves=measuring.wave_grid(info))
    return timer, sweep


def quick_sweeps(plan: Plan, timer) -> dict:
    """``--level quick``: one timed, checked product per dtype at :data:`~accounting.report.levels.QUICK_SIZE`
    (capped by free memory; halved until it fits)."""
    limits = max_sizes(plan)
    found = {}
    for dtype in plan.dtypes:
        size = min(QUICK_SIZE.get(plan.info.kind, QUICK_SIZE["cpu"]), limits[dtype])
        done = None
        while done is None and size >= 16:
            done = timer(dtype, size, size, size)
            size //= 2
        found[dtype] = [done] if done is not None else []
    return found


def _under_load(windows: HealthWindows, plan: Plan, sweeps: dict, case_factory) -> None:
    """The counters' reading under load: on a GPU while products of the fastest shape run (an idle link trains
    down); on a CPU, whose counters have no link, right away."""
    best = [max(done, key=lambda row: row.flops_per_second) for done in sweeps.values() if done]
    if plan.info.kind != "cuda" or not best:
        windows.under_load()
        return
    shape = best[0].shape
    case = (case_factory or matmul_case)(best[0].dtype, *shape, plan.info.device)
    read_under_load(windows, case.fn, plan.info.device)


def _burns(plan: Plan, sweeps: dict, *, budget_s: float, telemetry: str | None, checker: ResultChecker,
           windows: HealthWindows, progress, clock, started, case_factory) -> dict:
    """``--level long``'s sustained phase, each dtype for its share of ``budget_s`` (:mod:`accounting.report.burn`)."""
    limits = max_sizes(plan)
    results = {}
    on_load = windows.under_load if plan.info.kind == "cuda" else None
    for position, dtype in enumerate(plan.dtypes):
        measured = sweeps.get(dtype) or []
        if not measured:
            plan.notes.append(f"{dtype}: no sustained phase (the sweep measured nothing to size it by)")
            continue
        left = max(budget_s - (clock() - started), 1.0)
        seconds = burn_seconds(left, len(plan.dtypes) - position)
        rate = max(done.flops_per_second for done in measured)
        size = burn_size(rate_flops_per_s=rate, seconds=seconds, limit=limits[dtype])
        progress.update(clock() - started,
                        f"{dtype} sustained phase: {size}³ for {seconds:.0f} s, every result checked")
        results[dtype] = burn(plan.info.device, dtype, size, seconds, telemetry=telemetry, checker=checker,
                              clock=clock, on_load=on_load, case_factory=case_factory)
        on_load = None
    return results


def build_report(plan: Plan, *, progress, started: float, clock=time.monotonic, bandwidth_bytes=None,
                 case_factory=None, telemetry: str | None = None, level: str = STANDARD,
                 checker: ResultChecker | None = None, check_results: bool = True, counters=None,
                 strict: bool = False) -> dict:
    """Measure bandwidth, sweep every dtype, then its burst and sustained headlines, within the budget; check
    every timed product; read the health counters around it all; judge the device's health.

    ``started`` is the ``clock()`` reading the budget counts from; ``progress`` has
    ``update(done_s, text)`` (a :class:`~accounting.report.progress.ProgressBar`);
    ``bandwidth_bytes`` is the copy size (default: :func:`~accounting.report.measure.bandwidth_bytes`);
    ``case_factory`` makes each timed product (``None``: the usual; see :class:`~accounting.report.measure.MatmulTimer`).
    ``telemetry`` names the device :class:`accounting.telemetry.Sampler` reads (default:
    the timed device).

    ``level`` (:mod:`accounting.report.levels`): ``quick`` times one checked product per dtype and no
    sweep, ``long`` adds the sustained phase. ``checker`` (:class:`~accounting.report.checks.ResultChecker`,
    default a new one) checks each product once, outside the timed calls (with ``--inject-fault``'s fault);
    ``check_results=False`` is for timers whose products are fakes. ``counters``: the health counter
    readers (default :func:`~accounting.report.health_counters.device_counters` of the device);
    ``strict`` makes a degraded device exit non-zero (what was not checked is listed, never taken for
    healthy, and never degrades: a VM without EDAC or a PCIe card without NVLink is not a worse device).
    The document's ``health`` holds the verdict.
    """
    info = plan.info
    level = level_named(level).name
    checker = (checker or ResultChecker()) if check_results else None
    readers = device_counters(info) if counters is None else counters
    budget_s = report_budget_s(level, plan.budget_s)
    found, burns = {}, {}
    with HealthWindows(readers) as windows:
        progress.update(clock() - started, "memory bandwidth (device copy)")
        if bandwidth_bytes is None:
            bandwidth = measuring.measure_bandwidth(info)
        else:
            bandwidth = measuring.measure_bandwidth(info, nbytes=bandwidth_bytes)
        if bandwidth is None:  # too little free memory for a copy that times memory, not cache
            plan.notes.append(measuring.bandwidth_skipped_note(info, free_memory_bytes(info.device)))
        progress.update(clock() - started, f"bandwidth {bandwidth.bytes_per_second / GB:.1f} GB/s" if bandwidth
                        else "bandwidth not measured")

        def on_measurement(done, _elapsed):
            check = getattr(done, "check", None)
            checked = ("" if check is None else ", WRONG RESULT" if not check.ok
                       else ", result not checked" if not getattr(check, "checked", True) else ", checked")
            speed = tflops(done.flops_per_second)
            progress.update(clock() - started, f"{done.dtype} {done.m}×{done.k}×{done.n}: {speed} TFLOP/s{checked}")

        if level == QUICK:
            timer = measuring.MatmulTimer(info, target_s=QUICK_TARGET_S, case_factory=case_factory,
                                          telemetry=telemetry or str(info.device), checker=checker)
            sweeps = quick_sweeps(plan, timer)
            for measurements in sweeps.values():
                for done in measurements:
                    on_measurement(done, None)
        else:
            timer, sweep = make_sweep(plan, sweep_budget_s=sweep_budget_s(budget_s, clock() - started), clock=clock,
                                      on_measurement=on_measurement, case_factory=case_factory, telemetry=telemetry,
                                      checker=checker)
            sweeps = sweep.run(plan.dtypes)
        _under_load(windows, plan, sweeps, case_factory)
        if level != QUICK and hasattr(timer, "repeat"):  # a timer that times single repetitions (not a stand-in)
            progress.update(clock() - started, "burst and sustained headlines (idle, soak, 1-2 s windows)")
            headline_budget = max(budget_s * (1 - FINISH_RESERVE_FRACTION) - (clock() - started), 1e-3)
            candidates = with_fp8_default_accumulation(headline_candidates(sweeps), headline_budget, plan.notes)
            found = headline_phase.measure_headlines(
                timer, candidates, budget_s=headline_budget, device_name=str(info.device),
                sweep_telemetry=[getattr(done, "telemetry", None)
                                 for measurements in sweeps.values() for done in measurements],
                physical=physical_facts(info), budget_advice=report_budget_advice(plan.budget_s, level),
                accumulations={key: split_key(key)[1] for key in candidates})
            found = fold_accumulations(found, getattr(timer, "checks", {}))
        for dtype, figures in found.get("headlines", {}).items():
            steady = figures.get("sustained")
            if steady is None:
                continue
            shown = tflops(steady.flops_per_s) if steady.published else "withheld"
            progress.update(clock() - started, f"{dtype} sustained: {shown} TFLOP/s")
        if level == LONG:
            burn_checker = ResultChecker()
            burns = _burns(plan, sweeps, budget_s=plan.budget_s * (1 - FINISH_RESERVE_FRACTION), telemetry=telemetry
                           or str(info.device), checker=burn_checker, windows=windows, progress=progress,
                           clock=clock, started=started, case_factory=case_factory)
    release_cached_memory(info.device)
    sections = dtype_sections(plan, sweeps, bandwidth, found, checker, level)
    report = assemble(settings={**plan.settings, "level": level}, machine=machine_of(plan),
                      bandwidth=bandwidth_section(bandwidth, plan.spec_bandwidth),
                      dtypes=sections, elapsed_s=clock() - started, notes=plan.notes)
    report["telemetry"] = telemetry_section(found)
    if level == LONG:
        report["burn"] = {dtype: result.to_dict() for dtype, result in burns.items()}
    checks, unchecked = check_evidence(sweeps, burns, checker, plan, found)
    verdicts = judge_devices(windows.windows, checks=checks, dtypes=sections,
                             throttle_reasons=throttle_reasons_seen(sweeps, found, burns), unchecked=unchecked,
                             judge_speed=level != QUICK)
    by_dtype = {dtype: section["checks"] for dtype, section in sections.items()}
    fault = None if checker is None or checker.fault is None else str(checker.fault)
    report["health"] = health_document(verdicts, windows.windows, strict=strict, checks=checks_document(
        by_dtype, injected=None if checker is None else checker.injected, fault=fault,
        burn=report.get("burn")))
    report["elapsed_s"] = clock() - started
    return report
