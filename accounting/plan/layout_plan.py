"""A plan over a parallel layout: memory per rank of each pipeline stage, communication by axis, time with the bubble.

Where :mod:`accounting.plan.compute` sizes one data-parallel copy per device, a layout plan divides the model
among tensor (T), pipeline (P), context (C) and expert (E) parallel ranks as well
(:class:`accounting.model.parallel.layout.ParallelLayout`; the data-parallel degree D is what the devices leave).
The figures come from the library's layout functions, nothing is re-derived here:

- memory: :func:`accounting.model.parallel.memory.layout_memory`, one rank per pipeline stage (ranks of a stage
  are alike), the most loaded named; it fits when that rank's peak is at most the usable memory;
- communication: :func:`accounting.model.parallel.communication.step_traffic`, bytes each rank sends per step on
  each axis;
- time: :func:`accounting.plan.layout_time.layout_step_time`, compute at the stated MFU, the communication not
  hidden behind it over the links (:mod:`accounting.plan.links`), and the pipeline bubble.

Batch: ``micro_batch`` sequences per micro-batch on one data-parallel rank, ``micro_batches`` (m) per optimizer
step, the global batch D × m × micro-batch. Without a micro-batch, the largest that fits (with a pipeline and a
global batch, the fastest that fits: more micro-batches, a smaller bubble); without m, what the global batch
leaves, else one per step without a pipeline and P with one (torchtitan's default: P micro-batches fill it).

>>> from accounting.model.config import TransformerConfig
>>> from accounting.model.parallel.layout import ParallelLayout
>>> from accounting.plan.devices import plan_device
>>> config = TransformerConfig(layers=8, width=512, heads=8, sequence_length=1024, vocabulary=32000)
>>> plan = layout_plan(config, plan_device("H100 SXM", "bfloat16"),
...                    LayoutSettings(ParallelLayout(devices=16, tensor=2, pipeline=2)), global_batch=64)
>>> plan.layout.data, plan.global_batch == plan.layout.data * plan.micro_batches * plan.micro_batch
(4, True)
"""

import math
from dataclasses import dataclass, replace

from accounting._checks import check_choice, check_positive, check_positive_size
from accounting.errors import AccountingError, AccountingTypeError
from accounting.model.activations import ATTENTIONS, activation_formats, resolve_attention
from accounting.model.attention_kernels import SdpaKernel
from accounting.model.config import TransformerConfig
from accounting.model.flops import transformer_flops
from accounting.model.parallel.activations import RECOMPUTE_POLICIES, SELECTIVE_POLICIES
from accounting.model.parallel.communication import step_traffic
from accounting.model.parallel.layout import ParallelLayout, check_layout_for_model
from accounting.model.parallel.memory import LayoutMemory, layout_memory
from accounting.model.training_memory import OPTIMIZERS, precision_policy
from accounting.plan.compute import LARGEST_MICRO_BATCH, RunRates, attention_device, check_headroom_and_mfu
from accounting.plan.devices import PlanDevice
from accounting.plan.layout_time import LayoutTime, layout_step_time
from accounting.plan.links import Links, device_links


PHASES = {
    "forward end": "the saved activations and the loss's gradients (beside the gradients accumulating, if any)",
    "update": "the gradients and the update's temporaries",
    "recomputed backward": "the recomputed backward of the bottom block",
    "expert exchange": "the expert all-to-alls' buffers beside the activations saved by then",
    "block backward": "a block's backward with its weights and gradients gathered, beside the saved activations",
}
"""What each of :attr:`accounting.model.parallel.memory.RankMemory.phases` holds, as the reasons name it."""


@dataclass(frozen=True)
class LayoutSettings:
    """How the model is trained over a layout: everything but the model, the device and the batch.

    ``links``: the link bandwidths (:class:`accounting.plan.links.Links`), ``None`` for the device's datasheet's.
    """

    layout: ParallelLayout
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    attention: str = "sdpa"
    recompute: str = "none"
    selective: str = "attention-core"
    headroom: float = 0.1
    mfu: float = 0.4
    links: Links | None = None

    def __post_init__(self):
        if not isinstance(self.layout, ParallelLayout):
            raise AccountingTypeError(f"layout must be a ParallelLayout, got {type(self.layout).__name__}")
        precision_policy(self.precision)
        check_choice(self.optimizer, OPTIMIZERS, "optimizer")
        check_choice(self.attention, ATTENTIONS, "attention")
        check_choice(self.recompute, RECOMPUTE_POLICIES, "recompute")
        check_choice(self.selective, SELECTIVE_POLICIES, "selective policy")
        check_headroom_and_mfu(self.headroom, self.mfu)
        if self.links is not None and not isinstance(self.links, Links):
            raise AccountingTypeError(f"links must be Links, got {type(self.links).__name__}")


@dataclass(frozen=True)
class LayoutPlan(RunRates):
    """A training run over a parallel layout, sized per rank: memory, communication, time.

    ``largest_micro_batch``: the most sequences per micro-batch whose step fits on every rank (0: not even
    one), at most the per-rank batch when the global batch was given. ``reasons``: why it does not fit
    and what would (empty when it fits). ``attention_kernel``: the kernel ``attention="sdpa"`` was counted
    as (``None`` for another attention).
    """

    config: TransformerConfig
    device: PlanDevice
    settings: LayoutSettings
    usable_bytes: int
    global_batch: int
    micro_batch: int
    micro_batches: int
    largest_micro_batch: int
    memory: LayoutMemory
    traffic: tuple
    time: LayoutTime
    links: Links
    flops_per_step: int
    tokens: int | None
    reasons: tuple[str, ...]
    batch_given: bool = True
    attention_kernel: SdpaKernel | None = None

    @property
    def layout(self) -> ParallelLayout:
        return self.settings.layout

    @property
    def seconds_per_step(self) -> float:
        return self.time.total

    @property
    def days(self) -> float | None:
        """Days to train on ``tokens`` tokens at this step time (``None`` without a token budget)."""
        if self.tokens is None:
            return None
        return self.tokens / self.tokens_per_second / 86400


def _gib(count: int) -> str:
    return f"{count / 2**30:.2f} GiB"


def _memory(config, micro_batch, micro_batches, settings: LayoutSettings, device: PlanDevice) -> LayoutMemory:
    return layout_memory(config, micro_batch, settings.layout, micro_batches=micro_batches,
                         precision=settings.precision, optimizer=settings.optimizer, attention=settings.attention,
                         recompute=settings.recompute, selective=settings.selective,
                         device=attention_device(device))


def usable_bytes(device: PlanDevice, settings: LayoutSettings) -> int:
    """The device's memory less the headroom."""
    return int(device.memory_bytes * (1 - settings.headroom))


def _largest_micro_batch(fits, limit: int) -> int:
    """The largest ``batch`` ≤ ``limit`` with ``fits(batch)``, 0 if not 1 (memory grows with the batch:
    doubling, then bisection)."""
    if not fits(1):
        return 0
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def _why_not(config, settings: LayoutSettings, device: PlanDevice, memory: LayoutMemory, usable: int,
             micro_batches: int) -> tuple[str, ...]:
    """Why one sequence per micro-batch does not fit on the most loaded rank, and what would (empty if it fits)."""
    rank = memory.most_loaded
    if rank.peak <= usable:
        return ()
    layout = settings.layout
    where = f"{device.name}'s {_gib(usable)} usable ({1 - settings.headroom:.0%} of {device.memory_bytes / 1e9:g} GB)"
    states = rank.parameters + rank.gradients + rank.optimizer
    if states > usable:
        reasons = [f"the model states of pipeline stage {rank.stage}'s ranks alone need {_gib(states)} under "
                   f"{layout.describe()}, more than {where}"]
    else:
        name = rank.peak_phase
        phase, held = rank.phases[name], PHASES.get(name, name)
        left = max(usable - (rank.peak - phase), 0)
        reasons = [f"one sequence per micro-batch needs {_gib(rank.peak)} on pipeline stage {rank.stage}'s ranks "
                   f"under {layout.describe()}: its largest phase, {held} ({_gib(phase)}), does not fit in the "
                   f"{_gib(left)} left of {where} beside the weights, optimizer state and buffers"]
    remedies = []
    if settings.recompute != "full":
        remedies.append(("--recompute full", replace(settings, recompute="full")))
    if layout.sharding_stage != "zero3":
        remedies.append(("--sharding zero3", replace(settings, layout=replace(layout, sharding="zero3"))))
    for option, changed in remedies:
        if _memory(config, 1, micro_batches, changed, device).most_loaded.peak <= usable:
            reasons.append(f"with {option}, one sequence per micro-batch fits")
    return tuple(reasons)


def _batch(layout: ParallelLayout, global_batch, micro_batch, micro_batches):
    """Check the batch options against the layout; the per-rank batch (``None`` when not given)."""
    data = layout.data
    per_rank = None
    if global_batch is not None:
        global_batch = check_positive_size(global_batch, "global batch")
        if global_batch % data:
            raise AccountingError(f"global batch {global_batch} is not a multiple of the {data} data-parallel ranks "
                                  f"({layout.describe()}): each takes the same number of sequences")
        per_rank = global_batch // data
    if micro_batch is not None:
        micro_batch = check_positive_size(micro_batch, "micro-batch")
        if per_rank is not None and per_rank % micro_batch:
            raise AccountingError(f"micro-batch {micro_batch} does not divide the {per_rank} sequences per "
                                  f"data-parallel rank of global batch {global_batch}")
    if micro_batches is not None:
        micro_batches = check_positive_size(micro_batches, "micro-batches")
        if per_rank is not None and per_rank % micro_batches:
            raise AccountingError(f"micro-batches {micro_batches} does not divide the {per_rank} sequences per "
                                  f"data-parallel rank of global batch {global_batch}")
        if per_rank is not None and micro_batch is not None and micro_batch * micro_batches != per_rank:
            raise AccountingError(f"micro-batch {micro_batch} × micro-batches {micro_batches} is not the {per_rank} "
                                  f"sequences per data-parallel rank of global batch {global_batch}")
    return per_rank, micro_batch, micro_batches


def layout_plan(config: TransformerConfig, device: PlanDevice, settings: LayoutSettings, *,
                global_batch: int | None = None, micro_batch: int | None = None,
                micro_batches: int | None = None, tokens=None) -> LayoutPlan:
    """The plan for training ``config`` over ``settings.layout`` of ``device`` (see the module docstring).

    ``global_batch``: sequences per optimizer step, a multiple of the data-parallel degree D.
    ``micro_batch``: sequences per micro-batch per data-parallel rank (default: the largest that fits,
    dividing the per-rank batch; with a pipeline, the fastest that fits, for the bubble shrinks as the
    micro-batches per step grow). ``micro_batches``: per optimizer step (default: the per-rank batch /
    micro-batch, else 1, or P with a pipeline). ``tokens``: a token budget for the days it takes.
    """
    if not isinstance(config, TransformerConfig):
        raise AccountingTypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    if not isinstance(settings, LayoutSettings):
        raise AccountingTypeError(f"settings must be LayoutSettings, got {type(settings).__name__}")
    layout = settings.layout
    check_layout_for_model(config, layout)
    per_rank, micro_batch, micro_batches = _batch(layout, global_batch, micro_batch, micro_batches)
    if tokens is not None:
        tokens = math.ceil(check_positive(tokens, "tokens"))
    usable = usable_bytes(device, settings)

    def peak(batch, steps):
        return _memory(config, batch, steps, settings, device).most_loaded.peak

    links = settings.links if settings.links is not None else device_links(device.name)

    def seconds(batch, steps):
        return layout_step_time(config, layout, device, links, micro_batch=batch, micro_batches=steps,
                                mfu=settings.mfu, precision=settings.precision, recompute=settings.recompute).total

    if per_rank is not None:  # the micro-batch divides the per-rank batch; m is what it leaves
        divisors = sorted({size for low in range(1, math.isqrt(per_rank) + 1) if per_rank % low == 0
                           for size in (low, per_rank // low)})
        fitting = [size for size in divisors if peak(size, per_rank // size) <= usable]
        largest = max(fitting, default=0)
        if micro_batch is None and micro_batches is not None:
            micro_batch = per_rank // micro_batches
        elif micro_batch is None and layout.pipeline > 1 and fitting:  # the bubble shrinks as m grows
            micro_batch = min(fitting, key=lambda size: (seconds(size, per_rank // size), -size))
        elif micro_batch is None:
            micro_batch = max(largest, 1)
        micro_batches = per_rank // micro_batch
    else:
        micro_batches = micro_batches or layout.pipeline
        largest = _largest_micro_batch(lambda batch: peak(batch, micro_batches) <= usable, LARGEST_MICRO_BATCH)
        micro_batch = micro_batch or max(largest, 1)
    batch_given = global_batch is not None
    global_batch = layout.data * micro_batches * micro_batch
    memory = _memory(config, micro_batch, micro_batches, settings, device)
    reasons = _why_not(config, settings, device, _memory(config, 1, micro_batches, settings, device), usable,
                       micro_batches)
    if not reasons and memory.most_loaded.peak > usable:
        reasons = (f"micro-batch {micro_batch} needs {_gib(memory.most_loaded.peak)} on pipeline stage "
                   f"{memory.most_loaded.stage}'s ranks, more than the {_gib(usable)} usable; the largest that fits "
                   f"is {largest}",)
    traffic = step_traffic(config, micro_batch, layout, micro_batches=micro_batches, precision=settings.precision,
                           recompute=settings.recompute)
    flops = transformer_flops(config, batch_size=global_batch).training
    time = layout_step_time(config, layout, device, links, micro_batch=micro_batch, micro_batches=micro_batches,
                            mfu=settings.mfu, precision=settings.precision, recompute=settings.recompute,
                            traffic=traffic)
    _, kernel = resolve_attention(config, micro_batch, activation_formats(settings.precision), settings.attention,
                                  attention_device(device))
    return LayoutPlan(config, device, settings, usable, global_batch, micro_batch, micro_batches, largest, memory,
                      traffic, time, links, flops, tokens, tuple(reasons), batch_given, kernel)
