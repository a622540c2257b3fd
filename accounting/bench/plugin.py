"""The pytest plugin: markers, options, a FLOPs-aware benchmark fixture and GPU-safe regression gating.

Installed with the package (entry point ``pytest11``), so any project that installs
``accounting`` can time its own kernels and get FLOPs, TFLOP/s and MFU into its
pytest-benchmark JSON::

    def test_my_kernel(flops_benchmark):
        x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        result = flops_benchmark(lambda: my_kernel(x), flops=2 * 4096**3, dtype="bf16", device="cuda",
                                 operands=(x,))  # L2 is flushed between rounds when these fit in it
        assert result.mfu is None or result.mfu > 0.5

What it adds (modules of :mod:`accounting.bench`):

- markers ``gpu`` (skipped, with the reason, where there is no CUDA device), ``cpu``, ``slow``,
  ``distributed`` (multi-process tests);
- options ``--peak-tflops`` (override the peak; also ``$ACCOUNTING_PEAK_TFLOPS``),
  ``--benchmarks-json``, ``--matmul-shapes`` and ``--gpus`` (which GPUs, each its own test);
- fixtures ``flops_benchmark`` and ``benchmark_config`` (:mod:`~accounting.bench.fixture`), skips with
  reasons (:mod:`~accounting.bench.skips`), shapes that fit (:mod:`~accounting.bench.shapes`);
- ``machine_info`` extended with the accelerator, its compute capability, SMs, memory,
  driver, CUDA/ROCm and torch versions, TF32 flags, CPU model and estimated CPU peak
  (fields that change run to run dropped), and ``--benchmark-compare`` against a
  baseline from another accelerator stops with an error instead of a warning
  (:mod:`~accounting.bench.identity`).

>>> sorted(MARKERS)
['cpu', 'distributed', 'gpu', 'slow']
"""

import pytest

# pytest finds a plugin's fixtures and hooks among its module's names: the fixtures and the
# machine-info hooks are imported here to be found.
from accounting.bench.fixture import SUMMARY, benchmark_config, flops_benchmark  # noqa: F401
from accounting.bench.identity import (  # noqa: F401
    pytest_benchmark_compare_machine_info,
    pytest_benchmark_update_machine_info,
)
from accounting.bench.skips import SHAPE_MODES, gpu_skip_reason
from accounting.hardware.peaks import PEAK_TFLOPS_ENV

MARKERS = {
    "gpu": "needs a CUDA device; skipped with a reason where there is none",
    "cpu": "benchmarks that run on the CPU",
    "slow": "takes more than a few seconds, or starts a process (pytest, the console script, torchrun)",
    "distributed": "starts several processes that talk through torch.distributed (gloo on the CPU)",
}
_NO_BASELINE = pytest.StashKey[str]()


def pytest_addoption(parser):
    group = parser.getgroup("accounting", "accounting: FLOPs, peaks and MFU in benchmarks")
    group.addoption(
        "--peak-tflops", type=float, default=None, metavar="TFLOPS",
        help=f"Dense peak TFLOP/s of the device under test, instead of the table or the CPU estimate "
             f"(also ${PEAK_TFLOPS_ENV}). Default: %(default)r",
    )
    group.addoption(
        "--benchmarks-json", default=None, metavar="PATH",
        help="The benchmark matrix to run. Default: %(default)r ($ACCOUNTING_BENCHMARKS or ./benchmarks.json)",
    )
    group.addoption(
        "--gpus", default=None, metavar="LIST",
        help="CUDA devices the GPU benchmarks run on, comma-separated indices (0,3); each becomes its own test "
             "(cuda:N in the test id), so baselines compare per GPU. Default: %(default)r (every visible GPU)",
    )
    group.addoption(
        "--matmul-shapes", choices=SHAPE_MODES, default="auto",
        help="Which configured matmul shapes to run: quick (the quick_shapes), full (all), or auto "
             "(full when -m selects cpu or gpu, quick otherwise). Default: %(default)r",
    )


def pytest_configure(config):
    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")
    config.stash[SUMMARY] = []


def pytest_terminal_summary(terminalreporter, config):
    lines = config.stash.get(SUMMARY, [])
    if lines:
        terminalreporter.write_sep("-", "accounting: achieved TFLOP/s and MFU (median round)")
        for line in lines:
            terminalreporter.write_line(line)
    note = config.stash.get(_NO_BASELINE, None)
    if note:
        terminalreporter.write_line(note, yellow=True)


def no_baseline_note(benchmarksession) -> str | None:
    """With ``--benchmark-compare`` (the latest baseline) and none saved yet, what is said instead of failing.

    pytest-benchmark raises "--benchmark-compare-fail requires valid --benchmark-compare" (exit 4)
    after the whole run when the storage holds no baseline: the first CI run on a fresh cache. A
    missing baseline is not an error (docs/benchmarks-and-gate.md, pytest.ini), so the threshold is not applied and
    this note says why. A baseline named explicitly (``--benchmark-compare=0002``) that is not
    there stays pytest-benchmark's error: that is a wrong name, not a fresh cache.

    >>> from types import SimpleNamespace
    >>> print(no_baseline_note(SimpleNamespace(compare=True, compare_fail=["median:10%"], compared_mapping={},
    ...                                        storage="file://.benchmarks")))
    accounting: --benchmark-compare found no saved baseline in file://.benchmarks, so nothing was compared and --benchmark-compare-fail was not applied; save one with --benchmark-autosave
    """
    if getattr(benchmarksession, "compare", None) is not True or getattr(benchmarksession, "compared_mapping", True):
        return None
    applied = ", so nothing was compared and --benchmark-compare-fail was not applied" \
        if getattr(benchmarksession, "compare_fail", None) else ", so nothing was compared"
    return (f"accounting: --benchmark-compare found no saved baseline in {benchmarksession.storage}{applied}; "
            "save one with --benchmark-autosave")


def pytest_sessionstart(session):
    benchmarksession = getattr(session.config, "_benchmarksession", None)  # loaded its baselines at configure
    note = no_baseline_note(benchmarksession) if benchmarksession is not None else None
    if note:
        benchmarksession.compare_fail = []  # nothing to compare against: no threshold to fail
        session.config.stash[_NO_BASELINE] = note


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if item.get_closest_marker("gpu") is None:
            continue
        if reason is None:
            reason = gpu_skip_reason() or ""
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
