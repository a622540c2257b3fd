"""Activations per rank of a parallel layout: what each pipeline stage's ranks save, hold in flight and buffer.

A rank's share of one block, from the block's parts (:func:`accounting.model.activations.block_activation_parts`),
with T = ``layout.tensor``, C = ``layout.context``, s = the sequence:

- context parallelism: every rank holds s / C tokens of each sequence (ring attention: its local Q, K and V,
  the output and log-sum-exp of its queries); the attention must be a fused kernel (flash, memory-efficient,
  cuDNN): no eager or math form of ring attention exists;
- tensor parallelism: the attention's parts by head (H / T query heads; K / T key/value heads, or one
  where K < T: replicated), the MLP's by width (f / T), the vocabulary's by T (the loss's fp32
  log-probabilities, vocabulary-parallel); multi-head latent attention's latents replicated;
- sequence parallelism (on by default with T > 1): the norms, the residual stream and its dropout masks
  divided T ways along the sequence. What the first linear layers of the attention and the MLP save of
  their input depends on the implementation (``linear_inputs``):

  - ``"gathered"`` (the default): torch's ``parallelize_module`` with torchtitan's plan
    (``SequenceParallel`` norms, ``PrepareModuleInput`` Shard(1) → Replicate, ``ColwiseParallel``) saves the
    all-gathered input, the whole local sequence (s / C tokens of width h), once for Q, K and V and once
    for gate and up: measured on a fake process group (tests/test_parallel_activations.py);
  - ``"sharded"``: Megatron-LM saves the sequence-sharded input and gathers it again in backward
    (Korthikanti et al. 2022, section 4.2.2): s / (C·T) tokens, plus an all-gather buffer.

- expert parallelism (E = ``layout.expert``): balanced routing, each rank sends its tokens' k routed rows out
  and gets as many back ("expert dispatch" and "expert combine" buffers, k·tokens·h each); the experts it
  holds process as many rows as it sent, so their internals are as on one device for the rank's tokens
  (s / (C·T) with sequence parallelism) at the experts' width f / ETP. The two buffers live only within an
  MoE layer's forward (and its backward's all-to-alls): the rows the experts keep are saved activations, the
  rest is freed before the layer returns. They are counted in their own phase, ``exchange``: in the
  forward's last MoE layer, beside the activations saved by then (``exchange_saved``: all but what the
  micro-batch saves after it, the final norm, head and loss on the last stage), not at the start of
  backward;
- recomputation: ``"full"`` keeps each block's input (the residual stream: T- and C-divided with SP and CP)
  and recomputes one block at a time in backward; ``"selective"`` by ``selective`` policy:
  ``"attention-core"`` (Megatron's: the (s × s) attention weights, softmax and attention dropout recomputed,
  nothing else; a fused kernel keeps no s² tensor, so it saves nothing there) or ``"matmul-outputs"``
  (torchtitan's op-level selective checkpointing: a block keeps its input and the outputs of ``aten.mm``,
  the fused SDPA kernels and the sequence-parallel reduce-scatters; every second ``mm`` of a block, in
  forward order, is recomputed, and so is everything else; linear layers with a bias run ``addmm``,
  which is not on the list).

Pipeline: the blocks divided over P·V chunks (:func:`chunk_blocks`), rank p holding chunks p, p + P, …;
the embedding on stage 0; the final norm, output head, loss and MTP modules on stage P − 1. Each micro-batch in
flight also keeps, as ``torch.distributed.pipelining`` keeps it to run the backward from, the stage's output
(Megatron-LM frees the output's data once sent: one residual-stream tensor less per micro-batch); its input is
one of the stage's receive buffers (``"pipeline receive"``: torch makes one for each of the m micro-batches
before the step; Megatron-LM receives into a new tensor and keeps only those in flight). torch's schedule also
keeps every micro-batch's output, the logits, on the last stage (``PipelineStage.output_chunks``) to return them
from ``step()``: with ``keep_outputs=True`` (torch's default, ``step(return_outputs=True)``) a ``"pipeline
outputs"`` buffer of m micro-batches' logits (b × s / C × V / T each, in the matmuls' format), alive through the
step's backward; ``keep_outputs=False`` as ``step(return_outputs=False)`` (torchtitan) or Megatron-LM. Micro-batches
in flight at the start of backward (:func:`micro_batches_in_flight`): GPipe m; 1F1B min(P − p, m); interleaved
1F1B as Megatron-LM and torch schedule it, (2(P − p − 1) + (V − 1)·P + 1) model chunks of one micro-batch
(at most m·V), i.e. P·(1 + (P − 1)/(P·V)) micro-batches' worth of the rank's blocks on stage 0 (Korthikanti
et al. 2022, section 4.2.3).

>>> from accounting.model.config import TransformerConfig
>>> from accounting.model.parallel.layout import ParallelLayout
>>> config = TransformerConfig(layers=4, width=64, heads=4, sequence_length=32, vocabulary=128, norm="rmsnorm",
...                            mlp="swiglu", learned_positions=False, bias=False)
>>> stages = stage_activations(config, 2, ParallelLayout(devices=4, tensor=2, pipeline=2), micro_batches=4)
>>> [(stage.blocks, stage.in_flight) for stage in stages]
[(2, 2.0), (2, 1.0)]
"""

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction

from accounting._checks import check_choice, check_positive_size
from accounting.errors import AccountingError, AccountingTypeError
from accounting.model.activations import (
    SDPA_ATTENTIONS, ActivationBytes, ActivationFormats, activation_formats, block_activation_parts,
    block_backward_bytes, outside_activation_parts, resolve_attention, weight_copy_bytes,
)
from accounting.model.config import TransformerConfig
from accounting.model.parallel.layout import ParallelLayout, check_layout_for_model

RECOMPUTE_POLICIES = ("none", "selective", "full")
"""``none``: every block saves what it saves; ``selective``: by :data:`SELECTIVE_POLICIES`; ``full``: each block
keeps its input and is recomputed in backward."""
SELECTIVE_POLICIES = ("attention-core", "matmul-outputs")
"""Megatron-LM's selective recomputation (the attention core); torchtitan's op-level selective checkpointing."""
LINEAR_INPUTS = ("gathered", "sharded")
"""With sequence parallelism, what the first linear layers save of their all-gathered input: the gathered
tensor (torch's ``parallelize_module``), or the sequence-sharded one, gathered again in backward (Megatron-LM)."""
FUSED_ATTENTIONS = tuple(f"sdpa-{kernel}" for kernel in ("flash", "efficient", "cudnn"))
"""Attention kernels ring attention (context parallelism) runs: they keep one log-sum-exp per query."""

_FP32 = 4


@dataclass(frozen=True)
class StageActivations:
    """Activations on one rank of pipeline stage ``stage`` (every rank of a stage is alike).

    ``blocks``: the blocks it holds (all its model chunks); ``per_micro_batch``: bytes one micro-batch's
    forward saves on it (its blocks, and what it holds of the embedding, final norm, head and loss);
    ``in_flight``: micro-batches alive at the start of backward under the schedule, in units of one
    micro-batch over the rank's blocks; ``saved``: ``in_flight`` × ``per_micro_batch`` (interleaved, the
    embedding's and the head's parts, which live in one chunk, are counted at that average too); ``transient``: alive
    beside ``saved`` as backward starts (the last stage's loss gradients, vocabulary-parallel);
    ``backward``: with recomputation, bytes besides gradients at the peak of its bottom block's recomputed
    backward: the other micro-batches' saved activations and that block's working set; ``exchange``: the
    buffers of an MoE layer's all-to-alls, ``"expert dispatch"`` and ``"expert combine"`` (the rank's k
    routed rows of each token, sent and received back), alive only inside the layer, beside
    ``exchange_saved`` bytes of saved activations (the forward's last MoE layer); ``buffers``:
    communication buffers alive through the step, by name: ``"tensor all-gather"`` (``linear_inputs="sharded"``:
    a linear layer's input gathered again in backward), ``"context k/v blocks"`` (two blocks of the local
    chunk's K and V: the one in use and the one being received), ``"pipeline receive"`` (torch's
    ``PipelineStage`` receives every micro-batch's activations, and their gradients, into buffers of its own
    made before the step: m residual-stream tensors from each neighbouring stage), ``"pipeline send"`` (the
    gradient of the stage's input, sent back; the output sent on is kept with its micro-batch), ``"pipeline
    outputs"`` (the last stage: every micro-batch's logits, kept by torch's schedule to return from ``step()``).
    """

    stage: int
    blocks: int
    per_micro_batch: int
    in_flight: float
    saved: int
    transient: int
    backward: int
    buffers: dict = field(default_factory=dict)
    exchange: dict = field(default_factory=dict)
    exchange_saved: int = 0


def chunk_blocks(layers: int, chunks: int) -> tuple[range, ...]:
    """The blocks of each of ``chunks`` model chunks, in order: ``layers`` // ``chunks`` each, the remainder one
    more to each of the last chunks (the first stage already holds the most micro-batches in flight).

    >>> chunk_blocks(10, 4)
    (range(0, 2), range(2, 4), range(4, 7), range(7, 10))
    """
    layers, chunks = check_positive_size(layers, "layers"), check_positive_size(chunks, "chunks")
    if chunks > layers:
        raise AccountingError(f"{chunks} model chunks is more than the {layers} blocks")
    base, extra = divmod(layers, chunks)
    sizes = [base + (index >= chunks - extra) for index in range(chunks)]
    starts = [sum(sizes[:index]) for index in range(chunks)]
    return tuple(range(start, start + size) for start, size in zip(starts, sizes))


def stage_blocks(layers: int, layout: ParallelLayout) -> tuple[tuple[int, ...], ...]:
    """The block indices each pipeline rank holds: chunks p, p + P, … of :func:`chunk_blocks` over P·V chunks.

    >>> from accounting.model.parallel.layout import ParallelLayout
    >>> stage_blocks(8, ParallelLayout(devices=2, pipeline=2, schedule="interleaved-1f1b", virtual_stages=2))
    ((0, 1, 4, 5), (2, 3, 6, 7))
    """
    chunks = chunk_blocks(layers, layout.stages)
    return tuple(tuple(index for chunk in chunks[rank::layout.pipeline] for index in chunk)
                 for rank in range(layout.pipeline))


def micro_batches_in_flight(layout: ParallelLayout, stage: int, micro_batches: int) -> Fraction:
    """Micro-batches whose activations stage ``stage`` holds at the start of a backward, in units of one
    micro-batch over all the rank's blocks.

    GPipe: every forward first, m. 1F1B (PipeDream-flush): P − p − 1 warm-up forwards and one more before
    the first backward, then one forward per backward: min(P − p, m). Interleaved 1F1B (Megatron-LM's
    ``forward_backward_pipelining_with_interleaving``, torch's ``ScheduleInterleaved1F1B``): 2(P − p − 1) +
    (V − 1)·P warm-up forwards of a chunk (at most all m·V; older Megatron-LM warmed up all of them whenever
    m = P), one more before the first backward, each 1/V of the rank's blocks: on stage 0,
    (P·V + P − 1)/V = P·(1 + (P − 1)/(P·V)).

    >>> layout = ParallelLayout(devices=4, pipeline=4, schedule="interleaved-1f1b", virtual_stages=2)
    >>> [str(micro_batches_in_flight(layout, stage, 8)) for stage in range(4)]
    ['11/2', '9/2', '7/2', '5/2']
    """
    m = check_positive_size(micro_batches, "micro_batches")
    pipeline, stage = layout.pipeline, check_positive_size(stage + 1, "stage + 1") - 1
    if stage >= pipeline:
        raise AccountingError(f"stage {stage} is not one of the {pipeline} pipeline stages")
    if layout.schedule == "gpipe":
        return Fraction(m)
    if layout.schedule == "1f1b":
        return Fraction(min(pipeline - stage, m))
    chunks = layout.virtual_stages
    total = m * chunks
    warmup = min(2 * (pipeline - stage - 1) + (chunks - 1) * pipeline, total)
    return Fraction(min(warmup + 1, total), chunks)


def chunk_micro_batches_in_flight(layout: ParallelLayout, stage: int, micro_batches: int) -> tuple[int, ...]:
    """Micro-batches of each of stage ``stage``'s chunks (its virtual stages, first to last) alive at the start
    of its first backward: one entry, :func:`micro_batches_in_flight`, without interleaving.

    Interleaved 1F1B runs a rank's forwards in rounds of ``m // max(1, m // P)`` micro-batches a chunk, chunk
    after chunk (torch's ``ScheduleInterleaved1F1B.forward_stage_index``), so its first V × in-flight forwards
    fall on the chunks in that order; its first backward is the last chunk's. The embedding's saved parts live in
    the first chunk of stage 0, the loss's in the last chunk of stage P − 1, which runs each micro-batch's
    forward and backward back to back (one alive).

    >>> layout = ParallelLayout(devices=4, pipeline=4, schedule="interleaved-1f1b", virtual_stages=2)
    >>> [chunk_micro_batches_in_flight(layout, stage, 8) for stage in range(4)]
    [(7, 4), (5, 4), (4, 3), (4, 1)]
    """
    in_flight = micro_batches_in_flight(layout, stage, micro_batches)
    chunks = layout.virtual_stages
    if layout.schedule != "interleaved-1f1b":
        return (int(in_flight),)
    per_round = micro_batches // max(1, micro_batches // layout.pipeline)
    counts = [0] * chunks
    for forward in range(int(in_flight * chunks)):
        counts[(forward // per_round) % chunks] += 1
    return tuple(counts)


def korthikanti_layer_activations(s: int, b: int, h: int, a: int, t: int = 1, *, sequence_parallel: bool = False,
                                  recompute: str = "none") -> int:
    """Bytes one transformer layer keeps for backward per device, by Korthikanti et al. 2022 ("Reducing
    Activation Recomputation in Large Transformer Models", arXiv:2205.05198, Table 2): 16-bit activations,
    dropout, an MLP 4h wide, s tokens, b sequences, h width, a heads, t tensor-parallel ranks.

    ``recompute``: ``"none"``: sbh(10 + 24/t + 5as/(ht)), sequence-parallel sbh/t·(34 + 5as/h); ``"selective"``
    (the attention core recomputed): sbh(10 + 24/t), sequence-parallel 34·sbh/t; ``"full"``: the layer's input,
    2sbh (2sbh/t sequence-parallel). One device (t = 1): sbh(34 + 5as/h). Rounded to a byte.

    >>> korthikanti_layer_activations(2048, 1, 12288, 96)  # GPT-3 175B, one device: 34sbh + 5as²b
    2868903936
    >>> korthikanti_layer_activations(2048, 1, 12288, 96, 8, sequence_parallel=True, recompute="selective")
    106954752
    """
    for value, name in ((s, "s"), (b, "b"), (h, "h"), (a, "a"), (t, "t")):
        check_positive_size(value, name)
    if not isinstance(sequence_parallel, bool):
        raise AccountingTypeError(f"sequence_parallel must be True or False, got {sequence_parallel!r}")
    check_choice(recompute, RECOMPUTE_POLICIES, "recompute")
    sbh = s * b * h
    if recompute == "full":
        return round(Fraction(2 * sbh, t if sequence_parallel else 1))
    scores = 0 if recompute == "selective" else Fraction(5 * a * s, h)
    if sequence_parallel:
        return round(Fraction(sbh, t) * (34 + scores))
    return round(sbh * (10 + Fraction(24, t) + scores / t))


# ---- one rank's share of a block ---------------------------------------------------------


@dataclass(frozen=True)
class _RankShapes:
    """The shapes one rank computes a block at, as configs: ``tp`` (heads / T, MLP width / T, s / C tokens),
    ``seq`` (``tp`` at the sequence-parallel share of the tokens), ``moe`` (the routed experts' width / ETP
    at the tokens a rank routes), ``vocabulary`` (``tp`` with the rank's rows of the vocabulary)."""

    tp: TransformerConfig
    seq: TransformerConfig
    moe: TransformerConfig
    vocabulary: TransformerConfig
    sequence_parallel: bool


def _rank_shapes(config: TransformerConfig, layout: ParallelLayout) -> _RankShapes:
    t, local = layout.tensor, config.sequence_length // layout.context
    kv_heads = config.kv_heads // t if config.kv_heads >= t else 1  # fewer than T: one replicated per rank
    tp = replace(config, heads=config.heads // t, kv_heads=kv_heads, head_width=config.head_width,
                 value_head_width=config.value_head_width, ffn_width=math.ceil(config.ffn_width / t),
                 dense_ffn_width=math.ceil(config.dense_ffn_width / t), sequence_length=local)
    sequence_parallel = t > 1 and layout.sequence_parallel
    seq = replace(tp, sequence_length=local // t) if sequence_parallel else tp
    moe = replace(seq, ffn_width=math.ceil(config.ffn_width / layout.expert_tensor))
    return _RankShapes(tp, seq, moe, replace(tp, vocabulary=math.ceil(config.vocabulary / t)), sequence_parallel)


def _kept_matmul_outputs(config: TransformerConfig, shapes: _RankShapes, batch: int, formats: ActivationFormats,
                         attention: str, dense: bool) -> int:
    """What torchtitan's op-level selective checkpointing keeps of one block on a rank besides its input: the
    outputs of the odd-numbered ``aten.mm`` calls (linear layers without a bias), the fused attention
    kernel's output and log-sum-exp, and the sequence-parallel reduce-scatters' outputs."""
    tp, mu = shapes.tp, formats.matmul
    tokens = tp.sequence_length * batch
    attention_outputs = [out for _, out in tp.attention_projections()]
    biases = [config.qkv_bias] * (len(attention_outputs) - 1) + [config.bias]
    if config.fused_projections and not tp.latent_attention:  # one qkv_proj
        attention_outputs = [tp.attention_width + 2 * tp.kv_width, attention_outputs[-1]]
        biases = [config.qkv_bias, config.bias]
    if config.experts > 1 and not dense:
        width = config.shared_experts * tp.ffn_width
        mlp = [config.experts] + ([] if not width else [width] * (tp.mlp_matrices - 1) + [tp.width])
        mlp_biases = [False] + [config.bias] * (len(mlp) - 1)
    else:
        width = tp.dense_ffn_width
        mlp = [width] * (tp.mlp_matrices - 1) + [tp.width]
        if config.fused_projections and tp.mlp_matrices == 3:  # one gate_up_proj
            mlp = [2 * width, tp.width]
        mlp_biases = [config.bias] * len(mlp)
    kept, count = 0, 0
    for out, bias in zip(attention_outputs + mlp, biases + mlp_biases):
        if bias:
            continue  # addmm: not on the list, not counted
        count += 1
        if count % 2:
            kept += mu * tokens * out
    heads = tp.heads
    if attention in FUSED_ATTENTIONS:
        rows = math.ceil(tp.sequence_length / 32) * 32 if attention == "sdpa-efficient" else tp.sequence_length
        kept += mu * tokens * tp.value_width + _FP32 * heads * rows * batch
    elif attention == "sdpa-math":
        wide = max(mu, _FP32)
        kept += wide * tokens * tp.value_width + wide * heads * tp.sequence_length ** 2 * batch
    if shapes.sequence_parallel:  # the attention's and the MLP's reduce-scatter outputs
        kept += 2 * mu * shapes.seq.sequence_length * batch * tp.width
    return kept


@dataclass(frozen=True)
class _RankBlock:
    whole: int      # what the block saves on the rank without recomputation
    kept: int       # what it keeps under the recomputation asked for
    checkpoint: int  # its input


def _rank_block(config: TransformerConfig, shapes: _RankShapes, batch: int, formats: ActivationFormats,
                key: tuple, recompute: str, selective: str, linear_inputs: str, dropout: bool, gelu) -> _RankBlock:
    kind, dense, masked = key
    full = block_activation_parts(shapes.tp, batch, formats, kind, dense, masked, dropout=dropout, gelu=gelu)
    seq = block_activation_parts(shapes.seq, batch, formats, kind, dense, masked, dropout=dropout, gelu=gelu) \
        if shapes.seq is not shapes.tp else full
    experts = 0
    if config.experts > 1 and not dense:
        experts = block_activation_parts(shapes.moe, batch, formats, kind, dense, masked, dropout=dropout,
                                         gelu=gelu).experts
    inputs = full.inputs if linear_inputs == "gathered" else seq.inputs
    whole = (seq.norms + seq.dropout + inputs + full.attention + full.scores + full.latent + full.mlp + experts
             + full.weight_copies)
    checkpoint = formats.stream * shapes.seq.sequence_length * batch * config.width
    kept = {"none": whole, "full": checkpoint}.get(recompute)
    if kept is None:
        kept = whole - full.scores if selective == "attention-core" else \
            checkpoint + _kept_matmul_outputs(config, shapes, batch, formats, kind, dense)
    return _RankBlock(whole, kept, checkpoint)


def _block_keys(config: TransformerConfig, attention: str, local_attention: str) -> list[tuple]:
    """Each block's (attention kind, dense, masked), as :func:`accounting.model.activations.transformer_activations`
    tells them apart, and the MTP modules' blocks after them."""
    dense_layers = config.dense_layers if config.experts > 1 else config.layers
    windowed = config.sliding_window is not None and config.sliding_window < config.sequence_length
    keys = []
    for index in range(config.layers):
        local = index < config.sliding_layers
        keys.append((local_attention if local else attention, index < dense_layers, local and windowed))
    return keys


# ---- a layout's stages ---------------------------------------------------------------------


def stage_activations(config: TransformerConfig, micro_batch: int, layout: ParallelLayout, precision="bf16-mixed", *,
                      micro_batches: int = 1, attention: str = "sdpa", recompute: str = "none",
                      selective: str = "attention-core", device=None, dropout: bool = False, gelu: str | None = None,
                      linear_inputs: str = "gathered", keep_outputs: bool = True) -> tuple[StageActivations, ...]:
    """One :class:`StageActivations` per pipeline stage of ``layout`` (see the module docstring).

    ``micro_batch``: sequences per micro-batch on one data-parallel rank; ``micro_batches``: micro-batches
    per step; ``attention``, ``device``, ``dropout``, ``gelu``, ``precision`` as for
    :func:`accounting.model.training_memory.transformer_training_memory` (``attention`` is resolved for the
    whole sequence); ``linear_inputs``: :data:`LINEAR_INPUTS`; ``keep_outputs``: with P > 1, the last stage keeps
    every micro-batch's logits to return them, as torch's ``schedule.step()`` does by default (``False``: as
    ``step(return_outputs=False)`` and Megatron-LM, which keep none). With a layout of all-1 degrees, ``saved``,
    ``transient`` and ``backward`` are that function's activations, transient, and backward less the gradients.
    """
    if not isinstance(config, TransformerConfig):
        raise AccountingTypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    if not isinstance(layout, ParallelLayout):
        raise AccountingTypeError(f"layout must be a ParallelLayout, got {type(layout).__name__}")
    batch = check_positive_size(micro_batch, "micro_batch")
    micro_batches = check_positive_size(micro_batches, "micro_batches")
    check_choice(recompute, RECOMPUTE_POLICIES, "recompute")
    check_choice(selective, SELECTIVE_POLICIES, "selective")
    check_choice(linear_inputs, LINEAR_INPUTS, "linear_inputs")
    for flag, name in ((dropout, "dropout"), (keep_outputs, "keep_outputs")):
        if not isinstance(flag, bool):
            raise AccountingTypeError(f"{name} must be True or False, got {flag!r}")
    check_layout_for_model(config, layout)
    formats = activation_formats(precision)
    kind, _ = resolve_attention(config, batch, formats, attention, device, dropout)
    local_kind = kind
    if config.sliding_layers:
        local_kind, _ = resolve_attention(config, batch, formats, attention, device, dropout, local=True)
    if layout.context > 1:
        for resolved in {kind, local_kind}:
            if resolved not in FUSED_ATTENTIONS:
                raise AccountingError(
                    f"context parallelism ({layout.context}) runs ring attention, which needs a fused kernel "
                    f"({', '.join(FUSED_ATTENTIONS)}); attention {attention!r} runs {resolved!r} here, and ring "
                    "attention has no eager or math form")
    shapes = _rank_shapes(config, layout)
    tp, seq, last = shapes.tp, shapes.seq, layout.pipeline - 1
    keys = _block_keys(config, kind, local_kind)
    mtp_key = (kind, config.experts == 1, False)
    blocks = {key: _rank_block(config, shapes, batch, formats, key, recompute, selective, linear_inputs, dropout,
                               gelu)
              for key in {*keys, mtp_key}}
    outside = {name: outside_activation_parts(shape, batch, formats, dropout)
               for name, shape in (("tp", tp), ("seq", seq), ("vocabulary", shapes.vocabulary))}
    stream = formats.stream * seq.sequence_length * batch * config.width  # one micro-batch's residual stream
    windowed = config.sliding_window is not None and config.sliding_window < config.sequence_length
    window_mask = formats.weights * batch * tp.sequence_length ** 2
    buffers = _buffers(config, shapes, layout, batch, formats, linear_inputs)
    exchange = {name: buffers.pop(name) for name in ("expert dispatch", "expert combine") if name in buffers}
    stages = []
    all_chunks = chunk_blocks(config.layers, layout.stages)
    final = layout.stages - 1

    def one_micro_batch(chunk: int) -> tuple[int, int]:
        """(bytes one micro-batch saves in global chunk ``chunk``, of them what it saves after its last MoE
        layer): its blocks, what each of its forwards keeps once (positions, masks), the embedding's part in
        chunk 0, the stage's output in every chunk but the last, the final norm, head and loss in the last."""
        indices = list(all_chunks[chunk])
        chunk_keys = [keys[index] for index in indices] + ([mtp_key] * config.mtp_modules if chunk == final else [])
        held = outside["tp"].positions
        local = any(index < config.sliding_layers for index in indices)
        if windowed and local and local_kind in SDPA_ATTENTIONS:
            held += window_mask  # SDPA saves the sliding-window mask it is passed: one for the stage's blocks
        if recompute != "none":
            # Eager attention's additive mask (batch, 1, s, s), an input of every block, kept once per kind.
            eager = {index < config.sliding_layers for index in indices if keys[index][0] == "eager"}
            held += formats.weights * batch * tp.sequence_length ** 2 * len(eager)
            if windowed and local and local_kind in SDPA_ATTENTIONS:
                held += window_mask
        if chunk == 0:
            held += outside["seq"].dropout
        if chunk != final:
            held += stream  # the stage's output, kept by torch's schedule to run its backward from
        after_experts = 0  # what one micro-batch saves after its last MoE layer (MTP modules end in one)
        if chunk == final:
            tail = (outside["seq"].norm + outside["tp" if linear_inputs == "gathered" else "seq"].head_input
                    + outside["vocabulary"].logits + outside["vocabulary"].unembedding_copy)
            held += tail + outside["tp"].mtp
            after_experts = 0 if config.mtp_modules else tail
        return sum(blocks[key].kept for key in chunk_keys) + held, after_experts

    for stage, indices in enumerate(stage_blocks(config.layers, layout)):
        stage_keys = [keys[index] for index in indices] + ([mtp_key] * config.mtp_modules if stage == last else [])
        held_chunks = range(stage, layout.stages, layout.pipeline)
        per_chunk = [one_micro_batch(chunk) for chunk in held_chunks]
        per_micro_batch = sum(bytes_ for bytes_, _ in per_chunk)
        after_experts = sum(after for _, after in per_chunk)
        in_flight = micro_batches_in_flight(layout, stage, micro_batches)
        alive = chunk_micro_batches_in_flight(layout, stage, micro_batches)
        saved = sum(count * bytes_ for count, (bytes_, _) in zip(alive, per_chunk))
        transient = 0
        if stage == last:
            logits = tp.sequence_length * batch * shapes.vocabulary.vocabulary
            # The loss's fp32 gradients: two (the one-hot's and the log-softmax's); vocabulary-parallel, three at
            # once: torch's loss_parallel backward (_nll_loss_and_log_softmax_backward) holds the one-hot
            # gradient, exp of the log-probabilities (then their sum) and the product together.
            transient = (2 + (layout.tensor > 1)) * _FP32 * logits
            if recompute == "full" and formats.autocast:
                # The forward's cached weight copies live until autocast exits, beside the logits and their fp32 copy.
                copies = len(indices) * weight_copy_bytes(tp, formats)
                transient = max(transient, copies + (formats.matmul + _FP32) * logits)
        backward = 0
        if recompute != "none":
            bottom = blocks[stage_keys[0]]
            share = ActivationBytes(1, "full", bottom.whole, 0, bottom.checkpoint, 0)
            others = saved - per_chunk[-1][0]  # the first backward is of the rank's last chunk
            backward = others + block_backward_bytes(tp, batch, formats, share, gelu)
        stage_buffers = dict(buffers)
        if layout.pipeline > 1:  # torch's stage receives each micro-batch's activations and gradients in its own buffer
            # one set per chunk, each stage object its own: activations but in chunk 0, gradients but in the last
            stage_buffers["pipeline receive"] = stream * micro_batches * sum((chunk > 0) + (chunk < final)
                                                                             for chunk in held_chunks)
            if stage > 0:  # the gradient of the stage's input, on its way back
                stage_buffers["pipeline send"] = stream
            if stage == last and keep_outputs:  # every micro-batch's logits, returned by the schedule's step()
                logits = tp.sequence_length * batch * shapes.vocabulary.vocabulary
                stage_buffers["pipeline outputs"] = micro_batches * formats.matmul * logits
        moe = bool(exchange) and (any(not keys[index][1] for index in indices)
                                  or (stage == last and config.mtp_modules > 0))
        stages.append(StageActivations(stage, len(indices), per_micro_batch, float(in_flight), saved, transient,
                                       backward, stage_buffers, dict(exchange) if moe else {},
                                       saved - after_experts if moe else 0))
    return tuple(stages)


def _buffers(config: TransformerConfig, shapes: _RankShapes, layout: ParallelLayout, batch: int,
             formats: ActivationFormats, linear_inputs: str) -> dict:
    """Communication buffers of one block's forward or backward, alive beside the saved activations."""
    tp, buffers = shapes.tp, {}
    tokens = tp.sequence_length * batch
    if shapes.sequence_parallel and linear_inputs == "sharded":
        buffers["tensor all-gather"] = formats.stream * tokens * config.width  # the input gathered again
    if layout.context > 1:
        # A ring passing K and V point to point (Megatron-LM and Transformer Engine; torch's "alltoall" rotation):
        # the block in use and the one being received. torch's default "allgather" rotation gathers all C blocks.
        buffers["context k/v blocks"] = 2 * formats.matmul * tokens * (tp.kv_width + tp.kv_heads * tp.value_head_width)
    if layout.expert > 1 and config.experts > 1:
        element = formats.weights if formats.autocast else formats.matmul  # the experts' grouped matmul's dtype
        rows = shapes.moe.sequence_length * batch * config.experts_per_token
        buffers["expert dispatch"] = buffers["expert combine"] = element * rows * config.width
    return buffers
