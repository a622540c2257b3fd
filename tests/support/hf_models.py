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
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
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
    return transformers.AutoConfig.for_model(family, **rotary)


def _model(config: transformers.PretrainedConfig, device) -> torch.nn.Module:
    implementations = {"attn_implementation": "eager"}
    if config.model_type == "mixtral":
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
