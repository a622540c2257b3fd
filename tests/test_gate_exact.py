"""What the gate compares exactly: the work (FLOPs, shape, dtype, device) and peak memory; a benchmark it cannot judge
is listed, not fatal; and an A/B matrix of benchmarks that share their processes pays nothing for its size (min-P)."""

import math

import numpy as np
import pytest

from accounting.gate.decide import CUDA_MEMORY_TOLERANCE, judge
from accounting.gate.measure import Runner
from accounting.gate.render import render_text
from accounting.gate.stats import (
    Decision,
    holm,
    joint_permutation_test,
    permutation_test,
)
from accounting.gate.storage import MIN_ROUNDS, load_run, parse_run
from tests.support.gate_runs import COPY, MATMUL, document, rounds

BASE = [0.0150, 0.0152, 0.0148, 0.0151, 0.0149, 0.0150]
WORK = {"flops": 2 * 1024**3, "shape": [1024, 1024, 1024], "dtype": "float32", "device": "AMD EPYC"}


def _run(path, medians, extra=None, count=10):
    data = document(medians, count=count)
    for bench in data["benchmarks"]:
        bench["extra_info"].update(WORK)
        bench["extra_info"].update((extra or {}).get(bench["fullname"], {}))
    return parse_run(data, path)


def _judge(base_extra=None, current_extra=None, factor=1.0, count=10, **options):
    base = [_run(f"000{i}_a.json", {MATMUL: value, COPY: value}, base_extra) for i, value in enumerate(BASE)]
    current = [_run(f"b{i}.json", {MATMUL: value * factor, COPY: value}, current_extra, count)
               for i, value in enumerate(BASE[:4])]
    return judge(base, current, threshold_for=lambda kind, name: 10, **options)


def _verdict(result, name=MATMUL):
    return next(verdict for verdict in result.verdicts if verdict.name == name)


def test_more_flops_is_work_changed_never_a_time_verdict():
    """1.25× the FLOPs in 1.25× the time: neither a regression of the code nor "no change"."""
    more = {MATMUL: dict(WORK, flops=WORK["flops"] * 5 // 4, shape=[1280, 1024, 1024])}
    result = _judge(current_extra=more, factor=1.25)
    verdict = _verdict(result)
    assert verdict.decision is None and verdict.comparison is None
    assert verdict.work_change == "flops 2147483648 → 2684354560, shape 1024x1024x1024 → 1280x1024x1024"
    assert not result.failed and _verdict(result, COPY).decision is Decision.NO_CHANGE
    assert "work changed" in render_text(result)


def test_the_same_work_keeps_the_time_verdict():
    assert _verdict(_judge(factor=1.25)).decision is Decision.REGRESSION


def test_one_extra_buffer_is_a_memory_regression_with_no_time_change():
    base = {MATMUL: {"peak_memory_bytes": 0}, COPY: {"peak_memory_bytes": 4096}}
    leaky = {MATMUL: {"peak_memory_bytes": 4 * 2**20}, COPY: {"peak_memory_bytes": 4096}}
    result = _judge(base_extra=base, current_extra=leaky)
    verdict = _verdict(result)
    assert verdict.decision is Decision.NO_CHANGE and verdict.memory_regression
    assert (verdict.baseline_memory, verdict.current_memory) == (0, 4 * 2**20)
    assert result.failed and not result.regressions and [v.name for v in result.memory_regressions] == [MATMUL]
    text = render_text(result)
    assert text.startswith("Gate: FAIL: 1 memory regression") and "no change, memory regression" in text


@pytest.mark.parametrize("rise, caught", [pytest.param(CUDA_MEMORY_TOLERANCE, False, id="within-tolerance"),
                                          pytest.param(CUDA_MEMORY_TOLERANCE + 512, True, id="beyond")])
def test_the_cuda_allocator_peak_has_its_rounding_as_tolerance(rise, caught):
    base = {MATMUL: {"cuda_peak_allocated_bytes": 2**26, "peak_memory_bytes": 0}}
    current = {MATMUL: {"cuda_peak_allocated_bytes": 2**26 + rise, "peak_memory_bytes": 0}}
    verdict = _verdict(_judge(base_extra=base, current_extra=current))
    assert verdict.memory_source == "cuda_peak_allocated_bytes" and verdict.memory_regression is caught


def test_too_few_rounds_is_not_judged_and_the_others_are():
    """A training step timed in 3 rounds stopped the whole gate (exit status 2) before."""
    result = _judge(count=MIN_ROUNDS - 1)
    assert all(verdict.decision is None and verdict.reason.startswith(f"not judged: timed in {MIN_ROUNDS - 1} round")
               for verdict in result.verdicts)
    base = [_run(f"000{i}_a.json", {MATMUL: value}) for i, value in enumerate(BASE)]
    short = [parse_run(document({MATMUL: value, COPY: rounds(value, MIN_ROUNDS - 2)}), f"b{i}.json")
             for i, value in enumerate(BASE[:4])]
    mixed = judge(base, short, threshold_for=lambda kind, name: 10)
    assert _verdict(mixed, MATMUL).decision is Decision.NO_CHANGE
    assert _verdict(mixed, COPY).decision is None


def _matrix(count, pairs, factor, seed=0):
    """``count`` benchmarks in ``pairs`` A and B processes, each process's luck shared by its benchmarks."""
    generator = np.random.default_rng(seed)
    luck = {f"{side}{i}": generator.normal(0, 0.01) for side in "ab" for i in range(pairs)}
    samples = {}
    for index in range(count):
        base = {unit: math.log(0.015) + shared + generator.normal(0, 0.005)
                for unit, shared in luck.items() if unit[0] == "a"}
        current = {unit: math.log(0.015 * factor) + shared + generator.normal(0, 0.005)
                   for unit, shared in luck.items() if unit[0] == "b"}
        samples[f"b{index:02}"] = (base, current)
    return samples


def test_min_p_convicts_16_slowed_benchmarks_after_5_pairs_where_holm_cannot():
    samples = _matrix(16, 5, 1.25)
    joint = joint_permutation_test(samples)
    held = holm([permutation_test(list(base.values()), list(current.values())).p_greater
                 for base, current in samples.values()])
    assert all(p > 0.01 for p in held)  # 16 × 1/252: Holm needs 7 pairs for this matrix
    assert all(result.adjusted_greater <= 0.01 for result in joint.values())


def test_min_p_holds_the_family_wise_rate_on_unchanged_matrices():
    """Unchanged matrices of 16 with independent noise (the worst case for min-P): few with any p̃ <= 0.01."""
    alarms = sum(min(result.adjusted_greater for result in joint_permutation_test(_matrix(16, 5, 1.0, seed)).values())
                 <= 0.01 for seed in range(40))
    assert alarms <= 2  # about 0.01 × 40 expected; a binomial(40, 0.01) exceeds 2 with probability 0.008


def test_memory_is_compared_on_runs_the_load_guard_set_aside():
    """Load changes time, not bytes: an A/B job whose every run was disturbed still catches the extra buffer (it
    reported only "inconclusive" before)."""
    base = [_run(f"a{i}.json", {MATMUL: value}, {MATMUL: {"peak_memory_bytes": 0}}) for i, value in enumerate(BASE)]
    current = [_run(f"b{i}.json", {MATMUL: value}, {MATMUL: {"peak_memory_bytes": 4096}}) for i, value in enumerate(BASE)]
    result = judge([], current, threshold_for=lambda kind, name: 10, disturbed_baseline=base)
    verdict = _verdict(result)
    assert verdict.decision is Decision.INCONCLUSIVE and verdict.memory_regression and result.failed


LEAKY_MODULE = '''
import os

import torch

A, OUT = torch.ones(64, 64), torch.empty(64, 64)


def test_small_matmul(flops_benchmark):
    def fn():
        if os.environ.get("EXTRA_BUFFER"):
            scratch = torch.empty(1024)  # the change: one more 4 KiB buffer, no more work
            return torch.matmul(A, A, out=OUT), scratch
        return torch.matmul(A, A, out=OUT)

    flops_benchmark(fn, flops=2 * 64**3, dtype="float32", device="cpu", shape=(64, 64, 64), rounds=20)
'''


@pytest.mark.slow  # runs pytest in processes of its own
def test_a_benchmark_that_allocates_one_extra_buffer_fails_the_gate_on_the_cpu(tmp_path):
    (tmp_path / "test_leaky.py").write_text(LEAKY_MODULE)
    args = ["-q", "-p", "no:cacheprovider", "test_leaky.py"]
    base = [load_run(Runner(args, cwd=str(tmp_path), workdir=str(tmp_path / "a"), threads=1).run(f"a{i}").path)
            for i in range(2)]
    changed = Runner(args, cwd=str(tmp_path), workdir=str(tmp_path / "b"), threads=1, env={"EXTRA_BUFFER": "1"})
    current = [load_run(changed.run("b1").path)]
    result = judge(base, current, threshold_for=lambda kind, name: 10, load_guard=False)
    verdict = result.verdicts[0]
    assert verdict.memory_regression and (verdict.baseline_memory, verdict.current_memory) == (0, 4096)
    assert result.failed and not result.regressions  # caught with no time regression and no statistics


def test_min_p_agrees_with_brute_force_enumeration_of_every_labelling():
    """Westfall-Young single-step min-P written out by hand over all 70 labellings of 4 + 4 runs, 3 benchmarks."""
    import itertools

    samples = _matrix(3, 4, 1.0, seed=1)  # raw p 0.43, 0.11, 0.03: each adjusted upward by a different amount
    units = sorted({unit for base, current in samples.values() for unit in (*base, *current)})
    values = {name: {**base, **current} for name, (base, current) in samples.items()}
    observed = frozenset(unit for unit in units if unit.startswith("b"))
    labellings = [frozenset(chosen) for chosen in itertools.combinations(units, len(observed))]

    def statistic(name, current):
        return (np.mean([values[name][unit] for unit in current])
                - np.mean([values[name][unit] for unit in units if unit not in current]))

    table = {name: np.array([statistic(name, labelling) for labelling in labellings]) for name in samples}
    tie = 1e-12  # equal statistics from a different summation order count as equal

    def raw_p(name, value):
        return float(np.mean(table[name] >= value - tie))

    min_p = np.array([min(raw_p(name, table[name][index]) for name in samples) for index in range(len(labellings))])
    joint = joint_permutation_test(samples)
    for name in samples:
        raw = raw_p(name, statistic(name, observed))
        assert joint[name].p_greater == pytest.approx(raw)
        assert joint[name].adjusted_greater == pytest.approx(float(np.mean(min_p <= raw + tie)))
