"""A deliberate straggler: ``--slow-rank RANK[:FACTOR]`` makes RANK's timed matmuls do FACTOR times the work.

Each timed call runs the product ``FACTOR`` times while its FLOPs are counted once, so every
call of that rank takes ``FACTOR ×`` as long — what a device held at ``1 / FACTOR`` of its
clock (a power cap, a thermal limit) looks like to the sweep. A way to see the verdict catch a
straggler on a healthy machine, on any device kind. (Busy neighbour processes do not do it:
the scheduler hands out slices of milliseconds, a small product fits in one, and the best of
many calls then reads full speed.)

>>> from accounting.timing import matmul_case
>>> case = throttled(2)("float32", 8, 8, 8, "cpu")
>>> calls = []
>>> slow = dataclasses.replace(case, fn=lambda: calls.append(1))
>>> throttled(3, factory=lambda *args: slow)("float32", 8, 8, 8, "cpu").fn(); len(calls)
3
"""

import dataclasses

from accounting.errors import AccountingError
from accounting.timing import matmul_case

DEFAULT_FACTOR = 2


def parse_slow_rank(text: str) -> tuple[int, int]:
    """``--slow-rank RANK[:FACTOR]`` as ``(rank, factor)``.

    >>> parse_slow_rank("1"), parse_slow_rank("2:5")
    ((1, 2), (2, 5))
    >>> parse_slow_rank("1:1")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: --slow-rank must be RANK or RANK:FACTOR (a rank >= 0, a whole factor >= 2), got '1:1'
    """
    rank, _, factor = text.partition(":")
    try:
        parsed = (int(rank), int(factor) if factor else DEFAULT_FACTOR)
    except ValueError:
        parsed = (-1, 0)
    if parsed[0] < 0 or parsed[1] < 2:
        raise AccountingError(f"--slow-rank must be RANK or RANK:FACTOR (a rank >= 0, a whole factor >= 2), got {text!r}")
    return parsed


def throttled(factor: int, *, factory=matmul_case):
    """A case factory like ``factory`` whose ``fn`` runs the product ``factor`` times (FLOPs counted once)."""

    def make(*args, **kwargs):
        case = factory(*args, **kwargs)
        once = case.fn

        def repeated():
            for _ in range(factor - 1):
                once()
            return once()

        return dataclasses.replace(case, fn=repeated)

    return make
