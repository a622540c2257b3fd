"""CPU ranks of one node measure their own figures in turns, with the launcher off the cores being measured.

Ranks on GPUs measure their devices at the same time: each has a device of its own. CPU ranks of one node do
not: pinned to separate cores, they still share the node's memory bus, last-level cache and power budget, and
in a VM two vCPUs may be the two hyperthreads of one physical core (sharing its FMA and AMX units). Measured at
the same time, one rank's figures depend on which phase (a matmul, a memory copy) the others are in: on a quiet
2-vCPU Xeon guest rank 0 read float32 0.133 against 0.159 TFLOP/s, bfloat16 0.476 against 1.25 and memory 11.3
against 13.6 GB/s, while the same matmul pinned to either CPU, one after the other, read the same on both. So:

- :func:`measuring_turns`: how many turns a node's ranks take (1 for GPU ranks and for one rank per node);
  local rank ``t`` measures in turn ``t``, each turn getting an equal share of the measuring budget. It waits for
  its turn on the rendezvous store (:func:`wait_for_turn`: a blocking wait for the key the rank before it leaves
  when done, :func:`end_turn`), before any process group is opened: no gloo thread runs while a rank measures.
- :func:`launcher_off`: while a rank measures, ``torchrun``'s agent (the rank's parent process: its monitor
  loop, rendezvous store and log threads) is moved off that rank's cores, onto the cores of ranks that are
  waiting, and put back after.

>>> import torch
>>> measuring_turns(torch.device("cpu"), local_world_size=2), measuring_turns(torch.device("cuda", 0), 8)
(2, 1)
"""

import contextlib
import datetime
import os
from pathlib import Path

import torch

TURN_KEY = "accounting-fleet-turns/measured/{rank}"
"""The store key a rank sets when it has measured; the next local rank of its node waits for it."""
TORCHRUN_VARIABLE = "TORCHELASTIC_RUN_ID"
"""Set by ``torchrun`` for its workers: where it is set, a worker's parent process is the elastic agent."""


def measuring_turns(device: torch.device, local_world_size: int) -> int:
    """How many turns the ranks of one node take to measure their own figures: one per local rank on the CPU
    (they share the node's memory, caches, power and perhaps cores), one in all on GPUs (a device each)."""
    return local_world_size if device.type == "cpu" and local_world_size > 1 else 1


def wait_for_turn(store, rank: int, local_rank: int, timeout_s: float) -> str | None:
    """Block until the rank before this one on its node (global rank ``rank - 1``: torchrun numbers a node's ranks
    one after another) has measured; ``None``, or a note saying it waited ``timeout_s`` in vain and measures anyway
    (the fleet's next barrier names a rank that hangs). Local rank 0 starts at once."""
    if local_rank == 0:
        return None
    try:
        store.wait([TURN_KEY.format(rank=rank - 1)], datetime.timedelta(seconds=timeout_s))
    except RuntimeError:  # the store's timeout (DistStoreError is a RuntimeError)
        return (f"rank {rank} measured without waiting for rank {rank - 1}, which had not finished measuring after "
                f"{timeout_s:g} s")
    return None


def end_turn(store, rank: int) -> None:
    """Say that ``rank`` has measured: the next local rank of its node may start."""
    store.set(TURN_KEY.format(rank=rank), "measured")


def _threads(pid: int) -> list[int]:
    try:
        return [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return []


@contextlib.contextmanager
def launcher_off(cpus, *, environ=None, parent: int | None = None):
    """Move the launcher's threads off ``cpus`` while the block runs; put each back as it was after.

    Only under ``torchrun`` (``$TORCHELASTIC_RUN_ID``: the parent is its agent), only on Linux, and only where
    the launcher may run elsewhere (a thread allowed on ``cpus`` alone keeps its mask). Best effort: a thread
    that ends or refuses is left as it is. Yields the thread ids moved.
    """
    environ = os.environ if environ is None else environ
    moved = {}
    if TORCHRUN_VARIABLE in environ and hasattr(os, "sched_setaffinity") and cpus:
        parent = os.getppid() if parent is None else parent
        for thread in _threads(parent):
            try:
                mask = os.sched_getaffinity(thread)
                elsewhere = mask - set(cpus)
                if elsewhere and elsewhere != mask:
                    os.sched_setaffinity(thread, elsewhere)
                    moved[thread] = mask
            except OSError:
                continue
    try:
        yield sorted(moved)
    finally:
        for thread, mask in moved.items():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(thread, mask)
