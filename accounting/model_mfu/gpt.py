"""A decoder-only transformer built from a :class:`~accounting.TransformerConfig`, written as the lecture writes models.

Named axes with einops (``rearrange``, ``einsum``) and shapes in jaxtyping annotations;
the architecture is the one :mod:`accounting.transformer` describes (GPT-2: learned
positions, pre-norm blocks, fused Q/K/V projection, GELU MLP, eager causal attention,
final LayerNorm, unembedding tied to the token embedding unless the config says not).
Its matmuls are exactly those :func:`accounting.transformer_flops` counts, so the
FLOPs of a training step are known in closed form (the tests check them against
``FlopCounterMode``), and its saved activations those of
:func:`accounting.transformer_activation_bytes`.

Attention is eager on purpose: the (T × T) scores are materialised and counted, as the
FLOP and memory formulas assume. (With a head width or a sequence length of 1, einsum
computes an attention product as an elementwise ``mul``, which is not matmul work: the
FLOP count then falls short of the formula.) ``recompute=True`` wraps each block in
``torch.utils.checkpoint`` (activation recomputation): the block's forward runs again
in the backward pass, which costs hardware FLOPs but not model FLOPs.

>>> import torch
>>> from accounting import TransformerConfig
>>> config = TransformerConfig(layers=2, width=32, heads=4, sequence_length=16, vocabulary=64)
>>> model = GPT(config)
>>> sum(p.numel() for p in model.parameters()) == config.parameter_count
True
>>> model(torch.zeros(3, 16, dtype=torch.long)).shape
torch.Size([3, 16, 64])
"""

import math

import torch
import torch.nn.functional as F
from einops import einsum, rearrange
from jaxtyping import Float, Int
from torch import nn
from torch.utils.checkpoint import checkpoint

from accounting.errors import AccountingError, AccountingTypeError
from accounting.transformer import TransformerConfig


class Block(nn.Module):
    """Pre-norm block: x + attention(norm(x)), then x + MLP(norm(x))."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        h, f = config.width, config.ffn_width
        self.heads = config.heads
        self.attention_norm = nn.LayerNorm(h, bias=config.bias)
        self.qkv = nn.Linear(h, 3 * h, bias=config.bias)
        self.projection = nn.Linear(h, h, bias=config.bias)
        self.mlp_norm = nn.LayerNorm(h, bias=config.bias)
        self.up = nn.Linear(h, f, bias=config.bias)
        self.down = nn.Linear(f, h, bias=config.bias)
        future = torch.ones(config.sequence_length, config.sequence_length, dtype=torch.bool).triu(1)
        self.register_buffer("future", future, persistent=False)

    def attention(self, x: Float[torch.Tensor, "batch seq width"]) -> Float[torch.Tensor, "batch seq width"]:
        q, k, v = rearrange(self.qkv(x), "b t (three h d) -> three b h t d", three=3, h=self.heads)
        length = x.shape[1]
        scores = einsum(q, k, "b h t_q d, b h t_k d -> b h t_q t_k") / math.sqrt(q.shape[-1])
        weights = scores.masked_fill(self.future[:length, :length], float("-inf")).softmax(dim=-1)
        mixed = einsum(weights, v, "b h t_q t_k, b h t_k d -> b h t_q d")
        return self.projection(rearrange(mixed, "b h t d -> b t (h d)"))

    def forward(self, x: Float[torch.Tensor, "batch seq width"]) -> Float[torch.Tensor, "batch seq width"]:
        x = x + self.attention(self.attention_norm(x))
        return x + self.down(F.gelu(self.up(self.mlp_norm(x))))


def _check_gpt2_shaped(config: TransformerConfig) -> None:
    """This model is GPT-2's architecture: a config of another family is an error naming what differs, never a
    GPT-2 built in its place.

    >>> _check_gpt2_shaped(TransformerConfig(layers=1, width=64, heads=8, sequence_length=8, vocabulary=32,
    ...                                      kv_heads=2, mlp="swiglu"))
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: GPT builds GPT-2's architecture only; this config has kv_heads=2 (not heads=8), mlp='swiglu' (not 'gelu'): measure a Hugging Face model of it instead
    """
    differences = [f"{name}={value!r} (not {expected})" for name, value, expected, same in (
        ("kv_heads", config.kv_heads, f"heads={config.heads}", config.kv_heads == config.heads),
        ("head_width", config.head_width, f"width / heads = {config.width // config.heads}",
         config.head_width * config.heads == config.width),
        ("mlp", config.mlp, "'gelu'", config.mlp == "gelu"),
        ("norm", config.norm, "'layernorm'", config.norm == "layernorm"),
        ("qkv_bias", config.qkv_bias, f"bias={config.bias}", config.qkv_bias == config.bias),
        ("experts", config.experts, "1", config.experts == 1),
        ("gelu", config.gelu, "'fused': F.gelu", config.gelu == "fused"),
    ) if not same]
    if differences:
        raise AccountingError(f"GPT builds GPT-2's architecture only; this config has {', '.join(differences)}: "
                              "measure a Hugging Face model of it instead")


class GPT(nn.Module):
    """The whole model: tokens (batch, seq) → logits (batch, seq, vocabulary)."""

    def __init__(self, config: TransformerConfig, *, recompute: bool = False):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise AccountingTypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        if not isinstance(recompute, bool):
            raise AccountingTypeError(f"recompute must be True or False, got {recompute!r}")
        _check_gpt2_shaped(config)
        self.config = config
        self.recompute = recompute
        self.token_embedding = nn.Embedding(config.vocabulary, config.width)
        self.position_embedding = (
            nn.Parameter(torch.randn(config.max_positions, config.width) * 0.02) if config.learned_positions else None
        )
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(config.width, bias=config.bias)
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
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.recompute and self.training else block(x)
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
