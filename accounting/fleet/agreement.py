"""Which ranks can still take part in a collective, agreed over gloo before anyone enters one.

An NCCL collective only returns when every rank of its group has called it. A rank whose
device broke (a sticky CUDA error, an out-of-memory, NCCL failing on that GPU) never calls
it, and its peers wait inside NCCL until the group's timeout, when NCCL's watchdog ends
every process — rank 0 too, before it prints anything. So no rank enters an NCCL call
before the group has agreed that everyone is ready: each rank does its local work (a
probe of its device, allocating and filling buffers, checking a result) inside a ``try``,
then every rank of the group exchanges one ok-flag and a few figures on a *gloo* group
(:func:`agree`), which works whatever state the GPUs are in. Ranks that failed are named
to all; the others go on without them (:mod:`accounting.fleet.run` builds new groups).

>>> probe("cpu")
>>> Agreement(failed=[], values=[0.5]).ok
True
"""

from dataclasses import dataclass

import torch
import torch.distributed as dist

from accounting.hardware.clocks import synchronize

PROBE_ELEMENTS = 1024


def probe(device, *, fault=None) -> None:
    """Raise if ``device`` cannot run a small computation to completion (a broken GPU, a sticky error).

    ``fault()`` (tests only) may raise first, as a broken device does.
    """
    if fault is not None:
        fault()
    values = torch.arange(PROBE_ELEMENTS, dtype=torch.float32, device=device)
    total = float((values * 2).sum().item())
    synchronize(device)
    expected = float(PROBE_ELEMENTS * (PROBE_ELEMENTS - 1))
    if total != expected:
        raise RuntimeError(f"device {device} computed {total:g} for a sum that is {expected:g}")


@dataclass(frozen=True)
class Agreement:
    """What the ranks of a group agreed: ``failed`` (their global ranks, sorted) and the element-wise
    maximum of the ``values`` of the ranks that did not fail (every rank gets the same)."""

    failed: list
    values: list

    @property
    def ok(self) -> bool:
        """Every rank of the group succeeded."""
        return not self.failed


def agree(ok: bool, values=(), *, group) -> Agreement:
    """All-gather ``(ok, *values)`` over the gloo ``group``; every rank returns the same :class:`Agreement`.

    Called by every rank of ``group`` at the same point, whatever happened to it before.
    """
    mine = torch.tensor([1.0 if ok else 0.0, *[float(value) for value in values]], dtype=torch.float64)
    size = dist.get_world_size(group)
    gathered = [torch.empty_like(mine) for _ in range(size)]
    dist.all_gather(gathered, mine, group=group)
    members = dist.get_process_group_ranks(group)
    failed = sorted(members[index] for index, row in enumerate(gathered) if row[0].item() != 1.0)
    good = [row[1:] for row in gathered if row[0].item() == 1.0]
    maxima = torch.stack(good).max(dim=0).values.tolist() if good and len(values) else [0.0] * len(values)
    return Agreement(failed, maxima)
