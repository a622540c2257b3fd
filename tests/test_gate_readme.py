"""The README's gate commands, read from README.md itself, run on this machine: every command parses, and every
benchmark its pytest arguments select can be gated (or the gate says there is nothing to compare), so the commands
work as written. Before, `-m cpu` met the CPU training step, timed in 3 rounds, and the gate stopped (exit status 2)
after its first pair; `-m gpu` on a machine without CUDA stopped it too (pytest-benchmark's warning, under this
suite's `filterwarnings = error`, failed the process)."""

import re
import shlex
from pathlib import Path

import pytest

from accounting.__main__ import build_parser
from accounting.bench.matrix import load_benchmarks
from accounting.gate.decide import judge
from accounting.gate.measure import Runner
from accounting.gate.storage import load_run
from tests.support.cli_runs import run_main

ROOT = Path(__file__).resolve().parent.parent


def readme_gate_commands() -> list[list[str]]:
    """The ``accounting gate ...`` lines of the README's regression-gate section, each as its arguments."""
    text = (ROOT / "README.md").read_text(encoding="utf8")
    section = text.split("## The regression gate", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["accounting", "gate"]:
                commands.append(words[1:])
    return commands


COMMANDS = readme_gate_commands()


def _pytest_args(command):
    return command[command.index("--") + 1:] if "--" in command else None


def test_the_readme_has_every_gate_action():
    assert sorted({command[1] for command in COMMANDS}) == ["ab", "check", "history", "save"]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: command[1])
def test_each_command_parses(command):
    args = build_parser().parse_args(command)
    assert args.gate_command == command[1]


SELECTIONS = sorted({tuple(args) for args in map(_pytest_args, COMMANDS) if args is not None})


@pytest.mark.slow  # runs the README's pytest selections in processes of their own
@pytest.mark.parametrize("pytest_args", SELECTIONS, ids=" ".join)
def test_what_each_command_selects_can_be_gated(pytest_args, tmp_path):
    """Run the selection as the gate runs it, then judge the run against itself: every benchmark in it is compared,
    none is "not judged", and a selection that runs no benchmark here (-m gpu without CUDA) is no error."""
    measured = Runner(list(pytest_args), workdir=str(tmp_path), cwd=str(ROOT), threads=1).run("readme")
    if measured.path is None:
        assert measured.returncode in (0, 5)
        return
    run = load_run(measured.path)
    assert run.benchmarks, measured.summary
    config = load_benchmarks()
    result = judge([run, run], [run], threshold_for=config.regression_threshold, metric=config.regression_metric)
    not_judged = {verdict.name: verdict.reason for verdict in result.verdicts if verdict.decision is None}
    assert not_judged == {}
    assert not result.failed


def test_history_as_written_answers_on_a_machine_that_saved_nothing(tmp_path, capsys, monkeypatch):
    command = next(command for command in COMMANDS if command[1] == "history")
    monkeypatch.chdir(tmp_path)  # an empty storage, and the plot's path, here
    status, out, err = run_main(command, capsys)
    assert status == 0 and out.startswith("History: no runs"), err
