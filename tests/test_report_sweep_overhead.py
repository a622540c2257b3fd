"""The sweep's plan counts the wall time a GPU timer spends around each timed call, not only the calls' own time.

On CUDA :func:`accounting.timing.time_fn` queues a spin (:data:`~accounting.hardware.clocks.LAUNCH_COVER_CYCLES`
cycles) and perhaps an L2 flush before each call and synchronizes the host after it: for a product of a few µs
that is nearly all of the wall time. The truths: the simulated H200 (:mod:`tests.support.simulated_gpu`), on whose
virtual time line the package's own timer, clock and sweep run, and which runs the spin at its SM clock and the
flush at its memory bandwidth; and :func:`~accounting.timing.time_fn`'s own loop, run with a clock whose every call
takes a set time, for how many calls a shape gets.
"""

import pytest

from accounting.errors import AccountingError
from accounting.hardware.clocks import LAUNCH_COVER_CYCLES
from accounting.hardware.devices import DeviceInfo
from accounting.report import measure
from accounting.report import sweep as sweep_module
from accounting.report.measure import MatmulTimer, call_overhead_s, wave_grid
from accounting.report.sweep import TIME_SAFETY, Sweep
from accounting.timing import time_fn
from tests.support.simulated_gpu import L2_BYTES, MEMORY_BYTES_PER_S, SimulatedH200

H200 = DeviceInfo("cuda", "NVIDIA H200", 0, 150_109_880_320, compute_capability=(9, 0), multiprocessors=132)
CPU = DeviceInfo("cpu", "a CPU", None, 2**30)
TARGET_S = 0.02
"""The report's least time per shape (``run.MIN_SHAPE_TARGET_S``): small budgets time every shape this long."""
HOST_S = 60e-6
"""At most this much host time around a call beyond the device's spin and flush: launching three kernels and two
events and waking from the synchronize ("tens of µs", the clocks module)."""


@pytest.fixture
def gpu(monkeypatch):
    return SimulatedH200().install(monkeypatch)


def timed(gpu, timer, dtype, shape):
    """``timer(dtype, *shape)`` and the simulated wall time it took."""
    started = gpu.now()
    done = timer(dtype, *shape)
    return done, gpu.now() - started


# ---- what a call costs around it, measured -----------------------------------------------------------------------


def test_the_timer_measures_the_spin_the_flush_and_the_sync_around_each_call(gpu):
    """The spin runs ``LAUNCH_COVER_CYCLES`` at the GPU's clock, the flush writes twice the L2 at its bandwidth:
    each timed call of a small product costs that much wall time beyond its events, plus the host's few µs."""
    timer = MatmulTimer(H200, target_s=TARGET_S, case_factory=gpu.case_factory)
    timer("bfloat16", 1024, 1024, 1024)
    device_s = LAUNCH_COVER_CYCLES / (gpu.clock_mhz * 1e6) + 2 * L2_BYTES / MEMORY_BYTES_PER_S
    (overhead,) = timer.overheads[True]
    assert device_s <= overhead <= device_s + HOST_S
    assert timer.call_overhead_s == overhead


@pytest.mark.parametrize("dtype, shape", [
    pytest.param("bfloat16", (1024, 1024, 1024), id="bf16-1024"),
    pytest.param("bfloat16", (2048, 2048, 2048), id="bf16-2048"),
    pytest.param("bfloat16", (3072, 3072, 3072), id="bf16-3072"),
    pytest.param("float8_e4m3fn", (2048, 4096, 2048), id="fp8"),
])
def test_the_plan_for_a_fast_shape_is_the_wall_time_it_takes(gpu, dtype, shape):
    """Planned from a smaller shape timed before it (its calls' own time known), a fast shape's time is what it then
    takes: on today's plan, which counts only the calls' own time, 2-30 times too short."""
    planner = MatmulTimer(H200, target_s=TARGET_S, case_factory=gpu.case_factory)
    planner("bfloat16", 512, 512, 512)
    done, wall_s = timed(gpu, MatmulTimer(H200, target_s=TARGET_S, case_factory=gpu.case_factory), dtype, shape)
    assert planner.expected_wall_s(done.seconds) == pytest.approx(wall_s, rel=0.1)


# ---- the planning arithmetic ----------------------------------------------------------------------------------------


class SetClock:
    """A clock each of whose timed calls takes ``seconds`` (time_fn's loop, without a device)."""

    def __init__(self, seconds):
        self.seconds = seconds

    def synchronize(self):
        pass

    def mark(self):
        return 0.0

    def elapsed(self, start, end):
        return self.seconds

    def flush_cache(self):
        pass


def enumerated_wall_s(timer, per_call_s, overhead_s):
    """The untimed calls, then the calls time_fn makes (its own loop, counted) each with ``overhead_s`` around it."""
    calls = len(time_fn(lambda: None, clock=SetClock(per_call_s), warmup=0, repeats=measure.MIN_REPEATS,
                        min_time_s=timer.target_s, max_repeats=measure.MAX_REPEATS, flops=1).samples)
    untimed = 1 + (measure.WARMUP_CALLS_FAST if per_call_s < measure.SLOW_CALL_S else 0)
    return untimed * per_call_s + calls * (per_call_s + overhead_s), calls


PER_CALL_S = [pytest.param(seconds, id=f"{seconds:g}s") for seconds in (2e-6, 1e-4, 2.5e-4, 3e-3, 0.07, 0.4)]


@pytest.mark.parametrize("per_call_s", PER_CALL_S)
def test_a_gpu_plan_counts_every_call_time_fn_makes_with_its_overhead(per_call_s):
    timer = MatmulTimer(DeviceInfo("cuda", "a GPU", 0, 2**30), target_s=0.2)
    overhead_s = 1.5e-4
    timer.overheads[True].append(overhead_s)
    truth, calls = enumerated_wall_s(timer, per_call_s, overhead_s)
    assert abs(timer.expected_wall_s(per_call_s) - truth) <= per_call_s + overhead_s, "within one call of the count"


@pytest.mark.parametrize("per_call_s", PER_CALL_S)
def test_a_cpu_plan_counts_the_calls_alone(per_call_s):
    """The host clock adds nothing around a call: the CPU's plan is its calls' time, as before."""
    timer = MatmulTimer(CPU, target_s=0.2)
    truth, _ = enumerated_wall_s(timer, per_call_s, 0.0)
    assert abs(timer.expected_wall_s(per_call_s) - truth) <= per_call_s
    timer("float32", 64, 64, 64)
    assert timer.overheads == {True: [], False: []} and timer.call_overhead_s == 0.0


def test_the_plan_uses_the_flushing_calls_overhead_where_both_were_seen():
    """A shape whose operands fit in L2 pays for a flush each call; a plan that is short overruns, so it is used."""
    timer = MatmulTimer(DeviceInfo("cuda", "a GPU", 0, 2**30), target_s=0.2)
    timer.overheads = {True: [1.6e-4, 1.5e-4, 5e-3], False: [1.2e-4]}
    assert timer.call_overhead_s == 1.6e-4, "the median: one slow shape (a busy host) does not move it"
    timer.overheads[True].clear()
    assert timer.call_overhead_s == 1.2e-4


@pytest.mark.parametrize("wall_s, samples, message", [
    pytest.param(0.01, [], "at least one timed call", id="no-calls"),
    pytest.param(-0.01, [1e-3], "wall_s must be non-negative, got -0.01", id="negative-wall"),
])
def test_call_overhead_needs_calls_and_a_wall_time(wall_s, samples, message):
    with pytest.raises(AccountingError, match=message):
        call_overhead_s(wall_s, samples)


def test_a_plan_for_a_negative_time_is_an_error():
    with pytest.raises(AccountingError, match="per_call_s must be non-negative, got -1e-05"):
        MatmulTimer(CPU, target_s=0.2).expected_wall_s(-1e-5)


# ---- the sweep of small shapes --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtypes", [pytest.param(["bfloat16"], id="bf16"), pytest.param(["float8_e4m3fn"], id="fp8"),
                                    pytest.param(["bfloat16", "float8_e4m3fn"], id="both")])
def test_a_sweep_of_small_shapes_keeps_each_shape_within_its_plan_and_ends_within_its_budget(gpu, monkeypatch, dtypes):
    """The sweep tries a shape only when ``TIME_SAFETY`` × its planned time fits before its deadline: that is what
    keeps it within its budget, and holds only if no shape takes longer than that."""
    planned = {}
    plan = sweep_module.predict_seconds

    def recorded(known, m, k, n, expected_wall_s=None):
        return planned.setdefault((m, k, n), plan(known, m, k, n, expected_wall_s))

    monkeypatch.setattr(sweep_module, "predict_seconds", recorded)
    timer = MatmulTimer(H200, target_s=TARGET_S, case_factory=gpu.case_factory, telemetry="cuda:0")
    budget_s = 0.5
    sweep = Sweep(timer, budget_s=budget_s, start_size=512, max_size=2048, clock=gpu.now,
                  expected_wall_s=timer.expected_wall_s, waves=wave_grid(H200))
    started = gpu.now()
    results = sweep.run(dtypes)
    assert gpu.now() - started <= budget_s
    rows = [done for dtype in dtypes for done in results[dtype] if done.shape in planned]
    assert len(rows) >= 5 * len(dtypes), "most of the sweep's shapes were planned"
    worst = max(rows, key=lambda done: done.wall_s / planned[done.shape])
    assert worst.wall_s <= TIME_SAFETY * planned[worst.shape], worst


def test_the_sweeps_flops_are_still_checked_against_the_counter():
    """A fast shape's first warm-up call is counted by FlopCounterMode, as time_fn counts it: a case whose stated FLOPs
    disagree with the counter is reported, and one whose FLOPs agree is not."""
    import dataclasses
    import warnings as warning_module

    from accounting.flop_count import FlopsMismatchWarning
    from accounting.hardware.devices import detect_device
    from accounting.report.measure import MatmulTimer
    from accounting.timing import matmul_case

    def doubled(*args, **options):
        case = matmul_case(*args, **options)
        return dataclasses.replace(case, flops=2 * case.flops)

    with pytest.warns(FlopsMismatchWarning):
        MatmulTimer(detect_device("cpu"), target_s=0.001, case_factory=doubled)("float32", 64, 64, 64)
    with warning_module.catch_warnings():
        warning_module.simplefilter("error", FlopsMismatchWarning)
        MatmulTimer(detect_device("cpu"), target_s=0.001)("float32", 64, 64, 64)
