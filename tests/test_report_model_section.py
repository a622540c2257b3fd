"""``accounting report --model SIZE``: the training-step section in the text, JSON and plot; its one-line errors.

The matmul sweep is replaced by the report's own pre-measurement document (``preview``) so
these tests time only the model steps; the full report runs end to end in test_report_cli.py.
"""

import json

import pytest

from accounting.health.states import roll_up
from accounting.model_mfu import PEAK_MEMORY_BAND, STEP_POLICIES, hardware_flops, model_size, step
from accounting import transformer_training_memory
from accounting.report import cli, model_section
from accounting.timing import MEMORY_FRACTION
from accounting.report.health_section import health_document
from accounting.report.run import preview
from accounting.model.flops import transformer_flops
from tests.support.cli_runs import run_main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def no_sweep(monkeypatch):
    """build_report without measuring matmuls: the document as it stands before the sweep."""
    calls = []

    def fake_build_report(plan, *, progress, started, **_options):
        calls.append(plan)
        document = preview(plan)
        document["health"] = health_document(roll_up("node", []))
        return document

    monkeypatch.setattr(cli, "build_report", fake_build_report)
    return calls




def test_model_section_in_text_json_and_plot(no_sweep, capsys, tmp_path):
    json_path, plot_path = tmp_path / "report.json", tmp_path / "report.png"
    status, out, err = run_main(["report", "--device", "cpu", "--dtypes", "float32", "--quiet", "--model", "tiny",
                             "--layers", "1", "--seq", "16", "--batch", "2", "--json", str(json_path),
                             "--plot", str(plot_path)], capsys)
    assert status == 0, err
    assert "Model training step (tiny: 1 layers, width 64, 4 heads, 16 tokens x batch 2, vocabulary 256; AdamW):" in out
    report = json.loads(json_path.read_text())
    section = report["model"]
    assert section["size"] == {"name": "tiny", "layers": 1, "width": 64, "heads": 4, "kv_heads": 4,
                               "sequence_length": 16, "vocabulary": 256, "batch_size": 2}
    size = model_size("tiny", layers=1, seq=16, batch=2)
    rows = section["rows"]
    assert [(row["precision"], row["recompute"]) for row in rows] == [
        *((precision, False) for precision in STEP_POLICIES), ("fp32", True)]
    for row in rows:
        assert row["model_flops"] == transformer_flops(size.config, 2).training
        assert row["hardware_flops"] == hardware_flops(size.config, 2, row["recompute"], row["attention_kernel"])
        assert row["attention_kernel"] in out and row["compiled"] is False
        assert row["hfu"] == pytest.approx(row["mfu"] * row["hardware_flops"] / row["model_flops"])
        assert row["tokens_per_s"] == pytest.approx(32 / row["median_s"])
        low, high = PEAK_MEMORY_BAND
        assert row["memory_ratio"] <= high and (row["recompute"] or row["memory_ratio"] >= low)
    assert rows[-1]["hfu"] > rows[-1]["mfu"]
    assert plot_path.read_bytes().startswith(PNG_SIGNATURE)


def test_the_default_report_has_no_model_section(no_sweep, capsys, tmp_path):
    json_path = tmp_path / "report.json"
    status, out, err = run_main(["report", "--device", "cpu", "--dtypes", "float32", "--quiet",
                             "--json", str(json_path)], capsys)
    assert status == 0, err
    assert "Model training step" not in out
    assert "model" not in json.loads(json_path.read_text())


@pytest.mark.parametrize("argv, message", [
    pytest.param(["--layers", "2"], r"--layers change the model of --model SIZE; give --model too$", id="no-model"),
    pytest.param(["--model", "tiny", "--heads", "5"], r"--model: heads=5 does not divide width=64", id="heads"),
    pytest.param(["--model", "tiny", "--batch", "0"], r"--model: batch must be a positive integer, got 0$",
                 id="zero-batch"),
    pytest.param(["--model", "huge"], r"argument --model: invalid choice: 'huge'", id="unknown-size"),
    pytest.param(["--model", "tiny", "--width", "many"], r"argument --width: invalid int value: 'many'",
                 id="not-a-number"),
])
def test_bad_model_arguments_are_one_line_before_measuring(no_sweep, capsys, argv, message):
    status, out, err = run_main(["report", "--device", "cpu", "--quiet", *argv], capsys)
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("accounting report: error: ")
    assert pytest.importorskip("re").search(message, err.strip())
    assert no_sweep == []  # refused before any measuring


def test_a_model_that_does_not_fit_is_refused_before_measuring(no_sweep, capsys, monkeypatch):
    monkeypatch.setattr(step, "free_memory_bytes", lambda device: 2**30)
    status, _out, err = run_main(["report", "--device", "cpu", "--quiet", "--model", "gpt2-small"], capsys)
    assert status == 2
    assert "gpt2-small does not fit even at batch 1: batch 12 needs" in err and "of 1.00 GiB free" in err
    assert no_sweep == []


def test_a_batch_that_does_not_fit_shrinks_to_one_that_does_and_says_so(no_sweep, capsys, monkeypatch, tmp_path):
    size = model_size("tiny-llama", layers=1, seq=64, batch=4)  # activations, not the update, set the peak
    need = {batch: max(transformer_training_memory(size.config, batch, "adamw", precision, attention="sdpa").peak
                       for precision in STEP_POLICIES) for batch in (2, 3)}
    monkeypatch.setattr(step, "free_memory_bytes", lambda device: int(need[2] / MEMORY_FRACTION) + 1)
    json_path = tmp_path / "report.json"
    status, out, err = run_main(["report", "--device", "cpu", "--dtypes", "float32", "--quiet", "--model", "tiny-llama",
                                 "--layers", "1", "--seq", "64", "--json", str(json_path)], capsys)
    assert status == 0, err
    section = json.loads(json_path.read_text())["model"]
    assert section["size"]["batch_size"] == 2 and {row["batch_size"] for row in section["rows"]} == {2}
    assert "tiny-llama at batch 2 of 4: batch 4 needs" in out


def test_compile_rows_or_their_failure_sit_beside_the_eager_ones(no_sweep, capsys, monkeypatch, tmp_path):
    def failing(step, eager, **_options):
        return None, "torch.compile failed: RuntimeError: no C++ compiler"

    monkeypatch.setattr(model_section, "measure_compiled_step", failing)
    json_path = tmp_path / "report.json"
    status, out, err = run_main(["report", "--device", "cpu", "--dtypes", "float32", "--quiet", "--model", "tiny",
                                 "--layers", "1", "--seq", "8", "--batch", "1", "--compile", "--json", str(json_path)],
                                capsys)
    assert status == 0, err
    rows = json.loads(json_path.read_text())["model"]["rows"]
    assert all(row["compile_failure"] == "torch.compile failed: RuntimeError: no C++ compiler" for row in rows)
    assert "fp32: torch.compile failed: RuntimeError: no C++ compiler" in out
