"""The load guard (``accounting.gate.guard``): each limit's edge, the gate's own share of the load, saved records.

The truths: each limit is "more than" (a run *at* a limit is quiet, a hair above it is not, as the
module's docstring and the limits' own say); the load average is linear in runnable threads, so the
gate's own share of it from several runs is the sum of each run's share (the kernel adds each
thread to the same damped count); a saved run's record must be judged as its readings are when
handed over one by one.
"""

import pytest

from accounting.errors import AccountingError
from accounting.gate.guard import (
    FOREIGN_CPU_LIMIT,
    FOREIGN_LOAD_PER_CPU,
    OTHER_MEMORY_LIMIT_BYTES,
    STEAL_LIMIT,
    OwnRun,
    disturbances,
    foreign_cpu,
    own_load,
    read,
    recorded_disturbances,
)

QUIET = {"load_average_1m": 0.2, "logical_cpus": 2, "clock_mhz_mean": 3000.0, "throttle_reasons": []}


def _host_cpu(others_cpus: float, stolen_cpus: float = 0.0, wall_s: float = 10.0, cpus: int = 2) -> dict:
    """A run's ``host_cpu`` record in which other processes used ``others_cpus`` CPUs on average."""
    own = 15.0
    return {"busy_s": own + others_cpus * wall_s, "steal_s": stolen_cpus * wall_s, "own_s": own, "wall_s": wall_s,
            "cpus": cpus}


def test_other_processes_at_the_limit_leave_a_run_quiet_and_above_it_disturb_it():
    assert foreign_cpu(_host_cpu(FOREIGN_CPU_LIMIT))[0] == FOREIGN_CPU_LIMIT  # the limit itself, exactly
    assert disturbances(None, None, host_cpu=_host_cpu(FOREIGN_CPU_LIMIT)) == []
    (reason,) = disturbances(None, None, host_cpu=_host_cpu(FOREIGN_CPU_LIMIT + 0.01))
    assert reason == "other processes used 0.11 CPUs during the run (limit 0.1)"


def test_stolen_time_at_the_limit_leaves_a_run_quiet_and_above_it_disturbs_it():
    assert foreign_cpu(_host_cpu(0.0, STEAL_LIMIT))[1] == STEAL_LIMIT
    assert disturbances(None, None, host_cpu=_host_cpu(0.0, STEAL_LIMIT)) == []
    (reason,) = disturbances(None, None, host_cpu=_host_cpu(0.0, 0.06))
    assert reason == "the hypervisor ran other guests for 0.06 CPUs of the run (limit 0.05)"


def test_a_run_shorter_than_a_second_is_still_judged_by_its_cpu_time():
    short = {"busy_s": 0.6, "steal_s": 0.0, "own_s": 0.5, "wall_s": 0.5, "cpus": 2}
    assert foreign_cpu(short) == pytest.approx((0.2, 0.0))
    assert disturbances(None, None, host_cpu=short) == ["other processes used 0.2 CPUs during the run (limit 0.1)"]


def test_memory_of_other_processes_at_the_limit_leaves_a_run_quiet():
    at_limit = dict(QUIET, other_process_memory_bytes=OTHER_MEMORY_LIMIT_BYTES)
    assert disturbances(at_limit, None) == []
    above = dict(QUIET, other_process_memory_bytes=OTHER_MEMORY_LIMIT_BYTES + 2**20)
    assert disturbances(above, None) == ["other processes held 4.0 GiB on the device before the run"]


def test_a_foreign_load_at_the_limit_leaves_a_run_quiet():
    at_limit = dict(QUIET, load_average_1m=FOREIGN_LOAD_PER_CPU * 2)
    assert disturbances(at_limit, at_limit) == []
    above = dict(QUIET, load_average_1m=FOREIGN_LOAD_PER_CPU * 2 + 0.1)
    assert disturbances(above, None) == ["load average 1.1 on 2 CPUs before the run (1.1 not from the gate; limit 1)"]


def test_without_the_gates_own_share_all_of_the_load_is_foreign():
    loaded_after = dict(QUIET, load_average_1m=1.5)
    assert disturbances(QUIET, loaded_after) == [
        "load average 1.5 on 2 CPUs after the run (1.5 not from the gate; limit 1)"]
    assert disturbances(QUIET, loaded_after, own_after=1.0) == []


def test_a_reading_without_a_cpu_count_is_judged_as_one_cpu():
    unknown_cpus = {"load_average_1m": 0.8}
    assert disturbances(unknown_cpus, None) == [
        "load average 0.8 on 1 CPUs before the run (0.8 not from the gate; limit 0.5)"]


def test_a_missing_before_reading_still_lets_the_after_reading_speak():
    throttled = dict(QUIET, throttle_reasons=["hw_slowdown", "sw_power_cap"], other_process_memory_bytes=5 * 2**30)
    assert disturbances(None, throttled) == ["throttled after the run (hw_slowdown, sw_power_cap)",
                                             "other processes held 5.0 GiB on the device after the run"]


# ---- a GPU on a node shared with other jobs: what can slow this GPU, not the node ------------------------------

NODE_GPU = {"device": "cuda:3", "clock_source": "NVML SM clock", "clock_mhz_mean": 345.0, "throttle_reasons": [],
            "logical_cpus": 128, "load_average_1m": 9.0, "other_process_memory_bytes": 0,
            "busy_siblings": [f"GPU {index}: 100% utilised, 70.0 GiB used" for index in (0, 1, 2, 4, 5, 6, 7)]}
"""GPU 3 of an 8-GPU node whose seven other GPUs run other jobs, each with a process spinning a CPU core."""


def test_busy_sibling_gpus_and_their_jobs_cpus_do_not_disturb_a_gpu_run():
    """Seven other jobs keep seven of 128 cores busy (more than 5 % of the machine) and their GPUs full: none of it
    shares this GPU's SMs, power limit or memory, and 119 cores stay idle for this run's launches."""
    host = _host_cpu(7.0, cpus=128)
    assert disturbances(NODE_GPU, dict(NODE_GPU, clock_mhz_mean=1980.0), host_cpu=host) == []
    assert disturbances(NODE_GPU, NODE_GPU, own_before=1.0, own_after=1.0) == [], "the load rule, where no /proc/stat"
    cpu_run = {key: value for key, value in NODE_GPU.items() if key not in ("device", "clock_source")}
    assert disturbances(cpu_run, cpu_run, host_cpu=host), "a CPU benchmark shares those cores: still disturbed"


def test_what_can_slow_this_gpu_still_disturbs_its_run():
    host = _host_cpu(7.0, cpus=128)
    shared = dict(NODE_GPU, other_process_memory_bytes=OTHER_MEMORY_LIMIT_BYTES + 1)
    assert disturbances(NODE_GPU, shared, host_cpu=host) == [
        f"other processes held {(OTHER_MEMORY_LIMIT_BYTES + 1) / 2**30:.1f} GiB on the device after the run"]
    hot = dict(NODE_GPU, throttle_reasons=["sw_power_cap", "hw_thermal_slowdown"])
    assert disturbances(NODE_GPU, hot, host_cpu=host) == ["throttled after the run (hw_thermal_slowdown)"]


def test_a_gpu_run_whose_machine_others_kept_busy_is_disturbed():
    """2 CPUs: the run itself keeps 1.5 busy (its launches and waits, its sampler); another process using 0.4 CPUs
    leaves 0.1 idle, and its launches may wait for a core."""
    small = dict(NODE_GPU, logical_cpus=2, busy_siblings=[])
    record = {"busy_s": 19.0, "steal_s": 0.0, "own_s": 15.0, "wall_s": 10.0, "cpus": 2}
    (reason,) = disturbances(small, small, host_cpu=record)
    assert reason.startswith("other processes used 0.4 CPUs and the run 1.5 during it: 0.1 of 2 CPUs idle")
    assert disturbances(small, small, host_cpu=dict(record, busy_s=15.5)) == [], "0.05 CPUs of others: quiet"


def test_the_gates_own_share_of_the_load_adds_up_over_its_runs():
    first = OwnRun(ended=40.0, duration_s=30.0, busy_threads=2.0)
    second = OwnRun(ended=90.0, duration_s=45.0, busy_threads=1.5)
    both = own_load([first, second], now=100.0)
    assert both == pytest.approx(own_load([first], now=100.0) + own_load([second], now=100.0), rel=1e-12)
    assert own_load([second], now=100.0) < both


def test_a_reading_of_a_device_without_telemetry_names_it():
    with pytest.raises(AccountingError, match="device 'meta' has no telemetry"):
        read("meta")


# A saved run's guard record: each of its parts must reach the rule it belongs to.
LOADED_BEFORE = dict(QUIET, load_average_1m=1.9)
LOADED_AFTER = dict(QUIET, load_average_1m=1.9)


@pytest.mark.parametrize("record", [
    pytest.param({"before": QUIET, "after": dict(QUIET, throttle_reasons=["hw_slowdown"])}, id="after-throttled"),
    pytest.param({"before": LOADED_BEFORE, "after": QUIET, "own_before": 1.2}, id="own-share-before"),
    pytest.param({"before": QUIET, "after": LOADED_AFTER, "own_after": 1.2}, id="own-share-after"),
    pytest.param({"before": QUIET, "after": LOADED_AFTER}, id="no-own-share-after"),
    pytest.param({"before": LOADED_BEFORE, "after": QUIET}, id="no-own-share-before"),
    pytest.param({"before": QUIET, "after": QUIET, "host_cpu": _host_cpu(0.5)}, id="host-cpu"),
    pytest.param({"before": QUIET, "after": QUIET, "host_cpu": _host_cpu(0.0)}, id="host-cpu-quiet"),
])
def test_a_saved_record_is_judged_as_its_readings_are(record):
    expected = disturbances(record["before"], record["after"], own_before=record.get("own_before", 0.0),
                            own_after=record.get("own_after", 0.0), host_cpu=record.get("host_cpu"))
    assert recorded_disturbances(record) == expected


def test_the_records_that_the_guard_must_read_part_by_part_are_not_all_quiet():
    """The cases above would prove nothing if every one were quiet: these must be disturbed, those not."""
    assert recorded_disturbances({"before": QUIET, "after": dict(QUIET, throttle_reasons=["hw_slowdown"])})
    assert recorded_disturbances({"before": QUIET, "after": LOADED_AFTER})
    assert recorded_disturbances({"before": LOADED_BEFORE, "after": QUIET})
    assert recorded_disturbances({"before": QUIET, "after": QUIET, "host_cpu": _host_cpu(0.5)})
    # The host's CPU time, where recorded, decides instead of the load average.
    assert recorded_disturbances({"before": LOADED_BEFORE, "after": LOADED_AFTER, "host_cpu": _host_cpu(0.0)}) == []
    assert recorded_disturbances({"before": LOADED_BEFORE, "after": QUIET, "own_before": 1.2}) == []
    assert recorded_disturbances({"before": QUIET, "after": LOADED_AFTER, "own_after": 1.2}) == []


def test_without_the_load_rules_a_loaded_run_is_kept_and_a_throttled_one_still_is_not():
    """``gate ab`` balances load across its pairs: only the other rules set its runs aside."""
    from accounting.gate.guard import recorded_disturbances, run_load

    cpu = {"busy_s": 16.0, "steal_s": 0.0, "own_s": 10.0, "wall_s": 10.0, "cpus": 2}  # others: 6 CPU s in 10 s
    loaded = {"before": {"throttle_reasons": []}, "after": {"throttle_reasons": []}, "host_cpu": cpu}
    assert recorded_disturbances(loaded) and recorded_disturbances(loaded, load=False) == []
    assert run_load(loaded) == pytest.approx((cpu["busy_s"] - cpu["own_s"]) / cpu["wall_s"])
    throttled = dict(loaded, after={"throttle_reasons": ["hw_slowdown"]})
    assert recorded_disturbances(throttled, load=False) == ["throttled after the run (hw_slowdown)"]
    averaged = {"before": {"load_average_1m": 3.0, "logical_cpus": 2}, "after": None, "own_before": 0.5}
    assert recorded_disturbances(averaged) and recorded_disturbances(averaged, load=False) == []
    assert run_load(averaged) == pytest.approx(3.0 - 0.5)
