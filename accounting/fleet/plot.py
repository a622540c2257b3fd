"""``--plot``: a PNG of each rank's best TFLOP/s per dtype, with each dtype's median over the ranks and,
over each bar, that rank's straggler line (``straggler_fraction ×`` the median of the *other* ranks, the
rule the verdict applies); flagged ranks' bars are hatched.

matplotlib runs headless (``Agg``), imported only when a plot is asked for, as the report's plot is.
"""

import statistics

from accounting._units import TERA
from accounting.console import DPI, load_pyplot
from accounting.fleet.verdict import STRAGGLER, best_by_dtype

FIGURE_SIZE_IN = (9.0, 5.5)
BAR_SPAN = 0.8
"""Share of one rank's slot on the x-axis that its bars fill."""


def write_plot(document: dict, path: str) -> None:
    """Draw the ranks' best TFLOP/s per dtype from ``document`` into ``path`` as PNG."""
    pyplot = load_pyplot()
    best = best_by_dtype(document["ranks"])
    fraction = document["settings"]["straggler_fraction"]
    stragglers = {(flag["rank"], flag["subject"]) for flag in document["flags"] if flag["kind"] == STRAGGLER}
    ranks = list(range(len(document["ranks"])))
    figure, axes = pyplot.subplots(figsize=FIGURE_SIZE_IN, dpi=DPI, layout="constrained")
    colours = pyplot.rcParams["axes.prop_cycle"].by_key()["color"]
    width = BAR_SPAN / max(len(best), 1)
    for position, (dtype, values) in enumerate(best.items()):
        colour = colours[position % len(colours)]
        offset = -BAR_SPAN / 2 + width * (position + 0.5)
        for rank in ranks:
            if rank not in values:
                continue
            axes.bar(rank + offset, values[rank] / TERA, width=width, color=colour,
                     hatch="//" if (rank, dtype) in stragglers else None, edgecolor="black", linewidth=0.5,
                     label=dtype if rank == min(values) else None)
        median = statistics.median(values.values()) / TERA
        axes.axhline(median, color=colour, linestyle="--", linewidth=1.2, label=f"{dtype} median {median:.3g}")
        for rank in values:  # each rank's own line: the fraction of the median of the *other* ranks
            peers = [value for other, value in values.items() if other != rank]
            if peers:
                line = fraction * statistics.median(peers) / TERA
                axes.hlines(line, rank + offset - width / 2, rank + offset + width / 2, colors="black",
                            linestyles=":", linewidth=1.6,
                            label=f"straggler line ({fraction:g} × median of the other ranks)"
                            if position == 0 and rank == min(values) else None)
    axes.set_xticks(ranks, [f"rank {rank}" for rank in ranks])
    axes.set_ylabel("best TFLOP/s")
    axes.set_title(f"Best matmul TFLOP/s per rank ({len(ranks)} ranks) — hatched: straggler")
    axes.grid(True, axis="y", alpha=0.3)
    figure.legend(loc="outside lower center", ncol=max(len(best), 1), fontsize="small", frameon=False)
    figure.savefig(path, format="png")
    pyplot.close(figure)
