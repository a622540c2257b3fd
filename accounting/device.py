"""The device seam: what device is in use, how to wait for it, and how to time it.

Everything that differs between a CPU and a CUDA (or ROCm) device lives here and only
here: detection (:func:`detect_device`), waiting for queued work (:func:`synchronize`),
the clock a timing loop reads (:func:`clock_for`), free memory and the L2 flush.
``torch.cuda`` is touched only when CUDA is the device asked for (or, for
``detect_device(None)``, to ask whether one exists).

CPU facts come from the machine: ISA flags from ``/proc/cpuinfo`` joined with what
torch's CPUID probe reports (``torch.cpu.get_capabilities()``; a VM's kernel may not
list every flag — a KVM guest here lists no ``amx_fp16`` that oneDNN nonetheless
uses), physical cores from the ``core id`` lines, and a clock (see
:func:`cpu_clock_ghz` for which one and why).

>>> info = detect_device("cpu")
>>> info.kind, info.index, info.compute_capability
('cpu', None, None)
>>> info.cores >= 1 and info.memory_bytes > 0
True
"""

import functools
import os
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from accounting._checks import positive_number_from_text
from accounting._cpu_clock import measured_cpu_ghz, measured_vector_clock
from accounting.errors import AccountingError, AccountingTypeError

CPU_GHZ_ENV = "ACCOUNTING_CPU_GHZ"
"""Environment variable that overrides the CPU clock (GHz) used for the CPU peak."""
MEASURED_CLOCK_SOURCE = "imul-chain measurement"
"""Where the clock came from when :mod:`accounting._cpu_clock` measured it under scalar load."""
VECTOR_CLOCK_SOURCE = "FMA-chain measurement, all cores under vector load"
"""Where the clock came from when :mod:`accounting._cpu_clock` measured it under vector FMA load."""
MEASURED_CLOCK_SOURCES = (VECTOR_CLOCK_SOURCE, MEASURED_CLOCK_SOURCE)
"""Clock sources that are measurements (they jitter by a few percent from run to run)."""
TIMED_KINDS = ("cpu", "cuda")
"""Device types that can be timed: a CPU, or a CUDA (or ROCm) GPU."""

_PROC_CPUINFO = Path("/proc/cpuinfo")
_PROC_MEMINFO = Path("/proc/meminfo")
_CPUFREQ_MAX = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
_KHZ_PER_GHZ = 1e6
_MHZ_PER_GHZ = 1e3

L2_FLUSH_FACTOR = 2
"""The L2 flush writes a buffer this many times the L2 size, so nothing of the operands survives."""
UNREPORTED_CACHE_BYTES = 256 * 2**20
"""Cache size assumed for a CUDA device whose L2 size torch does not report (``L2_cache_size`` came with
torch 2.5, pytorch/pytorch#132819): the largest last-level cache of any GPU in the peak table (MI300X's
256 MB Infinity Cache), so small operands are still flushed and a flush never falls short."""

LAUNCH_COVER_CYCLES = 200_000
"""GPU clock cycles of spinning queued before each timed call (100–200 µs at 1–2 GHz): longer than
the host takes to queue an L2 flush, the start event and a Python-level call (tens of µs), so the
call's kernels are queued before the GPU reaches the start event. Costs wall time, not timed time."""

# torch.cpu.get_capabilities() spells some flags differently from /proc/cpuinfo.
_TORCH_FLAG_NAMES = {
    "fma3": "fma",
    "avx512_f": "avx512f",
    "avx512_bw": "avx512bw",
    "avx512_cd": "avx512cd",
    "avx512_dq": "avx512dq",
    "avx512_vl": "avx512vl",
    "avx512_ifma": "avx512ifma",
    "avx512_vbmi": "avx512vbmi",
}


@dataclass(frozen=True)
class DeviceInfo:
    """Facts about one device, enough to look up its peak and label its results.

    ``kind`` is ``"cpu"`` or ``"cuda"`` (ROCm devices are ``"cuda"`` in torch, with
    ``runtime`` starting ``"ROCm"``). CPU-only fields are ``None`` on a GPU and vice versa.
    """

    kind: str
    name: str
    index: int | None
    memory_bytes: int
    compute_capability: tuple[int, int] | None = None
    cpu_flags: frozenset[str] | None = field(default=None, repr=False)
    cores: int | None = None
    clock_ghz: float | None = None
    clock_source: str | None = None
    scalar_clock_ghz: float | None = None
    vendor: str | None = None
    multiprocessors: int | None = None
    l2_cache_bytes: int | None = None
    arch: str | None = None
    runtime: str | None = None
    driver: str | None = None

    @property
    def device(self) -> torch.device:
        """The ``torch.device`` this describes.

        >>> detect_device("cpu").device
        device(type='cpu')
        """
        return torch.device(self.kind) if self.index is None else torch.device(self.kind, self.index)


# ---- CPU facts ---------------------------------------------------------------------------


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def parse_cpuinfo(text: str) -> list[dict[str, str]]:
    """Split ``/proc/cpuinfo`` text into one ``{field: value}`` dict per logical CPU.

    >>> parse_cpuinfo("processor : 0\\ncpu MHz : 2700.000\\n\\nprocessor : 1\\n")[0]["cpu MHz"]
    '2700.000'
    """
    blocks = []
    for chunk in text.strip().split("\n\n"):
        fields = {}
        for line in chunk.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if fields:
            blocks.append(fields)
    return blocks


def _cpuinfo_blocks() -> list[dict[str, str]]:
    return _parsed_cpuinfo(_PROC_CPUINFO)


@functools.cache
def _parsed_cpuinfo(path: Path) -> list[dict[str, str]]:
    """``/proc/cpuinfo`` read and parsed once per process (keyed by path, so tests can point elsewhere)."""
    text = _read(path)
    return parse_cpuinfo(text) if text else []


@functools.cache
def _torch_cpu_capabilities() -> dict:
    """torch's CPUID probe, asked once per process (``{}`` on a torch without it)."""
    try:
        return dict(torch.cpu.get_capabilities())
    except (AttributeError, RuntimeError):  # older torch
        return {}


def cpu_flags() -> frozenset[str]:
    """ISA flags of this CPU, in ``/proc/cpuinfo`` spelling (``avx512f``, ``amx_bf16``, ...).

    The union of the kernel's list and torch's own CPUID probe.
    """
    flags = set()
    for block in _cpuinfo_blocks()[:1]:
        flags.update(block.get("flags", "").split())
    for name, present in _torch_cpu_capabilities().items():
        if present is True:
            flags.add(_TORCH_FLAG_NAMES.get(name, name))
    return frozenset(flags)


def cpu_vendor() -> str | None:
    """``"intel"``, ``"amd"`` or ``None`` (unknown), from ``vendor_id``."""
    blocks = _cpuinfo_blocks()
    vendor = blocks[0].get("vendor_id", "") if blocks else ""
    return {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(vendor)


def cpu_model_name() -> str:
    """The CPU's model string (``model name`` in ``/proc/cpuinfo``), or the platform's guess."""
    blocks = _cpuinfo_blocks()
    if blocks and blocks[0].get("model name"):
        return blocks[0]["model name"]
    import platform

    return platform.processor() or platform.machine() or "unknown CPU"


def physical_cores() -> int:
    """Physical cores this process may run on (SMT siblings counted once).

    From the ``physical id``/``core id`` of the CPUs in this process's affinity mask;
    falls back to torch's probe, then to ``os.cpu_count()``.
    """
    blocks = _cpuinfo_blocks()
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    cores = set()
    for block in blocks:
        if "core id" not in block:
            cores = set()
            break
        if allowed is not None and int(block.get("processor", -1)) not in allowed:
            continue
        cores.add((block.get("physical id", "0"), block["core id"]))
    if cores:
        return len(cores)
    count = _torch_cpu_capabilities().get("num_physical_cores")
    return int(count or os.cpu_count() or 1)


_MODEL_GHZ = re.compile(r"@\s*([0-9.]+)\s*GHz", re.IGNORECASE)


def cpu_clock_ghz() -> tuple[float, str]:
    """The clock (GHz) the CPU peak is computed with, and where it came from.

    In order of preference:

    1. ``$ACCOUNTING_CPU_GHZ`` — a user who knows the sustained all-core clock says so.
    2. Measured under vector load (x86-64 with AVX2+FMA or AVX-512, a CPU generation
       whose FMA latency is known): the mean clock of every physical core while all of
       them run FMA chains on the widest registers the CPU has
       (:func:`accounting._cpu_clock.measure_vector_clock`). Cores lower their clock
       under wide-vector load, so this is the clock a float32 peak holds at; a scalar
       clock made the peak ~12 % high on an AVX-512 host. (bf16/fp16 peaks on AMX
       hosts use it too; their tile units may run at yet another clock.)
    3. ``cpufreq/cpuinfo_max_freq`` — the maximum (turbo) clock. It is an upper bound
       on the sustained all-core clock, so the peak may be high and MFU low, never
       the reverse: MFU above 1 would be worse than a pessimistic MFU.
    4. Measured under scalar load (x86-64): the clock one busy core runs at, from the
       latency of a chain of dependent multiplies (:mod:`accounting._cpu_clock`). VMs
       hide cpufreq and report only the nominal clock, while the cores run at turbo
       (here: 2.7 GHz reported, ~3.5 GHz measured); a peak from the nominal clock made
       MFU read above 1. Single-core turbo is again an upper bound on the all-core clock.
    5. ``@ 2.70GHz`` in the model name — the base clock Intel prints there.
    6. The highest ``cpu MHz`` in ``/proc/cpuinfo`` — the current clock on bare metal;
       in a VM, the nominal TSC clock the hypervisor reports. Turbo can run above
       both 5 and 6, so there MFU may read high; set ``$ACCOUNTING_CPU_GHZ`` (or pass
       ``ghz=``) if you know better.

    The scalar measurement stays beside the chosen clock in :class:`DeviceInfo`
    (``scalar_clock_ghz``) and in the report.
    """
    override = os.environ.get(CPU_GHZ_ENV)
    if override:
        return positive_number_from_text(override, f"${CPU_GHZ_ENV}", "GHz"), f"${CPU_GHZ_ENV}"
    vector = measured_vector_clock()
    if vector is not None:
        return round(vector.ghz, 2), VECTOR_CLOCK_SOURCE
    text = _read(_CPUFREQ_MAX)
    if text and text.strip().isdigit():
        return int(text) / _KHZ_PER_GHZ, "cpufreq cpuinfo_max_freq"
    measured = measured_cpu_ghz()
    if measured is not None:
        return round(measured, 2), MEASURED_CLOCK_SOURCE
    blocks = _cpuinfo_blocks()
    match = _MODEL_GHZ.search(blocks[0].get("model name", "")) if blocks else None
    if match:
        return float(match.group(1)), "model name"
    mhz = [float(block["cpu MHz"]) for block in blocks if block.get("cpu MHz")]
    if mhz:
        return max(mhz) / _MHZ_PER_GHZ, "/proc/cpuinfo cpu MHz"
    raise AccountingError(
        f"cannot find this CPU's clock (no cpufreq, no GHz in the model name, no cpu MHz); set ${CPU_GHZ_ENV}"
    )


def _rounded(ghz: float | None) -> float | None:
    return None if ghz is None else round(ghz, 2)


def _cpu_memory_bytes() -> int:
    text = _read(_PROC_MEMINFO) or ""
    match = re.search(r"^MemTotal:\s+(\d+)\s+kB", text, re.MULTILINE)
    if match:
        return int(match.group(1)) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _cpu_available_bytes() -> int:
    text = _read(_PROC_MEMINFO) or ""
    match = re.search(r"^MemAvailable:\s+(\d+)\s+kB", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else _cpu_memory_bytes()


# ---- device detection --------------------------------------------------------------------


def as_device(device) -> torch.device:
    """``device`` (a string, ``torch.device`` or :class:`DeviceInfo`) as a ``torch.device``.

    >>> as_device("cuda:1")
    device(type='cuda', index=1)
    >>> as_device("cuda:256")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: device 'cuda:256': index 256 is out of the range torch can address
    """
    if isinstance(device, DeviceInfo):
        return device.device
    if isinstance(device, torch.device):
        return device
    if isinstance(device, str):
        try:
            parsed = torch.device(device)
        except RuntimeError as error:
            raise AccountingError(f"unknown device {device!r}: {error}") from None
        _, _, index = device.partition(":")
        if index.strip().isdigit() and int(index) != parsed.index:
            # torch keeps an index in a small integer and wraps larger ones ("cuda:256" -> cuda:0)
            raise AccountingError(f"device {device!r}: index {int(index)} is out of the range torch can address")
        return parsed
    raise AccountingTypeError(f"device must be a string, torch.device or DeviceInfo, got {device!r}")


def _check_cuda(device: torch.device) -> int:
    """The index of a CUDA ``device`` that exists here; raise naming it otherwise."""
    if not cuda_available():
        raise AccountingError(f"device {str(device)!r} is not available: torch.cuda.is_available() is False")
    index = device.index if device.index is not None else torch.cuda.current_device()
    count = torch.cuda.device_count()
    if not 0 <= index < count:
        raise AccountingError(f"device {str(device)!r} is not available: {count} CUDA device(s) present")
    return index


def timed_device(device) -> torch.device:
    """``device`` as a ``torch.device`` if work on it can be timed: the CPU, or a CUDA device present here.

    Anything else (``meta``, ``mps``, CUDA on a machine without it) raises
    :class:`AccountingError` naming the device, before any clock is read.

    >>> timed_device("cpu")
    device(type='cpu')
    >>> timed_device("meta")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: device 'meta' cannot be timed: only cpu and cuda can
    """
    device = as_device(device)
    if device.type not in TIMED_KINDS:
        raise AccountingError(f"device {str(device)!r} cannot be timed: only {' and '.join(TIMED_KINDS)} can")
    if device.type == "cuda":
        _check_cuda(device)
    return device


def _cuda_info(device: torch.device) -> DeviceInfo:
    index = _check_cuda(device)
    props = torch.cuda.get_device_properties(index)
    hip = getattr(torch.version, "hip", None)
    runtime = f"ROCm {hip}" if hip else f"CUDA {torch.version.cuda}"
    return DeviceInfo(
        kind="cuda",
        name=torch.cuda.get_device_name(index),
        index=index,
        memory_bytes=int(props.total_memory),
        compute_capability=(int(props.major), int(props.minor)),
        multiprocessors=int(props.multi_processor_count),
        l2_cache_bytes=_reported_l2_bytes(props),
        # gcnArchName is only meaningful on ROCm; CUDA builds fill it with the device name.
        arch=(getattr(props, "gcnArchName", None) or None) if hip else None,
        runtime=runtime,
        driver=_driver_version(),
    )


@functools.cache
def _driver_version() -> str | None:
    """The GPU driver version, from NVML when it can be had; ``None`` otherwise (asked once per process)."""
    try:
        with warnings.catch_warnings():  # the pynvml shim warns that it is deprecated
            warnings.simplefilter("ignore")
            import pynvml  # nvidia-ml-py: not installed by torch; pip install 'accounting[gpu]'

            pynvml.nvmlInit()
            version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - no NVML, no driver string; not worth failing for
        return None


def cuda_available() -> bool:
    """Whether a CUDA (or ROCm) device can be used; asks the driver without creating a context."""
    return torch.cuda.is_available()


def cuda_device_names() -> list[str]:
    """Names of the CUDA (or ROCm) devices, by index; empty without CUDA.

    >>> cuda_device_names() if not cuda_available() else []
    []
    """
    if not cuda_available():
        return []
    return [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())]


def cuda_uuid_and_bus_id(device) -> tuple[str | None, str | None]:
    """``(uuid, pci_bus_id)`` of a CUDA device, from torch's device properties (``None`` where this
    torch build does not give one). The bus id is ``domain:bus:device.0``, as ``nvidia-smi`` prints it.
    """
    props = torch.cuda.get_device_properties(as_device(device))
    uuid = getattr(props, "uuid", None)
    uuid = str(uuid) if uuid is not None and str(uuid) else None
    if uuid is not None and not uuid.startswith("GPU-") and torch.version.hip is None:
        uuid = f"GPU-{uuid}"
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if all(isinstance(part, int) and not isinstance(part, bool) and part >= 0 for part in parts):
        return uuid, "{:04x}:{:02x}:{:02x}.0".format(*parts)
    return uuid, None


def cuda_capability(device=None) -> tuple[tuple[int, int], str]:
    """``((major, minor), name)`` of a CUDA device (the current one by default)."""
    index = None if device is None else as_device(device).index
    return tuple(torch.cuda.get_device_capability(index)), torch.cuda.get_device_name(index)


def _reported_l2_bytes(props) -> int | None:
    """``props.L2_cache_size`` in bytes, or ``None`` where torch does not report it (torch < 2.5).

    >>> from types import SimpleNamespace
    >>> _reported_l2_bytes(SimpleNamespace(L2_cache_size=50 * 2**20)), _reported_l2_bytes(SimpleNamespace())
    (52428800, None)
    """
    return int(getattr(props, "L2_cache_size", 0) or 0) or None


def l2_cache_bytes(device) -> int:
    """L2 size of a CUDA device in bytes; 0 elsewhere (CPU benchmarks run warm, as CPU code does).

    Where torch does not report it (torch < 2.5), ``UNREPORTED_CACHE_BYTES``.

    >>> l2_cache_bytes("cpu")
    0
    """
    device = as_device(device)
    if device.type != "cuda":
        return 0
    return _reported_l2_bytes(torch.cuda.get_device_properties(device)) or UNREPORTED_CACHE_BYTES


def release_cached_memory(device) -> None:
    """Hand the caching allocator's free blocks back to the driver (CUDA); a no-op on the CPU.

    The one place the package calls ``torch.cuda.empty_cache``.
    """
    if as_device(device).type == "cuda":
        torch.cuda.empty_cache()


def detect_device(device=None) -> DeviceInfo:
    """Describe ``device`` (``None``: ``cuda:0`` if CUDA is available, else the CPU).

    >>> detect_device("cpu").name == cpu_model_name()
    True
    >>> detect_device("tpu")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: unknown device 'tpu': ...
    """
    if device is None:
        device = torch.device("cuda", 0) if cuda_available() else torch.device("cpu")
    device = as_device(device)
    if device.type == "cuda":
        return _cuda_info(device)
    if device.type != "cpu":
        raise AccountingError(f"device {str(device)!r} is not supported: only cpu and cuda are")
    try:
        ghz, source = cpu_clock_ghz()
    except AccountingError as error:  # no clock found: the device is still described; its peak is not
        ghz, source = None, str(error)
    return DeviceInfo(
        kind="cpu",
        name=cpu_model_name(),
        index=None,
        memory_bytes=_cpu_memory_bytes(),
        cpu_flags=cpu_flags(),
        cores=physical_cores(),
        clock_ghz=ghz,
        clock_source=source,
        scalar_clock_ghz=_rounded(measured_cpu_ghz()),
        vendor=cpu_vendor(),
    )


def free_memory_bytes(device) -> int:
    """Bytes that can still be allocated on ``device`` (``torch.cuda.mem_get_info`` on CUDA)."""
    device = as_device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    return _cpu_available_bytes()


# ---- waiting and timing ------------------------------------------------------------------


def synchronize(device) -> None:
    """Wait until all work queued on ``device`` has finished (a no-op on the CPU).

    Kernels on a GPU run asynchronously: a host clock read before this measures only
    the launch.

    >>> synchronize("cpu")
    """
    device = as_device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class HostClock:
    """Times with ``time.perf_counter``, synchronizing the device before every read.

    ``synchronize`` and ``now`` can be replaced (tests pass recording fakes).

    >>> clock = HostClock()
    >>> start = clock.mark(); end = clock.mark()
    >>> clock.elapsed(start, end) >= 0
    True
    """

    def __init__(self, synchronize=lambda: None, now=time.perf_counter):
        self.synchronize = synchronize
        self._now = now

    def mark(self):
        """Wait for the device, then read the host clock."""
        self.synchronize()
        return self._now()

    def elapsed(self, start, end) -> float:
        """Seconds between two marks."""
        return end - start

    def flush_cache(self) -> None:
        """Nothing to flush: CPU benchmarks run warm, as real CPU code does."""

    def occupy(self) -> None:
        """Nothing to do: the host clock waits for the device before every read."""


class EventClock:
    """Times a CUDA stream with events recorded on it; no host clock is involved.

    ``mark`` records an event after the work already queued; ``elapsed`` waits for the
    end event and returns the GPU time between the two. ``occupy`` queues a spin
    (``torch.cuda._sleep``) so the GPU is still busy when the start event and the timed
    call are queued behind it: an idle GPU would stamp the start event at once and then
    wait for the host to launch the call (10–20 µs, 5–20% of a 100 µs kernel).
    ``event_factory``, ``synchronize`` and ``sleep`` can be replaced (tests pass recording fakes).
    """

    def __init__(self, device, *, event_factory=None, synchronize=None, l2_cache_bytes=None, sleep=None):
        self.device = as_device(device)
        self._event = event_factory or (lambda: torch.cuda.Event(enable_timing=True))
        self.synchronize = synchronize or (lambda: torch.cuda.synchronize(self.device))
        self._sleep = sleep or self._spin
        self._l2_bytes = l2_cache_bytes
        self._flush_buffer = None

    def _spin(self, cycles: int) -> None:
        with torch.cuda.device(self.device):  # on the timed device's current stream, as mark() records
            torch.cuda._sleep(cycles)

    def occupy(self) -> None:
        """Queue ``LAUNCH_COVER_CYCLES`` of spinning on this device's current stream (does not wait)."""
        self._sleep(LAUNCH_COVER_CYCLES)

    def mark(self):
        """Record an event on this device's current stream (does not wait).

        The stream is this clock's device's, not the current device's: timing ``cuda:1``
        while ``cuda:0`` is current must not time ``cuda:0``'s idle stream.
        """
        event = self._event()
        event.record(torch.cuda.current_stream(self.device))
        return event

    def elapsed(self, start, end) -> float:
        """Wait for ``end``, then the seconds between the events."""
        end.synchronize()
        return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds

    def flush_cache(self) -> None:
        """Overwrite L2 so the next run reads its operands from memory, as a cold call would."""
        with torch.cuda.device(self.device):  # the flush runs on the timed device's current stream
            if self._flush_buffer is None:
                size = self._l2_bytes if self._l2_bytes is not None else l2_cache_bytes(self.device)
                self._flush_buffer = torch.empty(L2_FLUSH_FACTOR * max(size, 1), dtype=torch.int8, device=self.device)
            self._flush_buffer.zero_()


def clock_for(device, *, cache_bytes: int | None = None):
    """The clock that times work on ``device``: CUDA events on a GPU, ``perf_counter`` on the CPU.

    Only those two (see :func:`timed_device`): anything else raises naming the device.
    ``cache_bytes`` sizes a GPU clock's cache flush (default: :func:`l2_cache_bytes`;
    :func:`accounting.timing.flush_bytes` gives the last-level cache).

    >>> type(clock_for("cpu")).__name__
    'HostClock'
    """
    device = timed_device(device)
    if device.type == "cuda":
        return EventClock(device, l2_cache_bytes=cache_bytes)
    return HostClock(synchronize=lambda: synchronize(device))


# ---- float32 matmul mode (TF32) ------------------------------------------------------------
#
# Two APIs set TF32 (torch/csrc .. aten/src/ATen/Context.cpp):
# - legacy: ``torch.set_float32_matmul_precision`` ("highest" / "high" / "medium") and
#   ``torch.backends.cuda.matmul.allow_tf32``; both write one global precision (and, on torch >= 2.9,
#   the per-backend flags below too);
# - new (torch >= 2.9): per-backend ``fp32_precision`` flags ("ieee", "tf32", "bf16", "none" = inherit
#   from the backend's "all", then from "generic"), written alone by their setters.
# Once only the new flags are set, torch >= 2.9 refuses to read the legacy ones (RuntimeError: "mix of the
# legacy and new APIs"), and so does cuBLAS's allowTF32CuBLAS(). So flags are read through the new API where
# it exists, and switched with the legacy setter, which keeps both consistent.

_LEGACY_LINKED = (("cuda", "matmul"), ("mkldnn", "matmul"))
"""Backend flags ``torch.set_float32_matmul_precision`` writes besides the global precision (torch >= 2.9)."""


def _new_tf32_api() -> bool:
    """Whether this torch has the per-backend ``fp32_precision`` flags (2.9+)."""
    return hasattr(torch._C, "_get_fp32_precision_getter")


def _fp32_precision(backend: str, op: str) -> str:
    """A per-backend flag as set (``"none"`` included), read without any consistency check."""
    return torch._C._get_fp32_precision_getter(backend, op)


def _resolved_fp32_precision(backend: str, op: str) -> str:
    """The precision a backend's op really uses: its flag, else its backend's ``"all"``, else ``generic``'s."""
    for key in ((backend, op), (backend, "all"), ("generic", "all")):
        precision = _fp32_precision(*key)
        if precision != "none":
            return precision
    return "none"


def _legacy(read):
    """``read()`` a legacy flag: ``None`` where torch refuses (mixed APIs); quiet where torch warns it is deprecated."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*new API settings to control TF32", category=UserWarning)
        try:
            return read()
        except RuntimeError:
            return None


def tf32_enabled() -> bool:
    """Whether CUDA float32 matmuls may use TF32 tensor cores right now (reads flags; no CUDA init, never raises).

    >>> with float32_matmul_mode(tf32=True):
    ...     tf32_enabled()
    True
    """
    if _new_tf32_api():
        return _resolved_fp32_precision("cuda", "matmul") == "tf32"
    return bool(torch.backends.cuda.matmul.allow_tf32)


def tf32_flags() -> dict:
    """Every TF32 setting as torch holds it, read without raising (for machine info).

    ``float32_matmul_precision`` (the legacy global) is ``None`` where torch refuses to read it
    because the two APIs were mixed; ``cuda_matmul_fp32_precision`` is ``None`` before torch 2.9.

    >>> sorted(tf32_flags())
    ['cuda_matmul', 'cuda_matmul_fp32_precision', 'cudnn', 'float32_matmul_precision']
    """
    new = _new_tf32_api()
    return {
        "cuda_matmul": tf32_enabled(),
        "cuda_matmul_fp32_precision": _fp32_precision("cuda", "matmul") if new else None,
        "float32_matmul_precision": _legacy(torch.get_float32_matmul_precision),
        "cudnn": (_resolved_fp32_precision("cuda", "conv") == "tf32") if new
        else bool(torch.backends.cudnn.allow_tf32),
    }


class float32_matmul_mode:  # noqa: N801 - used as a context manager, named like one
    """Set whether CUDA float32 matmuls use TF32 (``tf32=True``) or plain FP32, and restore exactly on exit.

    Switched with ``torch.set_float32_matmul_precision`` ("high" / "highest"), which writes the legacy
    global and, on torch >= 2.9, the per-backend flags, so both APIs agree inside the block (nothing that
    reads ``allow_tf32`` or ``get_float32_matmul_precision()`` raises). On exit the legacy global and the
    per-backend flags it touched are put back as they were, a mixed state included. Touches no device.

    >>> before = tf32_enabled()
    >>> with float32_matmul_mode(tf32=False):
    ...     tf32_enabled(), torch.get_float32_matmul_precision()
    (False, 'highest')
    >>> tf32_enabled() == before
    True
    """

    def __init__(self, *, tf32: bool):
        self.tf32 = bool(tf32)
        self._saved = None

    def __enter__(self):
        linked = {}
        if _new_tf32_api():
            linked = {key: _fp32_precision(*key) for key in _LEGACY_LINKED}
            for key in linked:  # with these at "ieee" the legacy global reads without a mixed-API error
                torch._C._set_fp32_precision_setter(*key, "ieee")
        self._saved = (_legacy(torch.get_float32_matmul_precision), linked)
        torch.set_float32_matmul_precision("high" if self.tf32 else "highest")
        return self

    def __exit__(self, *exc_info):
        legacy, linked = self._saved
        torch.set_float32_matmul_precision(legacy)
        for key, value in linked.items():
            torch._C._set_fp32_precision_setter(*key, value)
        return False
