"""accounting.acceptance.figures and .summary: the headline figures of each step, judged, and the table of it all.

Documents are written by hand in the schema of the report, the fleet, pytest-benchmark and the clock check;
one slow test reads a real report's JSON made on this CPU, so a renamed field cannot go unseen.
"""

import json
import subprocess
import sys

import pytest

from accounting.acceptance.expected import ABOVE, BELOW, IN_RANGE, NO_EXPECTATION, expected_matmul
from accounting.acceptance.figures import (
    clock_figures,
    fleet_headline,
    model_figures,
    pytest_figures,
    pytest_headline,
    report_figures,
    report_headline,
)
from accounting.acceptance.steps import FAILED, PASSED, SKIPPED, Outcome
from accounting.acceptance.summary import HELD, NO_GPU, NOT_HELD, exit_status, render, result
from tests.support import h200_report_replay as recorded

H100 = "NVIDIA H100 80GB HBM3"


def _headline(tflops, clock=None, power=None, published=True, reason=None):
    return {"flops_per_s": tflops * 1e12, "shape": [8192, 8192, 8192], "clock_mhz": clock, "power_w": power,
            "published": published, "reason": reason}


def test_report_figures_are_burst_and_sustained_per_dtype_with_clock_power_and_the_copy():
    document = {"dtypes": {"bfloat16": {"headlines": {"burst": _headline(760.0, 1755, 690),
                                                      "sustained": _headline(500.0, 1410, 720, False, "unsteady")}}},
                "bandwidth": {"measured_bytes_per_s": 2.9e12}}
    figures = {f.name: f for f in report_figures(document, H100, step="report")}
    assert [(name, f.value, f.verdict) for name, f in figures.items()] == [
        ("bfloat16 burst", pytest.approx(760.0), IN_RANGE),
        ("bfloat16 burst SM clock", 1755, IN_RANGE),
        ("bfloat16 burst power", 690, IN_RANGE),
        ("bfloat16 sustained", pytest.approx(500.0), BELOW),
        ("bfloat16 sustained SM clock", 1410, IN_RANGE),
        ("bfloat16 sustained power", 720, ABOVE),
        ("memory bandwidth (device copy)", pytest.approx(2.9), IN_RANGE),
    ]
    assert figures["bfloat16 sustained"].note == "8192x8192x8192; not published: unsteady"
    assert figures["bfloat16 burst"].expected == expected_matmul(H100, "bfloat16")


def test_a_quick_report_has_one_product_per_dtype_and_no_headlines():
    document = {"dtypes": {"float32": {"headlines": {}, "best": {"m": 8192, "k": 4096, "n": 2048,
                                                                 "flops_per_s": 52e12}}}}
    [figure] = report_figures(document, H100, step="report-quick")
    assert (figure.name, figure.value, figure.verdict, figure.note) == (
        "float32 product", pytest.approx(52.0), IN_RANGE, "8192x4096x2048 (m×k×n)")


def test_an_unpublished_headline_without_a_figure_says_why():
    document = {"dtypes": {"float32": {"headlines": {"sustained": {"flops_per_s": None, "shape": None,
                                                                   "published": False, "reason": "no time"}}}}}
    [figure] = report_figures(document, H100, step="report")
    assert (figure.value, figure.verdict, figure.note) == (None, NO_EXPECTATION, "not published: no time")


def test_a_device_without_anchors_gets_figures_without_expectations():
    document = {"dtypes": {"bfloat16": {"headlines": {"burst": _headline(250.0)}}}}
    [figure] = report_figures(document, "NVIDIA A100-SXM4-80GB", step="report")
    assert figure.verdict == NO_EXPECTATION and figure.expected is None


def test_the_report_headline_names_the_health_and_its_first_reasons():
    document = {"health": {"state": "failed", "reasons": [{"text": "wrong result in bfloat16"}, "a", "b"]},
                "verdict": "healthy"}
    assert report_headline(document) == "health failed, verdict healthy (wrong result in bfloat16; a)"


def test_model_figures_judge_each_policy_against_its_floor():
    document = {"model": {"rows": [{"size": "gpt2-small", "precision": "bf16-mixed", "recompute": False, "mfu": 0.31,
                                    "tokens_per_s": 123456.7},
                                   {"size": "gpt2-small", "precision": "fp32", "recompute": True, "mfu": 0.05}]}}
    floors = {"bf16-mixed": 0.1, "fp32": 0.2}
    figures = model_figures(document, step="model-mfu", floor=floors.get)
    assert [(f.name, f.value, f.verdict, f.note) for f in figures] == [
        ("model MFU gpt2-small bf16-mixed", 0.31, IN_RANGE, "123,457 tokens/s"),
        ("model MFU gpt2-small fp32 recompute", 0.05, BELOW, ""),
    ]


def test_pytest_figures_read_each_benchmark_s_extra_info():
    document = {"benchmarks": [
        {"name": "test_gpu_matmul[bfloat16-8192x8192x8192-cuda:0]",
         "extra_info": {"achieved_tflops": 1100.0, "dtype": "bfloat16", "mfu": 1.11}},
        {"name": "test_gpu_training_step[gpt2-small-bf16]",
         "extra_info": {"model": {"mfu": 0.25, "precision": "bf16"}, "achieved_tflops": 250.0, "dtype": "bfloat16"}},
        {"name": "test_without_figures", "extra_info": {}},
    ]}
    figures = pytest_figures(document, H100, step="pytest-gpu", floor={"bf16": 0.1}.get)
    assert [(f.name, f.value, f.unit, f.verdict) for f in figures] == [
        ("test_gpu_matmul[bfloat16-8192x8192x8192-cuda:0]", 1100.0, "TFLOP/s", ABOVE),
        ("test_gpu_training_step[gpt2-small-bf16]", 0.25, "", IN_RANGE),
    ]


def test_clock_figures_are_the_two_ratios_and_the_loop_s_tflops():
    document = {"checks": [{"dtype": "bfloat16", "shape": [8192, 8192, 8192], "package_over_events": 1.02,
                            "host_over_events": 0.95, "event_tflops": 770.0}]}
    figures = clock_figures(document, H100, step="clock-check")
    assert [(f.name, f.verdict) for f in figures] == [
        ("bfloat16 8192x8192x8192 time_matmul / event loop", IN_RANGE),
        ("bfloat16 8192x8192x8192 host clock / event loop", BELOW),  # a host clock cannot read shorter
        ("bfloat16 8192x8192x8192 event-loop TFLOP/s", IN_RANGE),
    ]


def test_the_fleet_headline_gives_the_world_its_health_and_the_best_all_reduce():
    document = {"settings": {"world_size": 8, "backend": "nccl"}, "health": {"state": "healthy"},
                "collectives": [{"collective": "all_reduce", "busbw_bytes_per_s": 3.6e11},
                                {"collective": "all_reduce", "busbw_bytes_per_s": 4.5e11},
                                {"collective": "all_gather", "busbw_bytes_per_s": 9e11}]}
    assert fleet_headline(document) == "world 8 (nccl), health healthy, all_reduce busbw up to 450 GB/s"
    alone = {"settings": {"world_size": 1, "backend": None}, "health": {"state": "healthy"}, "collectives": []}
    assert fleet_headline(alone) == "world 1 (no collectives), health healthy"


@pytest.mark.parametrize("log, headline", [
    pytest.param("x\n== 12 passed, 6 skipped, 30 deselected in 48.1s ==\n", "12 passed, 6 skipped, 30 deselected",
                 id="passed"),
    pytest.param("1 failed, 2 errors in 3.0s\nmore output\n", "1 failed, 2 errors", id="errors-then-more-lines"),
    pytest.param("Traceback...\nKilled\n", "", id="killed-before-counting"),
])
def test_pytest_headline_is_its_closing_counts(log, headline):
    assert pytest_headline(log) == headline


# ---- the summary -------------------------------------------------------------------------------------


def _steps(*statuses):
    names = ["probe", "report", "fleet"]
    return [Outcome(name, "w", status, 1.0, 10, "why" if status != PASSED else "", gpu=name != "probe").as_dict()
            for name, status in zip(names, statuses)]


@pytest.mark.parametrize("statuses, verdicts, expected", [
    pytest.param((PASSED, PASSED, SKIPPED), [IN_RANGE, NO_EXPECTATION], HELD, id="passed-and-skipped"),
    pytest.param((PASSED, SKIPPED, SKIPPED), [], NO_GPU, id="every-gpu-step-skipped"),
    pytest.param((PASSED, FAILED, SKIPPED), [], NOT_HELD, id="a-step-failed"),
    pytest.param((FAILED, SKIPPED, SKIPPED), [], NOT_HELD, id="the-probe-failed"),
    pytest.param((PASSED, PASSED, PASSED), [IN_RANGE, BELOW], NOT_HELD, id="a-figure-below"),
    pytest.param((PASSED, PASSED, PASSED), [ABOVE], NOT_HELD, id="a-figure-above"),
])
def test_the_result_and_exit_status(statuses, verdicts, expected):
    verdict = result(_steps(*statuses), [{"verdict": v} for v in verdicts])
    assert verdict == expected
    assert exit_status(verdict) == (0 if expected in (HELD, NO_GPU) else 1)


def test_the_summary_has_a_row_per_step_and_marks_a_figure_out_of_range():
    steps = _steps(PASSED, FAILED, SKIPPED)
    figures = [{"step": "report", "name": "bfloat16 burst", "value": 512.0, "unit": "TFLOP/s", "note": "a|b",
                "expected": {"low": 633.7, "high": 1038.9, "unit": "TFLOP/s", "source": "H100 SXM: anchors"},
                "verdict": BELOW}]
    text = render({"steps": steps, "figures": figures, "elapsed_s": 12.0, "budget_s": 470, "files": ["summary.md"],
                   "machine": {"devices": [], "no_gpu_reason": "no CUDA device", "torch": "2.13.0+cpu",
                               "missing_optional": ["pynvml"], "python_version": "3.11.7"}})
    assert "**Result: did not hold** — 1 passed, 1 failed, 1 skipped" in text
    assert "| report | failed | 1.0 | 10 | w | why |" in text
    assert "| fleet | skipped | 1.0 | 10 | w | why |" in text
    assert "| report | bfloat16 burst | 512.0 TFLOP/s | 633.7–1,038.9 | **below** | a\\|b | H100 SXM: anchors |" in text
    assert "- left out (not installed): pynvml: NVML telemetry" in text
    assert text.rstrip().endswith("Files: summary.md.")


@pytest.mark.slow
def test_a_real_report_s_json_gives_its_figures(tmp_path):
    """The field names read here are the report's: a standard report on this CPU, one dtype, a short budget."""
    path = tmp_path / "report.json"
    completed = subprocess.run([sys.executable, "-m", "accounting", "report", "--budget", "4", "--dtypes", "float32",
                                "--quiet", "--json", str(path)], capture_output=True, text=True, timeout=120)
    assert completed.returncode in (0, 3), completed.stderr
    document = json.loads(path.read_text())
    names = [figure.name for figure in report_figures(document, None, step="report")]
    headlines = document["dtypes"]["float32"]["headlines"]
    expected = [f"float32 {kind}" for kind in ("burst", "sustained") if headlines.get(kind)]
    assert expected and all(name in names for name in expected)  # an unpublished one too, with its reason
    assert names[-1] == "memory bandwidth (device copy)"
    assert report_headline(document).startswith(f"health {document['health']['state']}, verdict ")


def test_the_recorded_h200_sustained_figures_are_judged_against_mamf_finders_msmf():
    """The recorded acceptance run's bf16 "sustained" (825 TFLOP/s from a 15 ms window, the burst again) is above
    mamf-finder's MSMF ± 5 % on the same card; the recorded 2-s windows (684–689) are in it."""
    report = recorded.load("report.json")
    figures = {f.name: f for f in report_figures(report, "NVIDIA H200", step="report")}
    assert figures["bfloat16 sustained"].verdict == ABOVE
    assert "MSMF 707" in figures["bfloat16 sustained"].expected.source
    for window in recorded.sustained_windows()["sustained_windows"]:
        steady = {"flops_per_s": window["tflops"] * 1e12, "shape": [4608, 6208, 5632], "published": True}
        document = {"dtypes": {"bfloat16": {"headlines": {"sustained": steady}}}}
        [figure] = report_figures(document, "NVIDIA H200", step="report")
        assert figure.verdict == IN_RANGE, window


def test_fp8_figures_name_their_accumulation_and_only_the_default_one_meets_mamf_finders_anchor():
    fast = {"flops_per_s": 1567.3e12, "shape": [4608, 6144, 5632], "accumulation": "fast"}
    default = {"flops_per_s": 1399.0e12, "shape": [4608, 6144, 5632], "accumulation": "default"}
    document = {"dtypes": {"float8_e4m3fn": {"headlines": {"burst": fast, "default_accumulation": {"burst": default}}}}}
    figures = {f.name: f for f in report_figures(document, "NVIDIA H200", step="report")}
    assert set(figures) == {"float8_e4m3fn (fast accumulation) burst", "float8_e4m3fn (default accumulation) burst"}
    assert "MAMF 1399" in figures["float8_e4m3fn (default accumulation) burst"].expected.source
    assert "MAMF" not in figures["float8_e4m3fn (fast accumulation) burst"].expected.source
    assert all(figure.verdict == IN_RANGE for figure in figures.values())


def test_a_pytest_matmul_names_its_fp8_accumulation_and_a_failed_physical_check():
    recorded_run = recorded.load("pytest-gpu.json")
    fp8 = next(bench for bench in recorded_run["benchmarks"] if "float8" in bench["name"])
    fp8["extra_info"]["accumulation"] = "fast"
    fp8["extra_info"]["physical_check"] = {"ok": False, "reason": "impossible: 2000 TFLOP/s > ...",
                                           "ceiling_flops_per_s": 1.5e15}
    [figure] = pytest_figures({"benchmarks": [fp8]}, "NVIDIA H200", step="pytest-gpu", floor=lambda _: None)
    assert figure.note.endswith("; fast accumulation; not as it stands: impossible: 2000 TFLOP/s > ...")
