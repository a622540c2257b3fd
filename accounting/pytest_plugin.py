"""pytest plugin: markers, options, a FLOPs-aware benchmark fixture and GPU-safe regression gating.

Installed with the package (entry point ``pytest11``), so any project that installs
``accounting`` can time its own kernels and get FLOPs, TFLOP/s and MFU into its
pytest-benchmark JSON::

    def test_my_kernel(flops_benchmark):
        x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        result = flops_benchmark(lambda: my_kernel(x), flops=2 * 4096**3, dtype="bf16", device="cuda",
                                 operands=(x,))  # L2 is flushed between rounds when these fit in it
        assert result.mfu is None or result.mfu > 0.5

What it adds:

- markers ``gpu`` (skipped, with the reason, where there is no CUDA device), ``cpu``, ``slow``,
  ``distributed`` (multi-process tests);
- options ``--peak-tflops`` (override the peak; also ``$ACCOUNTING_PEAK_TFLOPS``),
  ``--benchmarks-json``, ``--matmul-shapes`` and ``--gpus`` (which GPUs, each its own test);
- fixtures ``flops_benchmark`` and ``benchmark_config``;
- ``machine_info`` extended with the accelerator, its compute capability, SMs, memory,
  driver, CUDA/ROCm and torch versions, TF32 flags, CPU model and estimated CPU peak
  (fields that change run to run dropped), and ``--benchmark-compare`` against a
  baseline from another accelerator stops with an error instead of a warning.

>>> machine_mismatch({"accelerator": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"},
...                  {"accelerator": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"})
['accelerator', 'compute_capability']
"""

import contextlib
import math
import re
import time
import warnings
from dataclasses import dataclass

import pytest
import torch

from accounting.benchconfig import load_benchmarks
from accounting.device import (
    DeviceInfo,
    L2_FLUSH_FACTOR,
    MEASURED_CLOCK_SOURCES,
    as_device,
    clock_for,
    cuda_available,
    cuda_device_names,
    detect_device,
    free_memory_bytes,
    synchronize,
    tf32_flags,
)
from accounting._checks import check_non_negative, check_size
from accounting.errors import AccountingError, AccountingTypeError
from accounting.flop_count import FlopCount, count_flops as count_fn_flops, counted_total, flops_mismatch
from accounting.hardware import PEAK_TFLOPS_ENV, TERA, PeakUnknownWarning, cpu_peak_flops, device_peak_flops, dtype_name
from accounting.memory import format_name
from accounting.native_dtypes import FP8_MIN_CAPABILITY, native_matmul  # noqa: F401 - the constant was defined here
from accounting.timing import (
    WARMUP_CALLS,
    achieved_mfu,
    fit_matmul_shape,
    flush_bytes,
    rounds_for,
    should_flush_l2,
    time_fn,
)
from accounting.validity import window_extra_info

MARKERS = {
    "gpu": "needs a CUDA device; skipped with a reason where there is none",
    "cpu": "benchmarks that run on the CPU",
    "slow": "takes more than a few seconds",
    "distributed": "starts several processes that talk through torch.distributed (gloo on the CPU)",
}
MACHINE_INFO_KEY = "accounting"
IDENTITY_FIELDS_GPU = ("accelerator", "compute_capability", "sm_count", "gpu_memory_bytes")
IDENTITY_FIELDS_CPU = ("cpu_model", "cpu_cores", "cpu_threads")
"""``cpu_threads``: torch's intra-op threads (``OMP_NUM_THREADS``); a matmul on 1 thread and on 2 are
different measurements of the same CPU, never compared."""
_VOLATILE_CPU_FIELDS = ("hz_actual", "hz_actual_friendly")
SHAPE_MODES = ("auto", "quick", "full")
_SUMMARY = pytest.StashKey[list]()
_NO_BASELINE = pytest.StashKey[str]()
_DEVICE_INFOS = pytest.StashKey[dict]()
"""Detected devices, by ``str(torch.device)``, for the whole session (detection reads /proc, NVML...)."""


# ---- options, markers, skips -------------------------------------------------------------


def pytest_addoption(parser):
    group = parser.getgroup("accounting", "accounting: FLOPs, peaks and MFU in benchmarks")
    group.addoption(
        "--peak-tflops", type=float, default=None, metavar="TFLOPS",
        help=f"Dense peak TFLOP/s of the device under test, instead of the table or the CPU estimate "
             f"(also ${PEAK_TFLOPS_ENV}). Default: %(default)r",
    )
    group.addoption(
        "--benchmarks-json", default=None, metavar="PATH",
        help="The benchmark matrix to run. Default: %(default)r ($ACCOUNTING_BENCHMARKS or ./benchmarks.json)",
    )
    group.addoption(
        "--gpus", default=None, metavar="LIST",
        help="CUDA devices the GPU benchmarks run on, comma-separated indices (0,3); each becomes its own test "
             "(cuda:N in the test id), so baselines compare per GPU. Default: %(default)r (every visible GPU)",
    )
    group.addoption(
        "--matmul-shapes", choices=SHAPE_MODES, default="auto",
        help="Which configured matmul shapes to run: quick (the quick_shapes), full (all), or auto "
             "(full when -m selects cpu or gpu, quick otherwise). Default: %(default)r",
    )


def pytest_configure(config):
    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")
    config.stash[_SUMMARY] = []


def add_summary_line(config, line: str) -> None:
    """Add a line to the end-of-run "achieved TFLOP/s and MFU" section."""
    config.stash.setdefault(_SUMMARY, []).append(line)


def pytest_terminal_summary(terminalreporter, config):
    lines = config.stash.get(_SUMMARY, [])
    if lines:
        terminalreporter.write_sep("-", "accounting: achieved TFLOP/s and MFU (median round)")
        for line in lines:
            terminalreporter.write_line(line)
    note = config.stash.get(_NO_BASELINE, None)
    if note:
        terminalreporter.write_line(note, yellow=True)


def no_baseline_note(benchmarksession) -> str | None:
    """With ``--benchmark-compare`` (the latest baseline) and none saved yet, what is said instead of failing.

    pytest-benchmark raises "--benchmark-compare-fail requires valid --benchmark-compare" (exit 4)
    after the whole run when the storage holds no baseline: the first CI run on a fresh cache. A
    missing baseline is not an error (README, pytest.ini), so the threshold is not applied and
    this note says why. A baseline named explicitly (``--benchmark-compare=0002``) that is not
    there stays pytest-benchmark's error: that is a wrong name, not a fresh cache.

    >>> from types import SimpleNamespace
    >>> print(no_baseline_note(SimpleNamespace(compare=True, compare_fail=["median:10%"], compared_mapping={},
    ...                                        storage="file://.benchmarks")))
    accounting: --benchmark-compare found no saved baseline in file://.benchmarks, so nothing was compared and --benchmark-compare-fail was not applied; save one with --benchmark-autosave
    """
    if getattr(benchmarksession, "compare", None) is not True or getattr(benchmarksession, "compared_mapping", True):
        return None
    applied = ", so nothing was compared and --benchmark-compare-fail was not applied" \
        if getattr(benchmarksession, "compare_fail", None) else ", so nothing was compared"
    return (f"accounting: --benchmark-compare found no saved baseline in {benchmarksession.storage}{applied}; "
            "save one with --benchmark-autosave")


def pytest_sessionstart(session):
    benchmarksession = getattr(session.config, "_benchmarksession", None)  # loaded its baselines at configure
    note = no_baseline_note(benchmarksession) if benchmarksession is not None else None
    if note:
        benchmarksession.compare_fail = []  # nothing to compare against: no threshold to fail
        session.config.stash[_NO_BASELINE] = note


def shape_mode(config) -> str:
    """``"quick"`` or ``"full"``: ``auto`` is full when the ``-m`` expression selects cpu or gpu benchmarks."""
    mode = config.getoption("matmul_shapes", "auto")
    if mode != "auto":
        return mode
    expression = config.getoption("markexpr", "") or ""
    return "full" if re.search(r"(?<!not )\b(cpu|gpu)\b", expression) else "quick"


def native_skip_reason(info: DeviceInfo, dtype) -> str | None:
    """Why a matmul benchmark of ``dtype`` does not run on this device (``None`` when it does).

    :func:`accounting.native_dtypes.native_matmul`'s answer: the configured floors and
    peaks are for native hardware, so a dtype the device only emulates (bf16 on an
    AVX2 CPU), runs as another (tf32 without TF32 units) or cannot run (fp8 before
    Ada) is skipped with its reason — the report's default dtype list drops the same
    ones with the same reason.

    >>> zen3 = DeviceInfo("cpu", "AMD EPYC", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}), vendor="amd")
    >>> native_skip_reason(zen3, "float32") is None, native_skip_reason(zen3, "bf16").startswith("this CPU has no")
    (True, True)
    """
    answer = native_matmul(info, dtype)
    if answer.native:
        return None
    if not answer.runs:
        return answer.reason
    return (f"{answer.reason} (not benchmarked: the floors are for native hardware; "
            f"`python -m accounting report --dtypes {answer.dtype}` times it anyway)")


def gpu_skip_reason(dtype=None, info: DeviceInfo | None = None):
    """Why a GPU benchmark cannot run here (``None`` when it can); ``dtype`` adds :func:`native_skip_reason`.

    ``info`` is the GPU (default: the current CUDA device, detected).

    >>> import torch
    >>> cuda_available() or gpu_skip_reason().startswith("no CUDA device")
    True
    """
    if not cuda_available():
        return f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__})"
    if dtype is not None:
        return native_skip_reason(info if info is not None else detect_device("cuda"), dtype)
    return None


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if item.get_closest_marker("gpu") is None:
            continue
        if reason is None:
            reason = gpu_skip_reason() or ""
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


def gpu_indices(config, device_count: int | None = None) -> list[int]:
    """The CUDA devices the GPU benchmarks run on: ``--gpus`` (checked against the visible ones), else all.

    ``device_count`` defaults to the visible GPUs; with none, ``[0]``: the benchmarks are then
    collected once and skipped with the gpu marker's reason.
    """
    count = len(cuda_device_names()) if device_count is None else device_count
    text = config.getoption("gpus", None)
    if text is None:
        return list(range(count)) or [0]
    indices = []
    for part in text.split(","):
        part = part.strip().removeprefix("cuda:")
        if not part.isdigit():
            raise pytest.UsageError(f"--gpus {text!r}: {part!r} is not a device index (e.g. --gpus 0,3)")
        if count and int(part) >= count:
            raise pytest.UsageError(f"--gpus {text!r}: cuda:{part} does not exist ({count} CUDA device(s) visible)")
        if int(part) not in indices:
            indices.append(int(part))
    if not indices:
        raise pytest.UsageError(f"--gpus {text!r} names no device (e.g. --gpus 0,3)")
    return indices


def gpu_device_params(config, device_count: int | None = None) -> list:
    """``pytest.param("cuda:N", id="cuda:N")`` for each device of :func:`gpu_indices`."""
    return [pytest.param(f"cuda:{index}", id=f"cuda:{index}") for index in gpu_indices(config, device_count)]


# ---- shapes that fit ---------------------------------------------------------------------


def plan_shape(shape, dtype, free_bytes: int, *, extra_bytes: int = 0):
    """``(shape to run, note)``: the configured shape, a halved one that fits, or ``(None, why not)``.

    >>> plan_shape((16384, 16384, 16384), "bf16", 2**30)
    ((8192, 8192, 8192), 'shrunk from 16384x16384x16384 to fit 1.0 GiB free')
    """
    fitted = fit_matmul_shape(shape, dtype, free_bytes, extra_bytes=extra_bytes)
    gib = free_bytes / 2**30
    described = "x".join(map(str, shape))
    if fitted is None:
        return None, f"{described} {format_name(dtype)} does not fit {gib:.1f} GiB free, even shrunk"
    if tuple(fitted) != tuple(shape):
        return fitted, f"shrunk from {described} to fit {gib:.1f} GiB free"
    return tuple(shape), ""


def peak_or_skip(info: DeviceInfo, dtype, config) -> float:
    """The device's peak FLOP/s for ``dtype`` (``--peak-tflops`` wins); skips the test, saying how to fix it, when none is known."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PeakUnknownWarning)
        peak = device_peak_flops(info, dtype, override_tflops=config.getoption("peak_tflops"))
    if peak is None:
        pytest.skip(str(caught[-1].message) if caught else f"no {dtype} peak for {info.name}")
    return peak


def fitted_shape(shape, dtype, device):
    """The shape to run on ``device``, shrunk to its free memory; skips the test when nothing fits."""
    device = as_device(device)
    extra = L2_FLUSH_FACTOR * flush_bytes(device)  # the flush buffer the benchmark allocates
    fitted, note = plan_shape(shape, dtype, free_memory_bytes(device), extra_bytes=extra)
    if fitted is None:
        pytest.skip(note)
    return fitted, note


# ---- the FLOPs benchmark fixture -----------------------------------------------------------


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
    GPU alone (``extra_info``: ``host_median_s`` and ``device_median_s``). On the CPU the
    synchronize is a no-op and this is ordinary pytest-benchmark timing.

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
                 operands=(), count_fn=None, count_flops: bool | None = None, min_time_s: float = 0.0):
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

        if min_time_s:  # the warm-up calls run here, timed, to size the rounds (see the class docstring)
            rounds = rounds_for(warm_call_seconds(target, setup, warmup_rounds), rounds=rounds, min_time_s=min_time_s)
            warmup_rounds = 0
        window = _telemetry_window(device)  # GPUs: clock, power, energy and throttling beside the rounds
        with window as sampler:
            self.benchmark.pedantic(target, setup=setup, rounds=rounds, warmup_rounds=warmup_rounds, iterations=1)
        stats = getattr(self.benchmark, "stats", None)
        median = stats.stats.median if stats is not None else None  # None under --benchmark-disable
        if median and device.type == "cuda":
            # The host clock above also times fn's launch and the synchronize's wake-up (tens of µs): fine
            # for comparing runs, wrong for MFU. MFU comes from CUDA events around the same call.
            self.benchmark.extra_info["host_median_s"] = median
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
        if sampler is not None:
            self.benchmark.extra_info["telemetry"] = window_extra_info(
                sampler.summary, work_flops=int(flops) * (rounds + warmup_rounds))
        if median and hasattr(self.config, "stash"):
            mfu_text = f"MFU {result.mfu:.3f}" if result.mfu is not None else "MFU unknown (no peak)"
            peak_text = f"peak {peak / TERA:.4g}" if peak else "peak ?"
            label = getattr(self.benchmark, "name", "benchmark")
            add_summary_line(self.config, f"{label}: {tflops:.4g} TFLOP/s of {peak_text} -> {mfu_text} [{info.name}, {name}]")
        self._record_count(count, given)
        return result

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
    from accounting.telemetry import Sampler

    return Sampler(device)


@pytest.fixture(scope="session")
def benchmark_config(pytestconfig):
    """The validated benchmark matrix (``--benchmarks-json`` or the default ``benchmarks.json``)."""
    return load_benchmarks(pytestconfig.getoption("benchmarks_json", None))


@pytest.fixture
def flops_benchmark(benchmark, pytestconfig):
    """``flops_benchmark(fn, dtype=..., device=..., flops=None)`` → :class:`FlopsResult`, with FLOPs/MFU in ``extra_info``.

    Without ``flops=`` the FLOPs of one call are counted by ``FlopCounterMode`` (see :class:`FlopsBenchmark`).
    """
    return FlopsBenchmark(benchmark, pytestconfig, infos=pytestconfig.stash.setdefault(_DEVICE_INFOS, {}))


# ---- machine info and the comparison guard -------------------------------------------------


def accounting_machine_info(device=None) -> dict:
    """Hardware facts that decide matmul speed, stable from run to run (nothing that jitters).

    ``device=None`` describes ``cuda:0`` when CUDA is available, else only the CPU.
    """
    cpu = detect_device("cpu")
    info = {
        "accelerator": None,
        "torch": torch.__version__,
        "runtime": None,
        "tf32": tf32_flags(),  # read without raising, whichever TF32 API was used
        "cpu_model": cpu.name,
        "cpu_cores": cpu.cores,
        "cpu_threads": torch.get_num_threads(),
        "cpu_clock_ghz": cpu.clock_ghz,
        "cpu_clock_source": cpu.clock_source,
    }
    if cpu.clock_source in MEASURED_CLOCK_SOURCES:
        # A measured clock jitters by a few percent from run to run, and so would a peak
        # derived from it: keep them out of the identity. Each benchmark's extra_info
        # still records the peak its MFU was computed with.
        info["cpu_clock_ghz"] = None
    for dtype in ("float32", "bfloat16"):
        if info["cpu_clock_ghz"] is None:
            info[f"cpu_peak_{dtype}_tflops"] = None
            continue
        try:
            peak = cpu_peak_flops(dtype, flags=cpu.cpu_flags, cores=cpu.cores, ghz=cpu.clock_ghz, vendor=cpu.vendor)
            info[f"cpu_peak_{dtype}_tflops"] = round(peak / TERA, 4)
        except AccountingError:
            info[f"cpu_peak_{dtype}_tflops"] = None
    gpu = detect_device(device) if device is not None else (detect_device("cuda:0") if cuda_available() else None)
    if gpu is not None and gpu.kind == "cuda":
        info.update({
            "accelerator": gpu.name,
            "compute_capability": ".".join(map(str, gpu.compute_capability)),
            "sm_count": gpu.multiprocessors,
            "gpu_memory_bytes": gpu.memory_bytes,
            "gpu_arch": gpu.arch,
            "driver": gpu.driver,
            "runtime": gpu.runtime,
        })
    return info


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info.pop("node", None)  # CI runners are ephemeral: the host name changes every run
    cpu = machine_info.get("cpu")
    if isinstance(cpu, dict):
        for key in _VOLATILE_CPU_FIELDS:  # the current clock, sampled: differs every run
            cpu.pop(key, None)
    machine_info[MACHINE_INFO_KEY] = accounting_machine_info()


def baseline_kinds(compared_benchmark: dict) -> set[str]:
    """Device kinds the baseline's benchmarks ran on (``extra_info["device_kind"]``; ``"unknown"`` for
    benchmarks that do not say, such as plain ``benchmark`` fixtures).

    >>> sorted(baseline_kinds({"benchmarks": [{"extra_info": {"device_kind": "cpu"}}, {"extra_info": {}}]}))
    ['cpu', 'unknown']
    """
    return {(bench.get("extra_info") or {}).get("device_kind") or "unknown"
            for bench in compared_benchmark.get("benchmarks", [])}


def machine_mismatch(current: dict, saved: dict, kinds=None) -> list[str]:
    """Identity fields that differ between two ``machine_info["accounting"]`` dicts (empty: comparable).

    ``kinds`` are the device kinds of the benchmarks compared (:func:`baseline_kinds`). CPU
    benchmarks, and benchmarks of unknown kind, run on the host CPU: it is compared. GPU
    benchmarks are compared on the accelerator, and only where this run has one (without one they
    are skipped, so nothing of theirs is compared). ``kinds=None``: GPU benchmarks where this run
    has an accelerator, else CPU benchmarks (also for an empty ``kinds``).

    >>> machine_mismatch({"accelerator": None, "cpu_model": "Xeon", "cpu_cores": 2},
    ...                  {"accelerator": None, "cpu_model": "Xeon", "cpu_cores": 2})
    []
    """
    gpu_here = current.get("accelerator") is not None
    if not kinds:
        kinds = {"cuda"} if gpu_here else {"cpu"}
    fields = list(IDENTITY_FIELDS_CPU) if set(kinds) - {"cuda"} else []
    if gpu_here and set(kinds) - {"cpu"}:
        fields = list(IDENTITY_FIELDS_GPU) + fields
    return [field for field in fields if not _same(field, current.get(field), saved.get(field))]


ECC_RESERVED_FRACTION = 1 / 16
"""Share of a GDDR card's memory ECC reserves (T4: 15 of 16 GiB usable with ECC on; A10, L4, L40S alike):
``gpu_memory_bytes`` moves by this much when ECC is toggled, and the card is the same card."""


def _same(field: str, current, saved) -> bool:
    """Identity fields are equal; ``gpu_memory_bytes`` equal up to what ECC reserves on GDDR cards."""
    if field == "gpu_memory_bytes" and isinstance(current, int) and isinstance(saved, int):
        return abs(current - saved) <= ECC_RESERVED_FRACTION * max(current, saved)
    return current == saved


def _describe(info: dict, gpu: bool) -> str:
    if gpu and info.get("accelerator"):
        return f"{info['accelerator']} (compute capability {info.get('compute_capability')}, {info.get('sm_count')} SMs)"
    if gpu:
        return "a machine without an accelerator"
    threads = f", {info['cpu_threads']} threads" if info.get("cpu_threads") is not None else ""
    return f"CPU {info.get('cpu_model')} ({info.get('cpu_cores')} cores{threads})"


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_benchmark_compare_machine_info(config, benchmarksession, machine_info, compared_benchmark):
    current = machine_info.get(MACHINE_INFO_KEY)
    saved = compared_benchmark.get("machine_info", {}).get(MACHINE_INFO_KEY)
    if current is None:
        return
    if saved is None:
        raise pytest.UsageError(
            "--benchmark-compare: the saved baseline has no accounting machine info, so it cannot be shown to "
            "come from this hardware; save a new baseline here with --benchmark-autosave"
        )
    differing = machine_mismatch(current, saved, baseline_kinds(compared_benchmark))
    gpu = current.get("accelerator") is not None and not set(differing) <= set(IDENTITY_FIELDS_CPU)
    if differing:
        details = ", ".join(f"{field}: {saved.get(field)!r} -> {current.get(field)!r}" for field in differing)
        raise pytest.UsageError(
            f"--benchmark-compare: the baseline was recorded on {_describe(saved, gpu)} but this run is on "
            f"{_describe(current, gpu)} ({details}); timings from different hardware are not comparable. "
            "Compare against a baseline saved on this machine kind (--benchmark-autosave) instead."
        )
