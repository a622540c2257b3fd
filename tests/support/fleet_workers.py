"""Module-level workers and fault hooks for the multi-process fleet tests (spawn pickles them by name).

Kept apart from the test module so a spawned rank imports only this and the package, not pytest.
"""

import io
import json
import os
import time
from pathlib import Path

import torch.distributed as dist

HANG_S = 120.0
"""How long the hung rank sleeps: far beyond any barrier timeout; the parent kills it."""
CORRUPTED_ELEMENTS = 3
DOCTORED_TORCH = "2.0.0+doctored"


def spawn_world(world_size: int, argv: list, out_dir: Path, *, hooks=None, overrides=None, timeout_s: float = 150.0,
                grace_s: float = 20.0, prepare=None) -> list:
    """Run ``accounting fleet argv`` as ``world_size`` real ranks (spawned, gloo, a FileStore in ``out_dir``).

    Returns each rank's ``{"status", "stdout", "stderr"}`` (``None`` for a rank that had to be
    killed). Once rank 0 is done the others get ``grace_s`` to finish, then are killed, as
    torchrun does when a worker exits with an error. ``prepare()`` runs first in every rank's
    process (to monkeypatch torch there, as an older torch would be).
    """
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    store_path = str(out_dir / "store")
    processes = [context.Process(target=run_rank, args=(rank, world_size, store_path, str(out_dir), argv, hooks,
                                                        overrides, prepare), daemon=True)
                 for rank in range(world_size)]
    for process in processes:
        process.start()
    deadline = time.monotonic() + timeout_s
    processes[0].join(max(deadline - time.monotonic(), 0))
    for process in processes[1:]:
        process.join(max(min(deadline, time.monotonic() + grace_s) - time.monotonic(), 0))
    return reap_ranks(processes, out_dir)


def reap_ranks(processes, out_dir: Path) -> list:
    """Kill the ranks still alive (then wait for them), and read each rank's ``rank{N}.json`` from ``out_dir``
    (``None`` for a rank that wrote none)."""
    outcomes = []
    for rank, process in enumerate(processes):
        if process.is_alive():
            process.kill()
            process.join()
        path = Path(out_dir) / f"rank{rank}.json"
        outcomes.append(json.loads(path.read_text()) if path.exists() else None)
    return outcomes


def run_rank(rank, world_size, store_path, out_dir, argv, hooks, overrides, prepare=None):
    """One rank: the launcher's environment, a FileStore, then the command as the console script runs it."""
    from accounting.__main__ import build_parser

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size))
    if prepare is not None:
        prepare()
    store = dist.FileStore(store_path, world_size)
    parser = build_parser()
    args = parser.parse_args(["fleet", *argv])
    stdout, stderr = io.StringIO(), io.StringIO()
    kwargs = {"hooks": hooks} if hooks is not None else {}
    try:
        status = args.run(args, parser=args.parser, stdout=stdout, stderr=stderr, store=store, overrides=overrides,
                          **kwargs)
    except SystemExit as exit_:
        status = exit_.code
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(
        {"status": status, "stdout": stdout.getvalue(), "stderr": stderr.getvalue()}))


MEASURE_STARTS_ENV = "ACCOUNTING_TEST_MEASURE_STARTS"
"""A folder where :func:`fail_on_rank` notes when each rank began to measure (``time.time()``), where set."""


def fail_on_rank(rank):
    """``before_measure`` hook: notes when the rank began to measure (see ``MEASURE_STARTS_ENV``); rank 2's device
    is broken."""
    if os.environ.get(MEASURE_STARTS_ENV):
        Path(os.environ[MEASURE_STARTS_ENV], f"start{rank}").write_text(repr(time.time()))
    if rank == 2:
        raise RuntimeError("injected failure: this rank's device is broken")


def hang_rank_1(rank):
    """``before_barrier`` hook: rank 1 never arrives."""
    if rank == 1:
        time.sleep(HANG_S)


def corrupt_rank_0_all_reduce(rank, collective, output):
    """``corrupt`` hook: rank 0's all_reduce results come back with a few wrong elements."""
    if rank == 0 and collective == "all_reduce":
        output[:CORRUPTED_ELEMENTS] += 1.0


def doctor_rank_1(rank, identity):
    """``identity`` hook: rank 1 runs another torch build."""
    if rank == 1:
        return {**identity, "torch": DOCTORED_TORCH}
    return identity



def broadcast_with_torch_2_4_signature(broadcast=None):
    """``dist.broadcast`` as torch 2.4 and 2.5 define it: ``(tensor, src, group=None, async_op=False)``,
    no ``group_src`` (it arrived in 2.6); it calls the real one."""
    real = broadcast or dist.broadcast

    def broadcast_2_4(tensor, src, group=None, async_op=False):
        return real(tensor, src=src, group=group, async_op=async_op)

    return broadcast_2_4


def torch_2_4_and_a_broken_all_gather():
    """``prepare``: this process's torch.distributed has 2.4's broadcast, and its all-gather raises on every rank."""

    def broken(*args, **kwargs):
        raise TypeError("injected: all_gather is broken in this build")

    dist.broadcast = broadcast_with_torch_2_4_signature()
    dist.all_gather_into_tensor = broken
    if hasattr(dist, "all_gather_single"):
        dist.all_gather_single = broken


def rank_0_on_another_host(rank, identity):
    """``identity`` hook: rank 0 is alone on node "b", ranks 1 and 2 share node "a" (an intra-node group [1, 2])."""
    return {**identity, "host": "node-b" if rank == 0 else "node-a"}


BROKEN_RANK = 2
_broken = []


def break_rank_2_at_all_gather(rank, collective, nbytes):
    """``device_fault`` hook: rank 2's device breaks when all_gather begins (all_reduce was timed) and stays
    broken (a sticky CUDA error): from then on every use of it raises, the probe's included."""
    if rank != BROKEN_RANK:
        return
    if _broken or collective == "all_gather":
        _broken.append(collective)
        raise RuntimeError("injected: CUDA error: an illegal memory access was encountered")


COPY_SLOWDOWN = 3
"""How much longer rank 1's device copy reads in :func:`slow_copy_on_rank_1` (a memory at a third of its speed)."""


def slow_copy_on_rank_1():
    """``prepare``: on rank 1 (``$RANK``), the report's device copy reads ``COPY_SLOWDOWN`` times as long, as a
    device whose memory runs slow would; its matmuls are untouched."""
    if os.environ.get("RANK") != "1":
        return
    import dataclasses

    from accounting.report import measure

    real = measure.measure_bandwidth

    def slowed(*args, **kwargs):
        done = real(*args, **kwargs)
        return None if done is None else dataclasses.replace(done, seconds=done.seconds * COPY_SLOWDOWN)

    measure.measure_bandwidth = slowed


LINK_DELAY_S = 0.02
"""What :func:`slow_link_between_0_and_2` adds before each of rank 2's transfers with rank 0: a 1 MiB transfer
over loopback takes about a millisecond, so the link reads a tenth or less of the others."""


def slow_link_between_0_and_2(rank, peer):
    """``link_path`` hook: rank 2's point-to-point path to rank 0 (and only that one) is slow, both directions."""
    if rank == 2 and peer == 0:
        time.sleep(LINK_DELAY_S)


def spin_on(cpu: int):
    """A CPU-bound neighbour: pin this process to ``cpu`` and spin until killed."""
    os.sched_setaffinity(0, {cpu})
    while True:
        pass
