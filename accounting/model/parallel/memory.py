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
  sharded and its routed experts where theirs are; ``gathered`` is the peak phase's;
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
from accounting.model.parallel.activations import stage_activations
from accounting.model.parallel.states import check_config_and_layout, stage_parameters, stage_states
from accounting.model.training_memory import fsdp_gathered_phases, optimizer_state_slots, step_phases


@dataclass(frozen=True)
class RankMemory:
    """Bytes one rank of pipeline stage ``stage`` holds in a step, by part (see the module docstring).

    ``optimizer``: master weights and optimizer state together. ``buffers``: communication buffers alive at
    the peak, by name. ``accumulating``: the gradients are kept across micro-batches (more than one a step),
    so they are alive beside the saved activations too. ``exchange``: the expert all-to-alls' buffers by name,
    alive in the ``"expert exchange"`` phase only, beside ``exchange_saved`` bytes of saved activations.
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
            phases["expert exchange"] = self.exchange_saved + sum(self.exchange.values()) + held
        return phases

    @property
    def peak_phase(self) -> str:
        """The phase of the peak (the first of equals, in :attr:`phases`' order)."""
        phases = self.phases
        return max(phases, key=phases.get)

    @property
    def gathered(self) -> int:
        """Unsharded parameters and gradients (ZeRO-3/FSDP) alive at the peak."""
        return self.gathered_phases.get(self.peak_phase, 0)

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
                  embedding_gradients: str = "replicated", **optimizer_settings) -> LayoutMemory:
    """The memory of each pipeline stage's rank for ``micro_batch`` sequences a micro-batch on each data-parallel
    rank, ``micro_batches`` a step (see the module docstring).

    ``precision``, ``optimizer`` (and its memory settings), ``attention``, ``device`` as for
    :func:`accounting.model.training_memory.transformer_training_memory`; ``recompute`` (``"none"``,
    ``"selective"``, ``"full"``) and ``selective`` as for
    :func:`accounting.model.parallel.activations.stage_activations`, and ``keep_outputs`` (the last pipeline
    stage keeps every micro-batch's logits, as torch's ``schedule.step()`` does unless told
    ``return_outputs=False``), ``embedding_gradients`` as for
    :func:`accounting.model.parallel.states.stage_states` (torch's whole embedding gradient under T > 1, or
    Megatron-LM's V / T rows). An all-1 layout is
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
    sharded = layout.sharding_stage == "zero3"
    accumulating = micro_batches > 1
    ranks = []
    for held, state, saved in zip(parameters, states, activations):
        gathered = {}
        dense_gathered = layout.sharding_degree > 1
        experts_gathered = layout.expert_sharding_degree > 1
        if sharded and (dense_gathered or experts_gathered):
            units = [dense * dense_gathered + experts * experts_gathered for dense, experts in held.units]
            *blocks, root = units  # each block and MTP module, then the stage's root
            pending = 0 if autocast else held.pending_gradients
            gathered = fsdp_gathered_phases(root, max(blocks), held.block_attention * dense_gathered, blocks[0],
                                            min(pending, blocks[0]), policy.bytes_of("weights"), gradient_bytes,
                                            recomputed=recompute == "full")
        update = round(state.gradients * widened / gradient_bytes) + temporaries * held.largest_tensor
        backward = 0
        if recompute != "none":
            if accumulating:
                made = state.gradients
            else:
                early = held.total - held.late_gradients - (0 if autocast else held.pending_gradients)
                made = round(state.gradients / held.total * early)
            backward = made + saved.backward
        ranks.append(RankMemory(held.stage, state.parameters, state.gradients, state.optimizer, gathered,
                                saved.saved, saved.transient, update, backward, dict(saved.buffers), accumulating,
                                dict(saved.exchange), saved.exchange_saved))
    return LayoutMemory(layout, tuple(ranks))
