"""Bringing every rank's figures to rank 0, and naming the ranks that never arrive.

:func:`checkpoint` is where all ranks meet: each first leaves its record in the
rendezvous store, then waits in a gloo ``monitored_barrier`` with a timeout. When every
rank arrives, the records travel as one ``all_gather_object`` on the gloo group. When
one does not, rank 0's barrier names it (``Ranks 2 failed to pass monitoredBarrier``)
instead of hanging the job: rank 0 raises :class:`RanksHung` carrying the hung ranks and
the records the others left in the store, so it can still print what they measured;
every other rank raises :class:`FleetStopped`.

A rank that *raises* while measuring is no fault here: it records the error and arrives
as usual, so its error reaches rank 0 with everyone else's figures.

>>> hung_ranks("[Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 2000 ms")
[1, 3]
"""

import datetime
import json
import re

import torch.distributed as dist

RECORD_KEY = "record/{stage}/{rank}"

_HUNG = re.compile(r"Ranks? ([0-9, ]+) failed to pass monitoredBarrier")


class RanksHung(RuntimeError):
    """Raised on rank 0: ``hung`` ranks did not reach the barrier within the timeout."""

    def __init__(self, hung: list[int], records: list, message: str):
        super().__init__(message)
        self.hung = hung
        self.records = records


class FleetStopped(RuntimeError):
    """Raised on the other ranks when the barrier failed: rank 0 reports which rank hung."""


def hung_ranks(message: str) -> list[int]:
    """The ranks a failed ``monitored_barrier`` names (empty when the message names none)."""
    match = _HUNG.search(message)
    if not match:
        return []
    return sorted(int(rank) for rank in match.group(1).replace(" ", "").split(",") if rank)


def posted_records(store, stage: str, world_size: int) -> list:
    """The records ranks left in ``store`` at ``stage`` (``None`` for a rank that left none)."""
    records = []
    for rank in range(world_size):
        key = RECORD_KEY.format(stage=stage, rank=rank)
        records.append(json.loads(store.get(key)) if store.check([key]) else None)
    return records


def checkpoint(record: dict, *, stage: str, store, group, rank: int, world_size: int, timeout_s: float,
               share=None) -> list:
    """Meet every rank at ``stage``: post ``record`` to ``store``, pass the barrier, then return every
    rank's ``share`` (default: its ``record``), by rank, from one ``all_gather_object``.

    Raises :class:`RanksHung` on rank 0 and :class:`FleetStopped` elsewhere when a rank does
    not arrive within ``timeout_s``.
    """
    store.set(RECORD_KEY.format(stage=stage, rank=rank), json.dumps(record, default=str))
    try:
        dist.monitored_barrier(group=group, timeout=datetime.timedelta(seconds=timeout_s), wait_all_ranks=True)
    except RuntimeError as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if rank == 0:
            hung = hung_ranks(str(error))
            raise RanksHung(hung, posted_records(store, stage, world_size),
                            f"rank(s) {', '.join(map(str, hung)) or '?'} did not reach the {stage} barrier "
                            f"within {timeout_s:g} s") from None
        raise FleetStopped(f"rank {rank}: the {stage} barrier failed ({message}); rank 0 names the rank "
                           "that hung") from None
    gathered = [None] * world_size
    dist.all_gather_object(gathered, record if share is None else share, group=group)
    return gathered
