"""Fake ``pynvml`` and ``amdsmi`` modules for the health counters, and a fake EDAC/proc tree.

Each fake GPU is a :class:`NvmlGpu` or :class:`AmdGpu` whose fields a test changes between the
reading before and the one after a run. The NVML fake raises :class:`NVMLError` carrying NVML's
error codes (``value``), as ``pynvml`` does; names and constants are nvidia-ml-py's.
"""

import types
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import fake_nvml

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15


class NVMLError(Exception):
    """pynvml's error: ``value`` is the NVML return code."""

    def __init__(self, value):
        super().__init__({3: "Not Supported", 10: "Timeout", 15: "GPU is lost"}.get(value, f"NVML error {value}"))
        self.value = value


@dataclass
class NvmlGpu:
    """A clean H100 SXM by default: ECC on and zero, 18 NVLinks up, Gen5 x16, 700 W."""

    ecc_enabled: bool = True
    ecc: dict = field(default_factory=lambda: {(0, 0): 0, (1, 0): 0, (0, 1): 0, (1, 1): 0})
    """``(error type, counter type) -> count``: 0 corrected / 1 uncorrected, 0 volatile / 1 aggregate."""
    remapped_rows: tuple = (0, 0, 0, 0)
    retired_pages: tuple | None = None
    """``None``: not supported (Ampere and newer remap rows instead)."""
    retirement_pending: int = 0
    pcie: tuple = (5, 5, 16, 16)
    """current generation, max generation, current width, max width"""
    nvlinks: tuple = (1,) * 18
    nvlink_errors: int = 0
    power_limit_mw: int = 700_000
    default_limit_mw: int = 700_000
    xids: list = field(default_factory=list)
    """Xids the driver raises: each is delivered once to every event set registered on the device."""
    lost: bool = False
    unsupported: set = field(default_factory=set)
    uuid: str = "GPU-8f2c61a4"
    serial: str = "1652922000000"
    bus_id: str = "00000000:3B:00.0"


class FakeNvml(types.ModuleType):
    """``pynvml`` over ``gpus`` (handles are indices)."""

    NVMLError = NVMLError
    NVML_ERROR_TIMEOUT = NVML_ERROR_TIMEOUT
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_FEATURE_ENABLED = 1
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    NVML_NVLINK_MAX_LINKS = 36
    NVML_NVLINK_ERROR_DL_REPLAY = 0
    NVML_NVLINK_ERROR_DL_RECOVERY = 1
    NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
    NVML_NVLINK_ERROR_DL_CRC_DATA = 3
    nvmlEventTypeXidCriticalError = 0x8

    def __init__(self, gpus=None):
        super().__init__("pynvml")
        self.gpus = gpus if gpus is not None else [NvmlGpu()]
        self.event_sets = {}

    def _gpu(self, handle, name):
        gpu = self.gpus[handle]
        if gpu.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        if name in gpu.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu

    # identity
    def nvmlDeviceGetIndex(self, handle):
        return handle

    def nvmlDeviceGetUUID(self, handle):
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetSerial(self, handle):
        return self._gpu(handle, "nvmlDeviceGetSerial").serial

    def nvmlDeviceGetPciInfo(self, handle):
        return types.SimpleNamespace(busId=self._gpu(handle, "nvmlDeviceGetPciInfo").bus_id.encode())

    # memory
    def nvmlDeviceGetEccMode(self, handle):
        on = int(self._gpu(handle, "nvmlDeviceGetEccMode").ecc_enabled)
        return [on, on]

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type):
        return self._gpu(handle, "nvmlDeviceGetTotalEccErrors").ecc[(error_type, counter_type)]

    def nvmlDeviceGetRemappedRows(self, handle):
        return tuple(self._gpu(handle, "nvmlDeviceGetRemappedRows").remapped_rows)

    def nvmlDeviceGetRetiredPages(self, handle, cause):
        pages = self._gpu(handle, "nvmlDeviceGetRetiredPages").retired_pages
        if pages is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return [0x1000 * (i + 1) for i in range(pages[cause])]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):
        gpu = self._gpu(handle, "nvmlDeviceGetRetiredPagesPendingStatus")
        if gpu.retired_pages is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu.retirement_pending

    # links
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._gpu(handle, "nvmlDeviceGetCurrPcieLinkGeneration").pcie[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self._gpu(handle, "nvmlDeviceGetMaxPcieLinkGeneration").pcie[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._gpu(handle, "nvmlDeviceGetCurrPcieLinkWidth").pcie[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self._gpu(handle, "nvmlDeviceGetMaxPcieLinkWidth").pcie[3]

    def nvmlDeviceGetNvLinkState(self, handle, link):
        gpu = self._gpu(handle, "nvmlDeviceGetNvLinkState")
        if link >= len(gpu.nvlinks):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu.nvlinks[link]

    def nvmlDeviceGetNvLinkErrorCounter(self, handle, link, counter):
        gpu = self._gpu(handle, "nvmlDeviceGetNvLinkErrorCounter")
        return gpu.nvlink_errors if (link, counter) == (0, self.NVML_NVLINK_ERROR_DL_CRC_FLIT) else 0

    # power (mW)
    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return self._gpu(handle, "nvmlDeviceGetPowerManagementLimit").power_limit_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle):
        return self._gpu(handle, "nvmlDeviceGetPowerManagementDefaultLimit").default_limit_mw

    # events
    def nvmlEventSetCreate(self):
        event_set = object()
        self.event_sets[event_set] = []
        return event_set

    def nvmlDeviceRegisterEvents(self, handle, kinds, event_set):
        gpu = self._gpu(handle, "nvmlDeviceRegisterEvents")
        self.event_sets[event_set].append((handle, len(gpu.xids)))  # events from now on

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        for position, (handle, seen) in enumerate(self.event_sets[event_set]):
            xids = self.gpus[handle].xids
            if seen < len(xids):
                self.event_sets[event_set][position] = (handle, seen + 1)
                return types.SimpleNamespace(device=handle, eventType=self.nvmlEventTypeXidCriticalError,
                                             eventData=xids[seen], gpuInstanceId=0, computeInstanceId=0)
        raise NVMLError(NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set):
        del self.event_sets[event_set]


class AmdSmiLibraryException(Exception):
    """amdsmi's library error: ``err_code``."""

    def __init__(self, err_code):
        super().__init__(f"Error code:\n\t{err_code} | AMDSMI_STATUS_NOT_SUPPORTED")
        self.err_code = err_code


@dataclass
class AmdGpu:
    """A clean MI300X by default."""

    ecc: dict = field(default_factory=lambda: {"correctable_count": 0, "uncorrectable_count": 0, "deferred_count": 0})
    bad_pages: list = field(default_factory=list)
    """``amdsmi_get_gpu_bad_page_info`` records' statuses: 0 reserved, 1 pending, 2 unreservable."""
    pcie: dict = field(default_factory=lambda: {"pcie_width": 16, "max_pcie_width": 16,
                                                "pcie_speed": 32000, "max_pcie_speed": 32})
    xgmi: tuple = ("U",) * 7
    xgmi_errors: int = 0
    power_cap_uw: int = 750_000_000
    default_power_cap_uw: int = 750_000_000
    unsupported: set = field(default_factory=set)


class FakeAmdSmi(types.ModuleType):
    """``amdsmi`` over ``gpus`` (handles are indices)."""

    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiGpuBlock = types.SimpleNamespace(UMC=1, XGMI_WAFL=64)

    def __init__(self, gpus=None):
        super().__init__("amdsmi")
        self.gpus = gpus if gpus is not None else [AmdGpu()]

    def _gpu(self, handle, name):
        gpu = self.gpus[handle]
        if name in gpu.unsupported:
            raise AmdSmiLibraryException(2)
        return gpu

    def amdsmi_get_gpu_device_uuid(self, handle):
        return f"f7ff74a1-0000-1000-80ee-00000000000{handle}"

    def amdsmi_get_gpu_device_bdf(self, handle):
        return f"0000:{0x0c + handle:02x}:00.0"

    def amdsmi_get_gpu_asic_info(self, handle):
        return {"market_name": "AMD Instinct MI300X", "asic_serial": f"0x9F16A8B0C{handle}"}

    def amdsmi_get_gpu_total_ecc_count(self, handle):
        return dict(self._gpu(handle, "amdsmi_get_gpu_total_ecc_count").ecc)

    def amdsmi_get_gpu_bad_page_info(self, handle):
        statuses = self._gpu(handle, "amdsmi_get_gpu_bad_page_info").bad_pages
        return [{"value": i, "page_address": 0x1000 * i, "page_size": 4096, "status": status}
                for i, status in enumerate(statuses)]

    def amdsmi_get_pcie_info(self, handle):
        pcie = self._gpu(handle, "amdsmi_get_pcie_info").pcie
        return {"pcie_static": {"max_pcie_width": pcie["max_pcie_width"], "max_pcie_speed": pcie["max_pcie_speed"],
                                "pcie_interface_version": 5, "slot_type": "OAM"},
                "pcie_metric": {"pcie_width": pcie["pcie_width"], "pcie_speed": pcie["pcie_speed"],
                                "pcie_bandwidth": "N/A", "pcie_replay_count": 0}}

    def amdsmi_get_gpu_xgmi_link_status(self, handle):
        links = self._gpu(handle, "amdsmi_get_gpu_xgmi_link_status").xgmi
        return {"status": list(links), "total_links": len(links)}

    def amdsmi_get_gpu_ecc_count(self, handle, block):
        gpu = self._gpu(handle, "amdsmi_get_gpu_ecc_count")
        if block != self.AmdSmiGpuBlock.XGMI_WAFL:
            raise AssertionError(f"the health counters ask for the xGMI block only, got {block}")
        return {"correctable_count": gpu.xgmi_errors, "uncorrectable_count": 0, "deferred_count": 0}

    def amdsmi_get_power_cap_info(self, handle):
        gpu = self._gpu(handle, "amdsmi_get_power_cap_info")
        return {"power_cap": gpu.power_cap_uw, "default_power_cap": gpu.default_power_cap_uw, "dpm_cap": 2100,
                "min_power_cap": 0, "max_power_cap": gpu.default_power_cap_uw}


def edac_tree(root: Path, controllers: list[tuple[int, int]], *, mce: list[int] | None = None) -> Path:
    """A fake ``/`` under ``root``: EDAC controllers ``(ce_count, ue_count)`` and, with ``mce``, a ``/proc/interrupts``."""
    for index, (ce, ue) in enumerate(controllers):
        mc = root / "sys/devices/system/edac/mc" / f"mc{index}"
        mc.mkdir(parents=True, exist_ok=True)
        (mc / "ce_count").write_text(f"{ce}\n")
        (mc / "ue_count").write_text(f"{ue}\n")
    if mce is not None:
        proc = root / "proc"
        proc.mkdir(parents=True, exist_ok=True)
        cpus = " ".join(f"CPU{i}" for i in range(len(mce)))
        counts = " ".join(f"{count:>10}" for count in mce)
        polls = " ".join(f"{7:>10}" for _ in mce)
        (proc / "interrupts").write_text(f"           {cpus}\n"
                                         f"  0: {' '.join('5' for _ in mce)}  IR-IO-APIC    2-edge      timer\n"
                                         f"MCE: {counts}   Machine check exceptions\n"
                                         f"MCP: {polls}   Machine check polls\n")
    return root


def combined_nvml(telemetry_gpus=None, health_gpus=None):
    """One fake ``pynvml`` for the telemetry (:mod:`tests.support.fake_nvml`: clocks, power, handles by UUID)
    and the health counters (:class:`FakeNvml` here: ECC, remapping, PCIe, NVLink, Xids) of the same GPUs,
    as the report reads both through one ``pynvml``. Handles are indices in both."""
    health = FakeNvml(health_gpus)

    class Combined(fake_nvml.FakeNvml):
        def __getattr__(self, name):  # the health calls and constants the telemetry fake lacks
            return getattr(health, name)

        def nvmlDeviceGetEnforcedPowerLimit(self, handle):  # noqa: N802 - one limit for both readers: the health GPU's
            return health.nvmlDeviceGetEnforcedPowerLimit(handle)

    combined = Combined(telemetry_gpus)
    combined.health = health
    return combined
