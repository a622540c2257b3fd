"""Reading a Hugging Face ``config.json`` into the fields of a :class:`~accounting.TransformerConfig`.

No ``transformers`` import and no download: the file (or the dict ``PretrainedConfig.to_dict()``
gives) is read key by key. Five model types are known, each as ``transformers`` builds it:

- ``gpt2``: learned positions (``n_positions`` rows), LayerNorm and biases everywhere, a GELU
  MLP of ``n_inner`` (``None``: 4h), tied embeddings unless ``tie_word_embeddings`` is false;
- ``llama``: rotary positions, RMSNorm, SwiGLU, ``num_key_value_heads`` (grouped-query
  attention), ``head_dim``, biases on Q, K, V and the output projection if ``attention_bias``
  and on the MLP if ``mlp_bias`` (only both or neither can be described);
- ``mistral``: as ``llama`` without biases;
- ``qwen2``: as ``mistral`` with biases on Q, K and V (always, in ``transformers``);
- ``mixtral``: as ``mistral`` with ``num_local_experts`` SwiGLU experts per layer, a router,
  and ``num_experts_per_tok`` experts per token.

Every key must be known. A key is either *read* (it sets a field), *harmless* (it changes
neither a parameter count nor a matmul FLOP: numerics such as ``rms_norm_eps`` and
``rope_theta``, dropout rates, token ids, generation settings, bookkeeping), or *harmless at
its default* (``is_encoder_decoder``, ``add_cross_attention``, ``pruned_heads``: other values
add or remove weights). Anything else — an unknown ``model_type``, ``num_local_experts`` on a
``llama``, a ``quantization_config``, an ``auto_map`` (the model is custom code, whatever its
``model_type`` says) — is an error naming the key: a count from a config half-understood
would be silently wrong.

Sliding-window attention (``sliding_window``, ``use_sliding_window``, ``max_window_layers``,
``layer_types``) is harmless under the package's convention: it masks scores that eager
attention still computes, so it changes neither parameters nor the counted FLOPs (a kernel
that skips the masked blocks does less; ``transformer_flops`` counts full score matrices).

Sizes are never guessed: ``transformers`` fills a missing size from its class defaults, which
differ between versions and families, so a missing ``hidden_size`` (say) is an error here. Left
out or null, ``head_dim`` is width / heads and ``n_inner`` 4 × width, as in every version;
``num_key_value_heads`` null means as many as the query heads, and left out too for ``llama``
(whose default is null), but ``mistral``, ``qwen2`` and ``mixtral`` default to a number of
their own (8, 32, 8), so a file of theirs without it is an error.

>>> fields = config_fields({"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096,
...     "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
...     "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096}, sequence_length=4096)
>>> fields["kv_heads"], fields["mlp"], fields["norm"], fields["sequence_length"]
(8, 'swiglu', 'rmsnorm', 4096)
"""

import json
import os

from accounting._checks import check_positive_size
from accounting.errors import AccountingError, AccountingTypeError

# Keys of any PretrainedConfig that change neither parameters nor matmul FLOPs of a causal LM:
# bookkeeping, outputs asked for, token ids, numerics, dropout, initialisation, generation settings
# (older versions of transformers wrote those into config.json; generate() reads them, the model does not).
_HARMLESS_ANYWHERE = frozenset({
    "_name_or_path", "architectures", "dtype", "torch_dtype", "transformers_version", "model_type",
    "id2label", "label2id", "num_labels", "problem_type", "finetuning_task", "tokenizer_class", "prefix",
    "task_specific_params", "return_dict", "output_attentions", "output_hidden_states", "torchscript",
    "use_bfloat16", "use_return_dict", "tf_legacy_loss", "is_decoder", "tie_encoder_decoder",
    "chunk_size_feed_forward", "cross_attention_hidden_size", "use_cache",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "initializer_range", "hidden_act",
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
})
# Keys whose default adds no weights; any other value would (cross-attention, an encoder, pruned heads).
_HARMLESS_AT_DEFAULT = {"is_encoder_decoder": False, "add_cross_attention": False, "pruned_heads": {}}

# Keys of the rotary families (llama, mistral, qwen2, mixtral) that change no count: norm epsilon, rotary
# angles (rope_theta, rope_scaling, rope_parameters: the rotation is elementwise), attention dropout, the
# sliding window (see the module docstring), and Llama's pretraining_tp (the same matmuls cut into slices).
_HARMLESS_ROTARY = frozenset({
    "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor", "attention_dropout",
    "sliding_window", "use_sliding_window", "max_window_layers", "layer_types", "pretraining_tp",
})
_HARMLESS = {
    "gpt2": frozenset({
        "attn_pdrop", "embd_pdrop", "resid_pdrop", "layer_norm_epsilon", "n_ctx",
        "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "summary_type",
        "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "output_past",
    }),
    "llama": _HARMLESS_ROTARY,
    "mistral": _HARMLESS_ROTARY,
    "qwen2": _HARMLESS_ROTARY,
    # The router's load-balancing loss and its jitter are elementwise work, not matmuls.
    "mixtral": _HARMLESS_ROTARY | {"router_aux_loss_coef", "output_router_logits", "router_jitter_noise"},
}
MODEL_TYPES = tuple(_HARMLESS)

_GPT2_READ = {"n_layer", "n_embd", "n_head", "n_positions", "vocab_size", "n_inner", "tie_word_embeddings",
              "activation_function"}
# How each of transformers' GELUs runs (``TransformerConfig.gelu``): one op, or the tanh formula in elementwise
# ops, which saves more for backward. GPT-2's default is "gelu_new".
# source: transformers 5.24, activations.py (GELUActivation, PytorchGELUTanh: F.gelu; NewGELUActivation,
# FastGELUActivation: the formula) and models/gpt2/configuration_gpt2.py
_GELU_OF_ACTIVATION = {"gelu": "fused", "gelu_pytorch_tanh": "fused", "gelu_new": "unfused", "gelu_fast": "unfused"}
_ROTARY_READ = {
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "vocab_size", "max_position_embeddings", "tie_word_embeddings",
}
_READ = {
    "gpt2": _GPT2_READ,
    "llama": _ROTARY_READ | {"attention_bias", "mlp_bias"},
    "mistral": _ROTARY_READ,
    "qwen2": _ROTARY_READ,
    "mixtral": _ROTARY_READ | {"num_local_experts", "num_experts_per_tok"},
}
# transformers' class defaults of num_key_value_heads where it is a number (llama's is None: as many as the
# query heads). A file without the key means that number, which is no size of the model's own: an error.
# source: transformers 5.24, models/{mistral,qwen2,mixtral}/configuration_*.py
_FIXED_KV_HEADS_DEFAULT = {"mistral": 8, "qwen2": 32, "mixtral": 8}
# transformers' default of tie_word_embeddings, per model type, when the file leaves it out.
_TIED_BY_DEFAULT = {"gpt2": True, "llama": False, "mistral": False, "qwen2": False, "mixtral": False}


def read_config_json(source) -> dict:
    """The dict of a ``config.json``: ``source`` as given if a dict, else read from that path
    (a directory means its ``config.json``)."""
    if isinstance(source, dict):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise AccountingTypeError(f"config must be a dict or the path of a config.json, got {type(source).__name__}")
    path = os.path.join(source, "config.json") if os.path.isdir(source) else os.fspath(source)
    try:
        with open(path, encoding="utf-8") as file:
            loaded = json.load(file)
    except OSError as error:
        raise AccountingError(f"cannot read config.json {path!r}: {error.strerror or error}") from error
    except json.JSONDecodeError as error:
        raise AccountingError(f"{path!r} is not JSON: {error}") from error
    if not isinstance(loaded, dict):
        raise AccountingError(f"{path!r} holds a {type(loaded).__name__}, not a JSON object of config keys")
    return loaded


def _check_known_keys(config: dict, model_type: str) -> None:
    for key, value in config.items():
        if key in _HARMLESS_AT_DEFAULT:
            if value != _HARMLESS_AT_DEFAULT[key]:
                raise AccountingError(
                    f"config.json key {key!r} is {value!r}: only {_HARMLESS_AT_DEFAULT[key]!r} can be counted"
                    " (other values add or remove weights)"
                )
        elif key not in _READ[model_type] and key not in _HARMLESS[model_type] and key not in _HARMLESS_ANYWHERE:
            raise AccountingError(
                f"config.json key {key!r} is not known for model_type {model_type!r}: it may change the parameter"
                " or FLOP count, which would then be wrong"
            )


def _size(config: dict, key: str, required: bool = True):
    """The positive integer under ``key``; ``None`` if absent (or null) and not required."""
    value = config.get(key)
    if value is None:
        if required:
            raise AccountingError(f"config.json has no {key!r}: sizes are not guessed")
        return None
    return check_positive_size(value, key)


def _flag(config: dict, key: str, default: bool) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise AccountingTypeError(f"config.json key {key!r} must be true or false, got {value!r}")
    return value


def _gpt2_fields(config: dict) -> dict:
    positions = _size(config, "n_positions")
    return {
        "layers": _size(config, "n_layer"),
        "width": _size(config, "n_embd"),
        "heads": _size(config, "n_head"),
        "vocabulary": _size(config, "vocab_size"),
        "ffn_width": _size(config, "n_inner", required=False),
        "max_positions": positions,
        "sequence_length": positions,
        "gelu": _gelu(config.get("activation_function", "gelu_new")),
    }


def _gelu(activation) -> str:
    if activation not in _GELU_OF_ACTIVATION:
        known = ", ".join(repr(name) for name in _GELU_OF_ACTIVATION)
        raise AccountingError(f"config.json key 'activation_function' is {activation!r}: from_hf knows how {known} "
                              "save activations, not this one")
    return _GELU_OF_ACTIVATION[activation]


def _rotary_fields(config: dict, model_type: str) -> dict:
    if "num_key_value_heads" not in config and model_type in _FIXED_KV_HEADS_DEFAULT:
        raise AccountingError(
            f"config.json has no 'num_key_value_heads': sizes are not guessed ({model_type}'s default in"
            f" transformers is {_FIXED_KV_HEADS_DEFAULT[model_type]} key/value heads, not num_attention_heads)"
        )
    fields = {
        "layers": _size(config, "num_hidden_layers"),
        "width": _size(config, "hidden_size"),
        "heads": _size(config, "num_attention_heads"),
        "kv_heads": _size(config, "num_key_value_heads", required=False),
        "head_width": _size(config, "head_dim", required=False),
        "vocabulary": _size(config, "vocab_size"),
        "ffn_width": _size(config, "intermediate_size"),
        "sequence_length": _size(config, "max_position_embeddings"),
        "learned_positions": False,
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "bias": False,
        "qkv_bias": model_type == "qwen2",
    }
    if model_type == "llama":
        attention_bias, mlp_bias = _flag(config, "attention_bias", False), _flag(config, "mlp_bias", False)
        if attention_bias != mlp_bias:
            raise AccountingError(
                f"attention_bias={attention_bias} with mlp_bias={mlp_bias} cannot be described: a TransformerConfig"
                " gives the attention output projection and the MLP the same bias setting"
            )
        fields |= {"bias": mlp_bias, "qkv_bias": attention_bias}
    if model_type == "mixtral":
        fields |= {
            "experts": _size(config, "num_local_experts"),
            "experts_per_token": _size(config, "num_experts_per_tok"),
        }
    return fields


def config_fields(source, sequence_length: int | None = None) -> dict:
    """Keyword arguments of ``TransformerConfig`` for a ``config.json`` (a dict or a path).

    ``sequence_length`` replaces the model's longest (``max_position_embeddings``, or GPT-2's
    ``n_positions``, which also stays the size of GPT-2's position table).
    """
    config = read_config_json(source)
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in _READ:
        known = ", ".join(repr(name) for name in MODEL_TYPES)
        raise AccountingError(f"model_type {model_type!r} is not one from_hf reads ({known})")
    _check_known_keys(config, model_type)
    fields = _gpt2_fields(config) if model_type == "gpt2" else _rotary_fields(config, model_type)
    fields["tied_embeddings"] = _flag(config, "tie_word_embeddings", _TIED_BY_DEFAULT[model_type])
    if sequence_length is not None:
        fields["sequence_length"] = sequence_length
    return fields
