"""``flops_benchmark``: the sync inside the timed call, MFU from the device's own timing on CUDA, the peak
override, one detection per device, the L2 flush, and a shape checked against its baseline's."""

from types import SimpleNamespace

import pytest
import torch

from accounting import timing
from accounting.bench import fixture, plugin
from accounting.bench.fixture import FlopsBenchmark
from accounting.hardware.devices import DeviceInfo
from accounting.timing import Timing


class FakeBenchmark:
    """Stands in for pytest-benchmark's fixture: runs pedantic's setup/target and logs the order."""

    def __init__(self, log, seconds=0.5):
        self.log, self.seconds, self.extra_info, self.stats = log, seconds, {}, None

    def pedantic(self, target, setup, rounds, warmup_rounds, iterations):
        assert iterations == 1
        for _ in range(warmup_rounds + rounds):
            setup()
            self.log.append("clock start")
            target()
            self.log.append("clock stop")
        self.stats = SimpleNamespace(stats=SimpleNamespace(median=self.seconds))


def extra_memory(runner) -> dict:
    return {key: value for key, value in runner.benchmark.extra_info.items() if "memory" in key}


def test_flops_benchmark_synchronizes_inside_the_timed_call(monkeypatch):
    log = []
    monkeypatch.setattr(fixture, "synchronize", lambda device: log.append(f"sync {device}"))
    config = SimpleNamespace(getoption=lambda name, default=None: None)
    runner = FlopsBenchmark(FakeBenchmark(log), config)
    runner._infos["cpu"] = DeviceInfo("cpu", "fake CPU", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}),
                                      cores=1, clock_ghz=1.0)
    result = runner(lambda: log.append("fn"), flops=8e9, dtype="float32", device="cpu", rounds=2, warmup_rounds=1)
    one_round = ["sync cpu", "clock start", "fn", "sync cpu", "clock stop"]
    # setup syncs (untimed); the timed target ends with a sync; after the rounds, one untimed call for its memory
    assert log == one_round * 3 + ["sync cpu", "fn", "sync cpu"]
    assert extra_memory(runner) == {"peak_memory_bytes": 0}  # the fn allocates no tensor
    assert result.mfu == pytest.approx(8e9 / 0.5 / 32e9)  # 1 core × 1 GHz × 32 FLOPs/cycle (AVX2+FMA)
    extra = runner.benchmark.extra_info
    assert extra["flops"] == 8_000_000_000 and extra["dtype"] == "float32" and extra["device"] == "fake CPU"
    assert extra["achieved_tflops"] == pytest.approx(0.016) and extra["mfu"] == pytest.approx(result.mfu)


def test_flops_benchmark_takes_the_peak_override_option():
    config = SimpleNamespace(getoption=lambda name, default=None: {"peak_tflops": 0.016}.get(name))
    runner = FlopsBenchmark(FakeBenchmark([]), config)
    result = runner(lambda: None, flops=8e9, dtype="float32", device="cpu", rounds=1, warmup_rounds=0)
    assert result.mfu == pytest.approx(1.0)


def test_flops_benchmark_detects_each_device_once_per_session(monkeypatch):
    detected = []
    monkeypatch.setattr(fixture, "detect_device", lambda device: detected.append(str(device)) or str(device))
    config = SimpleNamespace(getoption=lambda name, default=None: None, stash=pytest.Stash())
    make_fixture = plugin.flops_benchmark.__wrapped__  # the fixture's body, as pytest runs it for each test
    for _test in range(3):  # three tests, three fixtures, one session (one config)
        assert make_fixture(FakeBenchmark([]), config).device_info("cuda:1") == "cuda:1"
    assert detected == ["cuda:1"]


@pytest.mark.parametrize("operands, flushed", [
    pytest.param((torch.ones(256, 256),) * 2, True, id="operands-fit-L2"),
    pytest.param((torch.ones(4096, 4096), torch.ones(256, 256)), False, id="operands-exceed-L2"),
    pytest.param((), True, id="operands-unknown"),
])
def test_flops_benchmark_flushes_l2_by_the_shared_rule(monkeypatch, operands, flushed):
    log = []
    clock = SimpleNamespace(flush_cache=lambda: log.append("flush"))
    monkeypatch.setattr(fixture, "clock_for", lambda device, **options: clock)
    monkeypatch.setattr(fixture, "cuda_peak_allocated", lambda target, device: target() or 0)  # CPU build: no allocator
    monkeypatch.setattr(fixture, "synchronize", lambda device: None)
    monkeypatch.setattr(timing, "flush_bytes", lambda device: 50 * 2**20)  # 50 MiB, as an H100
    monkeypatch.setattr(fixture, "flush_bytes", lambda device: 50 * 2**20)
    monkeypatch.setattr(fixture, "time_fn", lambda fn, **kwargs: timing.Timing.from_samples([1.0]))  # no real events
    config = SimpleNamespace(getoption=lambda name, default=None: None)
    runner = FlopsBenchmark(FakeBenchmark(log), config, infos={"cuda:0": fixture.DeviceInfo("cuda", "fake GPU", 0, 2**30)})
    runner(lambda: None, flops=1, dtype="bf16", device="cuda:0", rounds=1, warmup_rounds=0, peak=1e15,
           operands=operands)
    assert ("flush" in log) is flushed


def test_flops_benchmark_mfu_on_cuda_comes_from_device_events_not_the_host_clock(monkeypatch):
    """The host clock around fn()+synchronize holds the launch; on CUDA the MFU uses the event-timed median."""
    log, timed = [], []
    monkeypatch.setattr(fixture, "clock_for", lambda device, **options: SimpleNamespace(flush_cache=lambda: None))
    monkeypatch.setattr(fixture, "cuda_peak_allocated", lambda target, device: target() or 0)  # CPU build: no allocator
    monkeypatch.setattr(fixture, "flush_bytes", lambda device: 50 * 2**20)
    monkeypatch.setattr(fixture, "synchronize", lambda device: None)

    def device_timer(fn, **kwargs):
        timed.append(kwargs)
        return Timing.from_samples([0.4] * kwargs["repeats"], device=kwargs["device"])

    monkeypatch.setattr(fixture, "time_fn", device_timer)
    config = SimpleNamespace(getoption=lambda name, default=None: None)
    runner = FlopsBenchmark(FakeBenchmark(log, seconds=0.5), config,
                            infos={"cuda:0": DeviceInfo("cuda", "fake GPU", 0, 2**30)})
    result = runner(lambda: None, flops=10**12, dtype="bf16", device="cuda:0", rounds=7, warmup_rounds=0, peak=5e12,
                    operands=(torch.ones(4),), flush_cache=True)
    assert [(kw["device"], kw["repeats"], kw["flush_cache"]) for kw in timed] == [(torch.device("cuda", 0), 7, True)]
    assert result.median_s == 0.4 and result.mfu == pytest.approx(10**12 / 0.4 / 5e12)
    extra = runner.benchmark.extra_info
    assert extra["host_median_s"] == 0.5 and extra["device_median_s"] == 0.4


def test_a_benchmark_timed_at_another_shape_than_its_baseline_is_refused():
    """fitted_shape may shrink a shape to free memory; the test id stays, so the shape itself is checked."""
    session = SimpleNamespace(compared_mapping={
        "0001_base.json": {"test_gpu_matmul[bfloat16-16384x16384x16384]": {"extra_info": {"shape": [16384] * 3}}}})
    config = SimpleNamespace(getoption=lambda name, default=None: None, _benchmarksession=session)
    benchmark = FakeBenchmark([])
    benchmark.fullname = "test_gpu_matmul[bfloat16-16384x16384x16384]"
    runner = FlopsBenchmark(benchmark, config)
    with pytest.raises(pytest.fail.Exception, match=r"^--benchmark-compare: test_gpu_matmul\[bfloat16-16384x16384x16384\] "
                                                    r"timed 16384x16384x16384 in the baseline 0001_base.json but "
                                                    r"8192x8192x8192 in this run"):
        runner(lambda: None, flops=1, dtype="float32", device="cpu", shape=(8192,) * 3, rounds=1, warmup_rounds=0)
    assert benchmark.log == [], "refused before anything was timed"
    runner(lambda: None, flops=1, dtype="float32", device="cpu", shape=(16384,) * 3, rounds=1, warmup_rounds=0,
           peak=1e12)


def test_one_extra_buffer_is_its_exact_size_in_the_recorded_peak_memory():
    """The same work with one more 1 MiB buffer reads exactly 1 MiB more (the live-tensor tracker, no allocator)."""
    a, out = torch.ones(256, 256), torch.empty(256, 256)
    cpu = torch.device("cpu")
    plain = fixture.peak_memory(lambda: torch.matmul(a, a, out=out), lambda: None, cpu)
    leaky = fixture.peak_memory(lambda: (torch.matmul(a, a, out=out), torch.empty(2**18)), lambda: None, cpu)
    assert leaky["peak_memory_bytes"] - plain["peak_memory_bytes"] == 2**20


def test_the_cuda_peak_is_read_after_a_reset_and_less_what_was_allocated_before():
    calls = []

    class FakeCuda:
        allocated, peak = 100, 10_000  # the peak of an earlier benchmark, until it is reset

        def reset_peak_memory_stats(self, device):
            calls.append(("reset", device))
            self.peak = self.allocated

        def memory_allocated(self, device):
            return self.allocated

        def max_memory_allocated(self, device):
            return self.peak

    cuda = FakeCuda()

    def target():
        calls.append("call")
        cuda.peak = max(cuda.peak, cuda.allocated + 4096)  # a 4 KiB temporary inside the call

    assert fixture.cuda_peak_allocated(target, "cuda:0", cuda=cuda) == 4096
    assert calls == [("reset", "cuda:0"), "call"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_wrong_product_fails_the_benchmark_and_a_right_one_is_recorded(dtype):
    """A benchmark that times a fast wrong product fails with where and by how much; a right one records its check."""
    from accounting.health.faults import faulty, parse_fault

    config = SimpleNamespace(getoption=lambda name, default=None: None)
    runner = FlopsBenchmark(FakeBenchmark([]), config)
    case = timing.matmul_case(dtype, 64, 48, 32, "cpu")
    runner.check_result(case)
    record = runner.benchmark.extra_info["result_check"]
    assert record["ok"] and record["repeat_identical"] and record["excess"] <= 1 and record["seconds"] >= 0

    wrong = SimpleNamespace(fn=faulty(case.fn, parse_fault("flip:70:14")), operands=case.operands, dtype=dtype,
                            runs_as=case.runs_as)
    with pytest.raises(pytest.fail.Exception, match=rf"wrong result: {dtype} 64x48x32 product wrong: row 2, "):
        runner.check_result(wrong)
    assert runner.benchmark.extra_info["result_check"]["ok"] is False
