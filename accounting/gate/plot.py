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
from accounting.gate.power import percent
from accounting.gate.render import MARKS, detectable_text, short_names

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
                if bench is None or bench.problem:
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
        seen = f"; detectable {detectable_text(verdict)}" if comparison is not None else ""
        axes.set_title(f"[{MARKS[verdict.decision].strip() or '='}] {names[verdict.name]}: "
                       f"{decision or 'not compared'}{ratio}{seen}", fontsize="small",
                       color=DECISION_COLOURS[decision])
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


STEP_COLOURS = {True: "tab:red", False: "tab:green"}
"""Change point lines: red where the benchmark got slower, green where it got faster."""
MAX_TICKS = 25


def write_change_point_plot(result, path: str) -> None:
    """Draw each benchmark of a :class:`accounting.gate.history.HistoryResult` into ``path`` as PNG.

    One panel per benchmark: a point per saved run at its value (hollow: a slow outlier set aside
    before detection), each segment's level as a horizontal line, each change point as a dashed
    vertical line before its first run, labelled with its ratio and that run's number.
    """
    pyplot = load_pyplot()
    benches = list(result.benchmarks)
    names = short_names(benches)
    count = max(1, len(benches))
    rows = math.ceil(count / COLUMNS)
    columns = min(COLUMNS, count)
    figure, grid = pyplot.subplots(rows, columns, figsize=(PANEL_SIZE_IN[0] * columns, PANEL_SIZE_IN[1] * rows),
                                   dpi=DPI, layout="constrained", squeeze=False)
    for axes in grid.flat[len(benches):]:
        axes.set_visible(False)
    for axes, bench in zip(grid.flat, benches):
        detection = bench.detection
        outliers = set(detection.outliers) if detection else set()
        for index, value in enumerate(bench.values):
            hollow = index in outliers
            axes.plot([index], [value * 1e3], "o", color=BASELINE_COLOUR, markersize=4,
                      markerfacecolor="white" if hollow else BASELINE_COLOUR)
        for first, end, level in (detection.levels if detection else ()):
            axes.hlines(level * 1e3, first - 0.4, end - 0.6, color="black", linewidth=1.5)
        for step in bench.steps:
            slower = step.point.ratio > 1
            axes.axvline(step.point.index - 0.5, color=STEP_COLOURS[slower], linestyle="--", linewidth=1)
            axes.annotate(f"{step.point.ratio:.3f}× at {step.run.label.split('_', 1)[0]}",
                          (step.point.index - 0.5, 1), xycoords=("data", "axes fraction"), rotation=90,
                          va="top", ha="right", fontsize="x-small", color=STEP_COLOURS[slower])
        stride = max(1, math.ceil(len(bench.runs) / MAX_TICKS))
        ticks = list(range(0, len(bench.runs), stride))
        axes.set_xticks(ticks, [bench.runs[index].label.split("_", 1)[0] for index in ticks], fontsize="x-small",
                        rotation=90)
        state = f"{len(bench.steps)} change point(s)" if detection is not None else "too few runs"
        if detection is not None and bench.detectable is not None:
            state += f"; a step from {percent(bench.detectable)} is found (95 %)"
        axes.set_title(f"{names[bench.name]}: {state}", fontsize="small")
        axes.set_ylabel("ms per round")
        axes.grid(True, axis="y", alpha=0.3)
    figure.suptitle(f"Saved runs on this hardware, oldest first: each run's {result.metric} round (hollow: a slow "
                    "outlier set aside)\nblack: each segment's level (geometric mean); dashed: a change point "
                    "(red slower, green faster) before the first run at the new level", fontsize="small")
    figure.savefig(path, format="png")
    pyplot.close(figure)
