"""What each headline figure should read on a healthy H100 SXM or H200, and whether a reading is in that range.

Two kinds of fact, kept apart:

- the **datasheet peaks** come from the package's own peak table (:mod:`accounting.hardware.peaks`): the
  dense TFLOP/s per dtype and the memory bandwidth. Nothing here repeats them; a figure above
  :data:`~accounting.flops.MFU_CEILING` × the peak is a timer that misses work, not a fast card.
- the **published measured anchors**: what a healthy card was seen to reach (a best large square matmul
  per dtype, a device-to-device copy), each with its ``# source:``. A healthy reading may fall below
  its anchor by :data:`ANCHOR_TOLERANCE` (the anchors are best shapes on quiet cards; the report's burst
  is the best of a budgeted sweep, its sustained figure runs under a power and thermal soak).

So a matmul figure is expected in ``[ANCHOR_TOLERANCE × anchor, MFU_CEILING × peak]`` — a headline where
mamf-finder measured the same card and accumulation: a burst at least ``BURST_OF_MAMF`` × its MAMF, a
sustained figure within ``SUSTAINED_OF_MSMF`` of its MSMF (:func:`expected_headline`) — the copy bandwidth in
``[anchor low, datasheet bandwidth]``, the SM clock at or below the chip's maximum and the mean power at or
below its TDP (with :data:`POWER_MARGIN`).

>>> h200 = "NVIDIA H200"
>>> r = expected_matmul(h200, "bfloat16")
>>> round(r.low), round(r.high)
(632, 1039)
>>> judge(790.0, r), judge(500.0, r), judge(1200.0, r)
('in range', 'below', 'above')
>>> judge(790.0, None)
'no expectation'
"""

from dataclasses import dataclass

from accounting.flops import MFU_CEILING
from accounting.hardware.dtypes import FP8, peak_column
from accounting.hardware.peaks import find_chip

IN_RANGE, BELOW, ABOVE, NO_EXPECTATION = "in range", "below", "above", "no expectation"

ANCHOR_TOLERANCE = 0.8
"""A healthy card's reading may sit this far below a published best (1 − 0.8 = 20 %): the published bests
are the best of many shapes on a quiet card (mamf-finder), the acceptance run reads a budgeted sweep and a
sustained window. 0.8 of the bf16 anchor (≈ 634 of 792 TFLOP/s on an H100 SXM) stays above the benchmark
floor of 0.6 of the peak (594), which a throttled or power-capped card fails."""

POWER_MARGIN = 1.02
"""The mean power of a window may read this much over the TDP: NVML's averaged reading at the cap itself."""


@dataclass(frozen=True)
class Expected:
    """A healthy reading lies in ``[low, high]`` (either end ``None``: unbounded there), in ``unit``, because of ``source``."""

    low: float | None
    high: float | None
    unit: str
    source: str

    def text(self, digits: int = 0) -> str:
        def number(value):
            return f"{value:,.{digits}f}"
        if self.low is not None and self.high is not None:
            return f"{number(self.low)}–{number(self.high)} {self.unit}"
        if self.high is not None:
            return f"≤ {number(self.high)} {self.unit}"
        return f"≥ {number(self.low)} {self.unit}"


def judge(value, expected: Expected | None) -> str:
    """``in range``, ``below`` or ``above`` its expected range; ``no expectation`` without one (or without a value)."""
    if expected is None or value is None:
        return NO_EXPECTATION
    if expected.low is not None and value < expected.low:
        return BELOW
    if expected.high is not None and value > expected.high:
        return ABOVE
    return IN_RANGE


# Published best large matmuls, TFLOP/s, keyed by peak-table row and peak column.
_MATMUL_ANCHORS = {
    # source: mamf-finder (stas00/ml-engineering compute/accelerator/benchmarks/mamf-finder.py) results as
    # listed in mag-/gpu_benchmark README.md: NVIDIA H100 SXM 792.1 TFLOP/s (bf16, best shape 6144x17920x2816);
    # ../shared/reference/accelerators.md: H100 SXM ≈ 794, and an 8192³ product at ~770–800 here.
    ("H100 SXM", "bfloat16"): 792.1,
    # source: ../shared/reference/accelerators.md: "an 8192³ bf16 product ran at ~770–800 TFLOP/s" on an H200
    # (same Hopper die and tensor clock as the H100 SXM; only the memory differs).
    ("H200 SXM", "bfloat16"): 790.0,
    # source: the datasheets give fp16 the bf16 tensor rate (989.4 dense on both); no separate fp16 best is
    # published, so the bf16 anchors stand for fp16.
    ("H100 SXM", "float16"): 792.1,
    ("H200 SXM", "float16"): 790.0,
    # source: ../shared/reference/accelerators.md, mamf-finder fp8: H100 ≈ 1403 (71 %), H200 ≈ 1453 (73 %).
    ("H100 SXM", FP8): 1403.0,
    ("H200 SXM", FP8): 1453.0,
}
_FP32_ANCHOR_FRACTION = 0.7
"""source: benchmarks.json, cuda.floors._why: "Plain FP32 (no tensor cores) and TF32 run near 0.7-0.8 of their
peaks on Hopper/Ampere" — the low end, as a fraction of the datasheet peak (no published best to cite)."""

# source: the GPU acceptance brief's anchor for a device-to-device copy on an H200, 3.0–4.3 TB/s (bytes read
# plus written); no public measurement of the report's copy was found. The H100 SXM's low end is the same
# fraction of its datasheet bandwidth (3.0 / 4.8 = 0.625 of 3.35 TB/s ≈ 2.09 TB/s), stated as derived.
_COPY_LOW_TBS = {"H200 SXM": 3.0, "H100 SXM": 3.0 / 4.8 * 3.35}
_COPY_SOURCE = {"H200 SXM": "published copy anchor 3.0–4.3 TB/s; datasheet 4.8 TB/s",
                "H100 SXM": "H200's copy anchor scaled to the H100 SXM datasheet (0.625 × 3.35 TB/s); datasheet 3.35"}

# source: NVIDIA H100 and H200 (SXM) datasheets: max TDP up to 700 W (configurable); nvidia-smi -q on both:
# "Max Clocks: SM 1980 MHz" (the datasheets' tensor peaks assume 1830 MHz).
_BOARD = {"H100 SXM": (1980.0, 700.0), "H200 SXM": (1980.0, 700.0)}


def chip_of(device_name: str | None) -> str | None:
    """The peak-table row of a device name when it is one this module has anchors for, else ``None``.

    >>> chip_of("NVIDIA H100 80GB HBM3"), chip_of("NVIDIA H200"), chip_of("NVIDIA A100-SXM4-80GB")
    ('H100 SXM', 'H200 SXM', None)
    """
    if not device_name:
        return None
    chip = find_chip(device_name)
    return chip.row if chip is not None and chip.row in _BOARD else None


def expected_matmul(device_name: str | None, dtype: str) -> Expected | None:
    """The healthy range of a large matmul's TFLOP/s in ``dtype`` on ``device_name`` (``None``: no anchor)."""
    row = chip_of(device_name)
    if row is None:
        return None
    column = peak_column(dtype)
    peak = find_chip(device_name).tflops.get(column)
    if peak is None:
        return None
    anchor = _MATMUL_ANCHORS.get((row, column))
    if anchor is not None:
        source = f"{ANCHOR_TOLERANCE:g} × published best {anchor:g}; ≤ {MFU_CEILING:g} × datasheet {peak:g}"
    elif column in ("float32", "tf32"):
        anchor = _FP32_ANCHOR_FRACTION * peak
        source = f"{ANCHOR_TOLERANCE:g} × {_FP32_ANCHOR_FRACTION:g} of datasheet {peak:g} (benchmarks.json); ≤ {MFU_CEILING:g} × peak"
    else:
        return None
    return Expected(ANCHOR_TOLERANCE * anchor, MFU_CEILING * peak, "TFLOP/s", f"{row}: {source}")


# mamf-finder v4 (stas00/ml-engineering, fast-mamf branch, --search auto, default fp8 accumulation) on the H200
# the package's first GPU run used, the same hour (driver 580.159.04, torch 2.11.0+cu130):
# source: tests/data/hosts/nvidia-h200/mamf-bf16.txt: MAMF 816.3 TFLOP/s (3072x2816x20480, 1980 MHz),
#         MSMF 707.0 TFLOP/s (8192x8448x20480, 691 W, 1454 MHz);
# source: tests/data/hosts/nvidia-h200/mamf-fp8.txt: MAMF 1399.0, MSMF 1244.5 (8448x8192x16384, 693 W, 1325 MHz).
# (row, peak column, accumulation): (MAMF, MSMF); bf16's accumulation is None.
_MAMF_ANCHORS = {
    ("H200 SXM", "bfloat16", None): (816.3, 707.0),
    ("H200 SXM", FP8, "default"): (1399.0, 1244.5),
}
BURST_OF_MAMF = 0.98
"""A healthy burst reads at least this share of mamf-finder's MAMF (the same accumulation)."""
SUSTAINED_OF_MSMF = 0.05
"""A healthy sustained figure reads within this share either side of mamf-finder's MSMF (the same accumulation):
both are power-saturated figures of seconds-long windows, on different shapes."""


def expected_headline(device_name: str | None, dtype: str, kind: str,
                      accumulation: str | None = None) -> Expected | None:
    """The healthy range of a ``burst`` or ``sustained`` headline: against mamf-finder's MAMF (burst ≥ 0.98 ×) or
    MSMF (sustained ± 5 %) where one was measured with the same accumulation, else :func:`expected_matmul`.

    >>> r = expected_headline("NVIDIA H200", "bfloat16", "sustained")
    >>> round(r.low, 1), round(r.high, 1)
    (671.6, 742.4)
    >>> round(expected_headline("NVIDIA H200", "float8_e4m3fn", "burst", "default").low, 1)
    1371.0
    >>> expected_headline("NVIDIA H200", "float8_e4m3fn", "sustained", "fast") == expected_matmul("NVIDIA H200", "fp8")
    True
    """
    row = chip_of(device_name)
    anchors = None if row is None else _MAMF_ANCHORS.get((row, peak_column(dtype), accumulation))
    if anchors is None:
        return expected_matmul(device_name, dtype)
    mamf, msmf = anchors
    peak = find_chip(device_name).tflops.get(peak_column(dtype))
    said = f" ({accumulation} accumulation)" if accumulation else ""
    if kind == "burst":
        return Expected(BURST_OF_MAMF * mamf, MFU_CEILING * peak, "TFLOP/s", f"{row}: ≥ {BURST_OF_MAMF:g} × "
                        f"mamf-finder MAMF {mamf:g}{said}; ≤ {MFU_CEILING:g} × datasheet {peak:g}")
    return Expected((1 - SUSTAINED_OF_MSMF) * msmf, (1 + SUSTAINED_OF_MSMF) * msmf, "TFLOP/s",
                    f"{row}: mamf-finder MSMF {msmf:g}{said} ± {SUSTAINED_OF_MSMF:.0%}")


def expected_bandwidth(device_name: str | None) -> Expected | None:
    """The healthy range of the report's device copy (bytes read plus written per second), in TB/s."""
    row = chip_of(device_name)
    if row is None:
        return None
    spec = find_chip(device_name).bandwidth_tbs
    return Expected(_COPY_LOW_TBS[row], spec, "TB/s", f"{row}: {_COPY_SOURCE[row]}")


def expected_clock(device_name: str | None) -> Expected | None:
    """The SM clock under load: at most the chip's maximum (no published lower bound: power decides it)."""
    row = chip_of(device_name)
    if row is None:
        return None
    return Expected(None, _BOARD[row][0], "MHz", f"{row}: max SM clock {_BOARD[row][0]:g} MHz")


def expected_power(device_name: str | None) -> Expected | None:
    """The mean board power of a window: at most the TDP (× :data:`POWER_MARGIN`)."""
    row = chip_of(device_name)
    if row is None:
        return None
    tdp = _BOARD[row][1]
    return Expected(None, tdp * POWER_MARGIN, "W", f"{row}: TDP {tdp:g} W (× {POWER_MARGIN:g})")


def expected_model_mfu(floor: float | None) -> Expected | None:
    """A training step's model MFU: at least its floor in benchmarks.json, at most the MFU ceiling."""
    if floor is None:
        return None
    return Expected(floor, MFU_CEILING, "", f"benchmarks.json model floor {floor:g}; ceiling {MFU_CEILING:g}")


AGREEMENT = (0.9, 1.1)
"""The package's ``time_matmul`` median per call over the event-timed loop's: within 10 %, as
``tests/benchmarks/test_matmul.py`` asks of it against ``torch.utils.benchmark.Timer`` on the CPU. Below: the
package's timer misses work; above: it times more than the product (a launch, a flush)."""
HOST_AGREEMENT = (0.98, 1.1)
"""The host clock around the same loop (synchronized before each read) over the events: the host brackets the
events, so it can only read longer, by a launch and a synchronize (microseconds of a loop of ≥ 0.2 s)."""


def expected_ratio(bounds: tuple[float, float], what: str) -> Expected:
    return Expected(bounds[0], bounds[1], "×", what)
