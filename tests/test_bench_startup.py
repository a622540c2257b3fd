"""The plugin costs nothing until it is used: a pytest run that uses none of it imports no torch.

Every pytest run of a project that installs the package loads the plugin (entry point ``pytest11``). Such a run
gets the options and markers, and torch only when a test needs it: here a pytest process of its own, with the
entry point active as a user has it, reports from a conftest hook at the end of the session which modules were
imported. A run whose test carries the ``gpu`` marker is the contrast: it must ask torch whether CUDA exists.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from accounting.bench import options, plugin
from accounting.hardware import peaks

PLAIN_TESTS = textwrap.dedent("""
    import pytest

    def test_trivial():
        assert 1 + 1 == 2

    @pytest.mark.cpu
    @pytest.mark.slow
    def test_marked_with_the_plugins_markers():
        pass
""")

GPU_TEST = textwrap.dedent("""
    import pytest

    @pytest.mark.gpu
    def test_on_gpu():
        pass
""")

REPORTING_CONFTEST = textwrap.dedent("""
    import json, sys

    def pytest_unconfigure(config):
        with open("modules.json", "w") as out:
            json.dump({"modules": sorted(sys.modules), "plugin": config.pluginmanager.has_plugin("accounting"),
                       "peak_tflops": config.getoption("peak_tflops"),
                       "matmul_shapes": config.getoption("matmul_shapes")}, out)
""")

DEFERRED = ["accounting.bench.fixture", "accounting.bench.identity", "accounting.bench.matrix",
            "accounting.bench.skips"]


def _pytest_run(project, tests: str):
    """pytest in ``project``, as a user runs it (plugins from their entry points), with the plugin's options given."""
    (project / "pytest.ini").write_text("[pytest]\naddopts = --strict-markers\nfilterwarnings =\n    error\n")
    (project / "conftest.py").write_text(REPORTING_CONFTEST)
    (project / "test_project.py").write_text(tests)
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--peak-tflops", "2.5",
         "--matmul-shapes", "quick"],
        cwd=project, env={**env, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done, json.loads((project / "modules.json").read_text())


@pytest.mark.slow  # starts a pytest process
def test_a_run_that_uses_nothing_of_the_plugin_imports_no_torch(tmp_path):
    _done, seen = _pytest_run(tmp_path, PLAIN_TESTS)
    assert seen["plugin"], "the plugin was not loaded from its entry point: nothing was tested"
    assert (seen["peak_tflops"], seen["matmul_shapes"]) == (2.5, "quick")  # the options were registered
    assert "torch" not in seen["modules"]
    assert [name for name in DEFERRED if name in seen["modules"]] == []


@pytest.mark.slow  # starts a pytest process
def test_a_gpu_marked_test_asks_torch_and_is_skipped_with_the_reason(tmp_path):
    done, seen = _pytest_run(tmp_path, GPU_TEST)
    assert "torch" in seen["modules"] and "accounting.bench.skips" in seen["modules"]
    assert torch.cuda.is_available() or "no CUDA device: torch.cuda.is_available() is False" in done.stdout


@pytest.mark.slow  # starts a Python process
def test_import_accounting_imports_a_public_names_module_when_the_name_is_first_used():
    probe = ("import sys, accounting\n"
             "before = 'torch' in sys.modules\n"
             "error = accounting.AccountingError\n"
             "after_error = 'torch' in sys.modules\n"
             "accounting.tensor_bytes\n"
             "print(before, after_error, 'torch' in sys.modules, error.__module__)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "False", "True", "accounting.errors"], done.stderr


def test_the_option_help_names_the_variable_the_peak_lookup_reads(monkeypatch):
    """options.py names $ACCOUNTING_PEAK_TFLOPS from hardware.environment (no torch): the variable peaks reads."""
    monkeypatch.setenv(options.PEAK_TFLOPS_ENV, "2.5")
    assert peaks.peak_override_tflops() == 2.5


def test_a_deferred_module_is_imported_by_its_first_public_name_only(tmp_path, monkeypatch):
    (tmp_path / "deferred_probe_module.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(tmp_path)
    monkeypatch.delitem(sys.modules, "deferred_probe_module", raising=False)
    deferred = plugin.DeferredModule("deferred_probe_module")
    for probe in ("_mock_name", "__wrapped__"):  # what pytest and inspect read from every name of a plugin
        with pytest.raises(AttributeError, match=rf"^<deferred module deferred_probe_module> gives public names "
                                                 rf"only, not '{probe}'$"):
            getattr(deferred, probe)
    assert "deferred_probe_module" not in sys.modules
    assert deferred.VALUE == 42
    assert sys.modules["deferred_probe_module"].VALUE == 42
