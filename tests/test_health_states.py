"""Each health scenario gives the right state, with a reason that names the device; rollups keep the worst.

The devices are fake NVML and AMD SMI modules (tests/support/fake_health.py) and a fake EDAC
tree; the counters are read through the real readers, before and after a "run" that changes them.
"""

import dataclasses

import pytest

from accounting.health.amd import read_amdsmi
from accounting.health.counters import Window
from accounting.health.cpu import read_cpu
from accounting.health.faults import Fault, faulty
from accounting.health.nvml import XidEvents, read_nvml
from accounting.health.results import check_case
from accounting.health.states import (
    DEGRADED,
    EXIT_DEGRADED,
    EXIT_FAILED,
    EXIT_HEALTHY,
    FAILED,
    FAILED_XIDS,
    HEALTHY,
    judge,
    judge_window,
    roll_up,
)
from accounting.timing import matmul_case
from tests.support.fake_health import AmdGpu, FakeAmdSmi, FakeNvml, NvmlGpu, edac_tree

GPU = NvmlGpu()


def run_nvml(change=lambda gpu: None, gpu=None, **evidence):
    """Read a fake GPU before and after a run that applies ``change``; judge it under load at the end."""
    gpu = gpu or NvmlGpu()
    nvml = FakeNvml([gpu])
    with Window(lambda: read_nvml(nvml, 0), events=XidEvents(nvml, 0)) as window:
        change(gpu)
        window.under_load()
    return judge_window(window, **evidence)


def codes(verdict):
    return {reason.code for reason in verdict.reasons}


def assert_names_device(verdict, gpu=GPU):
    for reason in verdict.reasons:
        assert gpu.uuid in reason.device and gpu.bus_id in reason.device and gpu.serial in reason.device
        assert reason.device in str(reason)


def test_a_clean_gpu_is_healthy_and_says_what_it_could_not_read():
    verdict = run_nvml()
    assert (verdict.state, verdict.reasons, verdict.exit_status) == (HEALTHY, (), EXIT_HEALTHY)
    assert verdict.unchecked == ()  # an H100 remaps rows instead of retiring pages: nothing it should answer is missing
    blind = run_nvml(gpu=NvmlGpu(unsupported={"nvmlDeviceGetCurrPcieLinkWidth"}))
    assert blind.state == HEALTHY and any(item.startswith("pcie.width") for item in blind.unchecked)


def test_an_uncorrectable_ecc_error_fails_the_gpu():
    def hit(gpu):
        gpu.ecc[(1, 0)] += 1
    verdict = run_nvml(hit)
    assert verdict.state == FAILED and verdict.exit_status == EXIT_FAILED
    assert {"ecc-uncorrectable", "ecc-uncorrectable-rising"} <= codes(verdict)
    assert_names_device(verdict)


def test_an_old_uncorrectable_error_in_the_lifetime_count_alone_is_history_not_a_failure():
    gpu = NvmlGpu()
    gpu.ecc[(1, 1)] = 4  # aggregate, over the board's life; volatile is clean since the last reset
    assert run_nvml(gpu=gpu).state == HEALTHY


@pytest.mark.parametrize("rows, code", [((0, 0, 1, 0), "remap-pending"), ((0, 2, 0, 1), "remap-failure")])
def test_a_pending_or_failed_row_remap_fails_the_gpu(rows, code):
    def remap(gpu):
        gpu.remapped_rows = rows
    verdict = run_nvml(remap)
    assert verdict.state == FAILED and code in codes(verdict)
    assert_names_device(verdict)


def test_xid_79_during_the_run_fails_the_gpu():
    def fall_off(gpu):
        gpu.xids.append(79)
    verdict = run_nvml(fall_off)
    assert verdict.state == FAILED and "xid-79" in codes(verdict)
    assert "fallen off the bus" in verdict.describe()
    assert_names_device(verdict)


def test_an_xid_before_the_window_is_not_counted_and_a_watch_xid_only_degrades():
    gpu = NvmlGpu(xids=[79])  # raised before the run started
    def warn(g):
        g.xids.append(92)
    verdict = run_nvml(warn, gpu=gpu)
    assert verdict.state == DEGRADED and codes(verdict) == {"xid-92"}


@pytest.mark.parametrize("xid", sorted(FAILED_XIDS))
def test_every_critical_xid_fails(xid):
    def raise_xid(gpu):
        gpu.xids.append(xid)
    assert run_nvml(raise_xid).state == FAILED


def test_an_x8_link_on_an_x16_card_degrades_it():
    verdict = run_nvml(gpu=NvmlGpu(pcie=(5, 5, 8, 16)))
    assert verdict.state == DEGRADED and codes(verdict) == {"pcie-width"}
    assert "x8" in verdict.reasons[0].text and "x16" in verdict.reasons[0].text
    assert_names_device(verdict)


def test_a_low_generation_is_judged_only_under_load():
    gpu = NvmlGpu(pcie=(1, 5, 16, 16))  # idle: trained down
    nvml = FakeNvml([gpu])
    with Window(lambda: read_nvml(nvml, 0)) as window:
        pass
    idle = judge_window(window)
    assert idle.state == HEALTHY and any("under load" in item for item in idle.unchecked)
    assert run_nvml(gpu=NvmlGpu(pcie=(3, 5, 16, 16))).state == DEGRADED


def test_a_lowered_power_limit_degrades_the_gpu():
    verdict = run_nvml(gpu=NvmlGpu(power_limit_mw=500_000))
    assert verdict.state == DEGRADED and codes(verdict) == {"power-capped"}
    assert "500 W" in verdict.reasons[0].text and "700 W" in verdict.reasons[0].text


def test_rising_correctable_errors_degrade_but_a_steady_count_does_not():
    gpu = NvmlGpu()
    gpu.ecc[(0, 0)] = 12
    assert run_nvml(gpu=gpu).state == HEALTHY

    def more(g):
        g.ecc[(0, 0)] += 3
    verdict = run_nvml(more, gpu=gpu)
    assert verdict.state == DEGRADED and codes(verdict) == {"rising:ecc.corrected"}
    assert "3 more" in verdict.reasons[0].text


def test_nvlink_errors_rising_and_a_link_down_degrade():
    def flaky(gpu):
        gpu.nvlink_errors += 5
        gpu.nvlinks = (1,) * 17 + (0,)
    verdict = run_nvml(flaky)
    assert codes(verdict) == {"rising:links.errors", "links-down"} and verdict.state == DEGRADED


def test_a_device_lost_mid_run_fails():
    def lose(gpu):
        gpu.lost = True
    verdict = run_nvml(lose)
    assert verdict.state == FAILED and "lost" in codes(verdict)


def test_ecc_disabled_and_unsupported_readings_are_unchecked_not_healthy_reasons():
    gpu = NvmlGpu(ecc_enabled=False, unsupported={"nvmlDeviceGetRemappedRows"})
    verdict = run_nvml(gpu=gpu)
    assert verdict.state == HEALTHY
    assert any("ECC is disabled" in item for item in verdict.unchecked)
    assert any(item.startswith("remap.pending") and "Not Supported" in item for item in verdict.unchecked)
    strict = run_nvml(gpu=gpu, strict=True)
    assert strict.state == DEGRADED and "unchecked" in codes(strict)


def test_mfu_below_its_floor_and_throttling_degrade():
    verdict = run_nvml(mfu=0.41, mfu_floor=0.55, throttle_reasons=("sw_power_cap", "hw_thermal_slowdown"))
    assert codes(verdict) == {"mfu", "throttled"} and verdict.state == DEGRADED
    assert "throttled: hw_thermal_slowdown" in [reason.text for reason in verdict.reasons]


def test_running_at_the_power_limit_is_not_throttling():
    """A dense GEMM holds an H100 at its power cap: sw_power_cap (AMD: package power tracking) is the limit working."""
    assert run_nvml(throttle_reasons=("sw_power_cap", "gpu_idle", "ppt_power")).state == HEALTHY
    assert run_nvml(throttle_reasons=("sw_power_cap", "sw_thermal_slowdown")).state == DEGRADED
    assert run_nvml(mfu=0.6, mfu_floor=0.55).state == HEALTHY


# ---- AMD ------------------------------------------------------------------------------------


def run_amd(change=lambda gpu: None, gpu=None):
    gpu = gpu or AmdGpu()
    smi = FakeAmdSmi([gpu])
    with Window(lambda: read_amdsmi(smi, 0)) as window:
        change(gpu)
        window.under_load()
    return judge_window(window)


def test_a_clean_amd_gpu_is_healthy_and_has_no_xids():
    verdict = run_amd()
    assert verdict.state == HEALTHY and any(item.startswith("xids") for item in verdict.unchecked)


@pytest.mark.parametrize("change, state, code", [
    (lambda g: g.ecc.update(uncorrectable_count=1), FAILED, "ecc-uncorrectable"),
    (lambda g: g.ecc.update(deferred_count=2), FAILED, "ecc-deferred"),
    (lambda g: g.bad_pages.append(1), FAILED, "retirement-pending"),
    (lambda g: g.bad_pages.append(2), FAILED, "pages-unreservable"),
    (lambda g: g.ecc.update(correctable_count=9), DEGRADED, "rising:ecc.corrected"),
    (lambda g: g.pcie.update(pcie_width=8), DEGRADED, "pcie-width"),
    (lambda g: g.pcie.update(pcie_speed=16000), DEGRADED, "pcie-speed"),
    (lambda g: setattr(g, "xgmi", ("U",) * 6 + ("D",)), DEGRADED, "links-down"),
    (lambda g: setattr(g, "xgmi_errors", 4), DEGRADED, "rising:links.errors"),
    (lambda g: setattr(g, "power_cap_uw", 600_000_000), DEGRADED, "power-capped"),
])
def test_amd_scenarios(change, state, code):
    verdict = run_amd(change)
    assert verdict.state == state and code in codes(verdict)
    assert "0x9F16A8B0C0" in verdict.device and "0000:0c:00.0" in verdict.device


def test_amd_not_supported_is_unchecked():
    verdict = run_amd(gpu=AmdGpu(unsupported={"amdsmi_get_gpu_total_ecc_count"}))
    assert verdict.state == HEALTHY and any(item.startswith("ecc.uncorrected") for item in verdict.unchecked)


# ---- CPU ------------------------------------------------------------------------------------


def test_cpu_edac_and_machine_checks(tmp_path):
    edac_tree(tmp_path, [(3, 0), (1, 0)], mce=[0, 0])
    clean = read_cpu(root=tmp_path)
    assert clean.value("edac.corrected") == 4 and clean.value("mce.exceptions") == 0
    with Window(lambda: read_cpu(root=tmp_path)) as window:
        edac_tree(tmp_path, [(5, 0), (1, 0)], mce=[0, 0])
    assert judge_window(window).state == DEGRADED

    with Window(lambda: read_cpu(root=tmp_path)) as window:
        edac_tree(tmp_path, [(5, 0), (1, 0)], mce=[0, 1])
    verdict = judge_window(window)
    assert verdict.state == FAILED and codes(verdict) == {"machine-check"}

    edac_tree(tmp_path, [(5, 1), (1, 0)], mce=[0, 1])
    assert "edac-uncorrectable" in codes(judge(after=read_cpu(root=tmp_path)))


def test_a_cpu_without_edac_is_unchecked_with_the_reason(tmp_path):
    verdict = judge(after=read_cpu(root=tmp_path))
    assert verdict.state == HEALTHY
    assert any("no EDAC memory controller" in item for item in verdict.unchecked)
    assert any("/proc/interrupts" in item for item in verdict.unchecked)


# ---- wrong results and rollups --------------------------------------------------------------


CPU_DTYPES = ["float64", "float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"]


@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_a_corrupted_product_fails_the_device_for_real(dtype):
    case = matmul_case(dtype, 64, 128, 48)
    clean = check_case(case)
    assert judge("cpu", results=[clean]).state == HEALTHY
    bad = dataclasses.replace(case, fn=faulty(case.fn, Fault("add", 5 * 48 + 7, 1e4)))
    verdict = judge("cpu", results=[check_case(bad)])
    assert verdict.state == FAILED and codes(verdict) == {"wrong-result"}
    assert "row 5" in verdict.reasons[0].text


def test_a_result_that_changes_between_identical_calls_fails():
    case = matmul_case("float32", 32, 64, 32)
    flaky = dataclasses.replace(case, fn=faulty(case.fn, Fault("flip", 0, 0, call=2)))
    check = check_case(flaky)
    assert check.repeat_identical is False and judge("cpu", results=[check]).state == FAILED


def test_rollups_keep_the_worst_state_and_every_reason():
    healthy = run_nvml()
    degraded = run_nvml(gpu=NvmlGpu(pcie=(5, 5, 8, 16)))
    failed = run_nvml(lambda g: g.xids.append(79))
    node_a = roll_up("node-a", [healthy, degraded])
    node_b = roll_up("node-b", [healthy, failed])
    fleet = roll_up("fleet", [node_a, node_b])
    assert (node_a.state, node_b.state, fleet.state) == (DEGRADED, FAILED, FAILED)
    assert (node_a.exit_status, fleet.exit_status) == (EXIT_DEGRADED, EXIT_FAILED)
    assert set(fleet.reasons) == set(degraded.reasons) | set(failed.reasons)
    assert (fleet.count(HEALTHY), fleet.count(DEGRADED), fleet.count(FAILED)) == (2, 1, 1)
    assert "4 devices" in fleet.describe()


def test_exit_statuses_are_distinct_and_clear_of_the_commands_own():
    from accounting import console
    from accounting.__main__ import EXIT_BROKEN_PIPE
    from accounting.gate.cli import EXIT_REGRESSION
    taken = {EXIT_REGRESSION, console.EXIT_BAD_INPUT, console.EXIT_INTERRUPTED, EXIT_BROKEN_PIPE}
    assert len({EXIT_HEALTHY, EXIT_DEGRADED, EXIT_FAILED}) == 3
    assert not {EXIT_DEGRADED, EXIT_FAILED} & taken and EXIT_HEALTHY == console.EXIT_OK


def test_rollup_members_must_be_verdicts():
    with pytest.raises(TypeError, match="'cuda:0'"):
        roll_up("node", ["cuda:0"])


def test_judge_needs_a_device_or_a_snapshot():
    with pytest.raises(TypeError, match="judge needs a device"):
        judge()


def test_page_retirement_that_row_remapping_replaced_is_not_a_gap():
    """Ampere and newer remap rows and answer "not supported" for retired pages: that is not an unchecked reading.
    Where neither answers, both are listed."""
    retired = {"nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPagesPendingStatus"}
    ampere = run_nvml(gpu=NvmlGpu(unsupported=set(retired)))
    assert ampere.state == HEALTHY and not [item for item in ampere.unchecked if item.startswith("pages.")]
    neither = run_nvml(gpu=NvmlGpu(unsupported={*retired, "nvmlDeviceGetRemappedRows"}))
    assert {item.split(":")[0] for item in neither.unchecked} >= {"pages.retired", "pages.pending", "remap.pending"}
