"""The short-vs-long sweep ratio: its arithmetic on fake sweeps, its table, and one real tiny run."""

import math

import pytest

from accounting.errors import AccountingError
from accounting.report.sweep import MatmulMeasurement, Sweep, WaveGrid
from studies import search_ratio
from studies.search_ratio import RETIME_ROUNDS, TARGET_RATIO, render, retime_winners, search_ratios
from tests.test_report_sweep import FakeDevice
from tests.test_report_sweep_waves import sawtooth_rate


def fake_report_sweep(rate, waves, budgets_seen):
    """``sweep_with_budget`` on a fresh fake device per budget, as the real one prepares a fresh plan.

    The sweep plans with the fake's own rule for its time per shape, as the report's does with its timer's.
    """
    def sweep_with_budget(budget_s):
        budgets_seen.append(budget_s)
        device = FakeDevice(rate, overhead_s=1.0)
        return Sweep(device.measure, budget_s=budget_s, start_size=512, max_size=16384, clock=device.clock,
                     waves=waves, expected_wall_s=lambda per_call_s: device.overhead_s + device.repeats * per_call_s,
                     ).run(["bfloat16", "float32"])
    return sweep_with_budget


def best_by_hand(measurements):
    return max(done.flops / done.seconds for done in measurements)


@pytest.mark.parametrize("waves", [pytest.param(None, id="ladder"), pytest.param(WaveGrid(304), id="waves")])
def test_ratio_is_the_short_best_over_the_long_best(waves):
    budgets, runs = [], []
    sweep = fake_report_sweep(sawtooth_rate(304), waves, budgets)

    def recording(budget_s):
        runs.append(sweep(budget_s))
        return runs[-1]

    ratios = search_ratios(recording, short_s=15.0, long_s=120.0)
    assert budgets == [15.0, 120.0]
    assert [ratio.dtype for ratio in ratios] == ["bfloat16", "float32"]
    for ratio in ratios:
        short, long = best_by_hand(runs[0][ratio.dtype]), best_by_hand(runs[1][ratio.dtype])
        assert ratio.short_flops_per_s == pytest.approx(short)
        assert ratio.long_flops_per_s == pytest.approx(long)
        assert ratio.ratio == pytest.approx(short / long)
        assert ratio.meets_target == (short / long >= TARGET_RATIO)


def test_wave_search_meets_the_target_where_the_ladder_does_not():
    """On a sawtooth device a 60 s wave-aware sweep finds what a 240 s one does; a 60 s ladder finds less."""
    found = {}
    for name, waves in (("ladder", None), ("waves", WaveGrid(304))):
        found[name] = search_ratios(fake_report_sweep(sawtooth_rate(304), waves, []), short_s=60.0, long_s=240.0)
    assert all(ratio.meets_target for ratio in found["waves"])
    assert all(waves.ratio > ladder.ratio for waves, ladder in zip(found["waves"], found["ladder"]))


def test_a_dtype_one_sweep_lacks_has_no_ratio():
    done = MatmulMeasurement("float32", 256, 256, 256, 2 * 256**3, 1e-3, 0.0, 3)
    sweeps = {5.0: {"float32": [done], "bfloat16": []}, 10.0: {"float32": [done], "bfloat16": [done]}}
    ratios = search_ratios(sweeps.__getitem__, short_s=5.0, long_s=10.0)
    assert [(ratio.dtype, ratio.ratio) for ratio in ratios] == [("float32", 1.0), ("bfloat16", None)]
    text = render(ratios, short_s=5.0, long_s=10.0)
    assert text.splitlines()[-1].split()[-1] == "n/a"
    assert text.splitlines()[-2].split()[-3:] == ["1.000", "—", "ok"]


@pytest.mark.parametrize("short_s, long_s", [pytest.param(60.0, 60.0, id="equal"), pytest.param(240.0, 60.0, id="swapped"),
                                             pytest.param(0.0, 60.0, id="zero")])
def test_budgets_out_of_order_are_refused(short_s, long_s):
    with pytest.raises(AccountingError, match=rf"^--short must be below --long and above 0, got --short {short_s:g} "):
        search_ratios(lambda budget_s: pytest.fail("no sweep may run"), short_s=short_s, long_s=long_s)


@pytest.mark.parametrize("argv, message", [
    pytest.param(["--short", "240", "--long", "60"], "--short must be below --long, got --short 240 --long 60", id="swapped"),
    pytest.param(["--short", "-1"], "argument --short: --short must be a positive number of seconds, got '-1'", id="negative"),
    pytest.param(["--long", "soon"], "argument --long: --long must be a positive number of seconds, got 'soon'", id="text"),
])
def test_bad_arguments_end_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        search_ratio.main(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == f"python -m studies.search_ratio: error: {message}\n"


def test_an_unknown_dtype_is_a_one_line_error(capsys):
    assert search_ratio.main(["--short", "0.2", "--long", "0.4", "--device", "cpu", "--dtypes", "float13"]) == 2
    assert capsys.readouterr().err.startswith("python -m studies.search_ratio: error: --dtypes: ")


def test_a_tiny_real_run_prints_both_budgets_and_a_ratio(capsys):
    assert search_ratio.main(["--short", "0.3", "--long", "0.6", "--device", "cpu", "--dtypes", "float32"]) == 0
    out, err = capsys.readouterr()
    assert "0.3 s report sweep of float32" in err and "0.6 s report sweep of float32" in err
    row = next(line for line in out.splitlines() if line.startswith("float32"))
    cells = row.split()
    short, long, ratio = float(cells[1]), float(cells[3]), float(cells[5])
    retimed = "same shape" if cells[6:8] == ["same", "shape"] else cells[6]
    assert retimed == "same shape" or 0 < float(retimed) < 10, row
    # The table rounds TFLOP/s to 4 decimals and the ratio to 3: allow exactly that much.
    rounding = (short / long) * (0.5e-4 / short + 0.5e-4 / long) + 0.5e-3
    assert ratio == pytest.approx(short / long, abs=rounding * 1.01)
    assert math.isfinite(ratio) and ratio > 0


class DriftingDevice:
    """A fake timer whose speed falls by ``drift`` per call; ``rates[shape]`` is each shape's FLOP/s at full speed.

    ``slow_calls`` maps call numbers to an extra slowdown (a slow episode of the host).
    """

    def __init__(self, rates, *, drift=0.0, slow_calls=None):
        self.rates, self.drift, self.slow_calls = rates, drift, slow_calls or {}
        self.calls = []

    def __call__(self, dtype, m, k, n):
        shape = (m, k, n)
        if shape not in self.rates:
            return None  # "does not fit"
        speed = (1 - self.drift) ** len(self.calls) / self.slow_calls.get(len(self.calls), 1.0)
        self.calls.append(shape)
        flops = 2 * m * k * n
        return MatmulMeasurement(dtype, m, k, n, flops, flops / (self.rates[shape] * speed), 0.0, 5)


SHORT, LONG = (384, 640, 384), (512, 512, 768)


def test_retiming_alternates_the_winners_and_cancels_a_steady_drift():
    device = DriftingDevice({SHORT: 0.95e11, LONG: 1.0e11}, drift=0.03)
    ratio = retime_winners(device, "float32", SHORT, LONG)
    assert device.calls == [SHORT, LONG, LONG, SHORT] * RETIME_ROUNDS
    assert ratio == pytest.approx(0.95, rel=1e-9)


@pytest.mark.parametrize("episode_round", range(RETIME_ROUNDS))
def test_a_slow_episode_in_one_round_does_not_move_the_ratio(episode_round):
    calls = range(4 * episode_round + 1, 4 * episode_round + 3)  # the round's two long timings, 1.5x slower
    device = DriftingDevice({SHORT: 0.99e11, LONG: 1.0e11}, slow_calls={call: 1.5 for call in calls})
    assert retime_winners(device, "float32", SHORT, LONG) == pytest.approx(0.99, rel=1e-9)


def test_the_same_winner_is_not_retimed_and_a_shape_that_no_longer_fits_gives_none():
    device = DriftingDevice({SHORT: 1e11})
    assert retime_winners(device, "float32", SHORT, SHORT) == 1.0
    assert device.calls == []
    assert retime_winners(device, "float32", SHORT, LONG) is None


def test_the_target_is_judged_on_the_retimed_ratio():
    """The long sweep's best was timed in a fast moment: swept 0.90, side by side 0.99."""
    timed = {5.0: {"float32": [MatmulMeasurement("float32", *SHORT, 2 * 384 * 640 * 384, 1.0, 0.0, 5)]},
             10.0: {"float32": [MatmulMeasurement("float32", *LONG, 2 * 512 * 512 * 768, 1.0, 0.0, 5)]}}
    short_rate = timed[5.0]["float32"][0].flops_per_second
    long_rate = short_rate / 0.90
    timed[10.0]["float32"][0] = MatmulMeasurement("float32", *LONG, round(long_rate), 1.0, 0.0, 5)
    device = DriftingDevice({SHORT: 0.99e11, LONG: 1.0e11})
    ratio, = search_ratios(timed.__getitem__, short_s=5.0, long_s=10.0, measure=device)
    assert ratio.swept_ratio == pytest.approx(0.90, rel=1e-6)
    assert ratio.retimed_ratio == pytest.approx(0.99, rel=1e-9) and ratio.ratio == ratio.retimed_ratio
    assert ratio.meets_target
    row = render([ratio], short_s=5.0, long_s=10.0).splitlines()[-1].split()
    assert row[-3:] == ["0.900", "0.990", "ok"]
    without, = search_ratios(timed.__getitem__, short_s=5.0, long_s=10.0)
    assert without.retimed_ratio is None and without.ratio == without.swept_ratio and not without.meets_target
