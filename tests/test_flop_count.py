"""FLOPs counted for you: time_fn and flops_benchmark without flops=, against the hand-counted formulas.

Truths: :func:`accounting.matmul_flops` and :func:`accounting.einsum_flops` (themselves
checked against ``FlopCounterMode`` in test_flops.py), and a fake clock's log for where the
counted call happens (never between two clock reads). ``count_flops`` itself is held against
``FlopCounterMode`` run here on the same functions: a mismatch names every operator counted, and
says so when none was.
"""

import time
import warnings
from types import SimpleNamespace

import einops
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from accounting import AccountingError, AccountingTypeError, einsum_flops, matmul_flops, time_fn
from accounting.bench import fixture
from accounting.bench.fixture import FlopsBenchmark
from accounting.flop_count import FlopCount, FlopsMismatchWarning, count_flops, counted_total, flops_mismatch
from accounting.hardware.clocks import HostClock
from accounting.hardware.devices import DeviceInfo
from tests.support.strategies import einsum_cases
from tests.test_bench_fixture import FakeBenchmark
from tests.test_timing import Recorder

QUICK = {"warmup": 1, "repeats": 1, "min_time_s": 0}


@st.composite
def matrix_shapes(draw):
    """(a, b) for torch.matmul with at least 2-D operands (1-D products run as mv/dot, uncounted)."""
    m, k, n = (draw(st.integers(1, 24)) for _ in range(3))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    b_batch = batch[draw(st.integers(0, len(batch))):]
    return batch + (m, k), b_batch + (k, n)


@given(matrix_shapes())
@example(((64, 32), (32, 16)))
@example(((2, 3, 8, 4), (4, 5)))
def test_time_fn_counts_matmul_flops_when_none_are_given(operands):
    a, b = (torch.randn(shape) for shape in operands)
    timing = time_fn(lambda: a @ b, **QUICK)
    assert timing.flops == matmul_flops(*operands)
    assert timing.flop_count.total == timing.flops and timing.flop_count.source == "fn"


@given(einsum_cases(operands=2, allow_ellipsis=True))
@example(("batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2", [(2, 3, 4), (2, 5, 4)]))
def test_time_fn_counts_einsum_flops_on_meta_through_count_fn(case):
    pattern, shapes = case
    real = [torch.randn(shape) for shape in shapes]
    meta = [torch.empty(shape, device="meta") for shape in shapes]
    expected = einsum_flops(pattern, *shapes)
    timing = time_fn(lambda: einops.einsum(*real, pattern), count_fn=lambda: einops.einsum(*meta, pattern), **QUICK)
    assert timing.flop_count.total == expected and timing.flop_count.source == "count_fn"
    assert timing.flops == (expected or None)  # no matmul work: no flops, and flop_per_s says why
    if not expected:
        with pytest.raises(AccountingError, match=r"^FlopCounterMode counted 0 matmul FLOPs in count_fn"):
            timing.flop_per_s


def test_counted_call_is_the_first_warm_up_never_a_timed_one():
    device = Recorder()
    a = torch.ones(8, 8)

    def work():
        device.work()
        return a @ a

    clock = HostClock(synchronize=device.synchronize, now=device.now)
    timing = time_fn(work, warmup=2, repeats=3, min_time_s=0, clock=clock)
    assert device.log[:2] == ["fn", "fn"]  # the counted call is one of the two warm-ups: no extra call
    assert device.log[2:] == ["sync"] + ["sync", "clock", "fn", "sync", "clock"] * 3
    assert timing.flops == 2 * 8**3  # one call's FLOPs, not two


def test_without_warm_up_the_count_is_an_extra_untimed_call():
    device = Recorder()
    a = torch.ones(4, 4)
    clock = HostClock(synchronize=device.synchronize, now=device.now)
    timing = time_fn(lambda: (device.work(), a @ a), warmup=0, repeats=2, min_time_s=0, clock=clock)
    assert device.log == ["fn", "sync"] + ["sync", "clock", "fn", "sync", "clock"] * 2
    assert timing.flops == 2 * 4**3


@pytest.mark.parametrize("count_option, calls", [
    pytest.param(None, 2, id="auto-no-extra-call"),
    pytest.param(True, 3, id="forced-extra-call"),
    pytest.param(False, 2, id="off"),
])
def test_a_given_flops_costs_no_extra_call_unless_asked(count_option, calls):
    device = Recorder()
    a = torch.ones(4, 4)
    clock = HostClock(synchronize=device.synchronize, now=device.now)
    timing = time_fn(lambda: (device.work(), a @ a), warmup=0, repeats=2, min_time_s=0, clock=clock,
                     flops=2 * 4**3, count_flops=count_option)
    assert device.log.count("fn") == calls
    assert timing.flops == 2 * 4**3
    assert (timing.flop_count is None) == (count_option is not True)


def test_a_given_flops_wins_and_a_mismatch_warns():
    a = torch.ones(16, 16)
    with pytest.warns(FlopsMismatchWarning, match=r"^flops=9000 given, but FlopCounterMode counted 8192 in fn "
                                                  r"\(aten.mm: 8192\): 9.9% apart"):
        timing = time_fn(lambda: a @ a, flops=9000, **QUICK)
    assert timing.flops == 9000 and timing.flop_count.total == 2 * 16**3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert time_fn(lambda: a @ a, flops=8250, **QUICK).flops == 8250  # 0.7 % apart: within 1 %


@pytest.mark.parametrize("given, counted, reported", [
    pytest.param(1010, 1000, False, id="1%-is-within"),
    pytest.param(1011, 1000, True, id="just-over"),
    pytest.param(989, 1000, True, id="below"),
    pytest.param(5, 0, True, id="nothing-counted"),
    pytest.param(0, 0, False, id="both-zero"),
])
def test_mismatch_threshold(given, counted, reported):
    assert (flops_mismatch(given, FlopCount(counted)) is not None) is reported


def test_a_fn_that_raises_is_named():
    def broken():
        raise RuntimeError("shapes (3, 4) and (5, 6) cannot be multiplied")

    with pytest.raises(AccountingError, match=r"^counting FLOPs: fn raised RuntimeError: shapes \(3, 4\)"):
        time_fn(broken, **QUICK)
    with pytest.raises(AccountingError, match=r"^counting FLOPs: count_fn raised RuntimeError"):
        time_fn(lambda: None, count_fn=broken, **QUICK)
    with pytest.raises(AccountingTypeError, match=r"^count_fn must be callable, got 3"):
        time_fn(lambda: None, count_fn=3, **QUICK)
    with pytest.raises(AccountingTypeError, match=r"^count_flops must be True, False or None, got 'yes'"):
        time_fn(lambda: None, count_flops="yes", **QUICK)


# ---- the pytest fixture ----------------------------------------------------------------------


def _runner(log, *, stash=True):
    config = SimpleNamespace(getoption=lambda name, default=None: None, **({"stash": pytest.Stash()} if stash else {}))
    runner = FlopsBenchmark(FakeBenchmark(log), config)
    runner._infos["cpu"] = DeviceInfo("cpu", "fake CPU", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}),
                                      cores=1, clock_ghz=1.0)
    return runner


@given(matrix_shapes())
def test_flops_benchmark_counts_when_no_flops_are_given(operands):
    log = []
    a, b = (torch.randn(shape) for shape in operands)
    runner = _runner(log)
    result = runner(lambda: log.append("fn") or a @ b, dtype="float32", device="cpu", rounds=2, warmup_rounds=0)
    expected = matmul_flops(*operands)
    assert log[0] == "fn" and log[1] != "fn"  # counted once, before the first round's set-up
    assert result.flops == expected == runner.benchmark.extra_info["flops"]
    assert result.mfu == pytest.approx(expected / 0.5 / 32e9)  # fake: 0.5 s per round, 1 core x 1 GHz x 32
    extra = runner.benchmark.extra_info
    assert extra["flops_source"] == "fn" and extra["flops_counted"] == expected
    assert sum(extra["flops_by_operator"].values()) == expected and extra["flops_mismatch"] is None


def test_flops_benchmark_counts_a_meta_version_and_reports_a_mismatch():
    log = []
    runner = _runner(log)
    x = torch.ones(32, 64)
    meta = torch.empty(32, 64, device="meta")
    result = runner(lambda: x @ x.T, flops=10, count_fn=lambda: meta @ meta.T, dtype="float32", device="cpu",
                    rounds=1, warmup_rounds=0)
    assert result.flops == 10  # the given figure wins
    extra = runner.benchmark.extra_info
    assert extra["flops_source"] == "given" and extra["flops_counted"] == matmul_flops((32, 64), (64, 32))
    assert extra["flops_mismatch"].startswith("flops=10 given, but FlopCounterMode counted 131072 in count_fn")
    summary = runner.config.stash[fixture.SUMMARY]
    assert any("FLOPs mismatch: flops=10 given" in line for line in summary)


def test_flops_benchmark_with_given_flops_adds_no_call():
    log = []
    runner = _runner(log, stash=False)
    runner(lambda: log.append("fn"), flops=100, dtype="float32", device="cpu", rounds=2, warmup_rounds=1,
           measure_memory=False)  # the memory call is not a counting call
    assert log.count("fn") == 3
    assert runner.benchmark.extra_info["flops_counted"] is None


@pytest.mark.parametrize("kwargs, error, message", [
    pytest.param({"fn": lambda: None}, AccountingError, r"^FlopCounterMode counted 0 matmul FLOPs in fn",
                 id="nothing-to-count"),
    pytest.param({"fn": lambda: 1 / 0}, AccountingError, r"^counting FLOPs: fn raised ZeroDivisionError",
                 id="fn-raises"),
    pytest.param({"fn": lambda: None, "count_flops": False}, AccountingError,
                 r"^flops_benchmark needs flops= when count_flops=False", id="nothing-at-all"),
    pytest.param({"fn": "a @ b"}, AccountingTypeError, r"^fn must be callable, got 'a @ b'", id="not-callable"),
    pytest.param({"fn": lambda: None, "flops": -1}, AccountingError, r"^flops must be non-negative, got -1",
                 id="negative-flops"),
])
def test_flops_benchmark_bad_input(kwargs, error, message):
    log = []
    with pytest.raises(error, match=message):
        _runner(log)(dtype="float32", device="cpu", rounds=1, warmup_rounds=0, **kwargs)
    assert "clock start" not in log  # refused before any timing


def test_count_flops_records_its_own_time():
    a = torch.ones(64, 64)
    count = count_flops(lambda: a @ a)
    assert count.total == 2 * 64**3 and count.seconds > 0 and count.by_operator == {"aten.mm": 2 * 64**3}


# ---- count_flops against FlopCounterMode: the mismatch message, the smallest counts, the seconds -----------


def _counted_by_torch(fn) -> dict:
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return {str(op): int(flops) for op, flops in counter.get_flop_counts()["Global"].items()}


def test_a_mismatch_names_every_operator_counted():
    a, batch = torch.ones(8, 4), torch.ones(3, 4, 5)

    def two_operators():
        return a @ a.T, batch @ batch.transpose(1, 2)
    count = count_flops(two_operators)
    by_torch = _counted_by_torch(two_operators)
    assert count.by_operator == by_torch and len(by_torch) == 2
    message = flops_mismatch(1, count)
    listed = ", ".join(f"{name}: {flops}" for name, flops in by_torch.items())
    assert f"counted {sum(by_torch.values())} in fn ({listed}): " in message


def test_a_mismatch_against_nothing_counted_says_so():
    vector = torch.ones(16)
    count = count_flops(lambda: vector @ vector)  # aten.dot: invisible to FlopCounterMode
    assert count.total == 0 and count.by_operator == {}
    assert flops_mismatch(32, count) == "flops=32 given, but FlopCounterMode counted 0 in fn (no matmul ops): nothing counted"


def test_the_smallest_counts_are_accepted_and_only_zero_refused():
    one_by_one = torch.ones(1, 1)
    smallest = count_flops(lambda: one_by_one @ one_by_one)
    assert counted_total(smallest) == sum(_counted_by_torch(lambda: one_by_one @ one_by_one).values()) == 2
    assert counted_total(FlopCount(1, {"custom": 1})) == 1  # any positive count, however it was made


def test_the_seconds_are_the_counted_calls_own_wall_time():
    """Bracketed by the test's own clock: at least the time the function sleeps, at most the whole call."""
    a = torch.ones(4, 4)

    def slow():
        time.sleep(0.02)
        return a @ a
    before = time.perf_counter()
    count = count_flops(slow)
    after = time.perf_counter()
    assert 0.02 <= count.seconds <= after - before


# ---- fp8: torch._scaled_mm, which FlopCounterMode counts only from torch 2.7 -------------------------------
# torch 2.4 to 2.6 have no _scaled_mm entry in torch.utils.flop_counter.flop_registry (added by
# pytorch/pytorch#144973, in 2.7): dropping the entry here is that torch.


def _fp8_product(m, k, n, device="meta"):
    """``torch._scaled_mm`` of an (m, k) by (k, n) e4m3 product, mat2 column-major, as the benchmarks build it."""
    a = torch.zeros(m, k, device=device).to(torch.float8_e4m3fn)
    b = torch.zeros(n, k, device=device).to(torch.float8_e4m3fn).t()
    scale = torch.ones((), device=device)
    return lambda: torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)


@pytest.fixture
def torch_without_a_scaled_mm_formula(monkeypatch):
    monkeypatch.delitem(flop_counter.flop_registry, torch.ops.aten._scaled_mm, raising=False)


@pytest.mark.parametrize("m, k, n", [(16, 32, 48), (128, 64, 32), (48, 16, 16)])
def test_scaled_mm_is_counted_where_torch_has_no_formula(torch_without_a_scaled_mm_formula, m, k, n):
    count = count_flops(_fp8_product(m, k, n))
    assert count.total == matmul_flops((m, k), (k, n))  # 2 FLOPs per multiply-add, as for any matmul
    assert count.by_operator == {"aten._scaled_mm": matmul_flops((m, k), (k, n))}


def test_scaled_mm_is_counted_once_where_torch_has_its_own_formula():
    fn = _fp8_product(32, 64, 16)
    assert count_flops(fn).by_operator == _counted_by_torch(fn)  # torch's formula kept, nothing added twice


def test_flops_benchmark_times_fp8_without_flops_where_torch_has_no_formula(torch_without_a_scaled_mm_formula):
    log = []
    runner = _runner(log)
    result = runner(_fp8_product(32, 48, 64, device="cpu"), dtype="fp8", device="cpu", peak=1e12, rounds=1,
                    warmup_rounds=0)
    assert result.flops == matmul_flops((32, 48), (48, 64)) == runner.benchmark.extra_info["flops_counted"]
