"""The benchmark suite's machinery: the pytest plugin, its fixture, and the benchmark matrix it reads.

- :mod:`~accounting.bench.matrix` — ``benchmarks.json``: shapes, floors, rounds per device kind;
- :mod:`~accounting.bench.fleet_settings` — its ``fleet`` section: straggler fractions, bus bandwidth presets;
- :mod:`~accounting.bench.document_checks` — the entry checks both use, each error naming the entry;
- :mod:`~accounting.bench.skips` — which benchmarks run here, and the reason for each that does not;
- :mod:`~accounting.bench.shapes` — a configured shape shrunk to the device's free memory;
- :mod:`~accounting.bench.identity` — machine identity in saved runs, and the compare guard;
- :mod:`~accounting.bench.fixture` — what ``flops_benchmark`` runs: timing with FLOPs, TFLOP/s and MFU;
- :mod:`~accounting.bench.options` — the plugin's command-line options (no torch: registered in every run);
- :mod:`~accounting.bench.summary` — the end-of-run "achieved TFLOP/s and MFU" lines (no torch either);
- :mod:`~accounting.bench.plugin` — the pytest plugin (entry point ``accounting``) that ties them in, importing
  the modules that import torch only when a test uses them.
"""
