"""The collective sweep in this process, on a gloo world of one (no process is started): torch 2.4's
broadcast signature, a slow first call, what the fleet passes the telemetry sampler, and a stopped rank's
wait for rank 0's report."""

import argparse
import time

import pytest
import torch
import torch.distributed as dist

from accounting.fleet import cli, collectives, launch, measure, run
from accounting.fleet.gather import FleetStopped
from tests.support import fleet_workers


@pytest.fixture
def world_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_broadcast_runs_on_torch_2_4s_signature(world_of_one, monkeypatch):
    """torch 2.4 and 2.5's broadcast has no ``group_src``; a call passing it raises TypeError there."""
    monkeypatch.setattr(dist, "broadcast", fleet_workers.broadcast_with_torch_2_4_signature(dist.broadcast))
    case = collectives.CollectiveCase("broadcast", 4096, group=world_of_one, device=torch.device("cpu"), rank=0,
                                      ranks=1)
    case.fill()
    case.run()
    assert case.check() == 0


def test_a_slow_first_call_does_not_cut_the_sweep(world_of_one, monkeypatch):
    """NCCL >= 2.22 connects a group's peers on its first call. That second of set-up is paid once, so it
    must not be what predicts the next size's cost: every size still fits the budget."""
    real_run, calls = collectives.CollectiveCase.run, []

    def first_call_slow(case):
        if not calls:
            time.sleep(1.0)
        calls.append(case.nbytes)
        return real_run(case)

    monkeypatch.setattr(collectives.CollectiveCase, "run", first_call_slow)
    sizes = collectives.message_sizes(2**20, 2**22, ranks=1)
    sweep = collectives.sweep_collective("all_reduce", sizes, group=world_of_one, device=torch.device("cpu"),
                                         budget_s=0.5)
    timed = sweep.results if hasattr(sweep, "results") else sweep  # a list before the sweep kept its stops
    assert [done.nbytes for done in timed] == sizes


def test_measure_passes_the_other_local_ranks_devices_to_the_sampler(monkeypatch):
    seen = {}

    class FakeSampler:
        def __init__(self, device, *args, **kwargs):
            seen.update(device=device, **kwargs)
            self.summary = self

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def to_dict(self):
            return {}

    class Plan:
        def __init__(self):
            self.notes = []

    monkeypatch.setattr(measure, "Sampler", FakeSampler)
    monkeypatch.setattr(measure, "prepare", lambda **kwargs: Plan())
    monkeypatch.setattr(measure, "build_report", lambda plan, **kwargs: {"dtypes": {}})
    measure.measure_rank("cuda:1", dtypes=None, budget_s=1.0, fleet_devices=[0, 2, 3])
    assert seen["device"] == "cuda:1" and tuple(seen["fleet_devices"]) == (0, 2, 3)


@pytest.mark.parametrize("local_rank, local_world_size, visible, expected", [
    pytest.param(1, 4, 8, (0, 2, 3), id="four-ranks-of-eight-gpus"),
    pytest.param(0, 2, 2, (1,), id="two-ranks"),
    pytest.param(0, 8, 1, (), id="one-visible-gpu-per-rank"),
])
def test_a_rank_tells_the_sampler_which_devices_its_node_peers_use(monkeypatch, local_rank, local_world_size,
                                                                    visible, expected):
    seen = {}
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    monkeypatch.setattr(run, "measure_rank", lambda device, **kwargs: seen.update(kwargs))
    me = launch.Launch(10 + local_rank, 16, local_rank, local_world_size)
    device = launch.local_device(me, device_count=visible)
    run._measure(run.FleetOptions(), me, device, run.Hooks(), 1.0)
    assert tuple(seen["fleet_devices"]) == expected
    assert device.index not in seen["fleet_devices"]


def test_a_stopped_rank_waits_for_rank_0s_report_before_it_exits(monkeypatch):
    """torchrun stops every worker once one exits with an error: a rank that left at once would kill rank 0
    while it writes the report naming the hung rank."""
    def stopped(*args, **kwargs):
        raise FleetStopped("rank 1: the measured barrier failed")

    events = []
    monkeypatch.setattr(cli, "run_fleet", stopped)
    args = argparse.Namespace(budget=1.0, dtypes=None, json_path=None, plot_path=None, min_busbw=None,
                              strict=False, barrier_timeout=None, slow_rank=None)
    environ = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    status = cli.run(args, parser=argparse.ArgumentParser(), environ=environ, stderr=_Sink(events),
                     sleep=lambda seconds: events.append(("slept", seconds)))
    assert status == 4, "a hung or lost rank is a failed device"
    assert events[-1] == ("slept", cli.REPORT_GRACE_S) and cli.REPORT_GRACE_S > 0


class _Sink:
    def __init__(self, events):
        self.events = events

    def write(self, text):
        self.events.append(("wrote", text))

    def flush(self):
        pass
