"""Plans of architectures the formulas do not describe: the model transformers builds, traced on meta.

Truth: the model ``transformers`` builds from the same config (its ``sum(p.numel())``), and, for the
families the formulas do describe, the formulas' own answers, which the CPU tests hold to the measured
step: a trace and a formula must agree where both exist.
"""

import json
import sys
import tomllib
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from accounting import AccountingError, TransformerConfig, transformer_training_memory
from accounting.model.flops import transformer_flops
from accounting.plan.traced import trace_step
from tests.support.cli_runs import run_main
from tests.support.hf_models import FAMILIES, MOE_FAMILIES, NEWER_FAMILIES, hf_config, model_from_config_json

# gpt_neox (Pythia): parallel attention and MLP, partial rotary, biases everywhere: no formula family reads it.
NEOX = {"model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 64}


def numel(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_a_model_type_the_formulas_do_not_read_is_traced_and_says_so(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(NEOX))
    status, out, err = run_main(["plan", "--config", str(path), "--sequence-length", "32", "--micro-batch", "2"],
                                capsys)
    assert status == 0 and err == ""
    assert f"{numel(model_from_config_json(NEOX)):,} parameters: GPTNeoXForCausalLM" in out
    assert "traced (the formulas do not describe it)" in out
    assert "a trace cannot know the attention kernel a real device runs" in out


# On meta, torch's grouped matmul (the experts' default implementation) takes bf16 only: the mixtures of experts
# are traced in bf16, the dense families in fp32.
TRACED_PRECISION = {family: "bf16" if family in MOE_FAMILIES else "fp32" for family in FAMILIES + NEWER_FAMILIES}
@pytest.mark.parametrize("family", FAMILIES + NEWER_FAMILIES)
def test_traced_and_formula_answers_agree(family):
    """Every family the formulas read: parameters and FLOPs exactly; the activations the forward saved and the
    AdamW step's peak within 5 %."""
    precision = TRACED_PRECISION[family]
    config_json = hf_config(family, **({} if family == "gpt2" else {"head_width": 16})).to_dict()
    traced = trace_step(config_json, batch_size=2, sequence_length=32, precision=precision)
    config = TransformerConfig.from_hf(config_json, sequence_length=32)
    memory = transformer_training_memory(config, 2, "adamw", precision, attention="eager")
    assert traced.parameters == config.parameter_count
    assert traced.flops == transformer_flops(config, 2).training
    assert traced.memory.saved == pytest.approx(memory.activations, rel=0.05)  # what the forward saved
    assert traced.peak == pytest.approx(memory.peak, rel=0.05)


def test_a_master_copy_is_added_to_the_traced_peak():
    traced = trace_step(NEOX, batch_size=1, sequence_length=16, precision="bf16-master")
    assert traced.dtype == "bfloat16" and traced.master_bytes == 4 * traced.parameters
    assert traced.peak == traced.memory.peak + traced.master_bytes


def test_without_transformers_the_error_names_an_extra_that_installs_it(monkeypatch):
    """The extra the message names is declared in pyproject.toml and installs transformers (nothing else)."""
    monkeypatch.setitem(sys.modules, "transformers", None)
    needs = r"tracing it needs transformers.*pip install 'accounting\[\w+\]'"
    with pytest.raises(AccountingError, match=needs) as error:
        trace_step(NEOX)
    extra = error.value.args[0].rsplit("accounting[", 1)[1].split("]")[0]
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert [requirement.split(">")[0] for requirement in project["optional-dependencies"][extra]] == ["transformers"]


@pytest.mark.parametrize(("options", "message"), [
    (["--devices", "2"], "--devices, --sharding and --recompute are not traced"),
    (["--json"], "a traced plan prints text only"),
])
def test_what_a_trace_does_not_measure_is_refused_by_name(options, message, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(NEOX))
    status, _out, err = run_main(["plan", "--config", str(path), *options], capsys)
    assert status == 2 and message in err


def test_a_model_type_transformers_does_not_know_is_named():
    with pytest.raises(AccountingError, match="transformers cannot build model_type 'no-such-model'"):
        trace_step({"model_type": "no-such-model", "hidden_size": 8})
