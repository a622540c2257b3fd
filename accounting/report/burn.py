"""``--level long``'s sustained phase: one large product per dtype, over and over, each result checked (gpu-burn).

A device that computes right for a second may not for ten minutes: a hot spot, a marginal
voltage, a memory cell that flips under load. For a stated time per dtype the phase repeats one
large square product at full load and

- compares every result bit for bit with the first (the **repeat check**: identical calls on one
  device give identical bits, see :mod:`accounting.health.results`);
- checks the first, then one every :data:`CHECK_INTERVAL_S`, the first that differs and the last, with
  Freivalds' check against the rounding bound;
- samples clocks, power and throttle reasons throughout (:class:`accounting.telemetry.Sampler`).

The shape is the largest square that fits memory (as the sweep's limit) and whose call, at the
sweep's best rate, still leaves at least :data:`MIN_PRODUCTS` products in the time.

>>> burn_size(rate_flops_per_s=1e11, seconds=10.0, limit=8192)
3584
>>> burn_size(rate_flops_per_s=1e15, seconds=60.0, limit=8192)
8192
"""

import time
from dataclasses import dataclass, field

from accounting._checks import check_positive
from accounting.hardware.clocks import synchronize
from accounting.health.results import same_bits
from accounting.report.checks import ResultChecker, check_result
from accounting.report.results import check_dict
from accounting.report.sweep import SIZE_MULTIPLE
from accounting.telemetry.sampler import Sampler
from accounting.timing import matmul_case

CHECK_INTERVAL_S = 5.0
"""Freivalds' check of one result at least this often (the repeat check runs on every one)."""
MIN_PRODUCTS = 10
"""The burn's shape leaves at least this many products in a dtype's time."""


def burn_size(*, rate_flops_per_s: float, seconds: float, limit: int, multiple: int = SIZE_MULTIPLE) -> int:
    """Edge of the square product to repeat: as large as ``limit`` allows while ``MIN_PRODUCTS`` calls
    (``2·n³`` FLOPs each at ``rate_flops_per_s``) fit in ``seconds``; a multiple of ``multiple``, at least one."""
    check_positive(rate_flops_per_s, "rate_flops_per_s")
    check_positive(seconds, "seconds")
    edge = (rate_flops_per_s * seconds / MIN_PRODUCTS / 2) ** (1 / 3)
    return max(multiple, min(limit, int(edge // multiple * multiple)))


@dataclass
class BurnResult:
    """One dtype's sustained phase: the shape, how long, how many products, and what the checks found."""

    dtype: str
    shape: tuple[int, int, int]
    seconds: float = 0.0
    products: int = 0
    mismatches: int = 0
    """Products whose bits differed from the first's."""
    first_mismatch: int | None = None
    """The 1-based number of the first product that differed."""
    checks: list = field(default_factory=list)
    """Freivalds' checks made (:class:`~accounting.health.results.ResultCheck`)."""
    telemetry: dict | None = None

    @property
    def failed_checks(self) -> list:
        return [check for check in self.checks if not check.ok]

    def to_dict(self) -> dict:
        """Plain JSON values (a check with no bound to judge by is listed under ``not_checked``, not ``failed``)."""
        judged = [check for check in self.checks if check.checked]
        return {"dtype": self.dtype, "shape": list(self.shape), "seconds": self.seconds, "products": self.products,
                "mismatches": self.mismatches, "first_mismatch": self.first_mismatch, "checks": len(self.checks),
                "failed": [check_dict(check) for check in self.failed_checks],
                "worst_excess": check_dict(max(judged, key=lambda check: check.excess))["excess"] if judged else None,
                "not_checked": [check.note for check in self.checks if not check.checked],
                "telemetry": self.telemetry}


def burn(device, dtype: str, size: int, seconds: float, *, telemetry: str | None = None, checker: ResultChecker,
         clock=time.monotonic, on_load=None, case_factory=None) -> BurnResult:
    """Repeat ``dtype``'s ``size``³ product on ``device`` for ``seconds``, checking as the module says.

    ``telemetry``: the device name the :class:`~accounting.telemetry.Sampler` reads (``None``: no sampling);
    ``checker``: its seconds count the Freivalds checks; ``on_load()`` is called once while the device is
    busy (a product queued, not waited for), for the health counters' under-load reading.
    """
    case = (case_factory or matmul_case)(dtype, size, size, size, device)
    result = BurnResult(dtype, (size, size, size))
    first = case.fn().clone()
    result.checks.append(_timed_check(checker, dtype, case, first))
    sampler = Sampler(telemetry, measure_clock=True) if telemetry is not None else None
    started = clock()
    next_check = started + CHECK_INTERVAL_S
    last_checked = 0
    if sampler is not None:
        sampler.__enter__()
    try:
        while result.products == 0 or clock() - started < seconds:
            out = case.fn()
            result.products += 1
            if on_load is not None and result.products == 1:
                on_load()  # the call above may still run: the device is busy now
                on_load = None
            identical = same_bits(out, first)
            if not identical:
                result.mismatches += 1
            if (not identical and result.first_mismatch is None) or clock() >= next_check:
                if not identical:
                    result.first_mismatch = result.products
                result.checks.append(_timed_check(checker, dtype, case, out, repeat_identical=identical))
                next_check = clock() + CHECK_INTERVAL_S
                last_checked = result.products
        if last_checked != result.products:  # the last result is checked too
            result.checks.append(_timed_check(checker, dtype, case, out, repeat_identical=identical))
        synchronize(device)
    finally:
        result.seconds = clock() - started
        if sampler is not None:
            sampler.__exit__(None, None, None)
            result.telemetry = sampler.summary.to_dict()
    return result


def _timed_check(checker: ResultChecker, dtype: str, case, out, *, repeat_identical=None):
    started = checker.clock()
    try:
        return check_result(case, out, repeat_identical=repeat_identical)
    finally:
        checker.seconds[dtype] = checker.seconds.get(dtype, 0.0) + checker.clock() - started
        checker.checked[dtype] = checker.checked.get(dtype, 0) + 1


def burn_seconds(budget_s: float, dtypes: int) -> float:
    """Each dtype's share of the burn's ``budget_s`` (at least a second).

    >>> burn_seconds(300.0, 2)
    150.0
    """
    return max(1.0, budget_s / max(1, dtypes))
