"""What users had before the package was split into layers still works: their benchmark files and saved runs.

``tests/data/saved-before-layering/`` holds three runs saved by ``accounting gate save --runs 3 --threads 1 --
tests/test_bench_matmul.py -k "test_cpu_matmul and float32" --matmul-shapes=quick`` with the code of commit
138f87f, the last before the split (an AMD EPYC KVM guest, 2 cores): the benchmark's node id was then
``tests/test_bench_matmul.py::test_cpu_matmul[...]``; it is ``tests/benchmarks/test_matmul.py::...`` now.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from accounting.__main__ import main
from accounting.bench.identity import IDENTITY_FIELDS_CPU, IDENTITY_FIELDS_GPU, MACHINE_INFO_KEY
from accounting.gate.storage import GUARD_KEY, machine_id

ROOT = Path(__file__).resolve().parents[1]
SAVED_BEFORE = Path(__file__).resolve().parent / "data" / "saved-before-layering"
BENCHMARK = "test_cpu_matmul[float32-1024x1024x1024]"

USER_FILE = '''
import pytest
import torch

from accounting import matmul_flops


@pytest.mark.cpu
def test_my_kernel(flops_benchmark):
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    result = flops_benchmark(lambda: a @ b, flops=matmul_flops((256, 256), (256, 256)), dtype="float32",
                             device="cpu")
    assert result.mfu is None or result.mfu > 0
'''
"""A benchmark file as the README before the split taught it (the CPU form of its ``test_my_kernel``)."""


def _pytest(*args, cwd: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # as the saved runs were
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd,
                          env=environment, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def todays_run(tmp_path_factory) -> Path:
    """The same benchmark run by today's code, saved as the gate reads a current run."""
    path = tmp_path_factory.mktemp("today") / "now.json"
    done = _pytest("tests/benchmarks/test_matmul.py", "-k", "test_cpu_matmul and float32", "--matmul-shapes=quick",
                   "--benchmark-save-data", f"--benchmark-json={path}", cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return path


def _saved_runs() -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(SAVED_BEFORE.glob("*.json"))]


def test_the_saved_runs_are_from_before_the_split():
    """The fixture data itself: three runs, under the old node id, as the old gate saved them."""
    runs = _saved_runs()
    assert len(runs) == 3
    assert {bench["fullname"] for run in runs for bench in run["benchmarks"]} == {
        f"tests/test_bench_matmul.py::{BENCHMARK}"}
    assert all(GUARD_KEY in run for run in runs)


@pytest.mark.slow  # starts pytest processes
def test_a_history_saved_before_the_split_is_compared_with_todays_run(todays_run, tmp_path, capsys):
    """``gate compare`` pairs today's run with all three saved runs, though their node ids differ.

    The saved runs came from one machine and this one may have another CPU: their hardware identity is set
    to this run's (only those fields: the machine's identity and the device each benchmark names in its work),
    so that what is tested is their node ids and layout, not the host.
    """
    today_run = json.loads(todays_run.read_text())
    today = today_run["machine_info"][MACHINE_INFO_KEY]
    (today_benchmark,) = today_run["benchmarks"]
    storage = tmp_path / "storage" / machine_id()
    storage.mkdir(parents=True)
    for path in sorted(SAVED_BEFORE.glob("*.json")):
        run = json.loads(path.read_text())
        for field in (*IDENTITY_FIELDS_CPU, *IDENTITY_FIELDS_GPU):
            run["machine_info"][MACHINE_INFO_KEY][field] = today.get(field)
        for benchmark in run["benchmarks"]:
            benchmark["extra_info"]["device"] = today_benchmark["extra_info"]["device"]
        (storage / path.name).write_text(json.dumps(run))
    status = main(["gate", "compare", "--storage", str(storage.parent), "--no-load-guard", str(todays_run)])
    out = capsys.readouterr().out
    assert status in (0, 1), out  # no change, or a slower host: either way the runs were compared
    assert re.search(rf"{re.escape(BENCHMARK)}\s+[0-9.]+ ms \(3 runs\)\s+[0-9.]+ ms \(1 run\)", out), out


ADDED_EXTRA_INFO = {"peak_memory_bytes", "result_check"}
"""``extra_info`` fields saved runs gained since the runs in tests/data/saved-before-layering: the benchmark's peak
memory (gated exactly) and its product's check. Readers of older runs find them missing, never renamed."""


@pytest.mark.slow  # starts pytest processes
def test_todays_saved_run_keeps_the_fields_runs_had_before(todays_run):
    """Saved-run JSON: the same top-level keys and machine identity fields, every ``extra_info`` field runs had (and only
    the named additions)."""
    before = _saved_runs()[0]
    today = json.loads(todays_run.read_text())
    assert set(today) == set(before) - {GUARD_KEY}  # the gate adds its guard when it saves a run itself
    assert set(today["machine_info"][MACHINE_INFO_KEY]) == set(before["machine_info"][MACHINE_INFO_KEY])
    added = set(today["benchmarks"][0]["extra_info"]) - set(before["benchmarks"][0]["extra_info"])
    assert set(before["benchmarks"][0]["extra_info"]) <= set(today["benchmarks"][0]["extra_info"]), "a field was lost"
    assert added <= ADDED_EXTRA_INFO, f"new extra_info fields {added - ADDED_EXTRA_INFO}: add them to ADDED_EXTRA_INFO"
    assert set(today["benchmarks"][0]["stats"]) == set(before["benchmarks"][0]["stats"])


@pytest.mark.slow  # starts pytest processes
def test_a_users_benchmark_file_from_before_runs_unchanged(tmp_path):
    """The plugin still loads by its entry point, with its marker, fixture, option and JSON fields."""
    (tmp_path / "test_user.py").write_text(USER_FILE)
    shutil.copy(ROOT / "benchmarks.json", tmp_path / "benchmarks.json")
    done = _pytest("-m", "cpu", "--peak-tflops", "2.0", "--benchmark-json=out.json", "test_user.py", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    extra = json.loads((tmp_path / "out.json").read_text())["benchmarks"][0]["extra_info"]
    assert extra["flops"] == 2 * 256**3
    assert extra["peak_tflops"] == 2.0
    assert extra["mfu"] == pytest.approx(extra["achieved_tflops"] / 2.0)
