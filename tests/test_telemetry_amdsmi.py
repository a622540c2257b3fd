"""AMD SMI throttle reasons: the violation status and the GPU metrics' throttle bits, through a fake ``amdsmi`` module."""

import sys
import time
import types
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accounting.telemetry.gpu import (
    AmdSmiBackend,
    decode_indep_throttle_status,
    decode_violation_status,
    open_gpu_backend,
)
from accounting.telemetry.sampler import Sampler, summarise
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
        return {"current_socket_power": self._call("amdsmi_get_power_info", handle).power_w}

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
