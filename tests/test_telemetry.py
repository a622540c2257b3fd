"""accounting.telemetry: NVML through a fake pynvml, the CPU backend for real and on fake sysfs trees."""

import dataclasses
import json
import os
import sys
import time

import pytest

from accounting.hardware import cpu_clock as _cpu_clock
from accounting.telemetry import cpu as _telemetry_cpu
from accounting.telemetry import sampler as telemetry
from accounting.telemetry.gpu import NvmlBackend, decode_clock_event_reasons, open_gpu_backend
from accounting.errors import AccountingError
from accounting.telemetry.readings import UNAVAILABLE, NoBackend, Reading, Summary
from accounting.telemetry.sampler import Sampler, snapshot, summarise
from tests.fake_nvml import (
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
    "device", "backend", "duration_s", "samples", "logical_cpus", "clock_source", "energy_source",
    "throttle_reasons", "busy_siblings", "unavailable")]


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
    assert telemetry.sample_cost_s("cpu", reads=50) / telemetry.CPU_INTERVAL_S < 0.01


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def fake_sysfs(tmp_path, monkeypatch):
    cpus = sorted(os.sched_getaffinity(0))
    monkeypatch.setattr(_telemetry_cpu, "SYS_CPU", tmp_path / "cpu")
    monkeypatch.setattr(_telemetry_cpu, "POWERCAP", tmp_path / "powercap")
    monkeypatch.setattr(_telemetry_cpu, "HWMON", tmp_path / "hwmon")
    monkeypatch.setattr(_telemetry_cpu, "PROC_CPUINFO", tmp_path / "cpuinfo")
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
    backend = _telemetry_cpu.CpuBackend(measure_clock=False, now=clock)
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

    monkeypatch.setattr(_cpu_clock, "vector_clock_supported", lambda: True)
    monkeypatch.setattr(_cpu_clock, "measure_vector_clock",
                        lambda repeats: _cpu_clock.VectorClock(measure(), (3.0,), "AVX2+FMA", 4))
    backend = _telemetry_cpu.CpuBackend(now=clock)
    first = backend.read(edge=True)
    clock.t += 1.0
    middle = backend.read(edge=False)
    summary = summarise("cpu", backend, [first, middle, backend.read(edge=True)])
    assert summary.clock_source == _telemetry_cpu.WINDOW_VECTOR_CLOCK_SOURCE
    assert (summary.clock_mhz_min, summary.clock_mhz_max) == (3100.0, 3400.0)
    assert summary.duration_s == pytest.approx(1.0)


def test_a_vm_clock_falls_back_to_the_scalar_chain_without_vector_fma(fake_sysfs, monkeypatch):
    monkeypatch.setattr(_cpu_clock, "vector_clock_supported", lambda: False)
    monkeypatch.setattr(_cpu_clock, "measure_cpu_ghz", lambda: 2.9)
    summary = snapshot("cpu")
    assert (summary.clock_source, summary.clock_mhz_mean) == (_telemetry_cpu.WINDOW_SCALAR_CLOCK_SOURCE, 2900.0)


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
    backend = _telemetry_cpu.CpuBackend(measure_clock=False, now=clock)
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
