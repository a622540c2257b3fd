"""Faults during a gated run (``accounting.gate.device_events``): new ECC errors and Xids disturb it.

The truths: the fake NVML's counters and Xids, changed between the reading before and the one after (what the
driver would report), read through the package's own health readers; the load guard must name them.
"""

import sys
import types

import pytest
import torch

from accounting.gate import guard
from accounting.gate.device_events import XidWatch, fault_disturbances, read_ecc, watch_xids
from accounting.gate.guard import recorded_disturbances
from accounting.gate.measure import Runner
from accounting.gate.storage import load_run
from tests.support.fake_health import FakeNvml, NvmlGpu, combined_nvml
from tests.support.fake_nvml import FakeGpu

QUIET_GPU = {"device": "cuda:0", "clock_source": "NVML SM clock", "clock_mhz_mean": 1980.0, "throttle_reasons": []}


def test_ecc_errors_that_appear_during_a_run_disturb_it():
    nvml = FakeNvml([NvmlGpu()])
    before = read_ecc(nvml, 0)
    nvml.gpus[0].ecc[(1, 0)] = 2  # two uncorrected, volatile
    after = read_ecc(nvml, 0)
    assert before == {"corrected": 0, "uncorrected": 0} and after["uncorrected"] == 2
    guard = {"before": dict(QUIET_GPU, ecc=before), "after": dict(QUIET_GPU, ecc=after)}
    assert recorded_disturbances(guard) == ["2 uncorrected ECC error(s) during the run"]


def test_ecc_off_decides_nothing():
    nvml = FakeNvml([NvmlGpu(ecc_enabled=False)])
    reading = read_ecc(nvml, 0)
    assert reading == {"corrected": None, "uncorrected": None}
    assert fault_disturbances({"before": {"ecc": reading}, "after": {"ecc": {"corrected": 3}}}) == []


def test_xids_raised_while_the_run_lasts_are_seen_and_named():
    nvml = FakeNvml([NvmlGpu(xids=[31])])  # raised before the run: not this run's
    closed = []
    watch = XidWatch(nvml, 0, close=lambda: closed.append(True))
    nvml.gpus[0].xids.extend([79, 48])
    seen = watch.stop()
    assert seen == [79, 48] and closed == [True]
    assert recorded_disturbances({"before": QUIET_GPU, "after": QUIET_GPU, "xids": seen}) == [
        "Xid 79, 48 during the run"]


def test_a_driver_without_events_watches_nothing_and_decides_nothing():
    nvml = FakeNvml([NvmlGpu(unsupported={"nvmlDeviceRegisterEvents"})])
    assert XidWatch(nvml, 0).stop() is None
    assert fault_disturbances({"xids": None}) == [] and fault_disturbances({"xids": []}) == []


def test_the_cpu_is_not_watched():
    assert watch_xids("cpu") is None


@pytest.mark.slow  # pytest runs as a process of its own
def test_the_runner_watches_for_xids_while_pytest_runs_and_keeps_them_with_the_run(tmp_path):
    (tmp_path / "test_tiny.py").write_text(
        "def test_a(benchmark):\n    benchmark.pedantic(sum, args=(range(1000),), rounds=5, iterations=1)\n")
    nvml = FakeNvml([NvmlGpu(xids=[31])])  # an Xid before the run: not this run's
    order = []

    class Watch(XidWatch):
        def stop(self):
            order.append("stop")
            return super().stop()

    def events(device):
        order.append("watch")
        watch = Watch(nvml, 0)
        nvml.gpus[0].xids.append(79)  # the driver raises an Xid once the watch has started
        return watch

    def reader(device):
        order.append("read")
        return dict(QUIET_GPU)

    runner = Runner(["-q", "-p", "no:cacheprovider", "test_tiny.py"], device="cuda:0", cwd=str(tmp_path),
                    workdir=str(tmp_path / "work"), reader=reader, events=events)
    run = load_run(runner.run("current-1").path)
    assert run.guard["xids"] == [79]
    assert order == ["read", "watch", "stop", "read"]  # the watch spans the pytest process, inside the readings
    assert "Xid 79 during the run" in recorded_disturbances(run.guard)  # beside the shared machine's own load


def test_under_mig_the_guard_reads_settings_ecc_and_xids_on_the_slices_gpu(monkeypatch):
    """NVML refuses a MIG slice's handle for the power limit, ECC counts and events: they are the GPU's."""
    mig = "MIG-5c0a3e9b-1d2f-5a6b-8c7d-0e1f2a3b4c5d"
    nvml = combined_nvml([FakeGpu(mig_uuids=(mig,))], [NvmlGpu(power_limit_mw=650_000, xids=[])])
    refused = []

    def gpu_only(name, call):
        def checked(handle, *args):
            if isinstance(handle, tuple):  # the slice's handle: NVML_ERROR_NOT_SUPPORTED
                refused.append(name)
                raise nvml.health.NVMLError(3)
            return call(handle, *args)
        return checked

    for name in ("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetEccMode",
                 "nvmlDeviceRegisterEvents"):
        monkeypatch.setattr(nvml, name, gpu_only(name, getattr(nvml, name)), raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: types.SimpleNamespace(uuid=mig[4:]))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    reading = guard.read("cuda:0")
    assert reading["settings"]["power_limit_w"] == 650.0 and reading["ecc"] == {"corrected": 0, "uncorrected": 0}
    watch = watch_xids("cuda:0")
    nvml.health.gpus[0].xids.append(79)
    assert watch.stop() == [79]
    assert refused == [], "nothing asked of the slice's handle that NVML refuses there"
