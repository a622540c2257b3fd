"""Find the most FLOP/s a device's matmuls reach, within a time budget (in the spirit of mamf-finder).

For each dtype the sweep runs, inside that dtype's share of the budget:

1. **Ramp**: square products on a geometric ladder of sizes (multiples of ``SIZE_MULTIPLE``),
   small to large, while the next size's predicted time (``t × (size ratio)³`` from the
   last one) still fits and its operands fit in memory.
2. **Refine**: a local search around the best shape so far, moving ``m``, ``k`` and ``n``
   one at a time by a step that halves down to ``SIZE_MULTIPLE // 2``, recentring on each
   new best, until the share is spent or no neighbour is left.

With a :class:`WaveGrid` (the device's parallel units and output tile; the report passes
one, see :func:`accounting.report.measure.wave_grid`) the search is **wave-aware** instead:
the ramp takes one size per octave (it only finds the scale), then

2. **Waves**: shapes whose output-tile count fills whole waves of the device's units
   (``tiles % units == 0``), at edges a quarter-octave apart within an octave of the ramp's
   best, nearest first (:func:`whole_wave_shape`);
3. **K sweep**: ``k`` of the best shape so far up and down by ``√2`` while it improves;
4. **Refine**: around the best few shapes, whole-wave neighbours (a little more or less
   output) and ``k`` neighbours, by steps that shrink, recentring on each new best.

A product whose tiles leave the last wave part-empty pays for a whole wave: throughput
falls in a sawtooth with ``ceil(tiles / units)``, and a geometric ladder lands on the teeth
as often as on the peaks. No shape is timed twice in one dtype's sweep (a memo).

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
from dataclasses import dataclass, field, replace

from accounting._checks import check_positive, check_positive_size
from accounting.errors import AccountingTypeError
from accounting.memory import storage_dtype
from accounting.report.waves import WaveGrid, element_multiple, round_to, whole_wave_shape

SIZE_MULTIPLE = 128
"""Ramp sizes are multiples of this (tensor-core and SIMD tile sizes divide it)."""

STEPS_PER_OCTAVE = 2
"""Ramp sizes grow by ``2 ** (1 / STEPS_PER_OCTAVE)`` per step."""

FIRST_REFINE_STEP = 256
"""The refine phase first moves one dimension by this much, then by half, down to ``SIZE_MULTIPLE // 2``."""

TIME_SAFETY = 1.2
"""A shape is tried only when ``TIME_SAFETY ×`` its predicted time fits in what is left."""

SEED_STEPS_PER_OCTAVE = 4
"""Whole-wave seeds are ``2 ** (1 / SEED_STEPS_PER_OCTAVE)`` apart in edge…"""
SEED_OCTAVES = 1
"""…within this many octaves either side of the ramp's best size."""

WAVE_RAMP_STEPS_PER_OCTAVE = 1
"""The wave-aware ramp takes one size per octave: it finds the scale, the seeds fill in."""

K_SWEEP_FACTOR = 2**0.5
K_SWEEP_STEPS = 3
"""The K sweep moves ``k`` by ``K_SWEEP_FACTOR`` at a time, at most ``K_SWEEP_STEPS`` times each way."""

REFINE_CENTRES = 3
"""The wave-aware refine searches around this many of the best shapes, best first."""
REFINE_FRACTIONS = (1 / 8, 1 / 16, 1 / 32)
"""…moving the output area or ``k`` by these fractions, coarse to fine."""
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
    check: object = None
    """The product's result check (:class:`accounting.health.results.ResultCheck`), where one ran."""

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
    long it spends on a shape, in wall time — on a GPU each timed call's spin, flush and
    synchronize included, see :meth:`accounting.report.measure.MatmulTimer.expected_wall_s`),
    the rest of the known wall time is taken as setup (making operands), scaled by their
    element count.

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


def _nearest_first(count: int) -> list[int]:
    """``0, 1, -1, 2, -2, …, count, -count``: offsets nearest the centre first, the larger side first.

    >>> _nearest_first(2)
    [0, 1, -1, 2, -2]
    """
    return [0] + [offset for step in range(1, count + 1) for offset in (step, -step)]


def _wave_neighbours(shape, fraction: float, grid: WaveGrid, itemsize: int, limit: int) -> list[tuple[int, int, int]]:
    """Whole-wave shapes with ``fraction`` more or less output edge, then ``k`` moved by ``fraction`` (larger first)."""
    m, k, n = shape
    align = element_multiple(itemsize)
    edge = math.sqrt(m * n)
    shapes = [whole_wave_shape(grid, edge * (1 + sign * fraction), k, itemsize, limit) for sign in (+1, -1)]
    shapes += [(m, round_to(k * (1 + sign * fraction), align), n) for sign in (+1, -1)]
    unique = []
    for candidate in shapes:
        if candidate is not None and candidate != tuple(shape) and candidate not in unique:
            unique.append(candidate)
    return unique


@dataclass
class _DtypeSearch:
    """One dtype's search: its deadline, the size limit, what was measured and every shape tried (the memo)."""

    dtype: str
    deadline: float
    limit: int
    measured: list = field(default_factory=list)
    tried: dict = field(default_factory=dict)
    """``shape -> MatmulMeasurement or _TOO_BIG``: a shape is never measured twice."""

    def best(self) -> MatmulMeasurement:
        return max(self.measured, key=lambda done: done.flops_per_second)

    def ranked_shapes(self) -> list[MatmulMeasurement]:
        """Distinct measured shapes, fastest first."""
        return sorted(self.measured, key=lambda done: done.flops_per_second, reverse=True)


class Sweep:
    """Runs the search for each dtype, sharing one time budget among them.

    ``on_measurement(measurement, elapsed_s)`` is called after each product (the progress bar);
    ``expected_wall_s`` is the timer's rule for its time per shape (see :func:`predict_seconds`).
    ``waves`` (a :class:`WaveGrid`) makes the search wave-aware (see the module docstring);
    ``element_bytes(dtype)`` gives the element size its alignment is counted in (default
    :func:`accounting.memory.storage_dtype`'s itemsize).
    """

    def __init__(self, measure: Measure, *, budget_s: float, start_size: int, max_size: int | Callable[[str], int],
                 clock: Callable[[], float] = time.monotonic, on_measurement=None, multiple: int = SIZE_MULTIPLE,
                 first_refine_step: int = FIRST_REFINE_STEP, expected_wall_s=None, waves: WaveGrid | None = None,
                 element_bytes: Callable[[str], int] | None = None):
        self.measure = measure
        self.expected_wall_s = expected_wall_s
        self.budget_s = check_positive(budget_s, "budget_s")
        self.start_size = check_positive_size(start_size, "start_size")
        self.max_size = max_size if callable(max_size) else (lambda dtype, size=max_size: size)
        self.clock = clock
        self.on_measurement = on_measurement or (lambda measurement, elapsed: None)
        self.multiple = multiple
        self.first_refine_step = first_refine_step
        if waves is not None and not isinstance(waves, WaveGrid):
            raise AccountingTypeError(f"waves must be a WaveGrid or None, not {type(waves).__name__} {waves!r}")
        self.waves = waves
        self.element_bytes = element_bytes or _storage_bytes
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

    def _try(self, search: _DtypeSearch, shape, phase):
        """Measure ``shape`` if it was not tried before and its predicted time fits before the deadline.

        Returns the measurement (a memoised one for a shape tried before), ``_TOO_SLOW``
        (not tried) or ``_TOO_BIG`` (beyond the size limit, or out of memory).
        """
        shape = tuple(shape)
        if shape in search.tried:
            return search.tried[shape]
        if max(shape) > search.limit:
            return _TOO_BIG
        measured = search.measured
        if measured:
            nearest = min(measured, key=lambda done: abs(math.log(done.m * done.k * done.n / math.prod(shape))))
            if self.elapsed() + TIME_SAFETY * predict_seconds(nearest, *shape, self.expected_wall_s) > search.deadline:
                return _TOO_SLOW
        before = self.clock()
        result = self.measure(search.dtype, *shape)
        if result is None:
            search.tried[shape] = _TOO_BIG
            search.limit = min(search.limit, max(shape) - self.multiple)
            return _TOO_BIG
        result = replace(result, wall_s=self.clock() - before, phase=phase)
        search.tried[shape] = result
        measured.append(result)
        self.on_measurement(result, self.elapsed())
        return result

    def sweep_dtype(self, dtype: str, *, deadline: float) -> list[MatmulMeasurement]:
        """Ramp then refine (or the wave-aware phases) for one dtype until ``deadline`` (seconds since :meth:`run` started).

        The first (smallest) shape is always measured, so every dtype gets at least one point.
        """
        limit = self.max_size(dtype)
        search = _DtypeSearch(dtype, deadline, limit)
        steps = STEPS_PER_OCTAVE if self.waves is None else WAVE_RAMP_STEPS_PER_OCTAVE
        for size in size_ladder(min(self.start_size, limit), limit, steps_per_octave=steps, multiple=self.multiple):
            outcome = self._try(search, (size, size, size), "ramp")
            if outcome is _TOO_BIG or outcome is _TOO_SLOW:
                break
        if not search.measured:
            return search.measured
        if self.waves is None:
            self._refine(search)
        else:
            itemsize = self.element_bytes(dtype)
            self._seed_waves(search, itemsize)
            self._sweep_k(search, itemsize)
            self._refine_waves(search, itemsize)
        return search.measured

    def _refine(self, search: _DtypeSearch) -> None:
        """Move one of m, k, n of the best shape by a step that halves, recentring on each new best."""
        best = search.best()
        step = self.first_refine_step
        while step >= self.multiple // 2 and self.elapsed() < search.deadline:
            improved = False
            for shape in _neighbours(best.shape, step, self.multiple // 2):
                if shape in search.tried or max(shape) > search.limit:
                    continue
                outcome = self._try(search, shape, "refine")
                if outcome is _TOO_BIG or outcome is _TOO_SLOW:
                    continue
                if outcome.flops_per_second > best.flops_per_second:
                    best = outcome
                    improved = True
                    break
            if not improved:
                step //= 2

    def _seed_waves(self, search: _DtypeSearch, itemsize: int) -> None:
        """Whole-wave shapes at quarter-octave edges around the ramp's best, nearest first."""
        edge = search.best().size
        for offset in _nearest_first(SEED_OCTAVES * SEED_STEPS_PER_OCTAVE):
            if self.elapsed() >= search.deadline:
                return
            wanted = edge * 2 ** (offset / SEED_STEPS_PER_OCTAVE)
            shape = whole_wave_shape(self.waves, wanted, wanted, itemsize, search.limit)
            if shape is not None:
                self._try(search, shape, "waves")

    def _sweep_k(self, search: _DtypeSearch, itemsize: int) -> None:
        """``k`` of the best shape up by ``K_SWEEP_FACTOR`` while it improves; down the same way if up did not."""
        align = element_multiple(itemsize)
        start = search.best()
        for factor in (K_SWEEP_FACTOR, 1 / K_SWEEP_FACTOR):
            current = start
            for _ in range(K_SWEEP_STEPS):
                k = round_to(current.k * factor, align)
                outcome = self._try(search, (current.m, k, current.n), "k-sweep")
                if not isinstance(outcome, MatmulMeasurement) or outcome.flops_per_second <= current.flops_per_second:
                    break
                current = outcome
            if current is not start:
                return

    def _refine_waves(self, search: _DtypeSearch, itemsize: int) -> None:
        """Hill-climb from each of the ``REFINE_CENTRES`` best shapes through :func:`_wave_neighbours`."""
        climbed = set()
        while self.elapsed() < search.deadline:
            centres = [done for done in search.ranked_shapes()[:REFINE_CENTRES] if done.shape not in climbed]
            if not centres:
                return
            current = centres[0]
            climbed.add(current.shape)
            for fraction in REFINE_FRACTIONS:
                improved = True
                while improved and self.elapsed() < search.deadline:
                    improved = False
                    for shape in _wave_neighbours(current.shape, fraction, self.waves, itemsize, search.limit):
                        outcome = self._try(search, shape, "refine")
                        if isinstance(outcome, MatmulMeasurement) and outcome.flops_per_second > current.flops_per_second:
                            current, improved = outcome, True
                            climbed.add(current.shape)
                            break


def _storage_bytes(dtype: str) -> int:
    return storage_dtype(dtype).itemsize


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
