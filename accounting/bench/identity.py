"""Machine identity in saved benchmarks, and the guard that refuses to compare timings across hardware.

pytest-benchmark's ``machine_info`` gains an ``"accounting"`` entry: the accelerator, its
compute capability, SMs, memory, driver, CUDA/ROCm and torch versions, TF32 flags, the
CPU model and its estimated peak (fields that change from run to run left out), and on a GPU how its
benchmarks are timed (``gpu_timing``: :data:`accounting.bench.round_telemetry.TIMING_METHOD`).
``--benchmark-compare`` against a baseline from other hardware, or GPU baselines timed another way (saved
before the warm-up to the working clock and the readings during the rounds: they have no ``gpu_timing``),
stops with an error; the regression gate passes such runs over, naming the field.

>>> machine_mismatch({"accelerator": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"},
...                  {"accelerator": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"})
['accelerator', 'compute_capability']
"""

import pytest
import torch

from accounting._units import TERA
from accounting.bench.round_telemetry import TIMING_METHOD
from accounting.errors import AccountingError
from accounting.hardware.cpu_clock import MEASURED_CLOCK_SOURCES
from accounting.hardware.cpu_peak import cpu_peak_flops
from accounting.hardware.devices import cuda_available, detect_device
from accounting.hardware.precision import tf32_flags

MACHINE_INFO_KEY = "accounting"
IDENTITY_FIELDS_GPU = ("accelerator", "compute_capability", "sm_count", "gpu_memory_bytes", "gpu_timing")
"""``gpu_timing``: the GPU benchmarks' timing method (:data:`~accounting.bench.round_telemetry.TIMING_METHOD`) belongs
to the identity of their work: a baseline timed another way is not compared."""
TIMING_FIELDS = ("gpu_timing",)
IDENTITY_FIELDS_CPU = ("cpu_model", "cpu_cores", "cpu_threads")
"""``cpu_threads``: torch's intra-op threads (``OMP_NUM_THREADS``); a matmul on 1 thread and on 2 are
different measurements of the same CPU, never compared."""
_VOLATILE_CPU_FIELDS = ("hz_actual", "hz_actual_friendly")


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
            "gpu_timing": TIMING_METHOD,
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
    if differing and set(differing) <= set(TIMING_FIELDS):
        raise pytest.UsageError(
            f"--benchmark-compare: the baseline's GPU benchmarks were timed another way (gpu_timing: "
            f"{saved.get('gpu_timing')!r} -> {current.get('gpu_timing')!r}); the warm-up before the rounds and how "
            "they are read change the clock they run at, so their times are not comparable. Save a new baseline "
            "on this machine (--benchmark-autosave) instead.")
    if differing:
        details = ", ".join(f"{field}: {saved.get(field)!r} -> {current.get(field)!r}" for field in differing)
        raise pytest.UsageError(
            f"--benchmark-compare: the baseline was recorded on {_describe(saved, gpu)} but this run is on "
            f"{_describe(current, gpu)} ({details}); timings from different hardware are not comparable. "
            "Compare against a baseline saved on this machine kind (--benchmark-autosave) instead."
        )
