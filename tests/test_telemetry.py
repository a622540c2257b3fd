"""accounting.telemetry: NVML through a fake pynvml, the CPU backend for real and on fake sysfs trees, and the
window's arithmetic and the sampler's life cycle on a scripted backend.

The scripted backend is a script of readings, so every expected figure is worked out by hand from it: the
energy rule's edges (a snapshot, a window shorter than the counter's period, the counter's one-second
minimum, a counter that does not advance), how readings fold into a summary, and the sampler's errors.
"""

import dataclasses
import json
import os
import sys
import time
import types

import pytest
import torch

from accounting import telemetry
from accounting.errors import AccountingError
from accounting.hardware import cpu_clock
from accounting.telemetry.gpu import NvmlBackend, decode_clock_event_reasons, open_gpu_backend
from accounting.telemetry.readings import CPU_INTERVAL_S, GPU_INTERVAL_S, UNAVAILABLE, NoBackend, Reading, Summary
from accounting.telemetry.sampler import Sampler, snapshot, summarise
from tests.support.fake_nvml import (
    GPU_IDLE,
    HW_SLOWDOWN,
    SW_POWER_CAP,
    SW_THERMAL_SLOWDOWN,
    FakeGpu,
    FakeNvml,
    FakeTime,
    Process,
)

GIB = 2**30
READING_FIELDS = [f.name for f in dataclasses.fields(Summary) if f.name not in (
    "device", "backend", "duration_s", "samples", "logical_cpus", "clock_source", "energy_source", "power_source",
    "throttle_reasons", "busy_siblings", "mig_slice", "notes", "unavailable")]


def assert_every_missing_reading_has_a_reason(summary: Summary):
    missing = [name for name in READING_FIELDS if getattr(summary, name) is UNAVAILABLE]
    assert sorted(name for name in missing if name not in summary.unavailable) == []
    present = [name for name in READING_FIELDS if getattr(summary, name) is not None]
    assert sorted(name for name in present if name in summary.unavailable) == []


@pytest.fixture
def nvml(monkeypatch):
    fake = FakeNvml([FakeGpu(), FakeGpu()])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    return fake


def window(backend, clock: FakeTime, steps):
    """Readings of ``backend``: an edge, one per ``(seconds, change)`` step, an edge; ``change`` mutates the fake first."""
    readings = [backend.read(edge=True)]
    for seconds, change in steps:
        clock.t += seconds
        change()
        readings.append(backend.read(edge=False))
    clock.t += 0.01
    readings.append(backend.read(edge=True))
    return readings


# ---- NVML -------------------------------------------------------------------------------------------


def test_throttling_mid_window_is_decoded_and_the_clock_range_shows_it(nvml):
    clock = FakeTime()
    backend = NvmlBackend(nvml, 0, now=clock)
    gpu = nvml.gpus[0]

    def throttle():
        gpu.clock_mhz, gpu.throttle_mask = 1410.0, SW_POWER_CAP | SW_THERMAL_SLOWDOWN | GPU_IDLE

    summary = summarise("cuda:0", backend, window(backend, clock, [(0.5, lambda: None), (0.5, throttle)]))
    assert summary.throttle_reasons == ("sw_power_cap", "sw_thermal_slowdown")
    assert summary.throttled
    assert (summary.clock_mhz_max, summary.clock_mhz_min) == (1980.0, 1410.0)
    assert summary.clock_mhz_mean == pytest.approx((1980.0 * 2 + 1410.0 * 2) / 4)
    assert "throttle_reasons" not in summary.unavailable


def test_a_clean_window_has_no_throttle_reason_and_idle_is_not_one(nvml):
    nvml.gpus[0].throttle_mask = GPU_IDLE
    clock = FakeTime()
    backend = NvmlBackend(nvml, 0, now=clock)
    summary = summarise("cuda:0", backend, window(backend, clock, [(0.5, lambda: None)]))
    assert summary.throttle_reasons == () and not summary.throttled
    assert summary.clock_mhz_min == summary.clock_mhz_max == 1980.0


@pytest.mark.parametrize("mask, names", [
    pytest.param(0, (), id="none"),
    pytest.param(HW_SLOWDOWN, ("hw_slowdown",), id="hw-slowdown"),
    pytest.param(0x800 | SW_POWER_CAP, ("sw_power_cap", "unknown_0x800"), id="unknown-bit-named"),
    pytest.param(0x100 | GPU_IDLE, (), id="display-and-idle-do-not-slow"),
])
def test_clock_event_masks_decode_to_names(mask, names):
    assert decode_clock_event_reasons(mask) == names


NVML_H_CLOCK_EVENT_REASONS = {
    0x1: "GpuIdle", 0x2: "ApplicationsClocksSetting", 0x4: "SwPowerCap", 0x8: "HwSlowdown", 0x10: "SyncBoost",
    0x20: "SwThermalSlowdown", 0x40: "HwThermalSlowdown", 0x80: "HwPowerBrakeSlowdown", 0x100: "DisplayClockSetting"}
"""nvml.h's ``nvmlClocksEventReason<Name>`` bits, written out from the header: ``nvmlClocksEventReasonAll`` is their OR."""


@pytest.mark.parametrize("bit", range(16))
def test_a_bit_nvml_h_does_not_define_is_named_unknown_not_guessed(bit):
    """0x200 and 0x400 are in no nvml.h: a name for them would be made up (and judged as if it were known)."""
    value = 1 << bit
    names = decode_clock_event_reasons(value | SW_POWER_CAP)
    if value in NVML_H_CLOCK_EVENT_REASONS:
        assert all(not name.startswith("unknown") for name in names)
    else:
        assert names == ("sw_power_cap", f"unknown_{value:#x}")


def test_energy_over_a_long_window_comes_from_the_counter(nvml):
    clock = FakeTime()
    backend = NvmlBackend(nvml, 0, now=clock)
    gpu = nvml.gpus[0]

    def spend():
        gpu.energy_mj += 400_000  # 400 J per 0.6 s step

    summary = summarise("cuda:0", backend, window(backend, clock, [(0.6, spend), (0.6, spend)]))
    assert summary.duration_s == pytest.approx(1.21)
    assert (summary.energy_j, summary.energy_source) == (pytest.approx(800.0), "counter")
    assert summary.power_w_mean == pytest.approx(650.0) and summary.power_w_max == pytest.approx(650.0)


def test_energy_under_a_second_is_power_times_time_and_says_so(nvml):
    clock = FakeTime()
    backend = NvmlBackend(nvml, 0, now=clock)
    gpu = nvml.gpus[0]

    def more_power():
        gpu.power_mw, gpu.energy_mj = 750_000.0, gpu.energy_mj + 1

    summary = summarise("cuda:0", backend, window(backend, clock, [(0.3, lambda: None), (0.2, more_power)]))
    power = [650.0, 650.0, 750.0, 750.0]
    assert summary.energy_source == "power×time"
    assert summary.energy_j == pytest.approx(sum(power) / len(power) * 0.51)


def test_a_window_shorter_than_the_counter_period_is_flagged_never_zero_joules(nvml):
    clock = FakeTime()
    backend = NvmlBackend(nvml, 0, now=clock)
    summary = summarise("cuda:0", backend, window(backend, clock, [(0.02, lambda: None)]))
    assert summary.duration_s == pytest.approx(0.03)
    assert summary.energy_j is None and summary.energy_source is None
    assert "shorter than the energy counter's update period" in summary.unavailable["energy_j"]
    assert_every_missing_reading_has_a_reason(summary)


def test_a_counter_that_does_not_advance_is_flagged_not_zero(nvml):
    clock = FakeTime()
    backend = NvmlBackend(nvml, 0, now=clock)
    summary = summarise("cuda:0", backend, window(backend, clock, [(1.5, lambda: None)]))
    assert summary.energy_j is None
    assert summary.unavailable["energy_j"].startswith("the energy counter did not advance over 1.510 s")


def test_other_processes_memory_counts_every_process_but_this_one(nvml):
    nvml.gpus[0].processes = [Process(os.getpid(), 30 * GIB), Process(1, 3 * GIB), Process(2, GIB),
                              Process(3, None)]
    summary = snapshot("cuda:0")
    assert summary.other_process_memory_bytes == 4 * GIB
    assert summary.backend == "nvml"


@pytest.mark.parametrize("utilisation, memory, busy", [
    pytest.param(0, GIB, False, id="idle"),
    pytest.param(10, 4 * GIB, False, id="at-both-limits"),
    pytest.param(11, GIB, True, id="utilised"),
    pytest.param(0, 4 * GIB + 1, True, id="holds-memory"),
])
def test_a_busy_sibling_is_named_and_an_idle_one_is_not(nvml, utilisation, memory, busy):
    nvml.gpus[1].utilisation_pct, nvml.gpus[1].memory_used = utilisation, memory
    nvml.gpus[0].utilisation_pct, nvml.gpus[0].memory_used = 100, 70 * GIB  # the sampled GPU itself never counts
    summary = snapshot("cuda:0")
    assert summary.busy_siblings == ((f"GPU 1: {utilisation}% utilised, {memory / GIB:.1f} GiB used",) if busy else ())


def test_cuda_visible_devices_maps_to_the_physical_gpu(nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    nvml.gpus[1].clock_mhz = 1234.0
    nvml.gpus[0].utilisation_pct = 50
    summary = snapshot("cuda:0")
    assert summary.clock_mhz_mean == 1234.0
    assert summary.busy_siblings == ("GPU 0: 50% utilised, 1.0 GiB used",)


def test_an_unsupported_nvml_call_gives_none_with_its_reason(nvml):
    nvml.unsupported = {"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetTemperature"}
    clock = FakeTime()
    backend = NvmlBackend(nvml, 0, now=clock)
    summary = summarise("cuda:0", backend, window(backend, clock, [(1.0, lambda: None)]))
    assert summary.temperature_c_max is None
    assert "nvmlDeviceGetTemperature" in summary.unavailable["temperature_c_max"]
    assert summary.energy_source == "power×time"  # no counter (pre-Volta): power × time, marked
    assert_every_missing_reading_has_a_reason(summary)


def test_the_sampler_thread_sees_a_throttle_that_starts_inside_the_window(nvml):
    with Sampler("cuda:0", interval_s=0.002) as sampler:
        deadline = time.monotonic() + 10
        while nvml.reads < 4 and time.monotonic() < deadline:
            time.sleep(0.001)
        nvml.gpus[0].throttle_mask, nvml.gpus[0].clock_mhz = HW_SLOWDOWN, 900.0
        seen = nvml.reads
        while nvml.reads < seen + 3 and time.monotonic() < deadline:
            time.sleep(0.001)
    summary = sampler.summary
    assert summary.throttle_reasons == ("hw_slowdown",)
    assert (summary.clock_mhz_min, summary.clock_mhz_max) == (900.0, 1980.0)
    assert summary.samples == nvml.reads >= 7
    assert nvml.shut_down == nvml.initialised == 1


def test_without_nvml_or_amd_smi_every_gpu_reading_is_none_with_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    with Sampler("cuda:0", interval_s=0.005) as sampler:
        time.sleep(0.02)
    summary = sampler.summary
    assert summary.backend is None and summary.clock_mhz_mean is None and summary.power_w_max is None
    assert "pip install 'pytest-accounting[gpu]'" in summary.unavailable["clock_mhz_mean"]
    assert "no AMD SMI" in summary.unavailable["energy_j"]
    assert summary.load_average_1m is not None and summary.logical_cpus >= 1  # the host is still read
    assert_every_missing_reading_has_a_reason(summary)


def test_an_nvml_that_does_not_start_is_a_reason_not_a_crash(nvml):
    nvml.unsupported = {"nvmlInit"}
    backend = open_gpu_backend(0)
    assert backend.name is None
    assert "NVML did not start: NVMLError: Not Supported (nvmlInit)" in backend.unavailable["clock_mhz_mean"]


# ---- the API's edges ----------------------------------------------------------------------------------


def test_summary_is_frozen_and_to_dict_is_plain_json(nvml):
    nvml.gpus[0].throttle_mask = SW_POWER_CAP
    summary = snapshot("cuda:0")
    with pytest.raises(dataclasses.FrozenInstanceError):
        summary.clock_mhz_max = 1.0
    data = json.loads(json.dumps(summary.to_dict()))
    assert data["throttle_reasons"] == ["sw_power_cap"] and data["device"] == "cuda:0"
    assert set(data) == {f.name for f in dataclasses.fields(Summary)}


def test_summary_before_the_window_ends_is_an_error():
    sampler = Sampler("cpu", measure_clock=False)
    with pytest.raises(AccountingError, match=r"^Sampler\('cpu'\) has not run: read \.summary after the with block$"):
        sampler.summary
    with sampler:
        with pytest.raises(AccountingError, match=r"is still running"):
            sampler.summary


@pytest.mark.parametrize("interval", [0, -0.1, float("nan")])
def test_a_bad_interval_is_named(interval):
    with pytest.raises(AccountingError, match=r"^interval_s must be .*, got "):
        Sampler("cpu", interval_s=interval)


# ---- the CPU backend: for real here, and on fake sysfs trees ------------------------------------------


def test_the_cpu_backend_on_this_machine():
    with Sampler("cpu", interval_s=0.01) as sampler:
        time.sleep(0.1)
    summary = sampler.summary
    assert summary.backend == "cpu" and summary.device == "cpu"
    assert summary.logical_cpus == len(os.sched_getaffinity(0))
    assert summary.samples >= 3 and summary.duration_s >= 0.1
    assert summary.load_average_1m == pytest.approx(os.getloadavg()[0], abs=5)
    assert summary.clock_source is None or summary.clock_mhz_min > 100
    assert summary.other_process_memory_bytes is None
    assert_every_missing_reading_has_a_reason(summary)


def test_a_cpu_sample_costs_under_one_percent_of_its_interval():
    assert telemetry.sampler.sample_cost_s("cpu", reads=50) / CPU_INTERVAL_S < 0.01


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def fake_sysfs(tmp_path, monkeypatch):
    cpus = sorted(os.sched_getaffinity(0))
    monkeypatch.setattr(telemetry.cpu, "SYS_CPU", tmp_path / "cpu")
    monkeypatch.setattr(telemetry.cpu, "POWERCAP", tmp_path / "powercap")
    monkeypatch.setattr(telemetry.cpu, "HWMON", tmp_path / "hwmon")
    monkeypatch.setattr(telemetry.cpu, "PROC_CPUINFO", tmp_path / "cpuinfo")
    write(tmp_path / "cpuinfo", "".join(f"processor : {cpu}\ncpu MHz : 2450.000\nflags : fpu hypervisor\n\n"
                                        for cpu in cpus))
    return tmp_path, cpus


def test_rapl_energy_undoes_wrap_around_and_gives_power(fake_sysfs):
    root, _ = fake_sysfs
    package = root / "powercap" / "intel-rapl:0"
    write(package / "max_energy_range_uj", "999999999")
    write(package / "energy_uj", "999000000")
    write(root / "powercap" / "intel-rapl:0:0" / "energy_uj", "5")  # a sub-domain: not added to the package
    clock = FakeTime()
    backend = telemetry.cpu.CpuBackend(measure_clock=False, now=clock)
    first = backend.read(edge=True)
    clock.t += 0.5
    write(package / "energy_uj", "49000000")  # wrapped: 1000 J range, +50 J
    middle = backend.read(edge=False)
    clock.t += 0.5
    write(package / "energy_uj", "99000000")
    summary = summarise("cpu", backend, [first, middle, backend.read(edge=True)])
    assert (summary.energy_j, summary.energy_source) == (pytest.approx(100.0), "rapl")
    assert (summary.power_w_mean, summary.power_w_max) == (pytest.approx(100.0), pytest.approx(100.0))


def test_unreadable_rapl_gives_the_reason(fake_sysfs):
    root, _ = fake_sysfs
    (root / "powercap" / "intel-rapl:0").mkdir(parents=True)  # no energy_uj readable
    summary = snapshot("cpu", measure_clock=False)
    assert summary.power_w_mean is None
    assert "not readable by this user" in summary.unavailable["power_w_mean"]


def test_cpufreq_clock_and_hwmon_temperature_are_read(fake_sysfs):
    root, cpus = fake_sysfs
    for position, cpu in enumerate(cpus):
        write(root / "cpu" / f"cpu{cpu}" / "cpufreq" / "scaling_cur_freq", str(3_000_000 + 200_000 * position))
    write(root / "hwmon" / "hwmon3" / "name", "k10temp\n")
    write(root / "hwmon" / "hwmon3" / "temp1_input", "61250")
    write(root / "hwmon" / "hwmon3" / "temp3_input", "70500")
    write(root / "hwmon" / "hwmon0" / "name", "nvme\n")
    write(root / "hwmon" / "hwmon0" / "temp1_input", "99000")
    summary = snapshot("cpu")
    assert summary.clock_source == "cpufreq scaling_cur_freq"
    assert summary.clock_mhz_mean == pytest.approx(3000 + 200 * (len(cpus) - 1) / 2)
    assert summary.temperature_c_max == 70.5


def test_a_vm_clock_is_measured_outside_the_window(fake_sysfs, monkeypatch):
    clock = FakeTime()
    measured = iter([3.4, 3.1])

    def measure():
        clock.t += 0.1  # a measurement takes time; the window must not include it
        return next(measured)

    monkeypatch.setattr(cpu_clock, "vector_clock_supported", lambda: True)
    monkeypatch.setattr(cpu_clock, "measure_vector_clock",
                        lambda repeats: cpu_clock.VectorClock(measure(), (3.0,), "AVX2+FMA", 4))
    backend = telemetry.cpu.CpuBackend(now=clock)
    first = backend.read(edge=True)
    clock.t += 1.0
    middle = backend.read(edge=False)
    summary = summarise("cpu", backend, [first, middle, backend.read(edge=True)])
    assert summary.clock_source == telemetry.cpu.WINDOW_VECTOR_CLOCK_SOURCE
    assert (summary.clock_mhz_min, summary.clock_mhz_max) == (3100.0, 3400.0)
    assert summary.duration_s == pytest.approx(1.0)


def test_a_vm_clock_falls_back_to_the_scalar_chain_without_vector_fma(fake_sysfs, monkeypatch):
    monkeypatch.setattr(cpu_clock, "vector_clock_supported", lambda: False)
    monkeypatch.setattr(cpu_clock, "measure_cpu_ghz", lambda: 2.9)
    summary = snapshot("cpu")
    assert (summary.clock_source, summary.clock_mhz_mean) == (telemetry.cpu.WINDOW_SCALAR_CLOCK_SOURCE, 2900.0)


def test_a_vm_clock_not_measured_is_none_with_the_reason_not_the_nominal_one(fake_sysfs):
    summary = snapshot("cpu", measure_clock=False)
    assert summary.clock_mhz_mean is None  # the 2450 MHz in cpuinfo is only nominal in a VM
    assert "measure_clock=False" in summary.unavailable["clock_mhz_mean"]


def test_bare_metal_cpu_mhz_is_used(fake_sysfs):
    root, cpus = fake_sysfs
    write(root / "cpuinfo", "".join(f"processor : {cpu}\ncpu MHz : {2000 + cpu}.0\nflags : fpu\n\n" for cpu in cpus))
    summary = snapshot("cpu", measure_clock=False)
    assert summary.clock_source == "/proc/cpuinfo cpu MHz"
    assert summary.clock_mhz_mean == pytest.approx(2000 + sum(cpus) / len(cpus))


def test_thermal_throttle_counters_rising_name_the_reason(fake_sysfs):
    root, cpus = fake_sysfs
    counter = root / "cpu" / f"cpu{cpus[0]}" / "thermal_throttle" / "core_throttle_count"
    write(counter, "7")
    clock = FakeTime()
    backend = telemetry.cpu.CpuBackend(measure_clock=False, now=clock)
    quiet = [backend.read(edge=True), backend.read(edge=False)]
    assert summarise("cpu", backend, quiet).throttle_reasons == ()
    write(counter, "9")
    assert summarise("cpu", backend, [*quiet, backend.read(edge=True)]).throttle_reasons == ("thermal_throttle",)


def test_summarise_folds_readings_independently_of_the_backend():
    readings = [Reading(0.0, clock_mhz=c, power_w=p, temperature_c=t)
                for c, p, t in [(1000.0, 100.0, 50.0), (1500.0, 300.0, 70.0), (2000.0, 200.0, 60.0)]]
    summary = summarise("cuda:0", NoBackend("none here"), readings)
    assert (summary.clock_mhz_min, summary.clock_mhz_mean, summary.clock_mhz_max) == (1000.0, 1500.0, 2000.0)
    assert (summary.power_w_mean, summary.power_w_max, summary.temperature_c_max) == (200.0, 300.0, 70.0)
    assert summary.energy_j is None and "snapshot" in summary.unavailable["energy_j"]


# ---- a scripted backend ------------------------------------------------------------------------------------


class ScriptedBackend:
    """A backend that returns the readings it is given, in order (the last one repeated), and counts closes."""

    name = "scripted"
    default_interval_s = 0.001
    clock_source = "scripted clock"

    def __init__(self, readings=(), *, energy_source="counter", period=0.1, unavailable=None, fail_after=None):
        self.readings = list(readings) or [Reading(0.0)]
        self.energy_source = energy_source
        self.energy_update_period_s = period
        self.unavailable = dict(unavailable or {})
        self.fail_after = fail_after
        self.reads = []
        self.closed = 0

    def read(self, *, edge: bool) -> Reading:
        if self.fail_after is not None and len(self.reads) >= self.fail_after and not edge:
            raise RuntimeError("device lost")
        self.reads.append(edge)
        return self.readings[min(len(self.reads) - 1, len(self.readings) - 1)]

    def close(self) -> None:
        self.closed += 1


# ---- energy over a window ----------------------------------------------------------------------


def test_a_snapshot_has_no_energy_and_says_why():
    summary = summarise("cuda:0", ScriptedBackend(), [Reading(5.0, power_w=300.0, energy_j=10.0)])
    assert (summary.duration_s, summary.samples, summary.energy_j) == (0.0, 1, None)
    assert summary.unavailable["energy_j"] == "a snapshot has no window to integrate over"


def test_a_window_shorter_than_the_counters_period_is_named_in_milliseconds():
    backend = ScriptedBackend(period=0.1)
    readings = [Reading(0.0, power_w=300.0, energy_j=0.0), Reading(0.03, power_w=300.0, energy_j=9.0)]
    summary = summarise("cuda:0", backend, readings)
    assert summary.energy_j is None and summary.energy_source is None
    assert summary.unavailable["energy_j"] == ("window of 30.0 ms is shorter than the energy counter's update "
                                               "period (100 ms): flagged, not reported as 0 J")


def test_a_window_as_long_as_the_period_is_integrated():
    """A RAPL-like counter (not a GPU's "counter") needs only its period: 0.1 s of 30 J is 30 J."""
    backend = ScriptedBackend(energy_source="rapl", period=0.1)
    readings = [Reading(0.0, energy_j=100.0), Reading(0.1, energy_j=130.0)]
    summary = summarise("cpu", backend, readings)
    assert (summary.energy_j, summary.energy_source) == (pytest.approx(30.0), "rapl")
    assert "energy_j" not in summary.unavailable


def test_a_gpu_counter_needs_a_full_second_and_shorter_windows_use_power_times_time():
    readings = [Reading(0.0, power_w=200.0, energy_j=0.0), Reading(0.5, power_w=400.0, energy_j=500.0),
                Reading(0.999, power_w=300.0, energy_j=900.0)]
    short = summarise("cuda:0", ScriptedBackend(period=0.1), readings)
    assert (short.energy_j, short.energy_source) == (pytest.approx(300.0 * 0.999), "power×time")
    full = summarise("cuda:0", ScriptedBackend(period=0.1), [*readings[:2], Reading(1.0, power_w=300.0,
                                                                                    energy_j=950.0)])
    assert (full.energy_j, full.energy_source) == (pytest.approx(950.0), "counter")


def test_the_counter_is_read_at_the_window_edges_and_gaps_are_skipped():
    readings = [Reading(0.0, energy_j=1000.0), Reading(0.7, energy_j=None), Reading(1.2, energy_j=1500.0),
                Reading(2.0, energy_j=1800.0)]
    summary = summarise("cuda:0", ScriptedBackend(period=0.1), readings)
    assert summary.energy_j == pytest.approx(800.0)


def test_one_counter_reading_is_not_a_window_of_energy():
    readings = [Reading(0.0, power_w=100.0, energy_j=50.0), Reading(2.0, power_w=300.0)]
    summary = summarise("cuda:0", ScriptedBackend(period=0.1), readings)
    assert (summary.energy_j, summary.energy_source) == (pytest.approx(200.0 * 2.0), "power×time")


def test_a_counter_that_goes_backwards_is_flagged_not_negative():
    readings = [Reading(0.0, energy_j=500.0), Reading(1.5, energy_j=400.0)]
    summary = summarise("cuda:0", ScriptedBackend(period=0.1), readings)
    assert summary.energy_j is None
    assert summary.unavailable["energy_j"] == "the energy counter did not advance over 1.500 s: flagged, not reported as 0 J"


def test_without_counter_or_power_the_backends_reason_is_kept_or_a_plain_one_given():
    readings = [Reading(0.0), Reading(2.0)]
    said = summarise("cuda:0", ScriptedBackend(period=0.0, unavailable={"energy_j": "no RAPL here"}), readings)
    assert said.unavailable["energy_j"] == "no RAPL here"
    plain = summarise("cuda:0", ScriptedBackend(period=0.0), readings)
    assert plain.unavailable["energy_j"] == "no energy counter and no power readings"


# ---- folding readings --------------------------------------------------------------------------


def test_readings_fold_into_ranges_and_first_seen_lists_without_repeats():
    readings = [
        Reading(1.0, clock_mhz=1900.0, throttle_reasons=("sw_power_cap",), other_process_memory_bytes=2**30,
                busy_siblings=("GPU 1",)),
        Reading(1.5, throttle_reasons=("hw_slowdown", "sw_power_cap"), other_process_memory_bytes=3 * 2**30,
                busy_siblings=("GPU 2", "GPU 1")),
        Reading(3.0, clock_mhz=1500.0, throttle_reasons=("sw_power_cap",), other_process_memory_bytes=2**30),
    ]
    summary = summarise("cuda:0", ScriptedBackend(), readings)
    assert (summary.duration_s, summary.samples) == (2.0, 3)
    assert summary.throttle_reasons == ("sw_power_cap", "hw_slowdown") and summary.throttled
    assert summary.busy_siblings == ("GPU 1", "GPU 2")
    assert summary.other_process_memory_bytes == 3 * 2**30
    assert (summary.clock_mhz_min, summary.clock_mhz_max, summary.clock_source) == (1500.0, 1900.0, "scripted clock")
    assert (summary.backend, summary.device) == ("scripted", "cuda:0")


def test_a_reading_present_clears_the_backends_reason_and_an_absent_one_gets_a_reason():
    backend = ScriptedBackend(unavailable={"clock_mhz_mean": "not at first", "throttle_reasons": "no mask",
                                           "power_w_mean": "no sensor"})
    summary = summarise("cuda:0", backend, [Reading(0.0, clock_mhz=1000.0, throttle_reasons=("hw_slowdown",))],
                        extra_unavailable={"samples": "sampling stopped"})
    assert "clock_mhz_mean" not in summary.unavailable and "throttle_reasons" not in summary.unavailable
    assert summary.unavailable["power_w_mean"] == "no sensor", "the backend's own reason is kept"
    assert summary.unavailable["temperature_c_max"] == "no reading during the window"
    assert summary.unavailable["samples"] == "sampling stopped"
    assert backend.unavailable["clock_mhz_mean"] == "not at first", "the backend's reasons are not changed"


def test_no_clock_reading_means_no_clock_source():
    summary = summarise("cuda:0", ScriptedBackend(), [Reading(0.0, power_w=5.0)])
    assert summary.clock_source is None and summary.clock_mhz_mean is None


def test_a_backend_that_reads_nothing_names_every_device_reading_but_the_hosts():
    backend = NoBackend("no NVML")
    assert backend.unavailable == {name: "no NVML" for name in (
        "clock_mhz_min", "clock_mhz_mean", "clock_mhz_max", "clock_mhz_median", "power_w_mean", "power_w_max",
        "power_w_median", "power_limit_w", "energy_j", "temperature_c_max", "other_process_memory_bytes",
        "throttle_reasons")}
    reading = backend.read(edge=True)
    assert reading == Reading(reading.time_s), "a reading with nothing read"
    assert (backend.name, backend.energy_source, backend.default_interval_s) == (None, None, GPU_INTERVAL_S)


def test_the_host_figures_come_from_the_operating_system(monkeypatch):
    summary = summarise("cpu", ScriptedBackend(), [Reading(0.0)])
    assert summary.logical_cpus == len(os.sched_getaffinity(0))
    assert summary.load_average_1m == pytest.approx(os.getloadavg()[0], abs=5)
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    monkeypatch.setattr(os, "getloadavg", lambda: (_ for _ in ()).throw(OSError("no loadavg")))
    bare = summarise("cpu", ScriptedBackend(), [Reading(0.0)])
    assert (bare.logical_cpus, bare.load_average_1m) == (1, None)
    assert bare.unavailable["load_average_1m"] == "no reading during the window"
    monkeypatch.setattr(os, "cpu_count", lambda: 48)
    assert summarise("cpu", ScriptedBackend(), [Reading(0.0)]).logical_cpus == 48


# ---- the sampler --------------------------------------------------------------------------------


@pytest.fixture
def scripted(monkeypatch):
    """Every sampler and snapshot reads a fresh ScriptedBackend; the list holds them with their options."""
    opened = []

    def open_backend(device_name, *, measure_clock, fleet_devices=()):
        backend = ScriptedBackend([Reading(0.0, clock_mhz=1000.0), Reading(1.0, clock_mhz=2000.0)])
        opened.append((device_name, measure_clock, backend))
        return backend

    monkeypatch.setattr(telemetry.sampler, "_open_backend", open_backend)
    return opened


def test_a_sampler_reads_its_edges_on_the_calling_thread_and_closes_its_backend(scripted):
    sampler = Sampler("cpu", measure_clock=False)
    assert sampler.interval_s == GPU_INTERVAL_S, "before it starts there is no backend to ask"
    with sampler:
        assert sampler.interval_s == ScriptedBackend.default_interval_s
    ((device, measure_clock, backend),) = scripted
    assert (device, measure_clock) == ("cpu", False)
    assert backend.reads[0] is True and backend.reads[-1] is True and backend.closed == 1
    assert sampler.summary.samples == len(backend.reads)
    assert sampler.summary.clock_mhz_max == 2000.0


def test_an_explicit_interval_wins_and_measure_clock_defaults_on(scripted):
    sampler = Sampler(torch.device("cpu"), interval_s=0.5)
    assert sampler.interval_s == 0.5
    with sampler:
        pass
    assert scripted[0][1] is True


def test_a_sampler_cannot_start_twice_or_stop_before_it_starts(scripted):
    sampler = Sampler("cpu")
    with pytest.raises(AccountingError, match=r"^Sampler\('cpu'\) was not started$"):
        sampler.stop()
    sampler.start()
    with pytest.raises(AccountingError, match=r"^Sampler\('cpu'\) is already running$"):
        sampler.start()
    summary = sampler.stop()
    assert sampler.summary is summary
    sampler.start()  # a stopped sampler can run another window
    assert sampler.stop().samples >= 2


def test_a_failing_backend_ends_sampling_not_the_window(monkeypatch):
    backend = ScriptedBackend([Reading(0.0), Reading(0.5)], fail_after=1)
    monkeypatch.setattr(telemetry.sampler, "_open_backend", lambda name, *, measure_clock, fleet_devices=(): backend)
    with Sampler("cpu", interval_s=0.001) as sampler:
        deadline = telemetry.sampler.time.monotonic() + 5
        while not sampler._sampling_error and telemetry.sampler.time.monotonic() < deadline:
            telemetry.sampler.time.sleep(0.001)
    assert sampler.summary.unavailable["samples"] == "sampling stopped: RuntimeError: device lost"
    assert backend.closed == 1


def test_the_with_block_does_not_swallow_an_error(scripted):
    with pytest.raises(KeyError):
        with Sampler("cpu"):
            raise KeyError("inside")
    assert scripted[0][2].closed == 1


def test_a_failing_edge_reading_still_closes_the_backend(monkeypatch):
    class FailsAfter(ScriptedBackend):
        def __init__(self, good_reads):
            super().__init__()
            self.good_reads = good_reads

        def read(self, *, edge):
            if len(self.reads) >= self.good_reads:
                raise RuntimeError("gone")
            return super().read(edge=edge)

    backends = [FailsAfter(0), FailsAfter(1)]
    monkeypatch.setattr(telemetry.sampler, "_open_backend", lambda name, *, measure_clock, fleet_devices=(): backends.pop(0))
    first, second = backends
    with pytest.raises(RuntimeError, match="gone"):
        snapshot("cpu")
    assert first.closed == 1
    sampler = Sampler("cpu", interval_s=60.0).start()
    with pytest.raises(RuntimeError, match="gone"):
        sampler.stop()
    assert second.closed == 1


def test_snapshot_is_one_edge_reading(scripted):
    summary = snapshot(measure_clock=False)
    ((device, measure_clock, backend),) = scripted
    assert (device, measure_clock, backend.reads, backend.closed) == ("cpu", False, [True], 1)
    assert (summary.device, summary.samples, summary.duration_s, summary.clock_mhz_mean) == ("cpu", 1, 0.0, 1000.0)
    snapshot("cpu")
    assert scripted[1][1] is True, "the clock is measured unless asked not to"


def test_sample_cost_is_the_mean_time_of_a_background_read(monkeypatch):
    clock = types.SimpleNamespace(t=0.0)

    class Timed(ScriptedBackend):
        def read(self, *, edge):
            clock.t += 0.5 if edge else 0.002
            return super().read(edge=edge)

    backend = Timed()
    opened = []

    def open_backend(name, *, measure_clock, fleet_devices=()):
        opened.append((name, measure_clock))
        return backend

    monkeypatch.setattr(telemetry.sampler, "_open_backend", open_backend)
    monkeypatch.setattr(telemetry.sampler, "time", types.SimpleNamespace(perf_counter=lambda: clock.t))
    assert telemetry.sampler.sample_cost_s(reads=7) == pytest.approx(0.002)
    assert backend.reads == [True] + [False] * 7 and backend.closed == 1
    # The CPU by default; its edge clock measurement (about 0.1 s a read) is no part of a background read.
    assert opened == [("cpu", False)]


@pytest.mark.parametrize("device, name", [("cpu", "cpu"), ("cuda:3", "cuda:3"), (torch.device("cuda", 1), "cuda:1")])
def test_devices_are_named_as_summaries_carry_them(device, name):
    assert telemetry.sampler._device_name(device) == name


def test_cuda_without_an_index_is_the_current_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    assert telemetry.sampler._device_name("cuda") == "cuda:2"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert telemetry.sampler._device_name("cuda") == "cuda:0"


@pytest.mark.parametrize("device", ["meta", "mps"])
def test_a_device_without_telemetry_is_named(device):
    with pytest.raises(AccountingError, match=rf"^device '{device}' has no telemetry: only cpu and cuda have$"):
        telemetry.sampler._device_name(device)


def test_the_cpu_backend_samples_at_the_cpu_interval():
    """The CPU sampler shares the timed cores (module docstring): it samples at the CPU interval."""
    backend = telemetry.sampler._open_backend("cpu", measure_clock=False)
    try:
        assert backend.default_interval_s == CPU_INTERVAL_S and backend.name == "cpu"
    finally:
        backend.close()


# ---- messages to the tenth of a millisecond, the fold's figures, the host's, the sampler's thread ----------


def test_a_short_window_is_named_to_a_tenth_of_a_millisecond_and_its_period_to_one():
    """0.9 s against a 1 s counter: the figures in the reason are the window's and the period's own."""
    readings = [Reading(0.0, energy_j=0.0), Reading(0.9, energy_j=90.0)]
    summary = summarise("cuda:0", ScriptedBackend(period=1.0), readings)
    assert summary.unavailable["energy_j"] == ("window of 900.0 ms is shorter than the energy counter's update "
                                               "period (1000 ms): flagged, not reported as 0 J")


def test_a_counter_that_advances_by_less_than_a_joule_is_reported():
    """An idle device at 0.25 W for 2 s: the counter moves 0.5 J, which is energy, not a stuck counter."""
    readings = [Reading(0.0, energy_j=7000.0), Reading(2.0, energy_j=7000.5)]
    summary = summarise("cuda:0", ScriptedBackend(period=0.1), readings)
    assert (summary.energy_j, summary.energy_source) == (pytest.approx(0.5), "counter")


def test_no_readings_is_an_empty_window():
    summary = summarise("cpu", ScriptedBackend(), [])
    assert (summary.duration_s, summary.samples, summary.energy_j) == (0.0, 0, None)
    assert summary.unavailable["energy_j"] == "a snapshot has no window to integrate over"


def test_the_fold_keeps_the_hottest_reading_and_the_mean_and_peak_power():
    readings = [Reading(0.0, power_w=120.0, temperature_c=61.0), Reading(1.0, power_w=360.0, temperature_c=74.5),
                Reading(2.0, power_w=240.0, temperature_c=66.0)]
    summary = summarise("cuda:0", ScriptedBackend(), readings)
    assert (summary.power_w_mean, summary.power_w_max) == (pytest.approx(240.0), 360.0)
    assert summary.temperature_c_max == 74.5


def test_the_load_average_is_the_one_minute_figure(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 1.5, 2.5))
    assert summarise("cpu", ScriptedBackend(), [Reading(0.0)]).load_average_1m == 0.5


def test_logical_cpus_are_this_process_s_affinity_not_the_machine_s_count(monkeypatch):
    """A process pinned to 3 CPUs of a 64-CPU machine (taskset) has 3; os.sched_getaffinity(0) is this process."""
    asked = []

    def affinity(pid):
        asked.append(pid)
        return {0, 3, 5}

    monkeypatch.setattr(os, "sched_getaffinity", affinity)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert summarise("cpu", ScriptedBackend(), [Reading(0.0)]).logical_cpus == 3
    assert asked == [0]


def test_the_no_backend_reading_is_taken_now():
    before = telemetry.sampler.time.perf_counter()
    reading = NoBackend("no NVML").read(edge=False)
    assert before <= reading.time_s <= telemetry.sampler.time.perf_counter()


def test_the_sampler_thread_is_a_named_daemon_and_reads_background_samples_as_such(scripted):
    """A daemon thread never keeps the interpreter alive; its name tells a stack dump what it samples.
    Background readings are not edges (a CPU backend measures its clock only at edges)."""
    with Sampler("cpu", interval_s=0.001) as sampler:
        thread = sampler._thread
        assert (thread.name, thread.daemon) == ("telemetry-cpu", True)
        backend = scripted[0][2]
        deadline = telemetry.sampler.time.monotonic() + 5
        while len(backend.reads) < 3 and telemetry.sampler.time.monotonic() < deadline:
            telemetry.sampler.time.sleep(0.001)
    assert len(backend.reads) >= 4
    assert all(edge is False for edge in backend.reads[1:-1])
    assert "samples" not in sampler.summary.unavailable, "a window sampled without error has no 'samples' reason"


def test_a_sampler_samples_the_cpu_by_default(scripted):
    with Sampler(measure_clock=False) as sampler:
        pass
    assert sampler.device == "cpu" and scripted[0][0] == "cpu"
