"""The gate's table, for a terminal and as Markdown for a CI summary: pure functions of a :class:`GateResult`.

One row per benchmark with one mark (as asv's compare), the baseline and current values
(each run reduced to its ``metric`` round — its fastest by default — then the median over
runs, with the number of runs), the ratio current/baseline with
its interval, the Holm-adjusted one-sided p-value of "slower", and the decision; every
reason that asks for action is listed under the table, then the notes.

>>> from accounting.gate.decide import GateResult, Verdict
>>> from accounting.gate.stats import compare_runs
>>> comparison = compare_runs([0.0150, 0.0149, 0.0151], [0.0150], threshold=0.1)
>>> verdict = Verdict("tests/t.py::test_mm", "cpu", 0.1, comparison.decision, comparison.reason,
...                   (0.0150, 0.0149, 0.0151), (0.0150,), comparison=comparison)
>>> print(render_text(GateResult((verdict,), (), ("0001_a.json",), ("current.json",))))
Gate: pass: 1 no change
<BLANKLINE>
   benchmark  baseline           current           ratio [90% CI]         p (slower)  detectable    decision   peak memory
-  ---------  -----------------  ----------------  ---------------------  ----------  ------------  ---------  -----------
   test_mm    15.00 ms (3 runs)  15.00 ms (1 run)  1.000× [0.978, 1.023]        0.75  too few runs  no change            —
<BLANKLINE>
Legend: + regression (slower beyond doubt and by more than the threshold, or more peak memory), - improvement, ? inconclusive (re-measure), x not compared (work changed, not judged, or on one side only), blank: no change; ~ before a ratio: beyond the threshold but not surely (not significant, or its interval reaches below the threshold). p: one-sided permutation test over runs, Holm-adjusted across the matrix. detectable: the smallest slowdown these runs' noise and numbers would have shown slower with 95 % power at that level, so no change means no change larger than it; > threshold: too noisy for its threshold. baseline, current: each run's fastest round (min), median over runs. peak memory: one call's peak (live tensors' exact bytes; CUDA: the allocator's peak), the baseline runs' largest → the current runs' smallest; above it by more than the tolerance (0 bytes; CUDA 2 MiB) is a memory regression.
"""

from accounting.console import table
from accounting.gate.decide import GateResult, Verdict, memory_tolerance
from accounting.gate.power import percent
from accounting.gate.stats import Decision

MARKS = {Decision.REGRESSION: "+", Decision.IMPROVEMENT: "-", Decision.NO_CHANGE: " ",
         Decision.INCONCLUSIVE: "?", None: "x"}
LEGEND = ("+ regression (slower beyond doubt and by more than the threshold, or more peak memory), - improvement, "
          "? inconclusive (re-measure), x not compared (work changed, not judged, or on one side only), blank: no "
          "change; ~ before a ratio: beyond the threshold but not surely (not significant, or its interval reaches "
          "below the threshold). p: one-sided permutation test over runs, {adjustment} across the matrix. "
          "detectable: the smallest slowdown these runs' noise and numbers would have shown slower with 95 % power "
          "at that level, so no change means no change larger than it; > threshold: too noisy for its threshold.")
ADJUSTMENTS = {"holm": "Holm-adjusted", "min-p": "adjusted by a joint permutation of the runs (min-P)"}
SEQUENTIAL_P = ("p: always-valid p of slower by more than the threshold, from a bet on the pairs' log ratios, held "
                "over every look and adjusted across the matrix by the closed test of its e-values; ratio: geometric "
                "mean of the pairs' B/A ratios with its always-valid interval; pairs: the pairs the decision rests on.")
MEMORY_NOTE = (" peak memory: one call's peak (live tensors' exact bytes; CUDA: the allocator's peak), the "
               "baseline runs' largest → the current runs' smallest; above it by more than the tolerance "
               "(0 bytes; CUDA 2 MiB) is a memory regression.")


def header(result: GateResult) -> list[str]:
    """The table's column names; the ratio's names its interval's level.

    >>> header(GateResult((), (), (), (), confidence=0.8))[4]
    'ratio [80% CI]'
    """
    columns = ["", "benchmark", "baseline", "current", f"ratio [{result.confidence * 100:g}% CI]", "p (slower)",
               "detectable", "decision", "peak memory"]
    return columns[:4] + ["pairs"] + columns[4:] if _paired(result) else columns


def _paired(result: GateResult) -> bool:
    """Whether the result is a sequential A/B verdict, whose table has a column of the pairs each benchmark took."""
    return result.adjustment == "sequential"


def seconds(value: float | None) -> str:
    """A duration with a unit that keeps 3–4 significant digits.

    >>> seconds(0.01523), seconds(2.5e-5), seconds(1.5), seconds(None)
    ('15.23 ms', '25.00 µs', '1.500 s', '—')
    """
    if value is None:
        return "—"
    if value >= 1:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.2f} µs"


def memory_bytes(value: int) -> str:
    """Bytes, exact below 1 KiB, else in KiB/MiB/GiB with 4 significant digits.

    >>> memory_bytes(4000), memory_bytes(4 * 2**20), memory_bytes(3 * 2**30 // 2)
    ('3.906 KiB', '4 MiB', '1.5 GiB')
    """
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.4g} {unit}"
    return f"{value} B"


def _memory(verdict: Verdict) -> str:
    if verdict.current_memory is None:
        return "—"
    if verdict.current_memory == verdict.baseline_memory:
        return memory_bytes(verdict.current_memory)
    change = verdict.current_memory - verdict.baseline_memory
    sign = "+" if change > 0 else "−"
    return (f"{memory_bytes(verdict.baseline_memory)} → {memory_bytes(verdict.current_memory)} "
            f"({sign}{memory_bytes(abs(change))})")


def decision_text(verdict: Verdict) -> str:
    """The decision column: the time verdict, *work changed* or *not compared*, and a memory regression beside it."""
    if verdict.work_change:
        text = "work changed"
    elif verdict.decision is None:
        text = "not compared"
    else:
        text = verdict.decision.value
    return text + ", memory regression" if verdict.memory_regression else text


def detectable_text(verdict: Verdict) -> str:
    """The detectable column: the smallest slowdown these runs would have shown, ``> threshold`` when too noisy.

    >>> from accounting.gate.stats import compare_runs
    >>> base = [0.0150, 0.0149, 0.0151, 0.0150, 0.0152, 0.0148]
    >>> quiet = compare_runs(base, [0.0150, 0.0152, 0.0151, 0.0149], threshold=0.1)
    >>> detectable_text(Verdict("t", "cpu", 0.1, quiet.decision, "", comparison=quiet))
    '2.9 %'
    >>> noisy = compare_runs(base, [0.0150, 0.0182, 0.0131, 0.0160], threshold=0.1)
    >>> detectable_text(Verdict("t", "cpu", 0.1, noisy.decision, "", comparison=noisy))
    '30.1 % > 10 %'
    >>> one = compare_runs(base, [0.0150], threshold=0.1)   # 1 current run never reaches p <= 0.01
    >>> detectable_text(Verdict("t", "cpu", 0.1, one.decision, "", comparison=one))
    'too few runs'
    """
    if verdict.comparison is None:
        return "—"
    text = percent(verdict.detectable)
    return f"{text} > {verdict.threshold * 100:g} %" if verdict.too_noisy else text


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


def short_names(verdicts) -> dict:
    """Each fullname shortened to the part after ``::`` where that stays unique."""
    short = {verdict.name: verdict.name.rsplit("::", 1)[-1] for verdict in verdicts}
    taken = list(short.values())
    return {name: (value if taken.count(value) == 1 else name) for name, value in short.items()}


def _ratio(verdict: Verdict) -> str:
    comparison = verdict.comparison
    if comparison is None:
        return "—"
    text = f"{comparison.ratio:.3f}×"
    if comparison.ci_low == comparison.ci_low:  # not nan: there was a spread to build it from
        text += f" [{comparison.ci_low:.3f}, {comparison.ci_high:.3f}]"
    beyond = comparison.ratio >= 1 + comparison.threshold or comparison.ratio <= 1 / (1 + comparison.threshold)
    if beyond and comparison.decision not in (Decision.REGRESSION, Decision.IMPROVEMENT):
        text = "~" + text
    return text


def _clock(mhz: float | None) -> str:
    """A side's clock during its timed rounds, after its time ("" where none was recorded, as on the CPU).

    >>> _clock(1980.0), _clock(None)
    (' @ 1980 MHz', '')
    """
    return f" @ {mhz:.0f} MHz" if mhz else ""


def rows(result: GateResult) -> list[list[str]]:
    """The table's cells, one list per benchmark (the columns of :func:`header`)."""
    names = short_names(result.verdicts)
    cells = []
    for verdict in result.verdicts:
        comparison = verdict.comparison
        current = len(verdict.current_values)
        cells.append([
            "+" if verdict.memory_regression else MARKS[verdict.decision],
            names[verdict.name],
            f"{seconds(verdict.baseline_value)} ({_runs(len(verdict.baseline_values))}){_clock(verdict.baseline_clock_mhz)}",
            f"{seconds(verdict.current_value)} ({_runs(current)}){_clock(verdict.current_clock_mhz)}" if current else "—",
            *([str(verdict.pairs) if verdict.pairs is not None else "—"] if _paired(result) else []),
            _ratio(verdict),
            f"{comparison.p_slower:.2g}" if comparison is not None else "—",
            detectable_text(verdict),
            decision_text(verdict),
            _memory(verdict),
        ])
    return cells


def headline(result: GateResult) -> str:
    """``Gate: FAIL: ...`` or ``Gate: pass: ...`` with the count of each decision.

    >>> headline(GateResult((), (), (), ()))
    'Gate: pass: nothing compared'
    """
    counts = {}
    for verdict in result.verdicts:
        label = "work changed" if verdict.work_change else (
            verdict.decision.value if verdict.decision is not None else "not compared")
        counts[label] = counts.get(label, 0) + 1
    if result.memory_regressions:
        counts["memory regression"] = len(result.memory_regressions)
    order = ["memory regression"] + [decision.value for decision in Decision] + ["work changed", "not compared"]
    summary = ", ".join(f"{counts[label]} {label}" for label in order if label in counts) or "nothing compared"
    loaded = f" — {result.loaded}" if result.loaded else ""
    return f"Gate: {'FAIL' if result.failed else 'pass'}: {summary}{loaded}"


METRIC_WORDS = {"min": "fastest round (min)", "median": "median round", "mean": "mean round"}


CLOCK_NOTE = (" @ MHz: the device's clock during the timed rounds, median over runs (a slower time at a lower clock "
              "is a slower clock, not necessarily a slower product; the reason says which).")


def _legend(result: GateResult) -> str:
    clocks = any(verdict.baseline_clock_mhz or verdict.current_clock_mhz for verdict in result.verdicts)
    legend = LEGEND.format(adjustment=ADJUSTMENTS.get(result.adjustment, ""))
    if _paired(result):
        legend = legend.split(" p: one-sided permutation test")[0] + " " + SEQUENTIAL_P + " detectable:" + \
            legend.split(" detectable:")[1]
    return (f"{legend} baseline, current: each run's "
            f"{METRIC_WORDS[result.metric]}, median over runs.{MEMORY_NOTE}{CLOCK_NOTE if clocks else ''}")


def _reasons(result: GateResult) -> list[str]:
    names = short_names(result.verdicts)
    lines = [f"{names[verdict.name]}: {verdict.reason}" for verdict in result.verdicts
             if verdict.decision is not Decision.NO_CHANGE]
    lines += [f"{names[verdict.name]}: too noisy for its {verdict.threshold * 100:g} % threshold: these runs would "
              f"have shown only a slowdown of {percent(verdict.detectable)} or more (95 % power); more runs or less "
              "noise (a quieter machine, --threads 1) lower that" for verdict in result.verdicts if verdict.too_noisy]
    lines += [f"{names[verdict.name]}: memory regression: peak {_memory(verdict)} ({verdict.memory_source}; "
              f"tolerance {memory_tolerance(verdict.memory_source)} bytes)" for verdict in result.memory_regressions]
    return lines


def render_text(result: GateResult) -> str:
    """The terminal version: headline, table, reasons, legend, notes."""
    lines = [headline(result), "", table(header(result), rows(result)), ""]
    lines += _reasons(result)
    lines.append(f"Legend: {_legend(result)}")
    lines += [f"Note: {note}" for note in result.notes]
    return "\n".join(lines)


def _markdown_cell(text: str) -> str:
    return text.replace("|", "\\|") or " "


def render_markdown(result: GateResult) -> str:
    """The CI-summary version (GitHub-flavoured Markdown), same content as :func:`render_text`.

    >>> print(render_markdown(GateResult((), ("no saved runs",), (), ())))
    ### Benchmark regression gate
    <BLANKLINE>
    **Gate: pass: nothing compared** (0 baseline runs, 0 current runs)
    <BLANKLINE>
    |  | benchmark | baseline | current | ratio [90% CI] | p (slower) | detectable | decision | peak memory |
    |---|---|---|---|---|---|---|---|---|
    <BLANKLINE>
    <sub>+ regression (slower beyond doubt and by more than the threshold, or more peak memory), - improvement, ? inconclusive (re-measure), x not compared (work changed, not judged, or on one side only), blank: no change; ~ before a ratio: beyond the threshold but not surely (not significant, or its interval reaches below the threshold). p: one-sided permutation test over runs, Holm-adjusted across the matrix. detectable: the smallest slowdown these runs' noise and numbers would have shown slower with 95 % power at that level, so no change means no change larger than it; > threshold: too noisy for its threshold. baseline, current: each run's fastest round (min), median over runs. peak memory: one call's peak (live tensors' exact bytes; CUDA: the allocator's peak), the baseline runs' largest → the current runs' smallest; above it by more than the tolerance (0 bytes; CUDA 2 MiB) is a memory regression.</sub>
    <BLANKLINE>
    - Note: no saved runs
    """
    columns = header(result)
    lines = ["### Benchmark regression gate", "",
             f"**{headline(result)}** ({_runs(len(result.baseline_runs)).replace('run', 'baseline run')}, "
             f"{_runs(len(result.current_runs)).replace('run', 'current run')})", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for cells in rows(result):
        lines.append("| " + " | ".join(_markdown_cell(cell.strip()) for cell in cells) + " |")
    lines.append("")
    lines += [f"- {_markdown_cell(reason)}" for reason in _reasons(result)]
    lines.append(f"<sub>{_legend(result)}</sub>")
    if result.notes:
        lines.append("")
        lines += [f"- Note: {note}" for note in result.notes]
    return "\n".join(lines)


def _number(value):
    return value if value is not None and value == value and abs(value) != float("inf") else None


def verdicts_to_json(result: GateResult) -> dict:
    """The verdict as plain JSON values (``--json``): per benchmark its decision, figures and what it could have seen.

    >>> from accounting.gate.stats import compare_runs
    >>> base = (0.0150, 0.0149, 0.0151, 0.0150, 0.0152, 0.0148)
    >>> comparison = compare_runs(base, [0.0150, 0.0152, 0.0151, 0.0149], threshold=0.1)
    >>> verdict = Verdict("t.py::test_mm", "cpu", 0.1, comparison.decision, comparison.reason, base,
    ...                   (0.0150, 0.0152, 0.0151, 0.0149), comparison=comparison)
    >>> row = verdicts_to_json(GateResult((verdict,), (), (), ()))["benchmarks"][0]
    >>> row["decision"], round(row["detectable_ratio"], 3), row["too_noisy"]
    ('no change', 1.029, False)
    """
    benchmarks = []
    for verdict in result.verdicts:
        comparison = verdict.comparison
        benchmarks.append({
            "name": verdict.name, "kind": verdict.kind, "threshold": verdict.threshold,
            "decision": verdict.decision.value if verdict.decision is not None else None,
            "work_changed": verdict.work_change or None, "reason": verdict.reason,
            "baseline_values_s": list(verdict.baseline_values), "current_values_s": list(verdict.current_values),
            "ratio": _number(comparison.ratio) if comparison else None,
            "ratio_low": _number(comparison.ci_low) if comparison else None,
            "ratio_high": _number(comparison.ci_high) if comparison else None,
            "p_slower": comparison.p_slower if comparison else None,
            "detectable_ratio": verdict.detectable, "too_noisy": verdict.too_noisy,
            "memory_regression": verdict.memory_regression, "pairs": verdict.pairs,
            "baseline_clock_mhz": verdict.baseline_clock_mhz, "current_clock_mhz": verdict.current_clock_mhz,
        })
    return {"failed": result.failed, "alpha": result.alpha, "confidence": result.confidence, "metric": result.metric,
            "adjustment": result.adjustment, "baseline_runs": list(result.baseline_runs),
            "current_runs": list(result.current_runs), "benchmarks": benchmarks, "notes": list(result.notes)}


# ``accounting gate history``: the change points of the saved history, as a table per step.

HISTORY_LEGEND = ("+ slower after the change point, - faster. ratio: the level after / the level before (geometric "
                  "means of the two segments' runs), with its t interval; p: permutation test of the step within "
                  "its neighbours' segment, the split's choice paid for (E-divisive's test) and consecutive runs' "
                  "correlation allowed for; change points kept at p ≤ {alpha:g}. first run after: the first saved run at the new level, its date, commit and "
                  "branch where pytest-benchmark recorded them.")
HISTORY_HEADER = ["", "benchmark", "first run after", "date", "commit (branch)", "ratio", "p", "runs before/after"]


def _commit(run) -> str:
    if run.commit_id is None:
        return "—"
    return run.commit_id[:12] + (f" ({run.branch})" if run.branch else "")


def _step_ratio(point) -> str:
    text = f"{point.ratio:.3f}×"
    if point.low == point.low:  # not nan
        text += f" [{point.low:.3f}, {point.high:.3f}]"
    return text


def history_headline(result) -> str:
    """``History: N change point(s) in M of K benchmarks, R runs (first … last)``.

    >>> from accounting.gate.history import HistoryResult
    >>> history_headline(HistoryResult((), ()))
    'History: no runs'
    """
    if not result.runs:
        return "History: no runs"
    steps = result.steps
    changed = len({name for name, _ in steps})
    span = f"{result.runs[0].label.split('_', 1)[0]} … {result.runs[-1].label.split('_', 1)[0]}"
    dates = (f", {result.runs[0].date} to {result.runs[-1].date}"
             if result.runs[0].datetime and result.runs[-1].datetime else "")
    return (f"History: {len(steps)} change point(s) in {changed} of {len(result.benchmarks)} benchmark(s), "
            f"{len(result.runs)} runs ({span}{dates})")


def history_rows(result) -> list[list[str]]:
    """One row per change point (the columns of :data:`HISTORY_HEADER`)."""
    names = short_names(result.benchmarks)
    cells = []
    for name, step in result.steps:
        point = step.point
        cells.append(["+" if point.ratio > 1 else "-", names[name], step.run.label, step.run.date, _commit(step.run),
                      _step_ratio(point), f"{point.p_value:.2g}", f"{point.runs_before}/{point.runs_after}"])
    return cells


def _history_lines(result) -> list[str]:
    """What is under the table: benchmarks without a change point, too-short ones, runs passed over."""
    names = short_names(result.benchmarks)
    lines = []
    for bench in result.benchmarks:
        if bench.detection is not None and not bench.steps:
            outliers = len(bench.detection.outliers)
            aside = f", {outliers} slow outlier run(s) set aside" if outliers else ""
            lines.append(f"{names[bench.name]}: no change point in {len(bench.values)} runs (noise: sd of log values "
                         f"{bench.detection.noise:.2g}{aside}), so no step larger than {percent(bench.detectable)} "
                         "at the middle of them (found with 95 % power)")
        if bench.detection is not None and bench.too_noisy:
            lines.append(f"{names[bench.name]}: too noisy for its {bench.threshold * 100:g} % threshold: a step of "
                         f"{percent(bench.detectable)} or more is needed to be found with 95 % power in these runs")
    lines += [bench.note for bench in result.benchmarks if bench.note]
    lines += [f"run {label} passed over: {why}" for label, why in result.skipped]
    lines += list(result.notes)
    return lines


def _history_legend(result, alpha: float) -> str:
    return (HISTORY_LEGEND.format(alpha=alpha) + f" Each run's value: its {METRIC_WORDS[result.metric]}.")


def render_history_text(result, *, alpha: float) -> str:
    """The terminal version of a :class:`accounting.gate.history.HistoryResult`: headline, table, notes, legend."""
    lines = [history_headline(result), ""]
    if result.steps:
        lines += [table(HISTORY_HEADER, history_rows(result)), ""]
    lines += [f"Note: {line}" for line in _history_lines(result)]
    lines.append(f"Legend: {_history_legend(result, alpha)}")
    return "\n".join(lines)


def render_history_markdown(result, *, alpha: float) -> str:
    """The CI-summary version, same content as :func:`render_history_text`."""
    lines = ["### Benchmark history: change points", "", f"**{history_headline(result)}**", ""]
    if result.steps:
        lines += ["| " + " | ".join(HISTORY_HEADER) + " |", "|" + "---|" * len(HISTORY_HEADER)]
        lines += ["| " + " | ".join(_markdown_cell(cell.strip()) for cell in cells) + " |"
                  for cells in history_rows(result)]
        lines.append("")
    lines += [f"- {_markdown_cell(line)}" for line in _history_lines(result)]
    lines.append(f"<sub>{_history_legend(result, alpha)}</sub>")
    return "\n".join(lines)
