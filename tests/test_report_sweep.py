"""The budgeted sweep, driven by a fake device whose speed and clock the test controls."""

import pytest

from accounting.report.sweep import (
    SIZE_MULTIPLE,
    MatmulMeasurement,
    Sweep,
    predict_seconds,
    size_ladder,
    summarise,
)


class FakeDevice:
    """A device whose products take ``overhead + flops / rate(shape)`` fake seconds."""

    def __init__(self, rate, *, overhead_s=0.01, memory_limit=None, repeats=5):
        self.now = 0.0
        self.rate = rate
        self.overhead_s = overhead_s
        self.memory_limit = memory_limit
        self.repeats = repeats
        self.calls = []

    def clock(self):
        return self.now

    def measure(self, dtype, m, k, n):
        self.calls.append((dtype, m, k, n))
        if self.memory_limit is not None and max(m, k, n) > self.memory_limit:
            return None
        flops = 2 * m * k * n
        seconds = flops / self.rate(dtype, m, k, n)
        self.now += self.overhead_s + self.repeats * seconds
        return MatmulMeasurement(dtype, m, k, n, flops, seconds, 0.0, self.repeats)


def flat_rate(dtype, m, k, n):
    return 1e11


def peaked_rate(dtype, m, k, n):
    """Fastest at (2048, 2048, 2304): the ramp's ladder never lands there, the refine phase must."""
    target = (2048, 2048, 2304)
    distance = sum(abs(a - b) for a, b in zip((m, k, n), target)) / 128
    return 1e11 / (1 + 0.05 * distance)


def test_ladder_sizes_are_multiples_and_grow():
    sizes = size_ladder(256, 16384)
    assert all(size % SIZE_MULTIPLE == 0 for size in sizes)
    assert sizes == sorted(set(sizes))
    assert sizes[0] == 256 and sizes[-1] == 16384


@pytest.mark.parametrize("budget_s", [pytest.param(0.5, id="tiny"), pytest.param(5.0, id="small"), pytest.param(60.0, id="minute")])
def test_sweep_stays_within_budget(budget_s):
    device = FakeDevice(flat_rate)
    sweep = Sweep(device.measure, budget_s=budget_s, start_size=256, max_size=16384, clock=device.clock)
    results = sweep.run(["float32", "bfloat16"])
    first_costs = sum(results[dtype][0].wall_s for dtype in results)
    assert device.now <= budget_s + first_costs
    assert all(results[dtype] for dtype in ("float32", "bfloat16")), "every dtype gets at least one point"


def test_sweep_uses_most_of_a_generous_budget():
    device = FakeDevice(flat_rate)
    Sweep(device.measure, budget_s=20.0, start_size=256, max_size=16384, clock=device.clock).run(["float32"])
    assert device.now > 0.5 * 20.0


def test_refine_finds_the_off_ladder_best_shape():
    device = FakeDevice(peaked_rate)
    results = Sweep(device.measure, budget_s=200.0, start_size=256, max_size=4096, clock=device.clock).run(["bf16"])
    best = summarise(results["bf16"])["best"]
    assert best.shape == (2048, 2048, 2304)
    assert best.phase == "refine"


def test_sizes_that_do_not_fit_in_memory_stop_the_ramp():
    device = FakeDevice(flat_rate, memory_limit=1024)
    results = Sweep(device.measure, budget_s=100.0, start_size=256, max_size=16384, clock=device.clock).run(["float32"])
    assert max(max(done.shape) for done in results["float32"]) <= 1024
    assert results["float32"], "the sizes that fit were measured"


def test_max_size_is_respected():
    device = FakeDevice(flat_rate)
    results = Sweep(device.measure, budget_s=1000.0, start_size=256, max_size=1536, clock=device.clock).run(["float32"])
    assert max(max(call[1:]) for call in device.calls) <= 1536
    assert max(done.size for done in results["float32"]) > 1024


def test_time_left_by_one_dtype_goes_to_the_next():
    device = FakeDevice(flat_rate)
    small_first = Sweep(device.measure, budget_s=40.0, start_size=256, max_size=lambda dtype: 512 if dtype == "a" else 16384,
                        clock=device.clock)
    results = small_first.run(["a", "b"])
    spent_on_a = sum(done.wall_s for done in results["a"])
    spent_on_b = sum(done.wall_s for done in results["b"])
    assert spent_on_a < 10.0 < spent_on_b


def test_prediction_scales_with_flops():
    known = MatmulMeasurement("float32", 1000, 1000, 1000, 2 * 10**9, 0.1, 0.0, 5, wall_s=0.6)
    assert predict_seconds(known, 2000, 1000, 1000) == pytest.approx(1.2)
