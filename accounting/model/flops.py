"""FLOPs of a decoder-only transformer, and the wall-clock time a training run needs.

Matmul FLOPs only, with the package convention of :mod:`accounting.flops` (2 FLOPs per
multiply-add), so the counts match ``torch.utils.flop_counter.FlopCounterMode``. With h the
width, H query heads and K key/value heads of width d, f the MLP width, per layer the
forward pass over ``tokens`` = batch · T multiplies

- the Q (h → H·d), K and V (h → K·d each) and output (H·d → h) projections;
- the MLP: two matrices h → f → h (GELU) or three, gate and up h → f and down f → h
  (SwiGLU); with E experts, each token goes through k = ``experts_per_token`` of them, so
  the experts see tokens · k rows in all (however the router spreads them), and a router
  h → E sees every token;
- queries by keys (scores) and scores by values, per query head: 2 · 2 · tokens · T · d,
  so 4 · tokens · T · H · d (grouped-query attention repeats each key/value head for its
  group, so K does not enter);

(latent attention, DeepSeek's: its down- and up-projections instead of Q, K and V, and the product
with the values over their own width; shared experts see every token; dense blocks their one MLP),
that is 2 · tokens · (the weights one token multiplies) + the attention; then the
unembedding multiplies by the (V, h) vocabulary matrix: 2 · tokens · h · V.
The backward pass of every matmul is two matmuls of the same size (the gradients of both
operands), so training costs 3 × forward: per token **6N + 12·L·H·d·T**, with N the
weights that multiply a token's activations (for a mixture of experts, the active ones) —
the form of Chowdhery et al. 2022 (PaLM), Appendix B.

Causal attention. ``causal="full"`` (the default) counts the whole T × T score matrix, as
eager attention computes it and as ``FlopCounterMode`` counts it, masked half included.
``causal="half"`` counts half of it, the attention term becoming 6·L·H·d·T per token: the
convention of Megatron-LM's MFU and of FlashAttention's benchmarks, for kernels that skip
the masked blocks.

Left out: the embedding lookups (indexing, no multiply), norms, activations, softmax,
residual and bias adds, the rotary angles, the routing weights' scaling, the loss and the
optimizer step (all O(tokens · h) or O(params), not matmul work).

>>> from accounting import TransformerConfig
>>> from accounting.model.flops import transformer_flops, training_time
>>> gpt2 = TransformerConfig(layers=12, width=768, heads=12, sequence_length=1024, vocabulary=50257)
>>> flops = transformer_flops(gpt2, batch_size=8)
>>> flops.forward_per_token, flops.training_per_token
(284812800, 854438400)
>>> print(training_time(6 * 70e9 * 15e12, peak_flops_per_second=989.4e12, mfu=0.5, devices=1024))
6.30e+24 FLOPs on 1024 devices of 9.89e+14 FLOP/s at MFU 0.5: 143.9 days
"""

import numbers
from dataclasses import dataclass

from accounting._checks import check_choice, check_non_negative, check_positive, check_positive_size, check_size
from accounting._units import readable_duration, readable_flops
from accounting.errors import AccountingError, AccountingTypeError
from accounting.flops import linear_flops, matmul_flops
from accounting.model.config import TransformerConfig


def _whole_number(value, what: str) -> int:
    """An int, or a float with no fractional part (``70e9``), as an int."""
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, numbers.Integral)):
        value = check_non_negative(value, what)
        if not value.is_integer():
            raise AccountingError(f"{what} must be a whole number, got {value!r}")
        value = int(value)
    return check_size(value, what)


def training_flops(parameters, tokens) -> int:
    """FLOPs of training a dense model on ``tokens`` tokens: ≈ 6 × tokens × parameters.

    Every parameter is taken to sit in a matmul that each token passes through, so the
    model is, FLOP-wise, one linear layer with ``parameters`` weights (forward 2, backward 4).

    >>> training_flops(70e9, 15e12)
    6300000000000000000000000
    """
    parameters = _whole_number(parameters, "parameters")
    tokens = _whole_number(tokens, "tokens")
    return linear_flops(tokens, parameters, 1, phase="step")


CAUSAL_CONVENTIONS = ("full", "half")


@dataclass(frozen=True)
class TransformerFlops:
    """Matmul FLOPs of one step (``batch_size`` sequences of ``config.sequence_length`` tokens)."""

    config: TransformerConfig
    batch_size: int
    embeddings: bool
    forward: int
    backward: int
    causal: str = "full"

    @property
    def tokens(self) -> int:
        return self.batch_size * self.config.sequence_length

    @property
    def training(self) -> int:
        """Forward + backward of one step."""
        return self.forward + self.backward

    @property
    def forward_per_token(self) -> int:
        return self.forward // self.tokens

    @property
    def training_per_token(self) -> int:
        return self.training // self.tokens

    @property
    def matmul_parameter_count(self) -> int:
        """N: weights that multiply a token's activations — with experts, only the
        ``experts_per_token`` it is routed to — and the unembedding only if ``embeddings``."""
        config = self.config
        unembedding = config.unembedding_parameter_count * (1 + config.mtp_modules) if self.embeddings else 0
        return config.blocks_active_matmul_parameter_count + unembedding


def _matmul_with_gradients(a_shape, b_shape) -> tuple[int, int]:
    """(forward, backward) FLOPs of ``a @ b`` when both operands need gradients.

    Backward: ``da = dc @ bᵀ`` and ``db = aᵀ @ dc``.
    """
    *batch, m, k = a_shape
    n = b_shape[-1]
    forward = matmul_flops(a_shape, b_shape)
    backward = matmul_flops((*batch, m, n), (*batch, n, k)) + matmul_flops((*batch, k, m), (*batch, m, n))
    return forward, backward


def _mlp_linears(config: TransformerConfig, rows: int, ffn_width: int) -> list[tuple[int, int, int]]:
    """(rows, inputs, outputs) of one MLP's matrices: h → f (one or two of them) and f → h."""
    h = config.width
    return [(rows, h, ffn_width)] * (config.mlp_matrices - 1) + [(rows, ffn_width, h)]


def _linears(config: TransformerConfig, tokens: int, dense: bool = False) -> list[tuple[int, int, int]]:
    """(rows, inputs, outputs) of every linear layer of one block (``dense``: one of ``dense_layers``)."""
    attention = [(tokens, inputs, outputs) for inputs, outputs in config.attention_projections()]
    if config.experts == 1 or dense:
        return attention + _mlp_linears(config, tokens, config.dense_ffn_width)
    # Each token's rows go to experts_per_token experts: the experts see tokens · k rows in all.
    routed = _mlp_linears(config, tokens * config.experts_per_token, config.ffn_width)
    shared = _mlp_linears(config, tokens, config.shared_experts * config.ffn_width) if config.shared_experts else []
    return attention + routed + shared + [(tokens, config.width, config.experts)]


def transformer_flops(
    config: TransformerConfig, batch_size: int = 1, embeddings: bool = True, causal: str = "full"
) -> TransformerFlops:
    """Forward and backward matmul FLOPs of a decoder-only transformer step (see the module docstring).

    ``embeddings=False`` leaves out the unembedding (vocabulary projection), giving the
    non-embedding count of Kaplan et al. 2020; the embedding lookup costs nothing either way.
    ``causal="half"`` counts half the attention score and mixing matmuls (the masked half
    skipped); ``"full"`` counts them whole, as eager attention computes them.

    >>> from accounting import TransformerConfig
    >>> tiny = TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=100)
    >>> flops = transformer_flops(tiny, batch_size=2)
    >>> flops.training == 3 * flops.forward
    True
    >>> L, h, T = 2, 64, 32
    >>> flops.training_per_token == 6 * flops.matmul_parameter_count + 12 * L * h * T
    True
    >>> half = transformer_flops(tiny, batch_size=2, causal="half")
    >>> half.training_per_token == 6 * half.matmul_parameter_count + 6 * L * h * T
    True
    """
    if not isinstance(config, TransformerConfig):
        raise AccountingTypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    batch = check_positive_size(batch_size, "batch_size")
    if not isinstance(embeddings, bool):
        raise AccountingTypeError(f"embeddings must be True or False, got {embeddings!r}")
    check_choice(causal, CAUSAL_CONVENTIONS, "causal")
    tokens = batch * config.sequence_length
    heads, d, t = config.heads, config.head_width, config.sequence_length
    # The shared output head runs once for the model and once for each multi-token-prediction module.
    vocabulary = [(tokens, config.width, config.vocabulary)] * (1 + config.mtp_modules) if embeddings else []
    scores = _matmul_with_gradients((batch, heads, t, d), (batch, heads, d, t))
    mix = _matmul_with_gradients((batch, heads, t, t), (batch, heads, t, config.value_head_width))
    # Every attention count is a multiple of 4 (2 per multiply-add, and 2 for forward's or backward's pair).
    attention_forward, attention_backward = scores[0] + mix[0], scores[1] + mix[1]
    if causal == "half":
        attention_forward, attention_backward = attention_forward // 2, attention_backward // 2
    forward = sum(linear_flops(*shape) for shape in vocabulary)
    backward = sum(linear_flops(*shape, "backward") for shape in vocabulary)
    dense_layers = config.dense_layers if config.experts > 1 else config.layers
    # A multi-token-prediction module: its projection 2h → h and one block of the last block's kind, over as
    # many tokens as the model (Megatron-LM's implementation rolls the sequence, keeping its length).
    mtp = config.mtp_modules
    projection = [(tokens, 2 * config.width, config.width)] * mtp
    forward += sum(linear_flops(*shape) for shape in projection)
    backward += sum(linear_flops(*shape, "backward") for shape in projection)
    blocks = ((config.layers - dense_layers + mtp, False), (dense_layers, True)) if config.experts > 1 \
        else ((0, False), (dense_layers + mtp, True))
    for layers, dense in blocks:
        linears = _linears(config, tokens, dense)
        forward += layers * (sum(linear_flops(*shape) for shape in linears) + attention_forward)
        backward += layers * (sum(linear_flops(*shape, "backward") for shape in linears) + attention_backward)
    return TransformerFlops(config, batch, embeddings, forward, backward, causal)


@dataclass(frozen=True)
class TrainingTime:
    """Napkin wall-clock time of a training run: FLOPs ÷ (devices × peak FLOP/s × MFU)."""

    flops: float
    peak_flops_per_second: float
    mfu: float
    devices: int

    @property
    def seconds(self) -> float:
        return self.flops / (self.devices * self.peak_flops_per_second * self.mfu)

    @property
    def hours(self) -> float:
        return self.seconds / 3600

    @property
    def days(self) -> float:
        return self.seconds / 86400

    def __str__(self) -> str:
        return (
            f"{readable_flops(self.flops)} on {self.devices} device{'s' if self.devices > 1 else ''} "
            f"of {self.peak_flops_per_second:.2e} FLOP/s at MFU {self.mfu:g}: {readable_duration(self.seconds)}"
        )


def training_time(flops, peak_flops_per_second, mfu: float = 0.5, devices: int = 1) -> TrainingTime:
    """Wall-clock time to do ``flops`` on ``devices`` devices of this dense peak at this MFU.

    ``peak_flops_per_second`` is per device, for the dtype the run uses (H100 SXM bf16:
    989.4e12, dense). Communication, stalls and restarts are the MFU's business.

    >>> t = training_time(training_flops(70e9, 15e12), peak_flops_per_second=989.4e12, mfu=0.5, devices=1024)
    >>> round(t.days, 1)
    143.9
    """
    flops = check_non_negative(flops, "flops")
    peak = check_positive(peak_flops_per_second, "peak_flops_per_second")
    utilisation = check_positive(mfu, "mfu")
    if utilisation > 1:
        raise AccountingError(f"mfu is a fraction of peak and cannot exceed 1, got {mfu!r}")
    devices = check_positive_size(devices, "devices")
    return TrainingTime(flops, peak, utilisation, devices)
