"""Start-up and teardown: which rank this process is, its device, its CPU share, its process groups.

``torchrun`` tells each process who it is through ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``
and ``LOCAL_WORLD_SIZE``; :func:`read_launch` checks them (quoting a bad value) and, when
none is set, describes a world of one. :func:`process_groups` opens the groups in the
order torchtitan does it (set the CUDA device, then initialise, always with a timeout)
and closes them in ``finally`` only if they were opened:

- the *device* group, which the collectives are timed on: NCCL on GPUs, gloo on CPUs;
- the *control* group, always gloo on the CPU: ``monitored_barrier`` exists only there,
  and the results travel through it as one ``all_gather_object`` at the end.

A CPU rank gets its share of this node's cores (:func:`cpu_share`), pinned with
``os.sched_setaffinity`` and ``torch.set_num_threads``, so two ranks never fight over a core.

>>> read_launch({}).world_size, read_launch({}).distributed
(1, False)
>>> launch = read_launch({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
>>> launch.rank, launch.local_rank, launch.local_world_size
(3, 1, 2)
>>> cpu_share(1, 2, [0, 1, 2, 3])
[2, 3]
"""

import contextlib
import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from accounting.errors import AccountingError
from accounting.hardware.devices import cuda_available

LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
"""What ``torchrun`` sets for every worker (and what :func:`read_launch` checks)."""

LAUNCH_HINT = ("a world of one: to validate every GPU of this node run "
               "`torchrun --standalone --nproc-per-node=gpu -m accounting fleet`, and for several nodes "
               "`torchrun --nnodes=N --nproc-per-node=gpu --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT "
               "--rdzv-id=JOB -m accounting fleet` on each")

CONTROL_BACKEND = "gloo"


@dataclass(frozen=True)
class Launch:
    """Who this process is in the job, from the launcher's environment."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int

    @property
    def distributed(self) -> bool:
        """Whether there are peers to compare with and time collectives against."""
        return self.world_size > 1


def _integer(environ, name: str, *, minimum: int) -> int:
    text = environ[name]
    try:
        value = int(text.strip())
    except (ValueError, AttributeError):
        raise AccountingError(f"${name} must be an integer, got {text!r}") from None
    if value < minimum:
        raise AccountingError(f"${name} must be >= {minimum}, got {text!r}")
    return value


def read_launch(environ=None) -> Launch:
    """This process's place in the job, from ``environ`` (default ``os.environ``).

    Without ``RANK`` and ``WORLD_SIZE`` it is a world of one. Every value must be an
    integer in range; an error quotes it:

    >>> read_launch({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"})
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: $RANK must be below $WORLD_SIZE (2), got '2'
    >>> read_launch({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "x"})
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: $LOCAL_RANK must be an integer, got 'x'
    """
    environ = os.environ if environ is None else environ
    present = [name for name in LAUNCH_VARIABLES if name in environ]
    if not present:
        return Launch(0, 1, 0, 1)
    for name in ("RANK", "WORLD_SIZE"):
        if name not in environ:
            raise AccountingError(f"${name} is not set but {', '.join('$' + p for p in present)} is: "
                                  "start the fleet with torchrun")
    world_size = _integer(environ, "WORLD_SIZE", minimum=1)
    rank = _integer(environ, "RANK", minimum=0)
    if rank >= world_size:
        raise AccountingError(f"$RANK must be below $WORLD_SIZE ({world_size}), got {environ['RANK']!r}")
    local_rank = _integer(environ, "LOCAL_RANK", minimum=0) if "LOCAL_RANK" in environ else rank
    if "LOCAL_WORLD_SIZE" in environ:
        local_world_size = _integer(environ, "LOCAL_WORLD_SIZE", minimum=1)
    else:
        local_world_size = world_size
    if local_rank >= local_world_size:
        raise AccountingError(f"$LOCAL_RANK must be below $LOCAL_WORLD_SIZE ({local_world_size}), "
                              f"got {environ.get('LOCAL_RANK')!r}")
    return Launch(rank, world_size, local_rank, local_world_size)


def local_device(launch: Launch, *, device_count=None) -> torch.device:
    """The device this rank tests: ``cuda:LOCAL_RANK`` where CUDA is, else the CPU.

    With a single visible GPU (a launcher that sets ``CUDA_VISIBLE_DEVICES`` per rank) it
    is ``cuda:0``; a ``LOCAL_RANK`` beyond the visible GPUs is an error naming both.

    >>> local_device(Launch(1, 2, 1, 2), device_count=4)
    device(type='cuda', index=1)
    >>> local_device(Launch(5, 8, 5, 8), device_count=1)
    device(type='cuda', index=0)
    >>> local_device(Launch(0, 1, 0, 1), device_count=0)
    device(type='cpu')
    >>> local_device(Launch(3, 4, 3, 4), device_count=2)
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: $LOCAL_RANK is 3 but only 2 CUDA device(s) are visible: start at most 2 processes per node
    """
    if device_count is None:
        device_count = torch.cuda.device_count() if cuda_available() else 0
    if device_count == 0:
        return torch.device("cpu")
    if device_count == 1:
        return torch.device("cuda", 0)
    if launch.local_rank >= device_count:
        raise AccountingError(f"$LOCAL_RANK is {launch.local_rank} but only {device_count} CUDA device(s) are "
                              f"visible: start at most {device_count} processes per node")
    return torch.device("cuda", launch.local_rank)


def fleet_devices(launch: Launch, device, *, device_count=None) -> tuple[int, ...]:
    """The CUDA device indices on this node that the fleet's *other* ranks of this node use, as
    :func:`local_device` gives them out: their work is the fleet's, not a busy neighbour's, so the
    telemetry sampler must not tag it as one. Empty on the CPU, and where each rank sees only its own GPU
    (a launcher that sets ``CUDA_VISIBLE_DEVICES`` per rank: the others have no index here).

    >>> fleet_devices(Launch(9, 16, 1, 4), torch.device("cuda", 1), device_count=8)
    (0, 2, 3)
    >>> fleet_devices(Launch(1, 4, 1, 4), torch.device("cuda", 0), device_count=1), fleet_devices(
    ...     Launch(1, 2, 1, 2), torch.device("cpu"))
    ((), ())
    """
    if device.type != "cuda":
        return ()
    if device_count is None:
        device_count = torch.cuda.device_count()
    if device_count <= 1:
        return ()
    return tuple(index for index in range(min(launch.local_world_size, device_count)) if index != device.index)


def cpu_share(local_rank: int, local_world_size: int, cpus) -> list[int]:
    """The CPUs a CPU rank may use: an equal contiguous slice of ``cpus`` (the first ranks get one more
    when they do not divide evenly); with more ranks than CPUs, ranks share them round-robin.

    >>> [cpu_share(rank, 3, range(8)) for rank in range(3)]
    [[0, 1, 2], [3, 4, 5], [6, 7]]
    >>> [cpu_share(rank, 3, [0, 1]) for rank in range(3)]
    [[0], [1], [0]]
    """
    cpus = sorted(cpus)
    if not cpus:
        raise AccountingError("no CPU is allowed for this process (empty affinity mask)")
    if local_world_size > len(cpus):
        return [cpus[local_rank % len(cpus)]]
    base, extra = divmod(len(cpus), local_world_size)
    start = local_rank * base + min(local_rank, extra)
    return cpus[start:start + base + (1 if local_rank < extra else 0)]


def pin_cpu(launch: Launch) -> list[int] | None:
    """Pin this CPU rank to its share of the node's cores; return the CPUs (``None`` where it cannot pin).

    Called before the first torch computation, so the intra-op threads torch starts later
    inherit the mask; ``torch.set_num_threads`` matches their number to it.
    """
    if not hasattr(os, "sched_setaffinity"):
        return None
    share = cpu_share(launch.local_rank, launch.local_world_size, os.sched_getaffinity(0))
    os.sched_setaffinity(0, share)
    torch.set_num_threads(len(share))
    return share


@dataclass
class Groups:
    """The open process groups: ``device`` (timed collectives), ``control`` (gloo: barrier, gathering).

    ``store`` is the rendezvous store under a prefix of the fleet's own; a rank leaves its
    figures there before the barrier, so rank 0 can still print them if another rank hangs.
    """

    device: object
    control: object
    store: object
    backend: str


def device_backend(device: torch.device) -> str:
    """The backend the collectives are timed with: ``nccl`` for CUDA (RCCL on ROCm), ``gloo`` for the CPU.

    >>> device_backend(torch.device("cpu")), device_backend(torch.device("cuda", 0))
    ('gloo', 'nccl')
    """
    return dist.Backend.default_device_backend_map[device.type]


def rendezvous_store(launch: Launch, timeout_s: float):
    """The launcher's ``env://`` rendezvous store (what :func:`process_groups` opens when given none)."""
    store, _rank, _size = next(dist.rendezvous("env://", launch.rank, launch.world_size,
                                               timeout=datetime.timedelta(seconds=timeout_s)))
    return store


@contextlib.contextmanager
def process_groups(launch: Launch, device: torch.device, *, timeout_s: float, store=None):
    """Open the device and control groups for ``launch`` (``store``: a ready store, e.g. a ``FileStore``
    in tests; default: the launcher's ``env://`` rendezvous); yield :class:`Groups`; close them after.

    Every group gets ``timeout_s``, so a dead peer ends a collective with an error, not a hang.
    """
    timeout = datetime.timedelta(seconds=timeout_s)
    backend = device_backend(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if store is None:
        store = rendezvous_store(launch, timeout_s)
    store.set_timeout(timeout)
    if dist.is_initialized():
        raise AccountingError("a default process group is already initialised in this process")
    try:
        dist.init_process_group(backend, store=store, rank=launch.rank, world_size=launch.world_size,
                                timeout=timeout)
        control = dist.new_group(backend=CONTROL_BACKEND, timeout=timeout) if backend != CONTROL_BACKEND else None
        yield Groups(device=dist.group.WORLD, control=control or dist.group.WORLD,
                     store=dist.PrefixStore("accounting-fleet/", store), backend=backend)
    finally:
        if dist.is_initialized():
            with contextlib.suppress(Exception):  # a broken GPU's NCCL teardown must not hide the report
                dist.destroy_process_group()
