"""Point-to-point links timed pair by pair, so a slow link is named with both its ends.

A collective runs at the pace of its slowest link and names no link (nccl-tests cannot either);
NVIDIA's ``p2pBandwidthLatencyTest`` and cluster acceptance scripts time each pair. Here:

- **within a node**, every pair of its ranks, both directions: the *circle method* of a round-robin
  tournament (:func:`pair_rounds`) splits the ``n(n−1)/2`` pairs into ``n−1`` rounds of disjoint pairs
  (one bye per round for odd ``n``), and the pairs of a round, on every node at once, are timed together;
- **across nodes**, the nodes' first ranks (leaders) along a ring (:func:`ring_rounds`): two rounds
  (three for an odd number of nodes) time every leader with both of its ring neighbours, so a bad node
  shows in both of its links, as acceptance tests bisect a bad node, at a cost that does not grow with
  the number of nodes.

Intra- and inter-node rounds alternate (:func:`plan_links`), and a round runs only if the slowest
round so far still fits the budget: where the budget is short the matrix is *sampled* (every rank is
in one pair per round it reaches), and the document says which rounds ran.

A pair times one direction at a time, the lower rank sending first: each end makes exactly the
matching call (``send`` on one, ``recv`` on the other, global ranks of the device group — NCCL on
GPUs, gloo on CPUs), so no pair can deadlock and pairs of a round never wait for each other. As
with the collectives, every step's local work runs in a ``try`` and the whole world agrees over gloo
(:func:`accounting.fleet.agreement.agree`) before anyone enters the next NCCL call: a rank that failed
is named, its pairs are skipped by both ends, the others go on.

>>> pair_rounds([0, 1, 2, 3])
[[(0, 3), (1, 2)], [(0, 2), (1, 3)], [(0, 1), (2, 3)]]
>>> ring_rounds([0, 8, 16, 24])
[[(0, 8), (16, 24)], [(8, 16), (0, 24)]]
"""

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from accounting.fleet.agreement import agree
from accounting.fleet.collectives import (
    describe,
    iterations_for,
    largest_message,
    pattern,
)
from accounting.hardware.clocks import clock_for, synchronize

LINK_BYTES = {"cuda": 2**28, "cpu": 2**22}
"""Bytes per transfer: 256 MiB on a GPU (NVLink and a 400 Gb/s rail reach their plateau well below it;
``p2pBandwidthLatencyTest`` moves 40 MB), 4 MiB on a CPU (gloo over loopback TCP plateaus at a few MiB)."""
INTRA, INTER = "intra-node", "inter-node"


@dataclass(frozen=True)
class Round:
    """Pairs ``(low, high)`` of global ranks timed at the same time; ``scope`` is ``intra-node`` or ``inter-node``."""

    scope: str
    pairs: list

    def peer_of(self, rank: int) -> int | None:
        """The rank ``rank`` is paired with in this round (``None``: a bye)."""
        for low, high in self.pairs:
            if rank in (low, high):
                return high if rank == low else low
        return None


def pair_rounds(ranks) -> list[list[tuple[int, int]]]:
    """Every pair of ``ranks`` exactly once, in ``n−1`` rounds (``n`` rounds for odd ``n``) of disjoint pairs.

    The circle method: the first rank stays, the others rotate one place a round.

    >>> rounds = pair_rounds(range(5))
    >>> len(rounds), sorted(pair for round_ in rounds for pair in round_) == [(a, b) for a in range(5) for b in range(a + 1, 5)]
    (5, True)
    """
    ranks = list(ranks)
    if len(ranks) < 2:
        return []
    seats = ranks + ([None] if len(ranks) % 2 else [])
    rounds = []
    for _ in range(len(seats) - 1):
        half = len(seats) // 2
        pairs = [(seats[i], seats[-1 - i]) for i in range(half)]
        rounds.append([tuple(sorted(pair)) for pair in pairs if None not in pair])
        seats = [seats[0], seats[-1], *seats[1:-1]]
    return rounds


def ring_rounds(ranks) -> list[list[tuple[int, int]]]:
    """The links of a ring through ``ranks`` (each to the next, the last to the first), in rounds of disjoint pairs.

    >>> ring_rounds([3, 5]), ring_rounds([0, 1, 2])
    ([[(3, 5)]], [[(0, 1)], [(1, 2)], [(0, 2)]])
    """
    ranks = list(ranks)
    if len(ranks) < 2:
        return []
    if len(ranks) == 2:
        return [[tuple(sorted(ranks))]]
    links = [(ranks[i], ranks[(i + 1) % len(ranks)]) for i in range(len(ranks))]
    rounds = [[], []] + ([[]] if len(ranks) % 2 else [])
    for index, link in enumerate(links):
        slot = 2 if len(ranks) % 2 and index == len(links) - 1 else index % 2
        rounds[slot].append(tuple(sorted(link)))
    return rounds


def plan_links(hosts) -> list[Round]:
    """The rounds for ranks on ``hosts`` (the host of each rank, by rank): each node's pairs (round ``i`` of
    every node together) alternating with the ring of node leaders.

    >>> [(round_.scope, round_.pairs) for round_ in plan_links(["a", "a", "b", "b"])]
    [('intra-node', [(0, 1), (2, 3)]), ('inter-node', [(0, 2)])]
    """
    nodes: dict = {}
    for rank, host in enumerate(hosts):
        nodes.setdefault(host, []).append(rank)
    per_node = [pair_rounds(ranks) for ranks in nodes.values()]
    intra = []
    for index in range(max((len(rounds) for rounds in per_node), default=0)):
        intra.append(Round(INTRA, [pair for rounds in per_node if index < len(rounds) for pair in rounds[index]]))
    inter = [Round(INTER, pairs) for pairs in ring_rounds([ranks[0] for ranks in nodes.values()])]
    plan = []
    for index in range(max(len(intra), len(inter))):
        plan += [rounds[index] for rounds in (intra, inter) if index < len(rounds)]
    return plan


def link_bytes(device, free_bytes: int) -> int:
    """Bytes per transfer on ``device``: :data:`LINK_BYTES` of its kind, less where free memory is short
    (the collectives' rule, :func:`accounting.fleet.collectives.largest_message`).

    >>> link_bytes(torch.device("cpu"), 64 * 2**30) == LINK_BYTES["cpu"]
    True
    """
    return min(LINK_BYTES.get(device.type, LINK_BYTES["cpu"]), largest_message(device, free_bytes))


class Transfer:
    """One end of a pair's direction: the buffer, the matching call, the check of what arrived."""

    def __init__(self, nbytes: int, *, rank: int, peer: int, sending: bool, group, device):
        self.rank, self.peer, self.sending, self.group, self.device = rank, peer, sending, group, device
        count = nbytes // 4
        self.expected = pattern(count, peer, device) if not sending else None
        self.buffer = pattern(count, rank, device) if sending else torch.empty(count, dtype=torch.float32,
                                                                                device=device)

    def run(self) -> None:
        if self.sending:
            dist.send(self.buffer, dst=self.peer, group=self.group)
        else:
            dist.recv(self.buffer, src=self.peer, group=self.group)

    def reset(self) -> None:
        """A sentinel in the receive buffer, so a transfer that never landed is counted wrong."""
        if not self.sending:
            self.buffer.fill_(-1.0)

    def wrong(self) -> int:
        return 0 if self.sending else int((self.buffer != self.expected).sum().item())


def time_links(plan: list[Round], *, rank: int, device, group, control, budget_s: float, nbytes: int,
               path=None, fault=None, excluded=(), clock=time.monotonic) -> dict:
    """Time this rank's pairs of ``plan`` within ``budget_s``; every rank of the world calls it, in step.

    ``group``: the device group (NCCL on GPUs, gloo on CPUs), ``control`` the world's gloo group. Returns
    this rank's record: ``bytes``, ``rounds`` (planned), ``rounds_run``, ``results`` (one per direction this
    rank took part in: ``scope``, ``src``, ``dst``, ``seconds`` per transfer at this end, ``iterations``,
    ``wrong`` elements received), ``skipped`` (pairs left out because an end failed) and ``errors``.
    ``path(rank, peer)`` (tests only) runs before each of this rank's transfers, as a slow link's
    path would delay them; ``fault(rank, peer)`` may raise, as a broken device does.
    """
    record = {"bytes": nbytes, "rounds": len(plan), "rounds_run": 0, "results": [], "skipped": [], "errors": []}
    failed: set = set(excluded)
    spent, slowest_round = 0.0, None
    target = budget_s / max(4 * len(plan), 1)

    def step(work, *args, width=0, **kwargs):
        """``work(*args, **kwargs)`` here, then the world's agreement: ``(result, the agreed maxima)``."""
        try:
            result, ok = work(*args, **kwargs), True
        except Exception as error:  # noqa: BLE001 - the world hears of it before anyone's next call
            result, ok = None, False
            record["errors"].append(describe(error))
        agreed = agree(ok, result if ok and width else [0.0] * width, group=control)
        failed.update(agreed.failed)
        return result, agreed.values

    for round_ in plan:
        if slowest_round is not None and spent + slowest_round > budget_s:
            break
        started, connecting = clock(), 0.0
        peer = round_.peer_of(rank)
        active = peer is not None and not failed & {rank, peer}

        def prepare(peer=peer, active=active):
            if not active:
                return None
            if fault is not None:
                fault(rank, peer)
            low, high = sorted((rank, peer))
            return [Transfer(nbytes, rank=rank, peer=peer, sending=rank == src, group=group, device=device)
                    for src in (low, high)]

        transfers, _ = step(prepare)
        for direction in range(2):
            live = transfers is not None and not failed & {rank, peer}
            transfer = transfers[direction] if live else None

            def warm(transfer=transfer):
                """Two calls: the first connects the pair (NCCL makes a pair's communicator on its first
                send/recv; that is left out of the budget, as the collectives' first call is); the second
                sets the number of timed calls."""
                if transfer is None:
                    return [0.0, 0.0]
                seconds = []
                for _ in range(2):
                    before = time.perf_counter()
                    _call(transfer, path)
                    synchronize(device)
                    seconds.append(time.perf_counter() - before)
                return seconds

            _, (connect, per_call) = step(warm, width=2)
            connecting += connect
            live = transfer is not None and not failed & {rank, peer}

            def timed(transfer=transfer if live else None, iterations=None, scope=round_.scope, peer=peer):
                if transfer is None:
                    return [0.0]
                transfer.reset()
                synchronize(device)
                marks = clock_for(device)
                start = marks.mark()
                for _ in range(iterations):
                    _call(transfer, path)
                end = marks.mark()
                seconds = marks.elapsed(start, end) / iterations
                record["results"].append({"scope": scope, "src": rank if transfer.sending else peer,
                                          "dst": peer if transfer.sending else rank, "seconds": seconds,
                                          "iterations": iterations, "wrong": transfer.wrong()})
                return [seconds]

            step(timed, width=1, iterations=iterations_for(per_call, target))
        transfers = None
        record["skipped"] += [list(pair) for pair in round_.pairs if failed & set(pair)]
        _, (elapsed,) = step(lambda started=started, connecting=connecting: [clock() - started - connecting], width=1)
        slowest_round = max(slowest_round or 0.0, elapsed)
        spent += elapsed
        record["rounds_run"] += 1
    return record


def _call(transfer: Transfer, path) -> None:
    if path is not None:
        path(transfer.rank, transfer.peer)
    transfer.run()
