"""Matmul benchmarks per dtype × shape from ``benchmarks.json``: TFLOP/s and MFU, bounded on both sides.

``pytest -m cpu`` runs every configured CPU shape; ``pytest -m gpu`` every GPU shape on every visible GPU (``--gpus 0,3`` picks some), each GPU its own test
(skipped, with the reason, without CUDA). A plain ``pytest`` runs only the quick
shapes (``--matmul-shapes`` overrides). Each benchmark records FLOPs, achieved TFLOP/s,
peak, MFU, device, dtype and shape in ``extra_info`` and fails when MFU is above
``MFU_CEILING`` (a wrong peak or a broken timer) or below the configured floor, and when
its product is wrong (checked once after the timed rounds, ``extra_info["result_check"]``).
"""

import statistics

import pytest
import torch
import torch.utils.benchmark

from accounting.bench.matrix import load_benchmarks
from accounting.hardware.devices import release_cached_memory
from accounting.flops import MFU_CEILING
from accounting.hardware.peaks import chip_row
from accounting.bench.fixture import add_summary_line
from accounting.bench.shapes import fitted_shape
from accounting.bench.skips import gpu_device_params, gpu_skip_reason, native_skip_reason, peak_or_skip, shape_mode
from accounting.timing import matmul_case, time_matmul

TIMER_AGREEMENT = (0.9, 1.1)
"""time_matmul's median over torch.utils.benchmark.Timer's, same op and thread count, must fall in here."""
TIMER_SHAPE = 1024
TIMER_MIN_TIME_S = 0.2
TIMER_PAIRS = 5
"""Interleaved (ours, theirs) measurements; the ratio is their median, so a burst of load hits both."""


def _points(config, kind):
    matrix = load_benchmarks(config.getoption("benchmarks_json")).device(kind)
    quick = shape_mode(config) == "quick"
    shapes = list(matrix.shapes) + [shape for shape in matrix.quick_shapes if shape not in matrix.shapes]
    params = []
    for dtype in matrix.dtypes:
        for shape in shapes:
            marks = []
            if quick and shape not in matrix.quick_shapes:
                marks.append(pytest.mark.skip(
                    reason=f"full {kind} shapes run with `pytest -m {'gpu' if kind == 'cuda' else 'cpu'}` "
                           "or --matmul-shapes=full"))
            params.append(pytest.param((dtype, shape), id=f"{dtype}-{'x'.join(map(str, shape))}", marks=marks))
    return params


def pytest_generate_tests(metafunc):
    for fixture, kind in (("cpu_point", "cpu"), ("gpu_point", "cuda")):
        if fixture in metafunc.fixturenames:
            metafunc.parametrize(fixture, _points(metafunc.config, kind))
    if "gpu_device" in metafunc.fixturenames:  # every visible GPU, or --gpus: one test (and baseline) per device
        metafunc.parametrize("gpu_device", gpu_device_params(metafunc.config))




def _check_bounds(result, floor, what, config):
    """MFU ≤ MFU_CEILING always; MFU ≥ floor in full runs (-m cpu / -m gpu), where the floors gate.

    A quick run (plain ``pytest``) shares the machine with whatever else runs; load can
    only lower MFU, so the ceiling holds there too, but a floor would fail on load alone.
    """
    if result.mfu is None:
        pytest.skip("benchmarking is disabled (--benchmark-disable): no timing, no MFU")
    assert result.mfu <= MFU_CEILING, (
        f"{what}: MFU {result.mfu:.3f} > {MFU_CEILING} ({result.tflops:.3f} TFLOP/s against a peak of "
        f"{result.peak_flops / 1e12:.3f}): the peak is too low or the timer misses work"
    )
    if shape_mode(config) == "quick":
        return
    assert result.mfu >= floor, (
        f"{what}: MFU {result.mfu:.3f} < floor {floor} ({result.tflops:.3f} TFLOP/s against "
        f"{result.peak_flops / 1e12:.3f}): a throttled, misconfigured or overloaded device"
    )


@pytest.mark.cpu
def test_cpu_matmul(cpu_point, flops_benchmark, benchmark_config):
    dtype, shape = cpu_point
    info = flops_benchmark.device_info("cpu")
    reason = native_skip_reason(info, dtype)  # the report drops the same dtypes from its defaults
    if reason:
        pytest.skip(reason)
    peak = peak_or_skip(info, dtype, flops_benchmark.config)
    case = matmul_case(dtype, *shape, "cpu")
    result = flops_benchmark(case.fn, flops=case.flops, dtype=dtype, device="cpu", shape=shape,
                             rounds=benchmark_config.device("cpu").rounds, peak=peak,
                             min_time_s=benchmark_config.device("cpu").min_time_s)
    flops_benchmark.benchmark.extra_info["runs_as"] = case.runs_as
    flops_benchmark.check_result(case)  # fast but wrong is a failure, whatever the MFU
    _check_bounds(result, benchmark_config.floor("cpu", dtype), f"cpu {dtype} {shape}", flops_benchmark.config)


@pytest.mark.gpu
def test_gpu_matmul(gpu_point, gpu_device, flops_benchmark, benchmark_config):
    dtype, shape = gpu_point
    reason = gpu_skip_reason()
    if reason:
        pytest.skip(reason)
    info = flops_benchmark.device_info(gpu_device)
    reason = native_skip_reason(info, dtype)  # fp8 before Ada, tf32 before Ampere, fp8 on ROCm archs without it
    if reason:
        pytest.skip(reason)
    device = info.device
    peak = peak_or_skip(info, dtype, flops_benchmark.config)
    run_shape, note = fitted_shape(shape, dtype, device)
    case = matmul_case(dtype, *run_shape, device)
    result = flops_benchmark(case.fn, flops=case.flops, dtype=dtype, device=device, shape=run_shape,
                             rounds=benchmark_config.device("cuda").rounds, peak=peak, operands=case.operands,
                             min_time_s=benchmark_config.device("cuda").min_time_s)
    flops_benchmark.benchmark.extra_info["runs_as"] = case.runs_as  # the fp8 variant that ran (fnuz on gfx942)
    flops_benchmark.benchmark.extra_info["cuda_device"] = gpu_device
    if note:
        flops_benchmark.benchmark.extra_info["shape_note"] = note
    flops_benchmark.check_result(case)  # fast but wrong is a failure, whatever the MFU
    del case
    release_cached_memory(device)
    floor = benchmark_config.floor("cuda", dtype, chip=chip_row(info))  # name, then ROCm arch
    _check_bounds(result, floor, f"{info.name} {dtype} {run_shape}", flops_benchmark.config)


@pytest.mark.cpu
def test_time_matmul_agrees_with_torch_timer(pytestconfig, record_property):
    """time_matmul and torch.utils.benchmark.Timer time the same product within 10% (one run, ratios only)."""
    if shape_mode(pytestconfig) == "quick":
        pytest.skip("the timer agreement check runs with `pytest -m cpu` (timing checks stay out of quick runs)")
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(TIMER_SHAPE, TIMER_SHAPE, generator=generator)
    b = torch.randn(TIMER_SHAPE, TIMER_SHAPE, generator=generator)
    out = torch.empty(TIMER_SHAPE, TIMER_SHAPE)
    timer = torch.utils.benchmark.Timer(
        "torch.matmul(a, b, out=out)", globals={"torch": torch, "a": a, "b": b, "out": out},
        num_threads=torch.get_num_threads(),
    )
    ratios = []
    for _ in range(TIMER_PAIRS):
        ours = time_matmul(a, b, min_time_s=TIMER_MIN_TIME_S).median
        theirs = timer.blocked_autorange(min_run_time=TIMER_MIN_TIME_S).median
        ratios.append(ours / theirs)
    ratio = statistics.median(ratios)
    record_property("time_matmul_over_torch_timer", ratio)
    add_summary_line(pytestconfig, f"time_matmul / torch.utils.benchmark.Timer median ({TIMER_SHAPE}^3 float32, "
                                   f"{torch.get_num_threads()} threads): {ratio:.3f} (pairs {', '.join(f'{r:.3f}' for r in ratios)})")
    low, high = TIMER_AGREEMENT
    assert low <= ratio <= high, f"time_matmul / torch Timer = {ratio:.3f} (pairs: {ratios}); expected {low}-{high}"
