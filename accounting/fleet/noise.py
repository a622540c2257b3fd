"""A deliberate straggler: busy processes that share a rank's cores, as a noisy neighbour would.

``--slow-rank R`` starts :data:`DEFAULT_NEIGHBOURS` processes pinned to rank R's CPUs,
each spinning in a loop; the scheduler then gives the rank about ``1 / (1 + neighbours)``
of its cores, so its matmuls really run slower — a way to see the verdict name a
straggler without a broken machine. They stop when the ``with`` block ends (and
by themselves if the rank dies).
"""

import contextlib
import os
import subprocess
import sys

from accounting.errors import AccountingError

DEFAULT_NEIGHBOURS = 3
"""Busy processes per slowed rank: about a quarter of its cores left to it."""

_SPIN = ("import os, sys\n"
         "parent = int(sys.argv[1])\n"
         "while os.getppid() == parent:\n"
         "    for _ in range(200000):\n"
         "        pass\n")


def parse_slow_rank(text: str) -> tuple[int, int]:
    """``--slow-rank RANK[:NEIGHBOURS]`` as ``(rank, neighbours)``.

    >>> parse_slow_rank("1"), parse_slow_rank("2:5")
    ((1, 3), (2, 5))
    >>> parse_slow_rank("one")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: --slow-rank must be RANK or RANK:NEIGHBOURS (non-negative integers, at least one neighbour), got 'one'
    """
    rank, _, count = text.partition(":")
    try:
        parsed = (int(rank), int(count) if count else DEFAULT_NEIGHBOURS)
    except ValueError:
        parsed = (-1, 0)
    if parsed[0] < 0 or parsed[1] < 1:
        raise AccountingError(f"--slow-rank must be RANK or RANK:NEIGHBOURS (non-negative integers, "
                              f"at least one neighbour), got {text!r}")
    return parsed


@contextlib.contextmanager
def busy_neighbours(cpus, count: int):
    """Run ``count`` spinning processes pinned to ``cpus`` while the block runs; stop them after."""
    if not hasattr(os, "sched_setaffinity"):
        raise AccountingError("--slow-rank needs os.sched_setaffinity (Linux)")
    cpus = sorted(cpus)
    neighbours = []
    try:
        for _ in range(count):
            process = subprocess.Popen([sys.executable, "-c", _SPIN, str(os.getpid())],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            neighbours.append(process)
            os.sched_setaffinity(process.pid, cpus)
        yield [process.pid for process in neighbours]
    finally:
        for process in neighbours:
            process.kill()
        for process in neighbours:
            process.wait()
