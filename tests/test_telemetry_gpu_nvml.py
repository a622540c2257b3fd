"""NVML on the GPUs and drivers the package targets, through a fake ``pynvml`` and a fake torch device table.

Instant power where the driver has the field (Hopper's ``nvmlDeviceGetPowerUsage`` is a 1 s average),
throttle reasons on R525/R530 drivers, calls that time out, this process's own memory in a container,
the fleet's own GPUs, and MIG slices. The truths: NVML's reference (what each call returns on which
GPU), nvidia-ml-py's structures (copied in :mod:`tests.support.fake_nvml`), and figures set on the fake.
"""

import os
import sys
import time
import types

import pytest
import torch

from accounting.errors import AccountingTypeError
from accounting.telemetry.gpu import NvmlBackend, nvml_field_value, open_gpu_backend
from accounting.telemetry.sampler import Sampler, snapshot, summarise
from accounting.telemetry.validity import BUSY, POWER_SUSPECT, tag_names, validity_tags
from tests.support.fake_nvml import (
    HW_SLOWDOWN,
    NVML_FI_DEV_POWER_INSTANT,
    FakeGpu,
    FakeNvml,
    FakeTime,
    Process,
    c_nvmlFieldValue_t,
)

GIB = 2**30
MIB = 2**20


@pytest.fixture
def install(monkeypatch):
    """Install a fake NVML (and no AMD SMI); returns it."""

    def put(nvml):
        monkeypatch.setitem(sys.modules, "pynvml", nvml)
        monkeypatch.setitem(sys.modules, "amdsmi", None)
        return nvml

    return put


@pytest.fixture
def torch_devices(monkeypatch):
    """Make torch see CUDA devices with the given uuids (as torch prints them: no ``GPU-``/``MIG-`` prefix),
    initialised and holding ``reserved`` bytes each."""

    def see(uuids, *, reserved=0, initialised=True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(uuids))
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: types.SimpleNamespace(uuid=uuids[index]))
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialised)
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda index=None: reserved)

    return see


def bare(uuid: str) -> str:
    return uuid.split("-", 1)[1]


# ---- power: the instant field, else the 1 s average, and which it was -------------------------------------


def test_power_is_the_instant_field_not_the_one_second_average(install):
    """A burst after an idle second: the average still reads mostly idle power, the instant field the burst's."""
    nvml = install(FakeNvml([FakeGpu(power_mw=700_000.0, average_power_mw=150_000.0)]))
    summary = snapshot("cuda:0")
    assert (summary.power_w_mean, summary.power_source) == (700.0, "instant")
    assert nvml.calls.get("nvmlDeviceGetPowerUsage", 0) == 0


def test_a_driver_without_the_field_falls_back_to_the_average_says_so_and_asks_once(install):
    nvml = install(FakeNvml([FakeGpu(power_mw=700_000.0, average_power_mw=150_000.0)],
                            unsupported={"NVML_FI_DEV_POWER_INSTANT"}))
    clock = FakeTime()
    backend = NvmlBackend(nvml, 0, now=clock)
    readings = []
    for _ in range(4):
        readings.append(backend.read(edge=False))
        clock.t += 0.5
    summary = summarise("cuda:0", backend, readings)
    assert (summary.power_w_mean, summary.power_source) == (150.0, "1 s average")
    assert nvml.calls["nvmlDeviceGetFieldValues"] == 1, "a field the driver lacks is not asked for again"
    assert any("NVML_FI_DEV_POWER_INSTANT" in note for note in summary.notes)


@pytest.mark.parametrize("capability, source", [pytest.param((8, 0), "instant", id="ga100"),
                                                pytest.param((7, 0), "instant", id="volta"),
                                                pytest.param((8, 6), "1 s average", id="ga10x"),
                                                pytest.param((9, 0), "1 s average", id="hopper")])
def test_the_power_usage_call_is_labelled_by_architecture(install, capability, source):
    """NVML: "On Ampere (except GA100) or newer GPUs ... averaged over 1 sec ... On GA100 and older ... instantaneous"."""
    install(FakeNvml([FakeGpu(compute_capability=capability)], unsupported={"NVML_FI_DEV_POWER_INSTANT"}))
    assert snapshot("cuda:0").power_source == source


def test_a_short_window_of_averaged_power_gets_no_power_times_time_energy(install):
    nvml = install(FakeNvml(unsupported={"NVML_FI_DEV_POWER_INSTANT", "nvmlDeviceGetTotalEnergyConsumption"}))
    clock = FakeTime()
    backend = NvmlBackend(nvml, 0, now=clock)
    first = backend.read(edge=True)
    clock.t += 0.4
    summary = summarise("cuda:0", backend, [first, backend.read(edge=True)])
    assert summary.energy_j is None and summary.power_w_mean == 650.0
    assert "1 s average" in summary.unavailable["energy_j"]
    assert summary.power_limit_w == 700.0, "NVML's enforced limit, read at the edges"
    tags = validity_tags(summary, power_limit_w=800.0)
    assert tag_names(tags) == [POWER_SUSPECT] and "1 s average" in tags[0]


def test_the_enforced_power_limit_is_read_at_the_edges_only_and_its_lowest_value_kept(install):
    nvml = install(FakeNvml())
    clock = FakeTime()
    backend = NvmlBackend(nvml, 0, now=clock)
    readings = [backend.read(edge=True)]
    nvml.gpus[0].power_limit_mw = 500_000  # capped by an administrator during the window
    readings += [backend.read(edge=False), backend.read(edge=True)]
    assert [reading.power_limit_w for reading in readings] == [700.0, None, 500.0]
    assert nvml.calls["nvmlDeviceGetEnforcedPowerLimit"] == 2
    assert summarise("cuda:0", backend, readings).power_limit_w == 500.0
    unsupported = install(FakeNvml(unsupported={"nvmlDeviceGetEnforcedPowerLimit"}))
    backend = NvmlBackend(unsupported, 0, now=clock)
    summary = summarise("cuda:0", backend, [backend.read(edge=True), backend.read(edge=True)])
    assert summary.power_limit_w is None and "nvmlDeviceGetEnforcedPowerLimit" in summary.unavailable["power_limit_w"]


@pytest.mark.parametrize("kind, member, value", [(0, "dVal", 412.5), (1, "uiVal", 650_000), (2, "ulVal", 2**40),
                                                 (3, "ullVal", 2**60), (4, "sllVal", -7), (5, "siVal", -3),
                                                 (6, "usVal", 65_000)])
def test_a_field_value_is_read_from_the_member_its_type_names(kind, member, value):
    """nvml.h: valueType 0..6 = DOUBLE, UNSIGNED_INT, UNSIGNED_LONG, UNSIGNED_LONG_LONG, SIGNED_LONG_LONG,
    SIGNED_INT, UNSIGNED_SHORT; a value whose nvmlReturn is an error has no value."""
    entry = c_nvmlFieldValue_t(fieldId=NVML_FI_DEV_POWER_INSTANT, valueType=kind)
    setattr(entry.value, member, value)
    assert nvml_field_value(entry) == value
    entry.nvmlReturn = 3
    assert nvml_field_value(entry) is None


# ---- throttle reasons on R525/R530, and calls that time out ------------------------------------------------


def test_an_r525_driver_reads_throttle_reasons_through_the_older_call(install):
    """nvidia-ml-py has nvmlDeviceGetCurrentClocksEventReasons; an R525 driver library does not."""
    nvml = install(FakeNvml([FakeGpu(throttle_mask=HW_SLOWDOWN)], missing={"nvmlDeviceGetCurrentClocksEventReasons"}))
    clock = FakeTime()
    backend = NvmlBackend(nvml, 0, now=clock)
    summary = summarise("cuda:0", backend, [backend.read(edge=True), backend.read(edge=False)])
    assert summary.throttle_reasons == ("hw_slowdown",)
    assert "throttle_reasons" not in summary.unavailable
    assert nvml.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1


def test_a_driver_with_neither_throttle_call_names_both(install):
    nvml = install(FakeNvml(missing={"nvmlDeviceGetCurrentClocksEventReasons",
                                     "nvmlDeviceGetCurrentClocksThrottleReasons"}))
    backend = NvmlBackend(nvml, 0, now=FakeTime())
    summary = summarise("cuda:0", backend, [backend.read(edge=True), backend.read(edge=True)])
    reason = summary.unavailable["throttle_reasons"]
    assert "ClocksEventReasons" in reason and "ClocksThrottleReasons" in reason and "FunctionNotFound" in reason


def test_a_call_that_timed_out_is_asked_again(install):
    nvml = install(FakeNvml([FakeGpu(clock_mhz=1755.0)], transient={"nvmlDeviceGetClockInfo": 1}))
    clock = FakeTime()
    backend = NvmlBackend(nvml, 0, now=clock)
    first = backend.read(edge=True)
    assert first.clock_mhz is None and "Timeout" in backend.unavailable["clock_mhz_mean"]
    clock.t += 1.0
    summary = summarise("cuda:0", backend, [first, backend.read(edge=True)])
    assert summary.clock_mhz_mean == 1755.0 and "clock_mhz_mean" not in summary.unavailable


# ---- this process in a container, the fleet's own GPUs -------------------------------------------------------


def host_pid() -> int:
    """A PID that is not this process's: NVML's view from outside the container's PID namespace."""
    return os.getpid() + 100_000


def test_in_a_container_this_process_is_found_by_its_memory_and_is_not_busy(install, torch_devices):
    reserved = 30 * GIB
    torch_devices([bare(FakeNvml().gpus[0].uuid)], reserved=reserved)
    install(FakeNvml([FakeGpu(processes=[Process(host_pid(), reserved + 600 * MIB)])]))
    summary = snapshot("cuda:0")
    assert summary.other_process_memory_bytes == 0
    assert BUSY not in tag_names(validity_tags(summary))


def test_a_foreign_process_beside_this_one_still_makes_the_figure_busy(install, torch_devices):
    reserved, foreign = 30 * GIB, 10 * GIB
    torch_devices([bare(FakeNvml().gpus[0].uuid)], reserved=reserved)
    install(FakeNvml([FakeGpu(processes=[Process(host_pid(), reserved + 700 * MIB), Process(host_pid() + 1, foreign)])]))
    summary = snapshot("cuda:0")
    assert summary.other_process_memory_bytes == foreign
    assert tag_names(validity_tags(summary)) == [BUSY]


def test_without_a_cuda_context_here_no_process_is_taken_for_this_one(install, torch_devices):
    torch_devices([bare(FakeNvml().gpus[0].uuid)], reserved=0, initialised=False)
    install(FakeNvml([FakeGpu(processes=[Process(host_pid(), 600 * MIB)])]))
    assert snapshot("cuda:0").other_process_memory_bytes == 600 * MIB


def test_the_fleets_own_gpus_are_not_busy_siblings_and_others_are(install, torch_devices):
    """torch's cuda:0..3 are NVML's GPUs 2, 0, 3, 1 (matched by uuid); the fleet's other ranks use cuda:1, cuda:2."""
    nvml = FakeNvml([FakeGpu(utilisation_pct=100, memory_used=70 * GIB) for _ in range(4)])
    order = [2, 0, 3, 1]
    torch_devices([bare(nvml.gpus[physical].uuid) for physical in order])
    install(nvml)
    with Sampler("cuda:0", interval_s=0.005, fleet_devices=[1, 2]) as sampler:
        time.sleep(0.01)
    assert sampler.summary.busy_siblings == ("GPU 1: 100% utilised, 70.0 GiB used",)
    with Sampler("cuda:0", interval_s=0.005) as alone:
        time.sleep(0.01)
    assert [name.split(":")[0] for name in alone.summary.busy_siblings] == ["GPU 0", "GPU 1", "GPU 3"]


@pytest.mark.parametrize("bad", ["0,1", [0.5], [True], 3, [-1], None])
def test_fleet_devices_that_are_not_device_indices_are_named(bad):
    with pytest.raises(AccountingTypeError, match=r"^fleet_devices must be a collection of torch device indices"):
        Sampler("cuda:0", fleet_devices=bad)


# ---- MIG -----------------------------------------------------------------------------------------------------


def test_a_mig_slice_is_found_and_says_it_has_no_published_peak(install, torch_devices):
    mig = "MIG-5c0a3e9b-1d2f-5a6b-8c7d-0e1f2a3b4c5d"
    nvml = install(FakeNvml([FakeGpu(mig_uuids=(mig,), utilisation_pct=100),
                             FakeGpu(utilisation_pct=50)]))
    torch_devices([bare(mig)])
    backend = open_gpu_backend(0)
    assert isinstance(backend, NvmlBackend), backend.unavailable
    backend.close()
    summary = snapshot("cuda:0")
    assert summary.backend == "nvml" and summary.mig_slice == mig
    assert any("no published peak" in note for note in summary.notes)
    assert summary.busy_siblings == ("GPU 1: 50% utilised, 1.0 GiB used",), "the slice's own GPU is no sibling"
    assert nvml.calls["nvmlDeviceGetComputeRunningProcesses"] >= 1


def test_a_mig_slice_reads_power_and_the_enforced_limit_of_its_gpu_which_the_slice_handle_refuses(install,
                                                                                                  torch_devices):
    """NVML answers a MIG slice's handle with NOT_SUPPORTED for power, the power limit, clock and throttle reasons
    (the fake refuses every call but processes and memory on it); all slices share the GPU's, read on its handle.
    Without them no sustained figure could be judged power-saturated."""
    mig = "MIG-5c0a3e9b-1d2f-5a6b-8c7d-0e1f2a3b4c5d"
    gpu = FakeGpu(mig_uuids=(mig,), power_mw=612_000.0, power_limit_mw=650_000.0, clock_mhz=1455.0,
                  throttle_mask=0x4)
    nvml = install(FakeNvml([FakeGpu(power_mw=100_000.0, power_limit_mw=700_000.0), gpu]))
    torch_devices([bare(mig)])
    clock = FakeTime()
    backend = NvmlBackend(nvml, 0, now=clock)
    first = backend.read(edge=True)
    clock.t += 2.0
    gpu.energy_mj += 1_224_000  # 612 W for 2 s
    summary = summarise("cuda:0", backend, [first, backend.read(edge=False), backend.read(edge=True)])
    assert (summary.power_w_median, summary.power_limit_w) == (612.0, 650.0), summary.unavailable
    assert (summary.clock_mhz_median, summary.throttle_reasons) == (1455.0, ("sw_power_cap",))
    assert summary.energy_j == pytest.approx(1224.0) and summary.power_source == "instant"
    assert validity_tags(summary) == ["throttled: sw_power_cap"], "saturated, not power-suspect nor unknown"
    assert backend.device_handle() == 1 and backend.handle == (1, 0)


def test_a_whole_gpu_is_no_mig_slice(install, torch_devices):
    nvml = install(FakeNvml())
    torch_devices([bare(nvml.gpus[0].uuid)])
    summary = snapshot("cuda:0")
    assert summary.mig_slice is None and summary.clock_mhz_mean == 1980.0
    assert summary.to_dict()["notes"] == []
