"""``accounting fleet`` for real: several gloo ranks on this CPU (spawned, a FileStore, no ports), and torchrun.

The worlds are shared by the tests that read them (each costs seconds of start-up): one where
rank 1 is slowed (--slow-rank: three times the work per timed matmul), rank 2's device raises, rank 0's all_reduce results come
back corrupted and rank 1 reports another torch build; one where rank 1 never reaches the
barrier. Assertions are on what rank 0 printed, wrote and returned.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accounting.fleet.collectives import COLLECTIVES
from accounting.fleet.run import Hooks
from tests.support import fleet_workers

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
QUICK = {"bandwidth_bytes": 8 * 2**20, "max_message_bytes": 4 * 2**20, "busy_cpu_share": 0.99}
"""Small copies and messages: the tests check logic and plumbing, not this machine's speed. The busy line out of
reach: on this shared machine other work can take most of a rank's core, and a busy rank's low figures are named
busy, not straggler (``test_fleet_neighbours_distributed.py`` tests that rule)."""


@pytest.fixture(scope="module")
def faulty_world(tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet-faults")
    json_path, plot_path = out / "fleet.json", out / "fleet.png"
    hooks = Hooks(identity=fleet_workers.doctor_rank_1, before_measure=fleet_workers.fail_on_rank,
                  corrupt=fleet_workers.corrupt_rank_0_all_reduce)
    argv = ["--budget", "3", "--dtypes", "float32", "--slow-rank", "1:3", "--json", str(json_path),
            "--plot", str(plot_path), "--strict"]
    os.environ[fleet_workers.MEASURE_STARTS_ENV] = str(out)  # the spawned ranks inherit it
    try:
        outcomes = fleet_workers.spawn_world(3, argv, out, hooks=hooks, overrides=QUICK)
    finally:
        del os.environ[fleet_workers.MEASURE_STARTS_ENV]
    document = json.loads(json_path.read_text()) if json_path.exists() else None
    starts = {rank: float((out / f"start{rank}").read_text()) for rank in range(3)
                       if (out / f"start{rank}").exists()}
    return outcomes, document, plot_path, starts


def test_cpu_ranks_of_one_node_measure_one_after_the_other(faulty_world):
    """Three CPU ranks of one node on two cores: each began to measure only after the one before it had finished
    (its report's elapsed time after its start), so no rank's figures saw another rank's work."""
    _outcomes, document, _plot, starts = faulty_world
    assert document["settings"]["measuring_turns"] == 3
    assert sorted(starts) == [0, 1, 2] and starts[0] < starts[1] < starts[2]
    for rank in (0, 1):  # rank 2 raised before measuring: it has no report
        assert starts[rank] + document["ranks"][rank]["report"]["elapsed_s"] <= starts[rank + 1], (rank, starts)


def _flags(document, kind):
    return [flag for flag in document["flags"] if flag["kind"] == kind]


def test_every_rank_finishes_and_rank_0_reports(faulty_world):
    outcomes, document, _plot, _starts = faulty_world
    assert [outcome and outcome["status"] for outcome in outcomes] == [4, 0, 0], outcomes  # rank 2 failed
    assert document is not None, outcomes[0]
    assert outcomes[1]["stdout"] == outcomes[2]["stdout"] == "", "only rank 0 prints"
    assert "Ranks (best of each rank's matmul sweep)" in outcomes[0]["stdout"]


def test_the_slowed_rank_is_the_straggler_and_no_other(faulty_world):
    _outcomes, document, _plot, _starts = faulty_world
    assert {flag["rank"] for flag in _flags(document, "straggler")} == {1}, document["flags"]
    best = {rank: record["report"]["dtypes"]["float32"]["best"]["flops_per_s"]
            for rank, record in enumerate(document["ranks"]) if record["report"]}
    assert set(best) == {0, 1}
    assert best[1] < document["settings"]["straggler_fraction"] * best[0]


def test_a_rank_that_raises_reports_its_error_and_the_others_still_count(faulty_world):
    _outcomes, document, _plot, _starts = faulty_world
    failed = _flags(document, "failed")
    assert [flag["rank"] for flag in failed] == [2]
    assert "injected failure: this rank's device is broken" in failed[0]["message"]
    assert document["ranks"][2]["report"] is None
    lost = document["health"]["ranks"][2]
    assert lost["state"] == "failed" and lost["reasons"][0]["code"] == "lost", lost
    assert "injected failure: this rank's device is broken" in lost["reasons"][0]["text"]
    assert document["ranks"][2]["collectives"]["world"]["results"], "the failed rank still joins the collectives"
    assert document["ranks"][0]["report"]["dtypes"]["float32"]["best"] is not None


def test_corrupted_results_are_counted_where_they_happened(faulty_world):
    _outcomes, document, _plot, _starts = faulty_world
    rows = document["collectives"]
    assert {row["collective"] for row in rows} == set(COLLECTIVES)
    for row in rows:
        expected = fleet_workers.CORRUPTED_ELEMENTS if row["collective"] == "all_reduce" else 0
        assert row["wrong"] == expected, row
        assert set(row["seconds_by_rank"]) == {"0", "1", "2"}
    wrong = _flags(document, "wrong values")
    assert wrong and all("all_reduce" in flag["message"] for flag in wrong)
    assert document["health"]["ranks"][0]["state"] == "failed", "rank 0 received the wrong values"
    assert any(reason["code"] == "wrong-values" for reason in document["health"]["ranks"][0]["reasons"])


def test_configuration_drift_names_the_doctored_rank(faulty_world):
    _outcomes, document, _plot, _starts = faulty_world
    drift = _flags(document, "drift")
    assert [(flag["rank"], flag["subject"]) for flag in drift] == [(1, "torch")]
    assert fleet_workers.DOCTORED_TORCH in drift[0]["message"]


def test_json_holds_every_ranks_raw_figures_and_the_plot_is_written(faulty_world):
    _outcomes, document, plot_path, _starts = faulty_world
    assert document["schema"] == "accounting-fleet/1"
    assert {"settings", "ranks", "collectives", "hung_ranks", "flags", "notes", "verdict", "elapsed_s"} <= set(document)
    assert document["settings"]["world_size"] == 3 and document["settings"]["backend"] == "gloo"
    for rank, record in enumerate(document["ranks"]):
        assert record["rank"] == rank and record["identity"]["rank"] == rank
        assert len(record["identity"]["cpus"]) == 1, "each CPU rank pinned to its share: one of two cores"
    measured = document["ranks"][0]["report"]["dtypes"]["float32"]["measurements"]
    assert measured and all(row["seconds"] > 0 for row in measured)
    assert plot_path.read_bytes()[:8] == PNG_SIGNATURE


@pytest.fixture(scope="module")
def hung_world(tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet-hang")
    hooks = Hooks(before_barrier=fleet_workers.hang_rank_1)
    argv = ["--budget", "1.5", "--dtypes", "float32", "--barrier-timeout", "3", "--json", str(out / "fleet.json")]
    outcomes = fleet_workers.spawn_world(2, argv, out, hooks=hooks, overrides=QUICK, grace_s=2)
    return outcomes, json.loads((out / "fleet.json").read_text()) if (out / "fleet.json").exists() else None


def test_a_rank_that_never_reaches_the_barrier_is_named(hung_world):
    outcomes, document = hung_world
    assert outcomes[0] is not None and outcomes[0]["status"] == 4, outcomes  # a hung rank failed: always 4
    assert outcomes[1] is None, "the hung rank had to be killed"
    assert document["hung_ranks"] == [1]
    assert [flag["rank"] for flag in _flags(document, "hung")] == [1]
    assert document["health"]["ranks"][1]["state"] == "failed" and document["health"]["state"] == "failed"
    assert "did not reach the measured barrier within 3 s" in outcomes[0]["stdout"]


def test_rank_0_still_prints_its_figures_when_another_hangs(hung_world):
    outcomes, document = hung_world
    assert document["ranks"][0]["report"]["dtypes"]["float32"]["best"] is not None
    assert document["ranks"][1] is None, "the hung rank left no record"
    rank_line = next(line for line in outcomes[0]["stdout"].splitlines() if line.strip().startswith("1  "))
    assert rank_line.split()[-2:] == ["hung", "failed"]


@pytest.mark.slow
def test_torchrun_two_ranks_end_to_end(tmp_path):
    """The real launcher: torchrun --standalone, two gloo ranks, the console module as users start it."""
    json_path = tmp_path / "fleet.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
               "-m", "accounting", "fleet", "--budget", "4", "--dtypes", "float32", "--json", str(json_path)]
    result = subprocess.run(command, check=False, capture_output=True, text=True, cwd=ROOT, timeout=240,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads(json_path.read_text())
    assert [record["identity"]["rank"] for record in document["ranks"]] == [0, 1]
    assert {row["collective"] for row in document["collectives"]} == set(COLLECTIVES)
    assert all(row["wrong"] == 0 for row in document["collectives"])
    assert result.stdout.count("Fleet: 2 rank(s) (gloo)") == 1, "rank 0 alone prints"
