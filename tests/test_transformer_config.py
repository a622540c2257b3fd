"""TransformerConfig's parameter counts against the models Hugging Face ``transformers`` builds.

The truth is ``sum(p.numel())`` of the real model (``AutoModelForCausalLM.from_config``, on the meta
device: nothing allocated), part by part (attention, MLP or experts and router, norms, embeddings),
for small configs of each family drawn by Hypothesis and for the published full-size ones, whose
counts the Hub states too.
"""

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting import AccountingError, AccountingTypeError, TransformerConfig
from tests.support.hf_models import FAMILIES, build_hf_model, model_from_config_json
from tests.support.published_configs import PUBLISHED

# Each example builds a meta model (~0.05 s).
META_MODEL_EXAMPLES = settings(max_examples=15)


def numel(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@st.composite
def small_family_sizes(draw, family: str) -> dict:
    """Sizes ``hf_models.hf_config`` takes, valid for ``family``; ``head_width`` free where the family allows it."""
    heads = draw(st.integers(1, 4))
    sizes = dict(
        layers=draw(st.integers(1, 3)),
        heads=heads,
        ffn_width=draw(st.integers(1, 40)),
        vocabulary=draw(st.integers(2, 50)),
        positions=draw(st.integers(1, 16)),
        tied_embeddings=draw(st.booleans()),
    )
    if family == "gpt2":
        return sizes | {"width": heads * draw(st.integers(1, 8))}
    # transformers wants heads to divide the width even where head_dim is given.
    sizes |= {
        "width": heads * draw(st.integers(1, 8)),
        "kv_heads": draw(st.sampled_from([k for k in range(1, heads + 1) if heads % k == 0])),
        "head_width": 2 * draw(st.integers(1, 4)),  # rotary pairs features: an even head width
    }
    if family == "llama":
        sizes["bias"] = draw(st.booleans())
    if family == "mixtral":
        experts = draw(st.integers(2, 4))
        sizes |= {"experts": experts, "experts_per_token": draw(st.integers(1, experts))}
    return sizes


def parts(family: str, model: torch.nn.Module) -> dict:
    """The real model's modules, by the TransformerConfig count each one is."""
    if family == "gpt2":
        body, block = model.transformer, model.transformer.h[0]
        return dict(attention=block.attn, mlp=block.mlp, norm=block.ln_1, final_norm=body.ln_f, layers=body.h,
                    embeddings=[body.wte, body.wpe], unembedding=model.lm_head)
    body, block = model.model, model.model.layers[0]
    found = dict(attention=block.self_attn, mlp=block.mlp, norm=block.input_layernorm, final_norm=body.norm,
                 layers=body.layers, embeddings=[body.embed_tokens], unembedding=model.lm_head)
    if family == "mixtral":
        found |= dict(router=block.mlp.gate, experts=block.mlp.experts)
    return found


@pytest.mark.parametrize("family", FAMILIES)
@META_MODEL_EXAMPLES
@given(data=st.data())
def test_parameter_counts_equal_the_real_model_part_by_part(family, data):
    sizes = data.draw(small_family_sizes(family))
    model, config = build_hf_model(family, device="meta", **sizes)
    real = parts(family, model)
    assert config.parameter_count == numel(model)
    assert config.attention_parameter_count == numel(real["attention"])
    assert config.mlp_parameter_count == numel(real["mlp"])
    assert config.norm_parameter_count == numel(real["norm"]) == numel(real["final_norm"])
    assert config.layer_parameter_count == numel(real["layers"][0])
    assert config.layers * config.layer_parameter_count == numel(real["layers"])
    assert config.embedding_parameter_count == sum(numel(m) for m in real["embeddings"])
    assert config.unembedding_parameter_count == real["unembedding"].weight.numel()
    matrices = [p for p in real["layers"][0].parameters() if p.dim() >= 2]
    assert config.layer_matmul_parameter_count == sum(p.numel() for p in matrices)
    if family == "mixtral":
        assert config.router_parameter_count == numel(real["router"])
        assert config.experts * config.expert_parameter_count == numel(real["experts"])


@pytest.mark.parametrize("family", FAMILIES)
def test_widths_are_those_of_the_real_projections(family):
    wide_heads = {} if family == "gpt2" else {"head_width": 24}
    model, config = build_hf_model(family, device="meta", heads=4, kv_heads=2, **wide_heads)
    if family == "gpt2":
        q_rows = model.transformer.h[0].attn.c_attn.weight.shape[1] // 3
        kv_rows = q_rows
    else:
        attention = model.model.layers[0].self_attn
        q_rows, kv_rows = attention.q_proj.out_features, attention.k_proj.out_features
    assert (config.attention_width, config.kv_width) == (q_rows, kv_rows)
    assert config.head_width == q_rows // config.heads


@pytest.mark.parametrize("name", PUBLISHED)
def test_full_size_counts_equal_the_real_model_and_the_published_figure(name):
    config_json, published = PUBLISHED[name]
    config = TransformerConfig.from_hf(config_json)
    assert config.parameter_count == numel(model_from_config_json(config_json))
    if published is not None:
        assert config.parameter_count == published


def test_llama_3_8b_written_by_hand_is_the_config_from_hf():
    """The fields written out (source: Meta-Llama-3-8B's config.json) agree with what from_hf reads."""
    by_hand = TransformerConfig(
        layers=32, width=4096, heads=32, kv_heads=8, sequence_length=8192, vocabulary=128256, ffn_width=14336,
        mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False, learned_positions=False,
    )
    assert by_hand == TransformerConfig.from_hf(PUBLISHED["llama-3-8b"][0])
    assert by_hand.parameter_count == numel(model_from_config_json(PUBLISHED["llama-3-8b"][0]))


def test_mixtral_active_weights_are_two_experts_of_eight():
    """Mixtral-8x7B's weights per token: attention, 2 of the 8 experts and the router of each layer."""
    config = TransformerConfig.from_hf(PUBLISHED["mixtral-8x7b"][0])
    layer = model_from_config_json(PUBLISHED["mixtral-8x7b"][0]).model.layers[0]
    attention = sum(p.numel() for p in layer.self_attn.parameters())
    experts = sum(p.numel() for p in layer.mlp.experts.parameters())
    assert config.layer_active_matmul_parameter_count == attention + experts * 2 // 8 + numel(layer.mlp.gate)
    assert config.layer_matmul_parameter_count == attention + experts + numel(layer.mlp.gate)
    idle = config.layers * experts * (8 - 2) // 8
    assert config.active_parameter_count == numel(model_from_config_json(PUBLISHED["mixtral-8x7b"][0])) - idle


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "mixtral"])
def test_without_experts_every_parameter_is_active(family):
    _, config = build_hf_model(family, device="meta")
    assert config.active_parameter_count == config.parameter_count


# ---- GPT-2 stays the default -------------------------------------------------------------

GPT2_SIZES = dict(layers=2, width=64, heads=4, sequence_length=16, vocabulary=100)


@given(tied=st.booleans(), learned=st.booleans(), bias=st.booleans(), ffn=st.none() | st.integers(1, 300))
def test_left_out_fields_are_gpt2s(tied, learned, bias, ffn):
    implicit = TransformerConfig(
        **GPT2_SIZES, ffn_width=ffn, tied_embeddings=tied, learned_positions=learned, bias=bias
    )
    explicit = TransformerConfig(
        **GPT2_SIZES, ffn_width=ffn or 4 * 64, tied_embeddings=tied, learned_positions=learned, bias=bias,
        kv_heads=4, head_width=16, mlp="gelu", norm="layernorm", qkv_bias=bias, experts=1, experts_per_token=1,
        max_positions=16,
    )
    assert implicit == explicit
    assert implicit.parameter_count == explicit.parameter_count


def test_a_head_width_given_frees_heads_from_dividing_the_width():
    config = TransformerConfig(**GPT2_SIZES | {"heads": 5}, head_width=8)
    assert (config.attention_width, config.kv_width) == (40, 40)


def test_the_position_table_keeps_its_rows_for_shorter_sequences():
    model, config = build_hf_model("gpt2", device="meta", positions=32, sequence_length=8)
    assert config.max_positions == model.transformer.wpe.num_embeddings == 32
    assert config.parameter_count == numel(model)
    rotary = dataclasses.replace(config, learned_positions=False, max_positions=4)
    assert rotary.parameter_count == config.parameter_count - 32 * config.width


# ---- bad input ---------------------------------------------------------------------------


def config_with(**changes):
    return lambda: TransformerConfig(**GPT2_SIZES | changes)


@pytest.mark.parametrize(
    "call, error, message",
    [
        pytest.param(config_with(heads=5), AccountingError, r"^heads=5 does not divide width=64: .* \(or give head_width\)$", id="heads-not-dividing"),
        pytest.param(config_with(kv_heads=3), AccountingError, r"^kv_heads=3 does not divide heads=4: ", id="kv-heads-not-dividing"),
        pytest.param(config_with(kv_heads=0), AccountingError, r"^kv_heads must be a positive integer, got 0$", id="zero-kv-heads"),
        pytest.param(config_with(kv_heads=2.0), AccountingTypeError, r"^kv_heads must be a non-negative integer, got 2.0$", id="float-kv-heads"),
        pytest.param(config_with(head_width=0), AccountingError, r"^head_width must be a positive integer, got 0$", id="zero-head-width"),
        pytest.param(config_with(head_width=True), AccountingTypeError, r"^head_width must be a non-negative integer, got True$", id="bool-head-width"),
        pytest.param(config_with(experts=0), AccountingError, r"^experts must be a positive integer, got 0$", id="zero-experts"),
        pytest.param(config_with(experts_per_token=0), AccountingError, r"^experts_per_token must be a positive integer, got 0$", id="zero-experts-per-token"),
        pytest.param(config_with(experts=2, experts_per_token=3), AccountingError, r"^experts_per_token=3 is more than experts=2$", id="top-k-above-experts"),
        pytest.param(config_with(experts_per_token=2), AccountingError, r"^experts_per_token=2 is more than experts=1$", id="top-k-without-experts"),
        pytest.param(config_with(mlp="relu"), AccountingError, r"^mlp must be one of 'gelu', 'swiglu', 'clamped-swiglu', got 'relu'$", id="unknown-mlp"),
        pytest.param(config_with(mlp="SwiGLU"), AccountingError, r"^mlp must be one of 'gelu', 'swiglu', 'clamped-swiglu', got 'SwiGLU'$", id="mlp-in-capitals"),
        pytest.param(config_with(norm="batchnorm"), AccountingError, r"^norm must be one of 'layernorm', 'rmsnorm', 'fp32-rmsnorm', got 'batchnorm'$", id="unknown-norm"),
        pytest.param(config_with(qkv_bias="yes"), AccountingTypeError, r"^qkv_bias must be True, False or None, got 'yes'$", id="qkv-bias-not-bool"),
        pytest.param(config_with(qkv_bias=1), AccountingTypeError, r"^qkv_bias must be True, False or None, got 1$", id="qkv-bias-one"),
        pytest.param(config_with(max_positions=8), AccountingError, r"^max_positions=8 is less than sequence_length=16: ", id="position-table-too-short"),
        pytest.param(config_with(max_positions=0, learned_positions=False), AccountingError, r"^max_positions must be a positive integer, got 0$", id="zero-max-positions"),
        pytest.param(config_with(learned_positions="no"), AccountingTypeError, r"^learned_positions must be True or False, got 'no'$", id="learned-positions-not-bool"),
    ],
)
def test_bad_fields_raise_clear_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_a_short_position_table_is_fine_without_learned_positions():
    config = TransformerConfig(**GPT2_SIZES, learned_positions=False, max_positions=8)
    assert config.embedding_parameter_count == 100 * 64
