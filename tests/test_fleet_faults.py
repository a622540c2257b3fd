"""The fleet on real gloo ranks when something breaks inside the collective phase: an older torch's
``dist.broadcast`` (no ``group_src``: torch 2.4 and 2.5), a collective that raises on every rank, and one
rank whose device breaks half-way. What was measured reaches rank 0's JSON, and the broken rank is named.
"""

import json

import pytest

from accounting.fleet.collectives import COLLECTIVES
from accounting.fleet.run import Hooks
from tests.support import fleet_workers

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

QUICK = {"bandwidth_bytes": 8 * 2**20, "max_message_bytes": 4 * 2**20}


def _flags(document, kind):
    return [flag for flag in document["flags"] if flag["kind"] == kind]


def _rows(document, scope, collective=None):
    return [row for row in document["collectives"]
            if row["scope"] == scope and (collective is None or row["collective"] == collective)]


@pytest.fixture(scope="module")
def old_torch_world(tmp_path_factory):
    """Three ranks on two "nodes" (rank 0 alone), torch 2.4's broadcast signature, all_gather raising everywhere."""
    out = tmp_path_factory.mktemp("fleet-old-torch")
    json_path = out / "fleet.json"
    argv = ["--budget", "3", "--dtypes", "float32", "--json", str(json_path)]
    outcomes = fleet_workers.spawn_world(3, argv, out, hooks=Hooks(identity=fleet_workers.rank_0_on_another_host),
                                         overrides=QUICK, prepare=fleet_workers.torch_2_4_and_a_broken_all_gather)
    return outcomes, json.loads(json_path.read_text()) if json_path.exists() else None


def test_broadcast_works_with_torch_2_4s_signature_in_every_scope(old_torch_world):
    """torch < 2.6 has no ``group_src``: the root goes as the global rank of the group's first member
    (global rank 1 in the intra-node group [1, 2])."""
    outcomes, document = old_torch_world
    assert document is not None, outcomes[0]
    for scope, ranks in (("world", [0, 1, 2]), ("intra-node", [1, 2]), ("inter-node", [0, 1])):
        rows = _rows(document, scope, "broadcast")
        assert rows and all(row["ranks"] == ranks and row["wrong"] == 0 for row in rows), (scope, rows)
    assert not [flag for flag in _flags(document, "failed") if "broadcast" in flag["message"]]


def test_a_collective_failing_everywhere_keeps_the_others_figures(old_torch_world):
    _outcomes, document = old_torch_world
    for scope in ("world", "intra-node", "inter-node"):
        timed = {row["collective"] for row in _rows(document, scope)}
        assert timed == set(COLLECTIVES) - {"all_gather"}, (scope, timed)
    failed = _flags(document, "failed")
    assert {flag["rank"] for flag in failed} == {0, 1, 2}
    assert all("all_gather" in flag["message"] and "injected: all_gather is broken" in flag["message"]
               for flag in failed), failed
    assert not _flags(document, "left out"), "every rank failed alike: the collective is at fault, not a device"
    health = document["health"]
    assert "failed" not in [entry["state"] for entry in health["ranks"]], health["ranks"]
    assert health["state"] == "failed" and health["exit_status"] == 4
    # speed flags (a rank's copy read low on a loaded machine) may degrade a rank; only the collective fails
    assert {(reason["device"], reason["code"]) for reason in health["reasons"] if reason["state"] == "failed"} == {
        (f"{scope} all_gather", "collective-failed") for scope in ("world", "intra-node", "inter-node")}


@pytest.fixture(scope="module")
def broken_rank_world(tmp_path_factory):
    """Three ranks; rank 2's device breaks (sticky) when all_gather begins, after all_reduce was timed."""
    out = tmp_path_factory.mktemp("fleet-broken-rank")
    json_path = out / "fleet.json"
    argv = ["--budget", "3", "--dtypes", "float32", "--json", str(json_path)]
    outcomes = fleet_workers.spawn_world(3, argv, out, hooks=Hooks(device_fault=fleet_workers.break_rank_2_at_all_gather),
                                         overrides=QUICK, timeout_s=120)
    return outcomes, json.loads(json_path.read_text()) if json_path.exists() else None


def test_the_other_ranks_time_every_collective_without_the_broken_one(broken_rank_world):
    outcomes, document = broken_rank_world
    assert document is not None, outcomes
    assert [outcome and outcome["status"] for outcome in outcomes] == [4, 0, 0], outcomes  # rank 2's device failed
    full = {row["collective"] for row in _rows(document, "world") if row["ranks"] == [0, 1, 2]}
    assert full == {"all_reduce"}, "what all three measured before the break is kept"
    rest = {row["collective"] for row in _rows(document, "world") if row["ranks"] == [0, 1]}
    assert rest == set(COLLECTIVES) - full, "ranks 0 and 1 went on with the rest, in a group of their own"
    assert all(row["wrong"] == 0 for row in document["collectives"])


def test_the_broken_rank_is_named_in_the_json_and_the_text(broken_rank_world):
    outcomes, document = broken_rank_world
    broken = fleet_workers.BROKEN_RANK
    assert [flag["rank"] for flag in _flags(document, "left out")] == [broken]
    failed = _flags(document, "failed")
    assert failed and {flag["rank"] for flag in failed} == {broken}
    assert any("all_gather" in flag["message"] and "illegal memory access" in flag["message"] for flag in failed)
    assert any("probing its device" in flag["message"] for flag in failed), "the sticky error fails the probe too"
    states = [entry["state"] for entry in document["health"]["ranks"]]
    assert states[broken] == "failed" and "failed" not in states[:broken], states  # the others: this CPU's speed
    lost = document["health"]["ranks"][broken]["reasons"]
    assert lost[0]["code"] == "lost" and "illegal memory access" in lost[0]["text"]
    line = next(line for line in outcomes[0]["stdout"].splitlines() if line.strip().startswith(f"{broken}  "))
    assert "left out" in line and "failed" in line
