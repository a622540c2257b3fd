"""The GPU backends of :mod:`accounting.telemetry`: NVML (``nvidia-ml-py``) and AMD SMI (``amdsmi``).

Neither library comes with torch: ``pip install 'pytest-accounting[gpu]'`` brings
``nvidia-ml-py`` (module ``pynvml``); ROCm installs ``amdsmi`` with the driver stack.
Without them every GPU reading is ``None`` with the reason, never an error.

NVML (``nvml.h``, NVIDIA's NVML API reference): SM clock ``nvmlDeviceGetClockInfo(NVML_CLOCK_SM)``
(MHz); power (mW) from the ``NVML_FI_DEV_POWER_INSTANT`` field where the driver has it, else
``nvmlDeviceGetPowerUsage``, which on Ampere (but GA100) and newer is a 1 s average
(``Summary.power_source`` says which); ``nvmlDeviceGetTotalEnergyConsumption``
(mJ since the driver loaded; Volta and newer), ``nvmlDeviceGetTemperature`` (°C),
clock-event (throttle) reasons as a bit mask (:data:`NVML_CLOCK_EVENT_REASONS`; the older
``...ClocksThrottleReasons`` call where an R525/R530 driver lacks ``...ClocksEventReasons``),
per-process memory, and every other GPU's utilisation and memory. The device is found by the
UUID torch gives it (``GPU-...``, or ``MIG-...`` for a MIG slice), as ``$CUDA_VISIBLE_DEVICES``
renumbers devices and NVML does not.

>>> power_source_of_power_usage((9, 0)), power_source_of_power_usage((8, 0))
('1 s average', 'instant')

>>> decode_clock_event_reasons(0x4 | 0x20 | 0x1)
('sw_power_cap', 'sw_thermal_slowdown')

AMD SMI: GFX clock, socket power, the energy counter and the hotspot temperature, of the device
whose PCI address torch reports (AMD SMI lists every GPU of the node; torch only the visible ones); throttle
reasons from ``amdsmi_get_violation_status`` (MI300 and newer: PVIOL/TVIOL ``active_*`` flags,
:data:`AMDSMI_VIOLATIONS`) and from ``amdsmi_get_gpu_metrics_info``'s ``indep_throttle_status``
(the ASIC-independent ``SMU_THROTTLER_*`` bits, :data:`SMU_THROTTLER_BITS`).

>>> decode_indep_throttle_status((1 << 0) | (1 << 36))
('ppt0', 'temp_hotspot')
"""

import os
import re
import time
import warnings

import torch

from accounting.errors import AccountingError
from accounting.telemetry.readings import (
    GPU_INTERVAL_S,
    POWER_AVERAGE_1S,
    POWER_AVERAGE_UNPUBLISHED,
    POWER_INSTANT,
    NoBackend,
    Reading,
)

NVML_CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}
"""NVML's ``nvmlClocksEventReason*`` / ``nvmlClocksThrottleReason*`` bits (nvml.h; the same bits under both names)."""
NOT_SLOWING = frozenset({"gpu_idle", "display_clock_setting"})
"""Reasons that do not hold a busy GPU's clock down: left out of ``Summary.throttle_reasons``."""

SMU_THROTTLER_BITS = {
    0: "ppt0", 1: "ppt1", 2: "ppt2", 3: "ppt3", 4: "spl", 5: "fppt", 6: "sppt", 7: "sppt_apu",
    16: "tdc_gfx", 17: "tdc_soc", 18: "tdc_mem", 19: "tdc_vdd", 20: "tdc_cvip", 21: "edc_cpu", 22: "edc_gfx",
    23: "apcc",
    32: "temp_gpu", 33: "temp_core", 34: "temp_mem", 35: "temp_edge", 36: "temp_hotspot", 37: "temp_soc",
    38: "temp_vr_gfx", 39: "temp_vr_soc", 40: "temp_vr_mem0", 41: "temp_vr_mem1", 42: "temp_liquid0",
    43: "temp_liquid1", 44: "vrhot0", 45: "vrhot1", 46: "prochot_cpu", 47: "prochot_gfx",
    56: "ppm", 57: "fit",
}
"""Bit positions of ``indep_throttle_status`` in AMD's GPU metrics, named as the Linux amdgpu driver's
``SMU_THROTTLER_<NAME>_BIT`` (drivers/gpu/drm/amd/pm/swsmu/inc/amdgpu_smu.h, the header the amdsmi
README points to for this field): power limits (PPT0–3 package power tracking, SPL/FPPT/SPPT APU
limits) at 0–7, current limits (TDC/EDC, APCC) at 16–23, temperatures, VRHOT and PROCHOT at 32–47,
PPM and FIT at 56–57."""
AMDSMI_VIOLATIONS = {
    "active_ppt_pwr": "ppt_power",
    "active_socket_thrm": "socket_thermal",
    "active_vr_thrm": "vr_thermal",
    "active_hbm_thrm": "hbm_thermal",
    "active_prochot_thrm": "prochot_thermal",
}
"""``amdsmi_get_violation_status`` flags (ROCm/amdsmi ``py-interface/amdsmi_interface.py``, ROCm 6.3+,
MI300 and newer) and the reason each names: PVIOL (package power tracking), TVIOL (socket thermal),
voltage-regulator, HBM and PROCHOT thermal limits, each ``True`` while active (``"N/A"`` when unknown)."""

BUSY_SIBLING_UTILISATION_PCT = 10
"""A sibling GPU more than this busy (NVML utilisation, %) is named in ``busy_siblings``."""
BUSY_SIBLING_MEMORY_BYTES = 4 * 2**30
"""A sibling GPU holding more than this much memory is named in ``busy_siblings``."""
NVML_ENERGY_UPDATE_PERIOD_S = 0.1
"""NVML's power and energy readings update every 20–100 ms, depending on the GPU; the longer bound is used."""
OWN_CONTEXT_ALLOWANCE_BYTES = 2 * 2**30
"""What this process may hold on its GPU beyond torch's caching allocator (``memory_reserved``): the CUDA
context (about 0.5 GiB on an H100 with lazy module loading), library handles and NCCL's buffers. Used only
where NVML's PIDs are another PID namespace's (a container) and this process must be found by its memory."""

NVML_FI_DEV_POWER_INSTANT = 186
"""``nvml.h``'s field id of the instantaneous power (mW), for ``nvmlDeviceGetFieldValues`` (drivers R535 and newer)."""
NVML_VALUE_TYPES = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
"""The member of ``nvmlValue_t`` each ``nvmlValueType_t`` (0 = ``NVML_VALUE_TYPE_DOUBLE`` ...) fills."""
NVML_TRANSIENT_ERRORS = {10: "Timeout", 17: "Operating System", 19: "In use by another client", 21: "No data",
                         27: "Not ready", 999: "Unknown Error"}
"""NVML return codes (``nvml.h``) that say "not now" rather than "never": the reading is asked for again."""
AMDSMI_TRANSIENT_ERRORS = ("AmdSmiRetryException", "AmdSmiTimeoutException")
AMDSMI_POWER_SOURCES = {"current_socket_power": POWER_INSTANT, "average_socket_power": POWER_AVERAGE_UNPUBLISHED}
"""``amdsmi_get_power_info`` keys, in the order asked, and what each is (MI300: current; MI200: average only)."""

_CLOCK_FIELDS = ("clock_mhz_min", "clock_mhz_mean", "clock_mhz_max")
_POWER_FIELDS = ("power_w_mean", "power_w_max")
_MW_PER_W = 1e3
_MJ_PER_J = 1e3
_GIB = 2**30


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """The names of the slowing reasons set in an NVML clock-event mask (unknown bits as ``unknown_0x...``)."""
    names = []
    for bit in range(64):
        value = 1 << bit
        if mask & value:
            name = NVML_CLOCK_EVENT_REASONS.get(value, f"unknown_{value:#x}")
            if name not in NOT_SLOWING:
                names.append(name)
    return tuple(names)


def decode_indep_throttle_status(mask) -> tuple[str, ...] | None:
    """The names of the bits set in AMD's ``indep_throttle_status`` (unknown bits as ``unknown_bit_N``).

    ``None`` when the value carries no bits: ``"N/A"``, or a bool, as some amdsmi Python
    bindings return it (``bool(value)``): ``True`` then gives ``("throttled_reason_unknown",)``.

    >>> decode_indep_throttle_status(1 << 5 | 1 << 60), decode_indep_throttle_status(0)
    (('fppt', 'unknown_bit_60'), ())
    >>> decode_indep_throttle_status(True), decode_indep_throttle_status("N/A")
    (('throttled_reason_unknown',), None)
    """
    if isinstance(mask, bool):
        return ("throttled_reason_unknown",) if mask else ()
    if not isinstance(mask, int) or mask < 0:
        return None
    return tuple(SMU_THROTTLER_BITS.get(bit, f"unknown_bit_{bit}") for bit in range(64) if mask >> bit & 1)


def decode_violation_status(status: dict) -> tuple[str, ...] | None:
    """The reasons whose ``active_*`` flag is set in an ``amdsmi_get_violation_status`` answer (``None``: no flag known).

    >>> decode_violation_status({"active_ppt_pwr": True, "active_socket_thrm": False, "active_hbm_thrm": "N/A"})
    ('ppt_power',)
    """
    known = {key: value for key, value in status.items() if key in AMDSMI_VIOLATIONS and isinstance(value, (bool, int))}
    if not known:
        return None
    return tuple(AMDSMI_VIOLATIONS[key] for key in AMDSMI_VIOLATIONS if known.get(key))


def power_source_of_power_usage(compute_capability) -> str:
    """What ``nvmlDeviceGetPowerUsage`` returns on a GPU of ``compute_capability`` (``(major, minor)``, or ``None``).

    The NVML reference: "On Ampere (except GA100) or newer GPUs, the API returns power averaged over
    1 sec interval. On GA100 and older architectures, instantaneous power is returned." GA100 is
    compute capability 8.0, the other Amperes 8.6 and 8.7, Ada 8.9, Hopper 9.0.

    >>> power_source_of_power_usage((8, 6)), power_source_of_power_usage((7, 0)), power_source_of_power_usage(None)
    ('1 s average', 'instant', '1 s average')
    """
    if compute_capability is not None and tuple(compute_capability) <= (8, 0):
        return POWER_INSTANT
    return POWER_AVERAGE_1S  # and where the GPU is unknown: the average is the reading of every GPU made since 2021


def nvml_field_value(entry):
    """The value of one ``nvmlFieldValue_t`` (``None`` where its ``nvmlReturn`` is an error or its type unknown)."""
    if int(entry.nvmlReturn) != 0:
        return None
    kind = int(entry.valueType)
    if not 0 <= kind < len(NVML_VALUE_TYPES):
        return None
    return getattr(entry.value, NVML_VALUE_TYPES[kind])


def _is_transient(error: Exception) -> bool:
    """Whether a failed NVML or AMD SMI call may succeed if asked again (a timeout, not "not supported")."""
    if type(error).__name__ in AMDSMI_TRANSIENT_ERRORS:
        return True
    code = getattr(error, "value", None)
    return type(error).__name__.startswith("NVMLError") and code in NVML_TRANSIENT_ERRORS


def _describe(call, error: Exception) -> str:
    return f"{getattr(call, '__name__', call)}: {type(error).__name__}: {error}"


def _import_quietly(module: str):
    with warnings.catch_warnings():  # the old `pynvml` shim package warns that it is deprecated
        warnings.simplefilter("ignore")
        return __import__(module)


def _visible_entries(variable: str) -> list[str] | None:
    """The entries of a ``*_VISIBLE_DEVICES`` variable (``None`` when it is not set)."""
    value = os.environ.get(variable)
    if value is None:
        return None
    return [entry.strip() for entry in value.split(",") if entry.strip()]


def _physical_nvml_index(index: int) -> int:
    """The NVML index of CUDA device ``index``: ``$CUDA_VISIBLE_DEVICES`` renumbers CUDA devices, NVML does not."""
    entries = _visible_entries("CUDA_VISIBLE_DEVICES") or []
    if entries and all(entry.isdigit() for entry in entries) and index < len(entries):
        return int(entries[index])
    return index


def _torch_properties(index: int):
    """torch's properties of device ``index`` (``None`` where torch has no such device)."""
    if torch.cuda.is_available() and 0 <= index < torch.cuda.device_count():
        return torch.cuda.get_device_properties(index)
    return None


def _own_device_bytes(index: int) -> tuple[int, int] | None:
    """``(low, high)``: what NVML can show this process holding on torch device ``index`` (``None``: no CUDA here)."""
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return None
    reserved = int(torch.cuda.memory_reserved(index))
    return reserved, reserved + OWN_CONTEXT_ALLOWANCE_BYTES


class NvmlBackend:
    """Reads one CUDA device through NVML (see the module docstring).

    ``fleet_devices``: torch indices of the GPUs this fleet's other ranks use on this node; they
    are not named in ``busy_siblings`` (the fleet's own work is not someone else's).
    """

    name = "nvml"
    energy_source = "counter"
    energy_update_period_s = NVML_ENERGY_UPDATE_PERIOD_S
    clock_source = "NVML SM clock"
    default_interval_s = GPU_INTERVAL_S

    def __init__(self, nvml, index: int, *, now=time.perf_counter, fleet_devices=()):
        self.nvml = nvml
        self.index = index
        self._now = now
        self.unavailable: dict[str, str] = {}
        self.notes: list[str] = []
        self._failed: set[str] = set()
        self.handle, self.nvml_index, self.mig_slice = self._handle(index)
        if self.mig_slice is not None:
            self.notes.append(
                f"cuda:{index} is the MIG slice {self.mig_slice}: a slice has no published peak (it has a share of "
                "the GPU's SMs and memory bandwidth); readings NVML does not give for a slice are unavailable")
        self.fleet_nvml_indices = frozenset(self._fleet_index(device) for device in fleet_devices if device != index)
        self._instant_power = True  # until the driver says it has no NVML_FI_DEV_POWER_INSTANT
        self._power_usage_source = None
        self._throttle_calls = [name for name in ("nvmlDeviceGetCurrentClocksEventReasons",
                                                  "nvmlDeviceGetCurrentClocksThrottleReasons") if hasattr(nvml, name)]
        self._throttle_errors: list[str] = []

    # ---- which device ----------------------------------------------------------------------------

    @property
    def library(self):
        """The initialised ``pynvml`` module this backend reads through (other readers of this device share it)."""
        return self.nvml

    def device_handle(self):
        """The NVML handle of the whole GPU: a MIG slice's parent GPU, else :attr:`handle`.

        ECC counts, row remapping, the PCIe link and Xid events belong to the physical GPU, not to a slice
        (NVML answers a slice's handle with "not supported" for them).
        """
        if self.mig_slice is None:
            return self.handle
        return self.nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self.handle)

    def _by_uuid(self, uuid) -> tuple:
        """``(handle, uuid)`` of torch's ``uuid``: ``GPU-`` for a GPU, ``MIG-`` for a MIG slice (torch gives neither)."""
        text = str(uuid)
        candidates = [text] if text.startswith(("GPU-", "MIG-")) else [f"GPU-{text}", f"MIG-{text}"]
        error = None
        for candidate in candidates:
            try:
                return self.nvml.nvmlDeviceGetHandleByUUID(candidate), candidate
            except Exception as failed:  # noqa: BLE001 - NVMLError_NotFound: try the other prefix
                error = failed
        raise error

    def _is_mig(self, handle) -> bool:
        call = getattr(self.nvml, "nvmlDeviceIsMigDeviceHandle", None)
        if call is None:
            return False
        try:
            answer = call(handle)
        except Exception:  # noqa: BLE001 - a driver without MIG has no MIG handles
            return False
        return bool(getattr(answer, "value", answer))  # pynvml returns the c_uint itself

    def _resolve(self, uuid) -> tuple:
        """``(handle, NVML index of the physical GPU, MIG uuid or None)`` for a torch or ``$CUDA_VISIBLE_DEVICES`` uuid."""
        handle, text = self._by_uuid(uuid)
        if self._is_mig(handle):
            parent = self.nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
            return handle, self._ask(("busy_siblings",), self.nvml.nvmlDeviceGetIndex, parent), text
        return handle, self._ask(("busy_siblings",), self.nvml.nvmlDeviceGetIndex, handle), None

    def _uuid_of(self, index: int):
        """The uuid torch gives device ``index``, else the entry ``$CUDA_VISIBLE_DEVICES`` names it by, else ``None``."""
        uuid = getattr(_torch_properties(index), "uuid", None)
        if uuid is not None:
            return uuid
        entries = _visible_entries("CUDA_VISIBLE_DEVICES") or []
        if index < len(entries) and entries[index].startswith(("GPU-", "MIG-")):
            return entries[index]
        return None

    def _handle(self, index: int):
        uuid = self._uuid_of(index)
        if uuid is not None and hasattr(self.nvml, "nvmlDeviceGetHandleByUUID"):
            return self._resolve(uuid)
        physical = _physical_nvml_index(index)
        return self.nvml.nvmlDeviceGetHandleByIndex(physical), physical, None

    def _fleet_index(self, device: int) -> int | None:
        """The NVML index of the physical GPU under torch device ``device`` of another rank of the fleet."""
        uuid = self._uuid_of(device)
        if uuid is None or not hasattr(self.nvml, "nvmlDeviceGetHandleByUUID"):
            return _physical_nvml_index(device)
        try:
            handle, _ = self._by_uuid(uuid)
            if self._is_mig(handle):
                handle = self.nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
            return self.nvml.nvmlDeviceGetIndex(handle)
        except Exception as error:  # noqa: BLE001 - that GPU is then judged as any sibling is
            self.notes.append(f"fleet device cuda:{device} not found in NVML ({type(error).__name__}): judged as a sibling")
            return None

    # ---- asking --------------------------------------------------------------------------------------

    def _ask(self, fields, call, *args):
        """``call(*args)``, or ``None`` with the reason recorded for ``fields``.

        A call that cannot succeed (not supported, no such function, no permission) is not asked again; one
        that timed out or was not ready is, and a later answer clears the reason in the summary.
        """
        if fields[0] in self._failed:
            return None
        try:
            return call(*args)
        except Exception as error:  # noqa: BLE001 - NVMLError_NotSupported and kin: a missing reading, not a crash
            if not _is_transient(error):
                self._failed.add(fields[0])
            backend = "NVML" if self.name == "nvml" else "AMD SMI"
            for name in fields:
                self.unavailable[name] = f"{backend} {_describe(call, error)}"
            return None

    def _power(self) -> tuple[float | None, str | None]:
        """``(milliwatts, power source)``: the instant field where the driver has it, else ``nvmlDeviceGetPowerUsage``."""
        nvml, handle = self.nvml, self.handle
        call = getattr(nvml, "nvmlDeviceGetFieldValues", None)
        if self._instant_power and call is not None:
            field = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", NVML_FI_DEV_POWER_INSTANT)
            try:
                (entry,) = call(handle, [field])
            except Exception as error:  # noqa: BLE001 - an older driver or library: the averaged call below
                if not _is_transient(error):
                    self._instant_power = False
                    self.notes.append(f"no instantaneous power: NVML {_describe(call, error)}")
            else:
                value, code = nvml_field_value(entry), int(entry.nvmlReturn)
                if value is not None:
                    return float(value), POWER_INSTANT
                if code not in NVML_TRANSIENT_ERRORS:  # NVML_ERROR_NOT_SUPPORTED before R535, or a MIG slice
                    self._instant_power = False
                    self.notes.append(f"no instantaneous power: NVML_FI_DEV_POWER_INSTANT gave NVML return {code} "
                                      f"(value type {int(entry.valueType)})")
        milliwatts = self._ask(_POWER_FIELDS, nvml.nvmlDeviceGetPowerUsage, handle)
        if milliwatts is None:
            return None, None
        if self._power_usage_source is None:
            capability = getattr(nvml, "nvmlDeviceGetCudaComputeCapability", None)
            try:
                known = capability(handle) if capability is not None else None
            except Exception:  # noqa: BLE001 - unknown GPU: the averaged reading's label, the likelier one
                known = None
            self._power_usage_source = power_source_of_power_usage(known)
        return float(milliwatts), self._power_usage_source

    def _throttle_mask(self):
        """The clock-event mask: ``...ClocksEventReasons``, else the older ``...ClocksThrottleReasons`` (R525/R530
        drivers lack the new symbol that nvidia-ml-py has); each call that cannot answer is dropped for good."""
        while self._throttle_calls:
            call = getattr(self.nvml, self._throttle_calls[0])
            try:
                return call(self.handle)
            except Exception as error:  # noqa: BLE001 - NVMLError_FunctionNotFound (old driver), NotSupported
                if _is_transient(error):
                    self.unavailable["throttle_reasons"] = f"NVML {_describe(call, error)}"
                    return None
                self._throttle_errors.append(f"NVML {_describe(call, error)}")
                self._throttle_calls.pop(0)
        self.unavailable["throttle_reasons"] = "; ".join(self._throttle_errors) or "pynvml has no clock-event call"
        return None

    def _other_process_memory(self) -> int | None:
        """Bytes held on this GPU by processes other than this one.

        NVML names processes by the host's PIDs; in a container without the host's PID namespace this
        process's PID is not among them. Then the one process whose memory matches what torch holds here
        (``memory_reserved`` plus :data:`OWN_CONTEXT_ALLOWANCE_BYTES`) is this one.
        """
        nvml = self.nvml
        processes = self._ask(("other_process_memory_bytes",), nvml.nvmlDeviceGetComputeRunningProcesses, self.handle)
        if processes is None:
            return None
        graphics = getattr(nvml, "nvmlDeviceGetGraphicsRunningProcesses", None)
        if graphics is not None:
            processes = list(processes) + list(self._ask(("graphics_processes",), graphics, self.handle) or [])
        held = {}
        for process in processes:
            used = getattr(process, "usedGpuMemory", None)
            if used is not None:
                held[process.pid] = max(held.get(process.pid, 0), int(used))
        if os.getpid() in held:
            del held[os.getpid()]
        elif held:
            own = _own_device_bytes(self.index)
            matching = [pid for pid, used in held.items() if own is not None and own[0] <= used <= own[1]]
            if matching:
                del held[min(matching, key=lambda pid: held[pid] - own[0])]
        return sum(held.values())

    def _busy_siblings(self) -> tuple[str, ...]:
        nvml = self.nvml
        count = self._ask(("busy_siblings",), nvml.nvmlDeviceGetCount) if self.nvml_index is not None else None
        busy = []
        for index in range(count or 0):
            if index == self.nvml_index or index in self.fleet_nvml_indices:
                continue
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                utilisation = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                used = nvml.nvmlDeviceGetMemoryInfo(handle).used
            except Exception as error:  # noqa: BLE001 - a sibling NVML cannot read is named as unknown, not as idle
                busy.append(f"GPU {index}: unreadable ({type(error).__name__})")
                continue
            if utilisation > BUSY_SIBLING_UTILISATION_PCT or used > BUSY_SIBLING_MEMORY_BYTES:
                busy.append(f"GPU {index}: {utilisation}% utilised, {used / _GIB:.1f} GiB used")
        return tuple(busy)

    def read(self, *, edge: bool) -> Reading:
        """One reading; processes and siblings are read at the window's edges only (they cost milliseconds)."""
        nvml, handle = self.nvml, self.handle
        clock = self._ask(_CLOCK_FIELDS, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
        power_mw, power_source = self._power()
        energy_mj = self._ask(("energy_j",), nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        temperature = self._ask(("temperature_c_max",), nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
        mask = self._throttle_mask()
        now = self._now()
        return Reading(
            time_s=now,
            clock_mhz=float(clock) if clock is not None else None,
            power_w=power_mw / _MW_PER_W if power_mw is not None else None,
            power_source=power_source,
            energy_j=energy_mj / _MJ_PER_J if energy_mj is not None else None,
            temperature_c=float(temperature) if temperature is not None else None,
            throttle_reasons=decode_clock_event_reasons(int(mask)) if mask is not None else (),
            other_process_memory_bytes=self._other_process_memory() if edge else None,
            busy_siblings=self._busy_siblings() if edge else (),
        )

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001, S110 - shutting down a library that failed is not worth an error
            pass


_BDF = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def _parse_bdf(text) -> tuple[int, int, int] | None:
    """``(domain, bus, device)`` of a PCI address ``"0000:c1:00.0"`` (as ``amdsmi_get_gpu_device_bdf`` writes it).

    >>> _parse_bdf("0000:c1:00.0"), _parse_bdf("c1:00.0"), _parse_bdf("N/A")
    ((0, 193, 0), (0, 193, 0), None)
    """
    match = _BDF.match(str(text).strip())
    if match is None:
        return None
    domain, bus, device, _ = match.groups()
    return int(domain or "0", 16), int(bus, 16), int(device, 16)


def _torch_pci_address(index: int) -> tuple[int, int, int] | None:
    """``(domain, bus, device)`` torch reports for device ``index`` (``pci_*_id``: torch 2.6 and newer), else ``None``."""
    properties = _torch_properties(index)
    bus, device = getattr(properties, "pci_bus_id", None), getattr(properties, "pci_device_id", None)
    if not isinstance(bus, int) or not isinstance(device, int):
        return None
    domain = getattr(properties, "pci_domain_id", 0)
    return (domain if isinstance(domain, int) else 0), bus, device


def _physical_hip_index(index: int) -> int:
    """The node-wide HIP index of torch device ``index``: ``$ROCR_VISIBLE_DEVICES`` picks from every GPU, then
    ``$HIP_VISIBLE_DEVICES`` (or ``$CUDA_VISIBLE_DEVICES``, which HIP also honours) from those. Indices only;
    an entry that is not a number (a ``GPU-`` uuid) raises :class:`AccountingError` naming it."""
    chain = list(range(1024))  # every GPU of the node, by HIP index
    for variable in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES" if "HIP_VISIBLE_DEVICES" in os.environ
                     else "CUDA_VISIBLE_DEVICES"):
        entries = _visible_entries(variable)
        if entries is None:
            continue
        if not all(entry.isdigit() for entry in entries):
            raise AccountingError(f"${variable}={os.environ[variable]!r} names devices by more than an index")
        chain = [chain[int(entry)] for entry in entries if int(entry) < len(chain)]
    if index >= len(chain):
        raise AccountingError(f"torch device {index} is not among the visible devices {chain}")
    return chain[index]


def amdsmi_handle(smi, index: int):
    """The AMD SMI handle of torch device ``index``.

    ``amdsmi_get_processor_handles()`` lists every GPU of the node in AMD SMI's order; torch numbers the
    visible ones (``$HIP_VISIBLE_DEVICES``, ``$ROCR_VISIBLE_DEVICES``, ``$CUDA_VISIBLE_DEVICES``: Slurm,
    Kubernetes and Ray set them). Found by the PCI address torch reports (``amdsmi_get_gpu_device_bdf``);
    where torch does not report one (before 2.6) or several partitions share it, by the HIP index
    (``amdsmi_get_gpu_enumeration_info``, ROCm 6.4 and newer); a node with one GPU has one answer.
    Otherwise :class:`AccountingError`: reading another GPU would be worse than reading none.
    """
    handles = list(smi.amdsmi_get_processor_handles())
    candidates = handles
    address = _torch_pci_address(index)
    if address is not None:
        candidates = [handle for handle in handles if _parse_bdf(smi.amdsmi_get_gpu_device_bdf(handle)) == address]
        if not candidates:
            raise AccountingError(f"no AMD SMI device at the PCI address torch gives cuda:{index}, {address}")
    if len(candidates) == 1:
        return candidates[0]
    enumeration = getattr(smi, "amdsmi_get_gpu_enumeration_info", None)
    if enumeration is not None:
        hip = _physical_hip_index(index)
        found = [handle for handle in candidates if enumeration(handle).get("hip_id") == hip]
        if len(found) == 1:
            return found[0]
    raise AccountingError(
        f"cannot tell which of {len(candidates)} AMD SMI devices is cuda:{index}: torch "
        f"{torch.__version__} gives no PCI address for it and AMD SMI no HIP index (ROCm 6.4 and newer)")


class AmdSmiBackend:
    """Reads one ROCm device through AMD SMI: clock, power, energy, temperature and throttle reasons."""

    name = "amdsmi"
    energy_source = "counter"
    energy_update_period_s = NVML_ENERGY_UPDATE_PERIOD_S
    clock_source = "AMD SMI GFX clock"
    default_interval_s = GPU_INTERVAL_S

    def __init__(self, amdsmi, index: int, *, now=time.perf_counter, fleet_devices=()):
        # fleet_devices is accepted for the same signature as NvmlBackend: this backend reads no sibling GPUs,
        # so the fleet's own GPUs can never be named busy here.
        self.amdsmi = amdsmi
        self._now = now
        self.handle = amdsmi_handle(amdsmi, index)
        self.unavailable: dict[str, str] = {
            "other_process_memory_bytes": "not read through AMD SMI here",
        }
        self.notes: list[str] = []
        self._failed: set[str] = set()
        self._throttle_errors: dict[str, str] = {}

    _ask = NvmlBackend._ask

    @property
    def library(self):
        """The initialised ``amdsmi`` module this backend reads through (other readers of this device share it)."""
        return self.amdsmi

    def device_handle(self):
        """The AMD SMI processor handle of the device torch calls ``cuda:<index>`` (found by PCI address)."""
        return self.handle

    def _throttle_source(self, call_name: str):
        """``amdsmi.<call_name>(handle)``, or ``None`` with the reason kept (and not asked again)."""
        if call_name in self._throttle_errors:
            return None
        call = getattr(self.amdsmi, call_name, None)
        if call is None:
            self._throttle_errors[call_name] = f"AMD SMI has no {call_name}"
            return None
        try:
            return call(self.handle)
        except Exception as error:  # noqa: BLE001 - AmdSmiLibraryException (not supported) and kin
            if not _is_transient(error):
                self._throttle_errors[call_name] = f"AMD SMI {call_name}: {type(error).__name__}: {error}"
            return None

    def _throttle_reasons(self) -> tuple[str, ...]:
        """Reasons from the violation status and the GPU metrics' throttle bits, whichever the device gives."""
        names, answered = [], False
        violations = self._throttle_source("amdsmi_get_violation_status")
        decoded = decode_violation_status(violations) if isinstance(violations, dict) else None
        if decoded is not None:
            answered = True
            names += decoded
        metrics = self._throttle_source("amdsmi_get_gpu_metrics_info")
        decoded = decode_indep_throttle_status(metrics.get("indep_throttle_status")) if isinstance(metrics, dict) else None
        if decoded is not None:
            answered = True
            names += [name for name in decoded if name not in names]
        if answered:
            self.unavailable.pop("throttle_reasons", None)
        else:
            self.unavailable["throttle_reasons"] = "; ".join(self._throttle_errors.values()) or (
                "AMD SMI gave no throttle status (violation status and indep_throttle_status both N/A)")
        return tuple(names)

    def read(self, *, edge: bool) -> Reading:  # noqa: ARG002 - same signature as the other backends
        smi, handle = self.amdsmi, self.handle
        clock = self._ask(_CLOCK_FIELDS, smi.amdsmi_get_clock_info, handle, smi.AmdSmiClkType.GFX)
        power = self._ask(_POWER_FIELDS, smi.amdsmi_get_power_info, handle)
        energy = self._ask(("energy_j",), smi.amdsmi_get_energy_count, handle)
        temperature = self._ask(
            ("temperature_c_max",),
            smi.amdsmi_get_temp_metric,
            handle,
            smi.AmdSmiTemperatureType.HOTSPOT,
            smi.AmdSmiTemperatureMetric.CURRENT,
        )
        key = None
        if isinstance(power, dict):
            key = next((key for key in AMDSMI_POWER_SOURCES if isinstance(power.get(key), (int, float))), None)
        joules = None
        if isinstance(energy, dict) and "counter_resolution" in energy:
            count = energy.get("energy_accumulator", energy.get("power"))
            joules = count * energy["counter_resolution"] / 1e6 if isinstance(count, (int, float)) else None
        return Reading(
            time_s=self._now(),
            clock_mhz=float(clock["clk"]) if isinstance(clock, dict) and "clk" in clock else None,
            power_w=float(power[key]) if key is not None else None,
            power_source=AMDSMI_POWER_SOURCES[key] if key is not None else None,
            energy_j=joules,
            temperature_c=float(temperature) if isinstance(temperature, (int, float)) else None,
            throttle_reasons=self._throttle_reasons(),
        )

    def close(self) -> None:
        try:
            self.amdsmi.amdsmi_shut_down()
        except Exception:  # noqa: BLE001, S110 - as for NVML
            pass


def _open_nvml(index: int, fleet_devices):
    try:
        nvml = _import_quietly("pynvml")
    except ImportError:
        return None, "no NVML: pip install 'pytest-accounting[gpu]' (nvidia-ml-py)"
    try:
        nvml.nvmlInit()
    except Exception as error:  # noqa: BLE001 - no driver, no library
        return None, f"NVML did not start: {type(error).__name__}: {error}"
    try:
        return NvmlBackend(nvml, index, fleet_devices=fleet_devices), None
    except Exception as error:  # noqa: BLE001 - no such device
        nvml.nvmlShutdown()
        return None, f"NVML has no device for cuda:{index}: {type(error).__name__}: {error}"


def _open_amdsmi(index: int, fleet_devices):
    try:
        smi = _import_quietly("amdsmi")
    except ImportError:
        return None, "no AMD SMI (the amdsmi module ROCm installs)"
    try:
        smi.amdsmi_init()
    except Exception as error:  # noqa: BLE001
        return None, f"AMD SMI did not start for cuda:{index}: {type(error).__name__}: {error}"
    try:
        return AmdSmiBackend(smi, index, fleet_devices=fleet_devices), None
    except Exception as error:  # noqa: BLE001 - no such device, or none that is surely this one
        try:
            smi.amdsmi_shut_down()
        except Exception:  # noqa: BLE001, S110 - as in close()
            pass
        return None, f"AMD SMI has no device for cuda:{index}: {type(error).__name__}: {error}"


def open_gpu_backend(index: int, *, fleet_devices=()):
    """The backend for CUDA device ``index``: AMD SMI first on ROCm builds, NVML first otherwise; else a :class:`NoBackend`.

    ``fleet_devices``: torch indices of this node's GPUs that the fleet's other ranks use (see :class:`NvmlBackend`).
    """
    openers = [_open_amdsmi, _open_nvml] if getattr(torch.version, "hip", None) else [_open_nvml, _open_amdsmi]
    reasons = []
    for opener in openers:
        backend, reason = opener(index, tuple(fleet_devices))
        if backend is not None:
            return backend
        reasons.append(reason)
    return NoBackend("; ".join(reasons))
