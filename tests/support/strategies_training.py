"""Strategies for training-memory and model-FLOP tests, and the GPT they are checked on.

``ReferenceGPT`` is a plain eager GPT-2-style model (pre-norm blocks, fused QKV, GELU MLP,
eager causal attention, tied or untied unembedding) built from a ``TransformerConfig``:
it is the "real thing" the formulas are compared with.
"""

import math

import torch
import torch.nn.functional as F
from hypothesis import strategies as st
from torch import nn

from accounting import TransformerConfig

# ---- the model -----------------------------------------------------------------------


def native_dropout(x, p: float, training: bool):
    """Dropout as ``F.dropout`` runs it on CUDA (``torch.native_dropout``, which saves a bool mask),
    on any device; on the CPU ``F.dropout`` multiplies by a noise tensor of ``x``'s dtype instead."""
    return torch.native_dropout(x, p, training)[0]


class Block(nn.Module):
    def __init__(self, config: TransformerConfig, dropout: float, fused_dropout: bool = False):
        super().__init__()
        h, f = config.width, config.ffn_width
        self.heads = config.heads
        self.dropout = dropout
        self.dropout_function = native_dropout if fused_dropout else F.dropout
        self.attention_norm = nn.LayerNorm(h, bias=config.bias)
        self.qkv = nn.Linear(h, 3 * h, bias=config.bias)
        self.projection = nn.Linear(h, h, bias=config.bias)
        self.mlp_norm = nn.LayerNorm(h, bias=config.bias)
        self.up = nn.Linear(h, f, bias=config.bias)
        self.down = nn.Linear(f, h, bias=config.bias)
        future = torch.ones(config.sequence_length, config.sequence_length, dtype=torch.bool).triu(1)
        self.register_buffer("future", future, persistent=False)

    def _dropout(self, x):
        return self.dropout_function(x, self.dropout, self.training) if self.dropout else x

    def attention(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=-1)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(self.future[:length, :length], float("-inf"))
        weights = self._dropout(scores.softmax(dim=-1))
        mixed = (weights @ v).transpose(1, 2).reshape(batch, length, width)
        return self._dropout(self.projection(mixed))

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self._dropout(self.down(F.gelu(self.up(self.mlp_norm(x)))))


class ReferenceGPT(nn.Module):
    def __init__(self, config: TransformerConfig, dropout: float = 0.0, fused_dropout: bool = False):
        super().__init__()
        self.dropout = dropout
        self.dropout_function = native_dropout if fused_dropout else F.dropout
        self.token_embedding = nn.Embedding(config.vocabulary, config.width)
        self.position_embedding = (
            nn.Parameter(torch.randn(config.sequence_length, config.width) * 0.02) if config.learned_positions else None
        )
        self.blocks = nn.ModuleList(Block(config, dropout, fused_dropout) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(config.width, bias=config.bias)
        self.unembedding = nn.Linear(config.width, config.vocabulary, bias=False)
        if config.tied_embeddings:
            self.unembedding.weight = self.token_embedding.weight

    def forward(self, tokens):
        x = self.token_embedding(tokens)
        if self.position_embedding is not None:
            x = x + self.position_embedding[: tokens.shape[1]]
        if self.dropout:
            x = self.dropout_function(x, self.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        return self.unembedding(self.final_norm(x))


def language_model_loss(logits, targets):
    """Cross-entropy computed in fp32, as Megatron does for 16-bit logits."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def random_tokens(config: TransformerConfig, batch_size: int, device="cpu", generator=None):
    shape = (batch_size, config.sequence_length)
    return torch.randint(0, config.vocabulary, shape, device=device, generator=generator)


def step_counter_bytes(optimizer) -> int:
    """Bytes of a real optimizer's scalar step counters (which training_memory leaves out)."""
    return sum(state["step"].untyped_storage().nbytes() for state in optimizer.state.values() if "step" in state)


# ---- strategies ----------------------------------------------------------------------


@st.composite
def transformer_configs(draw, max_layers: int = 2, max_width: int = 48, max_length: int = 24, max_vocabulary: int = 64):
    """A small valid config: heads divide the width by construction."""
    heads = draw(st.integers(1, 4))
    head_width = draw(st.integers(1, max(1, max_width // heads)))
    return TransformerConfig(
        layers=draw(st.integers(1, max_layers)),
        width=heads * head_width,
        heads=heads,
        sequence_length=draw(st.integers(1, max_length)),
        vocabulary=draw(st.integers(2, max_vocabulary)),
        ffn_width=draw(st.none() | st.integers(1, 2 * max_width)),
        tied_embeddings=draw(st.booleans()),
        learned_positions=draw(st.booleans()),
        bias=draw(st.booleans()),
    )


OPTIMIZER_CASES = {
    # name -> (torch class, strategy of memory settings)
    "sgd": (torch.optim.SGD, st.fixed_dictionaries({"momentum": st.sampled_from([0.0, 0.9])})),
    "adagrad": (torch.optim.Adagrad, st.fixed_dictionaries({})),
    "rmsprop": (
        torch.optim.RMSprop,
        st.fixed_dictionaries({"momentum": st.sampled_from([0.0, 0.5]), "centered": st.booleans()}),
    ),
    "adam": (torch.optim.Adam, st.fixed_dictionaries({"amsgrad": st.booleans()})),
    "adamw": (torch.optim.AdamW, st.fixed_dictionaries({"amsgrad": st.booleans()})),
}


@st.composite
def small_models(draw):
    """An MLP of random depth and widths, random dtype, sometimes a tied pair of layers."""
    widths = draw(st.lists(st.integers(1, 12), min_size=2, max_size=4))
    bias = draw(st.booleans())
    layers = [nn.Linear(a, b, bias=bias) for a, b in zip(widths, widths[1:])]
    if draw(st.booleans()) and len(layers) > 1 and layers[0].weight.shape == layers[-1].weight.shape:
        layers[-1].weight = layers[0].weight  # tied: one Parameter in two layers
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.bfloat16]))
    return nn.Sequential(*layers).to(dtype)


@st.composite
def realistic_configs(draw, max_layers: int = 2):
    """Small configs shaped like real ones: heads of width 8 to 16, MLP 4× wide, 16+ tokens,
    vocabulary no more than a few times the width. Transients are a small share of memory here,
    as in real models; in degenerate shapes (width 1, a vocabulary 50× the width) they dominate."""
    heads = draw(st.integers(1, 4))
    width = heads * draw(st.integers(8, 16))
    return TransformerConfig(
        layers=draw(st.integers(1, max_layers)),
        width=width,
        heads=heads,
        sequence_length=draw(st.integers(16, 32)),
        vocabulary=draw(st.integers(16, 2 * width)),
        tied_embeddings=draw(st.booleans()),
        learned_positions=draw(st.booleans()),
        bias=draw(st.booleans()),
    )
