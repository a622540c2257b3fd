"""``--plot``: a PNG of each rank's best TFLOP/s per dtype, with each dtype's median over the ranks and,
over each bar, that rank's straggler line (``straggler_fraction ×`` the median of the *other* ranks, the
rule the verdict applies); flagged ranks' bars are hatched. Beside it, each rank's memory bandwidth with
its own line (``figure_fractions.memory_bandwidth``), busy ranks' bars crossed and their neighbour's share
written over them; and where links were timed, the point-to-point matrix (GB/s), slow links outlined. Each rank's
label carries its device's health where it is not healthy (red: failed, orange: degraded), and a failed rank's
bars are drawn with a red edge: its figures are kept, not trusted.

matplotlib runs headless (``Agg``), imported only when a plot is asked for, as the report's plot is.
"""

import statistics

from accounting._units import GB, TERA
from accounting.console import DPI, load_pyplot
from accounting.fleet.figures import bandwidth_by_rank
from accounting.fleet.verdict import SLOW_LINK, SLOW_MEMORY, STRAGGLER, best_by_dtype
from accounting.report.accumulation import dtype_label

FIGURE_SIZE_IN = (9.0, 5.5)
PANEL_WIDTH_IN = 5.0
"""Width added for each panel beside the TFLOP/s one (memory bandwidth, the link matrix)."""
BAR_SPAN = 0.8
"""Share of one rank's slot on the x-axis that its bars fill."""
STATE_COLOURS = {"failed": "red", "degraded": "darkorange"}
"""Tick-label colours of a rank whose device is not healthy."""


def _states(document: dict) -> dict:
    return {entry["rank"]: entry["state"] for entry in (document.get("health") or {}).get("ranks", [])}


def _rank_ticks(axes, ranks: list, states: dict) -> None:
    """``rank N`` under each rank, with its state in colour where it is not healthy."""
    labels = [f"rank {rank}" + (f"\n{states[rank]}" if states.get(rank) in STATE_COLOURS else "") for rank in ranks]
    axes.set_xticks(ranks, labels)
    for label, rank in zip(axes.get_xticklabels(), ranks):
        if states.get(rank) in STATE_COLOURS:
            label.set_color(STATE_COLOURS[states[rank]])


def write_plot(document: dict, path: str) -> None:
    """Draw the ranks' best TFLOP/s per dtype from ``document`` into ``path`` as PNG."""
    pyplot = load_pyplot()
    best = best_by_dtype(document["ranks"])
    fraction = document["settings"]["straggler_fraction"]
    stragglers = {(flag["rank"], flag["subject"]) for flag in document["flags"] if flag["kind"] == STRAGGLER}
    ranks = list(range(len(document["ranks"])))
    states = _states(document)
    links = document.get("links") or []
    panels = 2 + bool(links)
    figure, all_axes = pyplot.subplots(1, panels, figsize=(FIGURE_SIZE_IN[0] + PANEL_WIDTH_IN * (panels - 1),
                                                           FIGURE_SIZE_IN[1]), dpi=DPI, layout="constrained",
                                       gridspec_kw={"width_ratios": [2] + [1] * (panels - 1)})
    axes = all_axes[0]
    colours = pyplot.rcParams["axes.prop_cycle"].by_key()["color"]
    width = BAR_SPAN / max(len(best), 1)
    for position, (dtype, values) in enumerate(best.items()):
        colour = colours[position % len(colours)]
        offset = -BAR_SPAN / 2 + width * (position + 0.5)
        for rank in ranks:
            if rank not in values:
                continue
            failed = states.get(rank) == "failed"
            axes.bar(rank + offset, values[rank] / TERA, width=width, color=colour,
                     hatch="//" if (rank, dtype) in stragglers else None,
                     edgecolor=STATE_COLOURS["failed"] if failed else "black", linewidth=2.0 if failed else 0.5,
                     label=dtype_label(dtype) if rank == min(values) else None)
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
    _rank_ticks(axes, ranks, states)
    axes.set_ylabel("best TFLOP/s")
    state = (document.get("health") or {}).get("state")
    axes.set_title(f"Best matmul TFLOP/s per rank ({len(ranks)} ranks" + (f", fleet {state}" if state else "")
                   + ") — hatched: straggler; red edge: failed device")
    axes.grid(True, axis="y", alpha=0.3)
    figure.legend(loc="outside lower center", ncol=max(len(best), 1), fontsize="small", frameon=False)
    _memory_panel(all_axes[1], document, ranks)
    if links:
        _link_panel(all_axes[2], figure, document, links, rectangle=pyplot.Rectangle)
    figure.savefig(path, format="png")
    pyplot.close(figure)


def _memory_panel(axes, document: dict, ranks: list) -> None:
    """Each rank's device-copy bandwidth, its line (the fraction × the median of the other ranks), busy ranks crossed."""
    bandwidth = bandwidth_by_rank(document["ranks"])
    fraction = (document["settings"].get("figure_fractions") or {}).get("memory_bandwidth")
    slow = {flag["rank"] for flag in document["flags"] if flag["kind"] == SLOW_MEMORY}
    figures = document.get("figures") or {}
    for rank, value in bandwidth.items():
        entry = (figures.get(str(rank)) or {}).get("neighbours") or {}
        axes.bar(rank, value / GB, width=BAR_SPAN, color="tab:gray", edgecolor="black", linewidth=0.5,
                 hatch="xx" if entry.get("busy") else ("//" if rank in slow else None))
        if entry.get("share") is not None:
            axes.annotate(f"{entry['share']:.0%} other work", (rank, value / GB), ha="center", va="bottom",
                          fontsize="x-small")
        peers = [other for peer, other in bandwidth.items() if peer != rank]
        if peers and fraction:
            axes.hlines(fraction * statistics.median(peers) / GB, rank - BAR_SPAN / 2, rank + BAR_SPAN / 2,
                        colors="black", linestyles=":", linewidth=1.6)
    _rank_ticks(axes, ranks, _states(document))
    axes.set_ylabel("memory bandwidth GB/s (device copy)")
    line = f"{fraction:g} × median of the others" if fraction else "no line"
    axes.set_title(f"Memory bandwidth — dotted: {line}; hatched: slow; crossed: busy", fontsize="small")
    axes.grid(True, axis="y", alpha=0.3)


def _link_panel(axes, figure, document: dict, links: list, *, rectangle) -> None:
    """The point-to-point matrix of GB/s (row sends to column; every scope together), slow links outlined."""
    ranks = sorted({row["src"] for row in links} | {row["dst"] for row in links})
    index = {rank: position for position, rank in enumerate(ranks)}
    matrix = [[float("nan")] * len(ranks) for _ in ranks]
    for row in links:
        if row["bytes_per_s"]:
            matrix[index[row["src"]]][index[row["dst"]]] = row["bytes_per_s"] / GB
    image = axes.imshow(matrix, cmap="viridis")
    figure.colorbar(image, ax=axes, label="GB/s")
    for flag in document["flags"]:
        if flag["kind"] == SLOW_LINK and flag.get("ranks"):
            src, dst = flag["ranks"]
            axes.add_patch(rectangle((index[dst] - 0.5, index[src] - 0.5), 1, 1, fill=False, edgecolor="red",
                                     linewidth=2.5))
    labels = [str(rank) for rank in ranks]
    axes.set_xticks(range(len(ranks)), labels)
    axes.set_yticks(range(len(ranks)), labels)
    axes.set_xlabel("to rank")
    axes.set_ylabel("from rank")
    axes.set_title("Point-to-point GB/s — outlined: slow link", fontsize="small")

