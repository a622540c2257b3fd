"""``accounting gate ab``: A and B alternate in pairs, suspects get more pairs up to the cap, A's disturbed runs
are left out, and the verdict is the saved-history gate's own (checked against :func:`judge` on the same runs)."""

import math
import os
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from accounting.bench.matrix import load_benchmarks
from accounting.errors import AccountingError
from accounting.gate import cli
from accounting.gate.ab import AB_CONFIDENCE, Trees, gate_ab, tree_environment
from accounting.gate.decide import judge
from accounting.gate.measure import Measured
from accounting.gate.render import render_text
from accounting.gate.stats import CONFIDENCE, Decision, log_spread, smallest_convictable
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
        medians = {bench: self.values[bench][self.count] for bench in names}
        options = {"machine": self.machine} if self.machine else {}
        path = write(Path(self.workdir), f"{name}.json",
                     document(medians, guard=self.guards.get(self.count, QUIET), **options))
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


def test_the_order_flips_each_pair_and_suspects_alone_get_the_extra_pairs(tmp_path, config):
    a = {MATMUL: A_VALUES, COPY: A_VALUES}
    b = {MATMUL: [value * 1.27 for value in A_VALUES], COPY: A_VALUES[::-1]}
    runner_a, runner_b, log = _runners(tmp_path, a, b)
    result, a_runs, b_runs, pairs = gate_ab(runner_a, runner_b, config, start_pairs=3, max_pairs=8)
    assert [tree for tree, _, _ in log[:6]] == ["A", "B", "B", "A", "A", "B"]
    assert all(only is None for _, _, only in log[:2])  # the first pair runs the user's arguments as given
    assert all(only == sorted([COPY, MATMUL]) for _, _, only in log[2:6])  # the rest of the start pairs: what it ran, by id
    assert all(only == [MATMUL] for _, _, only in log[6:])
    # 1/binom(2n, n) <= 0.01 first at n = 5: two pairs of MATMUL alone.
    assert pairs == 5 and len(log) == 10
    decisions = {verdict.name: verdict.decision for verdict in result.verdicts}
    assert decisions == {MATMUL: Decision.REGRESSION, COPY: Decision.NO_CHANGE}
    # The verdict is judge's, with A as the baseline and B as the current runs.
    direct = judge(a_runs, b_runs, threshold_for=config.regression_threshold, metric=config.regression_metric,
                   confidence=AB_CONFIDENCE, screen_current=True, joint=True)
    assert [verdict.decision for verdict in direct.verdicts] == [verdict.decision for verdict in result.verdicts]
    assert "A/B: 5 interleaved pair(s) of fresh processes" in result.notes[-1]


def test_an_unchanged_matrix_is_decided_after_the_first_pairs(tmp_path, config):
    runner_a, runner_b, log = _runners(tmp_path, {MATMUL: A_VALUES}, {MATMUL: A_VALUES[::-1]})
    result, _, _, pairs = gate_ab(runner_a, runner_b, config, start_pairs=3, max_pairs=8)
    assert pairs == 3 and len(log) == 6
    assert result.verdicts[0].decision is Decision.NO_CHANGE and not result.regressions


def test_the_cap_ends_it_inconclusive_with_what_the_noise_allows(tmp_path, config):
    noisy = [0.015, 0.020, 0.015, 0.020, 0.015, 0.020, 0.015, 0.020, 0.015, 0.020]
    runner_a, runner_b, log = _runners(tmp_path, {MATMUL: noisy}, {MATMUL: noisy[1:] + noisy[:1]})
    result, _, _, pairs = gate_ab(runner_a, runner_b, config, start_pairs=2, max_pairs=6)
    assert pairs == 6 and len(log) == 12 and result.suspects == [MATMUL]
    assert f"still inconclusive after 6 pairs (the cap, --max-pairs): {MATMUL}" in result.notes
    assert any(note.startswith(f"{MATMUL}: its 6 baseline runs spread by") and "larger --max-pairs" in note
               for note in result.notes)
    # What the noise allows is worked out at the A/B interval's level, with the cap's runs.
    reach = smallest_convictable(log_spread(result.verdicts[0].baseline_values), 6, 6, threshold=0.1,
                                 confidence=AB_CONFIDENCE)
    assert any(f"convicts a slowdown from about {reach:.3g}× up" in note for note in result.notes)


def test_a_disturbed_a_run_is_left_out_and_named(tmp_path, config):
    a = {MATMUL: A_VALUES}
    runner_a, runner_b, _ = _runners(tmp_path, a, {MATMUL: A_VALUES})
    runner_a.guards = {1: LOADED}
    result, a_runs, _, _ = gate_ab(runner_a, runner_b, config, start_pairs=3, max_pairs=3)
    verdict = result.verdicts[0]
    assert len(verdict.baseline_values) == len(a_runs) - 1
    assert any(note.startswith(f"A run {a_runs[1].label} not used, measured on a disturbed machine") for note in
               result.notes)


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
    assert "pair 1, A: 1 passed" in err and "(10 pytest processes)" in out
    # Both fork servers start, then both are ready, before the first run (an importing server is a
    # neighbour to the other side's run); both end after the last.
    assert runner_a.fork_server and runner_b.fork_server
    assert runner_a.events == runner_b.events == ["start", "ready", *["run"] * 5, "close"]
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
])
def test_bad_pair_counts_are_one_line_errors(tmp_path, cli_runner, capsys, monkeypatch, options, message):
    base = tmp_path / "base"
    base.mkdir()
    monkeypatch.chdir(tmp_path)
    status, out, err = run_main(["gate", "ab", "--baseline-dir", str(base), *options, "--", "-m", "cpu"], capsys)
    assert (status, out) == (2, "") and err == f"accounting gate ab: error: {message}\n"
    assert cli_runner.made == []


def test_every_a_run_disturbed_is_inconclusive_and_re_measured_not_uncompared(tmp_path, config):
    runner_a, runner_b, log = _runners(tmp_path, {MATMUL: A_VALUES}, {MATMUL: A_VALUES})
    runner_a.guards = {number: LOADED for number in range(3)}  # the first three A runs; the next ones are quiet
    result, _, _, pairs = gate_ab(runner_a, runner_b, config, start_pairs=3, max_pairs=4)
    assert pairs == 4 and len(log) == 8  # re-measured although no A run was usable after 3 pairs
    verdict = result.verdicts[0]
    assert verdict.decision is Decision.INCONCLUSIVE and len(verdict.baseline_values) == 1


def test_every_a_run_disturbed_at_the_cap_says_re_measure(tmp_path, config):
    runner_a, runner_b, _ = _runners(tmp_path, {MATMUL: A_VALUES}, {MATMUL: A_VALUES})
    runner_a.guards = {number: LOADED for number in range(10)}
    result, _, _, pairs = gate_ab(runner_a, runner_b, config, start_pairs=2, max_pairs=3)
    verdict = result.verdicts[0]
    assert pairs == 3 and verdict.decision is Decision.INCONCLUSIVE
    assert verdict.reason == "re-measure: every baseline run was measured on a disturbed machine"
    assert not any("spread by" in note for note in result.notes)  # no spread to speak of


NOISY_A = [0.0150, 0.0162, 0.0141, 0.0158, 0.0146, 0.0155, 0.0139, 0.0160]


def test_a_b_convicts_on_its_own_interval_level_where_the_saved_history_rule_would_not(tmp_path, config):
    """A 1.17× slowdown under 5 % noise: significant, and above 10 % at the A/B level, not at the history's."""
    runner_a, runner_b, _ = _runners(tmp_path, {MATMUL: NOISY_A}, {MATMUL: [v * 1.17 for v in NOISY_A[::-1]]})
    result, a_runs, b_runs, pairs = gate_ab(runner_a, runner_b, config, start_pairs=3, max_pairs=8)
    verdict = result.verdicts[0]
    assert verdict.decision is Decision.REGRESSION and result.confidence == AB_CONFIDENCE < CONFIDENCE
    # The interval is scipy's pooled t interval on the log values, at the A/B level.
    reference = scipy_stats.ttest_ind(np.log(verdict.current_values), np.log(verdict.baseline_values), equal_var=True)
    low, high = reference.confidence_interval(confidence_level=AB_CONFIDENCE)
    comparison = verdict.comparison
    assert (comparison.ci_low, comparison.ci_high) == pytest.approx((math.exp(low), math.exp(high)), rel=1e-9)
    assert comparison.ci_low >= 1.1 and comparison.confidence == AB_CONFIDENCE
    # The same runs judged at the saved-history level: significant too, but the interval reaches below 10 %.
    history = judge(a_runs, b_runs, threshold_for=config.regression_threshold, metric=config.regression_metric)
    assert history.verdicts[0].decision is Decision.INCONCLUSIVE and history.verdicts[0].comparison.ci_low < 1.1
    assert history.verdicts[0].comparison.p_slower <= history.alpha
    assert f"ratio [{AB_CONFIDENCE * 100:g}% CI]" in render_text(result).splitlines()[2]


def _b_with_a_stray(factor, stray_at=1, stray=1.6):
    values = [value * factor for value in A_VALUES[::-1]]
    values[stray_at] *= stray
    return values


def test_a_slow_stray_b_run_is_set_aside_against_bs_own_median(tmp_path, config):
    """Unchanged code with one B process hit by a neighbour: screened as A's strays are, it reads *no change*."""
    b_values = _b_with_a_stray(1.0)
    runner_a, runner_b, _ = _runners(tmp_path, {MATMUL: A_VALUES}, {MATMUL: b_values})
    result, a_runs, b_runs, pairs = gate_ab(runner_a, runner_b, config, start_pairs=5, max_pairs=5)
    verdict = result.verdicts[0]
    compared = [run.benchmarks[MATMUL].summary(result.metric) for run in b_runs]  # each B run's fastest round
    assert verdict.decision is Decision.NO_CHANGE and verdict.current_outlier_values == (compared[1],)
    assert verdict.current_values == tuple(compared[:1] + compared[2:])
    assert f"1 slow outlier current run(s) set aside: {compared[1] * 1e3:.3g} ms" in verdict.reason
    # Kept, the stray leaves a 10 % slowdown neither shown nor excluded: the saved-history rule for current runs.
    kept = judge(a_runs, b_runs, threshold_for=config.regression_threshold, metric=config.regression_metric,
                 confidence=AB_CONFIDENCE)
    assert kept.verdicts[0].decision is Decision.INCONCLUSIVE and kept.verdicts[0].current_outlier_values == ()


def test_a_regression_moves_bs_median_and_is_not_screened_away(tmp_path, config):
    b_values = _b_with_a_stray(1.3)
    runner_a, runner_b, _ = _runners(tmp_path, {MATMUL: A_VALUES}, {MATMUL: b_values})
    result, _, b_runs, pairs = gate_ab(runner_a, runner_b, config, start_pairs=5, max_pairs=5)
    verdict = result.verdicts[0]
    compared = [run.benchmarks[MATMUL].summary(result.metric) for run in b_runs]
    assert verdict.decision is Decision.REGRESSION and verdict.current_outlier_values == (compared[1],)
    assert verdict.comparison.ratio == pytest.approx(1.3, rel=0.02)  # the slowed runs, not the stray, are compared
