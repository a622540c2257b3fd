"""How much of a long sweep's best the report's default budget finds: ``python -m studies.search_ratio``.

Runs the report's own matmul sweep (:func:`accounting.report.run.make_sweep`: the same
timer, wave grid, size limits and share of the budget as ``accounting report --budget S``)
once with ``--short`` seconds and once with ``--long``, and prints per dtype the best
FLOP/s of each and their ratio, ``short / long``. The target is ``TARGET_RATIO`` on every
dtype: the default 60 s report should find at least 0.97 of what a 240 s sweep finds, so that
a report within its default budget is not far below what the machine can do.

The swept ratio holds search and noise together: the two bests were timed minutes apart,
and on a shared VM a whole process can run slower for a while, so the same shape timed
twice can read well below 1 (measured: docs/report-and-telemetry.md, "The shape search").
The script therefore **re-times both winners side by side** (:func:`retime_winners`:
``RETIME_ROUNDS`` rounds of short, long, long, short) and judges the target on the median
of the rounds' ratios, which measures what the short search missed and not when it ran.
When both sweeps chose the same shape, the short search missed nothing: the re-timed ratio
is 1 without timing.

Exit status: 0 when it ran (whatever the ratios), 2 for bad input.

>>> ratio_row(SearchRatio("float32", 9.0e10, 1.0e11, (2048, 2048, 2048), (2048, 4096, 2048), retimed_ratio=0.95))
['float32', '0.0900', '2048×2048×2048', '0.1000', '2048×4096×2048', '0.900', '0.950', 'below 0.97']
"""

import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass

from accounting._checks import positive_number_from_text
from accounting._units import TERA
from accounting.console import EXIT_BAD_INPUT, EXIT_OK, OneLineParser
from accounting.errors import AccountingError
from accounting.report.cli import dtype_list
from accounting.report.sweep import summarise

TARGET_RATIO = 0.97
"""The short sweep should find at least this share of the long one's best FLOP/s."""

DEFAULT_SHORT_S = 60.0
DEFAULT_LONG_S = 240.0
RETIME_ROUNDS = 3
"""Rounds of the side-by-side re-timing, each timing both winners twice (odd, so the median is one round's ratio)."""


@dataclass(frozen=True)
class SearchRatio:
    """One dtype's best FLOP/s after the short and the long sweep, and the shapes that reached them."""

    dtype: str
    short_flops_per_s: float | None
    long_flops_per_s: float | None
    short_shape: tuple[int, int, int] | None = None
    long_shape: tuple[int, int, int] | None = None
    retimed_ratio: float | None = None
    """short / long of the two winners timed side by side (:func:`retime_winners`); ``None`` when not re-timed."""

    @property
    def swept_ratio(self) -> float | None:
        """``short / long`` of the bests as the sweeps timed them (``None`` when either measured nothing)."""
        if not self.short_flops_per_s or not self.long_flops_per_s:
            return None
        return self.short_flops_per_s / self.long_flops_per_s

    @property
    def ratio(self) -> float | None:
        """The ratio the target is judged on: the re-timed one where there is one, else the swept one."""
        return self.retimed_ratio if self.retimed_ratio is not None else self.swept_ratio

    @property
    def meets_target(self) -> bool:
        return self.ratio is not None and self.ratio >= TARGET_RATIO


def _best(measurements):
    best = summarise(measurements or [])["best"]
    return (None, None) if best is None else (best.flops_per_second, best.shape)


def retime_winners(measure, dtype: str, short_shape, long_shape, *, rounds: int = RETIME_ROUNDS) -> float | None:
    """short / long FLOP/s of two shapes timed side by side: the median over ``rounds`` rounds.

    ``measure(dtype, m, k, n)`` is the sweep's timer (a :class:`~accounting.report.sweep.MatmulMeasurement`,
    or ``None`` when the operands do not fit). A round times the shapes in the order short,
    long, long, short and takes the ratio of each shape's geometric-mean rate: the two shapes'
    timings sit at the same mean position in time, so a steady drift in the machine's speed
    cancels within the round. The median over rounds leaves out a round that a slow episode
    of the host hit. The same shape gives 1.0 untimed; ``None`` when a shape no longer fits.

    >>> from accounting.report.sweep import MatmulMeasurement
    >>> seconds = {(64, 64, 64): 1.0, (64, 128, 64): 1.6}   # the long winner: twice the FLOPs in 1.6x the time
    >>> def measure(dtype, m, k, n):
    ...     return MatmulMeasurement(dtype, m, k, n, 2 * m * k * n, seconds[(m, k, n)], 0.0, 5)
    >>> retime_winners(measure, "float32", (64, 64, 64), (64, 128, 64))
    0.8
    """
    if tuple(short_shape) == tuple(long_shape):
        return 1.0
    ratios = []
    for _ in range(rounds):
        rates = {"short": [], "long": []}
        for which in ("short", "long", "long", "short"):
            done = measure(dtype, *(short_shape if which == "short" else long_shape))
            if done is None:
                return None
            rates[which].append(done.flops_per_second)
        ratios.append(math.sqrt(rates["short"][0] * rates["short"][1] / (rates["long"][0] * rates["long"][1])))
    return statistics.median(ratios)


def search_ratios(sweep_with_budget, *, short_s: float, long_s: float, measure=None) -> list[SearchRatio]:
    """Run ``sweep_with_budget(budget_s) -> {dtype: [MatmulMeasurement]}`` with ``short_s`` then ``long_s``.

    ``measure``: a timer (as the sweep's) with which both winners of each dtype are re-timed
    side by side (:func:`retime_winners`); ``None`` compares the bests as swept.
    Raises :class:`AccountingError` unless ``0 < short_s < long_s``.
    """
    if not 0 < short_s < long_s:
        raise AccountingError(f"--short must be below --long and above 0, got --short {short_s:g} --long {long_s:g}")
    short = sweep_with_budget(short_s)
    long = sweep_with_budget(long_s)
    ratios = []
    for dtype in list(dict.fromkeys([*short, *long])):
        short_best, short_shape = _best(short.get(dtype))
        long_best, long_shape = _best(long.get(dtype))
        retimed = None
        if measure is not None and short_shape is not None and long_shape is not None:
            retimed = retime_winners(measure, dtype, short_shape, long_shape)
        ratios.append(SearchRatio(dtype, short_best, long_best, short_shape, long_shape, retimed))
    return ratios


def report_sweep(device, dtypes, *, on_budget=None):
    """``sweep_with_budget(budget_s)``: the sweep ``accounting report --budget budget_s`` runs, on this device.

    The sweep gets the share of ``budget_s`` it gets in the report (:func:`accounting.report.run.sweep_budget_s`,
    with nothing spent before it). ``on_budget(budget_s, plan)`` is called before each sweep.
    The function's ``timer`` attribute is the last sweep's timer (the one to re-time winners with).
    """
    from accounting.report import run

    def sweep_with_budget(budget_s):
        plan = run.prepare(device=device, dtypes=dtypes, budget_s=budget_s)
        if on_budget is not None:
            on_budget(budget_s, plan)
        sweep_with_budget.timer, sweep = run.make_sweep(plan, sweep_budget_s=run.sweep_budget_s(budget_s, 0.0))
        return sweep.run(plan.dtypes)

    sweep_with_budget.timer = None
    return sweep_with_budget


def _shape_text(shape) -> str:
    return "—" if shape is None else "×".join(str(dim) for dim in shape)


def _tflops_text(flops_per_s) -> str:
    return "—" if flops_per_s is None else f"{flops_per_s / TERA:.4f}"


def ratio_row(ratio: SearchRatio) -> list[str]:
    """One table row: dtype, short best and shape, long best and shape, swept and re-timed ratios, verdict."""
    verdict = "n/a" if ratio.ratio is None else ("ok" if ratio.meets_target else f"below {TARGET_RATIO:g}")
    retimed = "—" if ratio.retimed_ratio is None else f"{ratio.retimed_ratio:.3f}"
    if ratio.retimed_ratio is not None and ratio.short_shape == ratio.long_shape:
        retimed = "same shape"
    return [ratio.dtype, _tflops_text(ratio.short_flops_per_s), _shape_text(ratio.short_shape),
            _tflops_text(ratio.long_flops_per_s), _shape_text(ratio.long_shape),
            "—" if ratio.swept_ratio is None else f"{ratio.swept_ratio:.3f}", retimed, verdict]


def render(ratios: list[SearchRatio], *, short_s: float, long_s: float) -> str:
    """The ratios as a plain-text table."""
    from accounting.console import table

    header = ["dtype", f"{short_s:g} s TFLOP/s", "shape", f"{long_s:g} s TFLOP/s", "shape", "swept ratio",
              f"re-timed ratio ({RETIME_ROUNDS} rounds)", f"target ≥ {TARGET_RATIO:g}"]
    return table(header, [ratio_row(ratio) for ratio in ratios])


def _seconds(option: str):
    def parse(text: str) -> float:
        try:
            return positive_number_from_text(text, option, "seconds")
        except AccountingError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m studies.search_ratio",
                           description="Best matmul FLOP/s of the report's sweep with a short and a long budget, "
                                       "and their ratio per dtype.")
    parser.add_argument("--short", metavar="SECONDS", type=_seconds("--short"), default=DEFAULT_SHORT_S,
                        help="the report budget to judge. Default: %(default)r")
    parser.add_argument("--long", metavar="SECONDS", type=_seconds("--long"), default=DEFAULT_LONG_S,
                        help="the longer report budget to compare with. Default: %(default)r")
    parser.add_argument("--device", metavar="DEVICE", default=None, help="cpu, cuda or cuda:N. Default: as the report")
    parser.add_argument("--dtypes", metavar="LIST", type=dtype_list, default=None,
                        help="comma-separated dtypes. Default: as the report (the natively run ones)")
    parser.add_argument("--no-retime", action="store_true",
                        help="judge the bests as swept, without re-timing both winners side by side")
    return parser


def _load_text() -> str:
    try:
        return "load average " + ", ".join(f"{value:.2f}" for value in os.getloadavg())
    except (AttributeError, OSError):
        return "load average unknown"


def main(argv=None) -> int:
    """Run both sweeps and print the table; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.short < args.long:
        parser.error(f"--short must be below --long, got --short {args.short:g} --long {args.long:g}")

    def on_budget(budget_s, plan):
        print(f"{budget_s:g} s report sweep of {', '.join(plan.dtypes)} on {plan.info.name} ({_load_text()})",
              file=sys.stderr, flush=True)

    try:
        sweep_with_budget = report_sweep(args.device, args.dtypes, on_budget=on_budget)
        started = time.monotonic()
        ratios = search_ratios(sweep_with_budget, short_s=args.short, long_s=args.long,
                               measure=None if args.no_retime else lambda *shape: sweep_with_budget.timer(*shape))
    except AccountingError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(render(ratios, short_s=args.short, long_s=args.long))
    print(f"took {time.monotonic() - started:.0f} s; {_load_text()} after")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
