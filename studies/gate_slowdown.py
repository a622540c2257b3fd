"""The slowed benchmark of the gate's error-rate study: the module it writes, and the rows that make a factor.

:mod:`studies.gate_error_rates` measures how often the gate fails unchanged code and catches a known
slowdown. The slowdown is injected without touching library code: this module writes a small
benchmark module whose work is a float32 1024³ product plus, when ``$ACCOUNTING_GATE_SLOWDOWN`` is
``f > 1``, a second product of ``$ACCOUNTING_GATE_SLOWDOWN_ROWS`` rows. Time is not linear in FLOPs
(a thin product runs at a lower rate), so :func:`calibrate_rows` finds the rows for each factor in
its own process, and every slowed run measures in-process the factor it really injected.

>>> benchmark_ids(2)
['b00', 'b01']
"""

import statistics
import textwrap
from pathlib import Path

from accounting.bench.matrix import load_benchmarks

SLOWDOWN_ENV = "ACCOUNTING_GATE_SLOWDOWN"
CHECK_PAIRS = 5
MODULE_NAME = "test_gate_error_rates.py"
"""The file name of the written module (a pytest test module)."""

BENCHMARK_MODULE = textwrap.dedent('''\
    """Written by studies.gate_error_rates: a 1024^3 float32 matmul, slowed by ${SLOWDOWN_ENV}."""
    import os
    import statistics
    import time

    import pytest
    import torch

    from accounting.timing import matmul_case, time_fn

    SHAPE = (1024, 1024, 1024)


    def _work():
        factor = float(os.environ.get("{SLOWDOWN_ENV}", "1"))
        case = matmul_case("float32", *SHAPE, "cpu")
        extra_rows = int(os.environ.get("{SLOWDOWN_ENV}_ROWS", round((factor - 1) * SHAPE[0])))
        if extra_rows <= 0:
            return case, case.fn, factor
        left = torch.randn(extra_rows, SHAPE[1])
        out = torch.empty(extra_rows, SHAPE[2])
        right = case.operands[1]

        def slowed():
            case.fn()
            torch.matmul(left, right, out=out)

        return case, slowed, factor


    @pytest.mark.cpu
    @pytest.mark.parametrize("index", {INDICES})
    def test_matmul_1024(flops_benchmark, index):
        case, fn, factor = _work()
        flops_benchmark(fn, flops=case.flops, dtype="float32", device="cpu", shape=SHAPE, rounds={ROUNDS},
                        min_time_s={MIN_TIME_S})
        flops_benchmark.benchmark.extra_info["intended_slowdown"] = factor
        if fn is not case.fn and index == {FIRST}:  # the factor really injected, measured in-process, interleaved
            started = time.perf_counter()
            ratios = [time_fn(fn, repeats=5, min_time_s=0).median / time_fn(case.fn, repeats=5, min_time_s=0).median
                      for _ in range({CHECK_PAIRS})]
            flops_benchmark.benchmark.extra_info["injected_slowdown"] = statistics.median(ratios)
            flops_benchmark.benchmark.extra_info["check_seconds"] = time.perf_counter() - started
''')


CALIBRATION_STEPS = 8
CALIBRATION_TOLERANCE = 0.01  # the injected factor's calibration is done within ±1 % of it
SHAPE = (1024, 1024, 1024)


def _injected_ratio(rows: int, pairs: int = CHECK_PAIRS) -> float:
    """Median over interleaved pairs of (product + ``rows``-row product) / product, in this process."""
    import torch

    from accounting.timing import matmul_case, time_fn

    case = matmul_case("float32", *SHAPE, "cpu")
    left, out = torch.randn(rows, SHAPE[1]), torch.empty(rows, SHAPE[2])

    def slowed():
        case.fn()
        torch.matmul(left, case.operands[1], out=out)

    ratios = [time_fn(slowed, repeats=5, min_time_s=0).median / time_fn(case.fn, repeats=5, min_time_s=0).median
              for _ in range(pairs)]
    return statistics.median(ratios)


def calibrate_rows(factor: float, *, measure=_injected_ratio, steps: int = CALIBRATION_STEPS,
                   tolerance: float = CALIBRATION_TOLERANCE) -> int:
    """Rows of the extra product that make the work ``factor`` times slower, found by secant steps.

    Starts from the FLOP share, ``(factor − 1)·1024`` rows, and rescales by the measured excess until a
    measurement (``measure(rows)`` gives the ratio) reads within ``tolerance`` of ``factor``, at most ``steps``
    times; then the rows that read closest. Every answer is a measured one, so cells of a study calibrated
    apart inject comparable factors.

    >>> calibrate_rows(1.25, measure=lambda rows: 1 + 1.6 * (rows / 1024))  # a thin product at 1/1.6 the rate
    160
    """
    rows = max(1, round((factor - 1) * SHAPE[0]))
    read = {}
    for _ in range(steps):
        read[rows] = measure(rows)
        excess = read[rows] - 1
        if abs(read[rows] - factor) <= tolerance or excess <= 0:
            break
        rows = max(1, round(rows * (factor - 1) / excess))
    return min(read, key=lambda tried: abs(read[tried] - factor))


def threads_pinned(threads: int | None):
    """A context in which this process's torch uses ``threads`` intra-op threads (``None``: unchanged)."""
    import contextlib

    import torch

    @contextlib.contextmanager
    def pinned():
        before = torch.get_num_threads()
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    return pinned()


def benchmark_ids(count: int) -> list[str]:
    """The parameter of each benchmark of a matrix of ``count``: ``b00``, ``b01``, …

    >>> benchmark_ids(3)
    ['b00', 'b01', 'b02']
    """
    return [f"b{index:02}" for index in range(count)]


def module_source(*, rounds: int, min_time_s: float, check_pairs: int = CHECK_PAIRS, benchmarks: int = 1) -> str:
    """:data:`BENCHMARK_MODULE` filled in: its rounds (at least ``rounds``, filling ``min_time_s``), check pairs and
    the number of benchmarks in its matrix.

    >>> "rounds=3," in module_source(rounds=3, min_time_s=0.5) and "min_time_s=0.5)" in module_source(rounds=3, min_time_s=0.5)
    True
    """
    ids = benchmark_ids(benchmarks)
    return (BENCHMARK_MODULE.replace("{SLOWDOWN_ENV}", SLOWDOWN_ENV).replace("{ROUNDS}", str(rounds))
            .replace("{MIN_TIME_S}", repr(min_time_s)).replace("{CHECK_PAIRS}", str(check_pairs))
            .replace("{INDICES}", repr(ids)).replace("{FIRST}", repr(ids[0])))


def write_module(folder: Path, benchmarks: int = 1) -> list:
    """The benchmark module in ``folder``, with the CPU rounds of benchmarks.json; the pytest arguments that run it."""
    cpu = load_benchmarks().device("cpu")
    (folder / MODULE_NAME).write_text(module_source(rounds=cpu.rounds, min_time_s=cpu.min_time_s,
                                                    benchmarks=benchmarks))
    return ["-q", "-p", "no:cacheprovider", MODULE_NAME]
