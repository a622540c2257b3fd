"""benchmarks.json's model section: the shipped one loads, its 1B-class floors sit under what Hugging Face's step
reached on the recorded H200; every bad entry is named."""

import json
from pathlib import Path

import pytest

from accounting import TransformerConfig
from accounting.bench.matrix import load_benchmarks, parse_benchmarks
from accounting.errors import AccountingError
from accounting.model_mfu import MODEL_SIZES, STEP_POLICIES
from tests.support.cli_runs import edited

SHIPPED = Path(__file__).resolve().parent.parent / "benchmarks.json"
RECORDED = Path(__file__).resolve().parent / "data" / "hosts" / "nvidia-h200"

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
        for size in (matrix.size, matrix.quick_size):
            for precision in matrix.precisions_of(size):
                assert precision in STEP_POLICIES and 0 < config.model_floor(kind, precision, size) <= 1


def _recorded_hf_llama_mfu() -> dict:
    """Hugging Face's Llama step of TinyLlama's shape on the recorded H200: MFU per precision, no recomputation."""
    rows = json.loads((RECORDED / "hf-llama-step-peaks.json").read_text())["rows"]
    mfu = {}
    for row in rows:
        if row["recompute"] == "none":
            mfu.setdefault(row["precision"], []).append(row["mfu"])
    return mfu


def test_the_1b_class_floors_pass_what_hugging_face_reached_on_the_recorded_h200_and_fail_a_card_a_fifth_slow():
    """The H200's bf16 floors for the Llama size: below every bf16 MFU Hugging Face's step read there (0.367 foreach,
    0.383 fused; its autocast step, 0.337, bounds the master-weight policy), above 0.8 of the slowest of them."""
    config, recorded = load_benchmarks(SHIPPED), _recorded_hf_llama_mfu()
    device = json.loads((RECORDED / "model.json").read_text())["machine"]["device"]["name"]
    size = config.model("cuda").size
    assert MODEL_SIZES[size].config == TransformerConfig.from_hf(
        json.loads((RECORDED / "hf-llama-step-peaks.json").read_text())["fields"], sequence_length=2048)
    for precision, measured in (("bf16", recorded["bf16"]), ("bf16-mixed", recorded["bf16-autocast"])):
        floor = config.model_floor("cuda", precision, size, chip=device)
        assert 0.8 * min(measured) <= floor < min(measured)
    assert "fp32" not in config.model("cuda").precisions_of(size)  # fp32 GQA ran SDPA's math kernel: MFU 0.041
    assert min(recorded["fp32"]) < config.model_floor("cuda", "fp32")


def test_per_size_entries_override_the_kinds():
    sized = edited(edited(GOOD, ("model", "cpu", "sizes"), {"tiny": {
        "precisions": ["bf16"], "floors": {"bf16": 0.3, "_why": "kept out"}, "chip_floors": {"H200 SXM": {"bf16": 0.5}}}}),
        ("model", "cpu", "fallback_size"), "tiny")
    config = parse_benchmarks(sized)
    matrix = config.model("cpu")
    assert matrix.precisions_of("tiny") == ("bf16",) and matrix.precisions_of("small") == ("fp32", "bf16")
    assert matrix.fallback_size == "tiny"
    assert config.model_floor("cpu", "bf16", "tiny") == 0.3
    assert config.model_floor("cpu", "bf16", "tiny", chip="NVIDIA H200") == 0.5
    assert config.model_floor("cpu", "bf16", "tiny", chip="NVIDIA A100-SXM4-80GB") == 0.3
    assert config.model_floor("cpu", "bf16", "small", chip="NVIDIA H200") == 0.001  # the kind's
    assert config.model_floor("cpu", "fp32", "tiny") == 0.02  # not overridden: the kind's


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
    pytest.param(("model", "cpu", "size"), "medium", r"model.cpu.size = 'medium': must be one of tiny, small, gpt2-small, tiny-llama, tinyllama-1.1b$",
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
    pytest.param(("model", "cpu", "fallback_size"), "huge", r"model.cpu.fallback_size = 'huge': must be one of tiny,",
                 id="unknown-fallback"),
    pytest.param(("model", "cpu", "sizes"), {"huge": {}}, r"model.cpu.sizes.huge is not a model size; sizes: tiny,",
                 id="unknown-sized"),
    pytest.param(("model", "cpu", "sizes"), {"tiny": {"rounds": 2}}, r"model.cpu.sizes.tiny has unknown key\(s\) 'rounds'",
                 id="sized-unknown-key"),
    pytest.param(("model", "cpu", "sizes"), {"tiny": {"precisions": ["fp16-mixed"]}},
                 r"model.cpu.sizes.tiny.precisions\[0\] = 'fp16-mixed': a training step runs", id="sized-policy"),
    pytest.param(("model", "cpu", "sizes"), {"tiny": {"floors": {"bf16": 2}}},
                 r"model.cpu.sizes.tiny.floors.bf16 = 2: an MFU floor must be a number in \(0, 1\]$", id="sized-floor"),
    pytest.param(("model", "cpu", "sizes"), {"tiny": {"floors": {"float32": 0.2}}},
                 r"model.cpu.sizes.tiny.floors.float32 is not a precision policy", id="sized-dtype-not-policy"),
    pytest.param(("model", "cpu", "sizes"), {"tiny": {"chip_floors": {"H200": {"bf16": 0.3}}}},
                 r"model.cpu.sizes.tiny.chip_floors.H200 is not a row of the peak table \(did you mean 'H200 SXM'\?\)",
                 id="sized-chip"),
])
def test_a_bad_model_entry_is_named(path, value, message):
    with pytest.raises(AccountingError, match=r"^benchmarks.json: " + message):
        parse_benchmarks(edited(GOOD, path, value))


def test_a_missing_floor_for_a_precision_is_named():
    with pytest.raises(AccountingError, match=r"^benchmarks.json: model.cpu.floors has no floor for bf16-mixed$"):
        parse_benchmarks(GOOD).model_floor("cpu", "bf16-mixed")
