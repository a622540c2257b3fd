"""Steps planted in this host's own run values: ``python -m studies.gate_replayed_history DIR``.

:mod:`studies.gate_change_points` measures ``accounting gate history`` on noise *models*. This
script measures it on the runs a real study left behind: ``DIR`` is the ``--keep`` folder of
``python -m studies.gate_error_rates --ab`` (each job's folder holds its A and B processes'
saved runs). Every process that ran the unchanged code (``intended_slowdown`` 1 on all its
benchmarks: every A process, and the B processes of unchanged jobs) is one run of a history, in
the order it ran, and each benchmark's series is its runs' values as ``check`` reads them (the
fastest round). So the noise is the host's, with its drifts, its slow processes and the shared
luck of the benchmarks of one process, not a model's.

From those series it cuts histories of ``--runs`` consecutive runs (by default 20 histories of
30: history ``h`` is benchmark ``h mod B``'s window starting at an offset spread evenly over the
series), plants a step in each (its later runs multiplied by the factor, at the middle run or
after two thirds of them), and counts as :mod:`studies.gate_change_points` does: a change point
within ±1 run of the planted one, where the single best split lies, other change points, and
the flat windows (nothing planted) that hold a false change point.

Windows of different benchmarks may overlap in time, so their noise is not independent: the
counts say how the gate does on this host's runs, not 20 independent draws.

>>> series = {"b": [0.025 * (1 + 0.01 * ((i * 7) % 5 - 2)) for i in range(40)]}
>>> [(name, start) for name, start, _ in windows(series, 30, 3)]
[('b', 0), ('b', 5), ('b', 10)]
"""

import math
import statistics
import sys
from pathlib import Path

import numpy as np

from accounting.console import OneLineParser, table
from accounting.errors import AccountingError
from accounting.gate.decide import DEFAULT_METRIC
from accounting.gate.storage import load_run
from studies.gate_change_points import History, tally

FACTORS = (1.10, 1.25)
DEFAULT_RUNS = 30
DEFAULT_HISTORIES = 20


class NoRuns(AccountingError):
    """The folder holds too few unchanged runs for the histories asked for."""


def unchanged_processes(folder, *, metric: str = DEFAULT_METRIC) -> list[dict]:
    """The unchanged processes under ``folder``, oldest first, each as ``{benchmark: value in seconds}``.

    A process counts as unchanged when every benchmark in it recorded ``intended_slowdown`` 1
    (the study's module records it). A process that re-measured only some benchmarks holds those only.
    """
    runs = []
    for path in sorted(Path(folder).glob("*/[ab]-*.json")):
        run = load_run(path)
        if run.benchmarks and all(bench.extra_info.get("intended_slowdown") == 1 for bench in run.benchmarks.values()):
            runs.append(run)
    runs.sort(key=lambda run: run.datetime or "")
    return [{name: bench.summary(metric) for name, bench in run.benchmarks.items() if bench.problem is None}
            for run in runs]


def unchanged_series(processes) -> dict:
    """Each benchmark's values over ``processes`` (:func:`unchanged_processes`), in their order.

    >>> unchanged_series([{"a": 1.0, "b": 2.0}, {"b": 2.1}])
    {'a': [1.0], 'b': [2.0, 2.1]}
    """
    series = {}
    for process in processes:
        for name, value in process.items():
            series.setdefault(name, []).append(value)
    return series


def noise_facts(processes) -> dict:
    """How the runs vary: the median over benchmarks of the sd of their logs and of their lag-1 autocorrelation,
    and the share of a benchmark's variance that the benchmarks of a process hold in common (the variance
    of each process's mean log over the benchmarks, against the benchmarks' own), from the processes
    that ran every benchmark.

    >>> facts = noise_facts([{"a": 1.0, "b": 1.0}, {"a": 1.1, "b": 1.1}, {"a": 1.0, "b": 1.0}, {"a": 1.1, "b": 1.1}])
    >>> round(facts["common_share"], 3), round(facts["autocorrelation"], 3)
    (1.0, -0.75)
    """
    logs = {name: np.log(np.asarray(values, dtype=float))
            for name, values in unchanged_series(processes).items() if len(values) >= 3}
    if not logs:
        raise NoRuns("no benchmark has 3 or more unchanged runs")
    sds = [float(np.std(values, ddof=1)) for values in logs.values()]
    autocorrelations = []
    for values in logs.values():
        centred = values - values.mean()
        denominator = float(centred @ centred)
        if denominator > 0:
            autocorrelations.append(float(centred[1:] @ centred[:-1]) / denominator)
    complete = [process for process in processes if set(logs) <= set(process)]
    common_share = float("nan")
    if len(complete) >= 3:
        matrix = np.log(np.array([[process[name] for name in logs] for process in complete])).T
        matrix -= matrix.mean(axis=1, keepdims=True)
        total = float(np.mean(matrix.var(axis=1, ddof=1)))
        common_share = float(matrix.mean(axis=0).var(ddof=1)) / total if total > 0 else 0.0
    return {"benchmarks": len(logs), "runs": len(processes), "complete_runs": len(complete),
            "sd": statistics.median(sds),
            "autocorrelation": statistics.median(autocorrelations) if autocorrelations else 0.0,
            "common_share": common_share}


def windows(series: dict, length: int, count: int):
    """``count`` windows of ``length`` consecutive runs: ``(benchmark, start, values)``, cycling through the
    benchmarks, the starts spread evenly over the runs each has."""
    names = [name for name, values in series.items() if len(values) >= length]
    if not names:
        longest = max((len(values) for values in series.values()), default=0)
        raise NoRuns(f"histories of {length} runs need a benchmark with {length} unchanged runs; "
                     f"the longest series here has {longest}")
    chosen = []
    for index in range(count):
        name = names[index % len(names)]
        spare = len(series[name]) - length
        start = round(index * spare / (count - 1)) if count > 1 else 0
        chosen.append((name, start, tuple(series[name][start:start + length])))
    return chosen


def planted(values, factor: float | None, *, late: bool = False) -> History:
    """``values`` with a step of ``factor`` from the middle run (or two thirds in, ``late``); ``None``: flat.

    >>> history = planted([1.0] * 30, 1.1, late=True)
    >>> history.first_changed, history.values[19], history.values[20]
    (20, 1.0, 1.1)
    """
    if factor is None:
        return History(tuple(values), None, None)
    at = 2 * len(values) // 3 if late else len(values) // 2
    return History(tuple(value * (factor if index >= at else 1.0) for index, value in enumerate(values)), at, at)


def measure(series: dict, *, length: int = DEFAULT_RUNS, histories: int = DEFAULT_HISTORIES,
            factors=FACTORS) -> list[dict]:
    """One row per planted change (and one flat): found within ±1, the best split within ±1, other points."""
    chosen = windows(series, length, histories)
    cases = [(f"step {factor:g}x", factor, False) for factor in factors]
    cases += [(f"late step {factor:g}x", factor, True) for factor in factors if math.isclose(factor, 1.10)]
    cases.append(("flat", None, False))
    rows = []
    for label, factor, late in cases:
        counts = tally(planted(values, factor, late=late) for _, _, values in chosen)
        rows.append({"planted": label, "histories": len(chosen), "runs": length,
                     "found_within_1": None if factor is None else counts["found"],
                     "best_split_within_1": None if factor is None else counts["best_split"],
                     "histories_with_a_change_point": counts["with_any"], "other_change_points": counts["other"]})
    return rows


HEADER = ["planted", "runs", "found within ±1", "best split within ±1", "with a change point", "other change points"]


def summary_rows(rows) -> list[list[str]]:
    """The table's cells.

    >>> summary_rows([{"planted": "flat", "histories": 20, "runs": 30, "found_within_1": None,
    ...                "best_split_within_1": None, "histories_with_a_change_point": 1, "other_change_points": 1}])
    [['flat', '30', '—', '—', '1 / 20', '1']]
    """
    def of(count, row):
        return "—" if count is None else f"{count} / {row['histories']}"

    return [[row["planted"], str(row["runs"]), of(row["found_within_1"], row), of(row["best_split_within_1"], row),
             of(row["histories_with_a_change_point"], row), str(row["other_change_points"])] for row in rows]


def main(argv=None) -> int:
    parser = OneLineParser(prog="python -m studies.gate_replayed_history", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="the --keep folder of python -m studies.gate_error_rates --ab")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="runs per history. Default: %(default)r")
    parser.add_argument("--histories", type=int, default=DEFAULT_HISTORIES,
                        help="histories per planted change. Default: %(default)r")
    args = parser.parse_args(argv)
    if args.runs < 6 or args.histories < 1:
        parser.error(f"--runs must be at least 6 and --histories at least 1, got {args.runs} and {args.histories}")
    if not Path(args.folder).is_dir():
        parser.error(f"no such folder: {args.folder}")
    try:
        processes = unchanged_processes(args.folder)
        series = unchanged_series(processes)
        facts = noise_facts(processes)
        rows = measure(series, length=args.runs, histories=args.histories)
    except AccountingError as error:
        parser.error(str(error))
    print(f"{facts['runs']} unchanged runs of {facts['benchmarks']} benchmarks in {args.folder}: sd of logs "
          f"{facts['sd']:.4f} (median over benchmarks), lag-1 autocorrelation {facts['autocorrelation']:.2f}, "
          f"{facts['common_share'] * 100:.0f} % of the variance shared by the benchmarks of a process "
          f"({facts['complete_runs']} runs of all {facts['benchmarks']})")
    print(table(HEADER, summary_rows(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
