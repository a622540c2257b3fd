"""The AMD SMI telemetry backend (the ``amdsmi`` module ROCm installs) of :mod:`accounting.telemetry`.

ROCm installs ``amdsmi`` with the driver stack; without it every GPU reading is ``None`` with the
reason, never an error. AMD SMI reads the GFX clock, socket power, the energy counter and the hotspot
temperature, of the device whose PCI address torch reports (AMD SMI lists every GPU of the node; torch only the visible ones); throttle
reasons from ``amdsmi_get_violation_status`` (MI300 and newer: PVIOL/TVIOL ``active_*`` flags,
:data:`AMDSMI_VIOLATIONS`) and from ``amdsmi_get_gpu_metrics_info``'s ``indep_throttle_status``
(the ASIC-independent ``SMU_THROTTLER_*`` bits, :data:`SMU_THROTTLER_BITS`); and at a window's edges the
power cap it enforces (``amdsmi_get_power_cap_info``), which tells a power-saturated figure from one that is not.

>>> decode_indep_throttle_status((1 << 0) | (1 << 36))
('ppt0', 'temp_hotspot')
"""

import os
import re
import time

import torch

from accounting.errors import AccountingError
from accounting.telemetry.gpu_calls import (
    CLOCK_FIELDS,
    POWER_FIELDS,
    ask_library,
    import_quietly,
    is_transient,
    torch_properties,
    visible_entries,
)
from accounting.telemetry.gpu_nvml import NVML_ENERGY_UPDATE_PERIOD_S
from accounting.telemetry.readings import GPU_INTERVAL_S, POWER_AVERAGE_UNPUBLISHED, POWER_INSTANT, Reading

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

AMD_POWER_LIMIT_REASONS = frozenset({"ppt_power"} | {SMU_THROTTLER_BITS[bit] for bit in range(8)})
"""The reasons that say a power limit holds the clock: the violation status's PVIOL and the metrics' power bits
(PPT0–3, package power tracking; SPL/FPPT/SPPT, an APU's limits) — AMD's ``sw_power_cap``, the state of every
busy MI300X (a dense GEMM holds it at its cap)."""
AMD_THERMAL_REASONS = frozenset({"socket_thermal", "vr_thermal", "hbm_thermal", "prochot_thermal"}
                                | {SMU_THROTTLER_BITS[bit] for bit in range(32, 48)})
"""The reasons that say a temperature limit holds the clock: the violation status's thermal flags and the metrics'
temperature, VRHOT and PROCHOT bits."""
AMDSMI_POWER_CAP_UNIT_W = 1e-6
"""``amdsmi_get_power_cap_info``'s ``power_cap`` is in µW on Linux (amdsmi.h, ``amdsmi_power_cap_info_t``)."""

AMDSMI_POWER_SOURCES = {"current_socket_power": POWER_INSTANT, "average_socket_power": POWER_AVERAGE_UNPUBLISHED}
"""``amdsmi_get_power_info`` keys, in the order asked, and what each is (MI300: current; MI200: average only)."""


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
    properties = torch_properties(index)
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
        entries = visible_entries(variable)
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

    _ask = ask_library

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
            if not is_transient(error):
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
        status = metrics.get("indep_throttle_status") if isinstance(metrics, dict) else None
        decoded = decode_indep_throttle_status(status) if isinstance(metrics, dict) else None
        if answered and isinstance(status, bool):
            decoded = None  # a binding's bool says only "some limit": the violation status above said which
        if decoded is not None:
            answered = True
            names += [name for name in decoded if name not in names]
        if answered:
            self.unavailable.pop("throttle_reasons", None)
        else:
            self.unavailable["throttle_reasons"] = "; ".join(self._throttle_errors.values()) or (
                "AMD SMI gave no throttle status (violation status and indep_throttle_status both N/A)")
        return tuple(names)

    def _power_cap_w(self) -> float | None:
        """The power cap the device enforces now (``amdsmi_get_power_cap_info``'s ``power_cap``, µW), in W."""
        call = getattr(self.amdsmi, "amdsmi_get_power_cap_info", None)
        if call is None:
            self.unavailable["power_limit_w"] = "AMD SMI has no amdsmi_get_power_cap_info"
            return None
        caps = self._ask(("power_limit_w",), call, self.handle)
        cap = caps.get("power_cap") if isinstance(caps, dict) else None
        if not isinstance(cap, (int, float)) or isinstance(cap, bool) or cap <= 0:
            if caps is not None:
                self.unavailable["power_limit_w"] = f"AMD SMI amdsmi_get_power_cap_info gave power_cap {cap!r}"
            return None
        return cap * AMDSMI_POWER_CAP_UNIT_W

    def read(self, *, edge: bool) -> Reading:
        """One reading; the power cap at the window's edges only (as NVML's enforced limit)."""
        smi, handle = self.amdsmi, self.handle
        clock = self._ask(CLOCK_FIELDS, smi.amdsmi_get_clock_info, handle, smi.AmdSmiClkType.GFX)
        power = self._ask(POWER_FIELDS, smi.amdsmi_get_power_info, handle)
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
            power_limit_w=self._power_cap_w() if edge else None,
            energy_j=joules,
            temperature_c=float(temperature) if isinstance(temperature, (int, float)) else None,
            throttle_reasons=self._throttle_reasons(),
        )

    def close(self) -> None:
        try:
            self.amdsmi.amdsmi_shut_down()
        except Exception:  # noqa: BLE001, S110 - as for NVML
            pass


def open_amdsmi(index: int, fleet_devices):
    try:
        smi = import_quietly("amdsmi")
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

