"""AMD SMI throttle reasons: the violation status and the GPU metrics' throttle bits, through a fake ``amdsmi`` module."""

import sys
import time
import types
from dataclasses import dataclass, field

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from accounting.errors import AccountingError
from accounting.gate import guard
from accounting.gate.gpu_rounds import rounds_disturbances, rounds_telemetry
from accounting.gate.settings import run_settings, settings_difference
from accounting.gate.guard import disturbances
from accounting.report.saturation import saturation_evidence
from accounting.telemetry.gpu import (
    AmdSmiBackend,
    decode_indep_throttle_status,
    decode_violation_status,
    open_gpu_backend,
)
from accounting.telemetry.sampler import Sampler, summarise
from accounting.telemetry.validity import POWER_SUSPECT, tag_names, validity_tags
from tests.support.fake_nvml import FakeTime

# Bit positions written out from the Linux amdgpu header (drivers/gpu/drm/amd/pm/swsmu/inc/amdgpu_smu.h,
# SMU_THROTTLER_*_BIT), independently of the table under test.
PPT0, SPPT_APU, TDC_GFX, APCC, TEMP_EDGE, TEMP_HOTSPOT, PROCHOT_GFX, FIT = 0, 7, 16, 23, 35, 36, 47, 57
HEADER_NAMES = {PPT0: "ppt0", SPPT_APU: "sppt_apu", TDC_GFX: "tdc_gfx", APCC: "apcc", TEMP_EDGE: "temp_edge",
                TEMP_HOTSPOT: "temp_hotspot", PROCHOT_GFX: "prochot_gfx", FIT: "fit"}


class AmdSmiLibraryException(Exception):
    """What amdsmi raises for a call the device does not support."""


@dataclass
class FakeAmdGpu:
    clock_mhz: int = 2100
    power_w: int = 650
    energy: int = 1_000_000
    temperature_c: int = 70
    indep_throttle_status: object = 0
    bdf: str = "0000:0c:00.0"  # as amdsmi_get_gpu_device_bdf writes it
    hip_id: int = 0  # amdsmi_get_gpu_enumeration_info's HIP index (ROCm 6.4 and newer)
    average_power_w: object = "N/A"  # MI200 gives only the average; MI300 the current power too
    power_cap_uw: object = 750_000_000  # amdsmi_get_power_cap_info's power_cap: µW on Linux (amdsmi.h)
    violations: dict = field(default_factory=lambda: {name: False for name in (
        "active_ppt_pwr", "active_socket_thrm", "active_vr_thrm", "active_hbm_thrm", "active_prochot_thrm")})


class FakeAmdSmi(types.ModuleType):
    """``amdsmi`` with ``gpus``; ``unsupported`` names calls that raise; ``without`` names calls it lacks."""

    AmdSmiClkType = types.SimpleNamespace(GFX="gfx")
    AmdSmiTemperatureType = types.SimpleNamespace(HOTSPOT="hotspot")
    AmdSmiTemperatureMetric = types.SimpleNamespace(CURRENT="current")

    def __init__(self, gpus=None, *, unsupported=(), without=()):
        super().__init__("amdsmi")
        self.gpus = gpus if gpus is not None else [FakeAmdGpu()]
        self.unsupported = set(unsupported)
        self.calls = {}
        for name in without:
            setattr(self, name, None)

    def _call(self, name, handle):
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in self.unsupported:
            raise AmdSmiLibraryException(f"{name}: AMDSMI_STATUS_NOT_SUPPORTED")
        return self.gpus[handle]

    def amdsmi_init(self):
        pass

    def amdsmi_shut_down(self):
        pass

    def amdsmi_get_processor_handles(self):
        return list(range(len(self.gpus)))

    def amdsmi_get_clock_info(self, handle, clock_type):
        return {"clk": self._call("amdsmi_get_clock_info", handle).clock_mhz}

    def amdsmi_get_power_info(self, handle):
        gpu = self._call("amdsmi_get_power_info", handle)
        return {"current_socket_power": gpu.power_w, "average_socket_power": gpu.average_power_w}

    def amdsmi_get_power_cap_info(self, handle):
        gpu = self._call("amdsmi_get_power_cap_info", handle)
        return {"power_cap": gpu.power_cap_uw, "default_power_cap": 750_000_000, "dpm_cap": 2100,
                "min_power_cap": 0, "max_power_cap": 750_000_000}

    def amdsmi_get_gpu_device_bdf(self, handle):
        return self._call("amdsmi_get_gpu_device_bdf", handle).bdf

    def amdsmi_get_gpu_enumeration_info(self, handle):
        gpu = self._call("amdsmi_get_gpu_enumeration_info", handle)
        return {"drm_render": 128 + handle, "drm_card": handle, "hsa_id": gpu.hip_id + 1, "hip_id": gpu.hip_id,
                "hip_uuid": "N/A"}

    def amdsmi_get_energy_count(self, handle):
        return {"energy_accumulator": self._call("amdsmi_get_energy_count", handle).energy, "counter_resolution": 15.3}

    def amdsmi_get_temp_metric(self, handle, sensor, metric):
        return self._call("amdsmi_get_temp_metric", handle).temperature_c

    def amdsmi_get_gpu_metrics_info(self, handle):
        gpu = self._call("amdsmi_get_gpu_metrics_info", handle)
        return {"current_gfxclk": gpu.clock_mhz, "indep_throttle_status": gpu.indep_throttle_status}

    def amdsmi_get_violation_status(self, handle):
        return dict(self._call("amdsmi_get_violation_status", handle).violations)


def window(backend, clock, changes):
    """Readings: an edge, one after each change, an edge."""
    readings = [backend.read(edge=True)]
    for change in changes:
        clock.t += 0.1
        change()
        readings.append(backend.read(edge=False))
    clock.t += 0.01
    readings.append(backend.read(edge=True))
    return readings


def test_power_and_hotspot_bits_set_mid_window_are_named():
    smi = FakeAmdSmi(without=("amdsmi_get_violation_status",))  # an MI200-era binding: metrics only
    clock = FakeTime()
    backend = AmdSmiBackend(smi, 0, now=clock)
    gpu = smi.gpus[0]

    def throttle():
        gpu.clock_mhz, gpu.indep_throttle_status = 1500, (1 << PPT0) | (1 << TEMP_HOTSPOT)

    summary = summarise("cuda:0", backend, window(backend, clock, [lambda: None, throttle]))
    assert summary.throttle_reasons == ("ppt0", "temp_hotspot")
    assert summary.throttled
    assert (summary.clock_mhz_min, summary.clock_mhz_max) == (1500.0, 2100.0)
    assert "throttle_reasons" not in summary.unavailable


def test_a_clean_window_has_no_reason_and_says_none_is_missing():
    smi = FakeAmdSmi()
    clock = FakeTime()
    backend = AmdSmiBackend(smi, 0, now=clock)
    summary = summarise("cuda:0", backend, window(backend, clock, [lambda: None]))
    assert summary.throttle_reasons == () and not summary.throttled
    assert "throttle_reasons" not in summary.unavailable


def test_violation_flags_and_metric_bits_are_merged_without_repeats():
    smi = FakeAmdSmi()
    gpu = smi.gpus[0]
    gpu.violations["active_ppt_pwr"] = True
    gpu.violations["active_hbm_thrm"] = "N/A"
    gpu.indep_throttle_status = (1 << PPT0) | (1 << PROCHOT_GFX)
    reading = AmdSmiBackend(smi, 0, now=FakeTime()).read(edge=False)
    assert reading.throttle_reasons == ("ppt_power", "ppt0", "prochot_gfx")


def test_a_binding_that_gives_only_a_bool_still_says_throttled():
    """Some amdsmi Python bindings return ``bool(indep_throttle_status)``: the bits are gone, the fact is not."""
    smi = FakeAmdSmi(unsupported=("amdsmi_get_violation_status",))
    smi.gpus[0].indep_throttle_status = True
    reading = AmdSmiBackend(smi, 0, now=FakeTime()).read(edge=False)
    assert reading.throttle_reasons == ("throttled_reason_unknown",)


def test_a_bool_beside_the_violation_status_adds_no_unknown_reason_to_a_capped_mi300x():
    """The violation status names the limit (here the power cap); the bool only repeats that some limit holds, and
    as an unknown reason it would make every capped run disturbed."""
    smi = FakeAmdSmi()
    smi.gpus[0].violations["active_ppt_pwr"] = True
    smi.gpus[0].indep_throttle_status = True
    reading = AmdSmiBackend(smi, 0, now=FakeTime()).read(edge=False)
    assert reading.throttle_reasons == ("ppt_power",)
    idle = {"device": "cuda:0", "clock_source": AmdSmiBackend.clock_source, "throttle_reasons": []}
    assert disturbances(idle, dict(idle, throttle_reasons=list(reading.throttle_reasons))) == []


def test_a_device_with_neither_source_gives_the_reasons_once_not_a_crash():
    smi = FakeAmdSmi(unsupported=("amdsmi_get_violation_status", "amdsmi_get_gpu_metrics_info"))
    clock = FakeTime()
    backend = AmdSmiBackend(smi, 0, now=clock)
    summary = summarise("cuda:0", backend, window(backend, clock, [lambda: None] * 3))
    assert summary.throttle_reasons == ()
    why = summary.unavailable["throttle_reasons"]
    assert "amdsmi_get_violation_status: AmdSmiLibraryException" in why
    assert "amdsmi_get_gpu_metrics_info: AmdSmiLibraryException" in why
    assert smi.calls["amdsmi_get_violation_status"] == smi.calls["amdsmi_get_gpu_metrics_info"] == 1, "asked once"
    assert summary.clock_mhz_mean == 2100.0, "the other readings go on"


def test_both_sources_saying_n_a_is_a_reason_too():
    smi = FakeAmdSmi()
    gpu = smi.gpus[0]
    gpu.violations = {name: "N/A" for name in gpu.violations}
    gpu.indep_throttle_status = "N/A"
    backend = AmdSmiBackend(smi, 0, now=FakeTime())
    assert backend.read(edge=True).throttle_reasons == ()
    assert "both N/A" in backend.unavailable["throttle_reasons"]


def test_the_sampler_reads_throttling_through_a_fake_amdsmi(monkeypatch):
    smi = FakeAmdSmi()
    smi.gpus[0].indep_throttle_status = 1 << TDC_GFX
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "amdsmi", smi)
    assert isinstance(open_gpu_backend(0), AmdSmiBackend)
    with Sampler("cuda:0", interval_s=0.005) as sampler:
        time.sleep(0.02)
    assert sampler.summary.backend == "amdsmi"
    assert sampler.summary.throttle_reasons == ("tdc_gfx",)


@given(bits=st.sets(st.integers(0, 63), max_size=12))
def test_every_set_bit_gets_one_name_and_header_bits_their_header_name(bits):
    mask = sum(1 << bit for bit in bits)
    names = decode_indep_throttle_status(mask)
    assert len(names) == len(bits)
    for bit, name in zip(sorted(bits), names):
        if bit in HEADER_NAMES:
            assert name == HEADER_NAMES[bit]
        assert not name.startswith("unknown_bit_") or name == f"unknown_bit_{bit}"


@pytest.mark.parametrize("bit", [8, 15, 24, 31, 48, 55, 58, 63])
def test_bits_the_header_leaves_unused_are_named_unknown(bit):
    assert decode_indep_throttle_status(1 << bit) == (f"unknown_bit_{bit}",)


@pytest.mark.parametrize("status, reasons", [
    pytest.param({"active_socket_thrm": True, "active_vr_thrm": 1}, ("socket_thermal", "vr_thermal"), id="thermal"),
    pytest.param({"active_prochot_thrm": True, "acc_ppt_pwr": 5}, ("prochot_thermal",), id="prochot"),
    pytest.param({"active_ppt_pwr": False}, (), id="clear"),
    pytest.param({"active_ppt_pwr": "N/A", "per_ppt_pwr": 40}, None, id="unknown"),
])
def test_violation_status_flags(status, reasons):
    assert decode_violation_status(status) == reasons


# ---- which device: torch numbers the visible GPUs, AMD SMI lists the node's ---------------------------------


def node(count=4):
    """A node's GPUs: each with its own clock, PCI address and HIP index."""
    return [FakeAmdGpu(clock_mhz=2000 + 10 * i, bdf=f"0000:{0x0c + 0x20 * i:02x}:00.0", hip_id=i) for i in range(count)]


def torch_sees(monkeypatch, physical, smi, *, pci=True):
    """torch sees the GPUs at ``physical`` positions of ``smi.gpus``; with ``pci`` it reports their PCI address
    (torch 2.6 and newer), else it has no ``pci_*_id`` (torch 2.4, 2.5)."""

    addresses = [smi.gpus[position].bdf for position in physical]

    def properties(index):
        if not pci:
            return types.SimpleNamespace(uuid="58ff744c-0000-0000-0000-000000000000")
        domain, bus, rest = addresses[index].split(":")
        return types.SimpleNamespace(pci_domain_id=int(domain, 16), pci_bus_id=int(bus, 16),
                                     pci_device_id=int(rest.split(".")[0], 16))

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(physical))
    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)


def test_the_device_is_found_by_its_pci_address_not_its_place_in_amdsmis_list(monkeypatch):
    smi = FakeAmdSmi(node())
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "2,3")
    torch_sees(monkeypatch, [2, 3], smi)
    for index, physical in enumerate([2, 3]):
        reading = AmdSmiBackend(smi, index, now=FakeTime()).read(edge=False)
        assert reading.clock_mhz == smi.gpus[physical].clock_mhz


def test_without_torchs_pci_address_the_hip_index_after_rocr_and_hip_visibility_finds_it(monkeypatch):
    """ROCR_VISIBLE_DEVICES=1,2,3 leaves HIP GPUs 1, 2, 3; HIP_VISIBLE_DEVICES=2 picks the third of those: HIP 3.
    AMD SMI lists the node in another order (HIP 1, 0, 3, 2)."""
    gpus = node()
    for gpu, hip in zip(gpus, [1, 0, 3, 2]):
        gpu.hip_id = hip
    smi = FakeAmdSmi(gpus)
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "1,2,3")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "2")
    torch_sees(monkeypatch, [2], smi, pci=False)
    assert AmdSmiBackend(smi, 0, now=FakeTime()).read(edge=False).clock_mhz == gpus[2].clock_mhz


def test_a_device_nothing_identifies_gives_no_backend_rather_than_another_gpu(monkeypatch):
    smi = FakeAmdSmi(node(2), without=("amdsmi_get_gpu_enumeration_info",))
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "amdsmi", smi)
    torch_sees(monkeypatch, [1], smi, pci=False)
    backend = open_gpu_backend(0)
    assert backend.name is None
    assert "cannot tell which of 2 AMD SMI devices is cuda:0" in backend.unavailable["clock_mhz_mean"]


def test_a_pci_address_amd_smi_does_not_list_is_named(monkeypatch):
    smi = FakeAmdSmi(node(2))
    torch_sees(monkeypatch, [1], smi)
    smi.gpus[1].bdf = "0000:ff:00.0"  # torch's GPU is not on AMD SMI's list (another node's, a stale address)
    with pytest.raises(AccountingError, match=r"no AMD SMI device at the PCI address torch gives cuda:0"):
        AmdSmiBackend(smi, 0, now=FakeTime())


def test_fleet_devices_are_accepted_by_the_amd_backend(monkeypatch):
    """AMD SMI reads no sibling GPUs, so the fleet's are never named busy; the keyword is the NVML backend's."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "amdsmi", FakeAmdSmi())
    with Sampler("cuda:0", interval_s=0.005, fleet_devices=(1, 2)) as sampler:
        time.sleep(0.01)
    assert sampler.summary.backend == "amdsmi" and sampler.summary.busy_siblings == ()


@pytest.mark.parametrize("current, average, watts, source", [
    pytest.param(650, "N/A", 650.0, "instant", id="mi300-current"),
    pytest.param("N/A", 540, 540.0, "average", id="mi200-average-only"),
])
def test_amd_power_says_whether_it_is_current_or_averaged(current, average, watts, source):
    smi = FakeAmdSmi([FakeAmdGpu(power_w=current, average_power_w=average)])
    reading = AmdSmiBackend(smi, 0, now=FakeTime()).read(edge=False)
    assert (reading.power_w, reading.power_source) == (watts, source)


def test_an_amd_smi_reason_names_amd_smi():
    smi = FakeAmdSmi(unsupported=("amdsmi_get_temp_metric",))
    backend = AmdSmiBackend(smi, 0, now=FakeTime())
    backend.read(edge=False)
    assert backend.unavailable["temperature_c_max"].startswith("AMD SMI amdsmi_get_temp_metric: AmdSmiLibraryException")


# ---- the power cap: a power-capped MI300X is saturated, not disturbed -------------------------------------------


def capped_window(smi, power_w):
    """A 2-s window of an MI300X at ``power_w`` held at its power cap (PVIOL and PPT0, as the SMU reports it)."""
    gpu = smi.gpus[0]
    gpu.violations["active_ppt_pwr"] = True
    gpu.indep_throttle_status = 1 << PPT0
    gpu.clock_mhz, gpu.power_w = 1700, power_w
    clock = FakeTime()
    backend = AmdSmiBackend(smi, 0, now=clock)
    return summarise("cuda:0", backend, window(backend, clock, [lambda: None] * 20))


def test_the_power_cap_is_read_at_the_edges_in_watts():
    smi = FakeAmdSmi([FakeAmdGpu(power_cap_uw=560_000_000)])  # an administrator's 560 W cap
    clock = FakeTime()
    backend = AmdSmiBackend(smi, 0, now=clock)
    readings = window(backend, clock, [lambda: None] * 3)
    assert [reading.power_limit_w for reading in readings] == [560.0, None, None, None, 560.0]
    assert smi.calls["amdsmi_get_power_cap_info"] == 2
    assert summarise("cuda:0", backend, readings).power_limit_w == 560.0


def test_a_device_without_the_power_cap_call_says_why():
    smi = FakeAmdSmi(unsupported=("amdsmi_get_power_cap_info",))
    clock = FakeTime()
    backend = AmdSmiBackend(smi, 0, now=clock)
    summary = summarise("cuda:0", backend, window(backend, clock, [lambda: None]))
    assert summary.power_limit_w is None
    assert "amdsmi_get_power_cap_info: AmdSmiLibraryException" in summary.unavailable["power_limit_w"]


def test_a_power_capped_mi300x_window_is_saturated_and_an_unloaded_one_is_power_suspect():
    capped = capped_window(FakeAmdSmi(), 745)
    assert capped.throttle_reasons == ("ppt_power", "ppt0") and capped.power_limit_w == 750.0
    assert POWER_SUSPECT not in tag_names(validity_tags(capped))
    assert saturation_evidence(capped.to_dict()) is not None
    idle = FakeAmdSmi()
    idle.gpus[0].power_w = 300  # far below the 750 W cap, and nothing reported holding the clock
    clock = FakeTime()
    backend = AmdSmiBackend(idle, 0, now=clock)
    summary = summarise("cuda:0", backend, window(backend, clock, [lambda: None] * 20))
    assert tag_names(validity_tags(summary)) == [POWER_SUSPECT]


@pytest.mark.parametrize("bit", [0, 1, 2, 3])
def test_every_package_power_bit_is_the_gates_normal_state_at_full_load(bit):
    """Rounds of a busy MI300X at its power cap, below the baselines' clock: the cap explains it, as sw_power_cap does
    on NVIDIA; the gate must not call every capped run disturbed."""
    smi = FakeAmdSmi()
    gpu = smi.gpus[0]
    gpu.violations["active_ppt_pwr"] = True
    gpu.indep_throttle_status = 1 << bit
    gpu.clock_mhz = 1600
    reasons = list(AmdSmiBackend(smi, 0, now=FakeTime()).read(edge=False).throttle_reasons)
    capped = {"telemetry_rounds": {"clock_mhz": [1600.0] * 3, "throttle_reasons": [reasons] * 3}}
    cool = {"telemetry_rounds": {"clock_mhz": [2100.0] * 3, "throttle_reasons": [[]] * 3}}
    assert rounds_disturbances(rounds_telemetry(capped, 3), [rounds_telemetry(cool, 3)]) == []
    idle = {"device": "cuda:0", "clock_source": AmdSmiBackend.clock_source, "clock_mhz_mean": 150.0,
            "throttle_reasons": []}
    assert disturbances(idle, dict(idle, clock_mhz_mean=1600.0, throttle_reasons=reasons)) == []
    hot = dict(idle, throttle_reasons=reasons + ["temp_hotspot"])
    assert disturbances(idle, hot) == ["throttled after the run (temp_hotspot)"]


def test_the_gate_compares_an_mi300x_power_cap_between_runs(monkeypatch):
    """The load guard's reading of an AMD GPU carries its power cap, so runs under another cap are not compared."""
    smi = FakeAmdSmi()
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "amdsmi", smi)
    baseline = guard.read("cuda:0")
    smi.gpus[0].power_cap_uw = 560_000_000
    current = guard.read("cuda:0")
    assert run_settings({"before": baseline}) == {"power_limit_w": 750.0}
    assert settings_difference(run_settings({"before": baseline}), run_settings({"before": current})) == (
        "power limit 750 W in the baseline, 560 W here")
