"""The load guard's CPU-time rule and the gate's pinned thread count.

The truths: the kernel's own accounting of this process (``resource.getrusage``) against
``/proc/stat``; a real pytest process started with ``--threads``, whose torch reports the
count it was given.
"""

import json
import os
import resource
import textwrap
import time

import pytest

from accounting.gate import cli
from accounting.gate.guard import (
    FOREIGN_CPU_LIMIT,
    STEAL_LIMIT,
    clock_mismatch,
    disturbances,
    foreign_cpu,
    foreign_cpu_limit,
    run_clock_mhz,
)
from accounting.gate.measure import THREAD_VARIABLES, Runner, host_cpu_record
from accounting.gate.storage import GUARD_KEY, load_run
from accounting.telemetry.cpu import WINDOW_SCALAR_CLOCK_SOURCE, WINDOW_VECTOR_CLOCK_SOURCE, read_host_cpu_times
from accounting.telemetry.sampler import host_cpu_times
from tests.support.cli_runs import run_main
from tests.support.gate_runs import QUIET

HZ = os.sysconf("SC_CLK_TCK")


def _stat(user, nice, system, idle, iowait, irq, softirq, steal, cpus=2):
    lines = [f"cpu  {user} {nice} {system} {idle} {iowait} {irq} {softirq} {steal} 0 0"]
    lines += [f"cpu{index} 1 0 1 1 0 0 0 0 0 0" for index in range(cpus)]
    return "\n".join(lines + ["intr 12345 0", "ctxt 999", "btime 1700000000"]) + "\n"


def test_proc_stat_is_read_field_by_field(tmp_path):
    path = tmp_path / "stat"
    path.write_text(_stat(user=1000, nice=20, system=300, idle=9000, iowait=70, irq=5, softirq=6, steal=40, cpus=4))
    times = read_host_cpu_times(path)
    # busy = user + nice + system + irq + softirq; idle and iowait are not busy; steal is apart
    assert times.busy_s == pytest.approx((1000 + 20 + 300 + 5 + 6) / HZ)
    assert times.steal_s == pytest.approx(40 / HZ) and times.cpus == 4


@pytest.mark.parametrize("text", ["", "cpu  1 2 3\ncpu0 1 2 3\n", "cpu  a b c d e f g h\ncpu0 1\n", "intr 1\n"])
def test_an_unreadable_proc_stat_is_none_not_a_guess(tmp_path, text):
    path = tmp_path / "stat"
    path.write_text(text)
    assert read_host_cpu_times(path) is None
    assert read_host_cpu_times(tmp_path / "missing") is None


@pytest.mark.skipif(host_cpu_times() is None, reason="no /proc/stat on this system")
def test_the_machines_busy_time_covers_this_process_own_cpu_time():
    """Burn CPU here: /proc/stat's busy time must grow by at least what getrusage says we used."""
    def own():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    before, own_before = host_cpu_times(), own()
    deadline = time.thread_time() + 0.4
    while time.thread_time() < deadline:
        sum(range(1000))
    after, own_after = host_cpu_times(), own()
    used = own_after - own_before
    tick = 2 * before.cpus / HZ  # /proc/stat counts whole ticks per CPU, at each end
    assert used >= 0.39
    assert after.busy_s - before.busy_s >= used - tick
    assert after.steal_s >= before.steal_s


@pytest.mark.parametrize("busy, own, steal, expected", [
    pytest.param(20.05, 20.0, 0.0, [], id="quiet: 0.005 CPUs of others"),
    pytest.param(20.0, 20.3, 0.0, [], id="own time read a tick high"),
    pytest.param(20.0 + 10 * FOREIGN_CPU_LIMIT * 1.2, 20.0, 0.0,
                 [f"other processes used {1.2 * FOREIGN_CPU_LIMIT:.2g} CPUs during the run (limit "
                  f"{FOREIGN_CPU_LIMIT:g})"], id="a neighbour"),
    pytest.param(20.0, 20.0, 10 * STEAL_LIMIT * 2,
                 [f"the hypervisor ran other guests for {2 * STEAL_LIMIT:.2g} CPUs of the run (limit {STEAL_LIMIT:g})"],
                 id="stolen"),
])
def test_foreign_cpu_time_during_a_ten_second_run(busy, own, steal, expected):
    record = {"busy_s": busy, "steal_s": steal, "own_s": own, "wall_s": 10.0, "cpus": 2}
    assert disturbances(QUIET["before"], QUIET["after"], host_cpu=record) == expected
    others, stolen = foreign_cpu(record)
    assert others == pytest.approx(max(0.0, busy - own) / 10) and stolen == pytest.approx(steal / 10)


@pytest.mark.parametrize("cpus", [1, 2, 8, 64, 192])
def test_the_limit_grows_with_the_machine_so_a_big_hosts_daemons_do_not_disturb(cpus):
    limit = foreign_cpu_limit(cpus)
    assert limit >= FOREIGN_CPU_LIMIT and limit <= max(FOREIGN_CPU_LIMIT, cpus / 10)
    just_over = {"busy_s": 10 * (limit * 1.01) + 5.0, "steal_s": 0.0, "own_s": 5.0, "wall_s": 10.0, "cpus": cpus}
    just_under = dict(just_over, busy_s=10 * (limit * 0.99) + 5.0)
    assert disturbances(None, None, host_cpu=just_over) and not disturbances(None, None, host_cpu=just_under)


def test_with_cpu_time_known_the_damped_load_average_decides_nothing():
    """A load average of 1.9 left by earlier gated runs (not this command's) no longer sets a quiet run aside."""
    lingering = dict(QUIET["before"], load_average_1m=1.9)
    quiet_run = {"busy_s": 20.02, "steal_s": 0.0, "own_s": 20.0, "wall_s": 10.0, "cpus": 2}
    assert disturbances(lingering, QUIET["after"], host_cpu=quiet_run) == []
    assert disturbances(lingering, QUIET["after"])[0].startswith("load average 1.9 on 2 CPUs before the run")


@pytest.mark.parametrize("record", [None, {}, {"busy_s": 1.0, "steal_s": 0.0, "own_s": 1.0, "wall_s": 0.0},
                                    {"busy_s": float("nan"), "steal_s": 0.0, "own_s": 1.0, "wall_s": 1.0}])
def test_a_missing_or_broken_cpu_record_is_unknown(record):
    assert foreign_cpu(record) is None


def test_the_record_is_none_without_both_readings():
    assert host_cpu_record(None, host_cpu_times(), own_s=1.0, wall_s=1.0) is None


BENCH_MODULE = textwrap.dedent("""
    import torch

    def test_threads(benchmark):
        benchmark.extra_info["threads_seen"] = torch.get_num_threads()
        benchmark.pedantic(sum, args=(range(1000),), rounds=5, iterations=1)
""")


@pytest.mark.slow
def test_a_pinned_run_records_its_threads_in_the_identity_and_the_cpu_time_around_it(tmp_path):
    (tmp_path / "test_threads_tiny.py").write_text(BENCH_MODULE)
    runner = Runner(["-q", "-p", "no:cacheprovider", "test_threads_tiny.py"], device="cpu", cwd=str(tmp_path),
                    workdir=str(tmp_path / "work"), reader=lambda device: None, threads=1)
    measured = runner.run("current-1")
    data = json.loads((tmp_path / "work" / "current-1.json").read_text())
    (bench,) = data["benchmarks"]
    assert bench["extra_info"]["threads_seen"] == 1
    assert data["machine_info"]["accounting"]["cpu_threads"] == 1
    host = data[GUARD_KEY]["host_cpu"]
    assert data[GUARD_KEY]["threads"] == 1
    if host_cpu_times() is not None:
        # the pytest process (a torch import: seconds of CPU) is the gate's own time and inside the machine's
        assert host["own_s"] > 0.5 and host["busy_s"] >= host["own_s"] - 2 * host["cpus"] / HZ
        assert host["wall_s"] == pytest.approx(measured.duration_s, rel=0.05)
    assert load_run(measured.path).machine["cpu_threads"] == 1


def test_the_runner_sets_the_thread_variables_only_when_asked(tmp_path, monkeypatch):
    seen = []

    def fake_run(command, *, cwd, env, **_):
        seen.append({name: env.get(name) for name in THREAD_VARIABLES})
        raise OSError(2, "stop here")

    monkeypatch.setattr("accounting.gate.measure.subprocess.run", fake_run)
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for threads in (None, 3):
        with pytest.raises(Exception, match="cannot start pytest"):
            Runner(["-q"], workdir=str(tmp_path), reader=lambda device: None, threads=threads).run("x")
    assert seen == [dict.fromkeys(THREAD_VARIABLES), dict.fromkeys(THREAD_VARIABLES, "3")]


@pytest.mark.parametrize("action", ["save", "check"])
def test_threads_option_reaches_the_runner_and_bad_counts_are_one_line(action, tmp_path, monkeypatch, capsys):
    made = []

    class Stop(Exception):
        pass

    def fake_runner(pytest_args, **options):
        made.append(options["threads"])
        raise Stop

    monkeypatch.setattr(cli, "Runner", fake_runner)
    with pytest.raises(Stop):
        run_main(["gate", action, "--threads", "2", "--", "-m", "cpu"], capsys)
    assert made == [2]
    status, _, err = run_main(["gate", action, "--threads", "0", "--", "-m", "cpu"], capsys)
    assert status == 2 and "--threads: must be a positive integer, got '0'" in err


def test_a_measured_vm_clock_decides_nothing_a_reported_one_does():
    """The FMA-timed clock of a VM swings with the host's other tenants; cpufreq/NVML clocks are the device's word."""
    for source, counts in ((WINDOW_VECTOR_CLOCK_SOURCE, False), (WINDOW_SCALAR_CLOCK_SOURCE, False),
                           ("cpufreq scaling_cur_freq", True), (None, True)):
        before = dict(QUIET["before"], clock_mhz_mean=2037.0, clock_source=source)
        after = dict(QUIET["after"], clock_mhz_mean=2911.0, clock_source=source)
        moved = [reason for reason in disturbances(before, after) if "clock moved" in reason]
        assert bool(moved) is counts, source
        clock = run_clock_mhz({"before": before, "after": after})
        assert (clock == (2037.0 + 2911.0) / 2) is counts and (clock is None) is not counts
        assert (clock_mismatch(clock, 3200.0) is not None) is counts
