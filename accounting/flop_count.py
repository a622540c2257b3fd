"""FLOPs counted for you: one call of a function under ``torch.utils.flop_counter.FlopCounterMode``.

The timers (:func:`accounting.timing.time_fn` and the pytest plugin's ``flops_benchmark``)
use this when no ``flops=`` is given, and to cross-check one that is. The count follows
the package convention (:mod:`accounting.flops`: 2 FLOPs per multiply-add, matmul-class
work only), because it *is* ``FlopCounterMode``'s count: ``mm``, ``addmm``, ``bmm``,
``baddbmm``, convolutions, ``_scaled_mm`` and the fused attention kernels it knows.
It misses ``aten.dot``/``aten.mv`` and any kernel torch cannot see into (Triton, custom
C++), so a function made only of those counts 0 — that is refused, never turned into
an MFU of 0.

One formula is supplied here: torch's ``FlopCounterMode`` counts ``torch._scaled_mm`` (every
fp8 matmul) only from torch 2.7 (pytorch/pytorch#144973); on 2.4 to 2.6 it would count an fp8
product as 0. Where this torch's registry lacks it, :func:`scaled_mm_flop` (2·m·n·k, the
formula torch adopted: ``mm``'s) is passed to the counter as a custom mapping.

Counting runs the function once, untimed. Where running it for real is expensive, give
a version that does the same work on ``device="meta"`` tensors (``count_fn``): shapes
only, no memory, no arithmetic.

>>> import torch
>>> a = torch.ones(64, 32)
>>> count = count_flops(lambda: a @ a.T)
>>> count.total, count.by_operator
(262144, {'aten.mm': 262144})
>>> meta = torch.ones(64, 32, device="meta")
>>> count_flops(lambda: meta @ meta.T).total   # the same count, with no arithmetic done
262144
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from accounting.errors import AccountingError, AccountingTypeError

FLOPS_MISMATCH_TOLERANCE = 0.01
"""A given ``flops=`` further than this fraction from the counted FLOPs is reported as a mismatch."""


class FlopsMismatchWarning(UserWarning):
    """A ``flops=`` given to a timer differs from what ``FlopCounterMode`` counted by more than 1 %."""


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one call, in total and per aten operator (``"aten.mm"``, ``"aten.bmm"``...).

    ``seconds`` is the wall time the counted call took (the counter's overhead included);
    ``source`` names what was run: ``"fn"`` or ``"count_fn"``.
    """

    total: int
    by_operator: dict = field(default_factory=dict)
    seconds: float = 0.0
    source: str = "fn"


def scaled_mm_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of ``torch._scaled_mm(a, b, ...)``: 2·m·n·k for an (m, k) by (k, n) product, 2 per multiply-add.

    Takes shapes (as ``FlopCounterMode`` hands a custom formula) or tensors; scales, bias and
    output dtype add no matmul work.

    >>> scaled_mm_flop((64, 32), (32, 16))
    65536
    """
    (m, k), (_, n) = (tuple(getattr(x, "shape", x)) for x in (a_shape, b_shape))
    return 2 * m * n * k


def missing_formulas() -> dict:
    """The formulas this torch's ``FlopCounterMode`` lacks and the package supplies (``_scaled_mm`` before 2.7).

    Read from ``torch.utils.flop_counter.flop_registry`` at each call, so a torch that has the formula
    keeps its own.

    >>> missing_formulas() if torch.ops.aten._scaled_mm in flop_counter.flop_registry else {}
    {}
    """
    scaled_mm = torch.ops.aten._scaled_mm
    return {} if scaled_mm in flop_counter.flop_registry else {scaled_mm: scaled_mm_flop}


def count_flops(fn: Callable[[], object], *, source: str = "fn") -> FlopCount:
    """Run ``fn()`` once under ``FlopCounterMode`` and return its matmul FLOPs.

    ``fn`` may run on any device, ``meta`` included. An exception from ``fn`` is re-raised
    as :class:`AccountingError` naming ``source`` and the original error (chained).

    >>> count_flops(lambda: 1 / 0)
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: counting FLOPs: fn raised ZeroDivisionError: division by zero
    """
    if not callable(fn):
        raise AccountingTypeError(f"{source} must be callable, got {fn!r}")
    counter = FlopCounterMode(display=False, custom_mapping=missing_formulas())
    start = time.perf_counter()
    try:
        with counter:
            fn()
    except Exception as error:
        raise AccountingError(f"counting FLOPs: {source} raised {type(error).__name__}: {error}") from error
    seconds = time.perf_counter() - start
    by_operator = {str(op): int(flops) for op, flops in counter.get_flop_counts().get("Global", {}).items()}
    return FlopCount(int(counter.get_total_flops()), by_operator, seconds, source)


def flops_mismatch(given, counted: FlopCount, tolerance: float = FLOPS_MISMATCH_TOLERANCE) -> str | None:
    """Why a given FLOP figure disagrees with a count (``None`` when within ``tolerance`` of it).

    >>> count = FlopCount(1000, {"aten.mm": 1000})
    >>> print(flops_mismatch(1005, count))
    None
    >>> flops_mismatch(2000, count)
    'flops=2000 given, but FlopCounterMode counted 1000 in fn (aten.mm: 1000): 100.0% apart'
    """
    given = int(given)
    if abs(given - counted.total) <= tolerance * counted.total:
        return None
    operators = ", ".join(f"{name}: {flops}" for name, flops in counted.by_operator.items()) or "no matmul ops"
    apart = f"{abs(given - counted.total) / counted.total:.1%} apart" if counted.total else "nothing counted"
    return f"flops={given} given, but FlopCounterMode counted {counted.total} in {counted.source} ({operators}): {apart}"


def counted_total(count: FlopCount) -> int:
    """The count's total, refusing a count of 0 (the function's work is invisible to ``FlopCounterMode``).

    >>> counted_total(FlopCount(0, {}, source="fn"))
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: FlopCounterMode counted 0 matmul FLOPs in fn (it does not see aten.dot, aten.mv or custom kernels); pass flops= explicitly
    """
    if count.total <= 0:
        raise AccountingError(
            f"FlopCounterMode counted 0 matmul FLOPs in {count.source} (it does not see aten.dot, aten.mv or "
            "custom kernels); pass flops= explicitly"
        )
    return count.total
