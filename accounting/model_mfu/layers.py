"""The parts of :class:`~accounting.model_mfu.gpt.GPT` that GPT-2 does not have: RMSNorm, rotary positions, and
attention by ``scaled_dot_product_attention`` or by hand.

Each is written as Hugging Face's ``LlamaForCausalLM`` writes it (transformers ``modeling_llama.py``), because
the activation formulas (:mod:`accounting.model.activations`) count what that code saves for backward:

- RMSNorm in fp32 whatever the input's dtype (``x.float()``, its mean square, ``rsqrt``), the gain applied
  after casting back;
- rotary positions from cos and sin tables of (sequence, head width), made in fp32 for each forward and cast
  to the activations' dtype, applied to queries and keys as ``x·cos + rotate_half(x)·sin``;
- attention: ``scaled_dot_product_attention`` with ``is_causal=True`` (and ``enable_gqa`` where there are
  fewer key/value heads than query heads), or eager: key/value heads repeated to every query head, the
  (s × s) scores masked, softmax in fp32 then cast back, as Hugging Face's ``eager`` attention does.

>>> import torch
>>> cos, sin = rotary_tables(4, 8, torch.float32, "cpu")
>>> cos.shape, bool(cos[0].eq(1).all()), bool(sin[0].eq(0).all())  # position 0 is not rotated
(torch.Size([4, 8]), True, True)
"""

import math

import torch
import torch.nn.functional as F
from einops import repeat
from jaxtyping import Float
from torch import nn

from accounting._checks import check_choice
from accounting.errors import AccountingTypeError
from accounting.model.attention_kernels import SDPA_TAKES_ENABLE_GQA

ATTENTIONS = ("sdpa", "eager")
"""``sdpa``: ``torch.nn.functional.scaled_dot_product_attention``, which runs a fused kernel where the device has
one for the inputs (flash, memory-efficient or cuDNN on CUDA, a flash kernel on the CPU) and its math fallback
elsewhere; ``eager``: the scores computed, masked and normalised in separate ops (the (s × s) matrices saved)."""


def check_attention(attention) -> str:
    """``attention`` if it is one of :data:`ATTENTIONS`, else an error naming it.

    >>> check_attention("eager")
    'eager'
    """
    if not isinstance(attention, str):
        raise AccountingTypeError(f"attention must be one of {', '.join(map(repr, ATTENTIONS))}, got {attention!r}")
    return check_choice(attention, ATTENTIONS, "attention")

ROTARY_BASE = 10_000.0
"""θ of rotary positions: frequency i of a head is θ^(-2i/d) (Su et al. 2021, "RoFormer"; Llama 2, TinyLlama)."""
RMS_NORM_EPS = 1e-5
"""ε under the root of RMSNorm (Llama 2's and TinyLlama's ``rms_norm_eps``)."""


SDPA_TAKES_GQA = SDPA_TAKES_ENABLE_GQA
"""Whether ``scaled_dot_product_attention`` takes ``enable_gqa`` (torch 2.5): grouped-query attention goes to it with
``enable_gqa=True``, its key/value heads as they are, as Hugging Face calls it; on older torch they are repeated
first, as Hugging Face does there (same FLOPs, a copy of K and V per layer). The default of :func:`attend`.
:func:`accounting.flop_count.count_flops` counts either call alike on every torch."""


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + ε) · gain, computed in fp32 (Zhang & Sennrich 2019; Llama's ``LlamaRMSNorm``).

    >>> norm = RMSNorm(2)
    >>> norm(torch.tensor([[3.0, 4.0]])).mul(10).round().tolist()  # rms of (3, 4) is √12.5
    [[8.0, 11.0]]
    """

    def __init__(self, width: int, eps: float = RMS_NORM_EPS):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: Float[torch.Tensor, "... width"]) -> Float[torch.Tensor, "... width"]:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotary_tables(length: int, head_width: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position × frequency, (length, head width), the frequencies repeated for the two halves."""
    frequencies = 1.0 / ROTARY_BASE ** (torch.arange(0, head_width, 2, dtype=torch.float32, device=device) / head_width)
    angles = torch.outer(torch.arange(length, dtype=torch.float32, device=device), frequencies)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x₁, x₂) → (−x₂, x₁) over the last axis's two halves."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rotary(x: Float[torch.Tensor, "batch heads seq d"], cos, sin) -> Float[torch.Tensor, "batch heads seq d"]:
    """Rotate each pair (i, i + d/2) of every head by position × frequency i."""
    return x * cos + rotate_half(x) * sin


def attend(q: Float[torch.Tensor, "batch heads seq d"], k: Float[torch.Tensor, "batch kv_heads seq d"],
           v: Float[torch.Tensor, "batch kv_heads seq d"], *, attention: str, future=None, fp32_softmax=False,
           enable_gqa: bool | None = None) -> Float[torch.Tensor, "batch heads seq d"]:
    """Causal attention of every query head over its key/value head (heads / kv_heads queries share one).

    ``future``: the (s × s) bool mask of later positions (eager only); ``fp32_softmax``: eager's softmax in
    fp32, cast back (Llama's), else in the scores' dtype (GPT-2's); ``enable_gqa``: SDPA takes grouped heads as
    they are (``True``) or repeated first (``False``); ``None``: :data:`SDPA_TAKES_GQA`.
    """
    group = q.shape[1] // k.shape[1]
    if attention == "sdpa" and group > 1 and (SDPA_TAKES_GQA if enable_gqa is None else enable_gqa):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    if group > 1:  # key/value heads repeated to every query head
        k, v = (repeat(t, "b k t d -> b (k g) t d", g=group) for t in (k, v))
    if attention == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    length = q.shape[2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(future[:length, :length], float("-inf"))
    weights = scores.softmax(dim=-1, dtype=torch.float32).to(q.dtype) if fp32_softmax else scores.softmax(dim=-1)
    return weights @ v
