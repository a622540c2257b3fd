"""Collectives timed as nccl-tests times them: warm-up, device-synchronised timing, then a correctness check.

For each collective and message size: warm-up calls, a barrier, ``iterations`` calls
back to back between two marks of the device's clock (:func:`accounting.hardware.clocks.clock_for`:
CUDA events on a GPU, ``perf_counter`` after a synchronize on the CPU), then — as
nccl-tests does with its data check — fresh data, one more call, and every element of
the result compared with the value it must have: a wrong element is counted (``wrong``,
nccl-tests' ``#wrong``), never averaged away.

Sizes and bandwidths follow nccl-tests (``doc/PERFORMANCE.md``): ``S`` is the whole array
in bytes (for all-gather and reduce-scatter the per-rank count × n), ``algbw = S / t`` and
``busbw = algbw × BUSBW_FACTORS[collective](n)``. GB/s are 10⁹ bytes per second.

Decisions every rank must agree on (how many iterations, whether the next size fits the
budget) are taken from the group's maximum of each rank's figures (one tiny all-reduce
between timed blocks, never inside one), so no rank waits in a call the others skipped.

>>> BUSBW_FACTORS["all_reduce"](8), BUSBW_FACTORS["all_gather"](8), BUSBW_FACTORS["broadcast"](8)
(1.75, 0.875, 1.0)
>>> message_sizes(2**20, 2**28, ranks=3)[:2], len(message_sizes(2**20, 2**28, ranks=3))
([1048572, 4194300], 5)
"""

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from accounting._checks import check_positive, check_positive_size
from accounting.hardware.clocks import clock_for, synchronize

# source: NVIDIA/nccl-tests doc/PERFORMANCE.md ("Bus bandwidth"); n ranks, each with one link of bandwidth B.
BUSBW_FACTORS = {
    # n-1 additions and n-1 copies per element, spread over n links: t = S·2(n-1)/(n·B).
    "all_reduce": lambda n: 2 * (n - 1) / n,
    # each rank receives the n-1 chunks of S/n it lacks: t = S·(n-1)/(n·B).
    "all_gather": lambda n: (n - 1) / n,
    # the addition half of an all-reduce, S/n per rank out: t = S·(n-1)/(n·B).
    "reduce_scatter": lambda n: (n - 1) / n,
    # all S bytes leave the root through its one link: t = S/B.
    "broadcast": lambda n: 1.0,
}
COLLECTIVES = tuple(BUSBW_FACTORS)
REDUCING = ("all_reduce", "reduce_scatter")
"""Collectives that sum (nccl-tests' ``redop`` column; the others print ``none``)."""

DTYPE = torch.float32
ELEMENT_BYTES = 4
PATTERN_PERIOD = 7
"""Element ``i`` of rank ``r``'s input is ``r + 1 + (i mod 7)``: small integers, exact in float32 sums,
different for neighbouring elements and for every rank, so a misplaced chunk is caught as surely as a wrong sum."""

MIN_MESSAGE_BYTES = 2**20
MAX_MESSAGE_BYTES = {"cuda": 2**30, "cpu": 2**28}
"""Largest message per device kind (before the memory and budget caps): 1 GiB on a GPU, 256 MiB on a CPU."""
SIZE_GROWTH = 4
MEMORY_FRACTION = 0.25
"""At most this share of free memory for a message's buffers (input, output and the expected values)."""
WARMUP_CALLS = 2
MIN_ITERATIONS = 3
MAX_ITERATIONS = 20
"""nccl-tests' default ``-n 20`` timed iterations at most; fewer where calls are slow, at least 3."""


def algbw(nbytes: int, seconds: float) -> float:
    """Algorithm bandwidth in bytes/s: ``S / t``.

    >>> algbw(2**30, 0.5) / 1e9
    2.147483648
    """
    return nbytes / seconds


def busbw(collective: str, nbytes: int, seconds: float, ranks: int) -> float:
    """Bus bandwidth in bytes/s: ``algbw × BUSBW_FACTORS[collective](ranks)``.

    >>> busbw("all_reduce", 10**9, 1.0, ranks=4) / 1e9
    1.5
    """
    return algbw(nbytes, seconds) * BUSBW_FACTORS[collective](ranks)


def message_sizes(smallest: int, largest: int, *, ranks: int) -> list[int]:
    """Message sizes ``S`` from ``smallest`` growing ``SIZE_GROWTH``-fold up to ``largest``, each a multiple
    of ``ranks`` float32 elements (all-gather and reduce-scatter split ``S`` evenly across ranks)."""
    smallest = check_positive_size(smallest, "smallest")
    largest = check_positive_size(largest, "largest")
    unit = ELEMENT_BYTES * check_positive_size(ranks, "ranks")
    sizes, size = [], smallest
    while size <= largest:
        rounded = max(unit, size // unit * unit)
        if not sizes or rounded > sizes[-1]:
            sizes.append(rounded)
        size *= SIZE_GROWTH
    return sizes


def pattern(count: int, rank: int, device, *, offset: int = 0) -> torch.Tensor:
    """``rank + 1 + ((offset + i) mod PATTERN_PERIOD)`` for ``i < count``, as float32 on ``device``.

    >>> pattern(9, 1, "cpu").tolist()
    [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 2.0, 3.0]
    """
    index = torch.arange(offset, offset + count, device=device) % PATTERN_PERIOD
    return (index + (rank + 1)).to(DTYPE)


def reduced_pattern(count: int, ranks: int, device, *, offset: int = 0) -> torch.Tensor:
    """The sum over ranks of :func:`pattern`: ``n(n+1)/2 + n·((offset + i) mod PATTERN_PERIOD)``.

    >>> reduced_pattern(3, 2, "cpu").tolist() == (pattern(3, 0, "cpu") + pattern(3, 1, "cpu")).tolist()
    True
    """
    index = torch.arange(offset, offset + count, device=device) % PATTERN_PERIOD
    return (index * ranks + ranks * (ranks + 1) // 2).to(DTYPE)


def _all_gather(output, inp, group):
    # torch 2.13 renamed all_gather_into_tensor (and warns on the old name); 2.4 has only the old one.
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(output, inp, group=group)


def _reduce_scatter(output, inp, group):
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    scatter(output, inp, group=group)


class CollectiveCase:
    """One collective on one message size in one group: its buffers, its call, its expected result.

    ``fill()`` writes this rank's input, ``run()`` makes one call, ``check()`` counts the
    elements of the output that differ from what they must be.
    """

    def __init__(self, name: str, nbytes: int, *, group, device, rank: int, ranks: int):
        if name not in BUSBW_FACTORS:
            raise ValueError(f"unknown collective {name!r}; known: {', '.join(COLLECTIVES)}")
        self.name, self.nbytes, self.group, self.device = name, nbytes, group, device
        self.rank, self.ranks = rank, ranks
        self.count = nbytes // ELEMENT_BYTES
        self.chunk = self.count // ranks
        if name == "all_reduce" or name == "broadcast":
            self.input = torch.empty(self.count, dtype=DTYPE, device=device)
            self.output = self.input
        elif name == "all_gather":
            self.input = torch.empty(self.chunk, dtype=DTYPE, device=device)
            self.output = torch.empty(self.chunk * ranks, dtype=DTYPE, device=device)
        else:  # reduce_scatter
            self.input = torch.empty(self.chunk * ranks, dtype=DTYPE, device=device)
            self.output = torch.empty(self.chunk, dtype=DTYPE, device=device)

    def fill(self) -> None:
        """This rank's input (for broadcast: the pattern on the root, a sentinel of -1 elsewhere)."""
        if self.name == "broadcast" and self.rank != 0:
            self.input.fill_(-1.0)
        elif self.name == "broadcast":
            self.input.copy_(pattern(self.count, 0, self.device))
        else:
            self.input.copy_(pattern(self.input.numel(), self.rank, self.device))

    def run(self) -> None:
        if self.name == "all_reduce":
            dist.all_reduce(self.input, group=self.group)
        elif self.name == "all_gather":
            _all_gather(self.output, self.input, self.group)
        elif self.name == "reduce_scatter":
            _reduce_scatter(self.output, self.input, self.group)
        else:
            dist.broadcast(self.input, group=self.group, group_src=0)

    def expected(self) -> torch.Tensor:
        """What ``output`` must hold after one call on freshly filled inputs."""
        if self.name == "all_reduce":
            return reduced_pattern(self.count, self.ranks, self.device)
        if self.name == "reduce_scatter":
            return reduced_pattern(self.chunk, self.ranks, self.device, offset=self.rank * self.chunk)
        if self.name == "all_gather":
            return torch.cat([pattern(self.chunk, source, self.device) for source in range(self.ranks)])
        return pattern(self.count, 0, self.device)

    def check(self) -> int:
        """Elements of ``output`` that differ from :meth:`expected` (nccl-tests' ``#wrong``)."""
        return int((self.output != self.expected()).sum().item())


@dataclass(frozen=True)
class Timed:
    """One rank's figures for one collective and size: seconds per call, the calls timed, wrong elements."""

    collective: str
    nbytes: int
    seconds: float
    iterations: int
    wrong: int

    def as_dict(self) -> dict:
        return {"collective": self.collective, "bytes": self.nbytes, "count": self.nbytes // ELEMENT_BYTES,
                "type": "float", "redop": "sum" if self.collective in REDUCING else "none",
                "root": 0 if self.collective == "broadcast" else -1,
                "seconds": self.seconds, "iterations": self.iterations, "wrong": self.wrong}


def _align(group, device) -> None:
    """Every rank of ``group`` here, and this device idle, before a clock is read."""
    synchronize(device)
    if device.type == "cuda":
        dist.barrier(group=group, device_ids=[device.index])
    else:
        dist.barrier(group=group)
    synchronize(device)


def shared_max(values, *, group, device) -> list[float]:
    """The element-wise maximum of ``values`` over the ranks of ``group``: the same list on every rank."""
    tensor = torch.tensor([float(value) for value in values], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
    return tensor.tolist()


def iterations_for(per_call_s: float, target_s: float) -> int:
    """Timed calls for a collective whose calls take ``per_call_s``: about ``target_s`` of them, within
    ``MIN_ITERATIONS``..``MAX_ITERATIONS``.

    >>> iterations_for(0.001, 0.1), iterations_for(1.0, 0.1), iterations_for(0.0, 0.1)
    (20, 3, 20)
    """
    if per_call_s <= 0:
        return MAX_ITERATIONS
    return max(MIN_ITERATIONS, min(MAX_ITERATIONS, int(target_s / per_call_s)))


def time_case(case: CollectiveCase, *, target_s: float, corrupt=None) -> Timed:
    """Warm up, time ``iterations`` calls between device-clock marks, then check fresh data once.

    ``corrupt(collective, output)`` (tests only) may damage the checked output, as a bad link would.
    """
    group, device = case.group, case.device
    case.fill()
    synchronize(device)
    before = time.perf_counter()
    for _ in range(WARMUP_CALLS):
        case.run()
    synchronize(device)
    (warm_per_call,) = shared_max([(time.perf_counter() - before) / WARMUP_CALLS], group=group, device=device)
    iterations = iterations_for(warm_per_call, target_s)
    case.fill()
    clock = clock_for(device)
    _align(group, device)
    start = clock.mark()
    for _ in range(iterations):
        case.run()
    end = clock.mark()
    seconds = clock.elapsed(start, end) / iterations
    case.fill()
    case.run()
    synchronize(device)
    if corrupt is not None:
        corrupt(case.name, case.output)
    return Timed(case.name, case.nbytes, seconds, iterations, case.check())


def largest_message(device, free_bytes: int) -> int:
    """The largest ``S`` for this device: its kind's maximum, less when free memory is short.

    A message needs at most 3 × ``S`` (input, output, expected values), within ``MEMORY_FRACTION`` of free memory.

    >>> largest_message(torch.device("cpu"), 100 * 2**30) == MAX_MESSAGE_BYTES["cpu"]
    True
    >>> largest_message(torch.device("cuda", 0), 12 * 2**20) // 2**20
    1
    """
    allowed = int(MEMORY_FRACTION * free_bytes) // 3
    return max(MIN_MESSAGE_BYTES, min(MAX_MESSAGE_BYTES.get(device.type, MAX_MESSAGE_BYTES["cpu"]), allowed))


def sweep_collective(name: str, sizes, *, group, device, budget_s: float, corrupt=None,
                     clock=time.monotonic) -> list[Timed]:
    """Time ``name`` on ``sizes`` (smallest first) within ``budget_s``; the first size always runs.

    The next size runs only if the group's slowest wall time for the last one, scaled by
    the size ratio, still fits: every rank reaches the same decision from the same figures.
    """
    budget_s = check_positive(budget_s, "budget_s")
    rank, ranks = dist.get_rank(group), dist.get_world_size(group)
    target = budget_s / (2 * max(len(sizes), 1))
    results, spent, last = [], 0.0, None
    for nbytes in sizes:
        if last is not None:
            last_bytes, last_wall = last
            if spent + last_wall * nbytes / last_bytes > budget_s:
                break
        before = clock()
        case = CollectiveCase(name, nbytes, group=group, device=device, rank=rank, ranks=ranks)
        results.append(time_case(case, target_s=target, corrupt=corrupt))
        del case
        (wall,) = shared_max([clock() - before], group=group, device=device)
        spent += wall
        last = (nbytes, wall)
    return results
