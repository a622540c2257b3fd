"""The families described as data (Qwen3, Qwen3-MoE, Gemma 2/3, DeepSeek V2/V3, gpt-oss, Phi-3, OLMo 2)
against the models ``transformers`` builds from their configs.

The truth: ``sum(p.numel())`` of the model (small on the CPU, published sizes on the meta device),
``FlopCounterMode`` around one training step of the small model, and the active-parameter counts
the models' publishers state on their cards.
"""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from torch.utils.flop_counter import FlopCounterMode

from accounting import AccountingError, TransformerConfig, transformer_training_memory
from accounting.live_memory import LiveTensorBytes
from accounting.model.flops import transformer_flops
from accounting.model.hf_config import GEMMA3_TEXT_DEFAULTS, not_counted
from studies.training_memory_families import measure_model
from tests.support.hf_models import (
    MOE_FAMILIES, NEWER_FAMILIES, WINDOW, build_hf_model, hf_config, model_from_config_json, random_token_ids,
    training_step,
)
from tests.support.cli_runs import run_main
from tests.support.published_configs import PUBLISHED, PUBLISHED_MULTIMODAL
from tests.test_hf_config import OLD_PRETRAINED_DEFAULTS


def numel(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("family", NEWER_FAMILIES)
def test_the_small_models_count_and_step_flops_are_the_models(family):
    model, config = build_hf_model(family)
    assert config.parameter_count == numel(model)
    counter = FlopCounterMode(display=False)
    training_step(model, random_token_ids(config, batch_size=2), counter)
    assert counter.get_total_flops() == transformer_flops(config, batch_size=2).training


@pytest.mark.parametrize("family", NEWER_FAMILIES)
def test_a_block_counts_as_the_models_block(family):
    """Per block, not only in total: a dense first block and an expert block each equal the real ones."""
    model, config = build_hf_model(family)
    blocks = [numel(layer) for layer in model.model.layers]
    dense = config.dense_layers if config.experts > 1 else config.layers
    expected = [config.dense_layer_parameter_count] * dense + [config.layer_parameter_count] * (config.layers - dense)
    assert sorted(blocks) == sorted(expected)


@pytest.mark.parametrize("family", ("gemma2", "gemma3_text", "gpt_oss", "phi3"))
def test_the_local_layers_are_those_transformers_makes(family):
    saved = hf_config(family)
    config = TransformerConfig.from_hf(saved.to_dict())
    every = family == "phi3"  # Phi-3 has no layer_types: its window applies to every block
    sliding = saved.num_hidden_layers if every else sum(kind == "sliding_attention" for kind in saved.layer_types)
    assert (config.sliding_window, config.sliding_layers) == (WINDOW, sliding)


@pytest.mark.parametrize("name, pattern", [("gemma-2-9b", None), ("gemma-3-1b", 6)])
def test_a_published_gemma_without_layer_types_places_its_local_layers_as_transformers_does(name, pattern):
    config_json = PUBLISHED[name][0]
    assert "layer_types" not in config_json
    built = transformers.AutoConfig.for_model(config_json["model_type"], **{
        key: value for key, value in config_json.items() if key != "model_type"})
    config = TransformerConfig.from_hf(config_json)
    assert config.sliding_layers == sum(kind == "sliding_attention" for kind in built.layer_types)


NEW_PUBLISHED = [name for name, (config_json, _) in PUBLISHED.items()
                 if config_json["model_type"] in NEWER_FAMILIES]


@pytest.mark.parametrize("name", NEW_PUBLISHED)
def test_a_published_config_reads_as_its_file_says(name):
    """Every key of the file as the Hub serves it (auto_map, quantization_config included) is read or harmless."""
    config_json, published = PUBLISHED[name]
    config = TransformerConfig.from_hf(config_json)
    assert config.parameter_count == (published or numel(model_from_config_json(config_json)))


@pytest.mark.parametrize("name, active", [
    ("qwen3-30b-a3b", 3_353_032_704),  # Qwen's card: 3.3B activated, both embeddings counted
    ("gpt-oss-20b", 3_608_307_264),  # OpenAI's card: 3.6B active, the unembedding counted, the embedding not
    ("gpt-oss-120b", 5_132_849_472),  # 5.1B
])
def test_active_parameters_follow_the_publishers_convention(name, active):
    assert TransformerConfig.from_hf(PUBLISHED[name][0]).active_parameter_count == active


@pytest.mark.parametrize("family", [family for family in MOE_FAMILIES if family != "mixtral"])
def test_active_parameters_are_the_model_less_its_idle_experts(family):
    """Counted on the real model: every parameter, less the experts one token does not use in each
    expert block, less the embedding lookup where the family's convention leaves it out."""
    model, config = build_hf_model(family)
    experts = [layer.mlp.experts for layer in model.model.layers if hasattr(layer.mlp, "experts")]
    idle = sum(numel(module) * (config.experts - config.experts_per_token) // config.experts for module in experts)
    lookup = numel(model.model.embed_tokens) if config.active_embeddings == "unembedding" else 0
    assert config.active_parameter_count == numel(model) - idle - lookup
    assert config.active_parameters("both") == numel(model) - idle


@pytest.mark.parametrize("family", [family for family in NEWER_FAMILIES if family != "deepseek_v2"])
def test_every_key_of_the_default_config_is_read_and_the_count_is_the_models(family):
    """The class defaults at full size (DeepSeek-V2's leaves num_experts_per_tok null: an error, below)."""
    config_json = transformers.AutoConfig.for_model(family).to_dict()
    assert TransformerConfig.from_hf(config_json).parameter_count == numel(model_from_config_json(config_json))


@pytest.mark.parametrize("family, change, message", [
    ("qwen3", {"attention_bias": True}, "'attention_bias' is True"),
    ("gpt_oss", {"attention_bias": False}, "'attention_bias' is False"),
    ("qwen3", {"quantization_config": {"quant_method": "gptq", "bits": 4}}, "quant_method 'gptq'"),
    ("olmo2", {"auto_map": {"AutoModelForCausalLM": "custom.Model"}}, "'auto_map' is not known"),
    ("deepseek_v2", {"num_experts_per_tok": None}, "no 'num_experts_per_tok'"),
    ("deepseek_v3", {"moe_layer_freq": 2}, "'moe_layer_freq' is 2"),
    ("qwen3_moe", {"mlp_only_layers": [5]}, "layers [5] outside 0..1"),
    ("gemma2", {"layer_types": ["full_attention"]}, "must list 2 layer types"),
])
def test_what_the_formulas_cannot_place_is_an_error_naming_it(family, change, message):
    with pytest.raises(AccountingError, match=message.replace("[", r"\[").replace("]", r"\]")):
        TransformerConfig.from_hf(hf_config(family).to_dict() | change)


def test_qwen3_moe_dense_blocks_follow_mlp_only_layers_and_the_sparse_step():
    config_json = hf_config("qwen3_moe", layers=4).to_dict() | {"decoder_sparse_step": 1, "mlp_only_layers": [0, 2]}
    model = model_from_config_json(config_json, device="cpu")
    config = TransformerConfig.from_hf(config_json)
    assert (config.dense_layers, config.parameter_count) == (2, numel(model))


# ---- training memory: the live-tensor tracker around a real AdamW step (studies.training_memory_families) ----

TOLERANCE = 0.05
# Shaped like the published models: heads of width / heads (the class defaults of 128 or 256 would make the
# small models' attention 4-8 times their width, which no published size has).
MEMORY_SIZES = dict(layers=2, width=64, heads=4, kv_heads=2, head_width=16, ffn_width=160, vocabulary=256,
                    positions=32)
MEMORY_CASES = [("fp32", "none"), ("fp32", "full"), ("bf16-autocast", "none"), ("bf16-autocast", "full"),
                ("bf16-master", "full")]


def _memory_case(family: str, precision: str, recompute: str, attention: str = "eager"):
    """(measured StepMemory, predicted TrainingMemory) of one AdamW step of the small model."""
    sizes = MEMORY_SIZES | (dict(ffn_width=96) if family in MOE_FAMILIES else {})
    settings = hf_config(family, **sizes)
    model = transformers.AutoModelForCausalLM.from_config(settings, attn_implementation=attention).train()
    config = TransformerConfig.from_hf(settings.to_dict())
    measured = measure_model(model, config, precision, recompute, batch_size=2)
    return measured, transformer_training_memory(config, 2, "adamw", precision, attention=attention,
                                                 recompute=recompute)


@pytest.mark.parametrize("family", NEWER_FAMILIES)
@pytest.mark.parametrize("precision, recompute", MEMORY_CASES, ids=[f"{p}-{r}" for p, r in MEMORY_CASES])
def test_saved_activations_and_peak_of_a_real_step(family, precision, recompute):
    measured, predicted = _memory_case(family, precision, recompute)
    assert measured.persistent == pytest.approx(predicted.persistent, rel=1e-3)  # step counters aside
    assert measured.activations == pytest.approx(predicted.activations, rel=TOLERANCE)
    assert measured.peak == pytest.approx(predicted.peak, rel=TOLERANCE)


@pytest.mark.parametrize("family", ["phi3", "gemma3_text", "deepseek_v3"])
def test_sdpa_counts_the_kernel_each_block_runs(family):
    """SDPA on the CPU: flash for global blocks, flash with the sliding-window mask (and K, V repeated) for
    local ones (Phi-3: every block; Gemma 3: every other one here); latent attention's V a view of its
    up-projection."""
    measured, predicted = _memory_case(family, "fp32", "none", attention="sdpa")
    assert predicted.attention.startswith("sdpa-")
    assert measured.activations == pytest.approx(predicted.activations, rel=TOLERANCE)
    assert measured.peak == pytest.approx(predicted.peak, rel=TOLERANCE)


@pytest.mark.parametrize("family", ["gemma2", "gpt_oss"])
def test_soft_caps_and_sinks_run_eager_whatever_is_asked(family):
    """transformers refuses SDPA for soft-capped scores and for sinks: the model it builds runs eager,
    and a plan asked for SDPA counts eager."""
    model = transformers.AutoModelForCausalLM.from_config(hf_config(family, **MEMORY_SIZES))
    assert model.config._attn_implementation == "eager"
    config = TransformerConfig.from_hf(hf_config(family, **MEMORY_SIZES).to_dict())
    assert transformer_training_memory(config, 2, "adamw", "fp32", attention="sdpa").attention == "eager"


@pytest.mark.parametrize("family", NEWER_FAMILIES)
def test_a_saved_config_reads_back_from_its_file_with_keys_older_versions_wrote(family, tmp_path):
    """save_pretrained's file and folder read as the dict does; the generation keys older versions wrote are harmless."""
    saved = hf_config(family)
    saved.save_pretrained(tmp_path)
    from_dict = TransformerConfig.from_hf(saved.to_dict())
    assert TransformerConfig.from_hf(tmp_path) == TransformerConfig.from_hf(str(tmp_path / "config.json")) == from_dict
    assert TransformerConfig.from_hf(saved.to_dict() | OLD_PRETRAINED_DEFAULTS) == from_dict


# ---- Gemma 3's multimodal checkpoints: the text model of text_config, the rest named ----

def _multimodal(name):
    """(the config.json, Gemma3ForConditionalGeneration built by transformers from it on meta)."""
    config_json, _ = PUBLISHED_MULTIMODAL[name]
    return config_json, model_from_config_json(config_json)


@pytest.mark.parametrize("name", PUBLISHED_MULTIMODAL)
def test_a_multimodal_gemma3_is_planned_as_its_text_model_and_says_what_is_left_out(name):
    """The text count is Gemma3ForCausalLM's of the text config transformers fills in; the vision tower and the
    projector not counted are named with their counts; the three add up to the checkpoint."""
    config_json, model = _multimodal(name)
    with torch.device("meta"):
        text_model = transformers.Gemma3ForCausalLM(model.config.text_config)
    config = TransformerConfig.from_hf(config_json)
    assert config.parameter_count == numel(text_model)
    assert (config.layers, config.heads, config.kv_heads, config.vocabulary, config.sliding_layers) == (
        model.config.text_config.num_hidden_layers, model.config.text_config.num_attention_heads,
        model.config.text_config.num_key_value_heads, model.config.text_config.vocab_size,
        model.config.text_config.layer_types.count("sliding_attention"))
    left_out = not_counted(config_json)
    assert (left_out.vision_tower, left_out.projector) == (numel(model.model.vision_tower),
                                                          numel(model.model.multi_modal_projector))
    total = PUBLISHED_MULTIMODAL[name][1] or numel(model)
    assert config.parameter_count + left_out.vision_tower + left_out.projector == total


def test_the_text_config_defaults_filled_in_are_transformers_own():
    defaults = transformers.Gemma3TextConfig()
    assert {key: getattr(defaults, key) for key in GEMMA3_TEXT_DEFAULTS} == GEMMA3_TEXT_DEFAULTS


def test_a_multimodal_gemma3_plan_names_what_it_does_not_count(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(PUBLISHED_MULTIMODAL["gemma-3-4b"][0]))
    status, out, _ = run_main(["plan", "--config", str(path), "--sequence-length", "4096"], capsys)
    assert status in (0, 1)
    assert "not counted: the vision tower (416,866,032 parameters) and the multimodal projector (2,950,272)" in out
    assert f"{TransformerConfig.from_hf(path).parameter_count:,} parameters" in out


_GEMMA3_VISION_HEAD = PUBLISHED_MULTIMODAL["gemma-3-4b"][0]["vision_config"] | {"vision_use_head": True}


@pytest.mark.parametrize("change, message", [
    ({"audio_config": {}}, "'audio_config' is not known for model_type 'gemma3'"),
    ({"text_config": {"model_type": "gemma2"}}, "text_config has model_type 'gemma2'"),
    ({"vision_config": _GEMMA3_VISION_HEAD}, "vision_use_head true"),
])
def test_what_a_multimodal_gemma3_cannot_place_is_an_error(change, message):
    with pytest.raises(AccountingError, match=message):
        not_counted(PUBLISHED_MULTIMODAL["gemma-3-4b"][0] | change)
    if "vision" not in str(change):
        with pytest.raises(AccountingError, match=message):
            TransformerConfig.from_hf(PUBLISHED_MULTIMODAL["gemma-3-4b"][0] | change)


# ---- DeepSeek's multi-token-prediction modules: counted when asked for ----

def test_deepseek_v3_with_its_mtp_module_counts_what_the_report_describes():
    """DeepSeek-V3 report, section 2.2: each module is the shared embedding and head, a projection 2h -> h, two
    RMSNorms and one transformer block; the block is the model's own expert block as transformers builds it."""
    config_json = PUBLISHED["deepseek-v3"][0]
    main, with_mtp = TransformerConfig.from_hf(config_json), TransformerConfig.from_hf(config_json, mtp=True)
    h = config_json["hidden_size"]
    block = numel(model_from_config_json(config_json | {"num_hidden_layers": 4}).model.layers[-1])  # an expert block
    module = 2 * h * h + 2 * h + block
    assert with_mtp.mtp_modules == config_json["num_nextn_predict_layers"] == 1
    assert with_mtp.parameter_count - main.parameter_count == with_mtp.mtp_parameter_count == module
    # The Hub's 685B: the main model, the module, and the copies of the embedding, the head and the head's norm the
    # checkpoint stores in its layer 61 (shared in training), besides FP8 scales (under 0.1B).
    stored = with_mtp.parameter_count + 2 * config_json["vocab_size"] * h + h
    assert 684e9 < stored < 685e9


def _mtp_module(model):
    """One multi-token-prediction module of the small DeepSeek-V3 model as the report describes it, made of
    transformers' own parts: RMSNorms of the embedding and of the last hidden state, a projection 2h -> h of
    their concatenation, one DeepSeek-V3 block (an expert block), and a norm before the model's shared head."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as deepseek  # the model's own block and norm

    settings, state = model.config, torch.random.get_rng_state()
    torch.manual_seed(0)
    block = deepseek.DeepseekV3DecoderLayer(settings, layer_idx=settings.num_hidden_layers).train()
    norms = [deepseek.DeepseekV3RMSNorm(settings.hidden_size) for _ in range(3)]
    projection = torch.nn.Linear(2 * settings.hidden_size, settings.hidden_size, bias=False)
    torch.random.set_rng_state(state)
    return block, norms, projection


def _step_with_mtp(model, token_ids, module=None):
    """The loss of ``model`` on ``token_ids``, and with ``module`` (:func:`_mtp_module`) its loss too."""
    out = model(input_ids=token_ids, labels=token_ids, output_hidden_states=module is not None)
    if module is None:
        return out.loss
    block, (embedding_norm, hidden_norm, head_norm), projection = module
    x = projection(torch.cat([embedding_norm(model.model.embed_tokens(token_ids)),
                              hidden_norm(out.hidden_states[-1])], dim=-1))
    positions = torch.arange(token_ids.shape[1]).unsqueeze(0)
    y = block(x, attention_mask=None, position_embeddings=model.model.rotary_emb(x, positions),
              position_ids=positions)
    logits = model.lm_head(head_norm(y[0] if isinstance(y, tuple) else y))
    return out.loss + torch.nn.functional.cross_entropy(logits.flatten(0, 1), token_ids.flatten())


def test_mtp_adds_the_modules_flops_and_saved_activations():
    """Its projection, its block and the shared head again, over as many tokens as the model: the step's FLOPs
    exactly; what the module's forward saves within 5 % (the live-tensor tracker, with and without it)."""
    model, config = build_hf_model("deepseek_v3", sequence_length=32)
    with_mtp = TransformerConfig.from_hf(model.config.to_dict() | {"num_nextn_predict_layers": 1},
                                         sequence_length=32, mtp=True)
    token_ids, module = random_token_ids(config, batch_size=2), _mtp_module(model)
    counter = FlopCounterMode(display=False)
    with counter:
        _step_with_mtp(model, token_ids, module).backward()
    assert counter.get_total_flops() == transformer_flops(with_mtp, batch_size=2).training
    saved = {}
    for mtp in (False, True):
        with LiveTensorBytes() as live:
            loss = _step_with_mtp(model, token_ids, module if mtp else None)
            saved[mtp] = live.current
            del loss
    predicted = [transformer_training_memory(c, 2, "adamw", "fp32").activations for c in (config, with_mtp)]
    assert saved[True] - saved[False] == pytest.approx(predicted[1] - predicted[0], rel=TOLERANCE)


@pytest.mark.parametrize("config_json", [PUBLISHED["qwen3-8b"][0], hf_config("deepseek_v3").to_dict()
                                         | {"num_nextn_predict_layers": 0}])
def test_mtp_without_modules_to_count_is_an_error(config_json):
    with pytest.raises(AccountingError, match="names no multi-token-prediction modules"):
        TransformerConfig.from_hf(config_json, mtp=True)
