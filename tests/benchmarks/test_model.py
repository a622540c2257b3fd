"""Training-step benchmarks from ``benchmarks.json``'s model section: tokens/s, MFU, HFU, peak memory.

A GPT-2 or Llama-family transformer (:mod:`accounting.model_mfu`, ``scaled_dot_product_attention``) is trained one
step per round
(forward, fp32 loss, backward, AdamW step) under each configured precision policy, with
and without activation recomputation. pytest-benchmark times it through the
``flops_benchmark`` fixture (device-synchronised rounds, regression gate, machine identity);
model FLOPs are :func:`accounting.transformer_flops`, and each test asserts they equal
``FlopCounterMode``'s count of that very step (counted once, before the timed rounds; with
recomputation, or a fused attention kernel that recomputes QKᵀ in backward, the count is the hardware FLOPs, and HFU
is reported beside MFU). A size that does not fit the device's free memory runs at the largest batch that does
(:func:`accounting.model_mfu.size_that_fits`), or is skipped with why; floors are per size and chip.

Each test fails when MFU or HFU is above ``MFU_CEILING``, when the measured peak memory
leaves ``PEAK_MEMORY_BAND`` around ``transformer_training_memory``'s prediction, and (in
``-m cpu`` / ``-m gpu`` runs, which run the full size) when MFU is below the floor.
A plain ``pytest`` runs the quick size only.
"""


import pytest

from accounting.bench.matrix import load_benchmarks
from accounting.hardware.cpu_facts import cpu_flags, cpu_vendor
from accounting.hardware.devices import release_cached_memory
from accounting.flop_count import count_flops
from accounting.hardware.cpu_peak import cpu_flops_per_cycle
from accounting.model.flops import transformer_flops
from accounting.model_mfu import (
    PEAK_DTYPES,
    attention_kernel,
    build_training_step,
    check_ceiling,
    check_peak_memory,
    hardware_flops,
    model_size,
    size_that_fits,
    step_measurement,
)
from accounting.bench.fixture import add_summary_line
from accounting.bench.skips import gpu_skip_reason, peak_or_skip, shape_mode
from accounting.gate.storage import MIN_ROUNDS

WARMUP_ROUNDS = 1
"""Untimed rounds after the counted step (which already created the optimizer state)."""


def timed_rounds(configured: int) -> int:
    """The rounds a training step is timed in: ``benchmarks.json``'s, and never fewer than the regression gate
    judges (:data:`accounting.gate.storage.MIN_ROUNDS`), so ``accounting gate ... -- -m cpu`` compares these
    benchmarks too instead of listing them as not judged (the CPU model's 3 rounds were below it)."""
    return max(configured, MIN_ROUNDS)


def _model_points(config, kind):
    matrix = load_benchmarks(config.getoption("benchmarks_json")).model(kind)
    quick = shape_mode(config) == "quick"
    params = []
    for size in dict.fromkeys((matrix.quick_size, matrix.size)):
        marks = []
        if quick and size != matrix.quick_size:
            marks.append(pytest.mark.skip(
                reason=f"the full model size runs with `pytest -m {'gpu' if kind == 'cuda' else 'cpu'}` "
                       "or --matmul-shapes=full"))
        precisions = matrix.precisions_of(size)
        for precision in precisions:
            params.append(pytest.param((size, precision, False), id=f"{size}-{precision}", marks=marks))
        params.append(pytest.param((size, precisions[0], True), id=f"{size}-{precisions[0]}-recompute", marks=marks))
    return params


def pytest_generate_tests(metafunc):
    for fixture, kind in (("cpu_model_point", "cpu"), ("gpu_model_point", "cuda")):
        if fixture in metafunc.fixturenames:
            metafunc.parametrize(fixture, _model_points(metafunc.config, kind))




def _benchmark_step(flops_benchmark, benchmark_config, kind, point, device, info, note=""):
    size_name, precision, recompute = point
    matrix = benchmark_config.model(kind)
    size, why = size_that_fits(model_size(size_name), [precision], device)  # a smaller batch where it must
    if size is None:
        pytest.skip(why)
    if size.batch_size != model_size(size_name).batch_size:
        note += f" ({why})"
    dtype = PEAK_DTYPES[precision]
    peak = peak_or_skip(info, dtype, flops_benchmark.config)
    step = build_training_step(size, precision=precision, device=device, recompute=recompute)
    count = count_flops(step)  # the first step, untimed: the FLOPs the hardware executes, and the attention kernel
    model_flops = transformer_flops(size.config, size.batch_size).training
    kernel = attention_kernel(count, step.attention)
    assert count.total == hardware_flops(size.config, size.batch_size, recompute, kernel)
    assert (count.total == model_flops) is (not recompute and kernel in ("math", "eager"))
    rounds = timed_rounds(matrix.rounds)
    result = flops_benchmark(step, flops=model_flops, dtype=dtype, device=device, rounds=rounds,
                             warmup_rounds=WARMUP_ROUNDS, peak=peak, count_flops=False)
    if result.median_s is None:
        pytest.skip("benchmarking is disabled (--benchmark-disable): no timing, no MFU")
    stats = flops_benchmark.benchmark.stats.stats
    measurement = step_measurement(step, median_s=result.median_s, iqr_s=stats.iqr, repeats=rounds,
                                   count=count, peak_flops=peak, info=info)
    del step
    release_cached_memory(device)
    floor = benchmark_config.model_floor(kind, precision, size_name, chip=info.name)
    flops_benchmark.benchmark.extra_info["model"] = {**measurement.as_dict(), "floor": floor}
    label = getattr(flops_benchmark.benchmark, "name", "model step")
    add_summary_line(flops_benchmark.config,
                     f"{label}: {measurement.tokens_per_s:,.0f} tokens/s, MFU {measurement.mfu:.3f}, "
                     f"HFU {measurement.hfu:.3f}, peak memory {measurement.memory_ratio:.3f} x predicted, "
                     f"attention {measurement.attention_kernel}{note}")
    check_ceiling(measurement)
    check_peak_memory(measurement)
    if shape_mode(flops_benchmark.config) != "quick":
        assert measurement.mfu >= floor, (
            f"{size.describe()} {precision}: model MFU {measurement.mfu:.4f} < floor {floor}: a throttled, "
            "misconfigured or overloaded device"
        )
    return measurement


@pytest.mark.cpu
def test_cpu_training_step(cpu_model_point, flops_benchmark, benchmark_config):
    precision = cpu_model_point[1]
    _per_cycle, path = cpu_flops_per_cycle(PEAK_DTYPES[precision], cpu_flags(), vendor=cpu_vendor())
    note = " (bf16 emulated: no native path on this CPU)" if "via float32" in path else ""
    info = flops_benchmark.device_info("cpu")
    _benchmark_step(flops_benchmark, benchmark_config, "cpu", cpu_model_point, "cpu", info, note)


@pytest.mark.gpu
def test_gpu_training_step(gpu_model_point, flops_benchmark, benchmark_config):
    reason = gpu_skip_reason()
    if reason:
        pytest.skip(reason)
    info = flops_benchmark.device_info("cuda:0")
    _benchmark_step(flops_benchmark, benchmark_config, "cuda", gpu_model_point, info.device, info)
