"""Bytes a decoder-only transformer saves for backward, tensor by tensor, as the implementations save them.

Also the precision policies (:class:`PrecisionPolicy`: the format of each copy of the model,
whether the forward runs under autocast) and the element sizes they give a forward pass
(:class:`ActivationFormats`); :mod:`accounting.model.training_memory` builds the whole step on them.

The accounting follows Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", arXiv:2205.05198, section 4), term by term, but counts what the code
that people train actually keeps, read off the saved tensors of a real forward pass
(``torch.autograd.graph.saved_tensors_hooks``) and checked against a live-tensor tracker:

- configs with ``norm="layernorm"`` run as GPT-2 does (Hugging Face ``GPT2LMHeadModel``, and
  the project's own GPT): LayerNorm saving its input, mean and reciprocal std; one fused QKV
  matrix; the softmax in the activations' dtype;
- configs with ``norm="rmsnorm"`` run as Llama does (``LlamaForCausalLM``; Qwen2, Mistral and
  Mixtral share its code): RMSNorm computed in fp32 (it saves an fp32 copy of its input, the
  normalised tensor and the reciprocal RMS), separate Q, K and V matrices, rotary positions
  (cos and sin tables), K and V repeated to every query head before eager attention
  (``repeat_kv``), the softmax in fp32 then cast, SwiGLU saving gate, up, SiLU and product,
  and Mixtral's experts (tokens gathered per expert, ``torch._grouped_mm``).

Attention is counted as the kernel that runs it: eager attention, or the kernel
``scaled_dot_product_attention`` picks on the device asked about (:mod:`accounting.model.attention_kernels`):
fused kernels keep one statistic per query, the math kernel every (s × s) attention weight.

Notation: T = tokens (sequence × batch), h = width, A = heads × head width, K·d = kv width,
f = MLP width, H = heads, s = sequence, V = vocabulary, E = experts, k = experts per token.
Element sizes come from :class:`ActivationFormats`: σ for the residual stream, μ for matmul
outputs (they differ under autocast: fp32 stream, bf16 matmuls).

>>> from accounting import TransformerConfig
>>> config = TransformerConfig(layers=1, width=4, heads=2, sequence_length=3, vocabulary=10)
>>> transformer_activations(config, 1, ActivationFormats(4, 4, 4)).saved  # 4*(96 + 96 + 18) + 4*24 + 4*30 + 3*8*3
1128
"""

import math
from dataclasses import dataclass, replace

from accounting._checks import check_choice, check_positive_size
from accounting.model import attention_kernels  # SDPA_TAKES_ENABLE_GQA read at call time: tests set it
from accounting.model.attention_kernels import (
    SDPA_KERNELS, SdpaCall, SdpaKernel, choose_sdpa_kernel, without_enable_gqa,
)
from accounting.errors import AccountingTypeError
from accounting.memory import storage_dtype
from accounting.model.config import GELUS, TransformerConfig

SDPA_ATTENTIONS = tuple(f"sdpa-{kernel}" for kernel in SDPA_KERNELS)
"""``scaled_dot_product_attention`` with a named kernel: ``sdpa-flash``, ``sdpa-cudnn`` and
``sdpa-efficient`` save Q, K, V, the output and an fp32 log-sum-exp per query (no s² term);
``sdpa-math`` saves the scaled Q, K and V it multiplies (in fp32 for 16-bit inputs: torch's math
kernel upcasts them unless ``allow_fp16_bf16_reduction_math_sdp``) and the (s × s) attention weights."""
ATTENTIONS = ("eager", "sdpa", *SDPA_ATTENTIONS)
"""``eager``: softmax(QKᵀ)V in separate ops, the (s × s) scores saved; ``sdpa``: the kernel
``scaled_dot_product_attention`` runs for the call on the ``device`` asked about
(:func:`accounting.model.attention_kernels.choose_sdpa_kernel`); or one of :data:`SDPA_ATTENTIONS`."""
_EFFICIENT_LSE_ROWS = 32  # memory-efficient attention pads its log-sum-exp to a multiple of 32 queries
_SDPA_DROPOUT = 0.1  # the dropout probability the kernel is chosen for with dropout=True (GPT-2's; cuDNN refuses it)
RECOMPUTES = ("none", "full")
"""``full``: every block checkpointed (``torch.utils.checkpoint``, non-reentrant; Hugging Face's
``gradient_checkpointing_enable``), keeping only its input until backward recomputes it."""

_HF_GQA_MAX_HEAD_WIDTH = 256
"""Hugging Face passes ``enable_gqa`` only where the key and value heads are as wide and at most this wide
(``transformers.integrations.sdpa_attention.use_gqa_in_sdpa``): wider heads get K and V repeated."""

_FP32, _INT64, _MASK = 4, 8, 1  # bytes of fp32 internals (norm statistics, softmax, loss), indices, bool masks


@dataclass(frozen=True)
class ActivationFormats:
    """Bytes per element: ``stream`` (σ, the residual stream and norms), ``matmul`` (μ, what
    matmuls output), ``weights``; ``autocast``: the forward runs under ``torch.autocast``, which
    casts each linear layer's input and weight to μ-byte copies and saves those."""

    stream: int
    matmul: int
    weights: int
    autocast: bool = False
    matmul_format: str | None = None  # the matmul outputs' format name (what attention kernels see)

    @property
    def matmul_dtype(self):
        """The dtype attention runs in: ``matmul_format``'s, else the float of ``matmul`` bytes."""
        if self.matmul_format is not None:
            return storage_dtype(self.matmul_format)
        return storage_dtype({2: "bfloat16", 4: "float32", 8: "float64"}.get(self.matmul, "float32"))


@dataclass(frozen=True)
class ActivationBytes:
    """Bytes saved for backward by one block and outside the blocks, and what recomputation keeps.

    ``layer``: everything one block saves (autocast's weight copies included; where blocks differ —
    dense and expert blocks, local and global attention — the largest); ``blocks``: every block's
    together (``None``: ``layers`` × ``layer``); ``outside``: the final norm, position tables, the
    unembedding and the loss's fp32 log-probabilities; ``checkpoint``: what a checkpointed block
    keeps (its input), ``mask``: the attention masks a checkpoint keeps once for all blocks (eager;
    one per kind of layer); ``saved``: the whole forward's.
    """

    layers: int
    recompute: str
    layer: int
    outside: int
    checkpoint: int
    mask: int
    attention: str = "eager"
    kernel: SdpaKernel | None = None
    blocks: int | None = None
    local_kernel: SdpaKernel | None = None
    bottom: int | None = None  # what the first block saves (None: ``layer``), recomputed last under recomputation

    @property
    def attention_note(self) -> str:
        """Which attention was counted: ``"eager"``, or the SDPA kernel and why it was chosen."""
        return str(self.kernel) if self.kernel is not None else self.attention

    @property
    def saved(self) -> int:
        if self.recompute == "none":
            return (self.layers * self.layer if self.blocks is None else self.blocks) + self.outside
        return self.layers * self.checkpoint + self.mask + self.outside


# ---- precision policies -------------------------------------------------------------


@dataclass(frozen=True)
class PrecisionPolicy:
    """Where each copy of the model lives, as format names (see :func:`accounting.format_name`).

    ``weights``: the parameters the forward pass reads. ``master_weights``: a separate
    higher-precision copy the optimizer updates (``None``: the optimizer updates ``weights``).
    ``autocast``: the forward runs under ``torch.autocast``, which makes ``activations``-format
    copies of each linear layer's input and weight in the forward (the weights stay ``weights``).
    """

    name: str
    weights: str
    gradients: str
    master_weights: str | None
    optimizer_state: str
    activations: str
    autocast: bool = False

    def bytes_of(self, part: str) -> int:
        """Bytes per element of one part (``"weights"``, ``"gradients"``…); 0 for an absent copy."""
        fmt = getattr(self, part)
        return 0 if fmt is None else storage_dtype(fmt).itemsize


PRECISION_POLICIES = {
    policy.name: policy
    for policy in (
        PrecisionPolicy("fp32", "float32", "float32", None, "float32", "float32"),
        # Megatron/ZeRO-style mixed precision: 16-bit weights and gradients for compute and
        # communication, an fp32 master copy and fp32 optimizer state for the update.
        PrecisionPolicy("bf16-master", "bfloat16", "bfloat16", "float32", "float32", "bfloat16"),
        # The name this library used first for bf16-master, kept with the same meaning.
        PrecisionPolicy("bf16-mixed", "bfloat16", "bfloat16", "float32", "float32", "bfloat16"),
        PrecisionPolicy("fp16-mixed", "float16", "float16", "float32", "float32", "float16"),
        # torch.autocast: fp32 weights, gradients and optimizer state (no separate master copy);
        # matmuls read bf16 copies made in the forward (PyTorch AMP, Lightning's "bf16-mixed").
        PrecisionPolicy("bf16-autocast", "float32", "float32", None, "float32", "bfloat16", autocast=True),
        # Everything in bf16 ("bf16-true"): half the memory, and bf16 rounding in the update.
        PrecisionPolicy("bf16", "bfloat16", "bfloat16", None, "bfloat16", "bfloat16"),
    )
}


def precision_policy(name) -> PrecisionPolicy:
    """The policy of this name (``"fp32"``, ``"bf16-master"`` = ``"bf16-mixed"``, ``"fp16-mixed"``,
    ``"bf16-autocast"``, ``"bf16"``).

    >>> precision_policy("bf16-mixed").master_weights, precision_policy("bf16-autocast").weights
    ('float32', 'float32')
    """
    if isinstance(name, PrecisionPolicy):
        return name
    if not isinstance(name, str):
        raise AccountingTypeError(f"precision must be a policy name such as 'bf16-mixed', got {name!r}")
    return PRECISION_POLICIES[check_choice(name.strip().lower(), tuple(PRECISION_POLICIES), "precision")]


def activation_formats(precision) -> ActivationFormats:
    """Element sizes of a policy's forward pass (fp32 stream and bf16 matmuls under autocast).

    >>> activation_formats("bf16-autocast")
    ActivationFormats(stream=4, matmul=2, weights=4, autocast=True, matmul_format='bfloat16')
    """
    policy = precision_policy(precision)
    weights, activations = policy.bytes_of("weights"), policy.bytes_of("activations")
    stream = weights if policy.autocast else activations
    return ActivationFormats(stream, activations, weights, policy.autocast, policy.activations)


def _llama_style(config: TransformerConfig) -> bool:
    return config.norm != "layernorm"


def _norm_input(config: TransformerConfig, tokens: int, formats: ActivationFormats, consumers: int) -> int:
    """What the linear layers reading one tensor of the stream's width save of it: the tensor (σ), or
    under autocast each consumer's own μ-byte copy."""
    h = config.width
    return consumers * formats.matmul * tokens * h if formats.autocast else formats.stream * tokens * h


def _rms_statistics(config: TransformerConfig, elements: int, rows: int, cast: int) -> int:
    """What one RMSNorm over ``elements`` (in ``rows`` normalised rows) saves besides its output: its
    input in fp32 (a copy when it came in narrower), the reciprocal RMS per row and the normalised
    tensor the weight multiplies: cast back to ``cast`` bytes (Llama), or in fp32 (``fp32-rmsnorm``:
    OLMo 2, Gemma, whose 1 + w vector is left out)."""
    normalised = _FP32 if config.norm == "fp32-rmsnorm" else cast
    return _FP32 * elements + _FP32 * rows + normalised * elements


def _norm(config: TransformerConfig, tokens: int, formats: ActivationFormats, consumers: int) -> int:
    """One norm feeding ``consumers`` linear layers: its input, statistics and output(s).

    LayerNorm saves its input (σ), mean and reciprocal std (fp32 per token) and its output feeds the
    next matmul (σ); Llama's RMSNorm saves its input in fp32 (a copy when σ < 4), the normalised
    tensor (σ), the reciprocal RMS (fp32 per token), and its output; OLMo 2's and Gemma's keep the
    normalised tensor in fp32. Under autocast every consuming linear layer saves its own μ-byte copy of the
    output instead.
    """
    h = config.width
    output = _norm_input(config, tokens, formats, consumers)
    if _llama_style(config):
        return _rms_statistics(config, tokens * h, tokens, formats.stream) + output
    return formats.stream * tokens * h + 2 * _FP32 * tokens + output


def _post_norm(config: TransformerConfig, tokens: int, formats: ActivationFormats) -> int:
    """A norm on a sublayer's output before the residual add (OLMo 2, Gemma's second pair): what it
    saves of its input and statistics; its output goes to the add, which saves nothing. The input is a
    matmul output (μ), so the normalised tensor is cast back to μ."""
    return _rms_statistics(config, tokens * config.width, tokens, formats.matmul)


def _block_norms(config: TransformerConfig, tokens: int, formats: ActivationFormats,
                 qkv_consumers: int, mlp_consumers: int) -> int:
    """Every norm of one block, by ``norm_placement``, and the sublayers' inputs they feed.

    ``pre``: a norm before each sublayer (its output is the sublayer's input); ``post``: the sublayers
    read the stream itself and a norm follows each; ``sandwich``: both (Gemma: four a block)."""
    pre = _norm(config, tokens, formats, qkv_consumers) + _norm(config, tokens, formats, mlp_consumers)
    post = 2 * _post_norm(config, tokens, formats)
    if config.norm_placement == "pre":
        return pre
    if config.norm_placement == "sandwich":
        return pre + post
    inputs = _norm_input(config, tokens, formats, qkv_consumers) + _norm_input(config, tokens, formats, mlp_consumers)
    return inputs + post


def _qk_norms(config: TransformerConfig, tokens: int, formats: ActivationFormats) -> int:
    """The Q and K norms of one block (``qk_norm``): per head (Qwen3, Gemma 3: a row per head and
    token) or over the whole projection (OLMo 2: a row per token), each on a matmul output (μ); their
    outputs go to the rotary embedding, which saves its tables, not them."""
    if config.qk_norm == "none":
        return 0
    per_head = config.qk_norm == "head"
    q_rows, k_rows = (config.heads, config.kv_heads) if per_head else (1, 1)
    return (_rms_statistics(config, tokens * config.attention_width, tokens * q_rows, formats.matmul)
            + _rms_statistics(config, tokens * config.kv_width, tokens * k_rows, formats.matmul))


def _math_width(formats: ActivationFormats) -> int:
    """Bytes per element of what SDPA's math kernel saves: fp32 for 16-bit inputs (it upcasts them)."""
    return max(formats.matmul, _FP32)


def sdpa_saved_bytes(config: TransformerConfig, batch: int, formats: ActivationFormats, attention: str,
                     masked: bool = False) -> int:
    """Bytes one block's ``scaled_dot_product_attention`` call saves for backward, each storage once.

    Fused kernels (``sdpa-flash``, ``sdpa-cudnn``, ``sdpa-efficient``): Q, K and V as they come in,
    the output, and an fp32 log-sum-exp per query and head (padded to 32 queries by memory-efficient
    attention). GPT-2 as Hugging Face runs it by default: Q stays a view of the fused QKV output, which
    it keeps alive whole, and K and V come in as contiguous copies that its key-value cache made
    (``use_cache`` is on in training too; on every device): 6 tensors of the attention's width. A
    model without the cache (the package's GPT, ``use_cache=False``) keeps 2 fewer. (Llama's cache copies
    replace the rotated K and the V view, byte for byte.) Math (``sdpa-math``): the scaled Q, the scaled K
    repeated to every query head, V repeated, and the softmax output (referenced twice: by the softmax
    and by the product with V), in fp32 for 16-bit inputs (torch's math kernel upcasts them unless
    ``allow_fp16_bf16_reduction_math_sdp``). V is kept as the storage it is a view of: the fused QKV
    output (``fused_projections``, Phi-3), the latent's up-projection of keys and values (DeepSeek). A
    ``masked`` call (a sliding-window block: Hugging Face passes the mask and no ``enable_gqa``) takes
    K and V repeated to every query head, and so does every grouped-query call on a torch without
    ``enable_gqa`` (before 2.5) or with heads wider than 256 (:func:`attention_call`).

    >>> config = TransformerConfig(layers=1, width=8, heads=2, kv_heads=1, sequence_length=4, vocabulary=10,
    ...                            norm="rmsnorm", mlp="swiglu")
    >>> sdpa_saved_bytes(config, 1, activation_formats("bf16"), "sdpa-math")  # 4 * (3*4*8 + 2*4*4)
    512
    """
    check_choice(attention, SDPA_ATTENTIONS, "attention")
    s, heads, mu = config.sequence_length, config.heads, formats.matmul
    tokens = s * batch
    q, kv = tokens * config.attention_width, tokens * config.kv_width
    out, values = tokens * config.value_width, tokens * config.kv_heads * config.value_head_width
    if _repeats_kv(config, masked) and config.kv_heads != config.heads:
        kv, values = q, out
    elif config.latent_attention:
        values = tokens * config.heads * (config.head_width - config.rope_head_width + config.value_head_width)
    elif config.fused_projections:
        values = q + 2 * kv
    if attention == "sdpa-math":
        wide = _math_width(formats)
        return wide * (2 * q + out) + wide * heads * s * s * batch
    rows = math.ceil(s / _EFFICIENT_LSE_ROWS) * _EFFICIENT_LSE_ROWS if attention == "sdpa-efficient" else s
    log_sum_exp = _FP32 * heads * rows * batch
    if _llama_style(config):  # q (rotated), k (rotated) and v at their own widths, the output
        return mu * (q + kv + values + out) + log_sum_exp
    return mu * (q + 2 * kv + 3 * q) + log_sum_exp  # the fused QKV output, the cache's K and V, the output


def _attention(config: TransformerConfig, batch: int, formats: ActivationFormats, attention: str,
               masked: bool = False) -> int:
    """Q, K, V and the attention output; with eager attention or SDPA's math kernel, the (s × s) weights."""
    return sum(_attention_parts(config, batch, formats, attention, masked))


def _attention_parts(config: TransformerConfig, batch: int, formats: ActivationFormats, attention: str,
                     masked: bool = False) -> tuple[int, int]:
    """:func:`_attention` as (what grows with the tokens, the (s × s) attention weights')."""
    s, heads, mu = config.sequence_length, config.heads, formats.matmul
    tokens = s * batch
    if attention in SDPA_ATTENTIONS:
        # The math kernel's output is a new tensor the projection saves merged (μ); a fused kernel's
        # output is laid out so that the merged heads are a view of what it saved, unless the call
        # was masked (measured on the CPU's flash kernel: the merge then copies).
        merged = mu * tokens * config.value_width if attention == "sdpa-math" or masked else 0
        weights = _math_width(formats) * heads * s * s * batch if attention == "sdpa-math" else 0
        return sdpa_saved_bytes(config, batch, formats, attention, masked) + merged - weights, weights
    # Eager: contiguous copies of Q, K and V for the batched matmuls (K and V repeated to every
    # query head), the merged heads for the output projection, and the softmax output: in fp32 for
    # Llama (softmax(dtype=float32), then cast), in the activations' dtype for GPT-2 and for gpt-oss's
    # softmax with sinks (autocast runs softmax in fp32 too); a cast copy is saved when the next matmul
    # reads another dtype. Soft-capped scores (Gemma 2) save their tanh (μ); sinks widen the softmax by
    # a column and keep the int64 position of each row's maximum.
    scores = heads * s * s * batch
    softmax = _FP32 if (_llama_style(config) and not config.attention_sinks) or formats.autocast else mu
    cast = mu if softmax != mu else 0
    qkv = mu * tokens * (2 * config.attention_width + 2 * config.value_width)
    if config.attention_sinks:
        rows = heads * s * batch
        return qkv + softmax * rows + _INT64 * rows, softmax * scores + cast * scores
    softcap = mu * scores if config.attention_softcap else 0
    return qkv, (softmax + cast) * scores + softcap


def _latent_attention(config: TransformerConfig, tokens: int, formats: ActivationFormats) -> int:
    """Multi-head latent attention's own saves: each latent's RMSNorm (on a matmul output, μ) and the
    normed latent its up-projection reads (μ; autocast copies it to μ too)."""
    if not config.latent_attention:
        return 0
    ranks = [config.kv_lora_rank] + ([config.q_lora_rank] if config.q_lora_rank is not None else [])
    return sum(_rms_statistics(config, tokens * rank, tokens, formats.matmul) + formats.matmul * tokens * rank
               for rank in ranks)


def _mlp_per_token(config: TransformerConfig, f: int, gelu: str) -> int:
    """Elements one MLP of width f saves per token: SwiGLU's gate, up, activation and product; gpt-oss's
    clamped SwiGLU its fused gate-up output (2f) and five f-wide intermediates; GELU's two (fused) or five."""
    return {"swiglu": 4 * f, "clamped-swiglu": 7 * f, "gelu": 2 * f if gelu == "fused" else 5 * f}[config.mlp]


def _mlp(config: TransformerConfig, tokens: int, formats: ActivationFormats, gelu: str, dense: bool = False) -> int:
    """The MLP's saved tensors; with experts, the router's and those of the tokens each expert takes,
    and the shared experts' (``dense``: one of the ``dense_layers``, a plain MLP)."""
    h, f = config.width, config.ffn_width
    per_token = _mlp_per_token(config, f, gelu)
    if config.experts == 1 or dense:
        return formats.matmul * tokens * _mlp_per_token(config, config.dense_ffn_width, gelu)
    shared = formats.matmul * tokens * _mlp_per_token(config, config.shared_experts * f, gelu)
    # Each token goes to k experts: its gathered input, what the expert's MLP saves, and the
    # expert's output (saved to be weighted by the router). torch._grouped_mm is not lowered by
    # autocast on the CPU: the experts run in the weights' dtype.
    routed = tokens * config.experts_per_token
    element = formats.weights if formats.autocast else formats.matmul
    experts = element * routed * (2 * h + per_token)
    # The router: fp32 softmax over experts, a sum per token; per routed token the top-k weight
    # (twice: kept and gathered) and four int64 index tensors (top-k, sort, its quotient, order).
    router = _FP32 * tokens * config.experts + _FP32 * tokens + routed * (2 * _FP32 + 4 * _INT64)
    return experts + router + shared


def weight_copy_bytes(config: TransformerConfig, formats: ActivationFormats, dense: bool = False) -> int:
    """Autocast's cached μ-byte copies of one block's matrices (not the experts': see :func:`_mlp`;
    the shared experts' and a dense block's MLP, yes)."""
    if not formats.autocast:
        return 0
    if config.experts > 1 and not dense:
        shared = config.shared_experts * config.ffn_width
        mlp = config.width * config.experts + config.mlp_matrices * config.width * shared
    else:
        mlp = config.mlp_matrices * config.width * config.dense_ffn_width
    return formats.matmul * (config.attention_matmul_parameter_count + mlp)


def _repeats_kv(config: TransformerConfig, masked: bool) -> bool:
    """Whether the block's SDPA call gets K and V repeated to every query head as it runs: a masked call
    (Hugging Face passes no ``enable_gqa`` with a mask), heads wider than Hugging Face passes it for, or a
    torch whose SDPA takes no ``enable_gqa`` (:data:`accounting.model.attention_kernels.SDPA_TAKES_ENABLE_GQA`)."""
    hf_gqa = not masked and config.head_width == config.value_head_width <= _HF_GQA_MAX_HEAD_WIDTH
    return not (hf_gqa and attention_kernels.SDPA_TAKES_ENABLE_GQA)


def attention_call(config: TransformerConfig, batch_size: int, formats: ActivationFormats, dropout: bool,
                   local: bool = False) -> SdpaCall:
    """The ``scaled_dot_product_attention`` call of one block as it runs: causal, no mask, grouped-query
    heads passed with ``enable_gqa`` (as Hugging Face's models call it), in the matmuls' dtype. A ``local``
    block whose window is shorter than the sequence passes its sliding-window mask instead (SDPA
    takes no window: Hugging Face builds the mask), which keeps flash-style kernels out. Where Hugging Face
    repeats K and V instead of passing ``enable_gqa`` (a mask; heads wider than 256), and on a torch
    without it, the call has K and V at every query head.

    >>> config = TransformerConfig(layers=1, width=64, heads=4, kv_heads=2, head_width=288, sequence_length=8,
    ...                            vocabulary=10)
    >>> attention_call(config, 1, activation_formats("bf16"), dropout=False).kv_heads  # 288 > 256: repeated
    4
    """
    masked = local and config.sliding_window is not None and config.sliding_window < config.sequence_length
    call = SdpaCall(
        formats.matmul_dtype, batch=batch_size, heads=config.heads, kv_heads=config.kv_heads,
        sequence=config.sequence_length, head_width=config.head_width, value_width=config.value_head_width,
        dropout=_SDPA_DROPOUT if dropout else 0.0, causal=not masked, mask=masked,
    )
    return without_enable_gqa(call) if _repeats_kv(config, masked) else call


def resolve_attention(config: TransformerConfig, batch_size: int, formats: ActivationFormats, attention: str,
                      device=None, dropout: bool = False, local: bool = False) -> tuple[str, SdpaKernel | None]:
    """``(attention, kernel)``: ``"sdpa"`` becomes the kernel SDPA runs on ``device`` (default the
    CPU; :func:`accounting.model.attention_kernels.choose_sdpa_kernel`), e.g. ``"sdpa-math"``; others stay.
    Soft-capped scores (Gemma 2) and attention sinks (gpt-oss) run eager whatever is asked: no SDPA
    kernel takes them, and ``transformers`` refuses SDPA for both (a flex-attention or hub kernel run
    is not what this counts). ``local``: the call of a sliding-window block (:func:`attention_call`).

    >>> from accounting.model.attention_kernels import AttentionDevice
    >>> config = TransformerConfig(layers=1, width=64, heads=4, kv_heads=2, sequence_length=16, vocabulary=10)
    >>> resolve_attention(config, 2, activation_formats("fp32"), "sdpa", AttentionDevice("cuda", (9, 0)))[0]
    'sdpa-math'
    >>> [resolve_attention(config, 2, activation_formats("fp32"), "sdpa", dropout=d)[0] for d in (False, True)]
    ['sdpa-flash', 'sdpa-math']
    """
    check_choice(attention, ATTENTIONS, "attention")
    if (config.attention_softcap or config.attention_sinks) and attention != "eager":
        return "eager", None
    if attention != "sdpa":
        return attention, None
    call = attention_call(config, batch_size, formats, dropout, local)
    kernel = choose_sdpa_kernel(call, "cpu" if device is None else device)
    return kernel.label, kernel


@dataclass(frozen=True)
class BlockParts:
    """What one block saves for backward, by where it lives when the block is split over ranks.

    ``norms``: the norms' own saves (inputs, fp32 copies, statistics, normalised tensors; the norms after
    each sublayer), along the sequence at the stream's width; ``inputs``: the norm outputs the attention's
    and the MLP's first linear layers save (their input, of the stream's width); ``attention``: Q, K, V, what
    the attention kernel keeps besides (s × s) tensors, the merged heads, the Q/K norms, all by head;
    ``scores``: the (s × s) attention weights eager attention and SDPA's math kernel keep, and the attention
    dropout's output and mask;
    ``latent``: multi-head latent attention's latents (norms and normed latents); ``mlp``: a dense MLP's or
    the shared experts' intermediates; ``experts``: the routed experts' and the router's; ``weight_copies``:
    autocast's copies of the block's matrices; ``dropout``: the masks of the dropouts on the residual stream.

    >>> config = TransformerConfig(layers=1, width=4, heads=2, sequence_length=3, vocabulary=10)
    >>> parts = block_activation_parts(config, 1, ActivationFormats(4, 4, 4), "eager", True, False)
    >>> parts.total, parts.norms, parts.inputs, parts.scores
    (888, 144, 96, 72)
    """

    norms: int
    inputs: int
    attention: int
    scores: int
    latent: int
    mlp: int
    experts: int
    weight_copies: int
    dropout: int

    @property
    def total(self) -> int:
        return (self.norms + self.inputs + self.attention + self.scores + self.latent + self.mlp + self.experts
                + self.weight_copies + self.dropout)


def block_activation_parts(
    config: TransformerConfig, batch: int, formats: ActivationFormats, attention: str, dense: bool, masked: bool,
    *, dropout: bool = False, gelu: str | None = None,
) -> BlockParts:
    """:class:`BlockParts` of one block of ``config`` on ``batch`` sequences, ``attention`` a resolved kind
    (``"eager"``, ``"sdpa-flash"``…: :func:`resolve_attention`), ``dense`` one of a mixture of experts'
    dense blocks, ``masked`` a sliding-window block passed its mask; ``dropout`` and ``gelu`` as for
    :func:`transformer_activations`, whose blocks are these parts' totals."""
    gelu = config.gelu if gelu is None else gelu
    s, h, mu = config.sequence_length, config.width, formats.matmul
    tokens = s * batch
    # Linear layers reading a norm's output (each saves its own copy under autocast): Q, K and V (one
    # fused matrix, or the two latents' down-projections), gate and up (fused, or GELU's one), the
    # router and the shared experts' gate and up (the experts' grouped matmul is not autocast).
    qkv_consumers = 1 if config.fused_projections or not _llama_style(config) else 2 if config.latent_attention else 3
    dense_mlp_consumers = 1 if config.mlp == "gelu" or config.fused_projections else 2
    expert_mlp_consumers = 1 + (dense_mlp_consumers if config.shared_experts else 0)
    mlp_consumers = expert_mlp_consumers if config.experts > 1 and not dense else dense_mlp_consumers
    norms = _block_norms(config, tokens, formats, qkv_consumers, mlp_consumers)
    # Whatever the placement, the attention and the MLP each read one tensor of the stream's width.
    inputs = _norm_input(config, tokens, formats, qkv_consumers) + _norm_input(config, tokens, formats, mlp_consumers)
    attention_bytes, scores = _attention_parts(config, batch, formats, attention, masked)
    attention_bytes += _qk_norms(config, tokens, formats)
    mlp = _mlp(config, tokens, formats, gelu, dense)
    experts = 0
    if config.experts > 1 and not dense:
        experts = _mlp(replace(config, shared_experts=0), tokens, formats, gelu)
    stream_dropout = 0
    if dropout:  # fused attention keeps its dropout's random state, not a mask of the scores
        weights = config.heads * s * s * batch
        scores += {"eager": mu * weights + _MASK * weights,
                   "sdpa-math": _math_width(formats) * weights + _MASK * weights}.get(attention, 0)
        stream_dropout = _MASK * 2 * tokens * h
    return BlockParts(norms - inputs, inputs, attention_bytes, scores, _latent_attention(config, tokens, formats),
                      mlp - experts, experts, weight_copy_bytes(config, formats, dense), stream_dropout)


@dataclass(frozen=True)
class OutsideParts:
    """What a forward saves outside its blocks, by part: ``norm`` (the final norm's own saves: input copy,
    statistics, normalised tensor), ``head_input`` (its output, which the output head saves), ``logits``
    (the loss's fp32 log-probabilities and a soft cap's tanh: one value per token and vocabulary entry),
    ``mtp`` (multi-token-prediction modules' own), ``unembedding_copy`` (autocast's copy of the output
    head), ``positions`` (rotary cos and sin tables), ``dropout`` (the embedding dropout's mask).

    >>> config = TransformerConfig(layers=1, width=4, heads=2, sequence_length=3, vocabulary=10)
    >>> outside_activation_parts(config, 1, ActivationFormats(4, 4, 4)).total  # 4*12 + 8*3 + 4*12 + 4*30
    240
    """

    norm: int
    head_input: int
    logits: int
    mtp: int
    unembedding_copy: int
    positions: int
    dropout: int

    @property
    def total(self) -> int:
        return (self.norm + self.head_input + self.logits + self.mtp + self.unembedding_copy + self.positions
                + self.dropout)


def outside_activation_parts(config: TransformerConfig, batch: int, formats: ActivationFormats,
                             dropout: bool = False) -> OutsideParts:
    """:class:`OutsideParts` of a forward of ``config`` on ``batch`` sequences (``dropout`` as for
    :func:`transformer_activations`, whose ``outside`` is their total with any sliding-window mask)."""
    s, h, mu, sigma = config.sequence_length, config.width, formats.matmul, formats.stream
    tokens = s * batch
    head_input = _norm_input(config, tokens, formats, 1)
    logits = _FP32 * tokens * config.vocabulary
    # Each multi-token-prediction module also saves the RMSNorms of the embedding and of the hidden state, the
    # 2h-wide concatenation its projection reads, and again the output head's norm and the loss's log-probabilities.
    mtp = config.mtp_modules * (
        2 * _rms_statistics(config, tokens * h, tokens, sigma) + mu * tokens * 2 * h
        + _norm(config, tokens, formats, 1) + _FP32 * tokens * config.vocabulary)
    if config.logit_softcap:  # tanh(logits / c) saves its output, in the logits' dtype
        logits += mu * tokens * config.vocabulary
    copy = mu * config.unembedding_parameter_count if formats.autocast else 0  # the unembedding's weight copy
    positions = 0
    if _llama_style(config) and not config.learned_positions:
        positions = 2 * sigma * s * (config.rope_head_width or config.head_width)  # rotary cos and sin tables
    return OutsideParts(_norm(config, tokens, formats, 1) - head_input, head_input, logits, mtp, copy, positions,
                        _MASK * tokens * h if dropout else 0)


def transformer_activations(
    config: TransformerConfig,
    batch_size: int,
    formats: ActivationFormats,
    *,
    attention: str = "eager",
    recompute: str = "none",
    dropout: bool = False,
    gelu: str | None = None,
    device=None,
) -> ActivationBytes:
    """What a forward pass of ``config`` on ``batch_size`` sequences saves, by part (see the module docstring).

    ``attention="sdpa"`` counts what the kernel :func:`resolve_attention` finds on ``device`` saves
    (``ActivationBytes.kernel`` says which and why); ``"sdpa-math"``, ``"sdpa-flash"``… name it.

    ``dropout`` (GPT-2-style blocks): the bool masks of CUDA's fused dropout after attention and
    after the MLP, the embedding dropout's mask and, with eager attention, the attention-dropout
    output and its mask (CUDA's fused attention keeps a random state instead; on the CPU,
    ``scaled_dot_product_attention`` with dropout falls back to the math path, which saves the
    scores); the paper's 34·sbh + 5·a·s²·b at μ = 2, f = 4h.
    """
    if not isinstance(config, TransformerConfig):
        raise AccountingTypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    batch = check_positive_size(batch_size, "batch_size")
    check_choice(recompute, RECOMPUTES, "recompute")
    gelu = config.gelu if gelu is None else check_choice(gelu, GELUS, "gelu")
    if not isinstance(dropout, bool):
        raise AccountingTypeError(f"dropout must be True or False, got {dropout!r}")
    asked = attention
    attention, kernel = resolve_attention(config, batch, formats, asked, device, dropout)
    s, h, sigma = config.sequence_length, config.width, formats.stream
    tokens = s * batch

    def block(kind: str, dense: bool, masked: bool) -> int:
        return block_activation_parts(config, batch, formats, kind, dense, masked, dropout=dropout, gelu=gelu).total

    local_attention, local_kernel = attention, None
    if config.sliding_layers:
        local_attention, local_kernel = resolve_attention(config, batch, formats, asked, device, dropout, local=True)
    dense_layers = config.dense_layers if config.experts > 1 else config.layers
    windowed = config.sliding_window is not None and config.sliding_window < s
    counts = {}  # (attention kind, dense, masked) -> blocks, the first block's first
    for index in range(config.layers):
        # Which blocks are local changes no sum; the first is local where any is (Gemma, gpt-oss), and
        # dense where any is (DeepSeek's first blocks).
        local = index < config.sliding_layers
        key = (local_attention if local else attention, index < dense_layers, local and windowed)
        counts[key] = counts.get(key, 0) + 1
    if config.mtp_modules:  # each multi-token-prediction module's block: the last block's kind, global attention
        key = (attention, config.experts == 1, False)
        counts[key] = counts.get(key, 0) + config.mtp_modules
    sizes = {key: block(*key) for key in counts}
    bottom = sizes[next(iter(counts))]
    blocks = sum(counts[key] * sizes[key] for key in counts)
    layer = max(sizes.values())
    outside = outside_activation_parts(config, batch, formats, dropout).total
    # A checkpointed block keeps its input; eager attention's additive mask (batch, 1, s, s) in the
    # weights' dtype is an input of every block, kept once for each kind of layer (full and sliding).
    checkpoint = sigma * tokens * h
    eager_kinds = {local for local in (False, True)
                   if (local_attention if local else attention) == "eager"
                   and (config.sliding_layers if local else config.layers - config.sliding_layers)}
    mask = formats.weights * batch * s * s * len(eager_kinds)
    if windowed and config.sliding_layers and local_attention in SDPA_ATTENTIONS:
        # SDPA saves the sliding-window mask it is passed: one tensor all the local blocks share.
        outside += formats.weights * batch * s * s
        mask += formats.weights * batch * s * s
    return ActivationBytes(config.layers + config.mtp_modules, recompute, layer, outside, checkpoint, mask, attention,
                           kernel, blocks, local_kernel, bottom)


# ---- the rest of a step: what is alive besides model states at each phase ----------------

_AUTOCAST_MLP_WORKING = 1.4
"""Under autocast: gradients of the MLP's intermediate tensors alive at once in the bottom block's backward,
in tensors of the MLP's width, fitted (measured 1.1-1.5 across GPT-2, Llama and Mixtral blocks) with every
gradient but the embedding's counted as alive and the block's whole recomputed activations less its weight
copies: the peak there falls later than the MLP's backward, where each weight's bf16 gradient is cast to fp32."""


def _bottom_block_is_dense(config: TransformerConfig) -> bool:
    """Whether the first block (the last one backward reaches) has a dense MLP: no experts, or dense first blocks."""
    return config.experts == 1 or config.dense_layers > 0


def _bottom_mlp_width(config: TransformerConfig, tokens: int, formats: ActivationFormats) -> int:
    """Bytes of one tensor of the bottom block's MLP width: μ·T·f, or with experts the routed tokens'
    μ·T·k·f (in the weights' dtype under autocast, which the grouped matmul is not lowered by)."""
    if _bottom_block_is_dense(config):
        return formats.matmul * tokens * config.dense_ffn_width
    element = formats.weights if formats.autocast else formats.matmul
    return element * tokens * config.experts_per_token * config.ffn_width


_ADAMW_TEMPORARIES = 2
"""Parameter-sized temporaries of a single-tensor (for-loop) Adam/AdamW update, the CPU default:
``exp_avg_sq.sqrt()`` and its quotient by the bias correction, alive together for the largest tensor."""

_ROOT_TEMPORARIES = 1
"""Parameter-sized temporaries of a for-loop Adagrad or RMSprop update: the square root of the state
(``state_sum.sqrt().add_(eps)``, ``square_avg.sqrt().add_(eps)``) the gradient is divided by."""


def largest_parameter(config: TransformerConfig) -> int:
    """Elements of the largest parameter tensor: the (un)embedding, or one layer's largest matrix
    (Mixtral's experts are one (E, 2f, h) gate-and-up tensor)."""
    h, f = config.width, config.ffn_width
    matrices = [config.vocabulary * h, h * config.attention_width, h * f]
    if config.experts > 1:
        matrices.append(config.experts * (config.mlp_matrices - 1) * f * h)
    return max(matrices)


def late_gradient_parameters(config: TransformerConfig) -> int:
    """Parameters whose gradients appear only at the very end of backward: the token embedding
    (unless tied, when the unembedding made its gradient first) and the position table."""
    token = 0 if config.tied_embeddings else config.vocabulary * config.width
    return token + (config.max_positions * config.width if config.learned_positions else 0)


def pending_block_gradient_parameters(config: TransformerConfig, formats: ActivationFormats | None = None) -> int:
    """Parameters of the bottom block whose gradients do not exist yet at the peak of its recomputed
    backward: the peak falls in its MLP's backward (the activation's gradients), after the MLP's output
    projection (and the norm after it, where there is one) made theirs and before the gate, up, router,
    attention and the norms before each made theirs. Under autocast (none: see
    :data:`_AUTOCAST_MLP_WORKING`) the peak falls later, past the fp32 casts of the weights' gradients.

    >>> from accounting import TransformerConfig
    >>> config = TransformerConfig(layers=2, width=4, heads=2, sequence_length=3, vocabulary=10)
    >>> pending_block_gradient_parameters(config) == config.layer_parameter_count - (4 * 16 + 4)
    True
    """
    if formats is not None and formats.autocast:
        return 0
    dense = _bottom_block_is_dense(config)
    block = config.dense_layer_parameter_count if dense and config.experts > 1 else config.layer_parameter_count
    f = config.dense_ffn_width if dense else config.ffn_width
    down = (config.width * f + (config.width if config.bias else 0)) * (1 if dense else config.experts)
    post = config.norm_parameter_count if config.norm_placement != "pre" else 0
    return block - down - post


def block_backward_bytes(
    config: TransformerConfig, batch_size: int, formats: ActivationFormats, activations: ActivationBytes,
    gelu: str | None = None,
) -> int:
    """Bytes besides model states and gradients at the peak of the bottom block's backward under
    recomputation: its checkpointed input, its recomputed activations, the incoming gradient and the
    MLP's working set, in the MLP's backward where the activation's gradients are made.

    There the output projection has freed its saved input (the MLP's last intermediate) and the gradient
    it returned, of the MLP's width, is alive beside the gradients of the activation's inputs: two more
    where the activation ends in a product (SwiGLU's gate and up; gpt-oss's; the tanh formula of an
    ``"unfused"`` GELU, 0.5·x times 1 + tanh(...)), one for a fused GELU (measured with the live-tensor
    tracker at the product's backward: three tensors of the MLP's width). The gradients alive then are in
    :func:`pending_block_gradient_parameters`. ``gelu``: as for :func:`transformer_activations`.

    >>> from accounting import TransformerConfig
    >>> config = TransformerConfig(layers=2, width=4, heads=2, sequence_length=3, vocabulary=10)
    >>> full = transformer_activations(config, 1, ActivationFormats(4, 4, 4), recompute="full")
    >>> block_backward_bytes(config, 1, ActivationFormats(4, 4, 4), full) - full.layer  # 48 + 48 - 192 + 2*192
    288
    """
    tokens = batch_size * config.sequence_length
    width = _bottom_mlp_width(config, tokens, formats)
    incoming = formats.stream * tokens * config.width
    bottom = activations.layer if activations.bottom is None else activations.bottom
    recomputed = bottom
    if formats.autocast:
        # The weight copies are left out and the output projection's input kept; see _AUTOCAST_MLP_WORKING.
        recomputed -= weight_copy_bytes(config, formats, config.experts > 1 and config.dense_layers > 0)
        routed = config.dense_ffn_width if _bottom_block_is_dense(config) \
            else config.experts_per_token * config.ffn_width
        working = round(_AUTOCAST_MLP_WORKING * formats.matmul * tokens * routed)
    else:
        recomputed -= width  # the output projection's input, freed by its backward
        fused_gelu = config.mlp == "gelu" and (config.gelu if gelu is None else gelu) == "fused"
        working = (2 if fused_gelu else 3) * width
    if config.norm_placement != "pre":  # the norm after the MLP is backpropagated, and freed, before the MLP
        recomputed -= _post_norm(config, tokens, formats)
    return activations.checkpoint + recomputed + incoming + working


def update_bytes(config: TransformerConfig, state_bytes: int, optimizer: str) -> int:
    """Temporaries of the optimizer step on top of the gradients (for-loop updates): Adam's and AdamW's two,
    Adagrad's and RMSprop's one, SGD's none, each the size of the largest parameter."""
    temporaries = {"adam": _ADAMW_TEMPORARIES, "adamw": _ADAMW_TEMPORARIES,
                   "adagrad": _ROOT_TEMPORARIES, "rmsprop": _ROOT_TEMPORARIES}.get(optimizer, 0)
    return temporaries * state_bytes * largest_parameter(config)


def largest_unit(config: TransformerConfig) -> int:
    """Parameters of the largest unit FSDP gathers when it wraps each block: a block, or the root
    (embeddings, final norm, an untied unembedding)."""
    root = config.parameter_count - config.blocks_parameter_count - config.mtp_parameter_count
    module = config.mtp_parameter_count // config.mtp_modules if config.mtp_modules else 0
    return max(config.layer_parameter_count, config.dense_layer_parameter_count, root, module)
