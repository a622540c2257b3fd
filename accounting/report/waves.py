"""Whole waves: output shapes whose tiles keep every unit of a device busy to the last wave.

A device computes a product's output ``tile_m × tile_n`` tiles at a time, ``units`` of them
at once (a wave: the SMs of a GPU, the threads of a CPU). A product whose tile count leaves
the last wave part-empty pays for a whole wave, so throughput falls in a sawtooth with
``ceil(tiles / units)``; the report's sweep (:mod:`accounting.report.sweep`) seeds its search
with shapes that fill whole waves.

>>> whole_wave_shape(WaveGrid(units=132), 2048, 2048, 2)   # 22 × 6 = 132 tiles: one wave
(2816, 2048, 1536)
"""

import math
from dataclasses import dataclass

from accounting._checks import check_positive, check_positive_size

ALIGN_BYTES = 128
"""Wave-aware shapes have ``m``, ``n`` and ``k`` multiples of this many bytes of one element
(``128 // itemsize`` elements): every operand row starts on a 128-byte line, the alignment
tensor-core tiles and vector loads read best."""

GPU_TILE = (128, 256)
"""Output tile (rows × columns) one SM computes at a time: the 128×256 block cuBLAS/CUTLASS
kernels use for large bf16/fp16 products (mamf-finder's wave arithmetic assumes the same)."""

CPU_TILE = (192, 384)
"""Output block one CPU thread computes at a time. oneDNN's AVX2 float32 GEMM
(``src/cpu/x64/gemm/gemm_info.cpp``, uxlfoundation/oneDNN) packs ``B`` in panels of
``bn = 384`` columns and its micro-kernel covers ``um = 16`` or ``24`` rows (2–3 vector
registers of 8 floats), so 192 rows (a multiple of both) by 384 columns is a block
whose edges cut no packed panel; MKL's blocking is not published but is of the same order.
With a few threads nearly every large product fills whole waves, so on a CPU the tile
matters little: the wave seeds then act as a finer ladder around the ramp's best."""

ASPECT_WEIGHT = 0.5
""":func:`whole_wave_shape` weighs ``|log(m / n)|`` by this against ``|log(area / wanted area)|``."""


@dataclass(frozen=True)
class WaveGrid:
    """How a device runs a product's output: ``units`` tiles of ``tile_m × tile_n`` at a time (one wave).

    On a GPU ``units`` is the SM (CU) count, ``torch.cuda.get_device_properties(i).multi_processor_count``;
    on a CPU the threads torch uses, ``torch.get_num_threads()``.

    >>> grid = WaveGrid(units=132)
    >>> grid.tiles(4096, 4096), grid.waves(4096, 4096), grid.whole_waves(1536, 2816)
    (512, 3.878787878787879, True)
    """

    units: int
    tile_m: int = GPU_TILE[0]
    tile_n: int = GPU_TILE[1]

    def __post_init__(self):
        check_positive_size(self.units, "units")
        check_positive_size(self.tile_m, "tile_m")
        check_positive_size(self.tile_n, "tile_n")

    def tiles(self, m: int, n: int) -> int:
        """Output tiles of an ``m × n`` result (a part-filled tile counts whole)."""
        return -(-m // self.tile_m) * -(-n // self.tile_n)

    def waves(self, m: int, n: int) -> float:
        """Tiles per unit: the last of ``ceil(waves)`` waves is ``waves % 1`` full."""
        return self.tiles(m, n) / self.units

    def whole_waves(self, m: int, n: int) -> bool:
        """Whether every wave is full: whole tiles, and a tile count that is a multiple of ``units``."""
        return m % self.tile_m == 0 and n % self.tile_n == 0 and self.tiles(m, n) % self.units == 0


def element_multiple(itemsize: int) -> int:
    """Elements in ``ALIGN_BYTES`` of this element size (at least 1).

    >>> element_multiple(4), element_multiple(2), element_multiple(1)
    (32, 64, 128)
    """
    return max(1, ALIGN_BYTES // check_positive_size(itemsize, "itemsize"))


def round_to(value: float, multiple: int) -> int:
    """``value`` rounded to the nearest positive multiple of ``multiple``.

    >>> round_to(1000, 64), round_to(3, 64)
    (1024, 64)
    """
    return max(multiple, round(value / multiple) * multiple)


def whole_wave_shape(grid: WaveGrid, edge: float, k: int, itemsize: int, limit: int | None = None) -> tuple[int, int, int] | None:
    """The ``(m, k, n)`` nearest an ``edge × edge`` output that fills whole waves of ``grid``.

    ``m`` and ``n`` are multiples of the tile and of ``ALIGN_BYTES`` of an element, and
    their tile count a multiple of ``grid.units``; among such, with ``m`` within
    ``[edge / 2, 2 · edge]``, the one with the least ``|log(m·n / edge²)| + ASPECT_WEIGHT ·
    |log(m / n)|`` wins (area nearest ``edge²``, sides nearest equal; the smaller ``m`` on a tie). ``k`` is rounded
    to ``ALIGN_BYTES`` of an element. With ``limit``, ``m`` and ``n`` are at most ``limit``
    (``None`` when no whole-wave shape fits).

    >>> whole_wave_shape(WaveGrid(units=132), 2048, 2048, 2)   # 22 × 6 = 132 tiles: one wave
    (2816, 2048, 1536)
    >>> whole_wave_shape(WaveGrid(units=2, tile_m=192, tile_n=384), 4096, 4096, 4)
    (4224, 4096, 4224)
    """
    edge = check_positive(edge, "edge")
    align = element_multiple(itemsize)
    step_m, step_n = math.lcm(grid.tile_m, align), math.lcm(grid.tile_n, align)
    per_step_m, per_step_n = step_m // grid.tile_m, step_n // grid.tile_n  # tiles per step
    wanted_tiles = edge * edge / (grid.tile_m * grid.tile_n)
    best, best_score = None, None
    low, high = max(1, math.floor(edge / 2 / step_m)), max(1, math.ceil(2 * edge / step_m))
    if limit is not None:
        high = min(high, limit // step_m)
    for steps in range(low, high + 1):
        tiles_m = steps * per_step_m
        # tiles_n must make tiles_m × tiles_n a multiple of units, and be whole steps of n.
        granule = math.lcm(per_step_n, grid.units // math.gcd(tiles_m, grid.units))
        # The score is convex in log(n) with its minimum at the wanted area, so the granule
        # multiples either side of it hold the best n for this m (or the largest within limit).
        around = wanted_tiles / tiles_m / granule
        counts = {max(1, math.floor(around)), max(1, math.ceil(around))}
        if limit is not None:
            most = limit // grid.tile_n // granule
            counts = {min(count, most) for count in counts} - {0}
        for count in counts:
            m, n = tiles_m * grid.tile_m, count * granule * grid.tile_n
            score = abs(math.log(m * n / (edge * edge))) + ASPECT_WEIGHT * abs(math.log(m / n))
            if best_score is None or (score, m) < (best_score, best[0]):
                best, best_score = (m, n), score
    if best is None:
        return None
    m, n = best
    k = round_to(k, align)
    if limit is not None:
        k = max(align, min(k, limit // align * align))
    return m, k, n
