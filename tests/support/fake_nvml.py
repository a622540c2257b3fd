"""A fake ``pynvml`` module for telemetry tests: scripted clocks, power, energy, throttling and neighbours.

Install it with ``monkeypatch.setitem(sys.modules, "pynvml", fake)``. Every attribute a
test changes (``clock_mhz``, ``throttle_mask``, ...) is read on the next NVML call, so
a test can throttle the device in the middle of a window.

What it copies from nvidia-ml-py (``pynvml.py``, 13.x) rather than invents: the error classes
(``NVMLError`` with the return code in ``.value``, ``NVMLError_FunctionNotFound`` and kin as
subclasses), ``nvmlDeviceGetFieldValues`` returning ``c_nvmlFieldValue_t`` structures (the same
ctypes layout: ``fieldId``, ``scopeId``, ``timestamp``, ``latencyUsec``, ``valueType``, ``nvmlReturn``,
``value`` a union of ``dVal``, ``uiVal``, ...), ``nvmlDeviceIsMigDeviceHandle`` returning a ``c_uint``,
and ``nvmlDeviceGetCudaComputeCapability`` returning ``(major, minor)``.
"""

import ctypes
import types
from dataclasses import dataclass, field

NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0
NVML_FI_DEV_POWER_INSTANT = 186
NVML_VALUE_TYPE_UNSIGNED_INT = 1
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL_SLOWDOWN = 0x20
GPU_IDLE = 0x1

# nvml.h return codes
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_FUNCTION_NOT_FOUND = 13


class NVMLError(Exception):
    """What pynvml raises (its NVMLError_NotSupported and kin derive from it); ``value`` is NVML's return code."""

    def __init__(self, message="NVML error", value=NVML_ERROR_NOT_SUPPORTED):
        super().__init__(message)
        self.value = value


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's names
    def __init__(self, message="Not Supported"):
        super().__init__(message, NVML_ERROR_NOT_SUPPORTED)


class NVMLError_NotFound(NVMLError):  # noqa: N801
    def __init__(self, message="Not Found"):
        super().__init__(message, NVML_ERROR_NOT_FOUND)


class NVMLError_Timeout(NVMLError):  # noqa: N801
    def __init__(self, message="Timeout"):
        super().__init__(message, NVML_ERROR_TIMEOUT)


class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801
    def __init__(self, message="Function Not Found"):
        super().__init__(message, NVML_ERROR_FUNCTION_NOT_FOUND)


class c_nvmlValue_t(ctypes.Union):  # noqa: N801 - pynvml's layout and names
    _fields_ = [("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint), ("ulVal", ctypes.c_ulong),
                ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong), ("siVal", ctypes.c_int),
                ("usVal", ctypes.c_ushort)]


class c_nvmlFieldValue_t(ctypes.Structure):  # noqa: N801
    _fields_ = [("fieldId", ctypes.c_uint32), ("scopeId", ctypes.c_uint32), ("timestamp", ctypes.c_int64),
                ("latencyUsec", ctypes.c_int64), ("valueType", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("value", c_nvmlValue_t)]


@dataclass
class FakeGpu:
    clock_mhz: float = 1980.0
    power_mw: float = 650_000.0
    average_power_mw: float | None = None  # nvmlDeviceGetPowerUsage (a 1 s average on Hopper); None: power_mw
    energy_mj: int = 1_000_000
    power_limit_mw: float = 700_000.0  # nvmlDeviceGetEnforcedPowerLimit
    temperature_c: float = 60.0
    throttle_mask: int = 0
    utilisation_pct: int = 0
    memory_used: int = 2**30
    processes: list = field(default_factory=list)
    compute_capability: tuple = (9, 0)
    uuid: str | None = None  # "GPU-..."; FakeNvml numbers them when not given
    mig_uuids: tuple = ()  # "MIG-..." slices of this GPU


@dataclass
class Process:
    pid: int
    usedGpuMemory: int | None  # noqa: N815 - pynvml's spelling


MIG_READABLE = frozenset({"nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetMemoryInfo"})
"""Calls the fake answers for a MIG slice's handle; every other device reading is NVMLError_NotSupported."""


class FakeNvml(types.ModuleType):
    """``pynvml`` with ``gpus`` (a list of :class:`FakeGpu`).

    ``unsupported``: calls that raise ``NVMLError("Not Supported (name)")``, and ``"NVML_FI_DEV_POWER_INSTANT"``
    for a driver without that field (before R535: its ``nvmlReturn`` is NOT_SUPPORTED); ``missing``: calls the
    driver library lacks though pynvml has them (``NVMLError_FunctionNotFound``, as on an R525 driver);
    ``transient``: ``{name: n}``, the next n calls of ``name`` time out (``NVMLError_Timeout``).
    A GPU's handle is its index; a MIG slice's is ``(gpu index, slice index)``.
    """

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_FI_DEV_POWER_INSTANT = NVML_FI_DEV_POWER_INSTANT

    def __init__(self, gpus=None, *, unsupported=(), missing=(), transient=None):
        super().__init__("pynvml")
        self.gpus = gpus if gpus is not None else [FakeGpu()]
        for index, gpu in enumerate(self.gpus):
            if gpu.uuid is None:
                gpu.uuid = f"GPU-{index:08x}-1111-2222-3333-444444444444"
        self.unsupported = set(unsupported)
        self.missing = set(missing)
        self.transient = dict(transient or {})
        self.calls = {}
        self.reads = 0
        self.initialised = 0
        self.shut_down = 0

    def _gpu(self, handle):
        return self.gpus[handle[0] if isinstance(handle, tuple) else handle]

    def _check(self, name, handle=None):
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in self.missing:
            raise NVMLError_FunctionNotFound()
        if self.transient.get(name, 0) > 0:
            self.transient[name] -= 1
            raise NVMLError_Timeout()
        if name in self.unsupported:
            raise NVMLError(f"Not Supported ({name})")
        if isinstance(handle, tuple) and name not in MIG_READABLE:
            raise NVMLError_NotSupported()

    def nvmlInit(self):  # noqa: N802 - pynvml's names
        self._check("nvmlInit")
        self.initialised += 1

    def nvmlShutdown(self):  # noqa: N802
        self.shut_down += 1

    def nvmlDeviceGetCount(self):  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802
        if not 0 <= index < len(self.gpus):
            raise NVMLError("Invalid Argument", NVML_ERROR_INVALID_ARGUMENT)
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):  # noqa: N802
        for index, gpu in enumerate(self.gpus):
            if uuid == gpu.uuid:
                return index
            if uuid in gpu.mig_uuids:
                return index, gpu.mig_uuids.index(uuid)
        raise NVMLError_NotFound()

    def nvmlDeviceIsMigDeviceHandle(self, handle):  # noqa: N802
        return ctypes.c_uint(int(isinstance(handle, tuple)))

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle):  # noqa: N802
        if not isinstance(handle, tuple):
            raise NVMLError("Invalid Argument", NVML_ERROR_INVALID_ARGUMENT)
        return handle[0]

    def nvmlDeviceGetIndex(self, handle):  # noqa: N802
        if isinstance(handle, tuple):
            raise NVMLError("Invalid Argument", NVML_ERROR_INVALID_ARGUMENT)
        return handle

    def nvmlDeviceGetCudaComputeCapability(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetCudaComputeCapability", handle)
        return tuple(self._gpu(handle).compute_capability)

    def nvmlDeviceGetClockInfo(self, handle, kind):  # noqa: N802
        self.reads += 1
        self._check("nvmlDeviceGetClockInfo", handle)
        if kind != NVML_CLOCK_SM:
            raise NVMLError(f"clock kind {kind} asked for; the telemetry reads the SM clock")
        return self._gpu(handle).clock_mhz

    def nvmlDeviceGetPowerUsage(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetPowerUsage", handle)
        gpu = self._gpu(handle)
        return gpu.power_mw if gpu.average_power_mw is None else gpu.average_power_mw

    def nvmlDeviceGetFieldValues(self, handle, field_ids):  # noqa: N802
        self._check("nvmlDeviceGetFieldValues", handle)
        values = (c_nvmlFieldValue_t * len(field_ids))()
        for entry, field_id in zip(values, field_ids):
            entry.fieldId = field_id
            if field_id != NVML_FI_DEV_POWER_INSTANT or "NVML_FI_DEV_POWER_INSTANT" in self.unsupported:
                entry.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
                continue
            entry.valueType = NVML_VALUE_TYPE_UNSIGNED_INT
            entry.value.uiVal = int(self._gpu(handle).power_mw)
        return values

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetEnforcedPowerLimit", handle)
        return int(self._gpu(handle).power_limit_mw)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetTotalEnergyConsumption", handle)
        return self._gpu(handle).energy_mj

    def nvmlDeviceGetTemperature(self, handle, sensor):  # noqa: N802
        self._check("nvmlDeviceGetTemperature", handle)
        return self._gpu(handle).temperature_c

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetCurrentClocksEventReasons", handle)
        return self._gpu(handle).throttle_mask

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return self._gpu(handle).throttle_mask

    def nvmlDeviceGetComputeRunningProcesses(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetComputeRunningProcesses", handle)
        return list(self._gpu(handle).processes)

    def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetUtilizationRates", handle)
        return types.SimpleNamespace(gpu=self._gpu(handle).utilisation_pct, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetMemoryInfo", handle)
        used = self._gpu(handle).memory_used
        return types.SimpleNamespace(used=used, total=80 * 2**30, free=80 * 2**30 - used)


class FakeTime:
    """A clock the test advances: ``now()`` returns ``t``."""

    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t
