"""Real Hugging Face ``transformers`` models of each family, and the ``TransformerConfig`` of each.

The independent truth for parameter, FLOP and memory counts of today's architectures: the
model ``transformers`` itself builds from a config, never a reimplementation.

- :func:`hf_config` — a ``transformers`` config of one family (``FAMILIES``) at small sizes
  named as ``TransformerConfig`` names them (``layers``, ``width``, ``heads``, ``kv_heads``,
  ``head_width``, ``ffn_width``, ``vocabulary``, ``positions``, ``experts``, …).
- :func:`build_hf_model` — that config's ``AutoModelForCausalLM`` with random weights (CPU by
  default, ``device="meta"`` for full sizes: nothing is allocated) and the
  ``TransformerConfig`` read from the config's ``to_dict()`` by ``TransformerConfig.from_hf``.
  Eager attention and eager experts: every matmul is an ``aten.mm``/``bmm`` that
  ``FlopCounterMode`` sees, and the experts really see only the tokens routed to them.
- :func:`model_from_config_json` — the model of a ``config.json`` dict (published full sizes on
  meta, or a changed ``to_dict()``).
- :func:`training_step` — one forward + backward of the language-model loss, as a
  ``transformers`` user runs it (``model(input_ids=..., labels=...)``), under an optional
  ``torch`` context (a ``FlopCounterMode``, a memory tracker).

>>> model, config = build_hf_model("llama", kv_heads=2)
>>> type(model).__name__, config.kv_heads, config.mlp, config.norm
('LlamaForCausalLM', 2, 'swiglu', 'rmsnorm')
>>> sum(p.numel() for p in model.parameters()) == config.parameter_count
True
>>> from torch.utils.flop_counter import FlopCounterMode
>>> from accounting.model.flops import transformer_flops
>>> counter = FlopCounterMode(display=False)
>>> _ = training_step(model, random_token_ids(config, batch_size=2), counter)
>>> counter.get_total_flops() == transformer_flops(config, batch_size=2).training
True
"""

import contextlib

import pytest
import torch

from accounting import TransformerConfig

# transformers is a test extra: where it is missing (a GPU machine's own environment), every test module that builds
# these models is skipped with that reason, and `pytest -m gpu` still collects.
transformers = pytest.importorskip("transformers")

FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "mixtral")
NEWER_FAMILIES = ("qwen3", "qwen3_moe", "gemma2", "gemma3_text", "deepseek_v2", "deepseek_v3", "gpt_oss", "phi3",
                  "olmo2")
"""The families described as data in ``accounting.model.hf_config.FAMILIES``, built small by :func:`hf_config`
with what makes each one itself switched on: local layers of a window shorter than the sequence, soft caps,
latent attention, shared experts and a dense first block."""
MOE_FAMILIES = ("mixtral", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss")
WINDOW = 16  # the local layers' window in the small models: half of SMALL's positions
# The small models' own settings, beyond hf_config's sizes (latent attention: 4 heads of 12 + 4 for scores, 16 values).
_NEWER = {
    "qwen3": {},
    "qwen3_moe": {"moe_intermediate_size": 32, "decoder_sparse_step": 2, "mlp_only_layers": []},
    "gemma2": {"sliding_window": WINDOW, "query_pre_attn_scalar": 16, "attn_logit_softcapping": 50.0,
               "final_logit_softcapping": 30.0},
    "gemma3_text": {"sliding_window": WINDOW, "query_pre_attn_scalar": 16, "sliding_window_pattern": 2},
    "deepseek_v2": {"q_lora_rank": None, "kv_lora_rank": 16, "qk_nope_head_dim": 12, "qk_rope_head_dim": 4,
                    "v_head_dim": 16, "n_shared_experts": 1, "moe_intermediate_size": 32, "first_k_dense_replace": 1,
                    "n_group": 1, "topk_group": 1},
    "deepseek_v3": {"q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 12, "qk_rope_head_dim": 4,
                    "v_head_dim": 16, "n_shared_experts": 1, "moe_intermediate_size": 32, "first_k_dense_replace": 1,
                    "n_group": 2, "topk_group": 1},
    "gpt_oss": {"sliding_window": WINDOW, "layer_types": None},
    "phi3": {"sliding_window": WINDOW},
    "olmo2": {},
}

# Small sizes every family accepts: 4 query heads in 2 key/value groups, head width 16, two layers.
SMALL = dict(layers=2, width=64, heads=4, kv_heads=2, ffn_width=96, vocabulary=128, positions=32)
SMALL_EXPERTS = dict(experts=4, experts_per_token=2)


def hf_config(
    family: str,
    *,
    layers: int = SMALL["layers"],
    width: int = SMALL["width"],
    heads: int = SMALL["heads"],
    kv_heads: int | None = SMALL["kv_heads"],
    head_width: int | None = None,
    ffn_width: int | None = SMALL["ffn_width"],
    vocabulary: int = SMALL["vocabulary"],
    positions: int = SMALL["positions"],
    tied_embeddings: bool | None = None,
    bias: bool = False,
    experts: int = SMALL_EXPERTS["experts"],
    experts_per_token: int = SMALL_EXPERTS["experts_per_token"],
    dropout: float = 0.0,
) -> transformers.PretrainedConfig:
    """The ``transformers`` config of ``family`` at these sizes.

    ``positions`` is ``n_positions`` / ``max_position_embeddings``. Ignored where the family
    has no such setting: ``kv_heads``, ``head_width`` for GPT-2 (always multi-head, width / heads);
    ``bias`` outside ``llama`` (its ``attention_bias`` and ``mlp_bias``); ``experts`` outside
    ``mixtral``. ``tied_embeddings=None`` keeps the family's default (GPT-2 tied, the others not).
    ``dropout`` is every dropout probability the family has (0: the step is deterministic).
    """
    # Token ids inside a small vocabulary (the defaults, 50256 for GPT-2, are not).
    common = {"vocab_size": vocabulary, "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    if tied_embeddings is not None:
        common["tie_word_embeddings"] = tied_embeddings
    if family == "gpt2":
        return transformers.GPT2Config(
            n_layer=layers, n_embd=width, n_head=heads, n_inner=ffn_width, n_positions=positions,
            resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout, **common,
        )
    if family not in FAMILIES + NEWER_FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES + NEWER_FAMILIES}, got {family!r}")
    rotary = dict(
        num_hidden_layers=layers, hidden_size=width, num_attention_heads=heads, num_key_value_heads=kv_heads,
        intermediate_size=ffn_width, max_position_embeddings=positions, attention_dropout=dropout, **common,
    )
    if head_width is not None:
        rotary["head_dim"] = head_width
    if family == "llama":
        rotary |= {"attention_bias": bias, "mlp_bias": bias}
    if family == "mixtral":
        rotary |= {"num_local_experts": experts, "num_experts_per_tok": experts_per_token}
    if family in NEWER_FAMILIES:
        return _newer_config(family, rotary, experts, experts_per_token, layers)
    return transformers.AutoConfig.for_model(family, **rotary)


def _newer_config(family: str, rotary: dict, experts: int, experts_per_token: int, layers: int):
    settings = rotary | _NEWER[family]
    if family.startswith("deepseek"):
        settings |= {"n_routed_experts": experts, "num_experts_per_tok": experts_per_token,
                     "num_key_value_heads": settings["num_attention_heads"]}
        settings.pop("head_dim", None)
    elif family in MOE_FAMILIES:
        settings |= {"num_local_experts": experts, "num_experts_per_tok": experts_per_token}
    if family == "gpt_oss":
        settings["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
        settings["intermediate_size"] = 32  # the experts' width
    if family == "phi3":
        settings["pad_token_id"] = None
    return transformers.AutoConfig.for_model(family, **settings)


def _model(config: transformers.PretrainedConfig, device) -> torch.nn.Module:
    implementations = {"attn_implementation": "eager"}
    if config.model_type in MOE_FAMILIES:
        # transformers 5 picks grouped_mm where it can; eager loops over the experts a token was routed to.
        implementations["experts_implementation"] = "eager"
    with torch.device(device):
        return transformers.AutoModelForCausalLM.from_config(config, **implementations)


def build_hf_model(
    family: str, *, sequence_length: int | None = None, device="cpu", seed: int = 0, **sizes
) -> tuple[torch.nn.Module, TransformerConfig]:
    """(``transformers`` model, its ``TransformerConfig``) for ``family`` at these sizes.

    ``sizes`` are :func:`hf_config`'s. ``sequence_length`` is the tokens per sequence of the
    ``TransformerConfig`` (default: ``positions``); the model accepts any length up to ``positions``.
    The weights are drawn from ``seed`` without touching the global random state. The model is
    in training mode, as ``from_config`` leaves it.
    """
    config = hf_config(family, **sizes)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _model(config, device)
    return model, TransformerConfig.from_hf(config.to_dict(), sequence_length=sequence_length)


def model_from_config_json(config_json: dict, device="meta") -> torch.nn.Module:
    """The model of a ``config.json`` (a dict with its ``model_type``: a published file, a changed
    ``to_dict()``), on the meta device unless told; eager attention and experts as above."""
    fields = {key: value for key, value in config_json.items() if key != "model_type"}
    return _model(transformers.AutoConfig.for_model(config_json["model_type"], **fields), device)


def random_token_ids(config: TransformerConfig, batch_size: int, seed: int = 0) -> torch.Tensor:
    """(batch_size, sequence_length) token ids below the vocabulary size, from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, config.vocabulary, (batch_size, config.sequence_length), generator=generator)


def training_step(model: torch.nn.Module, token_ids: torch.Tensor, context=None) -> torch.Tensor:
    """Forward and backward of the next-token loss on ``token_ids`` (labels = the inputs, shifted
    inside ``transformers``), with ``context`` (a ``FlopCounterMode``, say) around both; the loss."""
    with context if context is not None else contextlib.nullcontext():
        loss = model(input_ids=token_ids, labels=token_ids).loss
        loss.backward()
    return loss.detach()
