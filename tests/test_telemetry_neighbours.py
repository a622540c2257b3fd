"""Other processes on this process's cores: per-CPU ``/proc/stat`` lines, less the process's own CPU time.

The truths: crafted ``/proc/stat`` files whose per-CPU ticks are chosen by hand (USER_HZ from ``os.sysconf``),
and a real process pinned to one core that does nothing while a spinning neighbour owns that core.
"""

import os
import subprocess
import sys
import time

import pytest

from accounting.telemetry.cpu import ForeignCpuWindow, read_core_times
from accounting.telemetry.sampler import Sampler, snapshot

HZ = os.sysconf("SC_CLK_TCK")


def _stat(path, rows):
    """``rows``: {cpu: (user, nice, system, idle, iowait, irq, softirq, steal)} in ticks."""
    lines = ["cpu  1 1 1 1 1 1 1 1 0 0"] + [f"cpu{cpu} " + " ".join(map(str, (*row, 0, 0))) for cpu, row in rows.items()]
    path.write_text("\n".join(lines) + "\nintr 0\n")
    return path


def test_only_the_named_cpus_user_nice_and_system_count_as_work(tmp_path):
    path = _stat(tmp_path / "stat", {0: (100, 10, 50, 900, 7, 3, 9, 2), 1: (5000, 0, 0, 0, 0, 0, 0, 40)})
    times = read_core_times([0], path)
    assert (times.cpus, times.work_s, times.steal_s) == ((0,), 160 / HZ, 2 / HZ)
    assert read_core_times([0, 1], path).work_s == 5160 / HZ
    assert read_core_times([2], path) is None, "a CPU without a line is not read as idle"


def test_a_window_subtracts_the_process_own_time_from_its_cores(tmp_path):
    files = iter([_stat(tmp_path / "a", {1: (1000, 0, 0, 0, 0, 0, 0, 0)}),
                  _stat(tmp_path / "b", {1: (1000 + 8 * HZ, 0, 0, 0, 0, 0, 0, HZ)})])

    def read(cpus):
        return read_core_times(cpus, next(files))

    own, now = iter([10.0, 13.0]), iter([0.0, 10.0])
    window = ForeignCpuWindow([1], read=read, own=lambda: next(own), now=lambda: next(now)).start()
    share = window.stop()
    assert share.foreign_share == pytest.approx((8 - 3) / 10) and share.stolen_share == pytest.approx(0.1)


@pytest.mark.slow
def test_a_spinning_neighbour_on_the_same_core_is_seen_and_an_idle_one_is_not():
    """This process sleeps pinned to one core; a neighbour pinned there spins: most of the core is foreign."""
    cpu = max(os.sched_getaffinity(0))
    spinner = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
    try:
        time.sleep(0.5)
        share = ForeignCpuWindow([cpu]).start()
        time.sleep(1.5)
        assert share.stop().foreign_share > 0.8
    finally:
        spinner.kill()
        spinner.wait()


def test_the_sampler_reports_its_cores_share_and_a_snapshot_says_why_not():
    with Sampler("cpu", measure_clock=False) as sampler:
        time.sleep(0.05)
    summary = sampler.summary
    assert summary.foreign_cpus == tuple(sorted(os.sched_getaffinity(0)))
    assert 0.0 <= summary.foreign_cpu_share <= 1.0 and "foreign_cpu_share" not in summary.unavailable
    assert snapshot("cpu", measure_clock=False).unavailable["foreign_cpu_share"] == "a snapshot has no window to share"
