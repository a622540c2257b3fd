"""The GPU backends of :mod:`accounting.telemetry`: NVML (``nvidia-ml-py``) and AMD SMI (``amdsmi``).

Neither library comes with torch: ``pip install 'pytest-accounting[gpu]'`` brings
``nvidia-ml-py`` (module ``pynvml``); ROCm installs ``amdsmi`` with the driver stack.
Without them every GPU reading is ``None`` with the reason, never an error.

NVML (``nvml.h``, NVIDIA's NVML API reference): SM clock ``nvmlDeviceGetClockInfo(NVML_CLOCK_SM)``
(MHz), power ``nvmlDeviceGetPowerUsage`` (mW), ``nvmlDeviceGetTotalEnergyConsumption``
(mJ since the driver loaded; Volta and newer), ``nvmlDeviceGetTemperature`` (°C),
clock-event (throttle) reasons as a bit mask (:data:`NVML_CLOCK_EVENT_REASONS`),
per-process memory, and every other GPU's utilisation and memory.

>>> decode_clock_event_reasons(0x4 | 0x20 | 0x1)
('sw_power_cap', 'sw_thermal_slowdown')

AMD SMI: GFX clock, socket power, the energy counter and the hotspot temperature; throttle
reasons from ``amdsmi_get_violation_status`` (MI300 and newer: PVIOL/TVIOL ``active_*`` flags,
:data:`AMDSMI_VIOLATIONS`) and from ``amdsmi_get_gpu_metrics_info``'s ``indep_throttle_status``
(the ASIC-independent ``SMU_THROTTLER_*`` bits, :data:`SMU_THROTTLER_BITS`).

>>> decode_indep_throttle_status((1 << 0) | (1 << 36))
('ppt0', 'temp_hotspot')
"""

import os
import time
import warnings

import torch

from accounting.telemetry.readings import GPU_INTERVAL_S, NoBackend, Reading

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

_CLOCK_FIELDS = ("clock_mhz_min", "clock_mhz_mean", "clock_mhz_max")
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


def _import_quietly(module: str):
    with warnings.catch_warnings():  # the old `pynvml` shim package warns that it is deprecated
        warnings.simplefilter("ignore")
        return __import__(module)


def _physical_nvml_index(index: int) -> int:
    """The NVML index of CUDA device ``index``: ``$CUDA_VISIBLE_DEVICES`` renumbers CUDA devices, NVML does not."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
    if entries and all(entry.isdigit() for entry in entries) and index < len(entries):
        return int(entries[index])
    return index


class NvmlBackend:
    """Reads one CUDA device through NVML (see the module docstring)."""

    name = "nvml"
    energy_source = "counter"
    energy_update_period_s = NVML_ENERGY_UPDATE_PERIOD_S
    clock_source = "NVML SM clock"
    default_interval_s = GPU_INTERVAL_S

    def __init__(self, nvml, index: int, *, now=time.perf_counter):
        self.nvml = nvml
        self._now = now
        self.unavailable: dict[str, str] = {}
        self._failed: set[str] = set()
        self.handle, self.nvml_index = self._handle(index)

    def _handle(self, index: int):
        nvml = self.nvml
        uuid = None
        if torch.cuda.is_available() and index < torch.cuda.device_count():
            uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        if uuid is not None and hasattr(nvml, "nvmlDeviceGetHandleByUUID"):
            text = str(uuid)
            handle = nvml.nvmlDeviceGetHandleByUUID(text if text.startswith("GPU-") else f"GPU-{text}")
            return handle, self._ask(("busy_siblings",), nvml.nvmlDeviceGetIndex, handle)
        physical = _physical_nvml_index(index)
        return nvml.nvmlDeviceGetHandleByIndex(physical), physical

    def _ask(self, fields, call, *args):
        """``call(*args)``, or ``None`` with the reason recorded for ``fields`` (and not asked again)."""
        if fields[0] in self._failed:
            return None
        try:
            return call(*args)
        except Exception as error:  # noqa: BLE001 - NVMLError_NotSupported and kin: a missing reading, not a crash
            self._failed.add(fields[0])
            for name in fields:
                self.unavailable[name] = f"NVML {getattr(call, '__name__', call)}: {type(error).__name__}: {error}"
            return None

    def _throttle_mask(self):
        nvml = self.nvml
        call = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return self._ask(("throttle_reasons",), call, self.handle)

    def _other_process_memory(self) -> int | None:
        """Bytes held on this GPU by processes other than this one (PIDs as NVML reports them)."""
        nvml = self.nvml
        processes = self._ask(("other_process_memory_bytes",), nvml.nvmlDeviceGetComputeRunningProcesses, self.handle)
        if processes is None:
            return None
        graphics = getattr(nvml, "nvmlDeviceGetGraphicsRunningProcesses", None)
        if graphics is not None:
            processes = list(processes) + list(self._ask(("graphics_processes",), graphics, self.handle) or [])
        own = os.getpid()
        seen = {}
        for process in processes:
            used = getattr(process, "usedGpuMemory", None)
            if process.pid != own and used is not None:
                seen[process.pid] = max(seen.get(process.pid, 0), int(used))
        return sum(seen.values())

    def _busy_siblings(self) -> tuple[str, ...]:
        nvml = self.nvml
        count = self._ask(("busy_siblings",), nvml.nvmlDeviceGetCount) if self.nvml_index is not None else None
        busy = []
        for index in range(count or 0):
            if index == self.nvml_index:
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
        power_mw = self._ask(("power_w_mean", "power_w_max"), nvml.nvmlDeviceGetPowerUsage, handle)
        energy_mj = self._ask(("energy_j",), nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        temperature = self._ask(("temperature_c_max",), nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
        mask = self._throttle_mask()
        now = self._now()
        return Reading(
            time_s=now,
            clock_mhz=float(clock) if clock is not None else None,
            power_w=power_mw / _MW_PER_W if power_mw is not None else None,
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


class AmdSmiBackend:
    """Reads one ROCm device through AMD SMI: clock, power, energy, temperature and throttle reasons."""

    name = "amdsmi"
    energy_source = "counter"
    energy_update_period_s = NVML_ENERGY_UPDATE_PERIOD_S
    clock_source = "AMD SMI GFX clock"
    default_interval_s = GPU_INTERVAL_S

    def __init__(self, amdsmi, index: int, *, now=time.perf_counter):
        self.amdsmi = amdsmi
        self._now = now
        self.handle = amdsmi.amdsmi_get_processor_handles()[index]
        self.unavailable: dict[str, str] = {
            "other_process_memory_bytes": "not read through AMD SMI here",
        }
        self._failed: set[str] = set()
        self._throttle_errors: dict[str, str] = {}

    _ask = NvmlBackend._ask

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
        power = self._ask(("power_w_mean", "power_w_max"), smi.amdsmi_get_power_info, handle)
        energy = self._ask(("energy_j",), smi.amdsmi_get_energy_count, handle)
        temperature = self._ask(
            ("temperature_c_max",),
            smi.amdsmi_get_temp_metric,
            handle,
            smi.AmdSmiTemperatureType.HOTSPOT,
            smi.AmdSmiTemperatureMetric.CURRENT,
        )
        watts = None
        if isinstance(power, dict):
            watts = next((power[key] for key in ("current_socket_power", "average_socket_power") if
                          isinstance(power.get(key), (int, float))), None)
        joules = None
        if isinstance(energy, dict) and "counter_resolution" in energy:
            count = energy.get("energy_accumulator", energy.get("power"))
            joules = count * energy["counter_resolution"] / 1e6 if isinstance(count, (int, float)) else None
        return Reading(
            time_s=self._now(),
            clock_mhz=float(clock["clk"]) if isinstance(clock, dict) and "clk" in clock else None,
            power_w=float(watts) if watts is not None else None,
            energy_j=joules,
            temperature_c=float(temperature) if isinstance(temperature, (int, float)) else None,
            throttle_reasons=self._throttle_reasons(),
        )

    def close(self) -> None:
        try:
            self.amdsmi.amdsmi_shut_down()
        except Exception:  # noqa: BLE001, S110 - as for NVML
            pass


def _open_nvml(index: int):
    try:
        nvml = _import_quietly("pynvml")
    except ImportError:
        return None, "no NVML: pip install 'pytest-accounting[gpu]' (nvidia-ml-py)"
    try:
        nvml.nvmlInit()
    except Exception as error:  # noqa: BLE001 - no driver, no library
        return None, f"NVML did not start: {type(error).__name__}: {error}"
    try:
        return NvmlBackend(nvml, index), None
    except Exception as error:  # noqa: BLE001 - no such device
        nvml.nvmlShutdown()
        return None, f"NVML has no device for cuda:{index}: {type(error).__name__}: {error}"


def _open_amdsmi(index: int):
    try:
        smi = _import_quietly("amdsmi")
    except ImportError:
        return None, "no AMD SMI (the amdsmi module ROCm installs)"
    try:
        smi.amdsmi_init()
        return AmdSmiBackend(smi, index), None
    except Exception as error:  # noqa: BLE001
        return None, f"AMD SMI did not start for cuda:{index}: {type(error).__name__}: {error}"


def open_gpu_backend(index: int):
    """The backend for CUDA device ``index``: AMD SMI first on ROCm builds, NVML first otherwise; else a :class:`NoBackend`."""
    openers = [_open_amdsmi, _open_nvml] if getattr(torch.version, "hip", None) else [_open_nvml, _open_amdsmi]
    reasons = []
    for opener in openers:
        backend, reason = opener(index)
        if backend is not None:
            return backend
        reasons.append(reason)
    return NoBackend("; ".join(reasons))
