"""``accounting plan`` as a user runs it: config files, text and JSON output, exit statuses, one-line errors.

In-process through ``accounting.__main__.main`` (one test starts the real command, marked ``slow``).
The figures are checked against the library calls the command stands for.
"""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from accounting.plan import PlanSettings, make_plan, plan_device, plan_document
from accounting.model.config import TransformerConfig
from tests.support.cli_runs import run_main
from tests.test_plan import GPT2_SMALL, LLAMA_3_8B


def test_llama_on_eight_h100s_under_zero3_as_json(config_file, capsys):
    path = config_file(LLAMA_3_8B)
    argv = ["plan", "--config", path, "--sequence-length", "2048", "--global-batch", "64", "--device", "H100 SXM",
            "--devices", "8", "--sharding", "zero3", "--tokens", "1e11", "--json"]
    status, out, err = run_main(argv, capsys)
    document = json.loads(out)
    config = TransformerConfig.from_hf(LLAMA_3_8B, sequence_length=2048)
    plan = make_plan(config, plan_device("H100 SXM", "bfloat16"), PlanSettings(devices=8, sharding="zero3"),
                     global_batch=64, tokens=1e11)
    assert document == json.loads(json.dumps(plan_document(plan, path)))
    assert status == (0 if plan.fits else 1) and err == ""


def test_gpt2_text_output_names_its_defaults(config_file, capsys):
    status, out, err = run_main(["plan", "--config", config_file(GPT2_SMALL), "--global-batch", "32"], capsys)
    assert status == 0 and err == ""
    assert "Run: 1 x H100 SXM (85.028 GB, 989.4 TFLOP/s dense bfloat16), ddp, bf16-mixed, adamw" in out
    assert "At MFU 0.4 (--mfu)" in out and "--headroom 0.1" in out


def test_a_named_size_plans_too(capsys):
    status, out, _err = run_main(["plan", "--model", "gpt2-small", "--sequence-length", "512", "--devices", "2",
                                  "--mfu", "0.5", "--json"], capsys)
    document = json.loads(out)
    assert status == 0
    assert document["model"]["sequence_length"] == 512 and document["compute"]["mfu"] == 0.5
    # the package's GPT is built for its sequence length: a position table of 512 rows
    positions_512 = TransformerConfig.from_hf({**GPT2_SMALL, "n_positions": 512})
    assert document["model"]["parameters"] == positions_512.parameter_count


def test_a_run_that_does_not_fit_exits_1_and_says_why(config_file, capsys):
    status, out, err = run_main(["plan", "--config", config_file(LLAMA_3_8B), "--sequence-length", "1024",
                                 "--device", "A10", "--global-batch", "4"], capsys)
    assert status == 1 and err == ""
    assert "Fits: no." in out and "model states alone need" in out and "under zero3" in out


def test_json_to_a_file(config_file, tmp_path, capsys):
    target = tmp_path / "plan.json"
    status, out, _err = run_main(["plan", "--config", config_file(GPT2_SMALL), "--json", str(target)], capsys)
    assert status == 0 and out == f"JSON written to {target}\n"
    assert json.loads(target.read_text())["fits"] is True


@pytest.mark.parametrize(("argv", "message"), [
    pytest.param([], r"one of the arguments --config --model is required", id="no-model"),
    pytest.param(["--config", "/nonexistent/config.json"], r"--config '/nonexistent/config.json'", id="no-file"),
    pytest.param(["--model", "huge"], r"argument --model: invalid choice: 'huge'", id="unknown-size"),
    pytest.param(["--model", "tiny", "--device", "H100"], r"device 'H100' is not in the peak table",
                 id="ambiguous-device"),
    pytest.param(["--model", "tiny", "--devices", "0"], r"--devices must be a positive whole number, got '0'",
                 id="no-devices"),
    pytest.param(["--model", "tiny", "--mfu", "1.2"], r"--mfu must be a fraction in \(0, 1\], got '1.2'", id="mfu"),
    pytest.param(["--model", "tiny", "--headroom", "1"], r"--headroom must be a fraction in \[0, 1\), got '1'",
                 id="headroom"),
    pytest.param(["--model", "tiny", "--sharding", "zero4"], r"argument --sharding: invalid choice: 'zero4'",
                 id="sharding"),
    pytest.param(["--model", "tiny", "--devices", "8", "--global-batch", "12"],
                 r"global batch 12 is not a multiple of the 8 devices", id="batch"),
    pytest.param(["--model", "tiny", "--tokens", "lots"], r"--tokens must be a positive number of tokens, got 'lots'",
                 id="tokens"),
    pytest.param(["--model", "tiny", "--device", "T4"], r"T4 has no published bfloat16 peak", id="no-peak"),
    pytest.param(["--model", "tiny", "--json", "/nonexistent/plan.json"], r"--json '/nonexistent/plan.json' cannot be",
                 id="json-path"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    status, out, err = run_main(["plan", *argv], capsys)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("accounting plan: error: ")
    assert re.search(message, err), err


def test_a_config_with_a_key_it_cannot_model_is_refused(config_file, capsys):
    path = config_file({**LLAMA_3_8B, "num_local_experts": 8})
    status, _out, err = run_main(["plan", "--config", path], capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert f"--config '{path}': " in err and "num_local_experts" in err


@pytest.mark.slow
def test_the_command_runs(config_file):
    path = config_file(GPT2_SMALL)
    result = subprocess.run([sys.executable, "-m", "accounting", "plan", "--config", path, "--devices", "4",
                             "--sharding", "zero1", "--global-batch", "64", "--tokens", "1e9"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Fits: yes" in result.stdout and "days" in result.stdout


# ---- the documented plans are what the command prints ---------------------------------------------

DOC = Path(__file__).resolve().parent.parent / "docs" / "plan.md"


def documented_runs() -> list:
    """``(arguments, printed text, exit status)`` of each ``$ python -m accounting plan`` block of docs/plan.md."""
    runs = []
    for block in re.findall(r"```text\n(\$ python -m accounting plan .*?)```", DOC.read_text(encoding="utf8"),
                            flags=re.DOTALL):
        command, _, output = block.partition("\n")
        output, _, status = output.partition("$ echo $?\n")
        runs.append(pytest.param(shlex.split(command)[4:], output, int(status or 0), id=f"run-{len(runs) + 1}"))
    return runs


@pytest.mark.parametrize(("argv", "printed", "status"), documented_runs())
def test_the_documented_plans_are_what_the_command_prints(argv, printed, status, tmp_path, monkeypatch, capsys):
    """Regenerate docs/plan.md's outputs when the formulas change: the doc shows real output."""
    config = re.search(r"```json\n(.*?)```", DOC.read_text(encoding="utf8"), flags=re.DOTALL).group(1)
    (tmp_path / "llama-3-8b.json").write_text(config)
    monkeypatch.chdir(tmp_path)
    assert run_main(argv, capsys)[:2] == (status, printed)


def test_the_doc_shows_a_plan_that_does_not_fit_and_one_that_does():
    assert sorted(run.values[2] for run in documented_runs()) == [0, 1]


def test_mtp_plans_deepseek_v3_with_its_prediction_module(config_file, capsys):
    """The plan with --mtp is the library's plan of the config read with mtp=True, and says what it counted."""
    from tests.support.published_configs import PUBLISHED

    path = config_file(PUBLISHED["deepseek-v3"][0])
    argv = ["plan", "--config", path, "--sequence-length", "4096", "--devices", "64", "--sharding", "zero3",
            "--recompute", "full"]
    _, plain, _ = run_main([*argv, "--json"], capsys)
    _, with_mtp, _ = run_main([*argv, "--mtp", "--json"], capsys)
    config = TransformerConfig.from_hf(path, sequence_length=4096, mtp=True)
    settings = PlanSettings(devices=64, sharding="zero3", recompute="full")
    expected = plan_document(make_plan(config, plan_device("H100 SXM", "bfloat16"), settings), path)
    assert json.loads(with_mtp) == expected
    assert json.loads(with_mtp)["model"]["parameters"] - json.loads(plain)["model"]["parameters"] \
        == config.mtp_parameter_count > 0
    _, text, _ = run_main([*argv, "--mtp"], capsys)
    assert f"1 multi-token-prediction module ({config.mtp_parameter_count:,} parameters, counted)" in text


@pytest.mark.parametrize("argv, message", [
    (["--model", "gpt2-small", "--mtp"], "--model names none"),
])
def test_mtp_without_modules_is_refused_by_name(argv, message, capsys):
    status, _, err = run_main(["plan", *argv], capsys)
    assert status == 2 and message in err
