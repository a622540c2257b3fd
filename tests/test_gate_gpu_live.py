"""The gate on a live GPU: the unchanged tree passes with every benchmark judged, 10 % more work is convicted.

Runs only where asked (``GATE_LIVE_GPU=1``) on a machine with CUDA; it is not a ``gpu``-marked test, so the
acceptance run's ``pytest -m gpu`` step does not spend its budget on it. On a lent GPU, in one call:
``GATE_LIVE_GPU=1 python -m pytest -p no:cacheprovider tests/test_gate_gpu_live.py -s`` (about 15 pytest processes
of a bf16 and an fp16 8192³ product, 20 rounds each: a few minutes). It runs the real commands, ``accounting gate
save --runs 5`` then ``check --min-runs 5`` (5 against 5 runs: the fewest that reach Holm's
0.01 / 2, so each *no change* says what it could have seen) at a 5 % threshold (a 10 % slowdown is convicted when
the ratio's interval clears the threshold: at a 10 % threshold it would be only about 1 time in 20), over a benchmark module written for the test whose bf16 product can be made to
do 10 % more work (a 10 % longer inner dimension) while it records the same FLOPs and shape, as a slower code
path would. The truths: the exit statuses and the JSON verdicts of the gate itself; the figures it prints go into
docs/benchmarks-and-gate.md with the device, driver and torch version.
"""

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not os.environ.get("GATE_LIVE_GPU"),
                                                    reason="the live GPU gate check runs only with GATE_LIVE_GPU=1")]

MODULE = textwrap.dedent('''
    import os

    import pytest
    import torch

    EXTRA_WORK = float(os.environ.get("GATE_EXTRA_WORK", "0"))
    N = 8192


    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
    def test_product(flops_benchmark, dtype):
        inner = N + (round(N * EXTRA_WORK / 64) * 64 if dtype is torch.bfloat16 else 0)  # 10 %: 9024 (+10.2 %)
        a = torch.randn(N, inner, device="cuda", dtype=dtype)
        b = torch.randn(inner, N, device="cuda", dtype=dtype)
        flops_benchmark(lambda: a @ b, flops=2 * N**3, dtype=dtype, device="cuda", shape=(N, N, N), rounds=20,
                        operands=(a, b))
''')
PLUGIN = "accounting.bench.plugin"
REGISTERED = any(entry.value.split(":")[0] == PLUGIN for entry in entry_points(group="pytest11"))
"""An installed package registers the plugin itself; a bare checkout (as on the recorded H200) names it with -p."""
ARGS = ["--", *([] if REGISTERED else ["-p", PLUGIN]), "-p", "no:cacheprovider", "test_live_product.py"]


def _gate(folder, *command, extra_work=0.0):
    env = dict(os.environ, GATE_EXTRA_WORK=str(extra_work))
    process = subprocess.run([sys.executable, "-m", "accounting", "gate", *command], cwd=folder, env=env,
                             capture_output=True, text=True, timeout=540)
    print(process.stdout, process.stderr)
    return process


def test_the_gate_passes_the_unchanged_tree_and_convicts_ten_percent_more_work(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    (tmp_path / "test_live_product.py").write_text(MODULE)
    storage = str(tmp_path / "storage")
    saved = _gate(tmp_path, "save", "--storage", storage, "--runs", "5", *ARGS)
    assert saved.returncode == 0, saved.stderr
    assert "disturbed" not in saved.stderr  # neither the idle clock before a run nor the power cap disturbs it
    unchanged = _gate(tmp_path, "check", "--storage", storage, "--baselines", "5", "--min-runs", "5", "--threshold", "0.05",
                      "--json", str(tmp_path / "unchanged.json"), *ARGS)
    assert unchanged.returncode == 0, unchanged.stdout
    verdict = json.loads((tmp_path / "unchanged.json").read_text())
    for row in verdict["benchmarks"]:
        assert row["decision"] == "no change", row
        assert row["detectable_ratio"] is not None and row["detectable_ratio"] <= 1.05, row
    slower = _gate(tmp_path, "check", "--storage", storage, "--baselines", "5", "--min-runs", "5", "--threshold", "0.05",
                   "--json", str(tmp_path / "slower.json"), *ARGS, extra_work=0.10)
    assert slower.returncode == 1, slower.stdout
    decisions = {row["name"].split("[")[1].split("]")[0]: row["decision"]
                 for row in json.loads((tmp_path / "slower.json").read_text())["benchmarks"]}
    assert decisions["bfloat16"] == "regression" and decisions["float16"] != "regression"
