"""Timing order (sync before clocks, events), statistics, matmul cases and shape fitting — no timed asserts."""

import threading

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from jaxtyping import TypeCheckError, jaxtyped

from accounting import timing as timing_module
from accounting.errors import AccountingError, AccountingTypeError
from accounting.flops import matmul_flops
from accounting.hardware.clocks import EventClock, HostClock
from accounting.hardware.precision import float32_matmul_mode, tf32_enabled
from accounting.timing import (
    FP8_OUT_DTYPE,
    MIN_MATMUL_SIZE,
    Timing,
    fit_matmul_shape,
    matmul_bytes,
    matmul_case,
    should_flush_l2,
    time_fn,
    time_matmul,
)


class Recorder:
    """A fake device: logs every synchronize, clock read, event and call, in order."""

    def __init__(self, step=0.5):
        self.log = []
        self.time = 0.0
        self.step = step

    def synchronize(self):
        self.log.append("sync")

    def now(self):
        self.log.append("clock")
        self.time += self.step
        return self.time

    def work(self):
        self.log.append("fn")


def test_host_clock_synchronizes_before_every_clock_read():
    device = Recorder()
    clock = HostClock(synchronize=device.synchronize, now=device.now)
    time_fn(device.work, warmup=2, repeats=3, min_time_s=0, clock=clock)
    assert device.log[:2] == ["fn", "fn"]  # warm-up: untimed
    timed = device.log[2:]
    assert timed[0] == "sync"  # warm-up work finished before the first clock read
    assert timed[1:] == ["sync", "clock", "fn", "sync", "clock"] * 3
    assert all(device.log[i - 1] == "sync" for i, entry in enumerate(device.log) if entry == "clock")


class FakeEvent:
    def __init__(self, log, clock):
        self.log, self.clock, self.at = log, clock, None

    def record(self, stream=None):
        self.log.append(f"record#{id(self) % 997}")
        self.stream = stream
        self.at = self.clock.now_silent()

    def synchronize(self):
        self.log.append("event.synchronize")

    def elapsed_time(self, end):
        self.log.append("elapsed_time")
        return (end.at - self.at) * 1e3  # milliseconds, as CUDA events report


class FakeGpu(Recorder):
    def now_silent(self):
        self.time += self.step
        return self.time

    def event(self):
        return FakeEvent(self.log, self)

    def sleep(self, cycles):
        self.log.append("sleep")


@pytest.fixture
def fake_streams(monkeypatch):
    """torch.cuda.current_stream without CUDA: one named stream per device, and cuda:0 the current device."""
    def current_stream(device=None):
        index = 0 if device is None else torch.device(device).index
        return f"stream of cuda:{0 if index is None else index}"
    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)


def test_event_clock_records_around_the_work_and_waits_before_reading(fake_streams):
    gpu = FakeGpu(step=0.25)
    clock = EventClock("cuda:0", event_factory=gpu.event, synchronize=gpu.synchronize, sleep=gpu.sleep)
    timing = time_fn(gpu.work, device="cuda:0", warmup=1, repeats=2, min_time_s=0, clock=clock)
    log = [entry if not entry.startswith("record") else "record" for entry in gpu.log]
    # A spin is queued before each start event: the GPU is busy while the host launches fn, so the
    # start event is stamped when the spin ends, after fn's kernels are queued (no launch latency timed).
    assert log == ["fn", "sync"] + ["sleep", "record", "fn", "record", "event.synchronize", "elapsed_time"] * 2
    assert "clock" not in gpu.log  # no host clock anywhere
    assert timing.samples == (0.25, 0.25)


def test_event_clock_records_on_the_benchmarked_devices_stream(fake_streams):
    """Timing cuda:1 while cuda:0 is current: the events go on cuda:1's stream, not the current device's."""
    gpu = FakeGpu()
    events = []
    clock = EventClock("cuda:1", event_factory=lambda: events.append(gpu.event()) or events[-1],
                       synchronize=gpu.synchronize, sleep=gpu.sleep)
    time_fn(gpu.work, device="cuda:1", warmup=0, repeats=2, min_time_s=0, clock=clock)
    assert [event.stream for event in events] == ["stream of cuda:1"] * 4


class FlushingClock(HostClock):
    def __init__(self, device):
        super().__init__(synchronize=device.synchronize, now=device.now)
        self.device = device

    def flush_cache(self):
        self.device.log.append("flush")


class FlushingEventClock(EventClock):
    def flush_cache(self):
        self._sleep.__self__.log.append("flush")


def test_event_clock_spins_then_flushes_then_starts(fake_streams):
    """With a flush: spin, flush, start event, fn — the flush is queued behind the spin, untimed."""
    gpu = FakeGpu()
    clock = FlushingEventClock("cuda:0", event_factory=gpu.event, synchronize=gpu.synchronize, sleep=gpu.sleep)
    time_fn(gpu.work, device="cuda:0", warmup=0, repeats=2, min_time_s=0, flush_cache=True, clock=clock,
            count_flops=False)
    log = [entry if not entry.startswith("record") else "record" for entry in gpu.log]
    assert log == ["sync"] + ["sleep", "flush", "record", "fn", "record", "event.synchronize", "elapsed_time"] * 2


def test_cache_flush_happens_before_the_start_mark_so_it_is_not_timed():
    device = Recorder()
    time_fn(device.work, warmup=0, repeats=2, min_time_s=0, flush_cache=True, clock=FlushingClock(device),
            count_flops=False)
    assert device.log == ["sync"] + ["flush", "sync", "clock", "fn", "sync", "clock"] * 2


def test_repeats_until_min_time_then_caps_at_max_repeats():
    device = Recorder(step=0.05)  # each call "takes" 0.05 s between its two clock reads
    clock = HostClock(synchronize=device.synchronize, now=device.now)
    timing = time_fn(device.work, warmup=0, repeats=3, min_time_s=1.0, clock=clock)
    assert len(timing.samples) == 20
    timing = time_fn(device.work, warmup=0, repeats=3, min_time_s=1.0, max_repeats=5, clock=clock)
    assert len(timing.samples) == 5


@given(st.lists(st.floats(1e-6, 10.0), min_size=1, max_size=200))
def test_timing_statistics_match_numpy(samples):
    timing = Timing.from_samples(samples)
    assert timing.median == pytest.approx(np.median(samples))
    q1, q3 = np.percentile(samples, [25, 75])  # linear interpolation, as statistics' "inclusive"
    assert timing.iqr == pytest.approx(q3 - q1, abs=1e-12)
    assert timing.samples == tuple(samples)
    assert timing.min == min(samples)


@pytest.mark.parametrize("bad, message", [
    (float("nan"), r"^sample 1 must be finite, got nan"),
    (float("inf"), r"^sample 1 must be finite, got inf"),
    (-0.5, r"^sample 1 must be non-negative, got -0.5"),
])
def test_timing_rejects_impossible_samples(bad, message):
    with pytest.raises(AccountingError, match=message):
        Timing.from_samples([0.5, bad, 0.25])


def test_timing_without_flops_refuses_throughput():
    with pytest.raises(AccountingError, match=r"^this timing has no flops"):
        Timing.from_samples([1.0]).flop_per_s
    with pytest.raises(AccountingError, match=r"^a timing needs at least one sample"):
        Timing.from_samples([])


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(fn=42), AccountingTypeError, r"^fn must be callable, got 42"),
    (dict(repeats=0), AccountingError, r"^repeats must be a positive integer, got 0"),
    (dict(warmup=-1), AccountingError, r"^warmup must be a non-negative integer, got -1"),
    (dict(min_time_s=-0.5), AccountingError, r"^min_time_s must be non-negative, got -0.5"),
    (dict(repeats=10, max_repeats=5), AccountingError, r"^max_repeats \(5\) is below repeats \(10\)"),
    (dict(device="tpu"), AccountingError, r"^unknown device 'tpu'"),
    (dict(device="meta"), AccountingError, r"^device 'meta' cannot be timed: only cpu and cuda can"),
    (dict(device="meta", clock=HostClock()), AccountingError, r"^device 'meta' cannot be timed"),
])
def test_time_fn_rejects_bad_arguments(kwargs, error, message):
    kwargs = {"fn": lambda: None, **kwargs}
    with pytest.raises(error, match=message):
        time_fn(kwargs.pop("fn"), **kwargs)


def test_time_fn_refuses_cuda_where_there_is_none(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(AccountingError, match=r"^device 'cuda' is not available: torch.cuda.is_available\(\) is False"):
        time_fn(lambda: None, device="cuda")


def test_time_matmul_refuses_meta_tensors():
    a = torch.ones(64, 64, device="meta")
    with pytest.raises(AccountingError, match=r"^device 'meta' cannot be timed: only cpu and cuda can"):
        time_matmul(a, a)


def test_time_matmul_counts_batched_flops():
    a, b = torch.ones(3, 8, 4), torch.ones(4, 5)
    timing = time_matmul(a, b, warmup=0, repeats=2, min_time_s=0)
    assert timing.flops == matmul_flops((3, 8, 4), (4, 5)) == 2 * 3 * 8 * 4 * 5
    assert len(timing.samples) == 2 and timing.median > 0


def test_time_matmul_shapes_are_checked_by_its_annotation():
    beartype = pytest.importorskip("beartype").beartype   # a test extra: skipped, not a collection error
    checked = jaxtyped(typechecker=beartype)(time_matmul)
    assert checked(torch.ones(2, 3, 4), torch.ones(4, 5), warmup=0, repeats=1, min_time_s=0.0).flops == 240
    with pytest.raises(TypeCheckError):
        checked(torch.ones(3, 4), torch.ones(5, 6), warmup=0, repeats=1, min_time_s=0.0)


def test_time_matmul_sends_float8_to_scaled_mm():
    a = torch.ones(16, 16).to(torch.float8_e4m3fn)
    with pytest.raises(AccountingError, match=r"^a is torch.float8_e4m3fn: time float8 with matmul_case"):
        time_matmul(a, a)


def test_time_matmul_needs_one_device():
    with pytest.raises(AccountingError, match=r"^a is on cpu but b is on meta"):
        time_matmul(torch.ones(2, 2), torch.ones(2, 2, device="meta"))


@pytest.mark.parametrize("dtype, torch_dtype, tolerance", [
    ("float64", torch.float64, 1e-12),
    ("float32", torch.float32, 1e-5),
    ("bf16", torch.bfloat16, 2e-2),
    ("fp16", torch.float16, 2e-3),
])
def test_matmul_case_computes_the_product(dtype, torch_dtype, tolerance):
    case = matmul_case(dtype, 24, 40, 8, seed=3)
    a, b = case.operands[:2]
    assert (a.dtype, b.dtype, tuple(a.shape), tuple(b.shape)) == (torch_dtype, torch_dtype, (24, 40), (40, 8))
    expected = a.double() @ b.double()
    result = case.fn()
    assert result.dtype == torch_dtype
    scale = expected.abs().max().item()
    assert (result.double() - expected).abs().max().item() <= tolerance * scale * 8
    assert case.flops == 2 * 24 * 40 * 8
    assert matmul_bytes(24, 40, 8, dtype) == sum(x.nbytes for x in case.operands)


@pytest.mark.parametrize("dtype, a_dtype", [
    ("float8_e4m3fn", torch.float8_e4m3fn),
    ("float8_e5m2", torch.float8_e5m2),
])
def test_fp8_case_follows_scaled_mm_layout_rules(dtype, a_dtype):
    case = matmul_case(dtype, 32, 48, 64)
    a, b, scale_a, scale_b = case.operands
    assert a.dtype == a_dtype and b.dtype == torch.float8_e4m3fn  # e5m2 x e5m2 is not a cuBLASLt pairing
    assert a.stride() == (48, 1)  # mat1 row-major
    assert b.shape == (48, 64) and b.stride() == (1, 48)  # mat2 column-major
    assert scale_a.dtype == scale_b.dtype == torch.float32 and scale_a.dim() == 0
    result = case.fn()
    assert result.dtype == FP8_OUT_DTYPE and result.shape == (32, 64)
    expected = a.float() @ b.float()
    assert torch.allclose(result.float(), expected, rtol=2e-2, atol=2e-2 * expected.abs().max().item())


@pytest.mark.parametrize("k, n, message", [
    (40, 64, r"^float8 matmul \(torch._scaled_mm\) needs k divisible by 16, got k=40"),
    (48, 20, r"^float8 matmul \(torch._scaled_mm\) needs n divisible by 16, got n=20"),
])
def test_fp8_case_rejects_misaligned_sizes(k, n, message):
    with pytest.raises(AccountingError, match=message):
        matmul_case("fp8", 32, k, n)


def test_tf32_case_needs_cuda():
    with pytest.raises(AccountingError, match=r"^tf32 cannot run on device 'cpu': tf32 is a CUDA tensor-core mode; a CPU has no tf32"):
        matmul_case("tf32", 16, 16, 16)


def test_matmul_case_rejects_bad_sizes():
    with pytest.raises(AccountingError, match=r"^k must be a positive integer, got 0"):
        matmul_case("float32", 4, 0, 4)


def test_float32_on_cuda_runs_without_tf32_whatever_the_global_flag():
    with float32_matmul_mode(tf32=True):
        with timing_module._float32_mode(torch.device("cuda", 0), torch.float32, torch.float32):
            assert not tf32_enabled()
        assert tf32_enabled()  # restored
        for device, dtype in (("cpu", torch.float32), ("cuda", torch.bfloat16)):
            with timing_module._float32_mode(torch.device(device), dtype, dtype):
                assert tf32_enabled()  # nothing to set: no TF32 on a CPU, not a float32 matmul


def test_time_matmul_runs_every_call_inside_the_float32_mode(monkeypatch):
    entered, asked = [], []

    class Mode:
        def __enter__(self):
            entered.append(True)

        def __exit__(self, *exc_info):
            return False

    def fake_mode(device, *dtypes):
        asked.append((torch.device(device).type, *dtypes))
        return Mode()

    monkeypatch.setattr(timing_module, "_float32_mode", fake_mode)
    timing = time_matmul(torch.ones(8, 8), torch.ones(8, 8), warmup=2, repeats=3, min_time_s=0)
    assert asked == [("cpu", torch.float32, torch.float32)]
    assert len(entered) == 1 + 2 + len(timing.samples)  # the output's allocation, warm-up, timed calls


def test_l2_is_flushed_on_cuda_only_when_the_operands_fit(monkeypatch):
    monkeypatch.setattr(timing_module, "flush_bytes", lambda device: 50 * 2**20)
    small, big = torch.ones(1024, 1024), torch.ones(4096, 4096)  # 4 MiB, 64 MiB
    assert should_flush_l2("cuda:0", small, small.t())  # one storage, counted once
    assert not should_flush_l2("cuda:0", small, big)
    assert not should_flush_l2("cpu", small)


@given(
    shape=st.tuples(*[st.integers(1, 64).map(lambda x: 256 * x)] * 3),
    dtype=st.sampled_from(["float32", "bf16", "fp8"]),
    free_mib=st.integers(1, 64 * 1024),
)
def test_fitted_shape_fits_the_budget_or_is_refused(shape, dtype, free_mib):
    free = free_mib * 2**20
    fitted = fit_matmul_shape(shape, dtype, free)
    if matmul_bytes(*shape, dtype) <= 0.8 * free:
        assert fitted == shape  # fits already: untouched
    elif fitted is None:
        # refused only when halving would leave an edge below the minimum
        assert min(shape) // 2 < MIN_MATMUL_SIZE or matmul_bytes(*[s // 2 for s in shape], dtype) > 0.8 * free
    else:
        assert matmul_bytes(*fitted, dtype) <= 0.8 * free
        assert all(f <= s and f % 16 == 0 and f >= MIN_MATMUL_SIZE for f, s in zip(fitted, shape))


def test_fit_matmul_shape_gives_up_when_halving_stops_shrinking():
    """min_size <= 16: edges stop at 16 and halving changes nothing; it must return None, not spin."""
    result = []
    worker = threading.Thread(target=lambda: result.append(fit_matmul_shape((64, 64, 64), "bf16", 100, min_size=16)),
                              daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "fit_matmul_shape loops forever"
    assert result == [None]
    assert fit_matmul_shape((64, 64, 64), "bf16", 2**20, min_size=16) == (64, 64, 64)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(fraction=-1), AccountingError, r"^fraction must be positive, got -1"),
    (dict(fraction=0), AccountingError, r"^fraction must be positive, got 0"),
    (dict(fraction=1.5), AccountingError, r"^fraction must be at most 1 .*got 1.5"),
    (dict(fraction=float("nan")), AccountingError, r"^fraction must be finite, got nan"),
    (dict(extra_bytes=-1), AccountingError, r"^extra_bytes must be a non-negative integer, got -1"),
    (dict(extra_bytes="1 GiB"), AccountingTypeError, r"^extra_bytes must be a non-negative integer, got '1 GiB'"),
    (dict(min_size=0), AccountingError, r"^min_size must be a positive integer, got 0"),
])
def test_fit_matmul_shape_rejects_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        fit_matmul_shape((1024, 1024, 1024), "bf16", 2**30, **kwargs)


def test_time_back_to_back_refuses_bad_arguments_naming_them():
    from accounting.timing import time_back_to_back

    with pytest.raises(AccountingTypeError, match="fn must be callable, got 3"):
        time_back_to_back(3, seconds=1.0)
    with pytest.raises(AccountingError, match="seconds"):
        time_back_to_back(lambda: None, seconds=-1.0)
    with pytest.raises(AccountingError, match="max_calls"):
        time_back_to_back(lambda: None, seconds=1.0, max_calls=0)


def test_time_back_to_back_on_the_cpu_stops_at_max_calls():
    from accounting.timing import time_back_to_back

    calls = []
    window = time_back_to_back(lambda: calls.append(1), seconds=60.0, max_calls=37, flops=10)
    assert window.calls == len(calls) == 37 == sum(count for count, _ in window.chunks)
