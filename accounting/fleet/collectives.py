"""Collectives timed as nccl-tests times them: warm-up, device-synchronised timing, then a correctness check.

For each collective: one call outside the budget (NCCL >= 2.22 connects a group's peers on
its first call), then for each message size: warm-up calls, a barrier, ``iterations`` calls
queued back to back between two marks of the device's clock
(:func:`accounting.hardware.clocks.clock_for`: CUDA events on a GPU, ``perf_counter`` after a
synchronize on the CPU), then — as nccl-tests does with its data check — fresh data, one more
call, and every element of the result compared with the value it must have: a wrong element
is counted (``wrong``, nccl-tests' ``#wrong``), never averaged away.

Sizes and bandwidths follow nccl-tests (``doc/PERFORMANCE.md``): ``S`` is the whole array
in bytes (for all-gather and reduce-scatter the per-rank count × n), ``algbw = S / t`` and
``busbw = algbw × BUSBW_FACTORS[collective](n)``, ``t`` the mean over ranks of their time per
call (:mod:`accounting.fleet.verdict`). GB/s are 10⁹ bytes per second.

Between steps the ranks of a group agree over gloo (:mod:`accounting.fleet.agreement`) on whether
everyone succeeded and on the figures every rank must share (how many iterations, whether the
next size fits the budget: the group's maximum), so no rank waits in a call another skipped.

>>> BUSBW_FACTORS["all_reduce"](8), BUSBW_FACTORS["all_gather"](8), BUSBW_FACTORS["broadcast"](8)
(1.75, 0.875, 1.0)
>>> message_sizes(2**20, 2**28, ranks=3)[:2], len(message_sizes(2**20, 2**28, ranks=3))
([1048572, 4194300], 5)
"""

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from accounting._checks import check_positive, check_positive_size
from accounting.fleet.agreement import agree
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
"""At most this share of free memory for a message's buffers."""
BUFFERS_PER_MESSAGE = 4
"""Input, output, the source of the input and the expected values: at most 3 × ``S`` together (the
all-reduce's input is its output), plus the check's mask (``S``/4) and room to spare."""
WARMUP_CALLS = 2
MIN_ITERATIONS = 3
MAX_ITERATIONS = 20
"""nccl-tests' default ``-n 20`` timed iterations at most; fewer where calls are slow, at least 3."""
LAUNCH_BOUND_FRACTION = 0.8
"""A size is *launch-bound* when the host spent at least this share of the device's time per call
queueing the calls: a call from Python costs the host tens of microseconds, and where the device
finishes a call sooner it waits for the next, so the time is the launch rate, not the link's."""


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


def group_root(group) -> int:
    """The global rank of ``group``'s first member: the broadcast's root (nccl-tests' ``-r 0``).

    ``dist.broadcast`` takes the root as a *global* rank in ``src`` on every torch this package
    supports; ``group_src`` (a rank within the group) only arrived in torch 2.6.
    """
    return dist.get_global_rank(group, 0)


class CollectiveCase:
    """One collective on one message size in one group: its buffers, its call, its expected result.

    Everything is allocated here, before any collective runs (a rank that runs out of memory
    says so before its peers wait for it in a call): ``fill()`` copies this rank's input
    from a ready source, ``run()`` makes one call, ``check()`` counts the elements of the
    output that differ from the values computed here. ``root`` is the global rank of the
    group's first member (:func:`group_root`).
    """

    def __init__(self, name: str, nbytes: int, *, group, device, rank: int, ranks: int, root: int = 0):
        if name not in BUSBW_FACTORS:
            raise ValueError(f"unknown collective {name!r}; known: {', '.join(COLLECTIVES)}")
        self.name, self.nbytes, self.group, self.device = name, nbytes, group, device
        self.rank, self.ranks, self.root = rank, ranks, root
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
        self._expected = self.expected()
        if name == "broadcast":
            self._source = self._expected if rank == 0 else None
        else:
            self._source = pattern(self.input.numel(), rank, device)

    def fill(self) -> None:
        """This rank's input (for broadcast: the pattern on the root, a sentinel of -1 elsewhere)."""
        if self._source is None:
            self.input.fill_(-1.0)
        else:
            self.input.copy_(self._source)

    def run(self) -> None:
        if self.name == "all_reduce":
            dist.all_reduce(self.input, group=self.group)
        elif self.name == "all_gather":
            _all_gather(self.output, self.input, self.group)
        elif self.name == "reduce_scatter":
            _reduce_scatter(self.output, self.input, self.group)
        else:
            dist.broadcast(self.input, src=self.root, group=self.group)

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
        return int((self.output != self._expected).sum().item())


@dataclass(frozen=True)
class Timed:
    """One rank's figures for one collective and size: seconds per call, the calls timed, wrong elements,
    and the host's seconds per call spent launching them (``None`` on the CPU, where calls block)."""

    collective: str
    nbytes: int
    seconds: float
    iterations: int
    wrong: int
    launch_seconds: float | None = None

    def as_dict(self) -> dict:
        return {"collective": self.collective, "bytes": self.nbytes, "count": self.nbytes // ELEMENT_BYTES,
                "type": "float", "redop": "sum" if self.collective in REDUCING else "none",
                "root": 0 if self.collective == "broadcast" else -1,
                "seconds": self.seconds, "iterations": self.iterations, "wrong": self.wrong,
                "launch_seconds": self.launch_seconds}


def launch_bound(seconds: float, launch_seconds: float | None) -> bool:
    """Whether a call's time is the host's launch rate rather than the link's: the host spent at least
    ``LAUNCH_BOUND_FRACTION`` of the device's time per call just queueing calls, so the device waited on it.

    >>> launch_bound(10e-6, 9e-6), launch_bound(1e-3, 12e-6), launch_bound(1e-3, None)
    (True, False, False)
    """
    return launch_seconds is not None and launch_seconds >= LAUNCH_BOUND_FRACTION * seconds


def _align(group, device) -> None:
    """Every rank of ``group`` here, and this device idle, before a clock is read."""
    synchronize(device)
    if device.type == "cuda":
        dist.barrier(group=group, device_ids=[device.index])
    else:
        dist.barrier(group=group)
    synchronize(device)


def iterations_for(per_call_s: float, target_s: float) -> int:
    """Timed calls for a collective whose calls take ``per_call_s``: about ``target_s`` of them, within
    ``MIN_ITERATIONS``..``MAX_ITERATIONS``.

    >>> iterations_for(0.001, 0.1), iterations_for(1.0, 0.1), iterations_for(0.0, 0.1)
    (20, 3, 20)
    """
    if per_call_s <= 0:
        return MAX_ITERATIONS
    return max(MIN_ITERATIONS, min(MAX_ITERATIONS, int(target_s / per_call_s)))


def predicted_seconds(per_call_s: float, last_bytes: int, nbytes: int, target_s: float) -> float:
    """What the next size will cost: its warm-up, timed and checked calls at ``per_call_s`` scaled by the size.

    ``per_call_s`` is the last size's *timed* seconds per call (the group's slowest), never its wall time:
    that holds one-off costs (NCCL connects a group's peers lazily on its first call) that the next size
    does not pay again.

    >>> round(predicted_seconds(0.001, 2**20, 2**22, target_s=0.1), 6)  # 2 + 20 + 1 calls of 4 ms
    0.092
    """
    scaled = per_call_s * nbytes / last_bytes
    return (WARMUP_CALLS + iterations_for(scaled, target_s) + 1) * scaled


def warm(case: CollectiveCase, calls: int = WARMUP_CALLS) -> float:
    """``calls`` untimed calls; their wall seconds per call (for the number of timed iterations)."""
    synchronize(case.device)
    before = time.perf_counter()
    for _ in range(calls):
        case.run()
    synchronize(case.device)
    return (time.perf_counter() - before) / calls


def time_case(case: CollectiveCase, *, iterations: int, corrupt=None) -> Timed:
    """Time ``iterations`` calls between device-clock marks, then check one call on fresh data.

    The calls are queued back to back between two marks (CUDA events on a GPU), as nccl-tests
    times them; the host's time spent queueing them is kept too, to tell a launch-bound size.
    ``corrupt(collective, output)`` (tests only) may damage the checked output, as a bad link would.
    """
    device = case.device
    case.fill()
    clock = clock_for(device)
    _align(case.group, device)
    start = clock.mark()
    launched = time.perf_counter()
    for _ in range(iterations):
        case.run()
    launch = (time.perf_counter() - launched) / iterations
    end = clock.mark()
    seconds = clock.elapsed(start, end) / iterations
    case.fill()
    case.run()
    synchronize(device)
    if corrupt is not None:
        corrupt(case.name, case.output)
    return Timed(case.name, case.nbytes, seconds, iterations, case.check(),
                 launch_seconds=None if device.type == "cpu" else launch)


def largest_message(device, free_bytes: int) -> int:
    """The largest ``S`` for this device: its kind's maximum, less when free memory is short.

    A message needs at most ``BUFFERS_PER_MESSAGE`` × ``S`` (input, output, source and expected
    values, the check's mask), within ``MEMORY_FRACTION`` of free memory.

    >>> largest_message(torch.device("cpu"), 100 * 2**30) == MAX_MESSAGE_BYTES["cpu"]
    True
    >>> largest_message(torch.device("cuda", 0), 12 * 2**20) // 2**20
    1
    """
    allowed = int(MEMORY_FRACTION * free_bytes) // BUFFERS_PER_MESSAGE
    return max(MIN_MESSAGE_BYTES, min(MAX_MESSAGE_BYTES.get(device.type, MAX_MESSAGE_BYTES["cpu"]), allowed))


def describe(error: BaseException) -> str:
    """An error as one line: its type and the first line of its message.

    >>> describe(RuntimeError("CUDA error: an illegal memory access\\nmore"))
    'RuntimeError: CUDA error: an illegal memory access'
    """
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}".rstrip(": ")


@dataclass
class Sweep:
    """One collective's sweep on one group, as this rank saw it: the sizes timed and, where it stopped
    early because a rank failed, which ranks (global) and at which size; ``error`` is this rank's own."""

    collective: str
    results: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    stopped_bytes: int | None = None
    error: tuple[int, str] | None = None
    """``(bytes, one line)``: where and how this rank itself failed."""


def sweep_collective(name: str, sizes, *, group, device, budget_s: float, control=None, corrupt=None, fault=None,
                     clock=time.monotonic) -> Sweep:
    """Time ``name`` on ``sizes`` (smallest first) within ``budget_s``; the first size always runs.

    ``group`` is the group timed (NCCL on GPUs), ``control`` a gloo group of the same ranks (default:
    ``group`` itself, which is gloo on the CPU). Each
    step's local work (allocating, filling, checking) runs in a ``try``, and the ranks then agree
    on ``control`` (:func:`accounting.fleet.agreement.agree`) before anyone makes the next call: when
    a rank failed, every rank stops here and the :class:`Sweep` names it, instead of its peers
    waiting for it inside a collective. One call per collective warms it up outside the budget
    (NCCL >= 2.22 connects lazily, on a group's first call); the next size runs only if its
    predicted cost (:func:`predicted_seconds`, from the group's slowest timed call) still fits.
    ``fault(collective, nbytes)`` (tests only) may raise on this rank, as a broken device does.
    """
    budget_s = check_positive(budget_s, "budget_s")
    control = group if control is None else control
    rank, ranks, root = dist.get_rank(group), dist.get_world_size(group), group_root(group)
    target = budget_s / (2 * max(len(sizes), 1))
    sweep = Sweep(name)

    def step(nbytes: int, work, *args, width: int = 0, figures=lambda result: ()):
        """``work(*args)`` on this rank, then the group's agreement (and ``work``'s result)."""
        try:
            result, ok = work(*args), True
        except Exception as error:  # noqa: BLE001 - whatever broke, the group hears of it before its next call
            result, ok = None, False
            sweep.error = sweep.error or (nbytes, describe(error))
        agreement = agree(ok, figures(result) if ok else [0.0] * width, group=control)
        if not agreement.ok:
            sweep.failed, sweep.stopped_bytes = agreement.failed, nbytes
        return agreement, result

    def prepare(nbytes: int) -> CollectiveCase:
        if fault is not None:
            fault(name, nbytes)
        case = CollectiveCase(name, nbytes, group=group, device=device, rank=rank, ranks=ranks, root=root)
        case.fill()
        synchronize(device)
        return case

    def timed(case: CollectiveCase, iterations: int, before: float) -> tuple[Timed, float]:
        done = time_case(case, iterations=iterations, corrupt=corrupt)
        return done, clock() - before

    agreement, first = step(sizes[0], prepare, sizes[0])
    if not agreement.ok or not step(sizes[0], warm, first, 1)[0].ok:
        return sweep
    first = None
    spent, last = 0.0, None
    for nbytes in sizes:
        if last is not None and spent + predicted_seconds(last[1], last[0], nbytes, target) > budget_s:
            break
        before = clock()
        agreement, case = step(nbytes, prepare, nbytes)
        if not agreement.ok:
            break
        agreement, _ = step(nbytes, warm, case, width=1, figures=lambda per_call: [per_call])
        if not agreement.ok:
            break
        agreement, result = step(nbytes, timed, case, iterations_for(agreement.values[0], target), before, width=2,
                                 figures=lambda result: [result[0].seconds, result[1]])
        case = None
        if not agreement.ok:
            break
        sweep.results.append(result[0])
        last = (nbytes, agreement.values[0])
        spent += agreement.values[1]
    return sweep
