"""Bytes each rank moves in one optimizer step of a parallel layout, by axis and collective.

One row (:class:`AxisTraffic`) per axis, collective and part: the group it runs in, the calls per
optimizer step, the full size of one call's buffer and the bytes each rank sends in all.

**Bus bytes** (the convention of nccl-tests' ``busbw``, ``doc/PERFORMANCE.md``, and of
:mod:`accounting.fleet.collectives`): a call over ``n`` ranks on a buffer of ``S`` bytes (the whole
gathered tensor of an all-gather, the whole input of a reduce-scatter, the reduced buffer of an
all-reduce, a rank's whole send buffer of an all-to-all) costs each rank ``(n − 1)/n · S`` for an
all-gather, a reduce-scatter or an all-to-all, ``2(n − 1)/n · S`` for an all-reduce, and ``S`` for
a point-to-point send. ``bytes`` is that, summed over the step's calls, so a row's time is
``bytes / busbw`` with the bus bandwidth nccl-tests (or ``accounting fleet``) measures for the
group's scope.

What moves, per micro-batch of ``b`` sequences of ``s`` tokens, ``h`` the width, ``e`` bytes per
activation, a rank's tokens ``n = b·s/C``:

- **tensor** (T > 1): per block, with sequence parallelism (Megatron-LM; torchtitan's Llama plan),
  an all-gather of the ``n·h·e`` residual stream before attention and before the MLP and a
  reduce-scatter after each, in the forward; the backward runs the conjugates (each all-gather's
  gradient a reduce-scatter and the other way round): 4 all-gathers and 4 reduce-scatters a block.
  Without sequence parallelism, Megatron's f/g pair: an all-reduce after attention and after the MLP
  in the forward and of the input gradients before them in the backward (4 all-reduces, the same
  bus bytes; Megatron's fused QKV and gate-up matrices have one input each, where torch's plan over
  separate Q, K, V, gate and up matrices all-reduces 5 input gradients a block).
  ``recompute="full"`` runs each block's forward again in the backward, as torch's non-reentrant
  checkpoint (torchtitan's) does: it stops once the last tensor the backward needs is
  recomputed, so the two all-gathers run again but only the attention's reduce-scatter (without
  sequence parallelism: its all-reduce), not the MLP's, whose output feeds only the residual sum. A
  selective policy recomputes no matmul, so no collective. The vocabulary-parallel embedding
  reduce-scatters its output (forward) and all-gathers its gradient (backward) on the first stage;
  the output head all-gathers its input and reduce-scatters that gradient on the last stage, whose
  vocabulary-parallel loss all-reduces three fp32 values per token (the maximum logit, the sum of
  exponentials, the target's logit: Megatron's ``vocab_parallel_cross_entropy``, torch's
  ``loss_parallel``).
- **context** (C > 1): ring attention (torch's ``context_parallel``, torchtitan's:
  ``_templated_ring_attention`` and its backward) passes each block's key and value chunks
  (``n·K_r·d·e`` each, ``K_r`` the key/value heads a tensor rank holds) on ``C − 1`` times in the
  forward and again in the backward (full recomputation: a third time), and the backward passes their
  gradients on ``C`` times (the last pass returns them to their owner), accumulated in fp32. (Torch
  gathers the keys and values in one all-gather by default: the same bus bytes, ``(C − 1)/C`` of the
  ``C`` chunks.)
- **expert** (E > 1): each rank routes its ``n/T`` tokens (its sequence-parallel share: every rank
  of a stage routes its own) to ``k`` experts each: an all-to-all of ``n/T·k·h·e`` bytes dispatches
  them and one of the same size combines the results, per expert block, forward and backward (4
  a block; full recomputation 2 more). Balanced routing: a ``1/E`` share stays on the rank.
- **pipeline** (P > 1): one activation tensor ``n·h·e/T`` (Megatron's scatter/gather of it over the
  tensor ranks) sent per chunk boundary per micro-batch forward, its gradient backward; the busiest
  rank (a middle one) sends ``2·m·V``, the first and last ``m·(2V − 1)``.
- **data** (the D·C ranks that hold the same weights): DDP all-reduces the gradients once a step;
  ZeRO-1 reduce-scatters them once a step and all-gathers the updated weights; ZeRO-2 reduce-scatters
  every micro-batch (its gradients are sharded, they cannot accumulate whole) and all-gathers the
  updated weights; ZeRO-3/FSDP all-gathers each block's weights before each micro-batch's forward
  and again before its backward (re-sharded after the forward, FSDP's default; the root's embedding,
  final norm and head once, FSDP2 keeping the root's for the backward) and reduce-scatters the
  gradients each micro-batch; HSDP does ZeRO-3 inside a node and all-reduces its shard of the
  gradients across nodes each micro-batch. The routed experts' states do the same over their expert
  data-parallel group (EDP). Gradients move in the precision's gradient format, weights in its
  weight format.

Placement (``within_node``): tensor ranks innermost, then context, then data, pipeline outermost;
expert ranks (stride ``expert_tensor``) inside the T·C·D ranks of a stage, as Megatron-core orders
them. A group lies within a node when its stride × size is at most ``node_size``.

>>> from accounting.model.config import TransformerConfig
>>> from accounting.model.parallel.layout import ParallelLayout
>>> config = TransformerConfig(layers=4, width=64, heads=4, sequence_length=32, vocabulary=100)
>>> rows = step_traffic(config, 2, ParallelLayout(devices=8, tensor=2, pipeline=2))
>>> [(row.axis, row.collective, row.part, row.calls) for row in rows][:2]
[('tensor', 'all-gather', 'blocks', 8), ('tensor', 'reduce-scatter', 'blocks', 8)]
"""

from dataclasses import dataclass
from functools import lru_cache

from accounting._checks import check_choice, check_positive_size
from accounting.model.activations import precision_policy
from accounting.model.config import TransformerConfig
from accounting.model.parallel.layout import HSDP, ParallelLayout
from accounting.model.parallel.states import check_config_and_layout, stage_parameters

RECOMPUTE_POLICIES = ("none", "selective", "full")
"""What the backward recomputes: nothing, a selective policy (no matmul, so no collective), every block."""

AXES = ("tensor", "context", "expert", "pipeline", "data")
"""The axes, in the order :func:`step_traffic` gives their rows."""

ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE, ALL_TO_ALL, SEND = (
    "all-gather", "reduce-scatter", "all-reduce", "all-to-all", "send/recv")

LOSS_BYTES = 4
"""The vocabulary-parallel loss reduces fp32 values (its logits are upcast)."""

GRADIENT_ACCUMULATION_BYTES = 4
"""Ring attention's key and value gradients travel in fp32 (torch's ``_ContextParallelOptions.convert_to_f32``)."""

LOSS_REDUCTIONS = 3
"""All-reduces of the vocabulary-parallel loss per micro-batch: the maximum, the sum of exponentials, the
target's logit."""


def bus_factor(collective: str, ranks: int) -> float:
    """Bytes each rank moves per byte of a call's buffer (nccl-tests' busbw factor; 1 for a send).

    >>> bus_factor("all-reduce", 8), bus_factor("all-gather", 8), bus_factor("send/recv", 2)
    (1.75, 0.875, 1.0)
    """
    if collective == SEND:
        return 1.0
    if collective == ALL_REDUCE:
        return 2 * (ranks - 1) / ranks
    return (ranks - 1) / ranks


@dataclass(frozen=True)
class AxisTraffic:
    """One collective of one axis in a step: ``calls`` calls of ``buffer`` bytes each over ``group`` ranks.

    ``bytes``: bus bytes each rank sends in the step (``calls × buffer × bus_factor``, see the module
    docstring). ``stage``: the pipeline stage whose ranks run it (``None``: every stage's).
    ``within_node``: the group's ranks share a node. ``part``: what moves ("blocks", "embedding",
    "output head", "loss", "activations", "keys and values", "dispatch and combine", "gradients",
    "weights", "expert gradients", "expert weights").
    """

    axis: str
    collective: str
    group: int
    calls: int
    bytes: int
    within_node: bool
    part: str = ""
    buffer: int = 0
    stage: int | None = None


def _row(axis, collective, group, calls, buffer, within, part, stage=None) -> AxisTraffic:
    moved = round(calls * buffer * bus_factor(collective, group))
    return AxisTraffic(axis, collective, group, calls, moved, within, part, buffer, stage)


@lru_cache(maxsize=512)
def _held(config: TransformerConfig, layout: ParallelLayout) -> tuple:
    """:func:`stage_parameters`, kept for the layouts a search asks about again."""
    return stage_parameters(config, layout)


def _stage_blocks(held) -> tuple[int, int]:
    """(blocks, blocks with routed experts) of one stage's :class:`StageParameters` (its MTP modules counted
    as blocks): every unit FSDP gathers but the root."""
    blocks = held.units[:-1]
    return len(blocks), sum(1 for _, experts in blocks if experts)


def busiest_rank_blocks(config: TransformerConfig, layout: ParallelLayout) -> int:
    """Blocks the busiest pipeline rank holds (:func:`accounting.model.parallel.activations.stage_blocks`'s split:
    the blocks in P·V chunks, the last chunks one longer where they do not divide; the last stage's
    multi-token-prediction modules counted as blocks).

    >>> from accounting.model.config import TransformerConfig
    >>> config = TransformerConfig(layers=10, width=64, heads=4, sequence_length=32, vocabulary=100)
    >>> busiest_rank_blocks(config, ParallelLayout(devices=4, pipeline=4))
    3
    """
    return max(_stage_blocks(held)[0] for held in _held(config, layout))


def _within(stride: int, size: int, node_size: int) -> bool:
    return stride * size <= node_size


def _tensor_rows(config, layout, tokens, e, micro_batches, recompute, blocks) -> list[AxisTraffic]:
    t = layout.tensor
    if t == 1:
        return []
    inside = _within(1, t, layout.node_size)
    stream = tokens * config.width * e
    again = 1 if recompute == "full" else 0
    # Per block: forward 2 and backward 2 of each; recomputing the forward gathers twice again but need not
    # rerun its last reduction (nothing the backward needs is computed from the block's output).
    gathers, reductions = (4 + 2 * again) * blocks * micro_batches, (4 + again) * blocks * micro_batches
    last = layout.pipeline - 1
    rows = []
    if layout.sequence_parallel:
        rows += [_row("tensor", ALL_GATHER, t, gathers, stream, inside, "blocks"),
                 _row("tensor", REDUCE_SCATTER, t, reductions, stream, inside, "blocks"),
                 _row("tensor", REDUCE_SCATTER, t, micro_batches, stream, inside, "embedding", 0),
                 _row("tensor", ALL_GATHER, t, micro_batches, stream, inside, "embedding", 0),
                 _row("tensor", ALL_GATHER, t, micro_batches, stream, inside, "output head", last),
                 _row("tensor", REDUCE_SCATTER, t, micro_batches, stream, inside, "output head", last)]
    else:
        rows += [_row("tensor", ALL_REDUCE, t, reductions, stream, inside, "blocks"),
                 _row("tensor", ALL_REDUCE, t, micro_batches, stream, inside, "embedding", 0),
                 _row("tensor", ALL_REDUCE, t, micro_batches, stream, inside, "output head", last)]
    rows.append(_row("tensor", ALL_REDUCE, t, LOSS_REDUCTIONS * micro_batches, tokens * LOSS_BYTES, inside,
                     "loss", last))
    return rows


def _kv_width(config: TransformerConfig, tensor: int) -> int:
    """Key plus value features per token a tensor rank holds (latent attention: per head, after the up-projection)."""
    if config.latent_attention:
        return config.heads // tensor * (config.head_width + config.value_head_width)
    kv_heads = max(config.kv_heads // tensor, 1)
    return kv_heads * (config.head_width + config.value_head_width)


def step_traffic(config: TransformerConfig, micro_batch: int, layout: ParallelLayout, *, micro_batches: int = 1,
                 precision="bf16-mixed", recompute: str = "none") -> tuple[AxisTraffic, ...]:
    """The rows of every collective a step runs (see the module docstring), tensor to data.

    ``micro_batch``: sequences per micro-batch on one data-parallel rank; ``micro_batches`` (m): per
    optimizer step per pipeline. Rows of parts only one stage holds name it (``stage``).
    """
    check_config_and_layout(config, layout)
    b = check_positive_size(micro_batch, "micro_batch")
    m = check_positive_size(micro_batches, "micro_batches")
    check_choice(recompute, RECOMPUTE_POLICIES, "recompute")
    policy = precision_policy(precision)
    e = policy.bytes_of("activations")
    t, p, c, x = layout.tensor, layout.pipeline, layout.context, layout.expert
    tokens = b * config.sequence_length // c
    held = _held(config, layout)
    blocks = max(_stage_blocks(stage)[0] for stage in held)
    expert_blocks = max(_stage_blocks(stage)[1] for stage in held)
    again = 1 if recompute == "full" else 0
    rows = _tensor_rows(config, layout, tokens, e, m, recompute, blocks)
    if c > 1:
        inside = _within(t, c, layout.node_size)
        width = _kv_width(config, t)
        rows += [_row("context", SEND, c, (c - 1) * (2 + again) * blocks * m, tokens * width * e, inside,
                      "keys and values"),
                 _row("context", SEND, c, c * blocks * m, tokens * width * GRADIENT_ACCUMULATION_BYTES, inside,
                      "key and value gradients")]
    if x > 1:
        routed = tokens // t * config.experts_per_token * config.width * e
        calls = (2 + 2 + 2 * again) * expert_blocks * m
        inside = _within(layout.expert_tensor, x, layout.node_size)
        rows.append(_row("expert", ALL_TO_ALL, x, calls, routed, inside, "dispatch and combine"))
    if p > 1:
        boundary = tokens * config.width * e // t
        v = layout.virtual_stages
        sends = 2 * m * v if p > 2 else m * (2 * v - 1)
        rows.append(_row("pipeline", SEND, 2, sends, boundary, _within(t * c * layout.data, p, layout.node_size),
                         "activations"))
    rows += _data_rows(held, layout, policy, m)
    return tuple(rows)


def _sharded_rows(kind, stage_name, group, shard_group, stride, units, policy, m, node_size, stage):
    """Rows of one kind of state (``""``: dense, ``"expert "``) over its data-parallel ``group``
    (ZeRO-3's over ``shard_group``); ``units``: (elements of one FSDP unit, units, gathers a micro-batch)."""
    units = [(elements, count, gathers) for elements, count, gathers in units if elements and count]
    if group == 1 or not units:
        return []
    weights, gradients = policy.bytes_of("weights"), policy.bytes_of("gradients")
    total = sum(elements * count for elements, count, _ in units)
    inside = _within(stride, group, node_size)
    name_g, name_w = f"{kind}gradients", f"{kind}weights"
    if stage_name == "ddp":
        return [_row("data", ALL_REDUCE, group, 1, total * gradients, inside, name_g, stage)]
    if stage_name in ("zero1", "zero2"):
        reductions = 1 if stage_name == "zero1" else m
        return [_row("data", REDUCE_SCATTER, group, reductions, total * gradients, inside, name_g, stage),
                _row("data", ALL_GATHER, group, 1, total * weights, inside, name_w, stage)]
    rows = []
    shard_inside = _within(stride, shard_group, node_size)
    replicas = group // shard_group
    for elements, count, gathers in units:
        rows += [_row("data", ALL_GATHER, shard_group, gathers * m * count, elements * weights, shard_inside, name_w,
                      stage),
                 _row("data", REDUCE_SCATTER, shard_group, m * count, elements * gradients, shard_inside, name_g,
                      stage)]
        if replicas > 1:  # HSDP: each in-node shard of the gradients all-reduced across the replicas
            rows.append(_row("data", ALL_REDUCE, replicas, m * count, -(-elements * gradients // shard_group),
                             _within(stride * shard_group, replicas, node_size), name_g, stage))
    return rows


def _units(sizes, gathers) -> list[tuple[int, int, int]]:
    """(elements, how many units of that size, gathers a micro-batch) of a list of unit sizes."""
    counts: dict[int, int] = {}
    for size in sizes:
        counts[size] = counts.get(size, 0) + 1
    return [(size, count, gathers) for size, count in counts.items()]


def _data_rows(held, layout, policy, m) -> list[AxisTraffic]:
    """Each stage's data-parallel rows. ZeRO-3 gathers per unit, as FSDP2 wraps a model (torchtitan): one unit
    a block, gathered for the forward and again for the backward, and the root's (the embedding, final norm
    and head), not re-sharded after the forward (FSDP2's root keeps them for the backward): once a micro-batch."""
    stage_name = layout.sharding_stage
    if stage_name == "none":
        return []
    rows = []
    group = layout.data * layout.context
    zero3 = stage_name == "zero3"
    shard = layout.sharding_degree if zero3 else group
    expert_shard = layout.expert_sharding_degree if zero3 else layout.expert_data
    for stage in held:
        named = stage.stage if layout.pipeline > 1 else None
        blocks, (root, _) = stage.units[:-1], stage.units[-1]
        dense = _units([dense for dense, _ in blocks], 2) + [(root, 1, 1)]
        rows += _sharded_rows("", stage_name, group, shard, layout.tensor, dense, policy, m, layout.node_size, named)
        experts = _units([experts for _, experts in blocks], 2)
        rows += _sharded_rows("expert ", stage_name, layout.expert_data, expert_shard,
                              layout.expert * layout.expert_tensor, experts, policy, m, layout.node_size, named)
    return rows


def traffic_by_axis(rows) -> dict[str, int]:
    """Bus bytes per axis, summed over the rows (each stage's own rows counted as the busiest stage's:
    the largest of them).

    >>> from accounting.model.config import TransformerConfig
    >>> config = TransformerConfig(layers=4, width=64, heads=4, sequence_length=32, vocabulary=100)
    >>> sorted(traffic_by_axis(step_traffic(config, 1, ParallelLayout(devices=4, tensor=2))))
    ['data', 'tensor']
    """
    totals: dict[str, dict] = {}
    for row in rows:
        by_stage = totals.setdefault(row.axis, {})
        by_stage[row.stage] = by_stage.get(row.stage, 0) + row.bytes
    result = {}
    for axis, by_stage in totals.items():
        common = by_stage.pop(None, 0)
        result[axis] = common + max(by_stage.values(), default=0)
    return result
