"""What the ``flops_benchmark`` fixture runs: pytest-benchmark's timing with FLOPs, TFLOP/s and MFU beside it.

Each call records FLOPs, achieved TFLOP/s, the peak and its source, MFU, the device, one
call's peak memory (:func:`peak_memory`) and the telemetry window in ``benchmark.extra_info``,
so they land in the saved JSON, and adds a line to the end-of-run summary
(:func:`accounting.bench.summary.add_summary_line`). The fixtures themselves are declared in
:mod:`accounting.bench.plugin`, which imports this module (and torch) only when a test uses one.
"""

import contextlib
import math
import time
from dataclasses import dataclass

import pytest
import torch

from accounting._checks import check_non_negative, check_size
from accounting._units import TERA
from accounting.bench.round_telemetry import DeviceReadings, RoundReadings, open_round_backend, warm_to_working_clock
from accounting.bench.summary import SUMMARY, add_summary_line  # noqa: F401 (SUMMARY: still importable from here)
from accounting.errors import AccountingError, AccountingTypeError
from accounting.flop_count import FlopCount, counted_total, flops_mismatch
from accounting.flop_count import count_flops as count_fn_flops
from accounting.flops import achieved_mfu
from accounting.hardware.clocks import clock_for, synchronize
from accounting.hardware.devices import DeviceInfo, as_device, detect_device
from accounting.hardware.dtypes import dtype_name
from accounting.hardware.flops_per_clock import highest_clock_mhz, physical_check_record
from accounting.hardware.peaks import device_peak_flops
from accounting.health.results import check_case
from accounting.live_memory import LiveTensorBytes
from accounting.telemetry.sampler import Sampler
from accounting.telemetry.validity import window_extra_info
from accounting.timing import WARMUP_CALLS, flush_bytes, rounds_for, should_flush_l2, time_fn

_DEVICE_INFOS = pytest.StashKey[dict]()
"""Detected devices, by ``str(torch.device)``, for the whole session (detection reads /proc, NVML...)."""


@dataclass(frozen=True)
class FlopsResult:
    """What one FLOPs benchmark achieved (``mfu`` and ``peak_flops`` are ``None`` when the peak is unknown).

    ``flop_count``: what ``FlopCounterMode`` counted in one call (``None`` with ``count_flops=False``).
    """

    median_s: float | None
    flops: int
    tflops: float | None
    peak_flops: float | None
    mfu: float | None
    flop_count: FlopCount | None = None


class FlopsBenchmark:
    """Runs pytest-benchmark's ``pedantic`` mode correctly for asynchronous devices and records FLOPs/MFU.

    pytest-benchmark reads a host clock (``perf_counter``) around the target. A CUDA
    call returns once its kernels are *queued*, so the target here is ``fn()``
    followed by ``synchronize(device)``: the clock stops when the GPU is done. The
    untimed ``setup`` before each round flushes L2 (on CUDA, when the ``operands`` given
    fit in it: :func:`accounting.timing.should_flush_l2`; on CUDA always when none are
    given) and synchronizes, so neither the flush nor the previous round's tail is billed
    to this round. That host time still holds fn's launch and the synchronize's return
    (tens of µs): the saved stats (what ``--benchmark-compare`` compares) keep it, but on
    CUDA the achieved TFLOP/s and MFU come from a second set of ``rounds`` calls timed with
    CUDA events behind a queued spin (:func:`accounting.timing.time_fn`), which time the
    GPU alone (``extra_info``: ``host_median_s`` and ``device_median_s``). Those calls run in a
    telemetry window of their own, and ``extra_info["physical_check"]`` judges their figure at the highest
    clock it read (:func:`accounting.hardware.flops_per_clock.physical_check_record`), not at the rounds' clock.
    On the CPU the synchronize is a no-op and this is ordinary pytest-benchmark timing.

    FLOPs (:mod:`accounting.flop_count`): before the first round, one call is counted
    with ``FlopCounterMode`` — ``count_fn()`` when given (the same work on ``meta``
    tensors, say), else one extra untimed call of ``fn``. Without ``flops=`` the count is
    used (a count of 0 is refused: pass ``flops=``); with it, ``flops`` wins and a count
    more than 1 % away is recorded in ``extra_info["flops_mismatch"]`` and in the end-of-run
    summary (not as a warning: ``filterwarnings = error`` would fail a benchmark whose
    kernel the counter cannot see). ``count_flops``: ``None`` counts when there is no
    ``flops=`` or there is a ``count_fn`` (a given ``flops=`` costs no extra call of ``fn``),
    ``True`` always, ``False`` never (``flops=`` then required).

    Rounds: ``rounds`` at least, and with ``min_time_s`` > 0 as many more as fill that many
    seconds (:func:`accounting.timing.rounds_for`, capped at its ``max_rounds``; benchmarks.json's
    ``min_time_s`` per device kind). The count is fixed before the first round from the fastest of
    the warm-up calls, which then run here (timed by :func:`warm_call_seconds`, at least one)
    instead of inside ``pedantic``; ``extra_info["rounds"]`` records the count used.

    GPUs (:mod:`accounting.bench.round_telemetry`): before the timed rounds the call runs until the device's
    clock has settled at its working clock (``extra_info["warmup"]`` says how long that took), and a thread reads
    the device while the timed rounds run, each reading placed in its round (``extra_info["telemetry_rounds"]``),
    so the saved run keeps each round's clock, power and throttle reasons beside its time. Nothing of this runs on the CPU.

    Peak memory: after the timed rounds, one more untimed call is measured by :func:`peak_memory`
    (``measure_memory=False`` skips it), so the regression gate can compare it exactly.

    Results: :meth:`check_result` checks a timed product once, after its rounds (the matmul benchmarks
    call it), and fails the benchmark on a wrong one.

    ``infos`` is the cache of detected devices; the fixture shares one across the session.
    """

    def __init__(self, benchmark, config, infos: dict | None = None):
        self.benchmark = benchmark
        self.config = config
        self._infos = {} if infos is None else infos

    def device_info(self, device) -> DeviceInfo:
        key = str(as_device(device))
        if key not in self._infos:
            self._infos[key] = detect_device(device)
        return self._infos[key]

    def __call__(self, fn, *, flops: int | None = None, dtype, device="cpu", shape=None, rounds: int = 10,
                 warmup_rounds: int = WARMUP_CALLS, flush_cache: bool | None = None, peak: float | None = None,
                 operands=(), count_fn=None, count_flops: bool | None = None, min_time_s: float = 0.0,
                 measure_memory: bool = True):
        min_time_s = check_non_negative(min_time_s, "min_time_s")
        warmup_rounds = check_size(warmup_rounds, "warmup_rounds")  # checked here: with min_time_s they run here
        refuse_other_baseline_shape(self.config, getattr(self.benchmark, "fullname", None), shape)
        device = as_device(device)
        count, given = self._count(fn, flops, count_fn, count_flops)  # untimed, before any round
        flops = given if given is not None else counted_total(count)
        info = self.device_info(device)
        name = dtype_name(dtype)
        if peak is None:
            peak = device_peak_flops(info, name, override_tflops=self.config.getoption("peak_tflops", None))
        clock = clock_for(device, cache_bytes=flush_bytes(device))
        if flush_cache is not None:
            flush = flush_cache
        elif operands:
            flush = should_flush_l2(device, *operands)
        else:
            flush = device.type == "cuda"  # nothing known about fn's operands: flush, as a cold call

        def setup():
            if flush:
                clock.flush_cache()
            synchronize(device)

        def target():
            result = fn()
            synchronize(device)  # see the class docstring: the host clock must wait for the device
            return result

        backend = None if getattr(self.benchmark, "disabled", False) else open_round_backend(device)
        recorder = None
        try:
            if backend is not None:  # GPUs: to the working clock before anything is timed
                with DeviceReadings(backend) as readings:  # read while the calls run, not at their idle edge
                    self.benchmark.extra_info["warmup"] = warm_to_working_clock(lambda: (setup(), target()), readings)
            if min_time_s:  # the warm-up calls run here, timed, to size the rounds (see the class docstring)
                rounds = rounds_for(warm_call_seconds(target, setup, warmup_rounds), rounds=rounds,
                                    min_time_s=min_time_s)
                warmup_rounds = 0
            if backend is not None:  # GPUs: a thread reads the device during the timed rounds
                recorder = RoundReadings(backend, warmup_rounds=warmup_rounds, rounds=rounds)
            window = _telemetry_window(device)  # GPUs: clock, power, energy and throttling beside the rounds
            with window as sampler:
                read_after = {"teardown": recorder.teardown} if recorder is not None else {}  # the CPU: as ever
                self.benchmark.pedantic(target, setup=setup, rounds=rounds, warmup_rounds=warmup_rounds, iterations=1,
                                        **read_after)
        finally:
            if recorder is not None:
                recorder.close()  # its reading thread stops before the backend it reads is closed
            if backend is not None:
                backend.close()
        if recorder is not None:
            self.benchmark.extra_info["telemetry_rounds"] = recorder.record()
        stats = getattr(self.benchmark, "stats", None)
        median = stats.stats.median if stats is not None else None  # None under --benchmark-disable
        timed_window = None
        if median and device.type == "cuda":
            # The host clock above also times fn's launch and the synchronize's wake-up (tens of µs): fine
            # for comparing runs, wrong for MFU. MFU comes from CUDA events around the same call, in a
            # telemetry window of their own: the clock the physical check pairs with their figure.
            self.benchmark.extra_info["host_median_s"] = median
            with _telemetry_window(device) as timed_window:
                median = time_fn(fn, device=device, warmup=0, repeats=rounds, min_time_s=0, flush_cache=flush,
                                 count_flops=False).median  # FLOPs were settled above
            self.benchmark.extra_info["device_median_s"] = median
        tflops = flops / median / TERA if median else None
        result = FlopsResult(median, int(flops), tflops, peak, achieved_mfu(flops, median, peak) if median else None,
                             count)
        self.benchmark.extra_info.update({
            "flops": int(flops),
            "achieved_tflops": tflops,
            "peak_tflops": peak / TERA if peak else None,
            "mfu": result.mfu,
            "device": info.name,
            "device_kind": info.kind,
            "dtype": name,
            "shape": list(shape) if shape is not None else None,
            "rounds": rounds,
            "min_time_s": min_time_s,
        })
        if measure_memory:  # one more call, untimed, after the rounds: nothing of it is in the timing
            self.benchmark.extra_info.update(peak_memory(target, setup, device))
        if sampler is not None:
            self.benchmark.extra_info["telemetry"] = window_extra_info(
                sampler.summary, work_flops=int(flops) * (rounds + warmup_rounds))
            # a figure above what the SMs can do at the highest clock read while its calls ran: its timer is wrong
            self.benchmark.extra_info["physical_check"] = physical_check_record(
                info, name, tflops * TERA if tflops else None,
                highest_clock_mhz(timed_window.summary) if timed_window is not None else None)
        if median and hasattr(self.config, "stash"):
            mfu_text = f"MFU {result.mfu:.3f}" if result.mfu is not None else "MFU unknown (no peak)"
            peak_text = f"peak {peak / TERA:.4g}" if peak else "peak ?"
            label = getattr(self.benchmark, "name", "benchmark")
            add_summary_line(self.config, f"{label}: {tflops:.4g} TFLOP/s of {peak_text} -> {mfu_text} [{info.name}, {name}]")
        self._record_count(count, given)
        return result

    def check_result(self, case) -> None:
        """Check the benchmark's product once, outside the timed rounds; fail the benchmark when it is wrong.

        ``case`` is what was timed (:class:`accounting.timing.MatmulCase`: ``fn()`` and its operands):
        :func:`accounting.health.results.check_case` runs it twice more, compares the two results bit for
        bit and checks one against ``A @ B`` by Freivalds' method within a worst-case rounding bound. A
        fast product that is wrong is a failed device, not a fast one. ``extra_info["result_check"]``
        records the verdict and what it cost, so the saved run carries it; an fp8 case's accumulation
        (``"fast"`` or ``"default"``) goes in ``extra_info["accumulation"]``. A product with no computable
        bound is recorded as not checked (``checked: false`` and why), never failed for it.
        """
        started = time.perf_counter()
        accumulation = getattr(case, "accumulation", None)
        if accumulation is not None:
            self.benchmark.extra_info["accumulation"] = accumulation
        check = check_case(case)
        self.benchmark.extra_info["result_check"] = {
            "ok": check.ok, "checked": check.checked, "not_checked_reason": check.not_checked_reason or None,
            "excess": check.excess if math.isfinite(check.excess) else None,
            "repeat_identical": check.repeat_identical, "seconds": time.perf_counter() - started}
        if not check.checked and hasattr(self.config, "stash"):
            add_summary_line(self.config, f"{getattr(self.benchmark, 'name', 'benchmark')}: {check.note}")
        if not check.ok:
            pytest.fail(f"wrong result: {check.reason}", pytrace=False)

    @staticmethod
    def _count(fn, flops, count_fn, count_flops) -> tuple[FlopCount | None, int | None]:
        """(the FlopCounterMode count or ``None``, the given FLOPs or ``None``), checking the arguments."""
        if not callable(fn):
            raise AccountingTypeError(f"fn must be callable, got {fn!r}")
        if count_flops is not None and not isinstance(count_flops, bool):
            raise AccountingTypeError(f"count_flops must be True, False or None, got {count_flops!r}")
        if flops is not None:
            flops = int(check_non_negative(flops, "flops"))
        elif count_flops is False:
            raise AccountingError("flops_benchmark needs flops= when count_flops=False (nothing to count them)")
        if count_flops is None:
            count_flops = flops is None or count_fn is not None
        if not count_flops:
            return None, flops
        if count_fn is not None:
            return count_fn_flops(count_fn, source="count_fn"), flops
        return count_fn_flops(fn), flops

    def _record_count(self, count: FlopCount | None, given: int | None) -> None:
        """The count beside the timing fields in ``extra_info``; a mismatch also in the summary."""
        mismatch = flops_mismatch(given, count) if count is not None and given is not None else None
        self.benchmark.extra_info.update({
            "flops_source": "given" if given is not None else count.source,
            "flops_counted": count.total if count is not None else None,
            "flops_by_operator": dict(count.by_operator) if count is not None else None,
            "flop_count_seconds": count.seconds if count is not None else None,
            "flops_mismatch": mismatch,
        })
        if mismatch and hasattr(self.config, "stash"):
            add_summary_line(self.config, f"{getattr(self.benchmark, 'name', 'benchmark')}: FLOPs mismatch: {mismatch}")


def peak_memory(target, setup, device) -> dict:
    """One call's peak memory above what was live before it, as ``extra_info`` fields (bytes).

    - ``peak_memory_bytes``, every device: the live-tensor tracker
      (:class:`accounting.live_memory.LiveTensorBytes`), the exact storage bytes the call created
      and held at its peak: no allocator rounding, no cache, so the same work reads the same
      bytes in every run, and one extra buffer reads as exactly its size;
    - ``cuda_peak_allocated_bytes``, on CUDA: the caching allocator's peak in a second call,
      ``torch.cuda.max_memory_allocated`` after ``torch.cuda.reset_peak_memory_stats``, less what
      was allocated before it. It sees what the tracker cannot (cuBLAS workspaces, a library's own
      allocations through the allocator), rounded to the allocator's blocks.

    ``setup`` (the cache flush) runs before each call, outside the measurement.

    >>> out = torch.empty(64, 64)
    >>> a = torch.ones(64, 64)
    >>> peak_memory(lambda: torch.matmul(a, a, out=out), lambda: None, torch.device("cpu"))   # writes into out
    {'peak_memory_bytes': 0}
    >>> peak_memory(lambda: a @ a, lambda: None, torch.device("cpu"))                       # a new 64x64 float32
    {'peak_memory_bytes': 16384}
    """
    setup()
    with LiveTensorBytes() as live:
        target()
    record = {"peak_memory_bytes": int(live.peak)}
    if device.type == "cuda":
        setup()
        record["cuda_peak_allocated_bytes"] = cuda_peak_allocated(target, device)
    return record


def cuda_peak_allocated(target, device, cuda=torch.cuda) -> int:
    """The CUDA caching allocator's peak during ``target()``, above what was allocated before it (bytes).

    ``cuda``: the ``torch.cuda`` module (tests pass a fake: the CPU build has no allocator statistics).
    """
    cuda.reset_peak_memory_stats(device)
    before = cuda.memory_allocated(device)
    target()
    return int(cuda.max_memory_allocated(device) - before)


def warm_call_seconds(target, setup, calls: int) -> float:
    """Run ``setup(); target()`` ``max(1, calls)`` times; the fastest ``target()`` in seconds (``perf_counter``).

    ``target`` synchronizes the device itself (:class:`FlopsBenchmark`), so the host clock sees the
    whole call. The first call of a run is the slowest (allocation, kernel choice): the fastest is
    the estimate of a timed round.

    >>> calls = []
    >>> warm_call_seconds(lambda: calls.append("target"), lambda: calls.append("setup"), 2) > 0, calls
    (True, ['setup', 'target', 'setup', 'target'])
    """
    fastest = math.inf
    for _ in range(max(1, calls)):
        setup()
        started = time.perf_counter()
        target()
        fastest = min(fastest, time.perf_counter() - started)
    return max(fastest, 1e-9)  # a call too short for the clock's resolution still counts as 1 ns


def baseline_shape_mismatch(config, fullname, shape) -> str | None:
    """Why this benchmark's baseline (``--benchmark-compare``) timed another shape; ``None`` when it did not.

    A shape shrunk to fit free memory (:func:`fitted_shape`) keeps its test id, so without this a
    baseline at 16384³ and a run at 8192³ would be compared as one benchmark.

    >>> from types import SimpleNamespace
    >>> session = SimpleNamespace(compared_mapping={"0001_base.json": {"t": {"extra_info": {"shape": [4, 4, 4]}}}})
    >>> baseline_shape_mismatch(SimpleNamespace(_benchmarksession=session), "t", (2, 4, 4))
    '--benchmark-compare: t timed 4x4x4 in the baseline 0001_base.json but 2x4x4 in this run; different shapes are not comparable'
    """
    session = getattr(config, "_benchmarksession", None)  # pytest-benchmark's session: the loaded baselines
    if shape is None or fullname is None or session is None:
        return None
    for path, baseline in (getattr(session, "compared_mapping", None) or {}).items():
        saved = (baseline.get(fullname) or {}).get("extra_info", {}).get("shape")
        if saved is not None and list(saved) != list(shape):
            described = "x".join(map(str, saved)), "x".join(map(str, shape))
            return (f"--benchmark-compare: {fullname} timed {described[0]} in the baseline {getattr(path, 'name', path)} "
                    f"but {described[1]} in this run; different shapes are not comparable")
    return None


def refuse_other_baseline_shape(config, fullname, shape) -> None:
    """Fail the benchmark, before timing, when its baseline timed another shape (see :func:`baseline_shape_mismatch`)."""
    reason = baseline_shape_mismatch(config, fullname, shape)
    if reason:
        pytest.fail(reason + " (free memory differs? save a baseline from this machine state)", pytrace=False)


def _telemetry_window(device):
    """A telemetry sampler around a CUDA benchmark's rounds (``accounting.telemetry``); nothing on the CPU."""
    if device.type != "cuda":
        return contextlib.nullcontext(None)
    return Sampler(device)


def session_flops_benchmark(benchmark, config) -> FlopsBenchmark:
    """The ``flops_benchmark`` fixture's value for one test: a :class:`FlopsBenchmark` sharing the session's
    detected devices (detection reads /proc, NVML..., once per device per session)."""
    return FlopsBenchmark(benchmark, config, infos=config.stash.setdefault(_DEVICE_INFOS, {}))
