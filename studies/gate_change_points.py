"""How well ``accounting gate history`` finds steps: ``python -m studies.gate_change_points``
(``--compare``: beside ruptures' PELT and binary segmentation).

Synthetic histories of one benchmark's run values (each run's fastest round), built from a
noise model of the gate's own measurements on the 2-vCPU KVM guest of an AMD EPYC
(docs/benchmarks-and-gate.md), with a planted change, are handed to
:func:`accounting.gate.changepoints.detect`; the script counts how often the change is found,
how far from its true run, and how many change points flat histories produce, then times the
whole ``history`` path (reading the files, detecting) on 1,000 runs × 50 benchmarks.

Noise models (:data:`NOISE`), each stated from a measured figure:

- ``calm``: log values normal with sd 0.014 (the calm hour's baseline minimums after slow
  outliers were set aside), lag-1 autocorrelation 0.28 (the largest of three measured busy-hour
  runs), and one run in ten slowed by a factor drawn from 1.3–1.5 (about one process in ten ran
  every round 1.3–1.5× slower).
- ``busy``: slow episodes that last several processes: a two-state chain staying in its state
  with probability 2/3 (episodes of 3 runs on average, half the runs slow), a slow episode's
  factor drawn from 1.15–1.45, plus normal noise of sd 0.02; its log sd is about 0.13, the busy
  hour's.

- ``calm5`` and ``plain5``: runs that spread by 5 % (log sd 0.05), as a noisier runner's do: the
  calm model's structure at that spread, and plain independent log-normal runs.

Planted changes (:data:`SCENARIOS`), at the middle run of the history (run ``n // 2`` is the
first slow one): a step of 1.25× and of 1.10×; a 1.10× step at run ``2n // 3`` (after 20 of 30); a creep of 3 % a run over 5 runs (runs
``n//2 − 2`` to ``n//2 + 2``, 1.159× in all), found when a change point lies within the ramp or
one run beside it; and none (``flat``).

Targets (30 runs, calm): a 1.25× step found within ±1 run in ≥ 19 of 20 histories; flat
histories with a change point ≤ 1 in 20. Figures: docs/benchmarks-and-gate.md
("Which merge made it slower").

>>> history = synthetic(30, "step 1.25x", noise="calm", seed=1)
>>> len(history.values), history.first_changed, history.last_changed
(30, 15, 15)
>>> found(detect_changes(history), history)
True
"""

import json
import math
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from accounting.console import OneLineParser, table
from accounting.gate.changepoints import (
    ALPHA,
    MAX_AUTOCORRELATION,
    MIN_AUTOCORRELATION,
    MIN_SEGMENT,
    TooFewRuns,
    detect,
    split_statistics,
)
from accounting.gate.history import analyse, read_history
from accounting.gate.storage import run_files

BASE_SECONDS = 0.025
"""A one-thread float32 1024³ matmul's fastest round on the 2-vCPU VM."""
NOISE = {
    "calm": {"sd": 0.014, "autocorrelation": 0.28, "outlier_rate": 0.1, "outlier_factor": (1.3, 1.5)},
    "busy": {"sd": 0.02, "stay": 2 / 3, "episode_factor": (1.15, 1.45)},
    "calm5": {"sd": 0.05, "autocorrelation": 0.28, "outlier_rate": 0.1, "outlier_factor": (1.3, 1.5)},
    "plain5": {"sd": 0.05, "autocorrelation": 0.0, "outlier_rate": 0.0, "outlier_factor": (1.3, 1.5)},
}
SCENARIOS = ("step 1.25x", "step 1.10x", "late step 1.10x", "creep 3%x5", "flat")
LENGTHS = (10, 30, 100)
HISTORIES = 20
TIMING_RUNS = 1000
TIMING_BENCHMARKS = 50
TIMING_ROUNDS = 10


@dataclass(frozen=True)
class History:
    """One synthetic series and where its planted change is (``None`` for a flat one)."""

    values: tuple
    first_changed: int | None
    last_changed: int | None


def _noise(length: int, model: str, generator) -> np.ndarray:
    """Log noise of ``length`` runs under ``model`` (:data:`NOISE`)."""
    params = NOISE[model]
    if "autocorrelation" in params:
        rho = params["autocorrelation"]
        shocks = generator.normal(0, params["sd"] * math.sqrt(1 - rho ** 2), length)
        logs = np.empty(length)
        logs[0] = generator.normal(0, params["sd"])
        for index in range(1, length):
            logs[index] = rho * logs[index - 1] + shocks[index]
        slow = generator.random(length) < params["outlier_rate"]
        logs[slow] += np.log(generator.uniform(*params["outlier_factor"], slow.sum()))
        return logs
    logs = generator.normal(0, params["sd"], length)
    slow = generator.random() < 0.5
    factor = generator.uniform(*params["episode_factor"])
    for index in range(length):
        if index and generator.random() > params["stay"]:
            slow = not slow
            factor = generator.uniform(*params["episode_factor"])
        if slow:
            logs[index] += math.log(factor)
    return logs


def synthetic(length: int, scenario: str, *, noise: str = "calm", seed: int = 0) -> History:
    """A history of ``length`` runs with ``scenario`` planted (:data:`SCENARIOS`) in ``noise``."""
    generator = np.random.default_rng(seed)
    logs = _noise(length, noise, generator)
    middle = length // 2
    first = last = None
    if "step" in scenario:
        factor = float(scenario.split()[-1].rstrip("x"))
        at = 2 * length // 3 if scenario.startswith("late") else middle
        logs[at:] += math.log(factor)
        first = last = at
    elif scenario.startswith("creep"):
        first, last = middle - 2, middle + 2
        for step, index in enumerate(range(first, length)):
            logs[index] += math.log(1.03) * min(step + 1, 5)
    elif scenario != "flat":
        raise ValueError(f"unknown scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    return History(tuple(BASE_SECONDS * np.exp(logs)), first, last)


def detect_changes(history: History, *, method: str = "gate", **options) -> list[int]:
    """The first runs after each change point found by ``method`` (:data:`METHODS`; empty when too short)."""
    if method != "gate":
        return _ruptures_changes(history.values, method)
    try:
        return [point.index for point in detect(history.values, **options).change_points]
    except TooFewRuns:
        return []


RUPTURES_METHODS = {
    # name: (ruptures class, cost model, penalty in units of log(runs); for "l2" also times the noise²)
    "pelt-l2-16": ("KernelCPD", "linear", 16.0),
    "pelt-normal": ("Pelt", "normal", 8.0),
    "binseg-normal": ("Binseg", "normal", 8.0),
    "pelt-rbf": ("Pelt", "rbf", 1.0),
    "binseg-rbf": ("Binseg", "rbf", 1.0),
}
"""The well-kept implementations compared with the gate's (``--compare``), run on the same log run values with
the same minimum segment. ``pelt-l2-16`` is the gate's earlier method without its permutation test (PELT,
squared error, 16 × noise² × log n); the other penalties were the smallest of 1, 2, 4, 6, 8, 16 (rbf: 0.1, 0.25,
0.5, 1) × log n that kept the false change points of 20 flat ``calm5`` histories of 30 runs (seeds 1000–1019, not
those measured) at 1 or fewer, as the gate's own level is set against false change points."""
METHODS = ("gate", *RUPTURES_METHODS)


def _ruptures_changes(values, method: str) -> list[int]:
    import ruptures  # deferred: only the comparison needs it, and the gate does not depend on it

    kind, model, factor = RUPTURES_METHODS[method]
    logs = np.log(np.asarray(values, dtype=float))
    with warnings.catch_warnings():  # ruptures' CostNormal warns on creation that it biases constant segments
        warnings.filterwarnings("ignore", message="New behaviour in v1.1.5", category=UserWarning)
        if kind == "KernelCPD":
            noise = max(0.002, 1.4826 * float(np.median(np.abs(np.diff(logs)))) / math.sqrt(2))
            algorithm = ruptures.KernelCPD(kernel=model, min_size=MIN_SEGMENT, jump=1)
            penalty = factor * noise ** 2 * math.log(logs.size)
        else:
            algorithm = getattr(ruptures, kind)(model=model, min_size=MIN_SEGMENT, jump=1)
            penalty = factor * math.log(logs.size)
        ends = algorithm.fit(logs.reshape(-1, 1)).predict(pen=penalty)
    return [int(end) for end in ends[:-1]]


def found(indices, history: History, *, slack: int = 1) -> bool:
    """Whether a change point lies within ``slack`` runs of the planted change (its ramp, for a creep)."""
    if history.first_changed is None:
        return False
    return any(history.first_changed - slack <= index <= history.last_changed + slack for index in indices)


def best_split(history: History, *, min_segment: int = MIN_SEGMENT) -> int:
    """Where the best single split of the whole history lies (the least-squares step on log values): the
    location an oracle that knows there is exactly one step would name, the bound on how near any method
    can place it from these runs.

    >>> best_split(synthetic(30, "step 1.25x", noise="calm", seed=1))
    15
    """
    logs = np.log(np.asarray(history.values))
    centred = (logs - logs.mean()) / (float(np.std(logs)) or 1.0)
    return min_segment + int(np.argmax(split_statistics(centred, min_segment)))


def location_bound(length: int, factor: float, sd: float, *, histories: int = 20000, slack: int = 1,
                   min_segment: int = MIN_SEGMENT, seed: int = 0) -> float:
    """The most often any method can name a step's run within ``slack`` runs, on independent normal log
    values of sd ``sd`` with one step of ``factor`` at a run drawn uniformly (each side at least
    ``min_segment`` runs): the Bayes rule, told the noise, the step's size and both levels, names the
    window of ``2 × slack + 1`` runs holding the most posterior mass of where the step is. No method
    that knows less does better on average over where the step falls (simulated, seeded).

    >>> round(location_bound(30, 1.5, 0.01, histories=200), 2)   # a step of 40 noise sds: always placed
    1.0
    """
    generator = np.random.default_rng(seed)
    step = math.log(factor)
    starts = np.arange(min_segment, length - min_segment + 1)   # the first run after the step
    hits = 0
    for _ in range(histories):
        first = int(generator.choice(starts))
        logs = generator.normal(0.0, sd, length)
        logs[first:] += step
        # log likelihood of "the step starts at t", levels known (0 before, step after): sum over i >= t
        # of (x_i·step − step²/2)/sd², up to a constant
        evidence = (logs * step - step * step / 2) / (sd * sd)
        after = np.cumsum(evidence[::-1])[::-1][starts]
        posterior = np.exp(after - after.max())
        posterior /= posterior.sum()
        padded = np.concatenate([np.zeros(slack), posterior, np.zeros(slack)])
        window = sum(padded[offset:offset + posterior.size] for offset in range(2 * slack + 1))
        hits += abs(int(starts[int(np.argmax(window))]) - first) <= slack
    return hits / histories


def _distance(indices, history: History) -> int | None:
    if history.first_changed is None or not indices:
        return None
    return min(max(0, history.first_changed - index, index - history.last_changed) for index in indices)


def tally(histories, *, method: str = "gate", **options) -> dict:
    """Counts over ``histories``: planted changes found within ±1 run (``found``), where the best split lies
    within ±1 (``best_split``), the nearest change point's distance (``distances``), change points away from
    the planted one or in flat histories (``other``), histories with any change point (``with_any``)."""
    counts = {"found": 0, "best_split": 0, "distances": [], "other": 0, "with_any": 0}
    for history in histories:
        indices = detect_changes(history, method=method, **options)
        counts["with_any"] += bool(indices)
        if history.first_changed is None:
            counts["other"] += len(indices)
            continue
        counts["found"] += found(indices, history)
        counts["best_split"] += found([best_split(history)], history)
        distance = _distance(indices, history)
        if distance is not None:
            counts["distances"].append(distance)
        counts["other"] += sum(1 for index in indices if not found([index], history))
    return counts


def measure(*, noise: str, histories: int = HISTORIES, lengths=LENGTHS, scenarios=SCENARIOS, method: str = "gate",
            **options) -> list:
    """One row per scenario and length: found ±1, mean distance of the nearest, other change points."""
    rows = []
    for scenario in scenarios:
        for length in lengths:
            counts = tally((synthetic(length, scenario, noise=noise, seed=seed) for seed in range(histories)),
                           method=method, **options)
            distances = counts["distances"]
            rows.append({"method": method, "noise": noise, "scenario": scenario, "runs": length, "histories": histories,
                         "found_within_1": counts["found"] if scenario != "flat" else None,
                         "best_split_within_1": counts["best_split"] if scenario != "flat" else None,
                         "mean_distance": float(np.mean(distances)) if distances else None,
                         "histories_with_a_change_point": counts["with_any"], "other_change_points": counts["other"]})
    return rows


def _write_runs(folder: Path, runs: int, benchmarks: int, rounds: int, seed: int = 0) -> None:
    """``runs`` saved-run files of ``benchmarks`` benchmarks each, calm noise, a 1.25× step halfway in one in five."""
    generator = np.random.default_rng(seed)
    series = [synthetic(runs, "step 1.25x" if bench % 5 == 0 else "flat", seed=seed + bench).values
              for bench in range(benchmarks)]
    machine = {"accelerator": None, "cpu_model": "AMD EPYC", "cpu_cores": 2}
    for number in range(runs):
        docs = []
        for bench in range(benchmarks):
            fastest = series[bench][number]
            data = list(fastest * (1 + np.abs(generator.normal(0, 0.03, rounds))))
            data[0] = fastest
            docs.append({"fullname": f"tests/test_t.py::test_{bench:02}", "extra_info": {"device_kind": "cpu"},
                         "stats": {"data": data}})
        document = {"machine_info": {"accounting": machine}, "benchmarks": docs,
                    "datetime": "2026-01-01T00:00:00+00:00", "commit_info": {"id": f"{number:040x}", "branch": "main"}}
        (folder / f"{number + 1:04}_main.json").write_text(json.dumps(document))


def time_history(runs: int = TIMING_RUNS, benchmarks: int = TIMING_BENCHMARKS, rounds: int = TIMING_ROUNDS) -> dict:
    """Seconds to read ``runs`` saved files of ``benchmarks`` benchmarks and find every change point."""
    with tempfile.TemporaryDirectory() as folder:
        machine = Path(folder) / "machine"
        machine.mkdir()
        _write_runs(machine, runs, benchmarks, rounds)
        started = time.perf_counter()
        saved, _ = read_history(run_files(folder, "machine"))
        read = time.perf_counter() - started
        result = analyse(saved)
        total = time.perf_counter() - started
    return {"runs": runs, "benchmarks": benchmarks, "read_s": read, "detect_s": total - read, "total_s": total,
            "change_points": len(result.steps)}


HEADER = ["method", "noise", "planted", "runs", "found ±1 run", "one best split ±1", "mean distance (runs)", "histories with a change point",
          "other change points"]


def summary_rows(rows) -> list[list[str]]:
    """The table's cells."""
    cells = []
    for row in rows:
        found_text = "—" if row["found_within_1"] is None else f"{row['found_within_1']} / {row['histories']}"
        oracle_text = ("—" if row.get("best_split_within_1") is None else
                       f"{row['best_split_within_1']} / {row['histories']}")
        distance = "—" if row["mean_distance"] is None else f"{row['mean_distance']:.2f}"
        cells.append([row["method"], row["noise"], row["scenario"], str(row["runs"]), found_text, oracle_text,
                      distance, f"{row['histories_with_a_change_point']} / {row['histories']}",
                      str(row["other_change_points"])])
    return cells


def main(argv=None) -> int:
    parser = OneLineParser(prog="python -m studies.gate_change_points", description=__doc__.split("\n\n")[0])
    parser.add_argument("--noise", choices=sorted(NOISE), action="append", default=None,
                        help="noise model(s); default: all")
    parser.add_argument("--histories", type=int, default=HISTORIES, help="histories per cell. Default: %(default)r")
    parser.add_argument("--method", choices=METHODS, action="append", default=None,
                        help="change-point method(s): the gate's, or ruptures' (installed separately); default: gate")
    parser.add_argument("--compare", action="store_true",
                        help="every method side by side on 30-run histories of calm, calm5 and plain5 noise")
    parser.add_argument("--runs", type=int, action="append", default=None,
                        help=f"history lengths; default: {', '.join(map(str, LENGTHS))}")
    parser.add_argument("--alpha", type=float, default=ALPHA,
                        help="the gate's permutation level (changepoints.ALPHA). Default: %(default)r")
    parser.add_argument("--floor", type=float, default=MIN_AUTOCORRELATION,
                        help="the gate's least assumed lag-1 autocorrelation (changepoints.MIN_AUTOCORRELATION). "
                             "Default: %(default)r")
    parser.add_argument("--no-timing", dest="timing", action="store_false", help="skip the 1,000 × 50 timing")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if args.histories < 1:
        parser.error(f"--histories must be a positive integer, got {args.histories}")
    methods = args.method or (METHODS if args.compare else ("gate",))
    noises = args.noise or (("calm", "calm5", "plain5") if args.compare else sorted(NOISE))
    lengths = tuple(args.runs or ((30,) if args.compare else LENGTHS))
    if any(length < 2 for length in lengths):
        parser.error(f"--runs must be at least 2, got {min(lengths)}")
    if not 0 < args.alpha < 1:
        parser.error(f"--alpha must be a level in (0, 1), got {args.alpha}")
    if not 0 <= args.floor <= MAX_AUTOCORRELATION:
        parser.error(f"--floor must be an autocorrelation in [0, {MAX_AUTOCORRELATION:g}], got {args.floor}")
    rows = []
    for method in methods:
        for noise in noises:
            options = {"alpha": args.alpha, "floor": args.floor} if method == "gate" else {}
            rows += measure(noise=noise, histories=args.histories, lengths=lengths, method=method, **options)
    print(table(HEADER, summary_rows(rows)))
    figures = {"rows": rows, "alpha": args.alpha, "floor": args.floor}
    if args.timing and not args.compare:
        timing = time_history()
        figures["timing"] = timing
        print(f"\n{timing['runs']} runs × {timing['benchmarks']} benchmarks: read {timing['read_s']:.1f} s, "
              f"detect {timing['detect_s']:.1f} s, {timing['total_s']:.1f} s in all "
              f"({timing['change_points']} change points)")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
