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

The newer families are rows of one table (:data:`FAMILIES`), each saying what its blocks change
from Llama's, read by the same formulas:

- ``qwen3``: a head-width RMSNorm on Q and on K; ``qwen3_moe``: the same attention, experts of
  ``moe_intermediate_size`` (``num_experts``), dense MLPs of ``intermediate_size`` in
  ``mlp_only_layers`` and off ``decoder_sparse_step``, no shared expert;
- ``gemma2``, ``gemma3_text`` (and the ``text_config`` of a multimodal ``gemma3``, whose vision tower and
  projector are not counted): four norms a block (before and after attention and MLP), a GeGLU MLP,
  tied embeddings, local layers by ``layer_types`` (or ``sliding_window_pattern``); Gemma 2's
  soft-capped scores and logits, Gemma 3's head-width Q/K norms;
- ``deepseek_v2``, ``deepseek_v3``: multi-head latent attention (``q_lora_rank``, null: a plain Q
  projection; ``kv_lora_rank``; ``qk_nope_head_dim`` + ``qk_rope_head_dim`` per head for scores,
  ``v_head_dim`` for values), ``n_routed_experts`` of ``moe_intermediate_size`` with
  ``n_shared_experts`` shared, the first ``first_k_dense_replace`` blocks dense. The
  multi-token-prediction modules (``num_nextn_predict_layers``) are not built by ``transformers``,
  and counted only when asked (``mtp=True``: ``mtp_modules``); the routers' correction biases are buffers;
- ``gpt_oss``: biases on every projection, the experts and the router, a learned sink per head,
  local layers by ``layer_types``;
- ``phi3`` (Phi-3, Phi-4): fused QKV and gate-up matrices (the same counts), ``sliding_window``
  on every block;
- ``olmo2``: norms after attention and after the MLP, RMSNorms over the whole Q and K projections.

A checkpoint's ``quantization_config`` of block-scaled ``fp8`` (DeepSeek-V3) or ``mxfp4``
(gpt-oss) is the format the weights are stored in; a training plan counts them as the model
``transformers`` builds unquantized, so it is harmless. An ``auto_map`` is harmless for the model
types ``transformers`` builds itself without remote code (``phi3``, ``deepseek_v2``, ``deepseek_v3``).

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
that skips the masked blocks does less; ``transformer_flops`` counts full score matrices). For the
newer families the window and the blocks that use it are read (``sliding_window``, ``sliding_layers``):
they change what SDPA is passed, and so what it keeps, not the counts.

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
from dataclasses import dataclass, field, replace

from accounting._checks import check_positive_size, check_size
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

_ROTARY_READ = {
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "vocab_size", "max_position_embeddings", "tie_word_embeddings",
}
_LOCAL_LAYERS = {"sliding_window", "use_sliding_window", "max_window_layers", "layer_types"}
_EXPERT_NUMERICS = {"norm_topk_prob", "router_aux_loss_coef", "output_router_logits", "router_jitter_noise"}
_DEEPSEEK_ROUTING = {"n_group", "topk_group", "routed_scaling_factor", "scoring_func", "topk_method",
                     "aux_loss_alpha", "seq_aux", "ep_size", "rope_interleave", "qk_head_dim",
                     "num_nextn_predict_layers"}
_GEMMA_NUMERICS = {"query_pre_attn_scalar", "hidden_activation", "cache_implementation", "sliding_window_size",
                   "use_bidirectional_attention", "rope_local_base_freq", "sliding_window_pattern",
                   "_sliding_window_pattern", "attn_logit_softcapping", "final_logit_softcapping"}


@dataclass(frozen=True)
class Family:
    """One ``model_type`` as ``transformers`` builds it: what differs from Llama's block, as data.

    ``fields``: the ``TransformerConfig`` fields its blocks fix (norm placement, MLP kind, Q/K norms,
    sinks, biases, the active-parameter convention); ``read``: keys read beyond the rotary families';
    ``harmless``: keys that change no count (beyond every family's); ``at_default``: keys harmless
    only at that value; ``kv_default``: transformers' class default of ``num_key_value_heads`` when
    it is a number (a file without the key is then an error); ``tied``: its default of
    ``tie_word_embeddings``; ``experts``: how its expert keys read (:func:`_expert_fields`);
    ``local``: how its local-attention layers are given (:func:`_local_fields`).
    """

    fields: dict
    read: frozenset = frozenset()
    harmless: frozenset = frozenset()
    at_default: dict = field(default_factory=dict)
    kv_default: int | None = None
    tied: bool = False
    experts: str | None = None
    local: str | None = None


_RMS_SWIGLU = {"learned_positions": False, "mlp": "swiglu", "norm": "rmsnorm", "bias": False, "qkv_bias": False}
FAMILIES = {
    "qwen3": Family(_RMS_SWIGLU | {"qk_norm": "head"}, harmless=frozenset(_LOCAL_LAYERS),
                    at_default={"attention_bias": False}, kv_default=32, local="qwen3"),
    "qwen3_moe": Family(_RMS_SWIGLU | {"qk_norm": "head"},
                        read=frozenset({"num_experts", "num_local_experts", "num_experts_per_tok",
                                        "moe_intermediate_size", "decoder_sparse_step", "mlp_only_layers"}),
                        harmless=frozenset(_LOCAL_LAYERS | _EXPERT_NUMERICS),
                        at_default={"attention_bias": False}, kv_default=4, experts="qwen3_moe", local="all"),
    "gemma2": Family(_RMS_SWIGLU | {"norm_placement": "sandwich", "norm": "fp32-rmsnorm"},
                     harmless=frozenset(_LOCAL_LAYERS | _GEMMA_NUMERICS),
                     at_default={"attention_bias": False}, kv_default=4, tied=True, local="gemma2"),
    "gemma3_text": Family(_RMS_SWIGLU | {"norm_placement": "sandwich", "norm": "fp32-rmsnorm", "qk_norm": "head"},
                          harmless=frozenset(_LOCAL_LAYERS | _GEMMA_NUMERICS), at_default={"attention_bias": False},
                          kv_default=4, tied=True, local="gemma3"),
    "deepseek_v2": Family(_RMS_SWIGLU | {"active_embeddings": "unembedding"},
                          read=frozenset({"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                          "v_head_dim", "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
                                          "moe_intermediate_size", "first_k_dense_replace"}),
                          harmless=frozenset(_EXPERT_NUMERICS | _DEEPSEEK_ROUTING),
                          at_default={"attention_bias": False, "mlp_bias": False, "moe_layer_freq": 1},
                          experts="deepseek"),
    "gpt_oss": Family(_RMS_SWIGLU | {"norm": "fp32-rmsnorm", "mlp": "clamped-swiglu", "bias": True, "qkv_bias": True,
                                     "attention_sinks": True, "active_embeddings": "unembedding"},
                      read=frozenset({"num_local_experts", "num_experts_per_tok"}),
                      harmless=frozenset(_LOCAL_LAYERS | _EXPERT_NUMERICS | {
                          "swiglu_limit", "swiglu_alpha", "initial_context_length", "experts_per_token"}),
                      at_default={"attention_bias": True}, kv_default=8, experts="gpt_oss", local="layer_types"),
    "phi3": Family(_RMS_SWIGLU | {"fused_projections": True},
                   harmless=frozenset({"embd_pdrop", "resid_pdrop", "original_max_position_embeddings",
                                       "sliding_window"}),
                   at_default={"attention_bias": False}, local="all"),
    "olmo2": Family(_RMS_SWIGLU | {"norm_placement": "post", "norm": "fp32-rmsnorm", "qk_norm": "projection"},
                    at_default={"attention_bias": False}),
}
FAMILIES["deepseek_v3"] = replace(FAMILIES["deepseek_v2"], kv_default=128)
MODEL_TYPES = tuple(_HARMLESS) + tuple(FAMILIES) + ("gemma3",)  # gemma3: its text_config (text_config_json)
# Model types transformers builds itself: their published files' auto_map (remote code) is not what runs.
_NATIVE_DESPITE_AUTO_MAP = frozenset({"phi3", "deepseek_v2", "deepseek_v3"})
# Checkpoint formats of block-scaled weights a training plan counts unquantized (see the module docstring).
_STORAGE_QUANTIZATIONS = frozenset({"fp8", "mxfp4"})

_GPT2_READ = {"n_layer", "n_embd", "n_head", "n_positions", "vocab_size", "n_inner", "tie_word_embeddings",
              "activation_function"}
# How each of transformers' GELUs runs (``TransformerConfig.gelu``): one op, or the tanh formula in elementwise
# ops, which saves more for backward. GPT-2's default is "gelu_new".
# source: transformers 5.24, activations.py (GELUActivation, PytorchGELUTanh: F.gelu; NewGELUActivation,
# FastGELUActivation: the formula) and models/gpt2/configuration_gpt2.py
_GELU_OF_ACTIVATION = {"gelu": "fused", "gelu_pytorch_tanh": "fused", "gelu_new": "unfused", "gelu_fast": "unfused"}
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


def _known(model_type: str, key: str, value) -> bool:
    """Whether ``key`` is read or harmless for ``model_type`` (an error if only at another value)."""
    family = FAMILIES.get(model_type)
    if family is None:
        return key in _READ[model_type] or key in _HARMLESS[model_type]
    if key == "auto_map" and model_type in _NATIVE_DESPITE_AUTO_MAP:
        return True
    if key == "quantization_config":
        method = value.get("quant_method") if isinstance(value, dict) else None
        if method not in _STORAGE_QUANTIZATIONS:
            raise AccountingError(
                f"config.json quantization_config has quant_method {method!r}: only the block-scaled storage"
                f" formats {sorted(_STORAGE_QUANTIZATIONS)} are counted as the unquantized model"
            )
        return True
    if key in family.at_default:
        if value != family.at_default[key]:
            raise AccountingError(
                f"config.json key {key!r} is {value!r}: {model_type} is only described with"
                f" {family.at_default[key]!r} (other values add or remove weights the formulas do not place)"
            )
        return True
    return key in _ROTARY_READ or key in family.read or key in family.harmless or key in _HARMLESS_ROTARY


def _check_known_keys(config: dict, model_type: str) -> None:
    for key, value in config.items():
        if key in _HARMLESS_AT_DEFAULT:
            if value != _HARMLESS_AT_DEFAULT[key]:
                raise AccountingError(
                    f"config.json key {key!r} is {value!r}: only {_HARMLESS_AT_DEFAULT[key]!r} can be counted"
                    " (other values add or remove weights)"
                )
        elif not _known(model_type, key, value) and key not in _HARMLESS_ANYWHERE:
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
    kv_default = FAMILIES[model_type].kv_default if model_type in FAMILIES else _FIXED_KV_HEADS_DEFAULT.get(model_type)
    if "num_key_value_heads" not in config and kv_default is not None:
        raise AccountingError(
            f"config.json has no 'num_key_value_heads': sizes are not guessed ({model_type}'s default in"
            f" transformers is {kv_default} key/value heads, not num_attention_heads)"
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


def _family_fields(config: dict, model_type: str) -> dict:
    """The fields of one of :data:`FAMILIES`: the rotary sizes, the family's own fields, its experts
    and its local layers."""
    family = FAMILIES[model_type]
    fields = _rotary_fields(config, model_type) | family.fields
    if family.experts == "deepseek":
        fields |= _latent_attention_fields(config)  # its head_dim is the rotary width, read there
    if family.experts is not None:
        fields |= _expert_fields(config, family.experts, fields["layers"])
    caps = {"attention_softcap": config.get("attn_logit_softcapping") is not None,
            "logit_softcap": config.get("final_logit_softcapping") is not None}
    return fields | {name: True for name, capped in caps.items() if capped} \
        | _local_fields(config, family.local, fields["layers"])


def _latent_attention_fields(config: dict) -> dict:
    nope, rope = _size(config, "qk_nope_head_dim"), _size(config, "qk_rope_head_dim")
    return {
        "q_lora_rank": _size(config, "q_lora_rank", required=False),
        "kv_lora_rank": _size(config, "kv_lora_rank"),
        "head_width": nope + rope,
        "rope_head_width": rope,
        "value_head_width": _size(config, "v_head_dim"),
    }


def _layer_list(config: dict, key: str, layers: int) -> list:
    value = config.get(key)
    if not isinstance(value, list) or any(isinstance(item, bool) or not isinstance(item, int) for item in value):
        raise AccountingTypeError(f"config.json key {key!r} must be a list of layer indices, got {value!r}")
    outside = [item for item in value if not 0 <= item < layers]
    if outside:
        raise AccountingError(f"config.json key {key!r} names layers {outside} outside 0..{layers - 1}")
    return value


def _expert_fields(config: dict, layout: str, layers: int) -> dict:
    """Experts, experts per token, their width, shared experts and dense blocks, by the family's keys."""
    if layout == "deepseek":
        first_dense = config.get("first_k_dense_replace", 0)
        dense = min(layers, 0 if first_dense is None else _size_or_zero(first_dense, "first_k_dense_replace"))
        return {
            "experts": _size(config, "n_routed_experts"),
            "experts_per_token": _size(config, "num_experts_per_tok"),
            "shared_experts": _size_or_zero(config.get("n_shared_experts", 0) or 0, "n_shared_experts"),
            "dense_ffn_width": _size(config, "intermediate_size"),
            "ffn_width": _size(config, "moe_intermediate_size"),
            "dense_layers": dense,
        }
    if layout == "qwen3_moe":
        experts_key = "num_experts" if "num_experts" in config else "num_local_experts"
        step = _size(config, "decoder_sparse_step", required=False) or 1
        dense_only = set(_layer_list(config, "mlp_only_layers", layers)) if "mlp_only_layers" in config else set()
        sparse = [i for i in range(layers) if i not in dense_only and (i + 1) % step == 0]
        return {
            "experts": _size(config, experts_key),
            "experts_per_token": _size(config, "num_experts_per_tok"),
            "dense_ffn_width": _size(config, "intermediate_size"),
            "ffn_width": _size(config, "moe_intermediate_size"),
            "dense_layers": layers - len(sparse),
        }
    return {  # gpt_oss: experts of intermediate_size, every block
        "experts": _size(config, "num_local_experts"),
        "experts_per_token": _size(config, "num_experts_per_tok"),
    }


def _size_or_zero(value, key: str) -> int:
    return check_size(value, key)


_SLIDING = "sliding_attention"


def _local_fields(config: dict, local: str | None, layers: int) -> dict:
    """``sliding_window`` and ``sliding_layers`` as the family's config class places its local layers:
    by ``layer_types`` where given, else by the family's rule (Gemma 2 every other block, Gemma 3 all but
    every ``sliding_window_pattern``-th, Qwen3 from ``max_window_layers`` on with ``use_sliding_window``,
    Phi-3 and Qwen3-MoE every block)."""
    window = _size(config, "sliding_window", required=False)
    if local is None or window is None:
        return {}
    if local == "qwen3" and not _flag(config, "use_sliding_window", False):
        return {}
    if local == "all" and not _flag(config, "use_sliding_window", True):
        return {}
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise AccountingError(f"config.json key 'layer_types' must list {layers} layer types, got {types!r}")
        sliding = sum(kind == _SLIDING for kind in types)
    elif local == "gemma2":
        sliding = sum(1 for i in range(layers) if (i + 1) % 2)
    elif local == "gemma3":
        pattern = config.get("sliding_window_pattern", config.get("_sliding_window_pattern", 6))
        pattern = check_positive_size(pattern, "sliding_window_pattern")
        sliding = sum(1 for i in range(layers) if (i + 1) % pattern)
    elif local == "qwen3":
        sliding = max(0, layers - (_size(config, "max_window_layers", required=False) or 0))
    else:
        sliding = layers
    return {"sliding_window": window, "sliding_layers": sliding} if sliding else {}


# Gemma 3's multimodal checkpoints (model_type "gemma3") nest the text model in "text_config" and leave out the
# sizes that equal Gemma3TextConfig's class defaults, which transformers fills in: they are filled the same way.
# source: transformers 5.24, models/gemma3/configuration_gemma3.py (Gemma3TextConfig.__init__; the same since 4.50).
GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131_072,
    "query_pre_attn_scalar": 256, "sliding_window": 4096,
}
# The multimodal checkpoint's own keys beyond the text model: image token ids and the image's token count (the
# projector pools to it: no weights). "vision_config" describes the vision tower, which is not counted.
_GEMMA3_COMPOSITE = frozenset({"text_config", "vision_config", "boi_token_index", "eoi_token_index",
                               "image_token_index", "mm_tokens_per_image", "tie_word_embeddings"})
# SigLIP's class defaults the published vision configs rely on (transformers 5.24, models/siglip).
_SIGLIP_DEFAULTS = {"num_channels": 3, "vision_use_head": True}


def text_config_json(source) -> dict:
    """The text model's ``config.json`` keys: a multimodal Gemma 3 (``model_type`` ``"gemma3"``) gives its
    ``text_config`` with Gemma3TextConfig's defaults filled in where the file leaves them out
    (:data:`GEMMA3_TEXT_DEFAULTS`); any other config is returned as it is.

    >>> text_config_json({"model_type": "gemma3", "text_config": {"hidden_size": 2560}})["num_attention_heads"]
    8
    """
    config = read_config_json(source)
    if config.get("model_type") != "gemma3":
        return config
    for key in config:
        if key not in _GEMMA3_COMPOSITE and key not in _HARMLESS_ANYWHERE and key not in _HARMLESS_AT_DEFAULT:
            raise AccountingError(
                f"config.json key {key!r} is not known for model_type 'gemma3': it may change the parameter or"
                " FLOP count, which would then be wrong"
            )
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise AccountingError(f"config.json of model_type 'gemma3' has no text_config object, got {text!r}")
    if text.get("model_type", "gemma3_text") != "gemma3_text":
        raise AccountingError(f"gemma3's text_config has model_type {text['model_type']!r}, not 'gemma3_text'")
    filled = {key: value for key, value in GEMMA3_TEXT_DEFAULTS.items() if text.get(key) is None}
    tied = {"tie_word_embeddings": config["tie_word_embeddings"]} if "tie_word_embeddings" in config else {}
    return {**text, **filled, **tied, "model_type": "gemma3_text"}


def _siglip_parameters(vision: dict) -> int:
    """Parameters of a SigLIP vision tower (Gemma 3's): a patch convolution with bias, a position table of
    one row per patch, blocks of four biased h × h attention projections, two LayerNorms and a biased MLP
    h → f → h, and a final LayerNorm (and, with ``vision_use_head``, an attention-pooling head: refused)."""
    if not isinstance(vision, dict):
        raise AccountingError(f"gemma3's vision_config must be an object, got {vision!r}")
    settings = _SIGLIP_DEFAULTS | vision
    if settings["vision_use_head"]:
        raise AccountingError("gemma3's vision_config has vision_use_head true: Gemma 3 builds its tower without it")
    h, f = _size(settings, "hidden_size"), _size(settings, "intermediate_size")
    patch, image = _size(settings, "patch_size"), _size(settings, "image_size")
    channels, layers = _size(settings, "num_channels"), _size(settings, "num_hidden_layers")
    embeddings = channels * patch * patch * h + h + (image // patch) ** 2 * h
    block = 4 * (h * h + h) + 2 * 2 * h + (h * f + f) + (f * h + h)
    return embeddings + layers * block + 2 * h


@dataclass(frozen=True)
class NotCounted:
    """Parts of a checkpoint a plan of its text model leaves out, with their parameter counts."""

    vision_tower: int
    projector: int

    def __str__(self) -> str:
        return (f"the text model; not counted: the vision tower ({self.vision_tower:,} parameters) and the"
                f" multimodal projector ({self.projector:,})")


def not_counted(source) -> NotCounted | None:
    """What a plan of this config leaves out: for a multimodal Gemma 3, its SigLIP vision tower and the
    projector from the tower's width to the text model's (a matrix and an RMSNorm of the tower's width);
    ``None`` for a text model.

    >>> vision = {"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "patch_size": 2,
    ...           "image_size": 4, "vision_use_head": False}
    >>> not_counted({"model_type": "gemma3", "text_config": {"hidden_size": 32}, "vision_config": vision}).projector
    264
    """
    config = read_config_json(source)
    if config.get("model_type") != "gemma3":
        return None
    text = text_config_json(config)
    vision = config.get("vision_config")
    tower = _siglip_parameters(vision)
    width = _size(vision, "hidden_size")
    return NotCounted(tower, width * _size(text, "hidden_size") + width)


def _mtp_modules(config: dict, model_type: str) -> int:
    """``num_nextn_predict_layers`` of a DeepSeek config: the multi-token-prediction modules a run trains."""
    count = config.get("num_nextn_predict_layers")
    if model_type not in ("deepseek_v2", "deepseek_v3") or not count:
        raise AccountingError(
            f"mtp asked for, but model_type {model_type!r} names no multi-token-prediction modules"
            f" (num_nextn_predict_layers is {count!r})"
        )
    return check_positive_size(count, "num_nextn_predict_layers")


def config_fields(source, sequence_length: int | None = None, *, mtp: bool = False) -> dict:
    """Keyword arguments of ``TransformerConfig`` for a ``config.json`` (a dict or a path).

    ``sequence_length`` replaces the model's longest (``max_position_embeddings``, or GPT-2's
    ``n_positions``, which also stays the size of GPT-2's position table). A multimodal Gemma 3 gives its
    text model's (:func:`text_config_json`; :func:`not_counted` says what is left out). ``mtp``: count
    DeepSeek's ``num_nextn_predict_layers`` multi-token-prediction modules (``mtp_modules``).
    """
    config = text_config_json(source)
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
        known = ", ".join(repr(name) for name in MODEL_TYPES)
        raise AccountingError(f"model_type {model_type!r} is not one from_hf reads ({known})")
    _check_known_keys(config, model_type)
    if model_type in FAMILIES:
        fields = _family_fields(config, model_type)
        tied = FAMILIES[model_type].tied
    else:
        fields = _gpt2_fields(config) if model_type == "gpt2" else _rotary_fields(config, model_type)
        tied = _TIED_BY_DEFAULT[model_type]
    fields["tied_embeddings"] = _flag(config, "tie_word_embeddings", tied)
    if sequence_length is not None:
        fields["sequence_length"] = sequence_length
    if not isinstance(mtp, bool):
        raise AccountingTypeError(f"mtp must be True or False, got {mtp!r}")
    if mtp:
        fields["mtp_modules"] = _mtp_modules(config, model_type)
    return fields
