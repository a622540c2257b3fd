"""The counter readers: every missing reading is "not available" with its reason, never an error."""

import pytest

from accounting.health.amd import read_amdsmi
from accounting.health.counters import (
    ECC_CORRECTED,
    LINKS_UP,
    PCIE_SPEED,
    PCIE_SPEED_MAX,
    POWER_LIMIT_W,
    Counter,
    DeviceId,
    Reader,
    Snapshot,
    Window,
    snapshot,
)
from accounting.health.cpu import read_cpu
from accounting.health.nvml import XidEvents, read_nvml
from tests.support.fake_health import AmdGpu, FakeAmdSmi, FakeNvml, NvmlGpu, edac_tree


def test_nvml_readings_of_a_clean_gpu():
    gpu = NvmlGpu()
    snap = read_nvml(FakeNvml([gpu]), 0)
    assert snap.value(ECC_CORRECTED) == 0 and snap.value(LINKS_UP) == tuple(range(18))
    assert snap.value(POWER_LIMIT_W) == gpu.power_limit_mw / 1000
    assert (snap.device.uuid, snap.device.serial, snap.device.pci_bus_id) == (gpu.uuid, gpu.serial, gpu.bus_id)
    assert snap.lost is None


def test_nvml_before_ampere_counts_retired_pages():
    snap = read_nvml(FakeNvml([NvmlGpu(retired_pages=(2, 1), retirement_pending=1)]), 0)
    assert snap.value("pages.retired") == 3 and snap.value("pages.pending") is True


def test_an_nvml_without_a_function_reads_not_available():
    class OlderNvml(FakeNvml):
        nvmlDeviceGetEnforcedPowerLimit = None  # an older library: falls back to the management limit
        nvmlDeviceGetRemappedRows = None

    snap = read_nvml(OlderNvml(), 0)
    assert snap.value(POWER_LIMIT_W) == NvmlGpu().power_limit_mw / 1000
    assert "has no nvmlDeviceGetRemappedRows" in snap.unavailable()["remap.pending"]


def test_a_lost_gpu_reads_nothing_and_says_so():
    snap = read_nvml(FakeNvml([NvmlGpu(lost=True)]), 0)
    assert "GPU is lost" in snap.lost and all(not counter.available for counter in snap.counters.values())


def test_xid_events_not_supported_are_not_available_with_the_reason():
    nvml = FakeNvml([NvmlGpu(unsupported={"nvmlDeviceRegisterEvents"})])
    events = XidEvents(nvml, 0)
    events.start()
    result = events.stop()
    assert not result.available and "nvmlDeviceRegisterEvents" in result.reason
    assert not nvml.event_sets  # the set was freed


def test_xid_events_are_collected_and_the_set_freed():
    gpu = NvmlGpu()
    nvml = FakeNvml([gpu])
    events = XidEvents(nvml, 0)
    events.start()
    gpu.xids += [13, 79]
    assert events.stop() == Counter.of((13, 79)) and not nvml.event_sets


def test_amd_pcie_speeds_in_mt_s_and_gt_s_compare():
    snap = read_amdsmi(FakeAmdSmi([AmdGpu()]), 0)
    assert snap.value(PCIE_SPEED) == snap.value(PCIE_SPEED_MAX) == 32


def test_amd_n_a_readings_are_not_available():
    gpu = AmdGpu()
    gpu.ecc["correctable_count"] = "N/A"
    snap = read_amdsmi(FakeAmdSmi([gpu]), 0)
    assert snap.value(ECC_CORRECTED) is None and "'N/A'" in snap.unavailable()[ECC_CORRECTED]


def test_cpu_counts_sum_over_controllers_and_cpus(tmp_path):
    edac_tree(tmp_path, [(2, 0), (5, 1)], mce=[1, 0, 2])
    snap = read_cpu(root=tmp_path)
    assert (snap.value("edac.corrected"), snap.value("edac.uncorrected"), snap.value("mce.exceptions")) == (7, 1, 3)


def test_an_unreadable_edac_file_is_not_available(tmp_path):
    edac_tree(tmp_path, [(2, 0)])
    (tmp_path / "sys/devices/system/edac/mc/mc0/ue_count").write_text("garbage\n")
    snap = read_cpu(root=tmp_path)
    assert snap.value("edac.corrected") == 2 and "ue_count unreadable" in snap.unavailable()["edac.uncorrected"]


def test_reader_turns_failures_into_reasons():
    class Library:
        def boom(self):
            raise RuntimeError("Not Supported")
    reader = Reader(Library(), "LIB")
    assert reader.call("boom") == (None, "boom failed: Not Supported")
    assert reader.call("absent") == (None, "LIB has no absent (an older library)")


def test_window_reads_before_under_load_and_after():
    values = iter(range(3))
    with Window(lambda: Snapshot(DeviceId("cpu"), {ECC_CORRECTED: Counter.of(next(values))})) as window:
        window.under_load()
    assert [s.value(ECC_CORRECTED) for s in (window.before, window.load, window.after)] == [0, 1, 2]
    assert not window.xids.available


def test_a_snapshot_refuses_unknown_names():
    with pytest.raises(TypeError, match="'ecc.bogus'"):
        snapshot(DeviceId("cpu"), {"ecc.bogus": Counter.of(1)})
