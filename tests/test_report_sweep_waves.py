"""The wave-aware sweep: whole-wave shapes, the K sweep, the refine, the memo, on fake devices."""

import math

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from accounting.errors import AccountingError, AccountingTypeError
from accounting.hardware.devices import DeviceInfo
from accounting.report import measure, run
from accounting.report.sweep import Sweep, summarise
from accounting.report.waves import ASPECT_WEIGHT, CPU_TILE, GPU_TILE, WaveGrid, whole_wave_shape
from tests.test_report_sweep import FakeDevice, flat_rate

TILES = [pytest.param(GPU_TILE, id="gpu-tile"), pytest.param(CPU_TILE, id="cpu-tile")]
ITEMSIZES = {"float8_e4m3fn": 1, "bfloat16": 2, "float32": 4, "float64": 8}


def tile_count(m, n, tile_m, tile_n):
    return math.ceil(m / tile_m) * math.ceil(n / tile_n)


def fills_whole_waves(shape, units, tile, itemsize):
    m, k, n = shape
    align = 128 // itemsize
    return (m % tile[0] == 0 and n % tile[1] == 0 and tile_count(m, n, *tile) % units == 0
            and all(dim % align == 0 for dim in shape))


def sawtooth_rate(units, *, peak=1e15, falls_at=32768):
    """A GPU whose throughput pays for whole waves: ``tiles / (units · ceil(tiles / units))`` of the work's rate.

    Larger products run better until ``falls_at`` (power), so the best shape is inside the range.
    """
    def rate(dtype, m, k, n):
        waves = tile_count(m, n, *GPU_TILE) / units
        edge = math.sqrt(m * n)
        size = (m * k * n) ** (1 / 3)
        return peak * (waves / math.ceil(waves)) * edge / (edge + 512) * k / (k + 256) * max(0.05, 1 - size / falls_at)
    return rate


def exhaustive_best(rate, limit):
    """The landscape's best rate over every tile-aligned m, n and k in steps of 512, by enumeration."""
    return max(rate("bfloat16", m, k, n) for m in range(GPU_TILE[0], limit + 1, GPU_TILE[0])
               for n in range(GPU_TILE[1], limit + 1, GPU_TILE[1]) for k in range(512, limit + 1, 512))


@given(units=st.integers(1, 400), tile=st.sampled_from([GPU_TILE, CPU_TILE]), itemsize=st.sampled_from([1, 2, 4, 8]),
       edge=st.floats(32, 20000), limit=st.one_of(st.none(), st.integers(128, 20000)))
@example(units=131, tile=GPU_TILE, itemsize=2, edge=4096.0, limit=None)   # a prime SM count
@example(units=2, tile=CPU_TILE, itemsize=1, edge=4096.0, limit=4096)     # float8: 128-element rows
def test_whole_wave_shapes_fill_every_wave(units, tile, itemsize, edge, limit):
    shape = whole_wave_shape(WaveGrid(units, *tile), edge, round(edge), itemsize, limit)
    if shape is None:
        assert limit is not None, "without a limit some whole-wave shape always exists"
        return
    assert fills_whole_waves(shape, units, tile, itemsize)
    if limit is not None:
        assert max(shape) <= max(limit, 128 // itemsize)


@pytest.mark.parametrize("units, tile, itemsize, edge", [
    pytest.param(132, GPU_TILE, 2, 3000.0, id="h100-bf16"),
    pytest.param(108, GPU_TILE, 1, 5000.0, id="a100-fp8"),
    pytest.param(7, GPU_TILE, 4, 1000.0, id="seven-sms"),
    pytest.param(2, CPU_TILE, 4, 2500.0, id="cpu-2-threads"),
])
def test_whole_wave_shape_is_the_best_by_enumeration(units, tile, itemsize, edge):
    """Among every whole-wave (m, n) with m in [edge/2, 2·edge], none scores better than the one chosen."""
    m, _k, n = whole_wave_shape(WaveGrid(units, *tile), edge, 1024, itemsize)

    def score(m, n):
        return abs(math.log(m * n / edge**2)) + ASPECT_WEIGHT * abs(math.log(m / n))

    step_m, step_n = math.lcm(tile[0], 128 // itemsize), math.lcm(tile[1], 128 // itemsize)
    others = [(a, b) for a in range(step_m, int(2 * edge) + 1, step_m) if a >= edge / 2 - step_m
              for b in range(step_n, int(8 * edge) + 1, step_n) if tile_count(a, b, *tile) % units == 0]
    assert score(m, n) == pytest.approx(min(score(a, b) for a, b in others))


@pytest.mark.parametrize("units", [7, 66, 108, 132, 304])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float8_e4m3fn"])
def test_wave_seeds_fill_whole_waves_of_the_device(units, dtype):
    device = FakeDevice(sawtooth_rate(units), overhead_s=1.0)
    results = Sweep(device.measure, budget_s=60.0, start_size=512, max_size=16384, clock=device.clock,
                    waves=WaveGrid(units)).run([dtype])
    seeds = [done.shape for done in results[dtype] if done.phase == "waves"]
    assert len(seeds) >= 3
    assert all(fills_whole_waves(shape, units, GPU_TILE, ITEMSIZES[dtype]) for shape in seeds)


@pytest.mark.parametrize("waves", [pytest.param(None, id="ladder"), pytest.param(WaveGrid(132), id="waves")])
@pytest.mark.parametrize("budget_s", [2.0, 30.0, 240.0])
def test_no_shape_is_timed_twice(waves, budget_s):
    device = FakeDevice(sawtooth_rate(132), overhead_s=0.5)
    Sweep(device.measure, budget_s=budget_s, start_size=512, max_size=16384, clock=device.clock,
          waves=waves).run(["bfloat16", "float32"])
    assert len(device.calls) == len(set(device.calls))


@pytest.mark.parametrize("budget_s", [pytest.param(1.0, id="tiny"), pytest.param(8.0, id="small"),
                                      pytest.param(60.0, id="minute")])
@pytest.mark.parametrize("rate", [pytest.param(flat_rate, id="flat"), pytest.param(sawtooth_rate(132), id="sawtooth")])
def test_wave_phases_stay_within_budget(budget_s, rate):
    device = FakeDevice(rate, overhead_s=0.2)
    results = Sweep(device.measure, budget_s=budget_s, start_size=256, max_size=16384, clock=device.clock,
                    waves=WaveGrid(132)).run(["float32", "bfloat16"])
    first_costs = sum(results[dtype][0].wall_s for dtype in results)
    assert device.now <= budget_s + first_costs
    assert all(results[dtype] for dtype in results)


@pytest.mark.parametrize("units", [100, 132, 304])
def test_wave_search_finds_the_peak_a_geometric_ladder_misses(units):
    rate = sawtooth_rate(units)
    found = {}
    for name, waves in (("ladder", None), ("waves", WaveGrid(units))):
        device = FakeDevice(rate, overhead_s=1.0)
        results = Sweep(device.measure, budget_s=60.0, start_size=512, max_size=16384, clock=device.clock,
                        waves=waves).run(["bfloat16"])
        found[name] = summarise(results["bfloat16"])["best"].flops_per_second
    truth = exhaustive_best(rate, 12288)
    assert found["ladder"] < 0.99 * truth, "the landscape must be one a ladder gets wrong"
    assert found["waves"] >= found["ladder"]
    assert found["waves"] >= 0.999 * truth


def test_k_sweep_moves_k_to_where_the_device_is_fastest():
    """A device fastest at k = 4·edge: the seeds' square k is off by two octaves, the K sweep walks there."""
    def rate(dtype, m, k, n):
        return 1e14 / (1 + abs(math.log2(k / (4 * math.sqrt(m * n)))))
    device = FakeDevice(rate, overhead_s=0.1)
    results = Sweep(device.measure, budget_s=60.0, start_size=512, max_size=8192, clock=device.clock,
                    waves=WaveGrid(16)).run(["bfloat16"])
    k_moves = [done for done in results["bfloat16"] if done.phase == "k-sweep"]
    best = summarise(results["bfloat16"])["best"]
    assert k_moves and max(done.k for done in k_moves) > max(done.k for done in results["bfloat16"] if done.phase == "waves")
    assert rate("bfloat16", *best.shape) >= 0.9 * 1e14


def test_refine_walks_to_a_peak_between_seeds():
    """A device fastest at one whole-wave output between the quarter-octave seeds: the refine finds it."""
    grid = WaveGrid(8)
    target = whole_wave_shape(grid, 3000.0, 3000, 2)

    def rate(dtype, m, k, n):
        waves = tile_count(m, n, *GPU_TILE) / 8
        distance = abs(math.log(m * n / (target[0] * target[2]))) + abs(math.log(k / target[1]))
        return 1e14 * (waves / math.ceil(waves)) / (1 + 20 * distance)
    device = FakeDevice(rate, overhead_s=0.1)
    results = Sweep(device.measure, budget_s=120.0, start_size=512, max_size=8192, clock=device.clock,
                    waves=grid).run(["bfloat16"])
    best = summarise(results["bfloat16"])["best"]
    assert best.phase == "refine"
    assert rate("bfloat16", *best.shape) >= 0.95 * 1e14


def test_sizes_that_do_not_fit_stop_the_wave_phases_too():
    device = FakeDevice(sawtooth_rate(132), memory_limit=3000)
    results = Sweep(device.measure, budget_s=100.0, start_size=512, max_size=16384, clock=device.clock,
                    waves=WaveGrid(132)).run(["bfloat16"])
    too_big = [call for call in device.calls if max(call[1:]) > 3000]
    assert len(too_big) <= 2, "after an out-of-memory shape the limit drops below it"
    assert max(max(done.shape) for done in results["bfloat16"]) <= 3000


@pytest.mark.parametrize("field, value", [("units", 0), ("tile_m", -128), ("tile_n", 2.5)])
def test_a_bad_wave_grid_names_the_value(field, value):
    arguments = {"units": 132, field: value}
    with pytest.raises(AccountingError, match=rf"^{field}"):
        WaveGrid(**arguments)


def test_sweep_refuses_a_grid_that_is_not_one():
    with pytest.raises(AccountingTypeError, match=r"^waves must be a WaveGrid or None, not int 132$"):
        Sweep(lambda *shape: None, budget_s=1.0, start_size=128, max_size=1024, waves=132)


def test_wave_grid_reads_the_device_facts(monkeypatch):
    h100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 80 * 2**30, multiprocessors=132)
    assert measure.wave_grid(h100) == WaveGrid(132, *GPU_TILE)
    assert measure.wave_grid(DeviceInfo("cuda", "a GPU", 0, 2**34)) is None, "no SM count: no whole-wave seeds"
    monkeypatch.setattr(torch, "get_num_threads", lambda: 6)
    assert measure.wave_grid(DeviceInfo("cpu", "a CPU", None, 2**34)) == WaveGrid(6, *CPU_TILE)


def test_the_report_sweeps_with_the_devices_wave_grid(monkeypatch):
    info = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 80 * 2**30, multiprocessors=132)
    plan = run.Plan(info, ["bfloat16"], {"bfloat16": None}, {"bfloat16": ""}, {"bfloat16": None}, None, 60.0, None)
    monkeypatch.setattr(run, "max_sizes", lambda plan: {"bfloat16": 8192})
    _timer, sweep = run.make_sweep(plan, sweep_budget_s=run.sweep_budget_s(60.0, 0.0))
    assert sweep.waves == WaveGrid(132, *GPU_TILE)
    assert sweep.budget_s == pytest.approx(60.0 * (1 - run.FINISH_RESERVE_FRACTION) * (1 - run.HEADLINE_FRACTION))
