"""TransformerConfig.from_hf against the config classes of Hugging Face ``transformers``.

``transformers`` is the truth here, never a dependency of the reader: every key its config
classes write must be read or known harmless, the config it saves (``save_pretrained``) reads
back from a file or a folder, and the count from the dict equals the model it builds. Keys that
would change a count unseen, and sizes left out, are errors naming them.
"""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

# transformers is a test extra (the truth these tests check against): where it is missing the module is
# skipped with that reason, so `pytest -m gpu` still collects.
transformers = pytest.importorskip("transformers")

from accounting import AccountingError, AccountingTypeError, TransformerConfig
from tests.support.hf_models import FAMILIES, hf_config, model_from_config_json
from tests.support.published_configs import PUBLISHED


def numel(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("family", FAMILIES)
def test_every_key_of_the_default_config_is_read_and_the_count_is_the_models(family):
    """The class defaults, full size (LlamaConfig() is Llama-2-7B-like, MixtralConfig() Mixtral-8x7B)."""
    config_json = transformers.AutoConfig.for_model(family).to_dict()
    assert TransformerConfig.from_hf(config_json).parameter_count == numel(model_from_config_json(config_json))


@pytest.mark.parametrize("family", FAMILIES)
def test_a_saved_config_reads_back_from_its_file_and_its_folder(family, tmp_path):
    saved = hf_config(family)
    saved.save_pretrained(tmp_path)
    from_dict = TransformerConfig.from_hf(saved.to_dict())
    assert TransformerConfig.from_hf(tmp_path) == TransformerConfig.from_hf(str(tmp_path / "config.json")) == from_dict


@pytest.mark.parametrize("family", FAMILIES)
@given(length=st.none() | st.integers(1, 32))
def test_the_sequence_length_is_the_models_longest_unless_given(family, length):
    saved = hf_config(family, positions=32)
    config = TransformerConfig.from_hf(saved.to_dict(), sequence_length=length)
    assert config.sequence_length == (length or 32)
    if family == "gpt2":
        assert config.max_positions == saved.n_positions


# Keys transformers fills with a default of its own when a file leaves them out.
OPTIONAL_KEYS = ("tie_word_embeddings", "head_dim", "n_inner", "attention_bias", "mlp_bias")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("sizes", [dict(kv_heads=2, tied_embeddings=True), dict(kv_heads=4, tied_embeddings=False)],
                         ids=["tied-grouped", "untied-multi-head"])
def test_optional_keys_left_out_read_as_transformers_fills_them(family, sizes):
    """Llama's key/value heads default to its query heads; the other families' to a number of their own (an error)."""
    optional = OPTIONAL_KEYS + (("num_key_value_heads",) if family == "llama" else ())
    config_json = {key: value for key, value in hf_config(family, **sizes).to_dict().items() if key not in optional}
    assert TransformerConfig.from_hf(config_json).parameter_count == numel(model_from_config_json(config_json))


@pytest.mark.parametrize("family, nulls", [
    pytest.param("llama", {"num_key_value_heads": None, "head_dim": None}, id="llama"),
    # transformers 5 types mistral's and mixtral's num_key_value_heads int (4.x read null as the query heads).
    pytest.param("mistral", {"head_dim": None}, id="mistral"),
    pytest.param("mixtral", {"head_dim": None}, id="mixtral"),
])
def test_null_sizes_are_the_derived_ones(family, nulls):
    config_json = hf_config(family, kv_heads=4, heads=4, head_width=8).to_dict() | nulls
    config = TransformerConfig.from_hf(config_json)
    assert config.parameter_count == numel(model_from_config_json(config_json))
    assert (config.kv_heads, config.head_width) == (config.heads, config.width // config.heads)


@pytest.mark.parametrize(
    "family, changes",
    [
        pytest.param("llama", dict(rms_norm_eps=1e-3, hidden_act="gelu", pretraining_tp=2, attention_dropout=0.1), id="llama-numerics"),
        pytest.param("llama", dict(rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 5e5}), id="llama-rope-scaling"),
        pytest.param("mistral", dict(sliding_window=8), id="mistral-window"),
        pytest.param("qwen2", dict(use_sliding_window=True, sliding_window=8, max_window_layers=1), id="qwen2-window"),
        pytest.param("mixtral", dict(router_jitter_noise=0.1, router_aux_loss_coef=0.5, output_router_logits=True), id="mixtral-router"),
        pytest.param("gpt2", dict(scale_attn_by_inverse_layer_idx=True, reorder_and_upcast_attn=True, layer_norm_epsilon=1e-3), id="gpt2-numerics"),
    ],
)
def test_harmless_keys_change_no_parameter(family, changes):
    base = hf_config(family).to_dict()
    changed = base | changes
    assert TransformerConfig.from_hf(changed) == TransformerConfig.from_hf(base)
    assert numel(model_from_config_json(changed)) == numel(model_from_config_json(base))


@pytest.mark.parametrize("activation, gelu", [
    pytest.param("gelu_new", "unfused", id="gpt2-default-tanh-formula"),
    pytest.param("gelu_fast", "unfused", id="fast-formula"),
    pytest.param("gelu", "fused", id="exact-one-op"),
    pytest.param("gelu_pytorch_tanh", "fused", id="tanh-one-op"),
])
def test_gpt2s_activation_function_says_how_its_gelu_saves_and_changes_no_parameter(activation, gelu):
    base = hf_config("gpt2").to_dict()
    config = TransformerConfig.from_hf(base | {"activation_function": activation})
    assert config.gelu == gelu
    assert config.parameter_count == numel(model_from_config_json(base | {"activation_function": activation}))


def test_an_activation_function_from_hf_cannot_place_is_named():
    with pytest.raises(AccountingError, match=r"^config.json key 'activation_function' is 'relu': from_hf knows"):
        TransformerConfig.from_hf(hf_config("gpt2").to_dict() | {"activation_function": "relu"})


# What transformers 4.x wrote for every PretrainedConfig (to_dict() of the defaults): generation settings and
# bookkeeping, none of which changes the model. source: transformers v4.30, configuration_utils.py, PretrainedConfig.
OLD_PRETRAINED_DEFAULTS = {
    "return_dict": True, "output_hidden_states": False, "output_attentions": False, "torchscript": False,
    "torch_dtype": None, "use_bfloat16": False, "tf_legacy_loss": False, "pruned_heads": {}, "is_encoder_decoder": False,
    "is_decoder": False, "cross_attention_hidden_size": None, "add_cross_attention": False,
    "tie_encoder_decoder": False, "max_length": 20, "min_length": 0, "do_sample": False, "early_stopping": False,
    "num_beams": 1, "num_beam_groups": 1, "diversity_penalty": 0.0, "temperature": 1.0, "top_k": 50, "top_p": 1.0,
    "typical_p": 1.0, "repetition_penalty": 1.0, "length_penalty": 1.0, "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0, "bad_words_ids": None, "num_return_sequences": 1, "chunk_size_feed_forward": 0,
    "output_scores": False, "return_dict_in_generate": False, "forced_bos_token_id": None, "forced_eos_token_id": None,
    "remove_invalid_values": False, "exponential_decay_length_penalty": None, "suppress_tokens": None,
    "begin_suppress_tokens": None, "architectures": None, "finetuning_task": None, "id2label": {0: "LABEL_0"},
    "label2id": {"LABEL_0": 0}, "tokenizer_class": None, "prefix": None, "bos_token_id": None, "pad_token_id": None,
    "eos_token_id": None, "sep_token_id": None, "decoder_start_token_id": None, "task_specific_params": None,
    "problem_type": None, "_name_or_path": "", "transformers_version": "4.30.2", "num_labels": 1,
    "use_return_dict": True,
}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_key_older_versions_wrote_for_any_model_is_harmless(family):
    base = hf_config(family).to_dict()
    assert TransformerConfig.from_hf(base | OLD_PRETRAINED_DEFAULTS) == TransformerConfig.from_hf(base)


def test_a_published_file_with_keys_of_older_versions_is_read():
    """Mixtral-8x7B's config.json as published (transformers 4.36) reads as the experts it describes."""
    config = TransformerConfig.from_hf(PUBLISHED["mixtral-8x7b"][0], sequence_length=4096)
    assert (config.experts, config.experts_per_token, config.kv_heads, config.sequence_length) == (8, 2, 8, 4096)


# ---- bad input ---------------------------------------------------------------------------


def small(family: str, **changes) -> dict:
    return hf_config(family).to_dict() | changes


def without(family: str, key: str) -> dict:
    config = hf_config(family).to_dict()
    del config[key]
    return config


@pytest.mark.parametrize(
    "config, error, message",
    [
        pytest.param(small("llama", model_type="bert"), AccountingError,
                     r"^model_type 'bert' is not one from_hf reads \('gpt2', 'llama', 'mistral', 'qwen2', 'mixtral', 'qwen3', .*'olmo2'",
                     id="unknown-model-type"),
        pytest.param(without("llama", "model_type"), AccountingError, r"^model_type None is not one from_hf reads", id="no-model-type"),
        pytest.param(small("llama", model_type=["llama"]), AccountingError, r"^model_type \['llama'\] is not one from_hf reads", id="list-model-type"),
        pytest.param(small("llama", num_local_experts=8), AccountingError,
                     r"^config.json key 'num_local_experts' is not known for model_type 'llama': it may change the parameter or FLOP count", id="experts-on-llama"),
        pytest.param(small("mistral", quantization_config={"quant_method": "gptq", "bits": 4}), AccountingError,
                     r"^config.json key 'quantization_config' is not known for model_type 'mistral'", id="quantized"),
        pytest.param(small("llama", auto_map={"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"}),
                     AccountingError, r"^config.json key 'auto_map' is not known for model_type 'llama'", id="custom-code"),
        pytest.param(small("gpt2", attention_bias=True), AccountingError,
                     r"^config.json key 'attention_bias' is not known for model_type 'gpt2'", id="llama-key-on-gpt2"),
        pytest.param(small("gpt2", add_cross_attention=True), AccountingError,
                     r"^config.json key 'add_cross_attention' is True: only False can be counted \(other values add or remove weights\)$", id="cross-attention"),
        pytest.param(small("llama", pruned_heads={"0": [1]}), AccountingError,
                     r"^config.json key 'pruned_heads' is \{'0': \[1\]\}: only \{\} can be counted", id="pruned-heads"),
        pytest.param(small("qwen2", is_encoder_decoder=True), AccountingError,
                     r"^config.json key 'is_encoder_decoder' is True: only False can be counted", id="encoder-decoder"),
        pytest.param(without("llama", "hidden_size"), AccountingError, r"^config.json has no 'hidden_size': sizes are not guessed$", id="no-hidden-size"),
        pytest.param(small("mistral", intermediate_size=None), AccountingError, r"^config.json has no 'intermediate_size': sizes are not guessed$", id="null-ffn"),
        pytest.param(without("gpt2", "n_positions"), AccountingError, r"^config.json has no 'n_positions'", id="gpt2-no-positions"),
        pytest.param(without("mistral", "num_key_value_heads"), AccountingError,
                     r"^config.json has no 'num_key_value_heads': sizes are not guessed \(mistral's default in transformers is 8 key/value heads, not num_attention_heads\)$", id="mistral-no-kv-heads"),
        pytest.param(without("qwen2", "num_key_value_heads"), AccountingError, r"^config.json has no 'num_key_value_heads': .*qwen2's default in transformers is 32 ", id="qwen2-no-kv-heads"),
        pytest.param(without("mixtral", "num_key_value_heads"), AccountingError, r"^config.json has no 'num_key_value_heads': .*mixtral's default in transformers is 8 ", id="mixtral-no-kv-heads"),
        pytest.param(without("mixtral", "num_local_experts"), AccountingError, r"^config.json has no 'num_local_experts'", id="mixtral-no-experts"),
        pytest.param(small("llama", hidden_size="64"), AccountingTypeError, r"^hidden_size must be a non-negative integer, got '64'$", id="text-size"),
        pytest.param(small("gpt2", n_inner=0), AccountingError, r"^n_inner must be a positive integer, got 0$", id="zero-n-inner"),
        pytest.param(small("qwen2", num_key_value_heads=3), AccountingError, r"^kv_heads=3 does not divide heads=4", id="kv-heads-not-dividing"),
        pytest.param(small("mixtral", num_experts_per_tok=5), AccountingError, r"^experts_per_token=5 is more than experts=4$", id="top-k-above-experts"),
        pytest.param(small("llama", tie_word_embeddings="false"), AccountingTypeError,
                     r"^config.json key 'tie_word_embeddings' must be true or false, got 'false'$", id="text-flag"),
        pytest.param(small("llama", attention_bias=True, mlp_bias=False), AccountingError,
                     r"^attention_bias=True with mlp_bias=False cannot be described: ", id="attention-bias-only"),
        pytest.param(small("llama", attention_bias=False, mlp_bias=True), AccountingError,
                     r"^attention_bias=False with mlp_bias=True cannot be described: ", id="mlp-bias-only"),
        pytest.param(42, AccountingTypeError, r"^config must be a dict or the path of a config.json, got int$", id="not-a-config"),
    ],
)
def test_bad_configs_raise_errors_naming_the_key(config, error, message):
    with pytest.raises(error, match=message):
        TransformerConfig.from_hf(config)


def test_a_sequence_longer_than_gpt2s_position_table_is_an_error():
    with pytest.raises(AccountingError, match=r"^max_positions=32 is less than sequence_length=64: "):
        TransformerConfig.from_hf(small("gpt2"), sequence_length=64)


@pytest.mark.parametrize(
    "content, message",
    [
        pytest.param(None, r"^cannot read config.json '.*missing.json': No such file or directory$", id="missing-file"),
        pytest.param("{model_type: llama", r"^'.*missing.json' is not JSON: ", id="not-json"),
        pytest.param("[1, 2]", r"^'.*missing.json' holds a list, not a JSON object of config keys$", id="json-list"),
    ],
)
def test_unreadable_files_are_errors_naming_the_path(tmp_path, content, message):
    path = tmp_path / "missing.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(AccountingError, match=message):
        TransformerConfig.from_hf(path)


def test_a_folder_without_config_json_is_an_error_naming_the_file(tmp_path):
    with pytest.raises(AccountingError, match=r"^cannot read config.json '.*config.json': No such file or directory$"):
        TransformerConfig.from_hf(tmp_path)


def test_the_file_is_read_as_utf8(tmp_path):
    """A non-ASCII harmless value (a model's name) does not depend on the locale's encoding."""
    config = small("llama", _name_or_path="modèle")
    (tmp_path / "config.json").write_bytes(json.dumps(config, ensure_ascii=False).encode("utf-8"))
    assert TransformerConfig.from_hf(tmp_path) == TransformerConfig.from_hf(config)
