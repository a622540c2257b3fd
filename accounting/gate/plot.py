"""``--plot``: each benchmark's history as a PNG — every saved run of this hardware, the current runs, the decision.

One panel per benchmark: a point per run at the value the gate compares (the run's
``metric`` round: its fastest by default), a thick bar over its interquartile range and a
thin one from its fastest to its slowest round; baseline runs in blue, current runs in
orange (hollow: left out by the load guard, or set aside as a slow outlier: baseline runs
always, current runs in ``gate ab``), the baseline value dashed and the threshold
above it dotted; the title carries the decision and the
ratio. matplotlib runs on the headless ``Agg`` backend, as the report's plot does.
"""

import math
import statistics

from accounting.console import load_pyplot
from accounting.gate.decide import GateResult
from accounting.gate.render import MARKS, short_names

COLUMNS = 2
PANEL_SIZE_IN = (6.0, 3.2)
DPI = 110
BASELINE_COLOUR = "tab:blue"
CURRENT_COLOUR = "tab:orange"
DECISION_COLOURS = {"regression": "tab:red", "improvement": "tab:green", "no change": "black",
                    "inconclusive": "tab:purple", None: "grey"}


def _quartiles(rounds) -> tuple[float, float]:
    """First and third quartile of a run's rounds (``statistics.quantiles``, 'inclusive')."""
    if len(rounds) < 2:
        return rounds[0], rounds[0]
    first, _, third = statistics.quantiles(rounds, n=4, method="inclusive")
    return first, third


def _draw_run(axes, position, rounds, value, colour, hollow):
    value *= 1e3
    low, high = (value * 1e3 for value in _quartiles(rounds))
    axes.vlines(position, min(rounds) * 1e3, max(rounds) * 1e3, color=colour, linewidth=0.8, alpha=0.6)
    axes.vlines(position, low, high, color=colour, linewidth=4, alpha=0.5)
    axes.plot([position], [value], "o", color=colour, markerfacecolor="white" if hollow else colour, markersize=5)


def write_history_plot(result: GateResult, baseline_runs, current_runs, path: str, *, disturbed=()) -> None:
    """Draw every compared benchmark of ``result`` from its runs (:class:`SavedRun` lists) into ``path`` as PNG.

    ``disturbed``: paths of the current runs the load guard left out (drawn hollow).
    """
    pyplot = load_pyplot()
    verdicts = [verdict for verdict in result.verdicts if verdict.baseline_values or verdict.current_values
                or verdict.disturbed_values]
    names = short_names(result.verdicts)
    count = max(1, len(verdicts))
    rows = math.ceil(count / COLUMNS)
    columns = min(COLUMNS, count)
    figure, grid = pyplot.subplots(rows, columns, figsize=(PANEL_SIZE_IN[0] * columns, PANEL_SIZE_IN[1] * rows),
                                   dpi=DPI, layout="constrained", squeeze=False)
    for axes in grid.flat[len(verdicts):]:
        axes.set_visible(False)
    for axes, verdict in zip(grid.flat, verdicts):
        position = 0
        ticks, labels = [], []
        for runs, colour in ((baseline_runs, BASELINE_COLOUR), (current_runs, CURRENT_COLOUR)):
            shown = 0
            for run in runs:
                bench = run.benchmarks.get(verdict.name)
                if bench is None:
                    continue
                position += 1
                shown += 1
                value = bench.summary(result.metric)
                outliers = verdict.outlier_values if colour == BASELINE_COLOUR else verdict.current_outlier_values
                set_aside = run.path in disturbed or value in outliers
                _draw_run(axes, position, bench.rounds, value, colour, hollow=set_aside)
                ticks.append(position)
                # saved runs by their number (0007_...), current ones in the order they ran
                labels.append(run.label.split("_", 1)[0] if colour == BASELINE_COLOUR else f"current {shown}")
        if verdict.baseline_value is not None:
            axes.axhline(verdict.baseline_value * 1e3, color=BASELINE_COLOUR, linestyle="--", linewidth=1,
                         label=f"baseline (median of the runs' {result.metric})")
            axes.axhline(verdict.baseline_value * 1e3 * (1 + verdict.threshold), color="tab:red", linestyle=":",
                         linewidth=1, label=f"+{verdict.threshold * 100:g} % threshold")
        decision = verdict.decision.value if verdict.decision is not None else None
        comparison = verdict.comparison
        ratio = f", {comparison.ratio:.3f}×" if comparison is not None else ""
        axes.set_title(f"[{MARKS[verdict.decision].strip() or '='}] {names[verdict.name]}: "
                       f"{decision or 'not compared'}{ratio}", fontsize="small", color=DECISION_COLOURS[decision])
        axes.set_xticks(ticks, labels, fontsize="x-small", rotation=90)
        axes.set_ylabel("ms per round")
        axes.grid(True, axis="y", alpha=0.3)
        axes.legend(fontsize="x-small", loc="best")
    figure.suptitle("Runs on this hardware: saved (blue; hollow: a slow outlier set aside), current (orange; "
                    "hollow: disturbed, or a slow outlier set aside in A/B)\n"
                    f"dot: the run's {result.metric} round (compared), thick bar: interquartile range, thin bar: "
                    "fastest to slowest",
                    fontsize="small")
    figure.savefig(path, format="png")
    pyplot.close(figure)
