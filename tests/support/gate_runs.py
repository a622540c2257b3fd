"""Saved-run documents for the gate's tests, shaped as pytest-benchmark writes them (``--benchmark-save-data``)."""

import json
from pathlib import Path

CPU = {"accelerator": None, "torch": "2.13.0+cpu", "cpu_model": "AMD EPYC", "cpu_cores": 2}
OTHER_CPU = dict(CPU, cpu_model="Intel Xeon", cpu_cores=4)
MATMUL = "tests/benchmarks/test_matmul.py::test_cpu_matmul[float32-1024x1024x1024]"
COPY = "tests/test_bench_copy.py::test_copy"


def rounds(median: float, count: int = 10, spread: float = 0.02) -> list:
    """``count`` rounds around ``median`` (their median is ``median`` exactly for odd and even counts)."""
    steps = [(position - (count - 1) / 2) / max(count - 1, 1) for position in range(count)]
    return [median * (1 + spread * step) for step in steps]


def document(medians: dict, *, machine=CPU, guard=None, kind="cpu", count: int = 10,
             datetime: str = "2025-01-01T00:00:00", commit: dict | None = None) -> dict:
    """A saved run: ``medians`` maps fullname -> median seconds (or a list of raw rounds); ``commit``:
    pytest-benchmark's ``commit_info`` (``{}`` where none is given, as outside a git checkout)."""
    benchmarks = []
    for name, value in medians.items():
        data = value if isinstance(value, list) else rounds(value, count)
        benchmarks.append({"group": None, "name": name.rsplit("::", 1)[-1], "fullname": name, "params": None,
                           "extra_info": {"device_kind": kind, "dtype": "float32"},
                           "stats": {"min": min(data), "median": sorted(data)[len(data) // 2], "rounds": len(data),
                                     "data": data}})
    result = {"machine_info": {"node": "ci", "accounting": dict(machine)}, "commit_info": dict(commit or {}),
              "benchmarks": benchmarks, "datetime": datetime, "version": "5.1.0"}
    if guard is not None:
        result["accounting_gate"] = guard
    return result


def write(folder, name: str, data) -> str:
    """Write ``data`` (a document, or text as it is) to ``folder/name``; the path."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


QUIET = {"before": {"load_average_1m": 0.2, "logical_cpus": 2, "clock_mhz_mean": 3000.0, "throttle_reasons": []},
         "after": {"load_average_1m": 0.9, "logical_cpus": 2, "clock_mhz_mean": 2990.0, "throttle_reasons": []},
         "own_before": 0.0, "own_after": 0.8}
LOADED = {"before": dict(QUIET["before"], load_average_1m=3.5), "after": dict(QUIET["after"], load_average_1m=4.0),
          "own_before": 0.0, "own_after": 0.8}


# The first real GPU run of the gate (one H200): tests/data/hosts/nvidia-h200.md, "The gate".
H200 = Path(__file__).resolve().parents[1] / "data" / "hosts" / "nvidia-h200"
H200_STORAGE = H200 / "gate-storage"
H200_GATED = ("bfloat16-8192x8192x8192", "float16-8192x8192x8192")
"""The benchmarks the recorded gate saved and checked (``-k 'bfloat16-8192x8192x8192 or float16-8192x8192x8192'``)."""


def h200_baseline_files() -> list:
    """The two baseline runs ``gate save --runs 2`` wrote on the H200, oldest first."""
    return sorted(H200_STORAGE.glob("*.json"))


def h200_document(path) -> dict:
    """A recorded run's JSON document, freshly loaded (callers may change it)."""
    return json.loads(Path(path).read_text(encoding="utf8"))


def h200_current() -> dict:
    """The recorded current run, rebuilt: ``gate check`` kept no ``current-1.json``, only what it printed.

    Its rounds: the same two benchmarks timed on the same GPU in the same hour by the ``pytest -m gpu`` step
    (``pytest-gpu.json``, 20 rounds each, their telemetry read under the power cap). Its load-guard readings: the
    first baseline run's (idle 345 MHz before, 1980 MHz after), which are what ``gate-check.log`` printed for the
    current run ("the clock moved from 345 to 1980 MHz during the run").
    """
    document = h200_document(H200 / "pytest-gpu.json")
    document["benchmarks"] = [bench for bench in document["benchmarks"]
                              if any(f"[{name}-" in bench["fullname"] for name in H200_GATED)]
    document["accounting_gate"] = h200_document(h200_baseline_files()[0])["accounting_gate"]
    return document
