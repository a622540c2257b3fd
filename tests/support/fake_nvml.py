"""A fake ``pynvml`` module for telemetry tests: scripted clocks, power, energy, throttling and neighbours.

Install it with ``monkeypatch.setitem(sys.modules, "pynvml", fake)``. Every attribute a
test changes (``clock_mhz``, ``throttle_mask``, ...) is read on the next NVML call, so
a test can throttle the device in the middle of a window.
"""

import types
from dataclasses import dataclass, field

NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL_SLOWDOWN = 0x20
GPU_IDLE = 0x1


class NVMLError(Exception):
    """What pynvml raises (its NVMLError_NotSupported and kin derive from it)."""


@dataclass
class FakeGpu:
    clock_mhz: float = 1980.0
    power_mw: float = 650_000.0
    energy_mj: int = 1_000_000
    temperature_c: float = 60.0
    throttle_mask: int = 0
    utilisation_pct: int = 0
    memory_used: int = 2**30
    processes: list = field(default_factory=list)


@dataclass
class Process:
    pid: int
    usedGpuMemory: int | None  # noqa: N815 - pynvml's spelling


class FakeNvml(types.ModuleType):
    """``pynvml`` with ``gpus`` (a list of :class:`FakeGpu`); ``unsupported`` names calls that raise."""

    NVMLError = NVMLError
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU

    def __init__(self, gpus=None, *, unsupported=()):
        super().__init__("pynvml")
        self.gpus = gpus if gpus is not None else [FakeGpu()]
        self.unsupported = set(unsupported)
        self.reads = 0
        self.initialised = 0
        self.shut_down = 0

    def _gpu(self, handle):
        return self.gpus[handle]

    def _check(self, name):
        if name in self.unsupported:
            raise NVMLError(f"Not Supported ({name})")

    def nvmlInit(self):  # noqa: N802 - pynvml's names
        self._check("nvmlInit")
        self.initialised += 1

    def nvmlShutdown(self):  # noqa: N802
        self.shut_down += 1

    def nvmlDeviceGetCount(self):  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802
        if not 0 <= index < len(self.gpus):
            raise NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetIndex(self, handle):  # noqa: N802
        return handle

    def nvmlDeviceGetClockInfo(self, handle, kind):  # noqa: N802
        self._check("nvmlDeviceGetClockInfo")
        if kind != NVML_CLOCK_SM:
            raise NVMLError(f"clock kind {kind} asked for; the telemetry reads the SM clock")
        self.reads += 1
        return self._gpu(handle).clock_mhz

    def nvmlDeviceGetPowerUsage(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetPowerUsage")
        return self._gpu(handle).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetTotalEnergyConsumption")
        return self._gpu(handle).energy_mj

    def nvmlDeviceGetTemperature(self, handle, sensor):  # noqa: N802
        self._check("nvmlDeviceGetTemperature")
        return self._gpu(handle).temperature_c

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetCurrentClocksEventReasons")
        return self._gpu(handle).throttle_mask

    def nvmlDeviceGetComputeRunningProcesses(self, handle):  # noqa: N802
        self._check("nvmlDeviceGetComputeRunningProcesses")
        return list(self._gpu(handle).processes)

    def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802
        return types.SimpleNamespace(gpu=self._gpu(handle).utilisation_pct, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802
        used = self._gpu(handle).memory_used
        return types.SimpleNamespace(used=used, total=80 * 2**30, free=80 * 2**30 - used)


class FakeTime:
    """A clock the test advances: ``now()`` returns ``t``."""

    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t
