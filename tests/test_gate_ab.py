"""``accounting gate ab``: A and B alternate in pairs, undecided benchmarks get more pairs within the budget (or a
cap), pairs of unequal load are set aside while load alike is kept, and the verdict is the sequential test's
(checked against :func:`accounting.gate.sequential.decide` on the pairs' log ratios worked out here)."""

import math
import os
from pathlib import Path

import numpy as np
import pytest

from accounting.bench.matrix import load_benchmarks
from accounting.errors import AccountingError
from accounting.gate import cli
from accounting.gate.ab import Trees, gate_ab, tree_environment
from accounting.gate.guard import recorded_disturbances
from accounting.gate.sequential import confidence_sequence, decide
from accounting.gate.measure import Measured
from accounting.gate.stats import Decision
from tests.support.cli_runs import run_main
from tests.support.gate_runs import COPY, LOADED, MATMUL, OTHER_CPU, QUIET, document, write

A_VALUES = [0.0150, 0.0152, 0.0148, 0.0151, 0.0149, 0.0150, 0.0153, 0.0147, 0.0150, 0.0151]


class PairRunner:
    """A fake :class:`Runner` for one tree: each run's medians come from ``values[name][run number]``."""

    def __init__(self, tree, values, log, *, guards=None, machine=None, workdir):
        self.tree, self.values, self.log, self.notes = tree, values, log, []
        self.guards, self.machine, self.workdir, self.count = guards or {}, machine, workdir, 0
        self.node_ids, self.pytest_args = {}, ["-m", "cpu"]

    def run(self, name, *, only=None, storage=None):
        self.log.append((self.tree, name, only))
        names = only if only is not None else list(self.values)
        medians = {bench: self.values[bench][self.count % len(self.values[bench])] for bench in names}
        options = {"machine": self.machine} if self.machine else {}
        guard = self.guards(self.count) if callable(self.guards) else self.guards.get(self.count, QUIET)
        path = write(Path(self.workdir), f"{name}.json", document(medians, guard=guard, **options))
        self.count += 1
        self.node_ids.update({bench: bench for bench in names})
        return Measured(path, 0, 1.0, "1 passed")


def _runners(tmp_path, a_values, b_values, **b_options):
    log = []
    return (PairRunner("A", a_values, log, workdir=tmp_path), PairRunner("B", b_values, log, workdir=tmp_path,
                                                                          **b_options), log)


@pytest.fixture
def config():
    return load_benchmarks()


def _log_ratios(a_values, b_values, pairs):
    """The pairs' log ratios as the fake runners hand them out: pair i's A and B are each list's i-th value."""
    return [(number, math.log(b_values[(number - 1) % len(b_values)]) - math.log(a_values[(number - 1) % len(a_values)]))
            for number in range(1, pairs + 1)]


def test_the_order_flips_each_pair_and_undecided_benchmarks_alone_get_the_extra_pairs(tmp_path, config):
    a = {MATMUL: A_VALUES, COPY: A_VALUES}
    b = {MATMUL: [value * 1.27 for value in A_VALUES], COPY: A_VALUES[::-1]}
    runner_a, runner_b, log = _runners(tmp_path, a, b)
    result, a_runs, b_runs, pairs = gate_ab(runner_a, runner_b, config, start_pairs=3)
    assert [tree for tree, _, _ in log[:6]] == ["A", "B", "B", "A", "A", "B"]
    assert all(only is None for _, _, only in log[:2])  # the first pair runs the user's arguments as given
    assert all(only == sorted([COPY, MATMUL]) for _, _, only in log[2:6])  # the rest of the start pairs: what it ran, by id
    decisions = {verdict.name: verdict.decision for verdict in result.verdicts}
    assert decisions == {MATMUL: Decision.REGRESSION, COPY: Decision.NO_CHANGE}
    # Each benchmark got pairs until its own decision, then no more.
    taken = {verdict.name: verdict.pairs for verdict in result.verdicts}
    assert pairs == max(taken.values()) and len(log) == 2 * pairs
    for name, count in taken.items():
        assert sum(1 for _, _, only in log if only is None or name in only) == 2 * count
    # The decision is the sequential test's on the log ratios, worked out here from the values handed out.
    threshold = config.regression_threshold("cpu", MATMUL) / 100
    direct = decide({name: _log_ratios(a[name], b[name], taken[name]) for name in a}, {name: threshold for name in a})
    assert {name: figures.decision for name, figures in direct.items()} == {
        name: decision.value for name, decision in decisions.items()}
    assert {name: figures.pairs for name, figures in direct.items()} == taken
    assert result.notes[-2].startswith(f"A/B: {pairs} interleaved pair(s) of fresh processes") or any(
        note.startswith(f"A/B: {pairs} interleaved pair(s)") for note in result.notes)


def test_an_unchanged_benchmark_stops_as_no_change_when_its_interval_clears_the_threshold(tmp_path, config):
    runner_a, runner_b, log = _runners(tmp_path, {MATMUL: A_VALUES}, {MATMUL: A_VALUES[::-1]})
    result, _, _, pairs = gate_ab(runner_a, runner_b, config, start_pairs=3)
    verdict = result.verdicts[0]
    assert verdict.decision is Decision.NO_CHANGE and not result.regressions and len(log) == 2 * pairs
    # The futility stop: the first pair count whose always-valid upper end is below the threshold, no later.
    ratios = [value for _, value in _log_ratios(A_VALUES, A_VALUES[::-1], 60)]
    first = next(count for count in range(2, 60) if confidence_sequence(ratios[:count])[1] < math.log(1.1))
    assert pairs == max(3, first) and verdict.comparison.ci_high < 1.1


def test_the_cap_ends_it_inconclusive_and_says_which_bound_stopped_it(tmp_path, config):
    noisy = [0.015, 0.020, 0.015, 0.020, 0.015, 0.020, 0.015, 0.020, 0.015, 0.020]
    runner_a, runner_b, log = _runners(tmp_path, {MATMUL: noisy}, {MATMUL: noisy[1:] + noisy[:1]})
    result, _, _, pairs = gate_ab(runner_a, runner_b, config, start_pairs=2, max_pairs=6)
    assert pairs == 6 and len(log) == 12 and result.suspects == [MATMUL]
    assert f"still inconclusive after 6 pairs (the cap, --max-pairs 6): {MATMUL}" in result.notes


def _timed(*runners, seconds=10.0):
    """Make each fake process take ``seconds`` on a fake clock (a one-item list, read by ``clock=``)."""
    now = [0.0]
    for runner in runners:
        original = runner.run

        def timed(name, *, only=None, storage=None, original=original):
            now[0] += seconds
            return original(name, only=only, storage=storage)

        runner.run = timed
    return now


def test_the_budget_ends_the_job_before_a_pair_that_would_overrun_it(tmp_path, config):
    """A fake clock: each process takes 10 s, so a pair 20 s; a 100 s budget fits the pairs that end by 100 s."""
    noisy = [0.015, 0.020, 0.015, 0.020, 0.015, 0.020, 0.015, 0.020, 0.015, 0.020]
    runner_a, runner_b, log = _runners(tmp_path, {MATMUL: noisy}, {MATMUL: noisy[1:] + noisy[:1]})
    now = _timed(runner_a, runner_b)
    result, _, _, pairs = gate_ab(runner_a, runner_b, config, start_pairs=2, budget_s=100.0, clock=lambda: now[0])
    # Pairs end at 20, 40, 60, 80 s; a fifth would end at 100 s, but 1.1 × its 20 s from 80 s is past the budget.
    assert pairs == 4 and now[0] == 80.0 and result.suspects == [MATMUL]
    assert f"still inconclusive after 4 pairs (the budget ran out: --budget): {MATMUL}" in result.notes
    assert any(note.startswith("A/B: 4 interleaved pair(s)") and "80 s of the budget of 100 s (80 %) used" in note
               for note in result.notes)


def test_a_pair_whose_sides_saw_unequal_load_is_set_aside_and_named(tmp_path, config):
    runner_a, runner_b, _ = _runners(tmp_path, {MATMUL: A_VALUES}, {MATMUL: A_VALUES})
    runner_a.guards = {1: LOADED}
    result, a_runs, _, _ = gate_ab(runner_a, runner_b, config, start_pairs=3, max_pairs=3)
    assert any(note.startswith("pair 2 not used, measured on a disturbed machine: other processes used 3.5 CPUs "
                               "during A's run and 0.2 during B's") for note in result.notes)
    assert len(result.verdicts[0].baseline_values) == len(a_runs) - 1


def _loaded_alike(count):
    """Both sides loaded by a neighbour busy about half the time: 0.4–0.6 CPUs of others in every run."""
    share = 0.4 + 0.2 * ((count * 7) % 5) / 4
    return {"before": QUIET["before"], "after": QUIET["after"], "own_before": 0.0, "own_after": 0.8,
            "host_cpu": {"busy_s": 10.0 + 10.0 * share, "steal_s": 0.0, "own_s": 10.0, "wall_s": 10.0, "cpus": 2}}


def test_load_alike_on_both_sides_is_kept_and_the_verdict_says_how_loaded(tmp_path, config):
    """A neighbour on the machine through the whole job: the old guard set every run aside and judged nothing."""
    runner_a, runner_b, _ = _runners(tmp_path, {MATMUL: A_VALUES}, {MATMUL: [value * 1.3 for value in A_VALUES]})
    runner_a.guards = runner_b.guards = _loaded_alike
    result, a_runs, b_runs, pairs = gate_ab(runner_a, runner_b, config, start_pairs=3)
    assert result.verdicts[0].decision is Decision.REGRESSION and result.verdicts[0].pairs == pairs
    assert all(recorded_disturbances(run.guard) for run in (*a_runs, *b_runs))  # the saved-history rule's view
    assert "load: loaded; other processes used 0.4–0.6 CPUs" in "\n".join(result.notes)
    assert not any("not used" in note for note in result.notes)


def test_a_and_b_from_different_hardware_are_refused_by_file(tmp_path, config):
    runner_a, runner_b, _ = _runners(tmp_path, {MATMUL: A_VALUES}, {MATMUL: A_VALUES}, machine=OTHER_CPU)
    with pytest.raises(AccountingError, match=r"b-1\.json: A and B runs record different hardware or software \("):
        gate_ab(runner_a, runner_b, config, start_pairs=1, max_pairs=1)


@pytest.mark.parametrize("start, cap", [(0, 3), (4, 3)])
def test_pairs_out_of_order_are_refused_with_their_values(tmp_path, config, start, cap):
    runner_a, runner_b, log = _runners(tmp_path, {MATMUL: A_VALUES}, {MATMUL: A_VALUES})
    with pytest.raises(AccountingError, match=rf"got {start} and {cap}$"):
        gate_ab(runner_a, runner_b, config, start_pairs=start, max_pairs=cap)
    assert log == []


def test_trees_must_be_two_different_directories(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    assert Trees(str(base), str(tmp_path)).check().baseline_dir == str(base)
    with pytest.raises(AccountingError, match=r"^--baseline-dir is not a directory: '.*missing'$"):
        Trees(str(tmp_path / "missing"), str(tmp_path)).check()
    with pytest.raises(AccountingError, match=r"is the current tree: A and B would be the same code"):
        Trees(str(tmp_path), str(tmp_path)).check()


def test_each_tree_comes_first_on_the_python_path(tmp_path):
    environment = tree_environment(str(tmp_path), {"PYTHONPATH": "/opt/lib"})
    assert environment["PYTHONPATH"].split(os.pathsep) == [str(tmp_path.absolute()), "/opt/lib"]


class CliRunner:
    """Stands in for :class:`Runner` in the command: records cwd and environment, writes runs from ``plan``."""

    plan, made = {}, []

    def __init__(self, pytest_args, *, device, workdir, cwd=None, env=None, own_runs=None, threads=None,
                 fork_server=False, **_):
        self.pytest_args, self.workdir, self.cwd, self.env, self.own_runs = pytest_args, workdir, cwd, env, own_runs
        self.notes, self.count, self.fork_server, self.events = [], 0, fork_server, []
        self.node_ids = {}
        CliRunner.made.append(self)

    def start(self):
        self.events.append("start")
        CliRunner.order.append((self.cwd, "start"))
        return self

    def wait_ready(self):
        self.events.append("ready")
        CliRunner.order.append((self.cwd, "ready"))

    def close(self):
        self.events.append("close")

    def run(self, name, *, only=None, storage=None):
        side = "A" if name.startswith("a-") else "B"
        names = only if only is not None else list(CliRunner.plan[side])
        medians = {bench: CliRunner.plan[side][bench][self.count] for bench in names}
        self.count += 1
        self.events.append("run")
        CliRunner.order.append((self.cwd, "run"))
        return Measured(write(Path(self.workdir), f"{name}.json", document(medians, guard=QUIET)), 0, 1.0, "1 passed")


@pytest.fixture
def cli_runner(monkeypatch):
    CliRunner.made, CliRunner.order = [], []
    monkeypatch.setattr(cli, "Runner", CliRunner)
    return CliRunner


def test_the_command_runs_a_in_the_baseline_tree_and_exits_1_on_a_regression(tmp_path, cli_runner, capsys,
                                                                            monkeypatch):
    base = tmp_path / "base"
    base.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cli.SUMMARY_ENV, raising=False)
    cli_runner.plan = {"A": {MATMUL: A_VALUES}, "B": {MATMUL: [value * 1.3 for value in A_VALUES]}}
    status, out, err = run_main(["gate", "ab", "--baseline-dir", str(base), "--keep", str(tmp_path / "kept"), "--",
                                 "-m", "cpu"], capsys)
    assert status == 1 and out.startswith("Gate: FAIL: 1 regression"), out + err
    runner_a, runner_b = cli_runner.made
    assert (runner_a.cwd, runner_b.cwd) == (str(base), str(tmp_path))
    assert runner_a.env["PYTHONPATH"].split(os.pathsep)[0] == str(base.absolute())
    assert runner_a.own_runs is runner_b.own_runs
    assert runner_a.pytest_args == runner_b.pytest_args == ["-m", "cpu"]
    pairs = int(out.split("Gate took")[1].split("(")[1].split()[0]) // 2
    assert "pair 1, A: 1 passed" in err and pairs >= 7 and "plan: the first pairs' log ratios spread by" in err
    # Both fork servers start, then both are ready, before the first run (an importing server is a
    # neighbour to the other side's run); both end after the last.
    assert runner_a.fork_server and runner_b.fork_server
    assert runner_a.events == runner_b.events == ["start", "ready", *["run"] * pairs, "close"]
    assert [event for _, event in CliRunner.order[:5]] == ["start", "start", "ready", "ready", "run"]


def test_fresh_interpreters_turns_the_fork_server_off(tmp_path, cli_runner, capsys, monkeypatch):
    (tmp_path / "base").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cli.SUMMARY_ENV, raising=False)
    cli_runner.plan = {"A": {MATMUL: A_VALUES}, "B": {MATMUL: A_VALUES[::-1]}}
    status, _, _ = run_main(["gate", "ab", "--baseline-dir", "base", "--fresh-interpreters", "--", "-m", "cpu"],
                            capsys)
    assert status == 0 and [runner.fork_server for runner in cli_runner.made] == [False, False]


def test_the_command_passes_unchanged_code(tmp_path, cli_runner, capsys, monkeypatch):
    base = tmp_path / "base"
    base.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cli.SUMMARY_ENV, raising=False)
    cli_runner.plan = {"A": {MATMUL: A_VALUES}, "B": {MATMUL: A_VALUES[::-1]}}
    status, out, _ = run_main(["gate", "ab", "--baseline-dir", str(base), "--", "-m", "cpu"], capsys)
    assert status == 0 and out.startswith("Gate: pass: 1 no change")


@pytest.mark.parametrize("options, message", [
    (["--start-pairs", "5", "--max-pairs", "3"], "--start-pairs 5 is above --max-pairs 3"),
    (["--max-pairs", "0"], "argument --max-pairs: must be a positive integer, got '0'"),
    (["--budget", "10x"], "argument --budget: must be a positive duration such as 600, 600s, 10m or 1h, got '10x'"),
])
def test_bad_pair_counts_are_one_line_errors(tmp_path, cli_runner, capsys, monkeypatch, options, message):
    base = tmp_path / "base"
    base.mkdir()
    monkeypatch.chdir(tmp_path)
    status, out, err = run_main(["gate", "ab", "--baseline-dir", str(base), *options, "--", "-m", "cpu"], capsys)
    assert (status, out) == (2, "") and err == f"accounting gate ab: error: {message}\n"
    assert cli_runner.made == []


def test_every_pair_set_aside_is_inconclusive_and_re_measured_not_uncompared(tmp_path, config):
    runner_a, runner_b, log = _runners(tmp_path, {MATMUL: A_VALUES}, {MATMUL: A_VALUES})
    runner_a.guards = {number: LOADED for number in range(3)}  # the first three A runs; the next ones are quiet
    result, _, _, pairs = gate_ab(runner_a, runner_b, config, start_pairs=3, max_pairs=4)
    assert pairs == 4 and len(log) == 8  # re-measured although no pair was usable after 3
    verdict = result.verdicts[0]
    assert verdict.decision is Decision.INCONCLUSIVE and len(verdict.baseline_values) == 1


def test_every_pair_set_aside_at_the_cap_says_re_measure(tmp_path, config):
    runner_a, runner_b, _ = _runners(tmp_path, {MATMUL: A_VALUES}, {MATMUL: A_VALUES})
    runner_a.guards = {number: LOADED for number in range(10)}
    result, _, _, pairs = gate_ab(runner_a, runner_b, config, start_pairs=2, max_pairs=3)
    verdict = result.verdicts[0]
    assert pairs == 3 and verdict.decision is Decision.INCONCLUSIVE
    assert verdict.reason == "re-measure: every pair was measured on a disturbed machine"


def test_the_plan_says_which_budget_or_threshold_would_decide_on_a_noisy_runner(tmp_path, config):
    noisy = [0.015, 0.020, 0.015, 0.020, 0.015, 0.020, 0.015, 0.020, 0.015, 0.020]
    runner_a, runner_b, log = _runners(tmp_path, {MATMUL: noisy}, {MATMUL: noisy[1:] + noisy[:1]})
    now = _timed(runner_a, runner_b)
    result, _, _, pairs = gate_ab(runner_a, runner_b, config, start_pairs=3, plan_only=True, clock=lambda: now[0])
    assert pairs == 3 and len(log) == 6
    plan_note = next(note for note in result.notes if note.startswith("plan: "))
    ratios = [value for _, value in _log_ratios(noisy, noisy[1:] + noisy[:1], 3)]
    assert f"spread by {np.std(ratios, ddof=1):.2g} (sd)" in plan_note
    assert "does not cover them" in plan_note and ("--budget" in plan_note or "--threshold" in plan_note)


def test_a_slow_stray_b_run_does_not_convict_unchanged_code(tmp_path, config):
    """Unchanged code with one B process hit by a neighbour: one pair's bet is at most one unit, so no false alarm."""
    b_values = list(A_VALUES[::-1])
    b_values[1] *= 1.6
    runner_a, runner_b, _ = _runners(tmp_path, {MATMUL: A_VALUES}, {MATMUL: b_values})
    result, _, b_runs, pairs = gate_ab(runner_a, runner_b, config, start_pairs=5, max_pairs=12)
    verdict = result.verdicts[0]
    assert verdict.decision in (Decision.NO_CHANGE, Decision.INCONCLUSIVE) and not result.failed
    compared = [run.benchmarks[MATMUL].summary(result.metric) for run in b_runs]
    assert compared[1] in verdict.current_outlier_values  # the table's values still screen it, as A's strays


def test_a_regression_with_a_stray_is_still_convicted(tmp_path, config):
    b_values = [value * 1.3 for value in A_VALUES[::-1]]
    b_values[1] *= 1.6
    runner_a, runner_b, _ = _runners(tmp_path, {MATMUL: A_VALUES}, {MATMUL: b_values})
    result, _, _, pairs = gate_ab(runner_a, runner_b, config, start_pairs=5)
    verdict = result.verdicts[0]
    assert verdict.decision is Decision.REGRESSION
    assert verdict.comparison.ratio == pytest.approx(math.exp(np.mean(
        [value for _, value in _log_ratios(A_VALUES, b_values, verdict.pairs)])), rel=1e-9)


def test_the_plan_option_runs_the_start_pairs_only_and_prints_the_plan(tmp_path, cli_runner, capsys, monkeypatch):
    (tmp_path / "base").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cli.SUMMARY_ENV, raising=False)
    cli_runner.plan = {"A": {MATMUL: A_VALUES}, "B": {MATMUL: [value * 1.3 for value in A_VALUES]}}
    status, out, err = run_main(["gate", "ab", "--baseline-dir", "base", "--plan", "--threshold", "0.05", "--",
                                 "-m", "cpu"], capsys)
    assert status == 0 and "(6 pytest processes)" in out  # 3 start pairs, then the plan: no verdict can fail yet
    assert "plan: the first pairs' log ratios spread by" in err and "Note: --plan: only the start pairs" in out
