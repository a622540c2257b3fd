"""The figures besides TFLOP/s, the point-to-point matrix and busy neighbours, with real gloo ranks on this CPU.

Three small worlds (spawned ranks, a FileStore, as in ``test_fleet_distributed.py``): rank 1's device copy
reads three times as long (its matmuls untouched); rank 2's path to rank 0 is slowed before each transfer;
CPU-bound processes pinned to rank 1's core. The machine is shared (2 cores, other work running): the first
two worlds set ``busy_cpu_share`` out of reach so that the load of the day cannot turn their flags into busy
ones (the busy rule is the third world's subject), the first lowers its straggler line for the same reason,
and the third skips where other work alone made rank 0 busy.
"""

import json
import os
import subprocess
import sys

import pytest

from accounting.fleet import verdict
from accounting.fleet.launch import cpu_share
from accounting.fleet.run import Hooks
from tests.support import fleet_workers

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

QUICK = {"bandwidth_bytes": 8 * 2**20, "max_message_bytes": 4 * 2**20, "link_bytes": 2**20}
NOT_BUSY = {"busy_cpu_share": 0.99}
NOT_A_STRAGGLER = {"straggler_fraction": 0.5}
"""The slowed copy's world: two ranks sharing 2 cores read their matmuls up to a fifth apart, so the straggler
line sits where only a copy slowdown leaking into the matmul figure (3×) could reach it."""
FIGURE_KINDS = {verdict.STRAGGLER, verdict.SLOW_MEMORY, verdict.OFTEN_SLOWEST, verdict.SLOW_LINK, verdict.BUSY}
NEIGHBOURS = 2
"""Spinning processes pinned to rank 1's core: with rank 1 they share it three ways, about 2/3 theirs."""
BUSY_SHARE = 0.4
"""The third world's busy line: below the neighbours' ~2/3 of rank 1's core, above what this machine's other work
usually takes of rank 0's."""


def _world(tmp_path_factory, name, ranks, *, budget, hooks=None, overrides=None, prepare=None):
    out = tmp_path_factory.mktemp(name)
    argv = ["--budget", str(budget), "--dtypes", "float32", "--json", str(out / "fleet.json")]
    outcomes = fleet_workers.spawn_world(ranks, argv, out, hooks=hooks, overrides={**QUICK, **(overrides or {})},
                                         prepare=prepare)
    path = out / "fleet.json"
    assert path.exists(), outcomes[0]
    return outcomes, json.loads(path.read_text())


def _figure_flags(document, rank):
    return {flag["kind"] for flag in document["flags"] if flag["kind"] in FIGURE_KINDS
            and (flag["rank"] == rank or rank in flag.get("ranks", ()))}


@pytest.fixture(scope="module")
def slow_copy_world(tmp_path_factory):
    return _world(tmp_path_factory, "fleet-slow-copy", 2, budget=3, overrides={**NOT_BUSY, **NOT_A_STRAGGLER},
                  prepare=fleet_workers.slow_copy_on_rank_1)


def test_a_slowed_copy_is_flagged_on_bandwidth_only(slow_copy_world):
    outcomes, document = slow_copy_world
    assert _figure_flags(document, 1) == {verdict.SLOW_MEMORY}, document["flags"]
    assert verdict.SLOW_MEMORY not in _figure_flags(document, 0)
    figures = document["figures"]
    assert figures["1"]["memory_bytes_per_s"] < 0.85 * figures["0"]["memory_bytes_per_s"]
    assert "slow memory: rank 1 memory bandwidth" in outcomes[0]["stdout"]


@pytest.fixture(scope="module")
def slow_link_world(tmp_path_factory):
    return _world(tmp_path_factory, "fleet-slow-link", 3, budget=5, overrides=NOT_BUSY,
                  hooks=Hooks(link_path=fleet_workers.slow_link_between_0_and_2))


def test_a_slowed_pair_is_named_as_the_slow_link_with_both_ends(slow_link_world):
    outcomes, document = slow_link_world
    slow = [tuple(flag["ranks"]) for flag in document["flags"] if flag["kind"] == verdict.SLOW_LINK]
    assert slow and set(slow) <= {(0, 2), (2, 0)}, document["flags"]
    timed = {(row["src"], row["dst"]) for row in document["links"]}
    assert {(0, 2), (2, 0)} <= timed and all(row["wrong"] == 0 for row in document["links"])
    assert "slow link: intra-node link rank" in outcomes[0]["stdout"] and "Point-to-point links" in outcomes[0]["stdout"]


@pytest.fixture(scope="module")
def neighbour_world(tmp_path_factory):
    cpu = cpu_share(1, 2, os.sched_getaffinity(0))[0]
    code = f"from tests.support.fleet_workers import spin_on; spin_on({cpu})"
    spinners = [subprocess.Popen([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(__file__)))
                for _ in range(NEIGHBOURS)]
    try:
        return cpu, _world(tmp_path_factory, "fleet-neighbour", 2, budget=3, overrides={"busy_cpu_share": BUSY_SHARE})
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def test_a_neighbour_pinned_to_one_ranks_core_tags_that_rank_busy_and_no_other(neighbour_world):
    cpu, (outcomes, document) = neighbour_world
    found = {rank: document["figures"][str(rank)]["neighbours"] for rank in (0, 1)}
    assert found[1]["where"] == f"CPU {cpu}" and found[1]["share"] > BUSY_SHARE, found
    if found[0]["share"] is not None and found[0]["share"] > BUSY_SHARE:
        pytest.skip(f"other work on this machine took {found[0]['share']:.0%} of rank 0's core: it was busy too")
    busy = [flag for flag in document["flags"] if flag["kind"] == verdict.BUSY]
    assert [flag["rank"] for flag in busy] == [1], document["flags"]
    assert busy[0]["message"].startswith("rank 1 shared its device with other work")
    assert verdict.STRAGGLER not in _figure_flags(document, 1) and verdict.SLOW_MEMORY not in _figure_flags(document, 1)
    assert "rank 1 shared its device with other work" in outcomes[0]["stdout"]
