"""Saved runs: pytest-benchmark's JSON files, read and checked, and the baseline chosen from them.

pytest-benchmark saves a run to ``<storage>/<machine id>/NNNN_<tag>.json`` (``--benchmark-storage``,
default ``.benchmarks``; the machine id is ``Linux-CPython-3.11-64bit``). Each file holds
``machine_info`` (with ``accounting``: the hardware identity this project's plugin adds) and
``benchmarks``, each with ``stats``; the raw rounds are in ``stats.data`` only when the run
was saved with ``--benchmark-save-data``. The gate needs them: it summarises every run by
the median of its own rounds (:mod:`accounting.gate.stats`).

Every problem with the file is an :class:`~accounting.errors.AccountingError` naming the file
and, where there is one, the benchmark: a file that cannot be read or is not JSON, one without
``machine_info["accounting"]``, a benchmark without raw rounds, with a round that is zero,
negative or not a number. A benchmark with fewer than :data:`MIN_ROUNDS` rounds is no error of
the file: it is read with its :attr:`BenchmarkRun.problem` said, and the verdict lists it as *not
compared* with that reason, so one such benchmark (a training step timed in 3 rounds) never
stops the gating of the others.

Besides its rounds, each benchmark carries what the ``flops_benchmark`` fixture recorded of its
work (:attr:`BenchmarkRun.work`: FLOPs, shape, dtype, device, all exact) and of its peak memory
(:attr:`BenchmarkRun.memory`): the gate compares those exactly, not statistically
(:mod:`accounting.gate.decide`).

>>> run = parse_run({"machine_info": {"accounting": {"accelerator": None, "cpu_model": "EPYC", "cpu_cores": 2}},
...                  "datetime": "2025-01-01T00:00:00",
...                  "benchmarks": [{"fullname": "tests/test_mm.py::test_mm", "extra_info": {"device_kind": "cpu"},
...                                  "stats": {"data": [0.015, 0.014, 0.016, 0.015, 0.017]}}]}, "0001_a.json")
>>> run.benchmarks["tests/test_mm.py::test_mm"].median, run.benchmarks["tests/test_mm.py::test_mm"].kind
(0.015, 'cpu')
"""

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from accounting.bench.identity import MACHINE_INFO_KEY, TIMING_FIELDS, machine_mismatch
from accounting.errors import AccountingError

DEFAULT_STORAGE = ".benchmarks"
"""pytest-benchmark's default ``--benchmark-storage``."""
MIN_ROUNDS = 5
"""Fewest raw rounds a run's median is taken from; with fewer, one straggler is the median."""
WORK_KEYS = ("flops", "shape", "dtype", "device")
"""``extra_info`` fields that say exactly what a benchmark timed (the ``flops_benchmark`` fixture records them).
Where any differs between two runs, their times are of different work: never compared."""
MEMORY_KEYS = ("cuda_peak_allocated_bytes", "peak_memory_bytes")
"""``extra_info`` fields of one call's peak memory, preferred first: the CUDA caching allocator's peak above what
was allocated before the call, then the live-tensor tracker's exact storage bytes (every device)."""
GUARD_KEY = "accounting_gate"
"""Top-level key of a saved run where the gate keeps its load-guard readings (before and after)."""
_RUN_NAME = re.compile(r"^(\d{4})_.*\.json$")


RUN_METRICS = {"min": min, "median": statistics.median, "mean": statistics.fmean}
"""The statistics a run's rounds can be reduced to for the gate (``benchmarks.json``'s ``regression.metric``)."""


def check_run_metric(metric: str) -> str:
    """``metric`` if the gate can reduce a run to it, else an error naming it.

    >>> check_run_metric("iqr")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: the gate reduces a run to its min, median or mean; got metric 'iqr' (benchmarks.json regression.metric, or --metric)
    """
    if metric not in RUN_METRICS:
        raise AccountingError(f"the gate reduces a run to its min, median or mean; got metric {metric!r} "
                              "(benchmarks.json regression.metric, or --metric)")
    return metric


@dataclass(frozen=True)
class BenchmarkRun:
    """One benchmark in one saved run: its raw rounds (seconds) and ``extra_info``."""

    name: str
    """pytest-benchmark's ``fullname``: the node id (``tests/test_x.py::test_y[param]``)."""
    rounds: tuple[float, ...]
    extra_info: dict = field(default_factory=dict)
    problem: str | None = None
    """Why the gate cannot judge this benchmark's time in this run (too few rounds), or ``None``."""

    @property
    def median(self) -> float:
        """The median of its raw rounds."""
        return statistics.median(self.rounds)

    def summary(self, metric: str) -> float:
        """The run reduced to one number for the gate: ``"min"``, ``"median"`` or ``"mean"`` of its rounds.

        >>> BenchmarkRun("t::a", (0.03, 0.01, 0.02)).summary("min")
        0.01
        """
        return RUN_METRICS[check_run_metric(metric)](self.rounds)

    @property
    def kind(self) -> str | None:
        """``"cpu"``/``"cuda"`` where the ``flops_benchmark`` fixture recorded it, else ``None``."""
        return self.extra_info.get("device_kind")

    @property
    def work(self) -> dict:
        """What was timed, exactly: the :data:`WORK_KEYS` the fixture recorded (those it did not are left out).

        >>> BenchmarkRun("t::a", (0.01,), {"flops": 2147483648, "dtype": "float32", "shape": [1024, 1024, 1024]}).work
        {'flops': 2147483648, 'shape': (1024, 1024, 1024), 'dtype': 'float32'}
        """
        work = {}
        for key in WORK_KEYS:
            value = self.extra_info.get(key)
            if value is not None:
                work[key] = tuple(value) if isinstance(value, list) else value
        return work

    @property
    def memory(self) -> tuple[str, int] | None:
        """``(source, peak bytes)`` of one call, as the fixture recorded it; ``None`` where it did not.

        The CUDA allocator's peak where there is one (:data:`MEMORY_KEYS`' order), else the
        live-tensor tracker's exact storage bytes.

        >>> BenchmarkRun("t::a", (0.01,), {"peak_memory_bytes": 4096}).memory
        ('peak_memory_bytes', 4096)
        """
        for key in MEMORY_KEYS:
            value = self.extra_info.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return key, value
        return None


@dataclass(frozen=True)
class SavedRun:
    """One pytest process's saved benchmarks."""

    path: str
    machine: dict
    """``machine_info["accounting"]``: the hardware identity."""
    benchmarks: dict
    """fullname -> :class:`BenchmarkRun`."""
    datetime: str | None = None
    guard: dict | None = None
    """The gate's load-guard readings, ``{"before": ..., "after": ...}``, when the gate ran it."""
    commit: dict | None = None
    """pytest-benchmark's ``commit_info`` (``id``, ``branch``, ``time``, ``dirty``) where it saved one."""

    @property
    def label(self) -> str:
        """The file name, which is how pytest-benchmark users know their runs."""
        return Path(self.path).name


def _rounds(bench: dict, name: str, source: str) -> tuple[float, ...]:
    stats = bench.get("stats")
    data = stats.get("data") if isinstance(stats, dict) else None
    if data is None:
        raise AccountingError(f"{source}: benchmark {name} has no raw rounds (stats.data); save runs with "
                              "--benchmark-save-data")
    if not isinstance(data, list):
        raise AccountingError(f"{source}: benchmark {name}: stats.data must be a list of seconds, got {data!r}")
    rounds = []
    for position, value in enumerate(data):
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not is_number or not math.isfinite(value) or value <= 0:
            raise AccountingError(f"{source}: benchmark {name}: round {position} is {value!r}; every round must be "
                                  "a positive, finite number of seconds")
        rounds.append(float(value))
    return tuple(rounds)


def rounds_problem(count: int) -> str | None:
    """Why a run of ``count`` rounds cannot be judged (``None``: it can).

    >>> rounds_problem(3)
    'timed in 3 round(s); the gate needs at least 5 per run (rounds in benchmarks.json, or --benchmark-min-rounds)'
    """
    if count >= MIN_ROUNDS:
        return None
    return (f"timed in {count} round(s); the gate needs at least {MIN_ROUNDS} per run (rounds in benchmarks.json, "
            "or --benchmark-min-rounds)")


MOVED_BENCHMARK_FILES = {
    "tests/test_bench_matmul.py::": "tests/benchmarks/test_matmul.py::",
    "tests/test_bench_model.py::": "tests/benchmarks/test_model.py::",
}
"""This suite's own benchmark files, moved into ``tests/benchmarks/``: old node id prefix -> new one."""


def current_name(fullname: str) -> str:
    """The node id a benchmark has now: a run saved before this suite's benchmarks moved compares as one after.

    >>> current_name("tests/test_bench_matmul.py::test_matmul_flops[cpu-float32-1024x1024x1024]")
    'tests/benchmarks/test_matmul.py::test_matmul_flops[cpu-float32-1024x1024x1024]'
    >>> current_name("tests/test_mine.py::test_mm")
    'tests/test_mine.py::test_mm'
    """
    for old, new in MOVED_BENCHMARK_FILES.items():
        if fullname.startswith(old):
            return new + fullname[len(old):]
    return fullname


def parse_run(data, source: str) -> SavedRun:
    """Check one loaded pytest-benchmark document; ``source`` (the file) names it in every error."""
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise AccountingError(f"{source}: not a pytest-benchmark run (no 'benchmarks' list)")
    machine_info = data.get("machine_info")
    machine = machine_info.get(MACHINE_INFO_KEY) if isinstance(machine_info, dict) else None
    if not isinstance(machine, dict):
        raise AccountingError(f"{source}: no machine_info[{MACHINE_INFO_KEY!r}], so it cannot be shown to come from "
                              "this hardware; save runs with the accounting package installed")
    benchmarks = {}
    for position, bench in enumerate(data["benchmarks"]):
        name = bench.get("fullname") if isinstance(bench, dict) else None
        if not isinstance(name, str) or not name:
            raise AccountingError(f"{source}: benchmarks[{position}] has no 'fullname'")
        name = current_name(name)
        if name in benchmarks:
            raise AccountingError(f"{source}: benchmark {name} appears twice")
        extra = bench.get("extra_info") if isinstance(bench.get("extra_info"), dict) else {}
        rounds = _rounds(bench, name, source)
        benchmarks[name] = BenchmarkRun(name, rounds, extra, rounds_problem(len(rounds)))
    guard = data.get(GUARD_KEY) if isinstance(data.get(GUARD_KEY), dict) else None
    commit = data.get("commit_info") if isinstance(data.get("commit_info"), dict) else None
    return SavedRun(str(source), machine, benchmarks, data.get("datetime"), guard, commit or None)


def read_document(path) -> dict:
    """The JSON document of one saved run, unchecked; an unreadable file or invalid JSON is an error naming it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf8")
    except OSError as error:
        raise AccountingError(f"cannot read saved run {str(path)!r}: {error.strerror or error}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise AccountingError(f"{path}: not valid JSON ({error}); delete or replace the file") from None


def load_run(path) -> SavedRun:
    """Read and check one saved run (see :func:`parse_run`)."""
    path = Path(path)
    return parse_run(read_document(path), str(path))


def machine_id() -> str:
    """pytest-benchmark's directory name for this interpreter (``Linux-CPython-3.11-64bit``)."""
    from pytest_benchmark.utils import get_machine_id  # deferred: only this name needs pytest-benchmark

    return get_machine_id()


def run_files(storage, machine: str | None = None) -> list[Path]:
    """The saved runs in ``storage/<machine>/``, oldest first (by their ``NNNN_`` number, as pytest-benchmark)."""
    folder = Path(storage) / (machine or machine_id())
    if not folder.is_dir():
        return []
    files = [path for path in folder.iterdir() if _RUN_NAME.match(path.name) and path.is_file()]
    return sorted(files, key=lambda path: (int(_RUN_NAME.match(path.name).group(1)), path.name))


@dataclass(frozen=True)
class Baseline:
    """The runs a comparison is made against, and what was left out and why."""

    runs: tuple
    skipped: tuple = ()
    """``(file name, why)`` for each saved run not used."""


def hardware_difference(current: dict, saved: dict, kinds=None) -> str:
    """The identity fields in which ``saved`` differs from ``current``, for a message (empty: same hardware).

    ``kinds``: the device kinds of the benchmarks compared (CPU benchmarks compare the host CPU,
    GPU ones the accelerator; :func:`accounting.bench.identity.machine_mismatch`).

    >>> hardware_difference({"accelerator": None, "cpu_model": "EPYC", "cpu_cores": 2},
    ...                     {"accelerator": None, "cpu_model": "Xeon", "cpu_cores": 2})
    "cpu_model 'Xeon', here 'EPYC'"
    """
    fields = machine_mismatch(current, saved, kinds)
    return ", ".join(f"{name} {saved.get(name)!r}, here {current.get(name)!r}" for name in fields)


def choose_baseline(files, identity: dict, count: int, *, loader=load_run, reject=None, kinds=None) -> Baseline:
    """The last ``count`` runs among ``files`` (oldest first) recorded on hardware ``identity``.

    Runs from other hardware, or GPU runs timed another way (``gpu_timing``), are skipped with the fields that
    differ, and so are runs for
    which ``reject(run)`` gives a reason (the load guard's); when none is left,
    an error says which hardware the storage holds. A corrupt file is an error (naming it):
    it would otherwise silently shrink the baseline.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise AccountingError(f"the number of baseline runs must be a positive integer, got {count!r}")
    chosen, skipped = [], []
    for path in reversed(list(files)):
        if len(chosen) == count:
            break
        run = loader(path)
        difference = hardware_difference(identity, run.machine, kinds)
        if difference:
            timed_otherwise = set(machine_mismatch(identity, run.machine, kinds)) <= set(TIMING_FIELDS)
            skipped.append((run.label, f"{'timed another way' if timed_otherwise else 'other hardware'} ({difference})"))
            continue
        reason = reject(run) if reject is not None else None
        if reason:
            skipped.append((run.label, reason))
            continue
        chosen.append(run)
    if not chosen:
        if skipped:
            raise AccountingError(f"no usable baseline run: {skipped[0][0]}: {skipped[0][1]}; save baselines on "
                                  "this machine kind, on a quiet machine, first")
        raise AccountingError("no saved runs to compare with; save baselines first (accounting gate save)")
    return Baseline(tuple(reversed(chosen)), tuple(skipped))
