"""The fleet on the recorded H200 rank: its figures pass the physical check, an impossible one is flagged, and fp8
columns name their accumulation.

Truths: the recorded ``fleet.json`` (one H200 rank; its report's rows and its identity) and the recorded report's
793 TFLOP/s "at 1350 MHz" figure (``report-bf16-budget60.json``), which no H200 can reach at that clock
(132 SMs × 4096 FLOP/clock × 1.35 GHz = 730 TFLOP/s).
"""

import copy

from accounting.fleet.health import fleet_health
from accounting.fleet.render import rank_rows
from accounting.fleet.verdict import IMPOSSIBLE, judge
from accounting.report.results import dtype_section
from accounting.report.sweep import MatmulMeasurement
from tests.support import h200_report_replay as recorded


def recorded_rank():
    return copy.deepcopy(recorded.load("fleet.json")["ranks"][0])


def test_the_recorded_ranks_figures_pass_the_physical_check():
    found = judge([recorded_rank()], fraction=0.9)
    assert not [flag for flag in found["flags"] if flag["kind"] == IMPOSSIBLE]


def test_a_rank_whose_best_figure_is_793_tflops_at_1350_mhz_is_flagged_impossible():
    rank = recorded_rank()
    old = recorded.load("report-bf16-budget60.json")["dtypes"]["bfloat16"]["headlines"]["sustained"]
    m, k, n = old["shape"]
    done = MatmulMeasurement("bfloat16", m, k, n, old["flops"], old["flops"] / old["flops_per_s"], 0.0, 9,
                             telemetry=old["telemetry"])
    major, minor = (int(part) for part in rank["identity"]["compute_capability"].split("."))
    section = rank["report"]["dtypes"]["bfloat16"]
    rank["report"]["dtypes"]["bfloat16"] = dtype_section(
        "bfloat16", [done], peak=section["peak_flops_per_s"], floor=section["floor"], bandwidth=None,
        spec_bandwidth=None, physical=((major, minor), recorded.physical()[1]))
    flags = [flag for flag in judge([rank], fraction=0.9)["flags"] if flag["kind"] == IMPOSSIBLE]
    assert [flag["subject"] for flag in flags] == ["bfloat16"]
    assert flags[0]["message"].startswith("rank 0 bfloat16: best 793 TFLOP/s fails the physical check: 793.1 TFLOP/s")
    # a clock read at the wrong moment is not a worse device: the rank's state is what its report found
    before = fleet_health([recorded_rank()], [])["ranks"][0]["state"]
    assert fleet_health([rank], flags)["ranks"][0]["state"] == before


def test_the_fleets_fp8_column_names_its_accumulation():
    document = recorded.load("fleet.json")
    header, _rows = rank_rows(document)
    assert "float8_e4m3fn (fast accumulation) TFLOP/s" in header
    assert "bfloat16 TFLOP/s" in header
