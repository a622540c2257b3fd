"""benchmarks.json's model section: the shipped one loads; every bad entry is named."""

from pathlib import Path

import pytest

from accounting.bench.matrix import load_benchmarks, parse_benchmarks
from accounting.errors import AccountingError
from accounting.model_mfu import MODEL_SIZES, STEP_POLICIES
from tests.support.cli_runs import edited

SHIPPED = Path(__file__).resolve().parent.parent / "benchmarks.json"

GOOD = {
    "regression": {"metric": "median", "threshold_percent": 10},
    "cpu": {"dtypes": ["float32"], "shapes": [[64, 64, 64]], "floors": {"float32": 0.3}},
    "model": {
        "cpu": {"size": "small", "quick_size": "tiny", "precisions": ["fp32", "bf16"],
                "floors": {"fp32": 0.02, "bf16": 0.001, "_why": "notes are kept out"}, "rounds": 2},
    },
}


def test_the_shipped_model_section_names_real_sizes_and_policies():
    config = load_benchmarks(SHIPPED)
    assert set(config.models) == {"cpu", "cuda"}
    for kind, matrix in config.models.items():
        assert matrix.size in MODEL_SIZES and matrix.quick_size in MODEL_SIZES
        for precision in matrix.precisions:
            assert precision in STEP_POLICIES and 0 < config.model_floor(kind, precision) <= 1


def test_a_good_model_section_parses():
    config = parse_benchmarks(GOOD)
    matrix = config.model("cpu")
    assert (matrix.size, matrix.quick_size, matrix.precisions, matrix.rounds) == ("small", "tiny", ("fp32", "bf16"), 2)
    assert matrix.floors == {"fp32": 0.02, "bf16": 0.001} and matrix.kind == "cpu"
    assert parse_benchmarks(edited(GOOD, ("model", "cpu", "rounds"), 1)).model("cpu").rounds == 1  # the smallest


def test_the_model_section_is_optional():
    without = {key: value for key, value in GOOD.items() if key != "model"}
    config = parse_benchmarks(without)
    assert config.models == {}
    with pytest.raises(AccountingError, match=r"^benchmarks.json has no model.cpu section; it has no model section$"):
        config.model("cpu")




@pytest.mark.parametrize("path, value, message", [
    pytest.param(("model",), [], r"model must be an object, got \[\]$", id="not-an-object"),
    pytest.param(("model", "tpu"), {}, r"model has unknown key\(s\) 'tpu'; known: cpu, cuda$", id="unknown-kind"),
    pytest.param(("model", "cpu"), "small", r"model.cpu must be an object, got 'small'$", id="kind-not-an-object"),
    pytest.param(("model", "cpu", "floors"), [0.02], r"model.cpu.floors must be an object, got \[0.02\]$",
                 id="floors-not-an-object"),
    pytest.param(("model", "cpu", "floors"), ..., r"model.cpu.floors has no floor for fp32, bf16$", id="no-floors"),
    pytest.param(("model", "cpu", "size"), "medium", r"model.cpu.size = 'medium': must be one of tiny, small, gpt2-small$",
                 id="unknown-size"),
    pytest.param(("model", "cpu", "quick_size"), ..., r"model.cpu.quick_size = None: must be one of", id="no-quick-size"),
    pytest.param(("model", "cpu", "precisions"), [], r"model.cpu.precisions must be a non-empty list", id="no-precisions"),
    pytest.param(("model", "cpu", "precisions"), ["fp32", "fp16-mixed"],
                 r"model.cpu.precisions\[1\] = 'fp16-mixed': a training step runs fp32, bf16-mixed, bf16$", id="fp16"),
    pytest.param(("model", "cpu", "floors", "bf16"), ..., r"model.cpu.floors has no floor for bf16$", id="floor-missing"),
    pytest.param(("model", "cpu", "floors", "fp32"), 1.2, r"model.cpu.floors.fp32 = 1.2: an MFU floor must be a number",
                 id="floor-above-one"),
    pytest.param(("model", "cpu", "floors", "bf16-mixed"), 0.1,
                 r"model.cpu.floors.bf16-mixed is a floor for 'bf16-mixed', which model.cpu.precisions does not list",
                 id="floor-unlisted"),
    pytest.param(("model", "cpu", "rounds"), 0, r"model.cpu.rounds = 0: must be a positive integer$", id="rounds-zero"),
    pytest.param(("model", "cpu", "rounds"), "2", r"model.cpu.rounds = '2': must be a positive integer$", id="rounds-text"),
    pytest.param(("model", "cpu", "shapes"), [[1, 1, 1]], r"model.cpu has unknown key\(s\) 'shapes'", id="matmul-key"),
])
def test_a_bad_model_entry_is_named(path, value, message):
    with pytest.raises(AccountingError, match=r"^benchmarks.json: " + message):
        parse_benchmarks(edited(GOOD, path, value))


def test_a_missing_floor_for_a_precision_is_named():
    with pytest.raises(AccountingError, match=r"^benchmarks.json: model.cpu.floors has no floor for bf16-mixed$"):
        parse_benchmarks(GOOD).model_floor("cpu", "bf16-mixed")
