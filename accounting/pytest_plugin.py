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

- markers ``gpu`` (skipped, with the reason, where there is no CUDA device), ``cpu``, ``slow``;
- options ``--peak-tflops`` (override the peak; also ``$ACCOUNTING_PEAK_TFLOPS``),
  ``--benchmarks-json`` and ``--matmul-shapes``;
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
import re
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
    cuda_capability,
    detect_device,
    free_memory_bytes,
    l2_cache_bytes,
    synchronize,
    tf32_enabled,
)
from accounting.errors import AccountingError
from accounting.hardware import PEAK_TFLOPS_ENV, TERA, cpu_peak_flops, device_peak_flops, dtype_name
from accounting.memory import format_name
from accounting.timing import WARMUP_CALLS, achieved_mfu, fit_matmul_shape, should_flush_l2
from accounting.validity import window_extra_info

MARKERS = {
    "gpu": "needs a CUDA device; skipped with a reason where there is none",
    "cpu": "benchmarks that run on the CPU",
    "slow": "takes more than a few seconds",
}
FP8_MIN_CAPABILITY = (8, 9)
"""torch._scaled_mm needs Ada (8.9) or Hopper (9.0) and later."""
MACHINE_INFO_KEY = "accounting"
IDENTITY_FIELDS_GPU = ("accelerator", "compute_capability", "sm_count", "gpu_memory_bytes")
IDENTITY_FIELDS_CPU = ("cpu_model", "cpu_cores")
_VOLATILE_CPU_FIELDS = ("hz_actual", "hz_actual_friendly")
SHAPE_MODES = ("auto", "quick", "full")
_SUMMARY = pytest.StashKey[list]()
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


def shape_mode(config) -> str:
    """``"quick"`` or ``"full"``: ``auto`` is full when the ``-m`` expression selects cpu or gpu benchmarks."""
    mode = config.getoption("matmul_shapes", "auto")
    if mode != "auto":
        return mode
    expression = config.getoption("markexpr", "") or ""
    return "full" if re.search(r"(?<!not )\b(cpu|gpu)\b", expression) else "quick"


def gpu_skip_reason(dtype=None):
    """Why a GPU benchmark cannot run here (``None`` when it can); ``dtype`` adds fp8's capability rule.

    >>> import torch
    >>> cuda_available() or gpu_skip_reason().startswith("no CUDA device")
    True
    """
    if not cuda_available():
        return f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__})"
    if dtype is not None and format_name(dtype).startswith("float8"):
        capability, name = cuda_capability()
        if capability < FP8_MIN_CAPABILITY:
            need = ".".join(map(str, FP8_MIN_CAPABILITY))
            return (f"fp8 matmul (torch._scaled_mm) needs compute capability >= {need}; "
                    f"{name} is {capability[0]}.{capability[1]}")
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


def fitted_shape(shape, dtype, device):
    """The shape to run on ``device``, shrunk to its free memory; skips the test when nothing fits."""
    device = as_device(device)
    extra = L2_FLUSH_FACTOR * l2_cache_bytes(device)  # the flush buffer the benchmark allocates
    fitted, note = plan_shape(shape, dtype, free_memory_bytes(device), extra_bytes=extra)
    if fitted is None:
        pytest.skip(note)
    return fitted, note


# ---- the FLOPs benchmark fixture -----------------------------------------------------------


@dataclass(frozen=True)
class FlopsResult:
    """What one FLOPs benchmark achieved (``mfu`` and ``peak_flops`` are ``None`` when the peak is unknown)."""

    median_s: float | None
    flops: int
    tflops: float | None
    peak_flops: float | None
    mfu: float | None


class FlopsBenchmark:
    """Runs pytest-benchmark's ``pedantic`` mode correctly for asynchronous devices and records FLOPs/MFU.

    pytest-benchmark reads a host clock (``perf_counter``) around the target. A CUDA
    call returns once its kernels are *queued*, so the target here is ``fn()``
    followed by ``synchronize(device)``: the clock stops when the GPU is done. The
    untimed ``setup`` before each round flushes L2 (on CUDA, when the ``operands`` given
    fit in it: :func:`accounting.timing.should_flush_l2`; on CUDA always when none are
    given) and synchronizes, so neither the flush nor the previous round's tail is billed
    to this round. On the CPU the synchronize is a no-op and this is ordinary
    pytest-benchmark timing.

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

    def __call__(self, fn, *, flops: int, dtype, device="cpu", shape=None, rounds: int = 10,
                 warmup_rounds: int = WARMUP_CALLS, flush_cache: bool | None = None, peak: float | None = None,
                 operands=()):
        device = as_device(device)
        info = self.device_info(device)
        name = dtype_name(dtype)
        if peak is None:
            peak = device_peak_flops(info, name, override_tflops=self.config.getoption("peak_tflops", None))
        clock = clock_for(device)
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

        window = _telemetry_window(device)  # GPUs: clock, power, energy and throttling beside the rounds
        with window as sampler:
            self.benchmark.pedantic(target, setup=setup, rounds=rounds, warmup_rounds=warmup_rounds, iterations=1)
        stats = getattr(self.benchmark, "stats", None)
        median = stats.stats.median if stats is not None else None  # None under --benchmark-disable
        tflops = flops / median / TERA if median else None
        result = FlopsResult(median, int(flops), tflops, peak, achieved_mfu(flops, median, peak) if median else None)
        self.benchmark.extra_info.update({
            "flops": int(flops),
            "achieved_tflops": tflops,
            "peak_tflops": peak / TERA if peak else None,
            "mfu": result.mfu,
            "device": info.name,
            "device_kind": info.kind,
            "dtype": name,
            "shape": list(shape) if shape is not None else None,
        })
        if sampler is not None:
            self.benchmark.extra_info["telemetry"] = window_extra_info(
                sampler.summary, work_flops=int(flops) * (rounds + warmup_rounds))
        if median and hasattr(self.config, "stash"):
            mfu_text = f"MFU {result.mfu:.3f}" if result.mfu is not None else "MFU unknown (no peak)"
            peak_text = f"peak {peak / TERA:.4g}" if peak else "peak ?"
            label = getattr(self.benchmark, "name", "benchmark")
            add_summary_line(self.config, f"{label}: {tflops:.4g} TFLOP/s of {peak_text} -> {mfu_text} [{info.name}, {name}]")
        return result


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
    """``flops_benchmark(fn, flops=..., dtype=..., device=...)`` → :class:`FlopsResult`, with FLOPs/MFU in ``extra_info``."""
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
        "tf32": {
            "cuda_matmul": tf32_enabled(),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cudnn": bool(torch.backends.cudnn.allow_tf32),
        },
        "cpu_model": cpu.name,
        "cpu_cores": cpu.cores,
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


def machine_mismatch(current: dict, saved: dict) -> list[str]:
    """Identity fields that differ between two ``machine_info["accounting"]`` dicts (empty: comparable).

    A run with an accelerator is compared on the accelerator (its host CPU does not
    matter); a run without one can only produce CPU benchmarks, so it is compared on
    the CPU (whatever accelerator the baseline's machine had).

    >>> machine_mismatch({"accelerator": None, "cpu_model": "Xeon", "cpu_cores": 2},
    ...                  {"accelerator": None, "cpu_model": "Xeon", "cpu_cores": 2})
    []
    """
    fields = IDENTITY_FIELDS_GPU if current.get("accelerator") is not None else IDENTITY_FIELDS_CPU
    return [field for field in fields if current.get(field) != saved.get(field)]


def _describe(info: dict, gpu: bool) -> str:
    if gpu and info.get("accelerator"):
        return f"{info['accelerator']} (compute capability {info.get('compute_capability')}, {info.get('sm_count')} SMs)"
    if gpu:
        return "a machine without an accelerator"
    return f"CPU {info.get('cpu_model')} ({info.get('cpu_cores')} cores)"


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
    differing = machine_mismatch(current, saved)
    gpu = current.get("accelerator") is not None
    if differing:
        details = ", ".join(f"{field}: {saved.get(field)!r} -> {current.get(field)!r}" for field in differing)
        raise pytest.UsageError(
            f"--benchmark-compare: the baseline was recorded on {_describe(saved, gpu)} but this run is on "
            f"{_describe(current, gpu)} ({details}); timings from different hardware are not comparable. "
            "Compare against a baseline saved on this machine kind (--benchmark-autosave) instead."
        )
