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
                grace_s: float = 20.0) -> list:
    """Run ``accounting fleet argv`` as ``world_size`` real ranks (spawned, gloo, a FileStore in ``out_dir``).

    Returns each rank's ``{"status", "stdout", "stderr"}`` (``None`` for a rank that had to be
    killed). Once rank 0 is done the others get ``grace_s`` to finish, then are killed, as
    torchrun does when a worker exits with an error.
    """
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    store_path = str(out_dir / "store")
    processes = [context.Process(target=run_rank, args=(rank, world_size, store_path, str(out_dir), argv, hooks,
                                                        overrides), daemon=True)
                 for rank in range(world_size)]
    for process in processes:
        process.start()
    deadline = time.monotonic() + timeout_s
    processes[0].join(max(deadline - time.monotonic(), 0))
    for process in processes[1:]:
        process.join(max(min(deadline, time.monotonic() + grace_s) - time.monotonic(), 0))
    outcomes = []
    for rank, process in enumerate(processes):
        if process.is_alive():
            process.kill()
            process.join()
        path = out_dir / f"rank{rank}.json"
        outcomes.append(json.loads(path.read_text()) if path.exists() else None)
    return outcomes


def run_rank(rank, world_size, store_path, out_dir, argv, hooks, overrides):
    """One rank: the launcher's environment, a FileStore, then the command as the console script runs it."""
    from accounting.__main__ import build_parser

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size))
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


def fail_on_rank(rank):
    """``before_measure`` hook: the rank's device is broken."""
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

