"""The end-of-run "achieved TFLOP/s and MFU" section: lines the benchmarks add, written after the run.

Imports no torch: the plugin sets the list up and writes it in every pytest run.

>>> import pytest
>>> from types import SimpleNamespace
>>> config = SimpleNamespace(stash=pytest.Stash())
>>> add_summary_line(config, "test_mm: 1.2 TFLOP/s of peak 2 -> MFU 0.600 [CPU, float32]")
>>> config.stash[SUMMARY]
['test_mm: 1.2 TFLOP/s of peak 2 -> MFU 0.600 [CPU, float32]']
"""

import pytest

SUMMARY = pytest.StashKey[list]()
"""The end-of-run summary's lines (see :func:`add_summary_line`)."""


def add_summary_line(config, line: str) -> None:
    """Add a line to the end-of-run "achieved TFLOP/s and MFU" section."""
    config.stash.setdefault(SUMMARY, []).append(line)
