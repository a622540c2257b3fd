"""Find the most FLOP/s a device's matmuls reach, within a time budget (in the spirit of mamf-finder).

For each dtype the sweep has two phases, both inside that dtype's share of the budget:

1. **Ramp**: square products on a geometric ladder of sizes (multiples of ``SIZE_MULTIPLE``),
   small to large, while the next size's predicted time (``t × (size ratio)³`` from the
   last one) still fits and its operands fit in memory.
2. **Refine**: a local search around the best shape so far, moving ``m``, ``k`` and ``n``
   one at a time by a step that halves down to ``SIZE_MULTIPLE // 2``, recentring on each
   new best, until the share is spent or no neighbour is left.

Nothing here touches torch: ``measure(dtype, m, k, n)`` does the timing (see
:mod:`accounting.report.measure`), so the planning is tested with fakes.

>>> from accounting.report.sweep import size_ladder
>>> size_ladder(256, 4096)
[256, 384, 512, 768, 1024, 1408, 2048, 2944, 4096]
"""

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from accounting._checks import check_positive, check_positive_size

SIZE_MULTIPLE = 128
"""Ramp sizes are multiples of this (tensor-core and SIMD tile sizes divide it)."""

STEPS_PER_OCTAVE = 2
"""Ramp sizes grow by ``2 ** (1 / STEPS_PER_OCTAVE)`` per step."""

FIRST_REFINE_STEP = 256
"""The refine phase first moves one dimension by this much, then by half, down to ``SIZE_MULTIPLE // 2``."""

TIME_SAFETY = 1.2
"""A shape is tried only when ``TIME_SAFETY ×`` its predicted time fits in what is left."""


@dataclass(frozen=True)
class MatmulMeasurement:
    """One timed ``(m, k) @ (k, n)`` product. ``seconds`` is the median of the repeats."""

    dtype: str
    m: int
    k: int
    n: int
    flops: int
    seconds: float
    iqr_s: float
    repeats: int
    wall_s: float = 0.0
    """Wall time the measurement took (warm-up and repeats), used to plan the next ones."""
    phase: str = "ramp"
    telemetry: dict | None = None
    """The device's readings during the measurement (``accounting.telemetry.Summary.to_dict()``), where taken."""

    @property
    def flops_per_second(self) -> float:
        """Achieved FLOP/s: ``flops / seconds``."""
        return self.flops / self.seconds

    @property
    def size(self) -> float:
        """Edge of the square product with the same FLOPs: ``(m·k·n) ** (1/3)``.

        >>> MatmulMeasurement("float32", 512, 2048, 1024, 2 * 512 * 2048 * 1024, 1.0, 0.0, 1).size
        1024.0
        """
        return round((self.m * self.k * self.n) ** (1 / 3), 6)

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(m, k, n)``."""
        return (self.m, self.k, self.n)


Measure = Callable[[str, int, int, int], "MatmulMeasurement | None"]
"""``measure(dtype, m, k, n)``: time one product; ``None`` when its operands do not fit in memory."""


def size_ladder(start: int, stop: int, steps_per_octave: int = STEPS_PER_OCTAVE, multiple: int = SIZE_MULTIPLE) -> list[int]:
    """Sizes from ``start`` to at most ``stop``, growing geometrically, each a multiple of ``multiple``.

    >>> size_ladder(128, 1024, steps_per_octave=1)
    [128, 256, 512, 1024]
    """
    start = check_positive_size(start, "start")
    stop = check_positive_size(stop, "stop")
    sizes = []
    step = 0
    while True:
        exact = start * 2 ** (step / steps_per_octave)
        size = max(multiple, round(exact / multiple) * multiple)
        if size > stop:
            return sizes
        if not sizes or size > sizes[-1]:
            sizes.append(size)
        step += 1


def predict_seconds(known: MatmulMeasurement, m: int, k: int, n: int, expected_wall_s=None) -> float:
    """Wall time measuring a product of this shape should take, from a measured one.

    A call's time scales with FLOPs. Without ``expected_wall_s`` the whole measurement is
    scaled so. With it (``expected_wall_s(seconds_per_call)``: the timer's own rule for how
    long it spends on a shape, see :class:`accounting.report.measure.MatmulTimer`), the rest
    of the known wall time is taken as setup (making operands), scaled by their element count.

    >>> known = MatmulMeasurement("float32", 512, 512, 512, 2 * 512**3, 0.01, 0.0, 5, wall_s=0.2)
    >>> predict_seconds(known, 1024, 1024, 1024)
    1.6
    >>> round(predict_seconds(known, 1024, 1024, 1024, expected_wall_s=lambda per_call: max(0.15, 5 * per_call)), 6)
    0.6
    """
    per_call = known.seconds * (m * k * n) / (known.m * known.k * known.n)
    if expected_wall_s is None:
        return known.wall_s * (m * k * n) / (known.m * known.k * known.n)
    setup = max(0.0, known.wall_s - expected_wall_s(known.seconds))
    elements = (m * k + k * n + m * n) / (known.m * known.k + known.k * known.n + known.m * known.n)
    return expected_wall_s(per_call) + setup * elements


_TOO_SLOW = "too slow"
_TOO_BIG = "too big"


def _neighbours(center: tuple[int, int, int], step: int, multiple: int) -> list[tuple[int, int, int]]:
    """Shapes one ``step`` away from ``center`` in one of m, k, n (larger first)."""
    shapes = []
    for direction in (+1, -1):
        for axis in range(3):
            shape = list(center)
            shape[axis] += direction * step
            if shape[axis] >= multiple:
                shapes.append(tuple(shape))
    return shapes


class Sweep:
    """Runs the two-phase search for each dtype, sharing one time budget among them.

    ``on_measurement(measurement, elapsed_s)`` is called after each product (the progress bar);
    ``expected_wall_s`` is the timer's rule for its time per shape (see :func:`predict_seconds`).
    """

    def __init__(self, measure: Measure, *, budget_s: float, start_size: int, max_size: int | Callable[[str], int],
                 clock: Callable[[], float] = time.monotonic, on_measurement=None, multiple: int = SIZE_MULTIPLE,
                 first_refine_step: int = FIRST_REFINE_STEP, expected_wall_s=None):
        self.measure = measure
        self.expected_wall_s = expected_wall_s
        self.budget_s = check_positive(budget_s, "budget_s")
        self.start_size = check_positive_size(start_size, "start_size")
        self.max_size = max_size if callable(max_size) else (lambda dtype, size=max_size: size)
        self.clock = clock
        self.on_measurement = on_measurement or (lambda measurement, elapsed: None)
        self.multiple = multiple
        self.first_refine_step = first_refine_step
        self._started = None

    def elapsed(self) -> float:
        """Seconds since :meth:`run` started."""
        return self.clock() - self._started

    def run(self, dtypes: list[str]) -> dict[str, list[MatmulMeasurement]]:
        """Measure every dtype; each gets an equal share of what is left when its turn comes."""
        self._started = self.clock()
        results = {}
        for position, dtype in enumerate(dtypes):
            remaining = self.budget_s - self.elapsed()
            share = remaining / (len(dtypes) - position)
            results[dtype] = self.sweep_dtype(dtype, deadline=self.elapsed() + share)
        return results

    def _try(self, dtype, shape, phase, measured, deadline):
        """Measure ``shape`` if its predicted time fits before ``deadline``.

        Returns the measurement, ``_TOO_SLOW`` (not tried) or ``_TOO_BIG`` (out of memory).
        """
        if measured:
            nearest = min(measured, key=lambda done: abs(math.log(done.m * done.k * done.n / math.prod(shape))))
            if self.elapsed() + TIME_SAFETY * predict_seconds(nearest, *shape, self.expected_wall_s) > deadline:
                return _TOO_SLOW
        before = self.clock()
        result = self.measure(dtype, *shape)
        if result is None:
            return _TOO_BIG
        result = replace(result, wall_s=self.clock() - before, phase=phase)
        measured.append(result)
        self.on_measurement(result, self.elapsed())
        return result

    def sweep_dtype(self, dtype: str, *, deadline: float) -> list[MatmulMeasurement]:
        """Ramp then refine for one dtype until ``deadline`` (seconds since :meth:`run` started).

        The first (smallest) shape is always measured, so every dtype gets at least one point.
        """
        measured: list[MatmulMeasurement] = []
        limit = self.max_size(dtype)
        for size in size_ladder(min(self.start_size, limit), limit, multiple=self.multiple):
            outcome = self._try(dtype, (size, size, size), "ramp", measured, deadline)
            if outcome is _TOO_BIG:
                limit = size - self.multiple
                break
            if outcome is _TOO_SLOW:
                break
        if not measured:
            return measured
        seen = {done.shape for done in measured}
        best = max(measured, key=lambda done: done.flops_per_second)
        step = self.first_refine_step
        while step >= self.multiple // 2 and self.elapsed() < deadline:
            improved = False
            for shape in _neighbours(best.shape, step, self.multiple // 2):
                if shape in seen or max(shape) > limit:
                    continue
                seen.add(shape)
                outcome = self._try(dtype, shape, "refine", measured, deadline)
                if outcome is _TOO_BIG:
                    limit = min(limit, max(shape) - self.multiple)
                    continue
                if outcome is _TOO_SLOW:
                    continue
                if outcome.flops_per_second > best.flops_per_second:
                    best = outcome
                    improved = True
                    break
            if not improved:
                step //= 2
        return measured


def summarise(measurements: list[MatmulMeasurement]) -> dict:
    """Best FLOP/s, the shape that reached it, and the median FLOP/s over the sweep.

    >>> runs = [MatmulMeasurement("bf16", s, s, s, 2 * s**3, t, 0.0, 5) for s, t in [(256, 1e-3), (512, 2e-3)]]
    >>> summary = summarise(runs)
    >>> summary["best"].shape, round(summary["median_flops_per_second"] / 1e9, 1)
    ((512, 512, 512), 83.9)
    """
    if not measurements:
        return {"best": None, "median_flops_per_second": None}
    best = max(measurements, key=lambda done: done.flops_per_second)
    median = statistics.median(done.flops_per_second for done in measurements)
    return {"best": best, "median_flops_per_second": median}
