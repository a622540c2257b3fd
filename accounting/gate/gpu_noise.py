"""What a GPU gate can detect, modelled from recorded runs: each benchmark's noise through the gate's power model.

The gate compares runs, each reduced to its fastest round (:mod:`accounting.gate.stats`), so its
noise is the run-to-run spread of those values. Where a GPU is not at hand, two recorded figures
stand in for it, and this module turns each into the smallest slowdown the gate would show with
95 % power (:func:`accounting.gate.power.minimum_detectable_effect`, at the level Holm's
strictest step asks of a matrix of ``family`` benchmarks, ``ALPHA / family``):

- **the rounds' spread** (:func:`round_spreads`): the sd of the log round times within one run.
  A lower bound on the run-to-run spread: it holds none of what changes from one process to the
  next (cuBLAS's choice of kernel, where the operands landed);
- **the runs' spread** (:func:`run_spreads`): the sd of the log fastest rounds of the same benchmark
  over several recorded runs — the gate's own noise, but from as many runs as were recorded.

:func:`runs_needed_for` answers the recommendation's question: how many current runs, against
``baseline`` saved runs, bring the detectable slowdown under a threshold.

>>> round(detectable(0.0097, baseline=5, current=5, family=2), 3)   # bf16 8192³ on an H200: its rounds' spread
1.034
>>> runs_needed_for(0.0754, threshold=0.05, baseline=10, family=2) is None   # tf32 8192³: not within 20 runs
True
"""

import sys
from pathlib import Path

import numpy as np

from accounting.errors import AccountingError
from accounting.gate.levels import ALPHA
from accounting.gate.power import minimum_detectable_effect
from accounting.gate.storage import read_document

MAX_CURRENT_RUNS = 20
"""The most current runs :func:`runs_needed_for` considers (``check --max-extra-runs 19``)."""


def _benchmarks(document, source: str) -> dict:
    """fullname -> raw rounds of every benchmark in a pytest-benchmark document saved with its data."""
    if not isinstance(document, dict) or not isinstance(document.get("benchmarks"), list):
        raise AccountingError(f"{source}: not a pytest-benchmark run (no 'benchmarks' list)")
    rounds = {}
    for bench in document["benchmarks"]:
        data = (bench.get("stats") or {}).get("data")
        if not isinstance(data, list) or len(data) < 2 or not all(
                isinstance(value, (int, float)) and value > 0 for value in data):
            raise AccountingError(f"{source}: benchmark {bench.get('fullname')!r} has no raw rounds (stats.data); "
                                  "save runs with --benchmark-save-data")
        rounds[bench["fullname"]] = np.asarray(data, dtype=float)
    return rounds


def round_spreads(document, source: str = "run") -> dict:
    """fullname -> the sd of the logs of its rounds in one run (a lower bound on the run-to-run spread).

    >>> doc = {"benchmarks": [{"fullname": "t", "stats": {"data": [1.0, 1.02, 0.98, 1.0]}}]}
    >>> round(round_spreads(doc)["t"], 4)
    0.0163
    """
    return {name: float(np.std(np.log(rounds), ddof=1)) for name, rounds in _benchmarks(document, source).items()}


def run_spreads(documents) -> dict:
    """fullname -> ``(spread, runs)``: the sd of the logs of each run's fastest round, over the ``documents``
    (``(source, document)`` pairs) that hold it; only benchmarks in at least three runs (two give no spread worth
    a name).

    >>> runs = [(f"r{i}", {"benchmarks": [{"fullname": "t", "stats": {"data": [v, v * 1.1]}}]})
    ...         for i, v in enumerate([1.0, 1.01, 0.99])]
    >>> spread, count = run_spreads(runs)["t"]
    >>> round(spread, 4), count
    (0.01, 3)
    """
    fastest = {}
    for source, document in documents:
        for name, rounds in _benchmarks(document, source).items():
            fastest.setdefault(name, []).append(float(rounds.min()))
    return {name: (float(np.std(np.log(values), ddof=1)), len(values)) for name, values in fastest.items()
            if len(values) >= 3}


def detectable(spread: float, *, baseline: int, current: int, family: int) -> float | None:
    """The smallest slowdown (a ratio) shown slower with 95 % power, at ``ALPHA / family`` (``None``: none is)."""
    return minimum_detectable_effect(spread, baseline, current, alpha=ALPHA / family)


def runs_needed_for(spread: float, *, threshold: float, baseline: int, family: int) -> int | None:
    """The fewest current runs (up to :data:`MAX_CURRENT_RUNS`) whose detectable slowdown is at most ``threshold``."""
    for current in range(1, MAX_CURRENT_RUNS + 1):
        found = detectable(spread, baseline=baseline, current=current, family=family)
        if found is not None and found <= 1 + threshold:
            return current
    return None


def _percent(ratio) -> str:
    return "—" if ratio is None else f"{(ratio - 1) * 100:.1f} %"


def table(spreads: dict, *, baseline: int = 5, current: int = 5, family: int = 2) -> list[str]:
    """Markdown rows: benchmark, spread, detectable slowdown, and the current runs that bring it under 10 % and 5 %
    against 10 baseline runs."""
    lines = [f"| benchmark | spread (sd of logs) | detectable, {baseline} + {current} runs | current runs for ≤ 10 % "
             "(10 baseline) | for ≤ 5 % |", "|---|---|---|---|---|"]
    for name, spread in sorted(spreads.items(), key=lambda item: item[1]):
        needs = [runs_needed_for(spread, threshold=threshold, baseline=10, family=family) for threshold in (0.10, 0.05)]
        lines.append(f"| {name.rsplit('::', 1)[-1]} | {spread * 100:.2f} % | "
                     f"{_percent(detectable(spread, baseline=baseline, current=current, family=family))} | "
                     + " | ".join(str(need) if need else f"> {MAX_CURRENT_RUNS}" for need in needs) + " |")
    return lines


def main(argv=None) -> int:
    """``python -m accounting.gate.gpu_noise RUN.json [MORE.json ...]``: the table from the first run's rounds,
    then, where a benchmark is in three runs or more, from the runs' fastest rounds."""
    paths = [Path(path) for path in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        raise AccountingError("give one or more pytest-benchmark runs saved with --benchmark-save-data")
    documents = [(str(path), read_document(path)) for path in paths]
    print(f"From the rounds of {paths[0].name} (alpha {ALPHA}/2: Holm's strictest step for 2 benchmarks):")
    print("\n".join(table(round_spreads(documents[0][1], documents[0][0]))))
    spreads = run_spreads(documents)
    if spreads:
        print(f"\nFrom the fastest rounds of {len(documents)} runs:")
        print("\n".join(table({name: spread for name, (spread, _) in spreads.items()})))
    return 0


if __name__ == "__main__":  # pragma: no cover - the docs' command
    raise SystemExit(main())
