"""What each rank holds of a model's parameters, gradients and optimizer state under a parallel layout.

One rank of each pipeline stage stands for all of that stage's ranks (they hold alike shares). Its
parameters, by part, are the model's split the way Megatron-LM and torchtitan split it:

- **tensor parallelism** (T): Q, K, V, an MLP's gate and up are column-parallel (output features / T, their
  biases too; a fused ``qkv_proj`` or ``gate_up_proj`` is split by component, which holds the same number);
  the attention output and the MLP's down projection are row-parallel (input features / T, the bias whole);
  key/value heads fewer than T are replicated (each rank holds one whole head: T / K copies of each); norms,
  the router and the latents of multi-head latent attention (DeepSeek's q_a / kv_a projections and their
  norms) are whole on every rank; the token embedding and the output head are vocabulary-parallel (⌈V / T⌉
  rows on the most loaded rank, torch's ``Shard(0)`` chunking), a learned position table whole; attention
  sinks follow their heads (H / T);
- **pipeline parallelism** (P, V virtual stages): the blocks are cut into P·V chunks of consecutive blocks,
  as even as can be, the last L mod (P·V) chunks one block longer
  (:func:`accounting.model.parallel.activations.stage_blocks`; Megatron asks for an exact division, the same
  cut then); the rank of stage p holds chunks p, p + P, …, p + (V − 1)·P. Stage 0 holds the embedding,
  stage P − 1 the final norm, the output head and the multi-token-prediction modules; with P > 1 the last
  stage keeps its own copy of a tied embedding (the head) and, with MTP modules, of the embedding, as
  Megatron-LM does. DeepSeek's dense first blocks therefore fall on stage 0;
- **expert parallelism** (E, ETP inside each expert): a block's routed experts are divided E ways and each
  expert's matrices ETP ways (column/row, the down bias whole); shared experts and the dense first blocks'
  MLPs are dense MLPs under T.

Model states (:func:`stage_states`) are then those elements at the precision policy's bytes and the
optimizer's slots, as :func:`accounting.model.training_memory.training_memory` counts them (with one exception
under T > 1: torch's vocabulary-parallel embedding, ``RowwiseParallel`` with a ``Shard(1)`` output, gets its
gradient as a ``Replicate`` DTensor, the whole V × h on every rank; Megatron-LM's keeps its V / T rows:
``embedding_gradients``), divided by ZeRO's table (:func:`accounting.model.sharding.sharded_model_states`)
over ``layout.sharding_degree`` ranks for the dense elements and ``layout.expert_sharding_degree`` for the
routed experts' (one flat buffer when the two degrees are equal, so that an all-1 layout is today's
single-device count exactly).

:func:`megatron_weight_and_optimizer_bytes` is Megatron-LM's own estimate, reproduced; how it differs from
this count is in its docstring.

>>> from accounting.model.config import TransformerConfig
>>> from accounting.model.parallel.layout import ParallelLayout
>>> config = TransformerConfig(layers=4, width=64, heads=4, sequence_length=32, vocabulary=100, bias=False,
...     norm="rmsnorm", mlp="swiglu", ffn_width=128, tied_embeddings=False, learned_positions=False)
>>> first, last = stage_parameters(config, ParallelLayout(devices=4, tensor=2, pipeline=2))
>>> first.layers, first.parts["embedding"], last.parts["output head"], last.parts["final norm"]
((0, 1), 3200, 3200, 64)
>>> norms = 4 * 2 * 64 + 64  # two a block and the final one: whole on every rank
>>> first.total + last.total == (config.parameter_count - norms) // 2 + norms
True
"""

import math
from dataclasses import dataclass
from fractions import Fraction

from accounting._checks import check_choice, check_size
from accounting.errors import AccountingError, AccountingTypeError
from accounting.model.activations import precision_policy
from accounting.model.config import TransformerConfig
from accounting.model.parallel.activations import stage_blocks
from accounting.model.parallel.layout import ParallelLayout, check_layout_for_model
from accounting.model.sharding import sharded_model_states
from accounting.model.training_memory import optimizer_state_slots

EMBEDDING_GRADIENTS = ("replicated", "vocabulary-parallel")
"""The token embedding's gradient under tensor parallelism: whole on every rank (torch's embedding backward, the
default), or its V / T rows (Megatron-LM's vocabulary-parallel embedding)."""

PARTS = ("embedding", "blocks", "experts", "final norm", "output head", "mtp")
"""The parts of a rank's parameters, in the order a pipeline meets them (``"experts"``: the routed experts of
its blocks and MTP modules; ``"mtp"``: the rest of the multi-token-prediction modules)."""


def _ceil(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def check_config_and_layout(config, layout) -> None:
    """Raise naming the value when ``config`` is not a :class:`TransformerConfig`, ``layout`` not a
    :class:`ParallelLayout`, or the layout cannot divide the model (``check_layout_for_model``, and the dense
    first blocks', shared experts' and each expert's widths: T, T and ETP ways)."""
    if not isinstance(config, TransformerConfig):
        raise AccountingTypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    if not isinstance(layout, ParallelLayout):
        raise AccountingTypeError(f"layout must be a ParallelLayout, got {type(layout).__name__}")
    check_layout_for_model(config, layout)
    if config.experts > 1:
        widths = [("dense MLP width", config.dense_ffn_width, layout.tensor, "tensor")] if config.dense_layers else []
        if config.shared_experts:
            widths.append(("shared experts' width", config.shared_experts * config.ffn_width, layout.tensor, "tensor"))
        widths.append(("expert MLP width", config.ffn_width, layout.expert_tensor, "expert_tensor"))
        for what, width, ways, name in widths:
            if width % ways:
                raise AccountingError(f"{name} {ways} must divide the {what} {width}")


# ---- one rank's share of each piece ---------------------------------------------------


class _Shares:
    """Elements one rank holds of each piece of ``config`` under ``layout``'s T, E and ETP."""

    def __init__(self, config: TransformerConfig, layout: ParallelLayout):
        self.config, self.t = config, layout.tensor
        self.local_experts = config.experts // layout.expert
        self.etp = layout.expert_tensor

    def mlp(self, ffn_width: int, ways: int) -> int:
        """A dense MLP of ``ffn_width`` under ``ways``-way column (gate, up) / row (down) parallelism."""
        c = self.config
        biases = (c.mlp_matrices - 1) * ffn_width // ways + c.width if c.bias else 0
        return c.mlp_matrices * c.width * ffn_width // ways + biases

    def down(self, ffn_width: int, ways: int) -> int:
        """The row-parallel down projection of an MLP of ``ffn_width``, with its whole bias."""
        return self.config.width * ffn_width // ways + (self.config.width if self.config.bias else 0)

    @property
    def kv_heads(self) -> int:
        """Key/value heads one rank holds: K / T, or one whole head when K < T (replicated)."""
        return max(self.config.kv_heads // self.t, 1)

    def attention(self) -> int:
        c, t = self.config, self.t
        h, heads, d = c.width, c.heads, c.head_width
        if c.latent_attention:
            nope = d - c.rope_head_width
            query = h * heads * d // t if c.q_lora_rank is None else \
                h * c.q_lora_rank + c.q_lora_rank + c.q_lora_rank * heads * d // t  # q_a and its norm whole
            keys_values = h * (c.kv_lora_rank + c.rope_head_width) + c.kv_lora_rank \
                + c.kv_lora_rank * heads * (nope + c.value_head_width) // t  # kv_a and its norm whole
            projections = query + keys_values
            kv_features = c.kv_heads * d // t
        else:
            kv_features = self.kv_heads * d
            q_features = c.attention_width // t
            projections = h * q_features + 2 * h * kv_features
            if c.qkv_bias:
                projections += q_features + 2 * kv_features
        output = c.value_width // t * h if c.latent_attention else c.attention_width // t * h
        output += h if c.bias else 0
        qk_norm = {"none": 0, "head": 2 * d, "projection": c.attention_width // t + kv_features}[c.qk_norm]
        sinks = heads // t if c.attention_sinks else 0
        return projections + output + qk_norm + sinks

    def norms(self) -> int:
        return self.config.norms_per_layer * self.config.norm_parameter_count

    def router(self) -> int:
        return self.config.router_parameter_count

    def expert(self) -> int:
        """One routed expert's share under ETP."""
        return self.mlp(self.config.ffn_width, self.etp)

    def block(self, index: int) -> tuple[int, int]:
        """(dense, routed-expert) elements of block ``index`` (``index`` ≥ layers: an MTP module's block)."""
        c = self.config
        common = self.attention() + self.norms()
        if c.experts == 1:
            return common + self.mlp(c.ffn_width, self.t), 0
        if index < c.dense_layers:
            return common + self.mlp(c.dense_ffn_width, self.t), 0
        shared = self.mlp(c.shared_experts * c.ffn_width, self.t) if c.shared_experts else 0
        return common + self.router() + shared, self.local_experts * self.expert()

    def bottom_down(self, index: int) -> int:
        """Elements of block ``index``'s down projections (every local expert's with experts)."""
        c = self.config
        if c.experts == 1:
            return self.down(c.ffn_width, self.t)
        if index < c.dense_layers:
            return self.down(c.dense_ffn_width, self.t)
        return self.local_experts * self.down(c.ffn_width, self.etp)

    def mtp_module(self) -> tuple[int, int]:
        """(dense, routed-expert) elements of one multi-token-prediction module: its 2h → h projection
        (column-parallel), its two norms and a block of the last block's kind."""
        c = self.config
        dense, experts = self.block(c.layers)
        return dense + 2 * c.width * c.width // self.t + 2 * c.norm_parameter_count, experts

    @property
    def vocabulary_rows(self) -> int:
        return _ceil(self.config.vocabulary, self.t)


@dataclass(frozen=True)
class StageParameters:
    """Parameter elements the rank of one pipeline stage holds (every rank of the stage holds as many).

    ``dense``: everything but the routed experts (tensor-parallel pieces divided, replicated ones whole);
    ``experts``: the routed experts' (divided E and ETP ways); ``parts``: the same elements by
    :data:`PARTS` (every name present, 0 where the stage holds none); ``layers``: the block indices held.

    What the rest of a step needs to know of them: ``units``, the (dense, experts) elements of each unit
    FSDP/ZeRO-3 gathers at once (each block, each MTP module, and the rest as the stage's root);
    ``largest_tensor``, the elements of the largest tensor held (what the optimizer's temporaries are sized
    by, as :func:`accounting.model.activations.largest_parameter` counts for one device); ``late_gradients``,
    the elements whose gradients appear only at the very end of the stage's backward (stage 0's embedding
    when no output head on the same rank made its gradient first;
    :func:`~accounting.model.activations.late_gradient_parameters`);
    ``pending_gradients``, the elements of the stage's bottom block whose gradients do not exist yet at
    the peak of its recomputed backward (:func:`~accounting.model.activations.pending_block_gradient_parameters`,
    outside autocast); ``block_attention``, the elements of one block's attention and the norm before it
    (the gradients a block's backward makes last).
    """

    stage: int
    dense: int
    experts: int
    parts: dict
    layers: tuple
    units: tuple = ()
    largest_tensor: int = 0
    late_gradients: int = 0
    pending_gradients: int = 0
    block_attention: int = 0

    @property
    def total(self) -> int:
        return self.dense + self.experts


def stage_parameters(config: TransformerConfig, layout: ParallelLayout) -> tuple[StageParameters, ...]:
    """Parameter elements the rank of each pipeline stage holds, by part (see the module docstring).

    >>> from accounting.model.config import TransformerConfig
    >>> from accounting.model.parallel.layout import ParallelLayout
    >>> moe = TransformerConfig(layers=2, width=16, heads=2, sequence_length=8, vocabulary=32, bias=False,
    ...     norm="rmsnorm", mlp="swiglu", ffn_width=8, experts=8, experts_per_token=2, learned_positions=False)
    >>> (rank,) = stage_parameters(moe, ParallelLayout(devices=4, expert=4))
    >>> rank.experts == 2 * (8 // 4) * 3 * 16 * 8, rank.total == moe.parameter_count - rank.experts * 3
    (True, True)
    """
    check_config_and_layout(config, layout)
    shares = _Shares(config, layout)
    c, p_last = config, layout.pipeline - 1
    token = shares.vocabulary_rows * c.width
    positions = c.max_positions * c.width if c.learned_positions else 0
    stages = []
    for stage, layers in enumerate(stage_blocks(config.layers, layout)):
        parts = dict.fromkeys(PARTS, 0)
        blocks = [shares.block(index) for index in layers]
        parts["blocks"] = sum(dense for dense, _ in blocks)
        parts["experts"] = sum(experts for _, experts in blocks)
        last = stage == p_last
        if stage == 0:
            parts["embedding"] = token + positions
        if last:
            parts["final norm"] = c.norm_parameter_count
            parts["output head"] = 0 if c.tied_embeddings and layout.pipeline == 1 else token
            if c.mtp_modules and layout.pipeline > 1:  # the MTP modules' own copy of the embedding
                parts["embedding"] = (0 if c.tied_embeddings else token) + positions
            mtp = [shares.mtp_module()] * c.mtp_modules
            parts["mtp"] = sum(dense for dense, _ in mtp)
            parts["experts"] += sum(experts for _, experts in mtp)
        else:
            mtp = []
        experts = parts["experts"]
        dense = sum(parts.values()) - experts
        root = dense - parts["blocks"] - parts["mtp"]
        units = (*blocks, *mtp, (root, 0))
        holds_vocabulary = parts["embedding"] > positions or parts["output head"] > 0
        tensors = [token if holds_vocabulary else 0, c.width * c.attention_width // shares.t,
                   c.width * c.ffn_width // shares.t]
        if experts:
            tensors.append(shares.local_experts * (c.mlp_matrices - 1) * c.ffn_width // shares.etp * c.width)
        late = 0
        if stage == 0:
            late = positions + (0 if c.tied_embeddings and layout.pipeline == 1 else token)
        bottom = layers[0]
        post_norm = c.norm_parameter_count if c.norm_placement != "pre" else 0
        pending = sum(blocks[0]) - shares.bottom_down(bottom) - post_norm
        attention = shares.attention() + c.norms_per_layer // 2 * c.norm_parameter_count
        stages.append(StageParameters(stage, dense, experts, parts, layers, units, max(tensors), late, pending,
                                      attention))
    return tuple(stages)


# ---- model states -------------------------------------------------------------------------


@dataclass(frozen=True)
class StageStates:
    """Bytes of model states the rank of one pipeline stage holds: ``parameters`` (the weights the forward
    reads), ``gradients``, ``master_weights`` (a higher-precision copy, 0 without one) and
    ``optimizer_state``; ``optimizer`` is the last two together, as the ZeRO paper counts them."""

    stage: int
    parameters: int
    gradients: int
    master_weights: int
    optimizer_state: int

    @property
    def optimizer(self) -> int:
        return self.master_weights + self.optimizer_state

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer


def _groups(stage: StageParameters, layout: ParallelLayout) -> list[tuple[int, int]]:
    """(elements, ranks they are divided over): the dense and routed-expert elements, one buffer when the
    two degrees are the same."""
    if layout.sharding_degree == layout.expert_sharding_degree:
        return [(stage.total, layout.sharding_degree)]
    return [(stage.dense, layout.sharding_degree), (stage.experts, layout.expert_sharding_degree)]


def stage_states(config: TransformerConfig, layout: ParallelLayout, precision="bf16-mixed", optimizer: str = "adamw",
                 *, embedding_gradients: str = "replicated", **optimizer_settings) -> tuple[StageStates, ...]:
    """Bytes of parameters, gradients, master weights and optimizer state each stage's rank holds.

    ``precision`` and ``optimizer`` (with its memory settings) as for
    :func:`accounting.model.training_memory.training_memory`; the layout's ``sharding`` divides the
    dense states over ``layout.sharding_degree`` ranks and the routed experts' over
    ``layout.expert_sharding_degree``, each a flat buffer padded to a multiple of its ranks.
    ``embedding_gradients`` (:data:`EMBEDDING_GRADIENTS`): with T > 1, a stage holding the token embedding
    holds its whole V × h gradient (``"replicated"``: torch's ``RowwiseParallel`` embedding, whose backward
    makes a ``Replicate`` gradient, divided by the sharding as the other gradients are) or its ⌈V / T⌉ rows
    (``"vocabulary-parallel"``: Megatron-LM).

    >>> from accounting.model.config import TransformerConfig
    >>> from accounting.model.parallel.layout import ParallelLayout
    >>> config = TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=128)
    >>> (one,) = stage_states(config, ParallelLayout(devices=8, sharding="zero1"))
    >>> one.parameters == 2 * config.parameter_count, one.optimizer == 12 * config.parameter_count // 8
    (True, True)
    """
    check_choice(embedding_gradients, EMBEDDING_GRADIENTS, "embedding_gradients")
    policy = precision_policy(precision)
    slots = optimizer_state_slots(optimizer, **optimizer_settings)
    positions = config.max_positions * config.width if config.learned_positions else 0
    whole_rows = layout.tensor > 1 and embedding_gradients == "replicated"
    states = []
    for stage in stage_parameters(config, layout):
        totals = dict.fromkeys(("parameters", "gradients", "master", "optimizer"), 0)
        for elements, ranks in _groups(stage, layout):
            if not elements:
                continue
            share = sharded_model_states(
                elements * policy.bytes_of("weights"), elements * policy.bytes_of("gradients"),
                elements * slots * policy.bytes_of("optimizer_state"), layout.sharding_stage, ranks,
                parameter_count=elements)
            master = sharded_model_states(0, 0, elements * policy.bytes_of("master_weights"), layout.sharding_stage,
                                          ranks, parameter_count=elements).optimizer
            totals["parameters"] += share.parameters
            totals["gradients"] += share.gradients
            totals["master"] += master
            totals["optimizer"] += share.optimizer
        if whole_rows and stage.parts["embedding"] > positions:  # the rest of V × h, beside the rank's rows
            extra = (config.vocabulary - _Shares(config, layout).vocabulary_rows) * config.width
            totals["gradients"] += sharded_model_states(0, extra * policy.bytes_of("gradients"), 0,
                                                        layout.sharding_stage, layout.sharding_degree,
                                                        parameter_count=extra).gradients
        states.append(StageStates(stage.stage, totals["parameters"], totals["gradients"], totals["master"],
                                  totals["optimizer"]))
    return tuple(states)


# ---- Megatron-LM's estimate ------------------------------------------------------------------


MEGATRON_VOCABULARY_MULTIPLE = 128
"""Megatron-LM's ``--make-vocab-size-divisible-by`` default: the vocabulary is padded to a multiple of this × T."""


def megatron_padded_vocabulary(vocabulary: int, tensor: int, multiple: int = MEGATRON_VOCABULARY_MULTIPLE) -> int:
    """The vocabulary Megatron-LM builds: padded to a multiple of ``multiple`` × T (``_vocab_size_with_padding``).

    >>> megatron_padded_vocabulary(128256, 8), megatron_padded_vocabulary(50257, 1)
    (129024, 50304)
    """
    step = check_size(multiple, "multiple") * tensor
    if step <= 0:
        raise AccountingError(f"the vocabulary multiple must be positive, got {multiple!r}")
    return _ceil(vocabulary, step) * step


def megatron_parameters_on_most_loaded_shard(config: TransformerConfig, layout: ParallelLayout, *,
                                             vocabulary_multiple: int = MEGATRON_VOCABULARY_MULTIPLE) -> Fraction:
    """The parameters Megatron-LM's estimate puts on its most loaded model shard, exactly (a fraction: its
    divisions are real ones). See :func:`megatron_weight_and_optimizer_bytes`."""
    check_config_and_layout(config, layout)
    c = config
    h = c.width
    norm_size = 2 if c.norm == "layernorm" else 1  # Megatron's: RMSNorm a weight, LayerNorm a weight and a bias
    gated = Fraction(3, 2) if c.mlp != "gelu" else Fraction(1)
    if c.latent_attention:
        nope, rope = c.head_width - c.rope_head_width, c.rope_head_width
        if c.q_lora_rank is None:
            query = h * c.heads * (nope + rope)
        else:
            query = c.q_lora_rank * (h + c.heads * (nope + rope) + norm_size)
        attention = Fraction(query + c.kv_lora_rank * (h + c.heads * (nope + c.value_head_width) + norm_size)
                             + h * rope + c.heads * c.value_head_width * h)
    else:
        attention = 2 * h * h * ((1 + Fraction(c.kv_heads, c.heads)) * Fraction(c.head_width * c.heads, h))
    moe = c.experts > 1
    dense_ffn = c.dense_ffn_width if moe else c.ffn_width
    dense_layer = 2 * h * (dense_ffn * gated + norm_size) + attention
    shared = c.shared_experts * c.ffn_width
    moe_layer = 2 * h * (c.ffn_width * c.experts * gated + shared * gated + norm_size) + attention
    moe_layers = c.layers - c.dense_layers if moe else 0
    dense_layers = c.layers - moe_layers
    vocabulary = megatron_padded_vocabulary(c.vocabulary, layout.tensor, vocabulary_multiple)
    embedding = h * vocabulary
    block = dense_layer * dense_layers + moe_layer * moe_layers + norm_size * h
    mtp = c.mtp_modules * (moe_layer if moe and moe_layers else dense_layer)
    shard = (block / layout.pipeline + mtp + embedding) / layout.tensor
    if not c.tied_embeddings and layout.pipeline == 1:
        shard += Fraction(embedding, layout.tensor)
    return shard


def megatron_weight_and_optimizer_bytes(config: TransformerConfig, layout: ParallelLayout, *,
                                        distributed_optimizer: bool = True,
                                        vocabulary_multiple: int = MEGATRON_VOCABULARY_MULTIPLE) -> int:
    """Megatron-LM's estimate of the weight and optimizer bytes on its most loaded rank, reproduced.

    Source: NVIDIA/Megatron-LM, ``megatron/training/theoretical_memory_usage.py``,
    ``compute_weight_and_optimizer_memory`` (read at commit 00caa53af309): the parameters of the most loaded
    shard, (transformer block / PP + MTP block + embedding) / TP (+ another embedding / TP when untied and
    PP = 1), times 18 bytes, or 6 + 12 / DP with the distributed optimizer (bf16 weights 2, fp32 gradients 4,
    fp32 master weights and Adam's two moments 12 divided over DP). Its counts: a layer is
    2h·(f·(3/2 for SwiGLU) + norm) + attention, attention 2h²·(1 + K/H)·(H·d/h) (MLA: its own sum),
    an MoE layer's MLP every expert's (E·f) and the shared experts', ``norm`` 1 for RMSNorm and 2 for
    LayerNorm, the final norm inside the block, the vocabulary padded to a multiple of 128 × TP
    (``vocabulary_multiple``; 1 for the config's own). The value is the formula's exact rational, rounded to a
    whole byte (Megatron prints its float in MB).

    How this package's per-rank count (:func:`stage_parameters`, :func:`stage_states`) differs, and why::

        Megatron's estimate                       this package
        norms divided by TP                       norms whole on every rank (they are replicated)
        final norm / PP on every stage            final norm on the last stage only
        biases, router, Q/K norms, sinks,         counted where the model has them
          learned positions: not counted
        routed experts divided by TP only         divided by EP (and ETP), not by TP (Megatron-core's
                                                  expert layout; the estimate ignores EP)
        K/V heads fewer than TP: divided          replicated (one whole head per rank)
        vocabulary padded to 128·TP               the config's vocabulary, ⌈V/T⌉ rows per rank
        one embedding on the loaded shard         stage 0's embedding; the last stage's head (and a
                                                  tied copy) counted on the last stage
        fp32 gradients: 6 + 12/DP                 the policy's gradients (bf16-mixed: 2 bytes), so
                                                  ZeRO-1 is 4 + 12/DP; the dense states over DP·CP
        MTP layer: a block only                   its projection and two norms too

    For a dense RMSNorm model without biases whose vocabulary divides 128·T, the stage-0 rank's elements
    here are Megatron's plus (T − 1)/T of the norms it holds less the final norm's 1/(P·T) share
    (P > 1); the tests check that relation.

    >>> from accounting.model.config import TransformerConfig
    >>> from accounting.model.parallel.layout import ParallelLayout
    >>> gpt3 = TransformerConfig(layers=96, width=12288, heads=96, sequence_length=2048, vocabulary=50257)
    >>> round(megatron_weight_and_optimizer_bytes(gpt3, ParallelLayout(devices=1024, tensor=8, pipeline=16)) / 2**30, 2)
    10.04
    """
    if not isinstance(distributed_optimizer, bool):
        raise AccountingTypeError(f"distributed_optimizer must be True or False, got {distributed_optimizer!r}")
    shard = megatron_parameters_on_most_loaded_shard(config, layout, vocabulary_multiple=vocabulary_multiple)
    per_parameter = Fraction(18) if not distributed_optimizer else 6 + Fraction(12, layout.data)
    return math.floor(shard * per_parameter + Fraction(1, 2))
