"""The replay study: it reads only the unchanged processes of a kept A/B study, in the order they ran, and plants
steps that the gate's own detector is then asked to find."""

import json

import numpy as np
import pytest

from studies import gate_replayed_history as replay


def _write(folder, job, side, number, minute, values, slowdown=1.0):
    """One saved process of the study: benchmark ``bNN``'s fastest round is ``values[NN]``."""
    benchmarks = [{"fullname": f"t.py::test_mm[b{index:02}]", "stats": {"data": [value * (1 + 0.01 * step) for step in range(6)]},
                   "extra_info": {"device_kind": "cpu", "intended_slowdown": slowdown}}
                  for index, value in enumerate(values)]
    document = {"machine_info": {"accounting": {"cpu_model": "x"}}, "benchmarks": benchmarks,
                "datetime": f"2026-11-26T18:{minute:02}:00+00:00"}
    (folder / job).mkdir(exist_ok=True)
    (folder / job / f"{side}-{number}.json").write_text(json.dumps(document))


def test_only_unchanged_processes_enter_the_series_in_the_order_they_ran(tmp_path):
    _write(tmp_path, "ab1.1-t0.05-1", "a", 1, 5, [0.020, 0.030])
    _write(tmp_path, "ab1.1-t0.05-1", "b", 1, 6, [0.022, 0.033], slowdown=1.1)    # slowed: left out
    _write(tmp_path, "ab1-t0.05-1", "b", 1, 1, [0.019, 0.029])                    # ran first
    _write(tmp_path, "ab1-t0.05-1", "a", 2, 3, [0.021, 0.031])
    series = replay.unchanged_series(replay.unchanged_processes(tmp_path))
    assert series == {"t.py::test_mm[b00]": [0.019, 0.021, 0.020], "t.py::test_mm[b01]": [0.029, 0.031, 0.030]}


def test_noise_facts_agree_with_numpy_on_the_series():
    generator = np.random.default_rng(3)
    shared = generator.normal(0, 0.02, 60)
    series = {f"b{index}": list(0.02 * np.exp(shared + generator.normal(0, 0.01, 60))) for index in range(8)}
    processes = [{name: values[run] for name, values in series.items()} for run in range(60)]
    processes.insert(30, {"b0": 0.02})   # a process that re-measured one benchmark: left out of the shared part
    facts = replay.noise_facts(processes)
    logs = [np.log(values) for values in replay.unchanged_series(processes).values()]
    assert facts["sd"] == pytest.approx(float(np.median([np.std(values, ddof=1) for values in logs])))
    assert facts["complete_runs"] == 60 and facts["runs"] == 61
    first = logs[1] - logs[1].mean()
    assert replay.noise_facts([{"b1": value} for value in series["b1"]])["autocorrelation"] == pytest.approx(
        float(np.corrcoef(first[1:], first[:-1])[0, 1]), abs=0.05)
    # shared sd 0.02 against 0.01 of each benchmark's own: 0.8 of the variance is shared, less what 8 benchmarks'
    # mean keeps of their own noise
    assert 0.7 < facts["common_share"] < 0.95


def test_planting_multiplies_only_the_runs_after_the_step():
    values = list(np.linspace(0.02, 0.03, 30))
    history = replay.planted(values, 1.1)
    ratios = np.asarray(history.values) / np.asarray(values)
    assert history.first_changed == 15 and np.allclose(ratios[:15], 1) and np.allclose(ratios[15:], 1.1)
    assert replay.planted(values, None).values == tuple(values)


def test_windows_say_when_the_series_is_too_short():
    with pytest.raises(replay.NoRuns, match="longest series here has 12"):
        replay.windows({"b": [0.02] * 12}, 30, 20)


def test_a_clear_step_in_quiet_replayed_runs_is_found_and_a_flat_window_is_left_alone():
    generator = np.random.default_rng(5)
    series = {f"b{index}": list(0.025 * np.exp(generator.normal(0, 0.005, 40))) for index in range(2)}
    rows = {row["planted"]: row for row in replay.measure(series, length=30, histories=4, factors=(1.25,))}
    assert rows["step 1.25x"]["found_within_1"] == 4
    assert rows["flat"]["histories_with_a_change_point"] == 0


def test_the_command_prints_the_noise_and_the_table(tmp_path, capsys):
    generator = np.random.default_rng(8)
    for number in range(32):
        _write(tmp_path, f"ab1-t0.05-{number}", "a", 1, number, list(0.02 * np.exp(generator.normal(0, 0.004, 2))))
    assert replay.main([str(tmp_path), "--histories", "2"]) == 0
    out = capsys.readouterr().out
    assert "32 unchanged runs of 2 benchmarks" in out and "late step 1.1x" in out
    with pytest.raises(SystemExit) as exit_:
        replay.main([str(tmp_path / "missing")])
    assert exit_.value.code == 2 and "no such folder" in capsys.readouterr().err
