"""accounting.acceptance.clock_check on a fake device: the order of synchronizations, and the arithmetic.

The fake keeps a device clock that each product advances by its duration, events that read it when
recorded, and a host clock that runs ahead of the device by the launch time; every call is logged, so the
test sees that the host clock is read only right after a synchronize and the events only after the end one.
"""

import time

import pytest

from accounting.acceptance import clock_check
from accounting.acceptance.clock_check import ClockComparison, LoopTiming, compare_clocks, main, time_loop
from accounting.errors import AccountingError
from accounting.hardware.devices import cuda_available


class FakeDevice:
    """A device whose products take ``per_call_s`` each, launched ``launch_s`` apart on the host."""

    def __init__(self, per_call_s=0.002, launch_s=1e-5, sync_s=2e-5):
        self.per_call_s, self.launch_s, self.sync_s = per_call_s, launch_s, sync_s
        self.device_time = 0.0  # when the queued work will have finished
        self.host_time = 0.0
        self.log = []

    # the ops of time_loop
    def synchronize(self):
        self.log.append("sync")
        self.host_time = max(self.host_time, self.device_time) + self.sync_s

    def now(self):
        self.log.append("now")
        return self.host_time

    def record(self):
        self.log.append("record")
        self.device_time = max(self.device_time, self.host_time)  # an idle device stamps at once
        return {"at": self.device_time}

    def elapsed(self, start, end):
        self.log.append("elapsed")
        return end["at"] - start["at"]

    # the product
    def call(self):
        self.log.append("call")
        self.host_time += self.launch_s
        self.device_time = max(self.device_time, self.host_time) + self.per_call_s


def test_the_host_clock_is_read_only_after_a_synchronize_and_events_after_the_end_one():
    device = FakeDevice()
    time_loop(device, device.call, 3)
    assert device.log == ["sync", "now", "record", "call", "call", "call", "record", "sync", "now", "elapsed"]


def test_a_loop_s_per_call_times_are_its_totals_over_its_calls():
    device = FakeDevice(per_call_s=0.002, launch_s=1e-5, sync_s=2e-5)
    loop = time_loop(device, device.call, 50)
    # the device is busy from the first launch on: 50 products back to back, after one launch
    assert loop.event_s == pytest.approx(1e-5 + 50 * 0.002)
    assert loop.event_per_call_s == pytest.approx((1e-5 + 0.1) / 50)
    # the host waits for the last product, then the synchronize's own cost
    assert loop.host_s == pytest.approx(1e-5 + 0.1 + 2e-5)
    assert loop.host_per_call_s > loop.event_per_call_s


def test_compare_sizes_the_loop_to_its_minimum_time_and_interleaves_package_and_loop():
    device = FakeDevice(per_call_s=0.004)
    order = []

    def package_time():
        order.append(("package", device.log.count("call")))
        return 0.0041

    result = compare_clocks(device, device.call, package_time, flops=2 * 8192**3, dtype="bfloat16",
                            shape=(8192, 8192, 8192), pairs=3, warmup=2, min_loop_s=0.2, min_calls=10)
    calls = 50  # ceil(0.2 s / 4 ms), more than min_calls
    assert [loop.calls for loop in result.loops] == [calls] * 3
    # warm-up 2, one sizing call, then each package timing before its loop
    assert order == [("package", 3), ("package", 3 + calls), ("package", 3 + 2 * calls)]
    assert result.package_over_events == pytest.approx(0.0041 / ((1e-5 + calls * 0.004) / calls))


def test_the_ratios_are_medians_over_pairs_and_tflops_count_two_flops_per_multiply_add():
    loops = (LoopTiming(100, 0.200, 0.2004), LoopTiming(100, 0.250, 0.2503), LoopTiming(100, 0.210, 0.2102))
    comparison = ClockComparison("bfloat16", (8192, 8192, 8192), 2 * 8192**3, (0.0021, 0.0020, 0.0024), loops)
    # per-pair package / event per call: 1.05, 0.8, 1.142857...: the median is 1.05
    assert comparison.package_over_events == pytest.approx(1.05)
    assert comparison.host_over_events == pytest.approx(1.0012)  # 1.002, 1.0012, 1.000952...
    assert comparison.event_tflops == pytest.approx(2 * 8192**3 / 0.0021 / 1e12)  # median event per call 2.1 ms
    assert comparison.package_tflops == pytest.approx(2 * 8192**3 / 0.0021 / 1e12)
    assert comparison.problems() == []


@pytest.mark.parametrize("package_s, host_s, problem", [
    pytest.param(0.0015, 0.2002, "bfloat16 64x64x64: time_matmul / event loop = 0.750, outside 0.9–1.1", id="timer-misses-work"),
    pytest.param(0.0025, 0.2002, "bfloat16 64x64x64: time_matmul / event loop = 1.250, outside 0.9–1.1", id="timer-adds-work"),
    pytest.param(0.0020, 0.1900, "bfloat16 64x64x64: host clock / event loop = 0.950, outside 0.98–1.1", id="host-reads-early"),
])
def test_a_disagreement_is_named_with_its_ratio(package_s, host_s, problem):
    loops = (LoopTiming(100, 0.2, host_s),)
    comparison = ClockComparison("bfloat16", (64, 64, 64), 2 * 64**3, (package_s,), loops)
    assert comparison.problems() == [problem]
    assert comparison.as_dict()["problems"] == [problem]


def test_a_loop_of_no_calls_is_refused():
    with pytest.raises(AccountingError, match=r"^a loop needs at least one call, got 0$"):
        time_loop(FakeDevice(), lambda: None, 0)


@pytest.mark.skipif(cuda_available(), reason="checks the refusal on a machine without CUDA")
def test_without_a_gpu_the_command_refuses_with_exit_status_2(tmp_path, capsys):
    assert main([str(tmp_path / "clock.json")]) == 2
    assert "needs a CUDA or ROCm device" in capsys.readouterr().err
    assert not (tmp_path / "clock.json").exists()


class HostOps:
    """The ops of time_loop on the CPU: nothing to wait for, the host clock for the events too."""

    def synchronize(self):
        pass

    def now(self):
        return time.perf_counter()

    def record(self):
        return time.perf_counter()

    def elapsed(self, start, end):
        return end - start


def test_check_device_s_plumbing_runs_on_the_cpu_with_host_ops(monkeypatch):
    """The GPU path's code (operands, TF32 off, time_matmul, the loop) run end to end on the CPU; no timing is judged."""
    monkeypatch.setattr(clock_check, "CudaOps", lambda device: HostOps())
    comparison = clock_check.check_device("cpu", "float32", 64)
    assert comparison.flops == 2 * 64**3 and comparison.shape == (64, 64, 64)
    assert len(comparison.loops) == len(comparison.package_s) == clock_check.PAIRS
    assert all(loop.calls >= clock_check.MIN_CALLS and loop.event_s > 0 for loop in comparison.loops)
    assert comparison.package_over_events > 0 and comparison.event_tflops > 0
    assert set(comparison.as_dict("NVIDIA H200")) >= {"package_over_events", "host_over_events", "event_tflops",
                                                      "event_tflops_verdict", "problems"}
