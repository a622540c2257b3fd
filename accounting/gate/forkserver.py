"""A fork server for the gate's pytest processes: torch imported once, each run a fresh fork of it.

Every run of the gate is a new pytest process, so that each run draws its own thread
placement, host clock and neighbours (the noise the gate must see; :mod:`accounting.gate.stats`).
Most of such a process's life is spent before the first benchmark, importing torch and
the project: seconds, on a small machine about half of a one-benchmark run (measured
figures: docs/benchmarks-and-gate.md, "Interleaved A/B"). A
:class:`ForkServer` is a Python process that imports the heavy third-party modules
(:data:`PRELOAD`) once and then forks one child per run; the child sets its working
directory, its environment and ``sys.path`` as ``python -m pytest`` would have them, runs
``pytest.main`` and exits. The child is still a new process with new threads (torch's
thread pools start at the first operation, never in the server), and both sides of an A/B
job are forked alike, so what changes is only the time a job takes.

The server never imports ``accounting``: in ``gate ab`` the A and B trees each import their
own. It is this file run by path (``python .../forkserver.py torch``), which therefore
imports nothing outside the standard library at its top. Requests and replies are JSON lines
on the server's stdin and on a copy of its stdout (anything else the server or its imports
print goes to stderr). Where ``os.fork`` does not exist (Windows) there is no server and the
gate starts fresh interpreters, as it does with ``--fresh-interpreters``.

>>> import sys
>>> server = ForkServer(sys.executable, preload=())
>>> server.run(["--version"], cwd=".", env={}, log=os.devnull).returncode
0
>>> server.close()
"""

import json
import os
import subprocess
import sys
from dataclasses import dataclass

PRELOAD = ("torch", "numpy", "pytest")
"""Imported once by the server: the bulk of a run's start-up, and the same for A and B (not their plugins:
pytest cannot rewrite the asserts of a plugin imported before it starts, and warns)."""
FORK_AVAILABLE = hasattr(os, "fork")


class ForkServerError(RuntimeError):
    """The server could not start, or stopped answering."""


@dataclass(frozen=True)
class ChildRun:
    """One forked pytest run: its exit status and the CPU seconds it used (user + system)."""

    returncode: int
    cpu_s: float


class ForkServer:
    """The client side: starts the server (:func:`serve`) with ``env`` and sends it runs.

    ``env`` is the server's whole environment, and through it every child's: thread counts
    (``OMP_NUM_THREADS``) must be set here, since the preloaded libraries read them as they load.
    ``stderr``: where the server's own output goes (a file object, or ``None`` to discard it).
    """

    def __init__(self, python: str, *, env: dict | None = None, preload=PRELOAD, stderr=None):
        try:
            self._process = subprocess.Popen([python, os.path.abspath(__file__), *preload], stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=stderr or subprocess.DEVNULL, env=env,
                                             text=True)
        except OSError as error:
            raise ForkServerError(f"cannot start the fork server ({python}): {error.strerror or error}") from None
        self._ready = False

    def _reply(self) -> dict:
        line = self._process.stdout.readline()
        if not line:
            code = self._process.wait()
            raise ForkServerError(f"the fork server stopped (exit status {code})")
        return json.loads(line)

    def wait_ready(self) -> None:
        """Wait until the server has imported its modules (the first run waits for it anyway)."""
        if not self._ready:
            self._reply()  # the "ready" line
            self._ready = True

    def run(self, args, *, cwd: str, env: dict, log: str) -> ChildRun:
        """``pytest.main(args)`` in a fork, in ``cwd``, with ``env`` added, its output written to ``log``."""
        self.wait_ready()
        request = {"args": list(args), "cwd": os.path.abspath(cwd), "env": dict(env), "log": os.path.abspath(log)}
        try:
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
        except OSError:
            raise ForkServerError(f"the fork server stopped (exit status {self._process.wait()})") from None
        reply = self._reply()
        return ChildRun(int(reply["returncode"]), float(reply["cpu_s"]))

    def close(self) -> None:
        """End the server (it also ends by itself when this process's end of its stdin closes)."""
        try:
            self._process.stdin.close()
        except OSError:  # a server that died leaves a broken pipe behind
            pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process.stdout.close()


def _child(request: dict) -> None:
    """In the fork: become ``python -m pytest <args>`` run in ``cwd``; never returns."""
    code = 4  # pytest's "usage error", should anything below fail before pytest runs
    try:
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # the server's stdin carries requests: the child must not read them
        os.close(null)
        os.chdir(request["cwd"])
        os.environ.update(request["env"])
        sys.path.insert(0, request["cwd"])  # python -m puts the working directory first
        for entry in reversed([part for part in os.environ.get("PYTHONPATH", "").split(os.pathsep) if part]):
            if entry not in sys.path:
                sys.path.insert(1, entry)
        import pytest  # deferred: the server imports only torch before it forks, each fork imports pytest anew

        code = int(pytest.main(request["args"]))
    except BaseException:  # noqa: B036 - the fork must report and exit, whatever happened
        import traceback  # deferred: needed only when a fork fails

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(preload) -> None:
    """The server's loop: import ``preload``, say ready, then fork a child per request line, reply when it ends."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what the imports print goes to stderr, never into the replies
    for name in preload:
        __import__(name)
    replies.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        _, status, usage = os.wait4(pid, 0)
        replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status),
                                  "cpu_s": usage.ru_utime + usage.ru_stime}) + "\n")


if __name__ == "__main__":
    del sys.path[0]  # this file's folder, accounting/gate: none of its modules may shadow an import
    serve(sys.argv[1:])
