"""Running the benchmarks: each run a fresh pytest process, with the load guard's readings around it.

The gate never times anything itself: it starts ``python -m pytest <your arguments>
--benchmark-save-data --benchmark-json=<file>`` (adding ``--benchmark-storage``/
``--benchmark-autosave`` when saving a baseline), reads the device before and after
(:func:`accounting.gate.guard.read`), and writes those readings into the saved run under
``"accounting_gate"`` — with the process's duration, the gate's own share of the load
average (:func:`accounting.gate.guard.own_load`), and the CPU time the whole machine and
the gate's own processes spent during the run (:func:`host_cpu_record`), so the guard can
tell the gate's own work from a neighbour's.

``threads`` pins the benchmarks' CPU threads (``OMP_NUM_THREADS``/``MKL_NUM_THREADS``,
which torch's intra-op pool follows): on a small shared VM a multi-threaded matmul waits
for its slowest vCPU, and which vCPU is slow changes from one process to the next (see
:mod:`accounting.gate.stats`). The count is part of the hardware identity the plugin
records (``cpu_threads``), so runs with other counts are never compared.

Re-measuring suspects runs the same arguments with ``-p accounting.gate._select``, which
collects and keeps only the listed node ids (each runner lists them as its own tree named them:
:attr:`Runner.node_ids`), not the whole suite.

A run in which no benchmark ran (``-m gpu`` on a machine without CUDA: every test skipped) is
no error: its :attr:`Measured.path` is ``None`` and the gate says there was nothing to compare.

``fork_server=True`` (``gate ab``'s default) runs each pytest process as a fork of a
:class:`accounting.gate.forkserver.ForkServer` that has imported torch once, instead of a new
interpreter: the same process per run, seconds sooner (the imports are done once). Its CPU time
then comes from the server (the forks are not this process's children), so the load guard still
tells the gate's own work from a neighbour's.
"""

import contextlib
import json
import os
import resource
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from accounting.errors import AccountingError
from accounting.gate import forkserver, guard
from accounting.gate._select import ONLY_ENV
from accounting.gate.device_events import XIDS_KEY, watch_xids
from accounting.gate.forkserver import ForkServer, ForkServerError
from accounting.gate.storage import GUARD_KEY, current_name, run_files
from accounting.telemetry.sampler import host_cpu_times

PYTEST_OK = (0, 1)
"""pytest's exit statuses after which the benchmarks that ran are usable: all passed, some tests failed."""
NO_TESTS = 5
"""pytest's exit status when nothing was collected (or everything was deselected)."""
NOTHING_RUN_FILTER = "ignore:Not saving anything, no benchmarks have been run:pytest_benchmark.logger.PytestBenchmarkWarning"
"""A ``-W`` filter for pytest-benchmark's warning when no benchmark ran: under a suite's ``filterwarnings = error``
that warning fails the whole process (this project's own ``-m gpu`` on a CPU machine exited 1 with no results)."""


@dataclass(frozen=True)
class Measured:
    """One pytest process the gate ran."""

    path: str | None
    """The run's JSON (in the storage when saved, else the ``--benchmark-json`` file); ``None``: no benchmark ran."""
    returncode: int
    duration_s: float
    summary: str
    """pytest's last line ("3 passed in 12.1s")."""


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""Set to ``threads`` for every pytest process when the runner pins a thread count."""


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _own_cpu_s() -> float:
    """CPU seconds of this process and its finished children: the gate's own work."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime + _children_cpu_s()


def host_cpu_record(before, after, own_s: float, wall_s: float) -> dict | None:
    """The machine's CPU time during a run (two :func:`accounting.telemetry.host_cpu_times` readings).

    ``own_s``: the gate's own CPU seconds in between (its pytest process included).
    ``None`` where either reading is missing.

    >>> from accounting.telemetry.cpu import HostCpuTimes
    >>> host_cpu_record(HostCpuTimes(100.0, 5.0, 2), HostCpuTimes(121.0, 5.5, 2), own_s=19.5, wall_s=10.0)
    {'busy_s': 21.0, 'steal_s': 0.5, 'own_s': 19.5, 'wall_s': 10.0, 'cpus': 2}
    """
    if before is None or after is None:
        return None
    return {"busy_s": round(after.busy_s - before.busy_s, 3), "steal_s": round(after.steal_s - before.steal_s, 3),
            "own_s": round(own_s, 3), "wall_s": round(wall_s, 3), "cpus": after.cpus}


@dataclass
class Runner:
    """Starts pytest processes with ``pytest_args`` in ``cwd``, reading ``device`` around each.

    ``reader(device)`` is the telemetry reading (a dict, or ``None``); ``notes`` collects
    what the summary should say about the runs (a missing guard reading, a failed test).
    """

    pytest_args: list
    device: str = "cpu"
    cwd: str | None = None
    workdir: str = "."
    reader: object = guard.read
    events: object = watch_xids
    """Starts watching the device's fault events for one run, or gives ``None`` (:func:`accounting.gate.device_events.
    watch_xids`: Xids on NVIDIA GPUs; tests replace it)."""
    cpu_times: object = host_cpu_times
    """Reads the machine's CPU time (:func:`accounting.telemetry.host_cpu_times`; tests replace it)."""
    threads: int | None = None
    """CPU threads of the benchmarks (``None``: torch's default, one per core)."""
    python: str = sys.executable
    env: dict = field(default_factory=dict)
    """Variables added to the environment of every pytest process."""
    own_runs: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    fork_server: bool = False
    """Fork each run from a server that imported torch once (module docstring); ignored where there is no fork."""
    node_ids: dict = field(default_factory=dict)
    """Benchmark name as the gate knows it (:func:`accounting.gate.storage.current_name`) -> the node id this
    runner's tree gave it (pytest-benchmark's ``fullname``), learnt from each run; ``only=`` lists are sent as these."""
    _server: ForkServer | None = field(default=None, init=False, repr=False)

    def _environment(self) -> dict:
        env = {**os.environ, **self.env}
        if self.threads is not None:
            env.update({variable: str(self.threads) for variable in THREAD_VARIABLES})
        return env

    def start(self) -> "Runner":
        """Start the fork server now (it imports in the background while other work goes on); else nothing."""
        if self.fork_server and forkserver.FORK_AVAILABLE and self._server is None:
            Path(self.workdir).mkdir(parents=True, exist_ok=True)
            try:
                with open(Path(self.workdir) / "forkserver.log", "a", encoding="utf8") as log:
                    self._server = ForkServer(self.python, env=self._environment(), preload=forkserver.PRELOAD,
                                              stderr=log)
            except ForkServerError as error:
                self._give_up_server(error)
        return self

    def wait_ready(self) -> None:
        """Start the fork server if it is not, and wait until it has imported (nothing without a server).

        With several runners, :func:`servers_ready` does this for all of them before the first run."""
        self.start()
        if self._server is not None:
            try:
                self._server.wait_ready()
            except ForkServerError as error:
                self._give_up_server(error)

    def _give_up_server(self, error) -> None:
        self.close()
        self.fork_server = False
        self.notes.append(f"fork server unavailable ({error}); the remaining runs start new interpreters")

    def close(self) -> None:
        """End the fork server, if one was started."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def _read(self):
        try:
            return self.reader(self.device)
        except ImportError as error:
            note = f"load guard unavailable (no device readings: {error}); runs are not checked for load"
            if note not in self.notes:
                self.notes.append(note)
            return None

    def run(self, name: str, *, only=None, storage: str | None = None) -> Measured:
        """One pytest process; ``only``: node ids to keep; ``storage``: save it there as a baseline run."""
        workdir = Path(self.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        output = workdir / f"{name}.json"
        pytest_args = [*self.pytest_args, "--benchmark-save-data", f"--benchmark-json={output}", "-W",
                       NOTHING_RUN_FILTER]
        env, extra_env = self._environment(), {}
        if only is not None:
            listing = workdir / f"{name}.only"
            listing.write_text("\n".join(self.node_ids.get(benchmark, benchmark) for benchmark in only) + "\n")
            pytest_args += ["-p", "accounting.gate._select"]
            extra_env[ONLY_ENV] = str(listing)
        before_files = set()
        if storage is not None:
            pytest_args += [f"--benchmark-storage={storage}", "--benchmark-autosave"]
            before_files = set(run_files(storage))
        before = self._read()
        own_before = guard.own_load(self.own_runs, guard.now())
        host_before, own_cpu_before = self.cpu_times(), _own_cpu_s()
        log = workdir / f"{name}.log"
        self.wait_ready()  # before the clock starts: a run's time is pytest's, not the server's imports
        watch = self.events(self.device)
        started, cpu_started = guard.now(), _children_cpu_s()
        try:
            returncode, stdout, child_cpu = self._launch(pytest_args, {**env, **extra_env}, extra_env, log)
        finally:
            xids = watch.stop() if watch is not None else None
        ended = guard.now()
        forks_cpu = child_cpu if child_cpu is not None else 0.0  # the server's forks are not this process's children
        host = host_cpu_record(host_before, self.cpu_times(), _own_cpu_s() - own_cpu_before + forks_cpu,
                               ended - started)
        duration = ended - started
        run_cpu = child_cpu if child_cpu is not None else _children_cpu_s() - cpu_started
        busy = run_cpu / duration if duration > 0 else 0.0
        self.own_runs.append(guard.OwnRun(ended, duration, busy))
        after = self._read()
        own_after = guard.own_load(self.own_runs, guard.now())
        lines = [line for line in stdout.splitlines() if line.strip()]
        summary = lines[-1].strip("= ") if lines else ""
        saved_nothing = storage is None or not set(run_files(storage)) - before_files
        if returncode in (0, NO_TESTS) and not output.is_file() and saved_nothing:
            return Measured(None, returncode, duration, summary)  # no benchmark ran, none failed: nothing to compare
        if returncode not in PYTEST_OK or not output.is_file():
            raise AccountingError(f"pytest exited {returncode} without benchmark results: {summary!r} (the "
                                  f"command: {' '.join(self._command(pytest_args))}; its output: {log})")
        if returncode == 1:
            self.notes.append(f"{name}: some tests failed ({summary}); their benchmarks are not in the run")
        record = {"before": before, "after": after, "own_before": own_before, "own_after": own_after,
                  "duration_s": duration, "busy_threads": busy, "device": self.device, "host_cpu": host,
                  "threads": self.threads, XIDS_KEY: xids}
        _add_guard(output, record)
        self._learn_node_ids(output)
        path = output
        if storage is not None:
            created = sorted(set(run_files(storage)) - before_files)
            if len(created) != 1:
                raise AccountingError(f"{name}: expected pytest-benchmark to save one run in {storage}, found "
                                      f"{len(created)}")
            path = created[0]
            _add_guard(path, record)
        return Measured(str(path), returncode, duration, summary)

    def _learn_node_ids(self, output: Path) -> None:
        """Remember the node id of every benchmark in this run, by the name the gate gives it."""
        try:
            benchmarks = json.loads(output.read_text(encoding="utf8")).get("benchmarks", [])
        except (OSError, ValueError, AttributeError):
            return  # the gate's reading of the run (storage.load_run) names the problem
        for bench in benchmarks:
            fullname = bench.get("fullname") if isinstance(bench, dict) else None
            if isinstance(fullname, str):
                self.node_ids[current_name(fullname)] = fullname

    def _command(self, pytest_args) -> list[str]:
        """The new-interpreter command line for ``pytest_args`` (also what an error shows for a fork)."""
        return [self.python, "-m", "pytest", *pytest_args]

    def _launch(self, pytest_args, env, extra_env, log: Path) -> tuple[int, str, float | None]:
        """Run pytest: a fork of the server, else a new interpreter; (exit status, output, the fork's CPU s or None).

        ``env``: a new interpreter's whole environment; ``extra_env``: what a fork adds to the server's.
        """
        if self._server is not None:
            try:
                child = self._server.run(pytest_args, cwd=self.cwd or os.getcwd(), env=extra_env, log=str(log))
                return child.returncode, log.read_text(encoding="utf8", errors="replace"), child.cpu_s
            except ForkServerError as error:
                self._give_up_server(error)
        command = self._command(pytest_args)
        try:
            process = subprocess.run(command, cwd=self.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        except OSError as error:
            raise AccountingError(f"cannot start pytest ({command[0]}): {error.strerror or error}") from None
        log.write_text(process.stdout)
        return process.returncode, process.stdout, None


@contextlib.contextmanager
def servers_ready(*runners):
    """Start every runner's fork server, wait until all have imported, yield, then end them all.

    All before the first run: a server still importing torch is a neighbour to another runner's
    run (in ``gate ab`` the load guard set aside every first A run while B's server imported).
    """
    try:
        for runner in runners:
            runner.start()  # side by side
        for runner in runners:
            runner.wait_ready()
        yield runners
    finally:
        for runner in runners:
            runner.close()


def _add_guard(path: Path, record: dict) -> None:
    """Write the guard's readings into a saved run, keeping pytest-benchmark's layout (indent 4)."""
    data = json.loads(Path(path).read_text(encoding="utf8"))
    data[GUARD_KEY] = record
    Path(path).write_text(json.dumps(data, indent=4), encoding="utf8")
