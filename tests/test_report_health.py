"""``accounting report``'s health: every timed product checked, counters around the run, three states, exit statuses.

Real runs on this CPU (tiny budgets), the checker's self-test (``--inject-fault``), and fake GPUs whose NVML
(tests/support/fake_health.py with fake_nvml.py) reports ECC errors and Xids through the whole report.
"""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from accounting.errors import AccountingError
from accounting.health.states import EXIT_DEGRADED, EXIT_FAILED
from accounting.report import run
from accounting.report.burn import burn
from accounting.report.checks import ResultChecker, parse_injected_fault
from accounting.report.health_counters import CpuCounters, GpuCounters
from accounting.report.levels import LEVELS, QUICK_MAX_S
from accounting.telemetry.gpu import NvmlBackend
from accounting.timing import matmul_case
from tests.support import fake_nvml
from tests.support.cli_runs import run_main
from tests.support.fake_health import NvmlGpu, combined_nvml, edac_tree

ROOT = Path(__file__).resolve().parent.parent
CPU_DTYPES = ["float32", "bfloat16", "float16", "float8_e4m3fn"]
"""Every dtype a CPU computes (float16 and fp8 through torch's emulation where there is no native path)."""


def report_json(tmp_path, capsys, *argv):
    path = tmp_path / "report.json"
    status, out, err = run_main(["report", "--device", "cpu", "--quiet", "--json", str(path), *argv], capsys)
    return status, out, err, json.loads(path.read_text()) if path.exists() else None


@pytest.mark.slow
def test_a_clean_quick_run_is_healthy_within_its_time(tmp_path):
    """--level quick as a job prolog: counters, one checked product per dtype, a short copy; no sweep or headlines."""
    path = tmp_path / "quick.json"
    result = subprocess.run([sys.executable, "-m", "accounting", "report", "--level", "quick", "--device", "cpu",
                             "--quiet", "--json", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=300,
                            env={**os.environ, "PYTHONWARNINGS": "error"}, check=False)
    assert result.returncode == 0, result.stderr
    document = json.loads(path.read_text())
    assert document["elapsed_s"] <= QUICK_MAX_S, "a prolog's time, measured by the report itself"
    health = document["health"]
    assert health["state"] == "healthy", health["reasons"]  # what this VM cannot read is unchecked, not degrading
    assert health["exit_status"] == 0 and health["checks"]["failed"] == 0
    assert health["checks"]["products"] == len(document["settings"]["dtypes"])
    for section in document["dtypes"].values():
        (row,) = section["measurements"]
        assert row["check"]["ok"] and row["check"]["repeat_identical"] is True
        assert section["headlines"] == {}
    assert document["bandwidth"]["measured_bytes_per_s"] > 0
    assert "Health: healthy (exit status 0)" in result.stdout


@pytest.mark.parametrize("dtype", CPU_DTYPES)
def test_an_injected_fault_fails_the_dtype_and_the_device(dtype, tmp_path, capsys):
    """The checker's self-test at every dtype the CPU runs: a corrupted product fails, whatever its speed: exit 4."""
    status, out, _err, document = report_json(tmp_path, capsys, "--dtypes", dtype, "--budget", "1",
                                               "--inject-fault", f"{dtype}:add:3:1e6")
    assert status == EXIT_FAILED
    section = document["dtypes"][dtype]
    assert section["verdict"]["status"] == "wrong result" and section["verdict"]["healthy"] is False
    (failed,) = section["checks"]["failed"]
    injected = document["health"]["checks"]["injected"]
    assert injected["dtype"] == dtype and failed["shape"] == injected["shape"]
    assert failed["row"] == 0 and failed["columns"][0] <= 3 < failed["columns"][1], "the corrupted element's place"
    assert failed["excess"] is None or failed["excess"] > 1
    health = document["health"]
    assert health["state"] == "failed" and health["exit_status"] == EXIT_FAILED
    assert [reason["code"] for reason in health["reasons"] if reason["state"] == "failed"] == ["wrong-result"]
    shape = "x".join(map(str, failed["shape"]))
    assert f"{dtype} {shape} product wrong: row 0" in out and "Health: failed (exit status 4)" in out
    assert document["verdict"] == "wrong result"


def test_a_fault_on_the_repeat_only_is_caught_as_a_changed_result(tmp_path, capsys):
    status, _out, _err, document = report_json(tmp_path, capsys, "--dtypes", "float32", "--level", "quick",
                                               "--inject-fault", "float32:flip:0:30@2")
    assert status == EXIT_FAILED
    (failed,) = document["dtypes"]["float32"]["checks"]["failed"]
    assert failed["repeat_identical"] is False and "changed between two identical calls" in failed["reason"]


@pytest.mark.parametrize("spec, message", [
    pytest.param("bf16", "--inject-fault is DTYPE:flip:INDEX:BIT or DTYPE:add:INDEX:DELTA", id="no-spec"),
    pytest.param("int4:flip:0:1", "--inject-fault: unknown floating-point format 'int4'", id="unknown-dtype"),
    pytest.param("fp32:zap:0:1", "--inject-fault: a fault is flip:INDEX:BIT or add:INDEX:DELTA", id="bad-kind"),
    pytest.param("fp32:flip:0:32", "--inject-fault: bit 32 is outside a float32 product's 32-bit elements", id="bit"),
    pytest.param("fp32:add:0:1@3", "--inject-fault: the check calls the product 2 times", id="call"),
])
def test_a_bad_fault_is_one_line_and_exit_2(spec, message, capsys):
    status, out, err = run_main(["report", "--device", "cpu", "--budget", "1", "--inject-fault", spec], capsys)
    assert status == 2 and out == ""
    assert err.splitlines() == [err.strip()] and message in err
    with pytest.raises(AccountingError, match=message.replace("(", r"\(")):
        parse_injected_fault(spec)


def test_a_fault_for_a_dtype_not_timed_is_refused_before_measuring(capsys):
    status, out, err = run_main(["report", "--device", "cpu", "--dtypes", "float32", "--budget", "1",
                                 "--inject-fault", "bf16:add:0:1"], capsys)
    assert status == 2 and out == ""
    assert err.strip() == "accounting report: error: --inject-fault: bfloat16 is not among the dtypes timed (float32)"


def test_help_says_what_each_level_checks_and_the_exit_statuses(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100000")  # argparse wraps at the terminal's width (and breaks words at hyphens)
    status, out, _err = run_main(["report", "--help"], capsys)
    assert status == 0
    text = " ".join(out.split())
    for level in LEVELS.values():
        assert f"{level.name}: {level.checks}" in text and f"default budget {level.default_budget_s:g} s" in text
    assert f"{EXIT_FAILED} a device failed" in text and f"{EXIT_DEGRADED} with --strict" in text
    assert "--inject-fault DTYPE:SPEC" in text


@pytest.fixture
def fake_gpu_counters(monkeypatch, tmp_path):
    """The report on this CPU, its health counters read from a fake GPU (NVML) and a clean host."""
    gpu = NvmlGpu()
    nvml = combined_nvml(health_gpus=[gpu])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    host = edac_tree(tmp_path / "host", [(0, 0)], mce=[0, 0])
    monkeypatch.setattr(run, "device_counters", lambda info: [GpuCounters(0), CpuCounters(root=host)])
    return gpu


def test_an_uncorrectable_ecc_error_fails_the_gpu_and_exits_4(fake_gpu_counters, tmp_path, capsys):
    fake_gpu_counters.ecc[(1, 0)] = 2  # volatile uncorrectable
    status, out, _err, document = report_json(tmp_path, capsys, "--dtypes", "float32", "--level", "quick")
    assert status == EXIT_FAILED, "failed exits 4 without --strict"
    health = document["health"]
    gpu, host = health["devices"]
    assert gpu["state"] == "failed" and host["state"] == "healthy"
    assert gpu["reasons"][0]["code"] == "ecc-uncorrectable"
    assert gpu["device"].startswith("cuda:0 (GPU-8f2c61a4, serial 1652922000000, PCI 00000000:3B:00.0")
    assert gpu["counters"]["after"]["values"]["ecc.uncorrected"] == 2
    assert "2 uncorrectable ECC errors since the driver loaded" in out


class XidDuringRun:
    """A progress bar that makes the fake GPU raise ``xid`` (and count a correctable error) once the run is going."""

    def __init__(self, gpu, xid):
        self.gpu, self.xid = gpu, xid

    def update(self, done_s, text):
        if "bandwidth" in text and self.xid not in self.gpu.xids:
            self.gpu.xids.append(self.xid)
            self.gpu.ecc[(0, 0)] += 1


@pytest.mark.parametrize("xid, state", [pytest.param(79, "failed", id="fallen-off-the-bus"),
                                        pytest.param(13, "degraded", id="graphics-engine-exception")])
def test_an_xid_during_the_run_is_judged(fake_gpu_counters, xid, state):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = run.prepare(device="cpu", dtypes=["float32"], budget_s=1.0)
    report = run.build_report(plan, progress=XidDuringRun(fake_gpu_counters, xid), started=0.0,
                              clock=lambda: 0.0, level="quick")
    gpu = report["health"]["devices"][0]
    assert gpu["xids"]["values"] == [xid] and gpu["state"] == state
    codes = [reason["code"] for reason in gpu["reasons"]]
    assert f"xid-{xid}" in codes and "rising:ecc.corrected" in codes


def test_strict_exits_3_on_a_degraded_gpu(fake_gpu_counters, tmp_path, capsys):
    fake_gpu_counters.power_limit_mw = 500_000  # capped below its 700 W default
    status, _out, _err, document = report_json(tmp_path, capsys, "--dtypes", "float32", "--level", "quick")
    assert status == 0 and document["health"]["state"] == "degraded"
    status, _out, _err, document = report_json(tmp_path, capsys, "--dtypes", "float32", "--level", "quick", "--strict")
    assert status == EXIT_DEGRADED
    assert "power-capped" in [reason["code"] for reason in document["health"]["reasons"]]


def test_no_gpu_library_leaves_every_gpu_counter_unchecked_and_not_degraded(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    host = edac_tree(tmp_path / "host", [(0, 0)], mce=[0, 0])
    monkeypatch.setattr(run, "device_counters", lambda info: [GpuCounters(0), CpuCounters(root=host)])
    status, _out, _err, document = report_json(tmp_path, capsys, "--dtypes", "float32", "--level", "quick", "--strict")
    gpu = document["health"]["devices"][0]
    assert any(item.startswith("ecc.uncorrected: no NVML") for item in gpu["unchecked"])
    assert any(item.startswith("xids: no NVML") for item in gpu["unchecked"])
    assert gpu["state"] == "healthy" and status == 0, "not read is listed, not a worse device, even under --strict"
    assert any("ecc.uncorrected: no NVML" in item for item in document["health"]["unchecked"]), "summary lists it"


def test_the_device_handle_of_a_mig_slice_is_its_gpu(monkeypatch):
    """ECC, remapping, PCIe and Xids belong to the physical GPU: the health counters read the slice's parent."""
    slice_uuid = "MIG-4a1b2c3d-0000-1111-2222-333333333333"
    nvml = fake_nvml.FakeNvml([fake_nvml.FakeGpu(), fake_nvml.FakeGpu(mig_uuids=(slice_uuid,))])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", slice_uuid)
    backend = NvmlBackend(nvml, 0)
    assert backend.handle == (1, 0) and backend.device_handle() == 1 and backend.library is nvml
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    whole = NvmlBackend(nvml, 0)
    assert whole.device_handle() == whole.handle == 1


def test_the_long_level_burns_each_dtype_with_every_result_checked(tmp_path, capsys):
    status, out, _err, document = report_json(tmp_path, capsys, "--dtypes", "float32", "--level", "long",
                                              "--budget", "3")
    found = document["burn"]["float32"]
    assert found["products"] >= 2 and found["mismatches"] == 0 and found["failed"] == []
    assert found["checks"] >= 2, "the first result and the last, at least"
    assert found["seconds"] > 0 and found["telemetry"]["duration_s"] > 0
    assert document["health"]["checks"]["burn"]["float32"]["products"] == found["products"]
    assert "Sustained phase" in out and status in (0, EXIT_DEGRADED)


def test_the_sustained_phase_catches_a_result_that_changes(monkeypatch):
    """A product whose 3rd call differs: counted, Freivalds-checked as a changed result, and the device fails."""

    def flaky_case(dtype, m, k, n, device):
        case = matmul_case(dtype, m, k, n, device)
        calls = [0]

        def fn():
            out = case.fn()
            calls[0] += 1
            if calls[0] == 3:
                out.view(-1)[5] += 1e3
            return out

        return SimpleNamespace(fn=fn, operands=case.operands, dtype=case.dtype, runs_as=case.runs_as)

    ticks = iter(range(10_000))
    result = burn("cpu", "float32", 64, 5.0, checker=ResultChecker(), clock=lambda: next(ticks) * 0.5,
                  case_factory=flaky_case)
    assert result.mismatches == 1 and result.first_mismatch == 2, "call 1 is the reference, call 3 the 2nd product"
    (changed,) = result.failed_checks
    assert changed.repeat_identical is False and changed.excess > 1 and changed.row == 0


def test_the_checker_checks_the_product_that_was_timed_at_one_extra_call():
    """After timing, the case's output buffer holds the timed product: that is what is checked (a wrong timed
    result is caught even when a fresh call would be right), and only the repeat calls the product again."""
    from accounting.report.checks import ResultChecker
    from accounting.timing import matmul_case

    import dataclasses

    made = matmul_case("float32", 64, 32, 48, "cpu")
    calls = []
    case = dataclasses.replace(made, fn=lambda: calls.append(1) or made.fn())
    case.fn()  # "timed"
    case.output[5, 7] += 1e3  # the timed product came out wrong
    calls.clear()
    check = ResultChecker()("float32", case, timed=True)
    assert not check.ok and check.row == 5 and calls == [1], "the timed product checked, one call for the repeat"
    assert ResultChecker()("float32", case).ok and len(calls) == 3, "not timed: two fresh calls, both right"
