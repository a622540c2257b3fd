"""The NVML telemetry backend (``nvidia-ml-py``, module ``pynvml``) of :mod:`accounting.telemetry`.

NVML does not come with torch: ``pip install 'pytest-accounting[gpu]'`` brings ``nvidia-ml-py``. Without it
every GPU reading is ``None`` with the reason, never an error.

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
"""

import os
import time

import torch

from accounting.telemetry.gpu_calls import (
    CLOCK_FIELDS,
    NVML_TRANSIENT_ERRORS,
    POWER_FIELDS,
    ask_library,
    describe_failure,
    import_quietly,
    is_transient,
    torch_properties,
    visible_entries,
)
from accounting.telemetry.readings import GPU_INTERVAL_S, POWER_AVERAGE_1S, POWER_INSTANT, Reading

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
}
"""NVML's ``nvmlClocksEventReason*`` / ``nvmlClocksThrottleReason*`` bits (nvml.h; the same bits under both names):
every bit nvml.h's ``nvmlClocksEventReasonAll`` sets, 0x1 to 0x100. A driver may set a bit nvml.h does not define
yet ("new reasons might be added"); it is named ``unknown_0x...`` (:func:`decode_clock_event_reasons`), never guessed."""
NOT_SLOWING = frozenset({"gpu_idle", "display_clock_setting"})
"""Reasons that do not hold a busy GPU's clock down: left out of ``Summary.throttle_reasons``."""

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

_MW_PER_W = 1e3
_MJ_PER_J = 1e3
_GIB = 2**30


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """The names of the slowing reasons set in an NVML clock-event mask (bits nvml.h does not define as
    ``unknown_0x...``: a reason the driver gives and nothing here can name is still a reason).

    >>> decode_clock_event_reasons(0x4 | 0x200)
    ('sw_power_cap', 'unknown_0x200')
    """
    names = []
    for bit in range(64):
        value = 1 << bit
        if mask & value:
            name = NVML_CLOCK_EVENT_REASONS.get(value, f"unknown_{value:#x}")
            if name not in NOT_SLOWING:
                names.append(name)
    return tuple(names)


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


def _physical_nvml_index(index: int) -> int:
    """The NVML index of CUDA device ``index``: ``$CUDA_VISIBLE_DEVICES`` renumbers CUDA devices, NVML does not."""
    entries = visible_entries("CUDA_VISIBLE_DEVICES") or []
    if entries and all(entry.isdigit() for entry in entries) and index < len(entries):
        return int(entries[index])
    return index


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
        self.gpu_handle = self.handle
        if self.mig_slice is not None:
            self.gpu_handle = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self.handle)
            self.notes.append(
                f"cuda:{index} is the MIG slice {self.mig_slice}: a slice has no published peak (it has a share of "
                "the GPU's SMs and memory bandwidth); its clock, power, energy, temperature, throttle reasons and "
                "power limit are the whole GPU's (NVML gives them on the GPU's handle, not the slice's: every slice "
                "of the GPU shares them), its processes the slice's own")
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
        """The NVML handle of the whole GPU: a MIG slice's parent GPU, else :attr:`handle` (:attr:`gpu_handle`).

        The clock, power, energy, temperature, clock-event reasons and the power limit, ECC counts, row
        remapping, the PCIe link and Xid events belong to the physical GPU, not to a slice (NVML answers a
        slice's handle with "not supported" for them); only its processes and memory are the slice's.
        """
        return self.gpu_handle

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
        uuid = getattr(torch_properties(index), "uuid", None)
        if uuid is not None:
            return uuid
        entries = visible_entries("CUDA_VISIBLE_DEVICES") or []
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

    _ask = ask_library

    def _power(self) -> tuple[float | None, str | None]:
        """``(milliwatts, power source)``: the instant field where the driver has it, else ``nvmlDeviceGetPowerUsage``
        (the whole GPU's: a MIG slice's handle has no power)."""
        nvml, handle = self.nvml, self.gpu_handle
        call = getattr(nvml, "nvmlDeviceGetFieldValues", None)
        if self._instant_power and call is not None:
            field = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", NVML_FI_DEV_POWER_INSTANT)
            try:
                (entry,) = call(handle, [field])
            except Exception as error:  # noqa: BLE001 - an older driver or library: the averaged call below
                if not is_transient(error):
                    self._instant_power = False
                    self.notes.append(f"no instantaneous power: NVML {describe_failure(call, error)}")
            else:
                value, code = nvml_field_value(entry), int(entry.nvmlReturn)
                if value is not None:
                    return float(value), POWER_INSTANT
                if code not in NVML_TRANSIENT_ERRORS:  # NVML_ERROR_NOT_SUPPORTED before R535, or a MIG slice
                    self._instant_power = False
                    self.notes.append(f"no instantaneous power: NVML_FI_DEV_POWER_INSTANT gave NVML return {code} "
                                      f"(value type {int(entry.valueType)})")
        milliwatts = self._ask(POWER_FIELDS, nvml.nvmlDeviceGetPowerUsage, handle)
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

    def _enforced_power_limit(self):
        """Milliwatts: the power limit the driver enforces now (``nvmlDeviceGetEnforcedPowerLimit``: the lowest of
        the board's default, the administrator's and any other limit), ``None`` where NVML does not say."""
        call = getattr(self.nvml, "nvmlDeviceGetEnforcedPowerLimit", None)
        if call is None:
            self.unavailable["power_limit_w"] = "pynvml has no nvmlDeviceGetEnforcedPowerLimit"
            return None
        return self._ask(("power_limit_w",), call, self.gpu_handle)

    def _throttle_mask(self):
        """The clock-event mask: ``...ClocksEventReasons``, else the older ``...ClocksThrottleReasons`` (R525/R530
        drivers lack the new symbol that nvidia-ml-py has); each call that cannot answer is dropped for good."""
        while self._throttle_calls:
            call = getattr(self.nvml, self._throttle_calls[0])
            try:
                return call(self.gpu_handle)
            except Exception as error:  # noqa: BLE001 - NVMLError_FunctionNotFound (old driver), NotSupported
                if is_transient(error):
                    self.unavailable["throttle_reasons"] = f"NVML {describe_failure(call, error)}"
                    return None
                self._throttle_errors.append(f"NVML {describe_failure(call, error)}")
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
        """One reading; processes and siblings are read at the window's edges only (they cost milliseconds).
        Everything but the processes is read on the whole GPU's handle (:meth:`device_handle`)."""
        nvml, handle = self.nvml, self.gpu_handle
        clock = self._ask(CLOCK_FIELDS, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
        power_mw, power_source = self._power()
        energy_mj = self._ask(("energy_j",), nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        temperature = self._ask(("temperature_c_max",), nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
        mask = self._throttle_mask()
        limit_mw = self._enforced_power_limit() if edge else None
        now = self._now()
        return Reading(
            time_s=now,
            clock_mhz=float(clock) if clock is not None else None,
            power_w=power_mw / _MW_PER_W if power_mw is not None else None,
            power_source=power_source,
            power_limit_w=limit_mw / _MW_PER_W if limit_mw is not None else None,
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


def open_nvml(index: int, fleet_devices):
    try:
        nvml = import_quietly("pynvml")
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

