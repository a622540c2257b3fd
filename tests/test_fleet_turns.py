"""accounting.fleet.turns: which ranks take turns to measure, and the launcher moved off the measured cores."""

import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from accounting.fleet.turns import TORCHRUN_VARIABLE, end_turn, launcher_off, measuring_turns, wait_for_turn


@pytest.mark.parametrize("device, local_world_size, turns", [
    pytest.param("cpu", 2, 2, id="cpu-ranks-of-a-node-take-turns"),
    pytest.param("cpu", 1, 1, id="one-cpu-rank-a-node"),
    pytest.param("cuda:0", 8, 1, id="gpus-measure-together"),
])
def test_cpu_ranks_of_one_node_take_turns_and_gpu_ranks_do_not(device, local_world_size, turns):
    assert measuring_turns(torch.device(device), local_world_size) == turns


needs_two_cpus = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                                    reason="moving a process between CPUs needs Linux and two allowed CPUs")


@pytest.fixture
def launcher():
    """A stand-in for torchrun's agent: a process with two threads, allowed on every CPU."""
    process = subprocess.Popen([sys.executable, "-c", "import threading, time; "
                                "threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); time.sleep(60)"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def _masks(pid):
    return {int(task): os.sched_getaffinity(int(task)) for task in os.listdir(f"/proc/{pid}/task")}


@needs_two_cpus
@pytest.mark.slow  # starts a process
def test_the_launchers_threads_leave_the_measured_cores_and_come_back(launcher):
    allowed = sorted(os.sched_getaffinity(0))
    before = _masks(launcher)
    while len(before) < 2:  # the stand-in's second thread may not have started yet
        before = _masks(launcher)
    with launcher_off([allowed[0]], environ={TORCHRUN_VARIABLE: "job"}, parent=launcher) as moved:
        during = _masks(launcher)
    assert sorted(moved) == sorted(before)
    assert all(allowed[0] not in mask and mask for mask in during.values()), during
    assert _masks(launcher) == before


@needs_two_cpus
@pytest.mark.slow  # starts a process
def test_a_launcher_that_is_not_torchrun_is_left_alone(launcher):
    before = _masks(launcher)
    with launcher_off([sorted(os.sched_getaffinity(0))[0]], environ={}, parent=launcher) as moved:
        assert moved == [] and _masks(launcher) == before


def test_a_rank_waits_for_the_one_before_it_and_says_so_when_that_one_never_finishes():
    """On a real store: local rank 0 starts at once; rank 1 starts once rank 0 has ended its turn; rank 2, whose
    predecessor never does, measures after its timeout with a note naming both."""
    store = dist.HashStore()
    assert wait_for_turn(store, rank=0, local_rank=0, timeout_s=0.01) is None
    end_turn(store, 0)
    assert wait_for_turn(store, rank=1, local_rank=1, timeout_s=1) is None
    note = wait_for_turn(store, rank=2, local_rank=2, timeout_s=0.2)
    assert note == "rank 2 measured without waiting for rank 1, which had not finished measuring after 0.2 s"
