"""The benchmark suite's machinery: the pytest plugin, its fixture, and the benchmark matrix it reads.

- :mod:`~accounting.bench.matrix` — ``benchmarks.json``: shapes, floors, rounds per device kind;
- :mod:`~accounting.bench.skips` — which benchmarks run here, and the reason for each that does not;
- :mod:`~accounting.bench.shapes` — a configured shape shrunk to the device's free memory;
- :mod:`~accounting.bench.identity` — machine identity in saved runs, and the compare guard;
- :mod:`~accounting.bench.fixture` — ``flops_benchmark``: timing with FLOPs, TFLOP/s and MFU;
- :mod:`~accounting.bench.plugin` — the pytest plugin (entry point ``accounting``) that ties them in.
"""
