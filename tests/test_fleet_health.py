"""The fleet's health on crafted documents: each rank's state from its report's health and the fleet's flags, rolled up
per node and for the fleet (worst wins, reasons kept), its text, and the exit statuses the command returns.

The rank records are built here; each rank's ``report["health"]`` by the report's own code
(:func:`accounting.report.health_section.health_document`), as a rank's ``build_report`` makes it.
"""

import argparse
import io
import json

import pytest
import torch

from accounting.__main__ import build_parser
from accounting.console import load_pyplot
from accounting.errors import AccountingError
from accounting.fleet import cli, collectives, health, launch, plot, run, verdict
from accounting.fleet.gather import FleetStopped
from accounting.fleet.levels import fleet_budget_s
from accounting.fleet.render import render
from accounting.fleet.results import document
from accounting.health.states import Reason, Verdict, roll_up, worst
from accounting.report.checks import parse_injected_fault
from accounting.report.health_section import health_document
from tests.support.cli_runs import fleet_bad_input

SETTINGS = {"world_size": 2, "backend": "nccl", "budget_s": 60.0, "dtypes": None, "straggler_fraction": 0.9,
            "min_busbw_gbps": None, "barrier_timeout_s": 30.0, "slow_rank": None}


def report_health(device: str, *reasons: tuple, unchecked=()) -> dict:
    """A rank's report health, as ``build_report`` writes it: ``reasons`` as ``(state, code, text)``."""
    found = tuple(Reason(state, device, code, text) for state, code, text in reasons)
    verdict = Verdict(device, worst(reason.state for reason in found), found, tuple(unchecked))
    return health_document(roll_up("node", [verdict]))


def record(rank: int, *, host="node-a", tflops=700.0, copy=3e12, reasons=(), wrong=0, errors=(), report=True,
           telemetry=None, ranks=(0, 1)):
    """A GPU rank's record: identity, a report with one dtype and its health, one all_reduce row."""
    device = f"cuda:{rank}"
    label = f"{device} (GPU-{rank}, PCI 0000:0{rank}:00.0)"
    section = {"best": {"flops_per_s": tflops * 1e12}, "mfu": tflops / 1000, "floor": 0.3,
               "verdict": {"status": "healthy", "message": "ok"}}
    timed = {**collectives.Timed("all_reduce", 2**20, 1e-3, 5, wrong).as_dict(), "ranks": list(ranks)}
    return {"rank": rank, "identity": {"rank": rank, "host": host, "kind": "cuda", "device": device,
                                       "uuid": f"GPU-{rank}", "pci_bus_id": f"0000:0{rank}:00.0", "name": "H100",
                                       "driver": "550", "runtime": "CUDA 12.4", "torch": "2.5.1",
                                       "memory_bytes": 80 * 2**30},
            "report": {"dtypes": {"bfloat16": section}, "bandwidth": {"measured_bytes_per_s": copy},
                       "machine": {}, "health": report_health(label, *reasons)} if report else None,
            "telemetry": telemetry or {}, "collectives": {"world": {"ranks": list(ranks), "results": [timed]}},
            "errors": list(errors)}


def fleet(records, *, hung=(), strict=False, **settings):
    return document(records, settings={**SETTINGS, "world_size": len(records), "strict": strict, **settings},
                    elapsed_s=1.0, hung=hung)


def states(document_):
    return [entry["state"] for entry in document_["health"]["ranks"]]


WRONG_PRODUCT = ("failed", "wrong-result", "bfloat16 256x256x256 product wrong: row 3, columns 0-15")


def test_a_wrong_product_fails_its_rank_alone_and_the_others_figures_are_kept():
    found = fleet([record(0), record(1, reasons=[WRONG_PRODUCT])])
    assert states(found) == ["healthy", "failed"]
    assert found["health"]["state"] == "failed" and found["health"]["exit_status"] == 4
    reason = found["health"]["reasons"][0]
    assert reason["device"] == "rank 1 (node-a cuda:1, GPU-1, PCI 0000:01:00.0)" and reason["code"] == "wrong-result"
    assert found["ranks"][1]["report"]["dtypes"]["bfloat16"]["best"]["flops_per_s"] > 0, "its figures are kept"
    assert found["ranks"][1]["health"]["state"] == "failed" and found["ranks"][0]["health"]["state"] == "healthy"
    json.dumps(found, allow_nan=False)


def test_the_text_names_the_failed_device_with_its_reason_and_the_state_per_rank():
    text = render(fleet([record(0), record(1, reasons=[WRONG_PRODUCT])]))
    assert "Health: failed (exit status 4)" in text
    assert "node node-a: failed (ranks 0, 1: 1 failed, 1 healthy)" in text
    assert f"failed: rank 1 (node-a cuda:1, GPU-1, PCI 0000:01:00.0): {WRONG_PRODUCT[2]}" in text
    rank_lines = [line.split() for line in text.splitlines() if line.strip().startswith(("0  ", "1  "))]
    assert [line[-1] for line in rank_lines] == ["healthy", "failed"]


def test_nodes_roll_up_their_ranks_and_the_fleet_its_nodes():
    records = [record(0, host="node-a"), record(1, host="node-a"), record(2, host="node-b", ranks=(0, 1, 2, 3)),
               record(3, host="node-b", reasons=[("degraded", "throttled", "throttled: hw_thermal_slowdown")])]
    records[2]["report"]["health"] = report_health("cuda:2", ("failed", "ecc-uncorrectable", "2 uncorrectable ECC"))
    found = fleet(records)["health"]
    assert {host: node["state"] for host, node in found["nodes"].items()} == {"node-a": "healthy", "node-b": "failed"}
    assert found["nodes"]["node-b"]["ranks"] == [2, 3]
    assert [reason["code"] for reason in found["nodes"]["node-b"]["reasons"]] == ["ecc-uncorrectable", "throttled"]
    assert found["state"] == "failed" and len(found["reasons"]) == 2


def test_a_straggler_degrades_its_rank_and_strict_makes_it_exit_3():
    lenient = fleet([record(0), record(1, tflops=400.0), record(2)])
    assert states(lenient) == ["healthy", "degraded", "healthy"]
    assert lenient["health"]["reasons"][0]["code"] == "straggler" and lenient["health"]["exit_status"] == 0
    assert fleet([record(0), record(1, tflops=400.0), record(2)], strict=True)["health"]["exit_status"] == 3
    assert "3 with --strict" in render(lenient)


def test_a_busy_rank_is_a_neighbour_not_a_degraded_device():
    busy = {"foreign_cpu_share": 0.6, "other_process_memory_bytes": 20 * 2**30}
    below = ("degraded", "mfu-below-floor", "bfloat16 below floor: MFU 0.200 < floor 0.300")
    found = fleet([record(0), record(1, tflops=200.0, copy=1e12, telemetry=busy, reasons=[below]), record(2)])
    assert [flag["kind"] for flag in found["flags"]] == [verdict.BUSY]
    assert states(found) == ["healthy", "healthy", "healthy"] and found["health"]["exit_status"] == 0
    notes = found["health"]["ranks"][1]["notes"]
    assert notes[0].startswith("busy (a neighbour, not a fault): rank 1 shared its device with other work")
    assert any(below[2] in note and "not the device's" in note for note in notes)
    assert any(line.strip().startswith("busy (a neighbour") for line in render(found).splitlines())


def test_wrong_values_in_a_collective_fail_the_rank_that_received_them():
    found = fleet([record(0, wrong=3), record(1)])
    assert states(found) == ["failed", "healthy"] and found["health"]["exit_status"] == 4
    assert "3 wrong element(s) in its world all_reduce result" in found["health"]["reasons"][0]["text"]


def test_a_rank_that_raised_while_measuring_is_a_lost_device_not_dropped():
    error = {"phase": "measuring its device", "error": "RuntimeError: CUDA error: an illegal memory access"}
    found = fleet([record(0), record(1, report=False, errors=[error])])
    assert states(found) == ["healthy", "failed"]
    reason = found["health"]["reasons"][0]
    assert reason["code"] == "lost" and reason["device"].startswith("rank 1 (node-a cuda:1")
    assert reason["text"] == "device lost: raised while measuring its device: " + error["error"]


def test_a_hung_rank_with_no_record_is_failed_and_named():
    found = fleet([record(0), None], hung=[1])
    assert states(found) == ["healthy", "failed"] and found["ranks"][1] is None
    entry = found["health"]["ranks"][1]
    assert entry["reasons"][0]["code"] == "lost" and "never reached the barrier" in entry["reasons"][0]["text"]
    assert found["health"]["nodes"][health.UNKNOWN_HOST]["ranks"] == [1]


def test_a_collective_that_raised_on_every_rank_fails_the_fleet_not_a_device():
    stop = {"collective": "all_gather", "bytes": 2**20, "ranks": [0, 1], "failed_ranks": [0, 1]}
    error = {"phase": "timing world all_gather at 1048576 B", "error": "TypeError: broken build",
             "scope": "world", "collective": "all_gather"}
    records = [record(rank, errors=[error]) for rank in (0, 1)]
    for entry in records:
        entry["collectives"]["world"]["interrupted"] = [stop]
    found = fleet(records)
    assert states(found) == ["healthy", "healthy"]
    assert found["health"]["state"] == "failed"
    assert [(reason["device"], reason["code"]) for reason in found["health"]["reasons"]] == [
        ("world all_gather", "collective-failed")]


def test_a_slow_link_degrades_the_common_end_only():
    flags = [{"kind": verdict.SLOW_LINK, "rank": None, "message": f"link {a} → {b} slow", "ranks": [a, b]}
             for a, b in ((2, 0), (0, 2), (1, 2))]
    found = health.fleet_health([record(rank) for rank in range(3)], flags)
    assert states({"health": found}) == ["healthy", "healthy", "degraded"]
    assert len(found["ranks"][2]["reasons"]) == 3
    alone = health.fleet_health([record(rank) for rank in range(3)], flags[:1])
    assert states({"health": alone}) == ["degraded", "healthy", "degraded"], "one slow pair: both ends"


def test_drift_and_a_collective_below_its_minimum_degrade():
    found = fleet([record(0), record(1), record(2)], min_busbw_gbps=10_000.0)
    assert states(found) == ["healthy"] * 3 and found["health"]["state"] == "degraded"
    assert [reason["device"] for reason in found["health"]["reasons"]] == ["interconnect"]
    records = [record(0), record(1), record(2)]
    records[2]["identity"]["driver"] = "535"
    assert states(fleet(records)) == ["healthy", "healthy", "degraded"]


def test_the_report_judges_the_floor_peak_and_product_flags_when_it_has_a_health_section():
    wrong = {"status": "wrong result", "message": "wrong result: bfloat16 64x64x64 product wrong"}
    records = [record(0), record(1, reasons=[WRONG_PRODUCT])]
    records[1]["report"]["dtypes"]["bfloat16"]["verdict"] = wrong
    found = fleet(records)
    assert [(flag["kind"], flag["rank"]) for flag in found["flags"]] == [(verdict.WRONG_PRODUCT, 1)]
    assert [reason["code"] for reason in found["health"]["ranks"][1]["reasons"]] == ["wrong-result"], "not twice"
    del records[1]["report"]["health"]
    bare = fleet(records)["health"]["ranks"][1]
    assert bare["state"] == "failed" and bare["unchecked"] == ["health: this rank's report judged none"]


def test_every_flag_kind_of_the_verdict_has_a_state_and_an_unknown_one_is_named():
    kinds = {value for name, value in vars(verdict).items() if name.isupper() and isinstance(value, str)
             and not name.endswith("_FIGURE") and name not in ("TIME_OVER_RANKS", "HEALTHY", "FLAGGED", "BUSY_ONLY")}
    assert kinds == set(health.FLAG_STATES)
    with pytest.raises(AccountingError, match="'flaky'"):
        health.flag_state("flaky")


def test_the_report_health_of_the_host_cpu_says_which_device():
    found_records = [record(0), record(1)]
    found_records[1]["report"]["health"]["reasons"] = [
        {"state": "failed", "device": "cpu", "code": "machine-check", "text": "2 machine-check exceptions"}]
    found = fleet(found_records)["health"]["reasons"]
    assert found[0]["text"] == "cpu: 2 machine-check exceptions"


# ---- the command line ---------------------------------------------------------------------------------------


def _args(**given):
    values = {"budget": None, "dtypes": None, "json_path": None, "plot_path": None, "min_busbw": None, "strict": False,
              "barrier_timeout": None, "slow_rank": None, "level": "standard", "inject_fault": None}
    return argparse.Namespace(**{**values, **given})


@pytest.mark.parametrize("reasons, strict, expected", [
    pytest.param([WRONG_PRODUCT], False, 4, id="failed"),
    pytest.param([WRONG_PRODUCT], True, 4, id="failed-strict"),
    pytest.param([("degraded", "throttled", "throttled")], False, 0, id="degraded"),
    pytest.param([("degraded", "throttled", "throttled")], True, 3, id="degraded-strict"),
    pytest.param([], True, 0, id="healthy-strict"),
])
def test_the_command_exits_as_the_report_does(reasons, strict, expected, monkeypatch):
    def run_fleet(options, launch_, **kwargs):
        return fleet([record(0), record(1, reasons=reasons)], strict=options.strict)

    monkeypatch.setattr(cli, "run_fleet", run_fleet)
    environ = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
    status = cli.run(_args(strict=strict), parser=argparse.ArgumentParser(), environ=environ, stdout=io.StringIO())
    assert status == expected


def test_a_rank_whose_barrier_failed_exits_failed(monkeypatch):
    def stopped(*args, **kwargs):
        raise FleetStopped("rank 1: the measured barrier failed")

    monkeypatch.setattr(cli, "run_fleet", stopped)
    environ = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    status = cli.run(_args(), parser=argparse.ArgumentParser(), environ=environ, stderr=io.StringIO(),
                     sleep=lambda seconds: None)
    assert status == 4


def test_the_level_and_the_fault_reach_the_options():
    args = build_parser().parse_args(["fleet", "--level", "quick", "--inject-fault", "1:bf16:flip:5:14", "--strict"])
    options = cli.options_from(args)
    assert options.level == "quick" and options.strict and options.budget_s == fleet_budget_s("quick")
    assert options.inject_fault[0] == 1 and str(options.inject_fault[1]) == "bfloat16:flip:5:14"


@pytest.mark.parametrize("argv, message", [
    pytest.param(["--inject-fault", "x:float32:flip:0:30"], "RANK a rank number, got 'x:float32:flip:0:30'", id="rank"),
    pytest.param(["--inject-fault", "0:float33:flip:0:30"], "float33", id="dtype"),
    pytest.param(["--inject-fault", "0:float32:flip:0:40"], "bit 40 is outside", id="bit"),
    pytest.param(["--inject-fault", "1:float32:flip:0:30"], "rank 1 is not a rank of this world (ranks 0..0)",
                 id="rank-range"),
    pytest.param(["--dtypes", "float32", "--inject-fault", "0:bfloat16:flip:0:14"],
                 "bfloat16 is not among the dtypes timed (float32)", id="not-timed"),
    pytest.param(["--level", "brief"], "invalid choice: 'brief'", id="level"),
])
def test_bad_fault_or_level_is_one_line_and_status_2(argv, message, capsys, monkeypatch):
    err = fleet_bad_input(argv, capsys, monkeypatch)
    assert message in err, err


# ---- what each rank is asked to do, and the plot ------------------------------------------------------------


@pytest.mark.parametrize("rank, corrupted", [pytest.param(0, False, id="other-rank"), pytest.param(1, True, id="its-rank")])
def test_the_level_strict_and_fault_reach_the_ranks_report(rank, corrupted, monkeypatch):
    seen = {}
    monkeypatch.setattr(run, "measure_rank", lambda device, **kwargs: seen.update(kwargs))
    fault = parse_injected_fault("float32:flip:5:30")
    options = run.FleetOptions(level="quick", strict=True, inject_fault=(1, fault))
    run._measure(options, launch.Launch(rank, 2, rank, 2), torch.device("cpu"), run.Hooks(), 1.0)
    assert seen["level"] == "quick" and seen["strict"] is True
    assert (seen["checker"].fault is fault) is corrupted and seen["checker"] is not None


def test_the_plot_marks_failed_ranks(tmp_path):
    pyplot = load_pyplot()
    figure, axes = pyplot.subplots()
    plot._rank_ticks(axes, [0, 1, 2], {0: "healthy", 1: "failed", 2: "degraded"})
    labels = axes.get_xticklabels()
    assert [label.get_text() for label in labels] == ["rank 0", "rank 1\nfailed", "rank 2\ndegraded"]
    assert len({labels[0].get_color(), labels[1].get_color(), labels[2].get_color()}) == 3
    pyplot.close(figure)
    path = tmp_path / "fleet.png"
    plot.write_plot(fleet([record(0), record(1, reasons=[WRONG_PRODUCT])]), str(path))
    assert path.read_bytes()[:4] == b"\x89PNG"
