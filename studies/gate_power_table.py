"""The A/B gate's power table, *predicted*: ``python -m studies.gate_power_table``.

What share of A/B jobs would the gate fail for a slowdown of each size, at each threshold and
run-to-run noise, and how many pairs (so how long) would a job take? Measuring that on the
16-benchmark matrix takes hours of a quiet machine per cell (docs/benchmarks-and-gate.md says
which commands); this script predicts it from the noise model the gate's power figures use
(:mod:`accounting.gate.power`): log run values normal with sd ``σ``, A and B independent, B's
mean moved by ``log(effect)``.

It models the rule ``gate ab`` followed before its time budget and sequential test (the measured tables of
docs/benchmarks-and-gate.md were made under it); what the sequential test needs is
:func:`accounting.gate.budget.pairs_needed`. Each job is simulated as ``gate ab`` ran it then: ``--start-pairs`` pairs, then a verdict
(:func:`accounting.gate.stats.compare_runs`, the permutation test and the 80 % interval of
:data:`accounting.gate.ab.AB_CONFIDENCE`), and while it is inconclusive one more pair, up to
``--max-pairs``. A regression fails the job. One benchmark stands for the matrix: ``ab``'s
min-P adjustment pays nothing where the benchmarks' luck is shared (a slow process is slow for
all; measured: a slowed matrix of 16 convicted after 5 pairs, as one benchmark is), and a matrix
slowed alike fails when any benchmark is convicted, so a job of 16 fails at least as often as
this. Left out: slow outlier processes and the load guard (they cost pairs, measured in the
docs), correlation between consecutive processes (interleaving spreads it over both sides).

The job time is ``2 × pairs × seconds per process``; 29 s is a process of the 16 quick CPU
benchmarks on the 2-vCPU VM (the measured matrix study: 174 s for the 6 processes of an
unchanged job).

>>> job = simulate_job(1.25, 0.006, threshold=0.10, generator=np.random.default_rng(0))
>>> job.decision.value, job.pairs
('regression', 5)
"""

import math
import sys
from dataclasses import dataclass

import numpy as np

from accounting.console import OneLineParser, table
from accounting.gate.ab import AB_CONFIDENCE, DEFAULT_START_PAIRS
from accounting.gate.levels import ALPHA
from accounting.gate.power import conviction_power
from accounting.gate.stats import Decision, compare_runs

NOISES = (0.006, 0.02, 0.066)
"""Run-to-run noise (sd of log fastest rounds within a job) recorded in docs/benchmarks-and-gate.md: 0.006 (the
16-benchmark study on a quiet host, median over benchmarks), 0.066 (the one-benchmark A/B study's noisier host),
and 0.02 between them (a calm hour's saved baseline)."""
EFFECTS = (1.0, 1.05, 1.10, 1.15, 1.25)
THRESHOLDS = (0.05, 0.10)
JOBS = 200
SECONDS_PER_PROCESS = 29.0
"""One pytest process of the 16 quick CPU benchmarks on the 2-vCPU VM (174 s / 6 processes, unchanged jobs)."""
SEED = 0

DEFAULT_MAX_PAIRS = 8
"""The pair cap of the rule this table models: ``gate ab`` before its time budget and sequential test (the
permutation test at a cap of 8 pairs). The sequential test's own figures: :func:`accounting.gate.budget.pairs_needed`."""


@dataclass(frozen=True)
class Job:
    """How one simulated job ended, and after how many pairs."""

    decision: Decision
    pairs: int


def simulate_job(effect: float, spread: float, *, threshold: float, start_pairs: int = DEFAULT_START_PAIRS,
                 max_pairs: int = DEFAULT_MAX_PAIRS, confidence: float = AB_CONFIDENCE, generator) -> Job:
    """One ``gate ab`` job on a single benchmark whose B runs are ``effect`` times slower (see the module docstring)."""
    a = list(np.exp(generator.normal(0.0, spread, start_pairs)))
    b = list(np.exp(generator.normal(math.log(effect), spread, start_pairs)))
    pairs = start_pairs
    while True:
        decision = compare_runs(a, b, threshold=threshold, alpha=ALPHA, confidence=confidence).decision
        if decision is not Decision.INCONCLUSIVE or pairs >= max_pairs:
            return Job(decision, pairs)
        a.append(float(np.exp(generator.normal(0.0, spread))))
        b.append(float(np.exp(generator.normal(math.log(effect), spread))))
        pairs += 1


def predict(effect: float, spread: float, *, threshold: float, jobs: int = JOBS, max_pairs: int = DEFAULT_MAX_PAIRS,
            seed: int = SEED) -> dict:
    """One cell: the share of jobs failed, the decisions, the mean pairs, and the formula's power at the cap."""
    generator = np.random.default_rng(seed)
    ended = [simulate_job(effect, spread, threshold=threshold, max_pairs=max_pairs, generator=generator)
             for _ in range(jobs)]
    decisions = {}
    for job in ended:
        decisions[job.decision.value] = decisions.get(job.decision.value, 0) + 1
    return {"effect": effect, "noise": spread, "threshold": threshold, "jobs": jobs,
            "failed": decisions.get(Decision.REGRESSION.value, 0) / jobs, "decisions": decisions,
            "mean_pairs": float(np.mean([job.pairs for job in ended])),
            "power_at_cap": conviction_power(effect, spread, max_pairs, max_pairs, alpha=ALPHA, threshold=threshold,
                                             confidence=AB_CONFIDENCE)}


HEADER = ["noise (sd of logs)", "threshold", "slowdown", "jobs failed (predicted)", "power at the cap (formula)",
          "mean pairs", "job time (predicted)"]


def rows(cells, seconds_per_process: float = SECONDS_PER_PROCESS) -> list[list[str]]:
    """The table's cells: one row per noise, threshold and slowdown.

    >>> rows([{"effect": 1.1, "noise": 0.02, "threshold": 0.05, "failed": 0.93, "power_at_cap": 0.95,
    ...        "mean_pairs": 5.2}])[0]
    ['0.02', '5 %', '1.10×', '93 %', '95 %', '5.2', '302 s']
    """
    return [[f"{cell['noise']:g}", f"{cell['threshold'] * 100:g} %",
             "unchanged" if cell["effect"] == 1 else f"{cell['effect']:.2f}×", f"{cell['failed'] * 100:.0f} %",
             f"{cell['power_at_cap'] * 100:.0f} %", f"{cell['mean_pairs']:.1f}",
             f"{2 * cell['mean_pairs'] * seconds_per_process:.0f} s"] for cell in cells]


def _fractions(text: str, what: str, low: float, high: float) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        values = ()
    if not values or any(not low <= value < high for value in values):
        raise ValueError(f"{what} needs comma-separated numbers in [{low:g}, {high:g}), got {text!r}")
    return values


def main(argv=None) -> int:
    parser = OneLineParser(prog="python -m studies.gate_power_table", description=__doc__.split("\n\n")[0])
    parser.add_argument("--noises", default=",".join(map(str, NOISES)), metavar="LIST",
                        help="run-to-run noise, sd of log run values. Default: %(default)s")
    parser.add_argument("--effects", default=",".join(map(str, EFFECTS)), metavar="LIST",
                        help="slowdowns (1: unchanged). Default: %(default)s")
    parser.add_argument("--thresholds", default=",".join(map(str, THRESHOLDS)), metavar="LIST",
                        help="the gate's --threshold values. Default: %(default)s")
    parser.add_argument("--jobs", type=int, default=JOBS, help="simulated jobs per cell. Default: %(default)r")
    parser.add_argument("--max-pairs", type=int, default=DEFAULT_MAX_PAIRS, help="Default: %(default)r")
    parser.add_argument("--seconds-per-process", type=float, default=SECONDS_PER_PROCESS,
                        help="one pytest process of the matrix, for the job time. Default: %(default)r")
    args = parser.parse_args(argv)
    try:
        noises = _fractions(args.noises, "--noises", 0.0, 1.0)
        effects = _fractions(args.effects, "--effects", 1.0, 10.0)
        thresholds = _fractions(args.thresholds, "--thresholds", 1e-9, 1.0)
    except ValueError as error:
        parser.error(str(error))
    if args.jobs < 1:
        parser.error(f"--jobs must be a positive integer, got {args.jobs}")
    if args.max_pairs < DEFAULT_START_PAIRS:
        parser.error(f"--max-pairs must be at least the {DEFAULT_START_PAIRS} start pairs, got {args.max_pairs}")
    cells = [predict(effect, noise, threshold=threshold, jobs=args.jobs, max_pairs=args.max_pairs)
             for noise in noises for threshold in thresholds for effect in effects]
    print(f"Predicted, not measured: {args.jobs} simulated gate ab jobs per cell, {DEFAULT_START_PAIRS} to "
          f"{args.max_pairs} pairs, p <= {ALPHA:g}, {AB_CONFIDENCE:.0%} interval; log-normal run noise")
    print(table(HEADER, rows(cells, args.seconds_per_process)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
