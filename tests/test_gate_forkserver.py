"""The gate's fork server: each run a new process that sees what ``python -m pytest`` in a new interpreter sees."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from accounting.gate import forkserver
from accounting.gate.forkserver import ForkServer, ForkServerError
from accounting.gate.measure import Runner

pytestmark = [pytest.mark.skipif(not forkserver.FORK_AVAILABLE, reason="no os.fork on this platform"),
              pytest.mark.slow]  # each test starts a fork server or pytest as processes of their own

# A test module that writes what its process sees: pid, working directory, the first import path,
# an environment variable, which tree's `treemark` it imported, and whether torch was imported before it ran.
PROBE = textwrap.dedent('''\
    import json, os, sys

    def test_probe():
        import treemark
        seen = {"pid": os.getpid(), "cwd": os.getcwd(), "path0": sys.path[0], "extra": os.environ.get("PROBE_EXTRA"),
                "tree": treemark.TREE, "threads": os.environ.get("OMP_NUM_THREADS")}
        with open(os.environ["PROBE_OUT"], "a") as out:
            out.write(json.dumps(seen) + "\\n")
        assert os.environ.get("PROBE_FAIL") != "1"
''')


@pytest.fixture
def project(tmp_path):
    """A folder with the probe module, and two trees whose `treemark` modules differ (an A and a B)."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    trees = {}
    for name in ("a", "b"):
        tree = tmp_path / f"tree_{name}"
        tree.mkdir()
        (tree / "treemark.py").write_text(f"TREE = {name!r}\n")
        trees[name] = str(tree)
    return tmp_path, trees


ARGS = ["-q", "-p", "no:cacheprovider", "-p", "no:accounting", "test_probe.py"]
"""The project's own plugin is left out: it imports torch, which these runs do not need (a second each)."""


def _env(tree, out, threads="1"):
    return {**os.environ, "PYTHONPATH": tree, "PROBE_OUT": str(out), "OMP_NUM_THREADS": threads}


def _seen(out):
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_a_fork_sees_what_a_new_interpreter_sees(project):
    folder, trees = project
    out = folder / "seen.jsonl"
    fresh = subprocess.run([sys.executable, "-m", "pytest", *ARGS], cwd=folder, env=_env(trees["a"], out),
                           capture_output=True, text=True)
    assert fresh.returncode == 0, fresh.stdout
    server = ForkServer(sys.executable, env=_env(trees["a"], out), preload=("pytest",))
    try:
        forked = server.run(ARGS, cwd=str(folder), env={}, log=str(folder / "run.log"))
        again = server.run(ARGS, cwd=str(folder), env={}, log=str(folder / "again.log"))
    finally:
        server.close()
    assert (forked.returncode, again.returncode) == (0, 0) and forked.cpu_s > 0
    reference, first, second = _seen(out)
    for key in ("cwd", "path0", "extra", "tree", "threads"):
        assert first[key] == second[key] == reference[key], key
    assert len({reference["pid"], first["pid"], second["pid"]}) == 3  # every run its own process
    assert "1 passed" in (folder / "run.log").read_text()


def test_each_tree_imports_its_own_code_and_extras_do_not_leak(project):
    folder, trees = project
    out = folder / "seen.jsonl"
    servers = {name: ForkServer(sys.executable, env=_env(tree, out), preload=()) for name, tree in trees.items()}
    try:
        codes = [servers["a"].run(ARGS, cwd=str(folder), env={"PROBE_EXTRA": "only this run"}, log=os.devnull),
                 servers["b"].run(ARGS, cwd=str(folder), env={}, log=os.devnull),
                 servers["a"].run(ARGS, cwd=str(folder), env={}, log=os.devnull)]
    finally:
        for server in servers.values():
            server.close()
    assert [code.returncode for code in codes] == [0, 0, 0]
    assert [(seen["tree"], seen["extra"]) for seen in _seen(out)] == [("a", "only this run"), ("b", None), ("a", None)]


def test_a_failing_run_reports_pytests_exit_status(project):
    folder, trees = project
    server = ForkServer(sys.executable, env=_env(trees["a"], folder / "seen.jsonl"), preload=())
    try:
        failed = server.run(ARGS, cwd=str(folder), env={"PROBE_FAIL": "1"}, log=str(folder / "failed.log"))
        passed = server.run(ARGS, cwd=str(folder), env={}, log=os.devnull)
    finally:
        server.close()
    assert (failed.returncode, passed.returncode) == (1, 0)
    assert "1 failed" in (folder / "failed.log").read_text()


def test_a_server_that_cannot_start_says_so():
    server = ForkServer(sys.executable, env=dict(os.environ), preload=("no_such_module_anywhere",))
    with pytest.raises(ForkServerError, match=r"the fork server stopped \(exit status 1\)"):
        server.wait_ready()
    server.close()


def test_the_runner_falls_back_to_new_interpreters_and_says_why(project, monkeypatch):
    folder, trees = project
    out = folder / "seen.jsonl"
    monkeypatch.setattr(forkserver, "PRELOAD", ("no_such_module_anywhere",))
    runner = Runner(ARGS, cwd=str(folder), workdir=str(folder / "work"), fork_server=True,
                    env={"PYTHONPATH": trees["b"], "PROBE_OUT": str(out)})
    measured = runner.run("r1")  # the probe runs no benchmark: nothing to compare
    runner.close()
    assert measured.path is None and measured.returncode == 0
    assert [seen["tree"] for seen in _seen(out)] == ["b"]  # it ran anyway, in a new interpreter
    assert any(note.startswith("fork server unavailable (the fork server stopped") for note in runner.notes)
    assert runner.fork_server is False
