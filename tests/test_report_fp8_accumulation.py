"""fp8 figures name their accumulation everywhere (JSON, text, plot legend) and the report measures both.

Truths: the recorded H200 figures (fast-accumulation burst 1567.3 TFLOP/s; mamf-finder's default-accumulation
MAMF 1399.0, both against the datasheet's dense fp8 peak 1978.9), the keyword arguments the timed products were
built with (a spy case factory), and the strings each figure must carry.
"""

import json

import pytest

from accounting.hardware.devices import DeviceInfo
from accounting.hardware.peaks import peak_flops
from accounting.report import run
from accounting.report.accumulation import default_key
from accounting.report.headlines import Headline
from accounting.report.measure import MatmulTimer
from accounting.report import plot
from accounting.report.plot import headline_label
from accounting.report.render import render
from accounting.report.results import assemble, bandwidth_section, dtype_section
from accounting.timing import matmul_case

FP8 = "float8_e4m3fn"
H200_FAST_BURST = 1567.3e12
H200_DEFAULT_MAMF = 1399.0e12


def fp8_headlines():
    fast = Headline(FP8, "burst", True, flops_per_s=H200_FAST_BURST, shape=(4608, 6208, 5632), clock_mhz=1980.0,
                    accumulation="fast")
    default = Headline(FP8, "burst", True, flops_per_s=H200_DEFAULT_MAMF, shape=(4608, 6208, 5632), clock_mhz=1980.0,
                       accumulation="default")
    withheld = Headline(FP8, "sustained", False, reason="withheld: the window ran 0.5 s", accumulation="default")
    return {"burst": fast, "default_accumulation": {"burst": default, "sustained": withheld, "check": None}}


def fp8_report():
    peak = peak_flops("NVIDIA H200", "fp8")
    section = dtype_section(FP8, [], peak=peak, floor=None, bandwidth=None, spec_bandwidth=None,
                            headlines=fp8_headlines())
    device = {"kind": "cuda", "name": "NVIDIA H200", "index": 0, "memory_bytes": 141 * 2**30,
              "compute_capability": [9, 0]}
    machine = {"platform": "Linux", "python": "3.12", "torch": "2.11", "accounting": None, "device": device}
    return assemble(settings={"device": "cuda:0", "dtypes": [FP8], "budget_s": 60.0}, machine=machine,
                    bandwidth=bandwidth_section(None, None), dtypes={FP8: section}, elapsed_s=1.0, notes=[]), peak


def test_both_accumulations_are_in_the_json_each_named_with_its_mfu_against_the_same_peak():
    report, peak = fp8_report()
    section = json.loads(json.dumps(report))["dtypes"][FP8]
    assert section["accumulation"] == "fast"
    fast, default = section["headlines"]["burst"], section["headlines"]["default_accumulation"]["burst"]
    assert (fast["accumulation"], default["accumulation"]) == ("fast", "default")
    assert fast["mfu"] == pytest.approx(H200_FAST_BURST / 1978.9e12, rel=1e-6)
    assert default["mfu"] == pytest.approx(H200_DEFAULT_MAMF / 1978.9e12, rel=1e-6)
    assert peak == pytest.approx(1978.9e12)


def test_the_text_and_the_plot_legend_name_each_accumulation():
    report, _peak = fp8_report()
    text = render(report)
    assert "float8_e4m3fn (fast accumulation)" in text and "float8_e4m3fn (default accumulation)" in text
    assert "withheld: the window ran 0.5 s" in text
    assert headline_label(FP8, report["dtypes"][FP8]["headlines"]["default_accumulation"]["burst"]).startswith(
        "float8_e4m3fn (default accumulation) burst 1.4e+03 TFLOP/s")


def test_the_default_accumulation_key_builds_its_products_without_fast_accumulation_and_checks_one():
    built, checked = [], []

    def spy(dtype, m, k, n, device, **options):
        built.append((dtype, options))
        return matmul_case("float32", m, k, n, device)

    def checker(dtype, case):
        checked.append(dtype)
        return "a check"

    timer = MatmulTimer(DeviceInfo("cpu", "a CPU", None, 2**30), target_s=0.01, case_factory=spy, checker=checker)
    timer.repeat(default_key(FP8), (32, 32, 32), 2)
    timer.repeat(default_key(FP8), (32, 32, 32), 2)
    timer.repeat(FP8, (32, 32, 32), 2)
    assert built == [(FP8, {"fp8_fast_accum": False})] * 2 + [(FP8, {})]
    assert checked == [FP8] and timer.checks == {default_key(FP8): "a check"}, "checked once, the sweep checks fast"


def test_the_default_accumulation_is_measured_where_the_budget_allows_and_folded_under_its_dtype():
    notes = []
    candidates = {"bfloat16": ["shape"], FP8: ["shape"]}
    assert default_key(FP8) in run.with_fp8_default_accumulation(candidates, 17.3, notes) and notes == []
    assert list(run.with_fp8_default_accumulation(candidates, 4.0, notes)) == ["bfloat16", FP8]
    assert notes and notes[0].startswith(f"{FP8} with default accumulation not measured")
    found = {"headlines": {FP8: {"burst": "fast burst"}, default_key(FP8): {"burst": "default burst"}}}
    folded = run.fold_accumulations(found, {default_key(FP8): "its check"})["headlines"]
    assert folded == {FP8: {"burst": "fast burst",
                            "default_accumulation": {"burst": "default burst", "check": "its check"}}}



def test_the_plot_marks_both_accumulations_published_figures_fast_first():
    report, _peak = fp8_report()
    section = json.loads(json.dumps(report))["dtypes"][FP8]
    marked = plot._published_headlines(section)
    assert [(figure["kind"], figure["accumulation"]) for figure in marked] == [("burst", "fast"), ("burst", "default")]
