"""The whole report with a device of known speed (instant fake timings) against crafted floors."""

import dataclasses
import json

import pytest

from accounting.__main__ import main
from accounting.hardware.devices import detect_device
from accounting.hardware.native import native_matmul
from accounting.hardware.peaks import device_peak_flops
from accounting.health.states import EXIT_DEGRADED
from accounting.report import run
from accounting.report.health_counters import CpuCounters
from accounting.report.results import BandwidthMeasurement
from accounting.report.sweep import MatmulMeasurement
from accounting.timing import matmul_case
from tests.support.fake_devices import CASCADE_LAKE, FAKE_CPUS, SAPPHIRE_RAPIDS, ZEN3
from tests.support.fake_health import edac_tree

FRACTION_OF_PEAK = 0.5
"""The fake device runs every matmul at this share of the CPU's estimated peak."""


@pytest.fixture
def half_speed_cpu(monkeypatch, tmp_path):
    """Matmuls at ``FRACTION_OF_PEAK`` of the real peak estimate, timed instantly, each shape checked (a real
    16³ product of its dtype); a 10 GB/s copy; a host whose EDAC and machine-check counters read clean."""

    class InstantTimer:
        def __init__(self, info, *, target_s):
            self.info = info
            self.checker = None

        def expected_wall_s(self, per_call_s):
            return 0.0

        def __call__(self, dtype, m, k, n):
            flops = 2 * m * k * n
            seconds = flops / (FRACTION_OF_PEAK * device_peak_flops(self.info, dtype))
            check = None if self.checker is None else self.checker(dtype, matmul_case(dtype, 16, 16, 16))
            return MatmulMeasurement(dtype, m, k, n, flops, seconds, 0.0, 5, check=check)

    monkeypatch.setattr(run.measuring, "MatmulTimer", InstantTimer)
    monkeypatch.setattr(run.measuring, "measure_bandwidth",
                        lambda info: BandwidthMeasurement(bytes_moved=2 * 2**28, seconds=2 * 2**28 / 10e9, iqr_s=0.0,
                                                          repeats=10))
    clean_host = edac_tree(tmp_path / "host", [(0, 0)], mce=[0, 0])
    monkeypatch.setattr(run, "device_counters", lambda info: [CpuCounters(root=clean_host)])
    monkeypatch.delenv("ACCOUNTING_PEAK_TFLOPS", raising=False)


def benchmarks_file(tmp_path, floors: dict) -> str:
    document = {
        "regression": {"metric": "median", "threshold_percent": 10},
        "cpu": {"dtypes": list(floors), "shapes": [[256, 256, 256]], "floors": floors},
    }
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(document))
    return str(path)


def report(tmp_path, monkeypatch, capsys, floors, *extra):
    monkeypatch.setenv("ACCOUNTING_BENCHMARKS", benchmarks_file(tmp_path, floors))
    json_path = tmp_path / "report.json"
    status = main(["report", "--device", "cpu", "--budget", "1", "--quiet", "--json", str(json_path), *extra])
    return status, capsys.readouterr().out, json.loads(json_path.read_text())


def test_defaults_come_from_benchmarks_json(half_speed_cpu, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run, "detect_device", lambda device=None: SAPPHIRE_RAPIDS)  # bf16 native: AMX
    _status, _out, document = report(tmp_path, monkeypatch, capsys, {"float32": 0.3, "bfloat16": 0.2})
    assert document["settings"]["dtypes"] == ["float32", "bfloat16"]
    assert document["dtypes"]["bfloat16"]["floor"] == 0.2


ALL_FLOORS = {"float32": 0.4, "bfloat16": 0.4, "float16": 0.4}
"""Below ``FRACTION_OF_PEAK``: every dtype that is judged is healthy."""


@pytest.mark.parametrize("info, expected", FAKE_CPUS)
def test_default_dtypes_notes_and_verdicts_per_cpu(half_speed_cpu, tmp_path, monkeypatch, capsys, info, expected):
    monkeypatch.setattr(run, "detect_device", lambda device=None: info)
    _status, out, document = report(tmp_path, monkeypatch, capsys, ALL_FLOORS)
    assert document["settings"]["dtypes"] == document["judged_dtypes"] == expected
    dropped = [dtype for dtype in ALL_FLOORS if dtype not in expected]
    for dtype in dropped:
        reason = native_matmul(info, dtype).reason
        line = f"{dtype} not timed by default: {reason}; time it anyway with --dtypes {dtype} (measured and shown, not judged)"
        assert line in document["notes"] and f"  - {line}" in out
    for dtype in expected:
        section = document["dtypes"][dtype]
        assert section["native"] and section["judged"] and not section["emulated"]
        assert section["verdict"]["status"] == "healthy" and section["floor"] == ALL_FLOORS[dtype]
    assert document["verdict"] == "healthy" and "machine: healthy" in out


@pytest.mark.parametrize("bf16_floor", [0.4, 0.9], ids=["floor-met", "floor-missed"])
def test_explicit_emulated_dtype_is_measured_but_not_judged(half_speed_cpu, tmp_path, monkeypatch, capsys, bf16_floor):
    """Zen 3 emulates bf16: asked for, it is timed and shown, and never decides the machine's verdict."""
    monkeypatch.setattr(run, "detect_device", lambda device=None: ZEN3)
    status, out, document = report(tmp_path, monkeypatch, capsys, {"float32": 0.4, "bfloat16": bf16_floor},
                                   "--dtypes", "float32,bf16", "--strict")
    section = document["dtypes"]["bfloat16"]
    assert section["measurements"], "measured"
    assert (section["native"], section["judged"], section["emulated"]) == (False, False, True)
    assert section["not_native_reason"] == native_matmul(ZEN3, "bf16").reason
    assert section["floor"] is None, "no floor written for native hardware applies"
    assert section["mfu"] == pytest.approx(FRACTION_OF_PEAK) and section["mfu_against"] == "the float32 path's peak"
    assert section["verdict"]["status"] == "not judged" and section["verdict"]["healthy"] is None
    assert (f"bfloat16  emulated — not judged: MFU {FRACTION_OF_PEAK:.3f} of the float32 path's peak; "
            f"{section['not_native_reason']}") in out
    assert "the float32 path, bfloat16 is emulated on it" in section["peak_source"]
    assert document["judged_dtypes"] == ["float32"]
    assert document["verdict"] == "healthy" and status == 0
    assert "machine: healthy (from float32; not judged: bfloat16)" in out


def test_only_emulated_dtypes_leave_the_machine_unknown(half_speed_cpu, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run, "detect_device", lambda device=None: CASCADE_LAKE)
    _status, out, document = report(tmp_path, monkeypatch, capsys, {"bfloat16": 0.9}, "--dtypes", "bf16")
    assert document["judged_dtypes"] == [] and document["verdict"] == "unknown"
    assert "machine: unknown (from no dtype; not judged: bfloat16)" in out


def test_at_or_above_the_floor_is_healthy(half_speed_cpu, tmp_path, monkeypatch, capsys):
    status, out, document = report(tmp_path, monkeypatch, capsys, {"float32": 0.4}, "--strict")
    assert status == 0
    section = document["dtypes"]["float32"]
    assert section["mfu"] == pytest.approx(FRACTION_OF_PEAK)
    assert section["verdict"]["status"] == "healthy" and document["verdict"] == "healthy"
    assert "float32  healthy: MFU 0.500 is at or above its floor 0.400" in out


def test_below_the_floor_says_by_how_much(half_speed_cpu, tmp_path, monkeypatch, capsys):
    status, out, document = report(tmp_path, monkeypatch, capsys, {"float32": 0.6})
    assert status == 0, "without --strict a report that ran exits 0 whatever it found"
    verdict = document["dtypes"]["float32"]["verdict"]
    assert verdict["status"] == "below floor" and verdict["shortfall"] == pytest.approx(0.1)
    assert "float32  below floor: MFU 0.500 < floor 0.600, short by 0.100 (17% under)" in out
    assert "machine: below floor" in out


def test_strict_exits_3_degraded_when_below_the_floor(half_speed_cpu, tmp_path, monkeypatch, capsys):
    """Below its floor is a degraded reason: exit status 3 (EXIT_DEGRADED) with --strict, where it was 1."""
    status, out, document = report(tmp_path, monkeypatch, capsys, {"float32": 0.6}, "--strict")
    assert status == EXIT_DEGRADED
    health = document["health"]
    assert health["state"] == "degraded" and health["exit_status"] == EXIT_DEGRADED and health["strict"]
    assert [reason["code"] for reason in health["reasons"]] == ["mfu-below-floor"]
    assert document["dtypes"]["float32"]["verdict"]["message"] in health["reasons"][0]["text"]
    assert "Health: degraded (exit status 3)" in out


def test_below_the_floor_without_strict_is_degraded_but_exits_0(half_speed_cpu, tmp_path, monkeypatch, capsys):
    status, out, document = report(tmp_path, monkeypatch, capsys, {"float32": 0.6})
    assert status == 0 and document["health"]["state"] == "degraded"
    assert "Health: degraded (exit status 0; 3 with --strict)" in out


def test_what_could_not_be_checked_is_listed_not_degraded(half_speed_cpu, tmp_path, monkeypatch, capsys):
    """A host whose counters cannot be read (no EDAC, no MCE line, as in a VM) is not called healthy on their
    word: they are listed as unchecked. Nor is it a worse device: --strict does not fail it for them."""
    monkeypatch.setattr(run, "device_counters", lambda info: [CpuCounters(root=tmp_path / "empty")])
    for strict in ((), ("--strict",)):
        status, _out, document = report(tmp_path, monkeypatch, capsys, {"float32": 0.4}, *strict)
        assert status == 0 and document["health"]["state"] == "healthy" and not document["health"]["reasons"]
        unchecked = document["health"]["unchecked"]
        assert any("edac.corrected" in item for item in unchecked) and any("mce.exceptions" in item for item in unchecked)


def test_memory_bound_cases_are_marked(half_speed_cpu, tmp_path, monkeypatch, capsys):
    _status, _out, document = report(tmp_path, monkeypatch, capsys, {"float32": 0.3})
    section = document["dtypes"]["float32"]
    ridge = section["ridge_flop_per_byte"]
    assert ridge == pytest.approx(section["peak_flops_per_s"] / 10e9)
    for row in section["measurements"]:
        assert row["bound"] == ("compute" if row["arithmetic_intensity"] >= ridge else "memory")


def test_a_missing_benchmarks_file_needs_dtypes(half_speed_cpu, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ACCOUNTING_BENCHMARKS", str(tmp_path / "missing.json"))
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--device", "cpu", "--budget", "1", "--quiet"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith(
        f"accounting report: error: cannot read benchmarks file {str(tmp_path / 'missing.json')!r}: ")


def test_a_cpu_without_a_clock_is_reported_with_no_peak(half_speed_cpu, tmp_path, monkeypatch, capsys):
    """No clock found: the header says so where the peak's source goes, and the run ends with verdict unknown."""
    clockless = dataclasses.replace(detect_device("cpu"), clock_ghz=None, clock_source="no clock anywhere")

    class FixedSpeedTimer:
        def __init__(self, info, *, target_s):
            pass

        def expected_wall_s(self, per_call_s):
            return 0.0

        def __call__(self, dtype, m, k, n):
            flops = 2 * m * k * n
            return MatmulMeasurement(dtype, m, k, n, flops, flops / 1e11, 0.0, 5)

    monkeypatch.setattr(run, "detect_device", lambda device=None: clockless)
    monkeypatch.setattr(run.measuring, "MatmulTimer", FixedSpeedTimer)
    status, out, document = report(tmp_path, monkeypatch, capsys, {"float32": 0.3})
    assert status == 0
    section = document["dtypes"]["float32"]
    assert section["peak_source"] == "no CPU clock (no clock anywhere)"
    assert section["peak_flops_per_s"] is None and section["verdict"]["status"] == "unknown"
    assert "no CPU clock (no clock anywhere)" in out
