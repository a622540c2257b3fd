"""The plugin as another project gets it: loaded through its entry point in a pytest process of that project's own.

Its benchmark's FLOPs reach the saved JSON, a doctored baseline is refused, and the documented CI command passes on
a fresh cache, saying nothing was compared.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from accounting.bench.identity import accounting_machine_info
from tests.test_bench_identity import H100

pytestmark = pytest.mark.slow  # each test starts pytest processes of its own


PROJECT_TEST = textwrap.dedent("""
    import pytest, torch

    def test_my_kernel(flops_benchmark):
        a = torch.ones(128, 128)
        result = flops_benchmark(lambda: a @ a, flops=2 * 128**3, dtype="float32", rounds=3)
        assert result.mfu > 0

    @pytest.mark.gpu
    def test_on_gpu():
        pass
""")


FAKE_A100_CONFTEST = textwrap.dedent("""
    from accounting.bench import identity

    _real = identity.accounting_machine_info

    def _a100(device=None):
        return {**_real(), "accelerator": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0",
                "sm_count": 108, "gpu_memory_bytes": 85_000_000_000}

    identity.accounting_machine_info = _a100
""")


def _pytest(project, *args):
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("ACCOUNTING_PEAK_TFLOPS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--benchmark-storage",
         f"file://{project / 'store'}", *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=120,
    )


def test_an_installed_project_gets_flops_in_its_json_and_a_doctored_baseline_is_refused(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    error\n")
    (tmp_path / "test_project.py").write_text(PROJECT_TEST)

    saved = _pytest(tmp_path, "--benchmark-autosave")
    assert saved.returncode == 0, saved.stdout + saved.stderr
    assert "no CUDA device" in saved.stdout or torch.cuda.is_available()
    (baseline,) = (tmp_path / "store").glob("*/0001_*.json")
    data = json.loads(baseline.read_text())
    extra = data["benchmarks"][0]["extra_info"]
    assert extra["flops"] == 2 * 128**3 and extra["dtype"] == "float32" and 0 < extra["mfu"] <= 1.05
    assert data["machine_info"]["accounting"]["cpu_cores"] >= 1

    same = _pytest(tmp_path, "--benchmark-compare=0001")
    assert same.returncode == 0, same.stdout + same.stderr

    # The baseline says H100 on a 26-core Xeon; this run (made to look like an A100 box) must refuse to
    # compare. Its benchmark runs on the CPU, so the CPU is what differs and what the error names.
    doctored = json.loads(baseline.read_text())
    doctored["machine_info"]["accounting"].update(H100)
    (baseline.parent / baseline.name.replace("0001_", "0002_")).write_text(json.dumps(doctored))
    (tmp_path / "conftest.py").write_text(FAKE_A100_CONFTEST)
    refused = _pytest(tmp_path, "--benchmark-compare=0002")
    assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stdout + refused.stderr
    here = accounting_machine_info("cpu")
    threads = doctored["machine_info"]["accounting"]["cpu_threads"]
    assert threads == here["cpu_threads"] == torch.get_num_threads()
    assert (f"ERROR: --benchmark-compare: the baseline was recorded on CPU Xeon (26 cores, {threads} threads) but this "
            f"run is on CPU {here['cpu_model']} ({here['cpu_cores']} cores, {threads} threads)") in refused.stderr


def test_the_documented_ci_command_on_a_fresh_cache_passes_and_says_nothing_was_compared(tmp_path):
    """README's CI command with an empty --benchmark-storage: no baseline is not an error (exit 0, not 4)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    error\n"
                                         "    default:Can't compare. No benchmark files:pytest_benchmark.logger.PytestBenchmarkWarning\n")
    (tmp_path / "test_project.py").write_text(PROJECT_TEST)
    first = _pytest(tmp_path, "--benchmark-compare", "--benchmark-compare-fail=median:10%")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "--benchmark-compare found no saved baseline" in first.stdout
    assert "--benchmark-compare-fail was not applied" in first.stdout
    # A named baseline that does not exist is a wrong name, not a fresh cache: pytest-benchmark's error stands.
    named = _pytest(tmp_path, "--benchmark-compare=0042", "--benchmark-compare-fail=median:10%")
    assert named.returncode == pytest.ExitCode.USAGE_ERROR, named.stdout + named.stderr
