"""Which parallel layouts fit a model on a number of devices, and which is fastest.

Every layout of the devices is tried within these bounds, as the training stacks' guides narrow them:

- T, tensor parallelism: the divisors of the node size (it must stay on NVLink) that divide the heads,
  the MLP's width and the devices; sequence parallelism on (Megatron's and torchtitan's default);
- P, pipeline parallelism: divisors of the devices that divide the blocks; 1F1B, and interleaved
  1F1B with V = 2 where the blocks divide into 2P chunks and the micro-batches into P groups;
- C, context parallelism: powers of 2 where the sequence divides into 2·C·T pieces, only with a fused
  attention kernel (``attention="sdpa"``: ring attention runs on flash/efficient kernels);
- E, expert parallelism (mixture-of-experts models only): powers of 2 dividing the routed experts and
  the T·C·D ranks of a stage, up to the node size;
- sharding: ZeRO-1 (Megatron's distributed optimizer), ZeRO-3/FSDP, and HSDP where a node holds
  fewer than all of the D·C ranks;
- the micro-batch: per layout, each that fits and divides the D ranks' share of ``global_batch``
  (memory grows with it, so the first that does not fit ends the list), the fastest kept: more
  micro-batches shrink the bubble but repeat ZeRO-3's gathers.

A layout fits when its most loaded rank's peak (:func:`accounting.model.parallel.memory.layout_memory`)
is at most the device's memory less ``headroom``; the ones that fit are ranked by seconds per step
(:func:`accounting.plan.layout_time.layout_step_time`).

>>> from accounting.model.config import TransformerConfig
>>> from accounting.plan.devices import plan_device
>>> config = TransformerConfig(layers=8, width=1024, heads=16, sequence_length=2048, vocabulary=32000)
>>> rows = search_layouts(config, plan_device("H100 SXM", "bfloat16"), 16, global_batch=64, limit=3)
>>> len(rows), rows[0].seconds_per_step <= rows[-1].seconds_per_step
(3, True)
"""

from dataclasses import dataclass, replace

from accounting._checks import check_choice, check_positive, check_positive_size, check_real
from accounting.errors import AccountingError, AccountingTypeError
from accounting.model.config import TransformerConfig
from accounting.model.parallel.communication import RECOMPUTE_POLICIES, step_traffic
from accounting.model.parallel.layout import DEFAULT_NODE_SIZE, HSDP, ParallelLayout
from accounting.model.parallel.memory import layout_memory
from accounting.model.parallel.states import check_config_and_layout
from accounting.plan.devices import PlanDevice
from accounting.plan.layout_time import LayoutTime, layout_step_time
from accounting.plan.links import Links, device_links

SEARCH_SHARDINGS = ("zero1", "zero3", HSDP)
INTERLEAVED_STAGES = 2
"""Virtual stages tried with interleaved 1F1B."""


@dataclass(frozen=True)
class LayoutChoice:
    """A layout that fits, at its micro-batch: its most loaded rank's peak and its time per step."""

    layout: ParallelLayout
    micro_batch: int
    micro_batches: int
    peak: int
    most_loaded_stage: int
    time: LayoutTime

    @property
    def seconds_per_step(self) -> float:
        return self.time.total

    @property
    def tokens_per_second(self) -> float:
        return self.time.tokens_per_second

    @property
    def bottleneck(self) -> str:
        return self.time.bottleneck


def _divisors(number: int) -> list[int]:
    return [d for d in range(1, number + 1) if number % d == 0]


def _powers_of_two(limit: int) -> list[int]:
    powers, value = [], 1
    while value <= limit:
        powers.append(value)
        value *= 2
    return powers


def candidate_layouts(config: TransformerConfig, devices: int, *, node_size: int = DEFAULT_NODE_SIZE,
                      attention: str = "sdpa") -> list[ParallelLayout]:
    """Every layout the search tries (module docstring), each one the model can be divided by.

    >>> config = TransformerConfig(layers=4, width=64, heads=4, sequence_length=64, vocabulary=100)
    >>> sorted({layout.tensor for layout in candidate_layouts(config, 8)})
    [1, 2, 4]
    """
    layouts = []
    for t in _divisors(min(node_size, devices)):
        if devices % t or config.heads % t or config.ffn_width % t:
            continue
        for p in _divisors(devices // t):
            if config.layers % p:
                continue
            contexts = _powers_of_two(devices // (t * p)) if attention != "eager" else [1]
            for c in contexts:
                if devices % (t * p * c):
                    continue
                stage_ranks = devices // p
                experts = [1] if config.experts == 1 else [
                    e for e in _powers_of_two(min(node_size, config.experts)) if stage_ranks % e == 0]
                for e in experts:
                    schedules = [("1f1b", 1)]
                    if p > 1 and config.layers % (INTERLEAVED_STAGES * p) == 0:
                        schedules.append(("interleaved-1f1b", INTERLEAVED_STAGES))
                    for schedule, v in schedules:
                        for sharding in SEARCH_SHARDINGS:
                            try:
                                layout = ParallelLayout(devices=devices, tensor=t, pipeline=p, context=c, expert=e,
                                                        schedule=schedule, virtual_stages=v, sharding=sharding,
                                                        node_size=node_size)
                                check_config_and_layout(config, layout)
                            except AccountingError:
                                continue
                            if sharding == HSDP and layout.sharding_degree == layout.data * layout.context:
                                continue  # the same as zero3
                            layouts.append(layout)
    return layouts


def search_layouts(config: TransformerConfig, device: PlanDevice, devices: int, *, global_batch: int,
                   sequence_length: int | None = None, precision="bf16-mixed", optimizer: str = "adamw",
                   attention: str = "sdpa", recompute: str = "none", selective: str = "attention-core",
                   mfu: float = 0.4, headroom: float = 0.1,
                   links: Links | None = None, node_size: int = DEFAULT_NODE_SIZE, limit: int = 10,
                   memory_fn=layout_memory) -> tuple[LayoutChoice, ...]:
    """The ``limit`` fastest layouts of ``devices`` devices that fit, fastest first (see the module docstring).

    ``global_batch``: sequences per optimizer step; ``sequence_length`` replaces the config's. ``precision``,
    ``optimizer``, ``attention``, ``recompute`` and ``selective`` as for ``layout_memory``.
    ``links``: the bandwidths (default: the device's datasheet's, :func:`device_links`).
    ``memory_fn``: ``layout_memory``'s stand-in (same arguments, a result with ``most_loaded.peak`` and
    ``.stage``).
    """
    if not isinstance(config, TransformerConfig):
        raise AccountingTypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    if not isinstance(device, PlanDevice):
        raise AccountingTypeError(f"device must be a PlanDevice (plan_device(...)), got {type(device).__name__}")
    devices = check_positive_size(devices, "devices")
    global_batch = check_positive_size(global_batch, "global batch")
    limit = check_positive_size(limit, "limit")
    check_choice(recompute, RECOMPUTE_POLICIES, "recompute")
    headroom = check_real(headroom, "headroom")
    if not 0 <= headroom < 1:
        raise AccountingError(f"headroom is the fraction of device memory kept free, in [0, 1), got {headroom!r}")
    check_positive(mfu, "mfu")
    if sequence_length is not None:
        config = replace(config, sequence_length=check_positive_size(sequence_length, "sequence length"))
    links = links if links is not None else device_links(device.name)
    usable = int(device.memory_bytes * (1 - headroom))
    settings = dict(precision=precision, recompute=recompute)

    def memory(layout, batch, count):
        result = memory_fn(config, batch, layout, micro_batches=count, precision=precision, optimizer=optimizer,
                           attention=attention, recompute=recompute, selective=selective,
                           device=device.attention_device)
        return result.most_loaded

    choices = []
    for layout in candidate_layouts(config, devices, node_size=node_size, attention=attention):
        if global_batch % layout.data:
            continue
        per_rank = global_batch // layout.data
        sizes = [b for b in _divisors(per_rank) if layout.schedule != "interleaved-1f1b"
                 or (per_rank // b) % layout.pipeline == 0]
        fitting = {}
        for batch in sizes:  # memory grows with the micro-batch: stop at the first that does not fit
            rank = memory(layout, batch, per_rank // batch)
            if rank.peak > usable:
                break
            fitting[batch] = rank
        if not fitting:
            continue
        best = None
        for batch, rank in fitting.items():
            count = per_rank // batch
            traffic = step_traffic(config, batch, layout, micro_batches=count, **settings)
            time = layout_step_time(config, layout, device, links, micro_batch=batch, micro_batches=count, mfu=mfu,
                                    traffic=traffic, **settings)
            choice = LayoutChoice(layout, batch, count, rank.peak, rank.stage, time)
            if best is None or choice.seconds_per_step < best.seconds_per_step:
                best = choice
        choices.append(best)
    choices.sort(key=lambda choice: (choice.seconds_per_step, choice.layout.model_parallel, choice.peak))
    return tuple(choices[:limit])
