"""A decoder-only transformer built from a :class:`~accounting.TransformerConfig`, written as the lecture writes models.

Named axes with einops (``rearrange``) and shapes in jaxtyping annotations. Two families, told apart by
the config's ``norm`` as the memory formulas tell them apart (:mod:`accounting.model.activations`):

- ``norm="layernorm"``: GPT-2 — learned positions (or none), LayerNorm, one fused Q/K/V projection, a GELU
  MLP, final LayerNorm, unembedding tied to the token embedding unless the config says not;
- ``norm="rmsnorm"``: Llama — RMSNorm in fp32, separate Q, K and V projections, rotary positions (unless the
  config has a learned table), grouped-query attention (``kv_heads``), a SwiGLU MLP (``mlp="swiglu"``),
  untied unembedding (TinyLlama, Llama 2 and 3), as Hugging Face's ``LlamaForCausalLM`` computes them
  (:mod:`accounting.model_mfu.layers`).

Either family takes ``kv_heads``, ``head_width``, ``mlp``, ``bias`` and ``qkv_bias`` as the config gives them;
a config with experts, or GPT-2's unfused GELU, is refused by name. The parameters are exactly
``config.parameter_count``, and the matmuls exactly those :func:`accounting.transformer_flops` counts.

Attention (``attention=``, :data:`~accounting.model_mfu.layers.ATTENTIONS`): ``"sdpa"`` (the default) calls
``torch.nn.functional.scaled_dot_product_attention`` with ``is_causal=True``, as a GPU user writes it: it runs
a fused kernel where one takes the inputs (flash, memory-efficient or cuDNN on CUDA, the CPU's flash kernel),
which saves no (s × s) matrix and recomputes QKᵀ in backward (hardware FLOPs beyond the model's), and its math
kernel elsewhere (on ``meta`` tensors, and on CUDA for fp32 with grouped-query attention). ``"eager"``
materialises the (s × s) scores, as GPT-2 and Hugging Face's ``eager`` attention do. (Eager with a head width or
a sequence length of 1: a matmul of a 1-wide axis is an elementwise product to torch, not matmul work, and the
FLOP count falls short of the formula.) ``recompute=True`` wraps each block in ``torch.utils.checkpoint``
(activation recomputation): the block's forward runs again in the backward pass, which costs hardware FLOPs
but not model FLOPs.

>>> import torch
>>> from accounting import TransformerConfig
>>> config = TransformerConfig(layers=2, width=32, heads=4, sequence_length=16, vocabulary=64)
>>> model = GPT(config)
>>> sum(p.numel() for p in model.parameters()) == config.parameter_count
True
>>> model(torch.zeros(3, 16, dtype=torch.long)).shape
torch.Size([3, 16, 64])
>>> llama = TransformerConfig(layers=1, width=32, heads=4, kv_heads=2, sequence_length=8, vocabulary=64,
...     ffn_width=88, mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False, learned_positions=False)
>>> sum(p.numel() for p in GPT(llama).parameters()) == llama.parameter_count
True
"""

import torch
import torch.nn.functional as F
from einops import rearrange
from jaxtyping import Float, Int
from torch import nn
from torch.utils.checkpoint import checkpoint

from accounting.errors import AccountingError, AccountingTypeError
from accounting.model_mfu.layers import RMSNorm, apply_rotary, attend, check_attention, rotary_tables
from accounting.model.config import TransformerConfig


def _norm(config: TransformerConfig) -> nn.Module:
    return RMSNorm(config.width) if config.norm == "rmsnorm" else nn.LayerNorm(config.width, bias=config.bias)


class Block(nn.Module):
    """Pre-norm block: x + attention(norm(x)), then x + MLP(norm(x))."""

    def __init__(self, config: TransformerConfig, attention: str = "sdpa", enable_gqa: bool | None = None):
        super().__init__()
        h, f, a, kv = config.width, config.ffn_width, config.attention_width, config.kv_width
        self.heads, self.kv_heads, self.attention_kind = config.heads, config.kv_heads, attention
        self.enable_gqa = enable_gqa
        self.llama = config.norm == "rmsnorm"
        self.swiglu = config.mlp == "swiglu"
        self.attention_norm = _norm(config)
        if self.llama:  # separate projections, as Llama's q_proj, k_proj and v_proj
            self.q = nn.Linear(h, a, bias=config.qkv_bias)
            self.k = nn.Linear(h, kv, bias=config.qkv_bias)
            self.v = nn.Linear(h, kv, bias=config.qkv_bias)
        else:  # one fused projection, as GPT-2's c_attn
            self.qkv = nn.Linear(h, a + 2 * kv, bias=config.qkv_bias)
        self.projection = nn.Linear(a, h, bias=config.bias)
        self.mlp_norm = _norm(config)
        if self.swiglu:
            self.gate = nn.Linear(h, f, bias=config.bias)
        self.up = nn.Linear(h, f, bias=config.bias)
        self.down = nn.Linear(f, h, bias=config.bias)
        if attention == "eager":
            future = torch.ones(config.sequence_length, config.sequence_length, dtype=torch.bool).triu(1)
            self.register_buffer("future", future, persistent=False)
        else:
            self.future = None

    def _heads(self, x: Float[torch.Tensor, "batch seq width"]):
        """Queries (batch, heads, seq, d), keys and values (batch, kv_heads, seq, d): views of the projections."""
        if self.llama:
            q, k, v = self.q(x), self.k(x), self.v(x)
        else:
            kv = self.kv_heads * (self.projection.in_features // self.heads)
            q, k, v = self.qkv(x).split([self.projection.in_features, kv, kv], dim=-1)
        return (rearrange(q, "b t (h d) -> b h t d", h=self.heads),
                rearrange(k, "b t (h d) -> b h t d", h=self.kv_heads),
                rearrange(v, "b t (h d) -> b h t d", h=self.kv_heads))

    def attention(self, x: Float[torch.Tensor, "batch seq width"],
                  rotary=None) -> Float[torch.Tensor, "batch seq width"]:
        q, k, v = self._heads(x)
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        mixed = attend(q, k, v, attention=self.attention_kind, future=self.future, fp32_softmax=self.llama,
                       enable_gqa=self.enable_gqa)
        return self.projection(rearrange(mixed, "b h t d -> b t (h d)"))

    def mlp(self, x: Float[torch.Tensor, "batch seq width"]) -> Float[torch.Tensor, "batch seq width"]:
        if self.swiglu:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x)))

    def forward(self, x: Float[torch.Tensor, "batch seq width"], rotary=None) -> Float[torch.Tensor, "batch seq width"]:
        x = x + self.attention(self.attention_norm(x), rotary)
        return x + self.mlp(self.mlp_norm(x))


def _check_buildable(config: TransformerConfig) -> None:
    """What this model does not build is an error naming it, never another model built in its place.

    >>> _check_buildable(TransformerConfig(layers=1, width=64, heads=8, sequence_length=8, vocabulary=32,
    ...                                    experts=4, experts_per_token=2, mlp="swiglu", gelu="unfused"))
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: GPT does not build experts=4 (a mixture of experts), gelu='unfused' (GPT-2's tanh formula in elementwise ops): measure a Hugging Face model of it instead
    """
    differences = [f"{name}={value!r} ({why})" for name, value, why, refused in (
        ("experts", config.experts, "a mixture of experts", config.experts > 1),
        ("gelu", config.gelu, "GPT-2's tanh formula in elementwise ops", config.gelu != "fused"),
    ) if refused]
    if differences:
        raise AccountingError(f"GPT does not build {', '.join(differences)}: measure a Hugging Face model of it "
                              "instead")


class GPT(nn.Module):
    """The whole model: tokens (batch, seq) → logits (batch, seq, vocabulary)."""

    def __init__(self, config: TransformerConfig, *, recompute: bool = False, attention: str = "sdpa",
                 enable_gqa: bool | None = None):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise AccountingTypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        if not isinstance(recompute, bool):
            raise AccountingTypeError(f"recompute must be True or False, got {recompute!r}")
        if enable_gqa is not None and not isinstance(enable_gqa, bool):
            raise AccountingTypeError(f"enable_gqa must be True, False or None, got {enable_gqa!r}")
        self.attention = check_attention(attention)
        _check_buildable(config)
        self.config = config
        self.recompute = recompute
        self.rotary = config.norm == "rmsnorm" and not config.learned_positions
        self.token_embedding = nn.Embedding(config.vocabulary, config.width)
        self.position_embedding = (
            nn.Parameter(torch.randn(config.max_positions, config.width) * 0.02) if config.learned_positions else None
        )
        self.blocks = nn.ModuleList(Block(config, attention, enable_gqa) for _ in range(config.layers))
        self.final_norm = _norm(config)
        self.unembedding = nn.Linear(config.width, config.vocabulary, bias=False)
        if config.tied_embeddings:
            self.unembedding.weight = self.token_embedding.weight

    def forward(self, tokens: Int[torch.Tensor, "batch seq"]) -> Float[torch.Tensor, "batch seq vocabulary"]:
        length = tokens.shape[-1]
        if length > self.config.sequence_length:
            raise AccountingError(
                f"tokens have {length} positions but the model was built for sequence_length="
                f"{self.config.sequence_length}"
            )
        x = self.token_embedding(tokens)
        if self.position_embedding is not None:
            x = x + self.position_embedding[:length]
        rotary = rotary_tables(length, self.config.head_width, x.dtype, x.device) if self.rotary else None
        for block in self.blocks:
            if self.recompute and self.training:
                x = checkpoint(block, x, rotary, use_reentrant=False)
            else:
                x = block(x, rotary)
        return self.unembedding(self.final_norm(x))


def language_model_loss(
    logits: Float[torch.Tensor, "batch seq vocabulary"], targets: Int[torch.Tensor, "batch seq"]
) -> Float[torch.Tensor, ""]:
    """Next-token cross-entropy, computed in fp32 whatever the logits' dtype (as Megatron does).

    >>> logits = torch.zeros(1, 2, 4)
    >>> round(language_model_loss(logits, torch.tensor([[0, 3]])).item(), 4)  # log(4): uniform over 4 tokens
    1.3863
    """
    return F.cross_entropy(rearrange(logits.float(), "b t v -> (b t) v"), rearrange(targets, "b t -> (b t)"))
