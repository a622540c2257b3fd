"""Timing on the device: one matmul shape for the sweep, and a large copy for memory bandwidth.

Both go through the shared timing code (:func:`accounting.timing.time_fn`, which uses the
device's own clock) and the shared matmul cases (:func:`accounting.timing.matmul_case`);
this module only chooses how long to spend on each.

>>> from accounting.hardware.devices import detect_device
>>> timer = MatmulTimer(detect_device("cpu"), target_s=0.01)
>>> done = timer("float32", 128, 128, 128)
>>> done.shape, done.flops, done.seconds > 0
((128, 128, 128), 4194304, True)
"""

import contextlib
import math
import statistics
import time
import warnings

import torch

from accounting._checks import check_non_negative, check_positive, check_positive_size, check_size
from accounting.errors import AccountingError
from accounting.flop_count import FlopsMismatchWarning, count_flops, flops_mismatch
from accounting.hardware.clocks import synchronize
from accounting.hardware.devices import DeviceInfo, free_memory_bytes, release_cached_memory
from accounting.hardware.peaks import last_level_cache_bytes
from accounting.report.accumulation import case_options, split_key
from accounting.report.checks import ResultChecker, is_out_of_memory
from accounting.report.headline_device import Window
from accounting.report.results import BandwidthMeasurement
from accounting.report.sweep import SIZE_MULTIPLE, MatmulMeasurement
from accounting.report.waves import CPU_TILE, GPU_TILE, WaveGrid
from accounting.telemetry.sampler import Sampler
from accounting.timing import MEMORY_FRACTION, matmul_bytes, matmul_case, should_flush_l2, time_back_to_back, time_fn

MIN_REPEATS = 3
"""Timed calls per shape at least (a median of fewer says little)."""
MAX_REPEATS = 200
WARMUP_CALLS_FAST = 3
"""Warm-up calls for a shape whose first call is quick (``< SLOW_CALL_S``); slow ones get one."""
SLOW_CALL_S = 0.05

MAX_SIZE = 32768
"""No sweep goes past this edge (a 32768³ bf16 product is 70 TFLOP, over 0.05 s even on a B200)."""

BANDWIDTH_BYTES_CPU = 256 * 2**20
"""Bytes copied per call on a CPU: source and destination (2 × 256 MiB) far beyond the L3 of the CPUs it was sized on
(the largest, 480 MiB, shared by all cores), so the copy times memory, not cache."""
BANDWIDTH_BYTES_GPU = 2 * 2**30
"""Bytes copied per call on a GPU (many times any L2), when memory allows."""
BANDWIDTH_MEMORY_FRACTION = 0.25
"""At most this share of free memory for source plus destination."""
BANDWIDTH_CACHE_MULTIPLE = 8
"""On a GPU the copy's source is at least this many times the last-level cache
(:func:`accounting.hardware.peaks.last_level_cache_bytes`), so at most an eighth of it could come from cache;
with less free memory than that takes, the bandwidth is not measured (a note says why) rather than
read above spec."""
BANDWIDTH_REPEATS = 10
BANDWIDTH_MIN_TIME_S = 0.2


def largest_square(dtype, free_bytes: int, *, fraction: float = MEMORY_FRACTION, multiple: int = SIZE_MULTIPLE,
                   cap: int = MAX_SIZE) -> int:
    """Largest multiple of ``multiple`` (at most ``cap``) whose square product fits ``fraction`` of ``free_bytes``.

    Bytes as :func:`accounting.timing.matmul_bytes` counts them.

    >>> largest_square("bf16", 3 * 4096 * 4096 * 2, fraction=1.0)
    4096
    >>> largest_square("float32", 10 * 2**20, fraction=0.8)
    768
    """
    free_bytes = check_size(free_bytes, "free_bytes")
    check_positive(fraction, "fraction")
    budget = fraction * free_bytes
    # Start from an upper bound (one byte per element of one operand) and step down until it fits.
    size = min(cap, max(multiple, int(math.isqrt(int(budget)) // multiple * multiple)))
    while size > multiple and matmul_bytes(size, size, size, dtype) > budget:
        size -= multiple
    return size


def wave_grid(info: DeviceInfo) -> WaveGrid | None:
    """How the device runs a product's output tiles, for the sweep's whole-wave shapes.

    A GPU runs ``GPU_TILE`` tiles on each of its SMs (CUs on ROCm): the count is the device
    properties' ``multi_processor_count`` (``info.multiprocessors``); ``None`` when unknown.
    A CPU runs ``CPU_TILE`` blocks on each of the threads torch uses (``torch.get_num_threads()``).

    >>> grid = wave_grid(DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 80 * 2**30, multiprocessors=132))
    >>> grid.units, grid.tile_m, grid.tile_n
    (132, 128, 256)
    """
    if info.kind == "cuda":
        if not info.multiprocessors:
            return None
        return WaveGrid(units=info.multiprocessors, tile_m=GPU_TILE[0], tile_n=GPU_TILE[1])
    return WaveGrid(units=max(1, torch.get_num_threads()), tile_m=CPU_TILE[0], tile_n=CPU_TILE[1])


def call_overhead_s(wall_s: float, samples) -> float:
    """Wall seconds each timed call cost beyond its own time: ``(wall_s − Σ samples) / len(samples)``, at least 0.

    On a GPU :func:`accounting.timing.time_fn` queues a spin before each call
    (:data:`~accounting.hardware.clocks.LAUNCH_COVER_CYCLES` cycles: 100–140 µs at 1.4–2 GHz), maybe an L2
    flush, and synchronizes the host after it; none of that is in the events' time, all of it is in the wall
    time. ``wall_s`` is the host's time around the whole :func:`~accounting.timing.time_fn` call.

    >>> round(call_overhead_s(0.031, [5e-6] * 200), 9)   # 200 calls of 5 µs took 31 ms: 150 µs each around them
    0.00015
    """
    samples = list(samples)
    if not samples:
        raise AccountingError("call_overhead_s needs at least one timed call")
    return max(0.0, check_non_negative(wall_s, "wall_s") - sum(samples)) / len(samples)


def _out_of_memory(error: BaseException) -> bool:
    return is_out_of_memory(error)


class MatmulTimer:
    """``timer(dtype, m, k, n)`` times one product on this device, for :class:`~accounting.report.sweep.Sweep`.

    Each shape is timed for about ``target_s``: one untimed call (it also says how long a
    call takes), warm-up calls if calls are quick, then at least ``MIN_REPEATS`` timed calls
    and more until ``target_s`` of them have passed. Returns ``None`` when the operands do
    not fit in memory.

    With ``telemetry`` (a device name for :class:`accounting.telemetry.Sampler`, usually
    the timed device's own), each shape's timed calls run inside a sampler and the
    measurement carries its readings; :meth:`repeat` times single repetitions for the
    burst and sustained headlines (:mod:`accounting.report.headlines`).

    With ``checker`` (a :class:`~accounting.report.checks.ResultChecker`), each shape's product is
    checked once right after its timed calls, outside the timed region and the telemetry window,
    and the measurement carries the :class:`~accounting.health.results.ResultCheck`.

    On a GPU each timed call costs more wall time than its events measure (a spin, an L2 flush and a
    host synchronize around it: :func:`call_overhead_s`); the timer measures that on every shape it
    times, and :meth:`expected_wall_s` plans with it.
    """

    def __init__(self, info: DeviceInfo, *, target_s: float, case_factory=None, telemetry: str | None = None,
                 checker: ResultChecker | None = None):
        self.info = info
        self.target_s = check_positive(target_s, "target_s")
        self.case_factory = case_factory
        """Makes the timed product (``None``: :func:`accounting.timing.matmul_case`; the fleet's ``--slow-rank`` wraps it)."""
        self.telemetry = telemetry
        self.checker = checker
        self.checks: dict = {}
        """Result checks of headline keys the sweep did not time (fp8 with default accumulation), by key."""
        self.overheads: dict[bool, list[float]] = {True: [], False: []}
        """:func:`call_overhead_s` of each shape timed on a GPU, by whether its calls flushed the L2 (a flush
        takes its own time)."""

    def _sampler(self, *, measure_clock: bool):
        if self.telemetry is None:
            return contextlib.nullcontext(None)
        return Sampler(self.telemetry, measure_clock=measure_clock)

    @staticmethod
    def _readings(sampler) -> dict | None:
        return None if sampler is None else sampler.summary.to_dict()

    def repeat(self, dtype, shape, repeats: int, *, seconds: float | None = None) -> Window:
        """Time ``repeats`` single calls of ``shape`` (after one untimed call) inside one telemetry window; with
        ``seconds``, run the calls back to back (:func:`accounting.timing.time_back_to_back`: no spin, no flush,
        no host synchronize between them) until that much of the device's time has passed (at most ``repeats``).

        ``dtype`` may be a headline key naming an fp8 accumulation
        (:func:`accounting.report.accumulation.default_key`): the product then runs with it, and its first
        window's product is checked once (outside the window; ``checks`` keeps what was found, by key).
        On a CPU whose clock is only nominal (a VM) the window's clock is measured under
        vector load just before and after it.
        """
        m, k, n = shape
        device = self.info.device
        name, accumulation = split_key(dtype)
        case = (self.case_factory or matmul_case)(name, m, k, n, device, **case_options(accumulation))
        case.fn()
        synchronize(device)
        if name != dtype and self.checker is not None and dtype not in self.checks:
            self.checks[dtype] = self.checker(name, case)  # the variant the sweep did not check
        sampler_context = self._sampler(measure_clock=True)
        with sampler_context as sampler:
            if seconds is not None:
                window = time_back_to_back(case.fn, seconds=seconds, device=device, max_calls=repeats,
                                           flops=case.flops)
            else:
                timing = time_fn(case.fn, device=device, warmup=0, repeats=repeats, min_time_s=0,
                                 max_repeats=repeats, flops=case.flops,
                                 flush_cache=should_flush_l2(device, *case.operands))
        if seconds is not None:
            return Window(samples=window.per_call_s, telemetry=self._readings(sampler), calls=window.calls,
                          seconds=window.seconds)
        return Window(samples=timing.samples, telemetry=self._readings(sampler))

    def clock(self) -> float:
        """The host clock the headline phases plan by."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """Idle (the device cools and may boost again)."""
        time.sleep(seconds)

    @staticmethod
    def _warmup(first_call_s: float) -> int:
        return WARMUP_CALLS_FAST if first_call_s < SLOW_CALL_S else 0

    @property
    def call_overhead_s(self) -> float:
        """Wall seconds a timed call costs beyond its own time, for planning: 0 on a CPU (its host clock adds
        nothing around a call); on a GPU the median :func:`call_overhead_s` of the shapes timed so far, of those
        that flushed the L2 where any did (the dearer kind: a plan that is short overruns), 0 before the first.

        >>> timer = MatmulTimer(DeviceInfo("cuda", "a GPU", 0, 2**30), target_s=0.02)
        >>> timer.overheads = {True: [1.5e-4, 1.6e-4, 9e-4], False: [1.2e-4]}
        >>> timer.call_overhead_s
        0.00016
        """
        if self.info.kind != "cuda":
            return 0.0
        seen = self.overheads[True] or self.overheads[False]
        return statistics.median(seen) if seen else 0.0

    def expected_wall_s(self, per_call_s: float) -> float:
        """Time this timer spends on a shape whose calls take ``per_call_s`` (setup not included).

        The untimed calls, then the timed ones as :func:`accounting.timing.time_fn`'s rule counts them (at least
        ``MIN_REPEATS``, more until ``target_s`` of their own time, at most ``MAX_REPEATS``), each with the wall
        time a call costs around it (:attr:`call_overhead_s`: 0 on a CPU).

        >>> timer = MatmulTimer(DeviceInfo("cpu", "a CPU", None, 2**30), target_s=0.5)
        >>> timer.expected_wall_s(0.01), timer.expected_wall_s(1.0)   # target-bound, then MIN_REPEATS-bound
        (0.54, 4.0)
        >>> round(timer.expected_wall_s(1e-5), 6)                     # MAX_REPEATS-bound (a fast GPU product)
        0.00204
        >>> gpu = MatmulTimer(DeviceInfo("cuda", "a GPU", 0, 2**30), target_s=0.5)
        >>> gpu.overheads[True].append(1.5e-4)                        # 150 µs around each timed call
        >>> round(gpu.expected_wall_s(1e-5), 6)                       # 200 calls: 2 ms of products, 30 ms around them
        0.03204
        """
        per_call_s = check_non_negative(per_call_s, "per_call_s")
        untimed = 1 + self._warmup(per_call_s)
        timed = min(max(self.target_s, MIN_REPEATS * per_call_s), MAX_REPEATS * per_call_s)
        calls = timed / per_call_s if per_call_s > 0 else MAX_REPEATS
        return untimed * per_call_s + timed + calls * self.call_overhead_s

    def __call__(self, dtype, m, k, n):
        sampler = None
        try:
            case = self._prepare(dtype, m, k, n)
            # The window opens once the operands exist and the untimed calls have run: no reading in it is from
            # before this shape's work (the previous shape's clock, or the idle device while operands were made).
            with self._sampler(measure_clock=False) as sampler:
                timing = self._time(case)
            check = None if self.checker is None else self.checker(dtype, case, timed=True)  # outside the timed window
        except RuntimeError as error:  # torch.cuda.OutOfMemoryError is one
            if not _out_of_memory(error):
                raise
            timing = case = None
        if timing is None:
            # Out here the error, its traceback and the operands its frames held are gone, so the
            # allocator's cached blocks can really be handed back.
            release_cached_memory(self.info.device)
            return None
        return MatmulMeasurement(dtype, m, k, n, timing.flops, timing.median, timing.iqr, len(timing.samples),
                                 telemetry=self._readings(sampler), check=check)

    def _prepare(self, dtype, m, k, n):
        """The shape's case, after its untimed first call (which says how long a call takes) and its warm-up calls."""
        device = self.info.device
        case = (self.case_factory or matmul_case)(dtype, m, k, n, device)
        synchronize(device)
        before = time.perf_counter()
        case.fn()
        synchronize(device)
        warmups = self._warmup(time.perf_counter() - before)
        if warmups:
            # The first warm-up call counted (as time_fn counts it): the case's FLOPs checked against FlopCounterMode.
            mismatch = flops_mismatch(case.flops, count_flops(case.fn))
            if mismatch:
                warnings.warn(mismatch, FlopsMismatchWarning, stacklevel=3)
        for _ in range(max(0, warmups - 1)):
            case.fn()
        synchronize(device)
        return case

    def _time(self, case):
        """The shape's timed calls (warm already: :meth:`_prepare`); on a GPU, what each cost around it is kept
        (:attr:`overheads`)."""
        device = self.info.device
        flush = should_flush_l2(device, *case.operands)
        before = time.perf_counter()
        timing = time_fn(
            case.fn, device=device, warmup=0, repeats=MIN_REPEATS, min_time_s=self.target_s,
            max_repeats=MAX_REPEATS, flops=case.flops, flush_cache=flush,
        )
        if self.info.kind == "cuda":
            self.overheads[flush].append(call_overhead_s(time.perf_counter() - before, timing.samples))
        return timing


def least_bandwidth_bytes(info: DeviceInfo) -> int:
    """The smallest copy that measures memory, not cache: ``BANDWIDTH_CACHE_MULTIPLE`` × the
    last-level cache on a GPU; 1 MiB on a CPU (whose copy is sized by ``BANDWIDTH_BYTES_CPU``).

    >>> least_bandwidth_bytes(DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 80 * 2**30, l2_cache_bytes=50 * 2**20)) // 2**20
    400
    """
    if info.kind != "cuda":
        return 2**20
    return BANDWIDTH_CACHE_MULTIPLE * last_level_cache_bytes(info)


def bandwidth_bytes(info: DeviceInfo, free_bytes: int) -> int | None:
    """Bytes per copy for this device: the kind's default, less when free memory is short;
    ``None`` when what fits is below :func:`least_bandwidth_bytes` (the copy would time the cache).

    >>> info = DeviceInfo("cuda", "a GPU", 0, 80 * 2**30, l2_cache_bytes=40 * 2**20)
    >>> bandwidth_bytes(info, free_bytes=80 * 2**30) // 2**30, bandwidth_bytes(info, free_bytes=3 * 2**30) // 2**20
    (2, 384)
    >>> print(bandwidth_bytes(info, free_bytes=2 * 2**30))  # 256 MiB fits, 320 MiB (8 × L2) needed
    None
    """
    wanted = BANDWIDTH_BYTES_GPU if info.kind == "cuda" else BANDWIDTH_BYTES_CPU
    allowed = int(BANDWIDTH_MEMORY_FRACTION * free_bytes) // 2
    nbytes = max(2**20, min(wanted, allowed) // 2**20 * 2**20)
    return nbytes if nbytes >= least_bandwidth_bytes(info) else None


def bandwidth_skipped_note(info: DeviceInfo, free_bytes: int) -> str:
    """Why :func:`measure_bandwidth` made no copy, for the report's notes.

    >>> bandwidth_skipped_note(DeviceInfo("cuda", "a GPU", 0, 2**34, l2_cache_bytes=50 * 2**20), 2**30)
    'memory bandwidth not measured: 1.0 GiB free holds no copy of 8 x the 50 MiB last-level cache; a smaller copy would time the cache'
    """
    return (f"memory bandwidth not measured: {free_bytes / 2**30:.1f} GiB free holds no copy of "
            f"{BANDWIDTH_CACHE_MULTIPLE} x the {last_level_cache_bytes(info) / 2**20:.0f} MiB last-level cache; "
            "a smaller copy would time the cache")


def measure_bandwidth(info: DeviceInfo, *, nbytes: int | None = None) -> BandwidthMeasurement | None:
    """Time ``dst.copy_(src)`` of ``nbytes`` on the device; bytes moved = 2 × ``nbytes`` (read + write).

    ``nbytes`` defaults to :func:`bandwidth_bytes` of the free memory (read after the allocator's
    cache is handed back); given, it must be a positive integer. ``None`` when free memory cannot
    hold a copy much larger than the cache (:func:`bandwidth_skipped_note` says so). The copy's
    buffers are released before returning, so free memory read afterwards (the sweep's size
    limits) is whole.
    """
    device = info.device
    if nbytes is None:
        release_cached_memory(device)
        nbytes = bandwidth_bytes(info, free_memory_bytes(device))
        if nbytes is None:
            return None
    else:
        nbytes = check_positive_size(nbytes, "nbytes")
    source = torch.ones(nbytes, dtype=torch.uint8, device=device)
    destination = torch.zeros_like(source)
    timing = time_fn(lambda: destination.copy_(source), device=device, warmup=2, repeats=BANDWIDTH_REPEATS,
                     min_time_s=BANDWIDTH_MIN_TIME_S)
    del source, destination
    release_cached_memory(device)
    return BandwidthMeasurement(bytes_moved=2 * nbytes, seconds=timing.median, iqr_s=timing.iqr,
                                repeats=len(timing.samples))
