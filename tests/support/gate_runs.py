"""Saved-run documents for the gate's tests, shaped as pytest-benchmark writes them (``--benchmark-save-data``)."""

import json

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
