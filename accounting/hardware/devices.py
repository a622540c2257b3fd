"""Which device is in use and what it is: the detection half of the device seam.

Everything that differs between a CPU and a CUDA (or ROCm) device is asked here or in
:mod:`accounting.hardware.clocks`: detection (:func:`detect_device`), free memory, the L2
size a cold call must miss. ``torch.cuda`` is touched only when CUDA is the device asked
for (or, for ``detect_device(None)``, to ask whether one exists).

>>> info = detect_device("cpu")
>>> info.kind, info.index, info.compute_capability
('cpu', None, None)
>>> info.cores >= 1 and info.memory_bytes > 0
True
"""

import functools
import warnings
from dataclasses import dataclass, field

import torch

from accounting.errors import AccountingError, AccountingTypeError
from accounting.hardware import cpu_clock
from accounting.hardware.cpu_facts import (
    cpu_available_bytes,
    cpu_flags,
    cpu_memory_bytes,
    cpu_model_name,
    cpu_vendor,
    physical_cores,
)

TIMED_KINDS = ("cpu", "cuda")
"""Device types that can be timed: a CPU, or a CUDA (or ROCm) GPU."""

UNREPORTED_CACHE_BYTES = 256 * 2**20
"""Cache size assumed for a CUDA device whose L2 size torch does not report (``L2_cache_size`` came with
torch 2.5, pytorch/pytorch#132819): the largest last-level cache of any GPU in the peak table (MI300X's
256 MB Infinity Cache), so small operands are still flushed and a flush never falls short."""


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


def _rounded(ghz: float | None) -> float | None:
    return None if ghz is None else round(ghz, 2)



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
            import pynvml  # nvidia-ml-py: not installed by torch; pip install 'pytest-accounting[gpu]'

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
        ghz, source = cpu_clock.cpu_clock_ghz()
    except AccountingError as error:  # no clock found: the device is still described; its peak is not
        ghz, source = None, str(error)
    return DeviceInfo(
        kind="cpu",
        name=cpu_model_name(),
        index=None,
        memory_bytes=cpu_memory_bytes(),
        cpu_flags=cpu_flags(),
        cores=physical_cores(),
        clock_ghz=ghz,
        clock_source=source,
        scalar_clock_ghz=_rounded(cpu_clock.measured_cpu_ghz()),
        vendor=cpu_vendor(),
    )


def free_memory_bytes(device) -> int:
    """Bytes that can still be allocated on ``device`` (``torch.cuda.mem_get_info`` on CUDA)."""
    device = as_device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    return cpu_available_bytes()
