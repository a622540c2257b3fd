"""``--plot``: a PNG of achieved TFLOP/s against matrix size, one colour per dtype, its spec peak dashed,
its published burst (▲) and sustained (◆) headlines marked, with their clocks in a legend of their own.

matplotlib is imported here only, on the headless ``Agg`` backend, so the report runs
without a display and without matplotlib unless a plot is asked for.
"""

from accounting._units import TERA
from accounting.console import DPI, load_pyplot
from accounting.report.accumulation import figure_label
from accounting.report.model_section import draw_model_panel

LOG_Y_RATIO = 20.0
"""Use a log y-axis when the largest value plotted is this many times the smallest."""

FIGURE_SIZE_IN = (9.0, 6.0)
X_MARGIN = 1.15
"""The x-axis reaches this factor beyond the smallest and largest size."""
PEAK_DASH = 5
"""Length (points) of one dash of a peak line."""
HEADLINE_MARKERS = {"burst": "^", "sustained": "D"}
"""Marker of each headline kind (:mod:`accounting.report.headlines`): ▲ burst, ◆ sustained."""


def _peak_dashes(position: int, count: int):
    """Dash pattern of a dtype's peak line: the dashes of equal peaks interleave, so each colour shows.

    >>> _peak_dashes(1, 3), _peak_dashes(0, 1)
    ((5, (5, 10)), (0, (6, 3)))
    """
    if count == 1:
        return (0, (6, 3))
    return (PEAK_DASH * position, (PEAK_DASH, PEAK_DASH * (count - 1)))


def headline_label(dtype: str, figure: dict) -> str:
    """Legend text of one published headline: kind, TFLOP/s, and the clock and power it ran at where known.

    >>> headline_label("bfloat16", {"kind": "sustained", "tflops": 708.5, "clock_mhz": 1339.0, "power_w": 699.6})
    'bfloat16 sustained 708 TFLOP/s at 1339 MHz, 700 W'
    >>> headline_label("float32", {"kind": "burst", "tflops": 0.0561, "clock_mhz": None, "power_w": None})
    'float32 burst 0.0561 TFLOP/s (clock unknown)'
    >>> headline_label("float8_e4m3fn", {"kind": "burst", "tflops": 1567.3, "clock_mhz": 1980.0, "accumulation": "fast"})
    'float8_e4m3fn (fast accumulation) burst 1.57e+03 TFLOP/s at 1980 MHz'
    """
    text = f"{figure_label(dtype, figure.get('accumulation'))} {figure['kind']} {figure['tflops']:.3g} TFLOP/s"
    readings = []
    if figure.get("clock_mhz") is not None:
        readings.append(f"{figure['clock_mhz']:.0f} MHz")
    if figure.get("power_w") is not None:
        readings.append(f"{figure['power_w']:.0f} W")
    return text + (f" at {', '.join(readings)}" if readings else " (clock unknown)")


def _published_headlines(section: dict) -> list[dict]:
    """The dtype's published headlines that name a shape, burst first (fp8: fast accumulation, then default)."""
    figures = section.get("headlines") or {}
    other = figures.get("default_accumulation") or {}  # fp8 with default accumulation, after the fast figures
    return [group[kind] for group in (figures, other) for kind in HEADLINE_MARKERS
            if group.get(kind) and group[kind].get("published") and group[kind].get("tflops") is not None
            and group[kind].get("shape")]


def write_plot(report: dict, path: str) -> None:
    """Draw ``report`` (:func:`draw_plot`) into ``path`` as PNG."""
    pyplot = load_pyplot()
    figure = draw_plot(report)
    figure.savefig(path, format="png")
    pyplot.close(figure)


def draw_plot(report: dict):
    """Every dtype's measurements from ``report`` (see :mod:`accounting.report.results`), as a matplotlib figure.

    x is the edge of the square product with the same FLOPs, ``(m·k·n)^(1/3)``, on a log₂ scale;
    ramp measurements are joined by a line, refine measurements are hollow markers, the best
    is a star. Each dtype's spec peak is a dashed line of its colour; its published burst and
    sustained headlines are a ▲ and a ◆ of its colour at their shapes, listed with their clocks
    in a legend inside the plot. The caller closes the figure.
    """
    pyplot = load_pyplot()
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator  # deferred: only a plot needs it

    if report.get("model"):  # accounting report --model SIZE: a second panel below the sweep
        width, height = FIGURE_SIZE_IN
        figure, (axes, model_axes) = pyplot.subplots(2, 1, figsize=(width, height * 1.6), dpi=DPI,
                                                     layout="constrained", height_ratios=(1.6, 1))
        draw_model_panel(model_axes, report["model"])
    else:
        figure, axes = pyplot.subplots(figsize=FIGURE_SIZE_IN, dpi=DPI, layout="constrained")
    colours = pyplot.rcParams["axes.prop_cycle"].by_key()["color"]
    values, sizes = [], []
    headline_handles, headline_labels = [], []
    count = len(report["dtypes"])
    for position, (dtype, section) in enumerate(report["dtypes"].items()):
        colour = colours[position % len(colours)]
        rows = section["measurements"]
        ramp = sorted((row for row in rows if row["phase"] == "ramp"), key=lambda row: row["size"])
        refine = [row for row in rows if row["phase"] != "ramp"]
        label = dtype
        if section["mfu"] is not None:
            label += f" (best {section['best']['tflops']:.3g} TFLOP/s, MFU {section['mfu']:.2f})"
        elif section["best"] is not None:
            label += f" (best {section['best']['tflops']:.3g} TFLOP/s)"
        axes.plot([row["size"] for row in ramp], [row["tflops"] for row in ramp], "o-", color=colour,
                  label=label, markersize=4, linewidth=1.6)
        if refine:
            axes.plot([row["size"] for row in refine], [row["tflops"] for row in refine], "o", color=colour,
                      markerfacecolor="none", markersize=5, alpha=0.7)
        if section["best"] is not None:
            best = section["best"]
            axes.plot([best["size"]], [best["tflops"]], "*", color=colour, markersize=14,
                      markeredgecolor="black", markeredgewidth=0.6, zorder=5)
            axes.annotate(f"{best['m']}×{best['k']}×{best['n']}", (best["size"], best["tflops"]),
                          textcoords="offset points", xytext=(8, 6), fontsize="x-small", color=colour)
        peak = section["peak_flops_per_s"]
        if peak is not None:
            axes.axhline(peak / TERA, color=colour, linestyle=_peak_dashes(position, count), linewidth=1.4,
                         label=f"{dtype} spec peak {peak / TERA:.3g} TFLOP/s")
            values.append(peak / TERA)
        for headline in _published_headlines(section):
            m, k, n = headline["shape"]
            size = (m * k * n) ** (1 / 3)
            (marker,) = axes.plot([size], [headline["tflops"]], HEADLINE_MARKERS[headline["kind"]], color=colour,
                                  markersize=9, markeredgecolor="black", markeredgewidth=0.8, zorder=6,
                                  label=f"_{dtype} {headline['kind']}")  # "_": in the headline legend only
            headline_handles.append(marker)
            headline_labels.append(headline_label(dtype, headline))
            values.append(headline["tflops"])
            sizes.append(size)
        values += [row["tflops"] for row in rows]
        sizes += [row["size"] for row in rows]

    if values and max(values) / max(min(values), 1e-12) > LOG_Y_RATIO:
        axes.set_yscale("log")
        axes.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
        axes.yaxis.set_minor_locator(NullLocator())
        axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    else:
        axes.set_ylim(bottom=0, top=max(values, default=1) * 1.1)
    if sizes:
        axes.set_xscale("log", base=2)
        left, right = min(sizes) / X_MARGIN, max(sizes) * X_MARGIN
        axes.set_xlim(left, right)
        powers = range(int(left).bit_length() - 1, int(right).bit_length() + 1)
        ticks = [2**power for power in powers if left <= 2**power <= right]
        ticks = ticks or sorted({round(min(sizes)), round(max(sizes))})  # a sweep within one octave
        axes.xaxis.set_major_locator(FixedLocator(ticks))
        axes.xaxis.set_minor_locator(NullLocator())
        axes.set_xticklabels([str(tick) for tick in ticks])

    device = report["machine"]["device"]
    budget = report["settings"]["budget_s"]
    axes.set_title(f"Matmul throughput on {device['name']} ({device['kind']}), budget {budget:g} s")
    marks = "○ refine shapes, ★ best" + (", ▲ burst, ◆ sustained" if headline_handles else "")
    axes.set_xlabel(f"matrix size  (m·k·n)^(1/3)   — {marks}")
    axes.set_ylabel("achieved TFLOP/s")
    axes.grid(True, which="major", alpha=0.3)
    if headline_handles:  # inside the plot, where it hides least; the figure legend below keeps its columns
        axes.legend(headline_handles, headline_labels, loc="best", fontsize="x-small", title="headlines",
                    title_fontsize="x-small", framealpha=0.8)
    # Below the plot, so it never hides a curve or a peak line; one column per dtype (curve above its peak).
    figure.legend(loc="outside lower center", ncol=max(count, 1), fontsize="small", frameon=False)
    return figure
