"""Memory of a training step per rank under a parallel layout: one :class:`RankMemory` per pipeline stage.

Each rank's parts are its model states (:func:`accounting.model.parallel.states.stage_states`), the saved
activations of the micro-batches its stage holds in flight under the schedule, the loss's transient bytes
and the communication buffers (:func:`accounting.model.parallel.activations.stage_activations`), and what
a step adds for a moment, counted as :func:`accounting.model.training_memory.transformer_training_memory`
counts them for one device, for this rank's share:

- ``gathered_phases`` (ZeRO-3/FSDP, HSDP): what FSDP2 holds unsharded in each phase
  (:func:`accounting.model.training_memory.fsdp_gathered_phases`): at the start of backward its stage's root
  (the embedding, final norm and head it holds: FSDP2 keeps the root unsharded from forward to backward);
  in a block's backward the root, that block, the next one prefetched and the block's gradients made so
  far; in the recomputed backward the root, the bottom block and its gradients made so far; nothing in the
  update. Each unit is the rank's tensor-parallel share of it, its dense part where the dense states are
  sharded and its routed experts where theirs are; ``gathered`` is the peak phase's. Under pipeline
  parallelism (P > 1), what torch's pipelining makes FSDP2 do (:func:`pipelined_fsdp_phases`): the stage's
  units all kept unsharded from the first backward to the update, with their gradients accumulated unsharded
  in the reduce dtype (fp32 under ``bf16-mixed``) and no sharded gradient before the update
  (``stage_unsharded=False``: gathered per block as without a pipeline);
- ``update``: the optimizer's temporaries (for-loop Adam: two fp32 tensors of the largest tensor the rank
  holds) and, with a master copy, the fp32 copies of its gradients;
- ``backward`` (with recomputation): the gradients made by the peak of the stage's bottom block's
  recomputed backward, beside what :func:`~accounting.model.parallel.activations.stage_activations` holds
  there (the other micro-batches' saved activations and the block's working set);
- ``exchange`` (expert parallelism): an MoE layer's dispatch and combine buffers, alive only inside the
  layer, in a phase of their own (the forward's last MoE layer, beside ``exchange_saved`` bytes of saved
  activations), not on top of every phase as ``buffers`` are.

The peak is :class:`accounting.TrainingMemory`'s: persistent states + buffers + the largest phase (the
saved activations with the transient bytes; the gradients with the update; the recomputed backward; under
ZeRO-3 a block's backward; with expert parallelism the experts' all-to-alls), each phase with what is
gathered in it. With more than one micro-batch per step the gradients accumulate from the first
micro-batch's backward to the update, so they are alive in every phase (the pipeline's steady state:
each backward after the first starts with the stage's micro-batches in flight beside them).

>>> from accounting.model.config import TransformerConfig
>>> from accounting.model.parallel.layout import ParallelLayout
>>> config = TransformerConfig(layers=4, width=64, heads=4, sequence_length=32, vocabulary=128)
>>> memory = layout_memory(config, 2, ParallelLayout(devices=8, tensor=2, pipeline=2), micro_batches=4)
>>> first, last = memory.ranks  # 1F1B: the first stage holds 2 micro-batches in flight, the last 1
>>> first.activations > last.activations, memory.most_loaded.stage
(True, 0)
"""

from dataclasses import dataclass, field

from accounting._checks import check_positive_size
from accounting.model.activations import activation_formats, largest_parameter, precision_policy, update_bytes
from accounting.model.parallel.activations import chunk_blocks, stage_activations
from accounting.model.parallel.states import check_config_and_layout, stage_parameters, stage_states
from accounting.model.training_memory import PhasedPeak, fsdp_gathered_phases, optimizer_state_slots, step_phases


def pipelined_fsdp_phases(stage: int, accumulating: int, block: int, block_attention: int, bottom: int,
                          bottom_pending: int, weight_bytes: int, gradient_bytes: int, accumulated_bytes: int, *,
                          recomputed: bool, exchange: bool = False) -> dict:
    """Bytes FSDP2 holds unsharded in each phase of a pipeline stage's step under torch's pipelining, from the
    ``stage``'s elements (the rank's share of all its FSDP units: every block, MTP module and the root) and the
    elements whose unsharded gradients are alive beside its micro-batches in flight (``accumulating``).

    Before every micro-batch's backward, torch's stage calls ``set_is_last_backward(False)``,
    ``set_reshard_after_backward(False)`` and ``set_requires_gradient_sync(False)`` on its FSDP module
    (``torch/distributed/pipelining/stage.py``, ``backward_maybe_with_nosync``, lines 843-848 in torch 2.13),
    recursively (``set_*``'s ``recurse=True``, ``torch/distributed/fsdp/_fully_shard/_fully_shard.py``), and
    reduce-scatters and reshards only after the last one (``perform_reduce_grad``, lines 1164-1195). So from
    the first backward to the update every unit stays unsharded (``stage`` × ``weight_bytes``; torchtitan does
    not reshard after forward either when PP is on: its ``get_fsdp_reshard_after_forward_policy``'s
    ``"default"`` is ``not pp_enabled``; with FSDP's own default, resharding after each forward, a backward
    starts with the blocks sharded again and gathers them back), and each unit's gradients are kept
    unsharded: FSDP2's ``post_backward`` without a reduction converts a unit's new gradients to the reduce
    dtype (``FSDPParam.to_accumulated_grad_if_needed``) and adds later micro-batches' into them
    (``accumulate_unsharded_grad_if_needed``, ``_fsdp_param.py`` lines 802-821; ``_fsdp_param_group.py``
    ``post_backward``, lines 603-612): ``accumulating`` × ``accumulated_bytes`` (fp32 with torchtitan's
    ``reduce_dtype=float32``). No sharded gradient exists before the last micro-batch's reduce-scatter.
    Interleaved, each chunk is a stage of its own, reduced and resharded just after its own last backward
    (``schedules.py``, ``_add_reduce_grad``, lines 1252-1282; ``_add_unshard_reshard``, which also keeps at
    most 3 chunks unsharded): in one round of micro-batches (m < 2P) a rank runs its last chunk's backwards
    before the others', so only that chunk's gradients are alive at its most micro-batches in flight.

    Phases: ``"forward end"`` (the start of a backward): those two; ``"block backward"``: with them the gradients
    the largest block made so far in the parameters' dtype (all but ``block_attention``), not yet added into the
    reduce dtype's (none when ``accumulated_bytes == gradient_bytes``: they accumulate in place);
    ``"recomputed backward"`` (``recomputed``): the same for the bottom block (all but ``bottom_pending``);
    ``"expert exchange"`` (``exchange``): the two; ``"update"``: nothing (resharded by then).

    >>> pipelined_fsdp_phases(1000, 1000, 100, 40, 100, 0, 2, 2, 4, recomputed=True)
    {'forward end': 6000, 'block backward': 6120, 'recomputed backward': 6200}
    """
    kept = stage * weight_bytes + accumulating * accumulated_bytes
    made = gradient_bytes if accumulated_bytes != gradient_bytes else 0
    phases = {"forward end": kept, "block backward": kept + (block - block_attention) * made}
    if recomputed:
        phases["recomputed backward"] = kept + (bottom - bottom_pending) * made
    if exchange:
        phases["expert exchange"] = kept
    return phases


def accumulating_chunks(layout, micro_batches: int) -> tuple:
    """A rank's chunks (0 … V − 1) whose unsharded gradients (see :func:`pipelined_fsdp_phases`) are alive while
    it holds its most micro-batches in flight: all of them, but interleaved in one round of micro-batches
    (torch's ``ScheduleInterleaved1F1B``: ``max(1, m // P)`` rounds), where the last chunk runs all its backwards
    and is reduced before the others' first: that one.

    >>> from accounting.model.parallel.layout import ParallelLayout
    >>> layout = ParallelLayout(devices=4, pipeline=4, schedule="interleaved-1f1b", virtual_stages=2)
    >>> accumulating_chunks(layout, 4), accumulating_chunks(layout, 8)
    ((1,), (0, 1))
    """
    chunks = layout.virtual_stages
    if chunks > 1 and micro_batches // layout.pipeline <= 1:
        return (chunks - 1,)
    return tuple(range(chunks))


@dataclass(frozen=True)
class RankMemory(PhasedPeak):
    """Bytes one rank of pipeline stage ``stage`` holds in a step, by part (see the module docstring).

    ``optimizer``: master weights and optimizer state together. ``buffers``: communication buffers alive at
    the peak, by name. ``accumulating``: the gradients are kept across micro-batches (more than one a step),
    so they are alive beside the saved activations too (not under FSDP in a pipeline, where the sharded
    gradients appear only at the update and the unsharded ones are counted in ``gathered_phases``).
    ``exchange``: the expert all-to-alls' buffers by name, alive in the ``"expert exchange"`` phase only,
    beside ``exchange_saved`` bytes of saved activations.
    """

    stage: int
    parameters: int
    gradients: int
    optimizer: int
    gathered_phases: dict
    activations: int
    transient: int
    update: int
    backward: int
    buffers: dict = field(default_factory=dict)
    accumulating: bool = False
    exchange: dict = field(default_factory=dict)
    exchange_saved: int = 0

    @property
    def persistent(self) -> int:
        """Weights, master weights and optimizer state: alive for the whole run."""
        return self.parameters + self.optimizer

    @property
    def buffer_bytes(self) -> int:
        return sum(self.buffers.values())

    @property
    def phases(self) -> dict:
        """Bytes of each phase beyond the persistent states and the buffers, what is gathered then included."""
        held = self.gradients if self.accumulating else 0
        phases = step_phases(self.activations + self.transient + held, self.gradients + self.update, self.backward,
                             self.activations + held, self.gathered_phases)
        if self.exchange:
            phases["expert exchange"] = (self.exchange_saved + sum(self.exchange.values()) + held
                                         + self.gathered_phases.get("expert exchange", 0))
        return phases

    @property
    def peak(self) -> int:
        return self.persistent + self.buffer_bytes + max(self.phases.values())


@dataclass(frozen=True)
class LayoutMemory:
    """A step's memory per rank: ``ranks``, one :class:`RankMemory` per pipeline stage (every rank of a stage
    holds as much), and the most loaded of them."""

    layout: object
    ranks: tuple

    @property
    def most_loaded(self) -> RankMemory:
        """The rank with the highest peak (the earliest stage among equals)."""
        return max(self.ranks, key=lambda rank: (rank.peak, -rank.stage))


def layout_memory(config, micro_batch: int, layout, *, micro_batches: int = 1, precision="bf16-mixed",
                  optimizer: str = "adamw", attention: str = "sdpa", recompute: str = "none",
                  selective: str = "attention-core", device=None, keep_outputs: bool = True,
                  embedding_gradients: str = "replicated", stage_unsharded: bool = True,
                  **optimizer_settings) -> LayoutMemory:
    """The memory of each pipeline stage's rank for ``micro_batch`` sequences a micro-batch on each data-parallel
    rank, ``micro_batches`` a step (see the module docstring).

    ``precision``, ``optimizer`` (and its memory settings), ``attention``, ``device`` as for
    :func:`accounting.model.training_memory.transformer_training_memory`; ``recompute`` (``"none"``,
    ``"selective"``, ``"full"``) and ``selective`` as for
    :func:`accounting.model.parallel.activations.stage_activations`, and ``keep_outputs`` (the last pipeline
    stage keeps every micro-batch's logits, as torch's ``schedule.step()`` does unless told
    ``return_outputs=False``), ``embedding_gradients`` as for
    :func:`accounting.model.parallel.states.stage_states` (torch's whole embedding gradient under T > 1, or
    Megatron-LM's V / T rows). ``stage_unsharded`` (ZeRO-3/FSDP/HSDP with P > 1): FSDP2 as torch's pipelining
    drives it, each stage kept unsharded with unsharded gradients (see :func:`pipelined_fsdp_phases`); False:
    gathered a block at a time as without a pipeline. An all-1 layout is
    ``transformer_training_memory`` exactly, part for part, whatever its ``sharding`` and ``devices``.

    >>> from accounting.model.config import TransformerConfig
    >>> from accounting.model.parallel.layout import ParallelLayout
    >>> from accounting.model.training_memory import transformer_training_memory
    >>> config = TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=128)
    >>> (rank,) = layout_memory(config, 2, ParallelLayout(devices=4, sharding="zero3")).ranks
    >>> rank.peak == transformer_training_memory(config, 2, "adamw", attention="sdpa", sharding="zero3", devices=4).peak
    True
    """
    check_config_and_layout(config, layout)
    micro_batches = check_positive_size(micro_batches, "micro_batches")
    policy = precision_policy(precision)
    name = optimizer.strip().lower() if isinstance(optimizer, str) else optimizer
    optimizer_state_slots(name, **optimizer_settings)  # a clear error for a bad name or setting
    autocast = activation_formats(precision).autocast
    parameters = stage_parameters(config, layout)
    states = stage_states(config, layout, precision, name, embedding_gradients=embedding_gradients,
                          **optimizer_settings)
    activations = stage_activations(config, micro_batch, layout, precision, micro_batches=micro_batches,
                                    attention=attention, recompute=recompute, selective=selective, device=device,
                                    keep_outputs=keep_outputs)
    gradient_bytes = policy.bytes_of("gradients")
    widened = policy.bytes_of("master_weights") - gradient_bytes if policy.master_weights else 0
    # Temporaries per element of the largest tensor, as update_bytes counts them for the whole model's.
    temporaries = update_bytes(config, policy.bytes_of("optimizer_state"), name) // largest_parameter(config)
    # FSDP2 accumulates unsharded gradients in its reduce dtype: fp32 beside fp32 master weights (torchtitan's
    # MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)), else the gradients' own.
    accumulated_bytes = policy.bytes_of("master_weights") if policy.master_weights else gradient_bytes
    sharded = layout.sharding_stage == "zero3"
    chunks = chunk_blocks(config.layers, layout.stages)
    accumulating = micro_batches > 1
    ranks = []
    for held, state, saved in zip(parameters, states, activations):
        gathered = {}
        dense_gathered = layout.sharding_degree > 1
        experts_gathered = layout.expert_sharding_degree > 1
        kept = False
        if sharded and (dense_gathered or experts_gathered):
            units = [dense * dense_gathered + experts * experts_gathered for dense, experts in held.units]
            *blocks, root = units  # each block and MTP module, then the stage's root
            pending = min(0 if autocast else held.pending_gradients, blocks[0])
            block_attention = held.block_attention * dense_gathered
            kept = stage_unsharded and layout.pipeline > 1
            if kept:
                accumulating_units = units
                if accumulating_chunks(layout, micro_batches) != tuple(range(layout.virtual_stages)):
                    last_chunk = len(chunks[held.stage + layout.stages - layout.pipeline])
                    accumulating_units = units[len(held.layers) - last_chunk:len(held.layers)]
                    if held.stage == layout.pipeline - 1:  # its MTP modules, final norm and head
                        accumulating_units = units[len(held.layers) - last_chunk:]
                gathered = pipelined_fsdp_phases(sum(units), sum(accumulating_units), max(blocks), block_attention,
                                                 blocks[0], pending, policy.bytes_of("weights"), gradient_bytes,
                                                 accumulated_bytes, recomputed=recompute == "full",
                                                 exchange=bool(saved.exchange))
            else:
                gathered = fsdp_gathered_phases(root, max(blocks), block_attention, blocks[0], pending,
                                                policy.bytes_of("weights"), gradient_bytes,
                                                recomputed=recompute == "full")
        update = round(state.gradients * widened / gradient_bytes) + temporaries * held.largest_tensor
        backward = 0
        if recompute != "none":
            if kept:  # the stage's gradients are the unsharded ones counted in `gathered`
                made = 0
            elif accumulating:
                made = state.gradients
            else:
                early = held.total - held.late_gradients - (0 if autocast else held.pending_gradients)
                made = round(state.gradients / held.total * early)
            backward = made + saved.backward
        ranks.append(RankMemory(held.stage, state.parameters, state.gradients, state.optimizer, gathered,
                                saved.saved, saved.transient, update, backward, dict(saved.buffers),
                                accumulating and not kept,
                                dict(saved.exchange), saved.exchange_saved))
    return LayoutMemory(layout, tuple(ranks))
