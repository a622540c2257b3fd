"""The error-rate script: the benchmark module it writes (studies.gate_slowdown) injects the slowdown it is asked
for; its options."""

import contextlib
import importlib.util
import io
import json
import os
import statistics
import subprocess
import sys
import types

import pytest
import torch

from accounting.gate.decide import GateResult, Verdict
from accounting.gate.stats import Decision
from accounting.gate.storage import BenchmarkRun, SavedRun
from studies import gate_error_rates, gate_slowdown


def _module_source(rounds: int) -> str:
    """The benchmark module the script writes, with ``rounds`` rounds and one check pair."""
    return gate_slowdown.module_source(rounds=rounds, min_time_s=0.0, check_pairs=1)


def _written_module(tmp_path, monkeypatch, factor):
    monkeypatch.setenv(gate_slowdown.SLOWDOWN_ENV, str(factor))
    path = tmp_path / gate_slowdown.MODULE_NAME
    path.write_text(_module_source(5))
    spec = importlib.util.spec_from_file_location("written_gate_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("factor, extra_rows", [pytest.param(1.25, 256, id="1.25"), pytest.param(1.1, 102, id="1.1")])
def test_the_slowdown_adds_that_share_of_the_flops(tmp_path, monkeypatch, factor, extra_rows):
    module = _written_module(tmp_path, monkeypatch, factor)
    case, fn, read_factor = module._work()
    assert read_factor == factor and fn is not case.fn
    calls = []
    real = torch.matmul

    def counting(left, right, **kwargs):
        calls.append((tuple(left.shape), tuple(right.shape)))
        return real(left, right, **kwargs)

    monkeypatch.setattr(torch, "matmul", counting)
    fn()
    assert calls[-1] == ((extra_rows, 1024), (1024, 1024))  # (f - 1) x 1024 extra rows: (f - 1) of the FLOPs


def test_calibrated_rows_replace_the_flop_share(tmp_path, monkeypatch):
    monkeypatch.setenv(gate_slowdown.SLOWDOWN_ENV + "_ROWS", "160")
    case, fn, _ = _written_module(tmp_path, monkeypatch, 1.25)._work()
    calls = []
    real = torch.matmul
    monkeypatch.setattr(torch, "matmul", lambda left, right, **kwargs: calls.append(left.shape[0]) or
                        real(left, right, **kwargs))
    fn()
    assert calls[-1] == 160


def test_calibration_converges_on_a_machine_that_is_not_linear_in_flops():
    def measure(rows):  # a fixed cost per call plus a slower rate for thin products
        return 1 + 0.05 + 1.3 * rows / 1024
    rows = gate_slowdown.calibrate_rows(1.10, measure=measure)
    assert abs(measure(rows) - 1.10) <= gate_slowdown.CALIBRATION_TOLERANCE and rows != round(0.10 * 1024)


def test_calibration_answers_the_closest_rows_it_measured_when_noise_keeps_it_out_of_tolerance():
    readings = [1.20, 1.03, 1.12, 1.14, 1.07, 1.16, 1.06, 1.13]  # never within 1 % of 1.10, closest the third
    tried = []

    def measure(rows):
        tried.append(rows)
        return readings[len(tried) - 1]
    rows = gate_slowdown.calibrate_rows(1.10, measure=measure)
    assert len(tried) == gate_slowdown.CALIBRATION_STEPS and rows == tried[2] and tried.count(rows) == 1


def test_calibration_stops_at_the_first_reading_within_tolerance():
    tried = []

    def measure(rows):
        tried.append(rows)
        return 1.105 if len(tried) == 2 else 1.3
    assert gate_slowdown.calibrate_rows(1.10, measure=measure) == tried[1] and len(tried) == 2


def test_unchanged_work_is_the_plain_product(tmp_path, monkeypatch):
    case, fn, factor = _written_module(tmp_path, monkeypatch, 1)._work()
    assert fn is case.fn and factor == 1 and case.shape == (1024, 1024, 1024)


@pytest.mark.parametrize("argv, message", [
    pytest.param(["--factors", "0.9"], "--factors needs slowdowns above 1, e.g. 1.25,1.1; got '0.9'", id="speed-up"),
    pytest.param(["--factors", "x"], "--factors needs slowdowns above 1", id="not-a-number"),
    pytest.param(["--runs", "0"], "argument --runs: must be a positive integer, got '0'", id="runs-zero"),
    pytest.param(["--thresholds", "5"], "--thresholds needs fractions in (0, 1), e.g. 0.05,0.1; got '5'",
                 id="threshold-percent"),
])
def test_bad_options_are_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        gate_error_rates.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and len(err.splitlines()) == 1


def test_a_jobs_time_leaves_out_the_scripts_own_checks_of_the_injected_factor():
    def run(path, extra):
        return SavedRun(path, {}, {"t::mm": BenchmarkRun("t::mm", (0.01,), {"device_kind": "cpu", **extra})})

    checked = [run("a.json", {}), run("b1.json", {"check_seconds": 1.5, "injected_slowdown": 1.24}),
               run("b2.json", {"check_seconds": 2.0, "injected_slowdown": 1.26})]
    result = GateResult((Verdict("t::mm", "cpu", 0.1, Decision.REGRESSION, "slower"),), (), ("a.json",),
                        ("b1.json", "b2.json"))
    scenario = gate_error_rates.Scenario(1.25)
    scenario.add(result, 2, 10.0, checked)
    assert scenario.seconds == [pytest.approx(10.0 - 1.5 - 2.0)] and scenario.injected == [1.24, 1.26]
    assert (scenario.failed, scenario.decisions, scenario.processes) == (1, {"regression": 1}, [3])


@pytest.mark.slow  # runs pytest in a process of its own
def test_the_written_module_records_how_long_its_check_took(tmp_path):
    """The slowed run's benchmark stores the check's own seconds, a positive time, beside the factor it measured."""
    (tmp_path / gate_slowdown.MODULE_NAME).write_text(_module_source(2))
    saved = tmp_path / "run.json"
    env = {**os.environ, gate_slowdown.SLOWDOWN_ENV: "1.25", gate_slowdown.SLOWDOWN_ENV + "_ROWS": "16"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--benchmark-json",
                           str(saved), gate_slowdown.MODULE_NAME], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    extra = json.loads(saved.read_text())["benchmarks"][0]["extra_info"]
    assert extra["check_seconds"] > 0 and extra["injected_slowdown"] > 0


def test_each_threshold_gates_every_scenario_with_that_threshold(tmp_path, monkeypatch):
    seen = []

    class FakeRunner:
        def __init__(self, *args, **kwargs):
            pass

    @contextlib.contextmanager
    def ready(*runners):
        yield

    def fake_gate_ab(runner_a, runner_b, config, **options):
        seen.append(config.regression_threshold("cpu", "t::mm"))
        return GateResult((), (), (), ()), [], [], 3

    monkeypatch.setattr(gate_error_rates, "Runner", FakeRunner)
    monkeypatch.setattr(gate_error_rates, "servers_ready", ready)
    monkeypatch.setattr(gate_error_rates, "gate_ab", fake_gate_ab)
    monkeypatch.setattr(gate_error_rates, "_calibrated_env", lambda factor, threads, say: {})
    scenarios = gate_error_rates.measure_ab(2, (1.1,), workdir=str(tmp_path), thresholds=(0.05, 0.1),
                                            stream=io.StringIO())
    assert [(scenario.factor, scenario.threshold) for scenario in scenarios] == [(1.0, 0.05), (1.1, 0.05),
                                                                                  (1.0, 0.1), (1.1, 0.1)]
    assert seen == [5.0] * 4 + [10.0] * 4


def test_ab_jobs_alternate_between_scenarios_and_a_deadline_stops_between_rounds(tmp_path, monkeypatch):
    """Round r runs unchanged then each factor's job r; no round starts that the slowest one says would overrun."""
    order, clock = [], [0.0]

    class FakeRunner:
        def __init__(self, *args, env, **kwargs):
            self.env = env

    @contextlib.contextmanager
    def ready(*runners):
        yield

    def fake_gate_ab(runner_a, runner_b, config, **options):
        order.append(runner_b.env["factor"])
        clock[0] += 100.0 * runner_b.env["factor"]   # each job takes 100 s times its factor
        return GateResult((), (), (), ()), [], [], 3

    monkeypatch.setattr(gate_error_rates, "Runner", FakeRunner)
    monkeypatch.setattr(gate_error_rates, "servers_ready", ready)
    monkeypatch.setattr(gate_error_rates, "gate_ab", fake_gate_ab)
    monkeypatch.setattr(gate_error_rates, "_calibrated_env", lambda factor, threads, say: {"factor": factor})
    monkeypatch.setattr(gate_error_rates.time, "monotonic", lambda: clock[0])
    stream = io.StringIO()
    scenarios = gate_error_rates.measure_ab(5, (1.5, 2.0), workdir=str(tmp_path), stream=stream, stop_after=1000.0)
    assert order == [1.0, 1.5, 2.0] * 2   # a round takes 450 s: a third would end at 1350 s
    assert [len(scenario.seconds) for scenario in scenarios] == [2, 2, 2]
    assert "stopping before round 3" in stream.getvalue()
    assert gate_error_rates.summary_rows(scenarios, 5)[0][2] == "0/2"


def test_check_jobs_meet_the_neighbour_only_after_the_baselines_and_alternate_under_a_deadline(tmp_path,
                                                                                              monkeypatch):
    """Baselines are saved quiet; the neighbour runs beside the gated reruns, which alternate between scenarios
    round by round; no round starts that the slowest one says would overrun the deadline."""
    events, clock = [], [0.0]

    class FakeRunner:
        def __init__(self, *args, env, **kwargs):
            self.env = env

        def run(self, label, storage=None, only=None):
            events.append("save")
            clock[0] += 10.0
            return types.SimpleNamespace(path=label, summary="1 passed")

    @contextlib.contextmanager
    def neighbour(seed):
        events.append(f"neighbour {seed} on")
        yield
        events.append(f"neighbour {seed} off")

    def fake_gate_check(runner, config, **options):
        events.append(runner.env["factor"])
        clock[0] += 100.0 * runner.env["factor"]
        return GateResult((), (), (), ()), None, [], 0

    saved = types.SimpleNamespace(benchmarks={"t::mm": types.SimpleNamespace(summary=lambda metric: 0.02)}, guard=None)
    monkeypatch.setattr(gate_error_rates, "Runner", FakeRunner)
    monkeypatch.setattr(gate_error_rates, "load_run", lambda path: saved)
    monkeypatch.setattr(gate_error_rates, "neighbour_running", neighbour)
    monkeypatch.setattr(gate_error_rates, "gate_check", fake_gate_check)
    monkeypatch.setattr(gate_error_rates, "_calibrated_env", lambda factor, threads, say: {"factor": factor})
    monkeypatch.setattr(gate_error_rates.time, "monotonic", lambda: clock[0])
    stream = io.StringIO()
    scenarios = gate_error_rates.measure(5, 3, (1.5,), max_extra_runs=None, budget_s=600.0, workdir=str(tmp_path),
                                         stream=stream, neighbour=7, stop_after=600.0)
    # a round takes 250 s: the third would end at 750 s
    assert events == ["save"] * 3 + ["neighbour 7 on", 1.0, 1.5, 1.0, 1.5, "neighbour 7 off"]
    assert [len(scenario.seconds) for scenario in scenarios] == [2, 2]
    assert "stopping before round 3" in stream.getvalue()


def test_a_deadline_that_is_not_positive_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exit_:
        gate_error_rates.main(["--ab", "--stop-after", "0"])
    assert exit_.value.code == 2 and "--stop-after must be a positive number of seconds, got 0" in capsys.readouterr().err


def test_each_ab_scenario_gets_the_power_models_prediction_at_the_spread_its_jobs_measured():
    def verdict(values):
        return Verdict("t::mm", "cpu", 0.05, Decision.REGRESSION, "slower", tuple(values))

    scenario = gate_error_rates.Scenario(1.25, 0.05)
    for values in ([0.010, 0.0102, 0.0098], [0.010, 0.0104, 0.0096]):
        scenario.add(GateResult((verdict(values),), (), (), ()), 9, 100.0, [])
    (line,) = gate_error_rates.predicted_lines([scenario], jobs=20)
    spread = statistics.median([gate_error_rates.log_spread([0.010, 0.0102, 0.0098]),
                                gate_error_rates.log_spread([0.010, 0.0104, 0.0096])])
    cell = gate_error_rates.predict(1.25, spread, threshold=0.05, jobs=20)
    assert line.startswith(f"1.25× at 5 %: A's spread (median sd of logs) {spread:.3g}; predicted "
                           f"{cell['failed'] * 100:.0f} % of jobs failed")
    assert gate_error_rates.predicted_lines([gate_error_rates.Scenario(1.1)]) == []   # no job, no spread
