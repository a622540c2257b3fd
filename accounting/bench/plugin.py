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
  ``--benchmarks-json``, ``--matmul-shapes`` and ``--gpus`` (which GPUs, each its own test)
  (:mod:`~accounting.bench.options`);
- fixtures ``flops_benchmark`` and ``benchmark_config`` (:mod:`~accounting.bench.fixture`), skips with
  reasons (:mod:`~accounting.bench.skips`), shapes that fit (:mod:`~accounting.bench.shapes`);
- ``machine_info`` extended with the accelerator, its compute capability, SMs, memory,
  driver, CUDA/ROCm and torch versions, TF32 flags, CPU model and estimated CPU peak
  (fields that change run to run dropped), and ``--benchmark-compare`` against a
  baseline from another accelerator stops with an error instead of a warning
  (:mod:`~accounting.bench.identity`).

It costs nothing until it is used. Every pytest run of a project that installs the package loads this
module, so it imports no torch: options, markers and the end-of-run summary are registered from
torch-free modules, and the modules that import torch (the fixture, the skips, the machine identity,
the benchmark matrix) are declared here as deferred modules (:class:`DeferredModule`), imported on first
use: when a test requests ``flops_benchmark`` or ``benchmark_config``, when a collected test carries the
``gpu`` marker (whether CUDA exists decides its skip), or when pytest-benchmark saves or compares a run
(the machine-info hooks). docs/development.md gives the start-up time with and without the plugin.

>>> sorted(MARKERS)
['cpu', 'distributed', 'gpu', 'slow']
"""

import importlib

import pytest

from accounting.bench.options import add_options
from accounting.bench.summary import SUMMARY


class DeferredModule:
    """A module of the package, imported the first time one of its public names is read.

    Declared once, at the top of the module that uses it, in place of an import statement: nothing is
    imported, nor put in ``sys.modules``, until the first use, and then the module is imported as usual
    (once, then shared). Names beginning with ``_`` are refused without importing, so pytest's and
    inspect's probes of a plugin's names (``_mock_name``, ``__wrapped__``) do not import it either.

    >>> identity = DeferredModule("accounting.bench.identity")
    >>> identity
    <deferred module accounting.bench.identity>
    >>> identity.MACHINE_INFO_KEY
    'accounting'
    """

    def __init__(self, name: str):
        self.module_name = name

    def __getattr__(self, attribute: str):  # called only for names the proxy itself lacks
        if attribute.startswith("_"):
            raise AttributeError(f"{self!r} gives public names only, not {attribute!r}")
        return getattr(importlib.import_module(self.module_name), attribute)

    def __repr__(self) -> str:
        return f"<deferred module {self.module_name}>"


# The modules that import torch (see the module docstring), imported by their first use.
fixture = DeferredModule("accounting.bench.fixture")
identity = DeferredModule("accounting.bench.identity")
matrix = DeferredModule("accounting.bench.matrix")
skips = DeferredModule("accounting.bench.skips")

MARKERS = {
    "gpu": "needs a CUDA device; skipped with a reason where there is none",
    "cpu": "benchmarks that run on the CPU",
    "slow": "takes more than a few seconds, or starts a process (pytest, the console script, torchrun)",
    "distributed": "starts several processes that talk through torch.distributed (gloo on the CPU)",
}
_NO_BASELINE = pytest.StashKey[str]()


def pytest_addoption(parser):
    add_options(parser)


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
        if reason is None:  # the first gpu-marked test: only now is torch asked whether CUDA exists
            reason = skips.gpu_skip_reason() or ""
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config, machine_info):
    """pytest-benchmark saves or compares a run: its ``machine_info`` gains the accounting identity."""
    identity.pytest_benchmark_update_machine_info(config, machine_info)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_benchmark_compare_machine_info(config, benchmarksession, machine_info, compared_benchmark):
    """``--benchmark-compare`` against a baseline from other hardware stops with an error."""
    identity.pytest_benchmark_compare_machine_info(config, benchmarksession, machine_info, compared_benchmark)


@pytest.fixture(scope="session")
def benchmark_config(pytestconfig):
    """The validated benchmark matrix (``--benchmarks-json`` or the default ``benchmarks.json``)."""
    return matrix.load_benchmarks(pytestconfig.getoption("benchmarks_json", None))


@pytest.fixture
def flops_benchmark(benchmark, pytestconfig):
    """``flops_benchmark(fn, dtype=..., device=..., flops=None)`` → :class:`~accounting.bench.fixture.FlopsResult`,
    with FLOPs/MFU in ``extra_info``.

    Without ``flops=`` the FLOPs of one call are counted by ``FlopCounterMode``
    (see :class:`~accounting.bench.fixture.FlopsBenchmark`). Devices are detected once per session.
    """
    return fixture.session_flops_benchmark(benchmark, pytestconfig)
