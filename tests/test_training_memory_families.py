"""Training memory of Hugging Face ``transformers`` models, predicted vs measured on the CPU.

Truth: the live-tensor tracker (:func:`accounting.live_memory.measure_step_memory`) around the
second of two real AdamW steps of each family's ``transformers`` model, built from the
``transformers`` config of ``tests/support/hf_models.hf_config`` (random weights, small sizes
shaped like the real ones) with the library's default implementations (grouped-mm experts), its
``TransformerConfig`` read from that config by ``TransformerConfig.from_hf``: the bytes the
forward saved, and the step's peak with weights, gradients, master weights and optimizer
state. Targets: both within 5 %, for GPT-2, Llama, Mistral, Qwen2 and Mixtral shapes, fp32, bf16 under
autocast and bf16 with an fp32 master copy, with and without recomputing every block
(``activation_checkpointing_enable``).
"""

import pytest

# transformers is a test extra (the truth these tests check against): where it is missing the module is
# skipped with that reason, so `pytest -m gpu` still collects.
transformers = pytest.importorskip("transformers")

from accounting import TransformerConfig, transformer_activation_bytes, transformer_training_memory
from studies.training_memory_families import POLICIES, RECOMPUTES, measure_model
from tests.support.hf_models import hf_config

TOLERANCE = 0.05
FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "mixtral")
SIZES = dict(layers=2, width=64, heads=4, kv_heads=2, ffn_width=160, vocabulary=256, positions=32)
EXPERT_SIZES = dict(ffn_width=96, experts=4, experts_per_token=2)
BATCH_SIZE = 2


def _build(family: str, attention: str = "eager", **sizes):
    """(model, TransformerConfig) of ``family``: transformers' own defaults but the attention asked for."""
    settings = hf_config(family, **(SIZES | (EXPERT_SIZES if family == "mixtral" else {}) | sizes))
    model = transformers.AutoModelForCausalLM.from_config(settings, attn_implementation=attention).train()
    return model, TransformerConfig.from_hf(settings.to_dict())


def _predict(family, config, precision, recompute, batch_size=BATCH_SIZE, attention="eager"):
    """The prediction from the config alone: GPT-2's unfused GELU (``gelu_new``) comes from its config.json."""
    return transformer_training_memory(config, batch_size, "adamw", precision, attention=attention,
                                       recompute=recompute)


@pytest.mark.parametrize(
    "family, precision, recompute",
    [
        pytest.param(family, precision, recompute, id=f"{family}-{precision}-{recompute}")
        for family in FAMILIES
        for precision in POLICIES
        for recompute in RECOMPUTES
    ],
)
def test_saved_activations_and_peak_of_a_real_step(family, precision, recompute):
    model, config = _build(family)
    measured = measure_model(model, config, precision, recompute, BATCH_SIZE)
    predicted = _predict(family, config, precision, recompute)
    assert measured.persistent == pytest.approx(predicted.persistent, rel=1e-3)  # step counters aside
    assert measured.activations == pytest.approx(predicted.activations, rel=TOLERANCE)
    assert measured.peak == pytest.approx(predicted.peak, rel=TOLERANCE)


@pytest.mark.parametrize(
    "family, precision",
    [pytest.param("gpt2", "fp32", id="gpt2-fp32"), pytest.param("llama", "bf16-autocast", id="llama-bf16-autocast")],
)
def test_fused_attention_saves_no_scores(family, precision):
    """``attn_implementation="sdpa"`` (the CPU's flash kernel): Q, K, V, output and log-sum-exp only."""
    model, config = _build(family, "sdpa")
    measured = measure_model(model, config, precision, "none", BATCH_SIZE)
    predicted = _predict(family, config, precision, "none", attention="sdpa")
    assert measured.activations == pytest.approx(predicted.activations, rel=TOLERANCE)
    assert measured.peak == pytest.approx(predicted.peak, rel=TOLERANCE)


@pytest.mark.parametrize(
    "kv_heads, head_width, positions, batch_size",
    [
        pytest.param(4, None, 24, 3, id="multi-head"),
        pytest.param(2, 32, 48, 1, id="grouped-query-wide-heads"),
        pytest.param(1, None, 24, 2, id="multi-query"),
    ],
)
def test_saved_activations_follow_the_shape(kv_heads, head_width, positions, batch_size):
    """Key/value heads, head widths, lengths and batches the table does not pin (Llama, bf16 master)."""
    model, config = _build("llama", kv_heads=kv_heads, head_width=head_width, positions=positions)
    measured = measure_model(model, config, "bf16-master", "none", batch_size)
    predicted = transformer_activation_bytes(config, batch_size, "bf16-master")
    assert measured.activations == pytest.approx(predicted, rel=TOLERANCE)


def test_recomputation_is_now_a_prediction_not_a_bound():
    """Saving every activation over-counts a recomputing step's peak; the recompute prediction meets it."""
    model, config = _build("llama")
    measured = measure_model(model, config, "fp32", "full", BATCH_SIZE)
    assert measured.peak < 0.95 * _predict("llama", config, "fp32", "none").peak
    assert measured.peak == pytest.approx(_predict("llama", config, "fp32", "full").peak, rel=TOLERANCE)
