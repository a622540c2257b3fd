"""Seconds per optimizer step of a parallel layout: compute at an MFU, exposed communication, the bubble.

- **Compute** per rank: the step's model FLOPs (:func:`accounting.model.flops.transformer_flops`:
  matmuls, 2 FLOPs per multiply-add, full causal score matrices) divided by devices × dense peak ×
  MFU; every rank does its equal share.
- **Communication** per axis: each row of :func:`accounting.model.parallel.communication.step_traffic`
  takes its bus bytes over the bus bandwidth of its scope (:mod:`accounting.plan.links`: within a
  node or across). What is **exposed** (on the critical path), as Megatron-LM and torchtitan run them
  without their optional overlaps:

  - tensor/sequence and expert collectives: exposed, every one (each sits between two matmuls
    that need its result);
  - context parallelism's ring: overlapped with the attention of the block it serves (each step
    computes on one key/value chunk while the next arrives), exposed only beyond that attention's time;
  - pipeline sends: small, exposed at each chunk boundary;
  - data parallelism: overlapped with compute, exposed beyond the compute that can hide it — all of
    it for collectives that run every micro-batch (ZeRO-3/FSDP's gathers and reductions, ZeRO-2's
    reductions), the last micro-batch's backward for the gradients reduced once a step (DDP, ZeRO-1),
    the first micro-batch's forward for the weights gathered after the update (ZeRO-1/2);
    exposed once a step, outside the pipeline.
- **Bubble**: a pipeline of P stages idles while it fills and drains. With m micro-batches of
  stage time t (compute and exposed communication per micro-batch), GPipe and 1F1B take
  (m + P − 1)·t, a bubble of (P − 1)·t; interleaving V chunks per rank divides the fill and
  drain by V (each step is a chunk, t/V), a bubble of (P − 1)·t/V (Narayanan et al. 2021,
  "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", section 2.2:
  the bubble is (P − 1)/(V·m) of the ideal time). As a fraction of the pipeline's time:
  (P − 1)/(V·m + P − 1).

>>> bubble_fraction(4, 8), bubble_fraction(4, 8, virtual_stages=2)
(0.2727272727272727, 0.15789473684210525)
"""

from dataclasses import dataclass
from functools import lru_cache

from accounting._checks import check_positive, check_positive_size
from accounting.errors import AccountingError
from accounting.model.config import TransformerConfig
from accounting.model.flops import transformer_flops
from accounting.model.parallel.communication import busiest_rank_blocks, step_traffic
from accounting.model.parallel.layout import ParallelLayout
from accounting.plan.devices import PlanDevice
from accounting.plan.links import Links

ON_THE_PATH = ("tensor", "expert", "pipeline")
"""Axes whose communication is exposed whole, every micro-batch."""


def bubble_fraction(pipeline: int, micro_batches: int, virtual_stages: int = 1) -> float:
    """The share of a pipelined step's time its ranks idle: (P − 1)/(V·m + P − 1) (module docstring).

    >>> bubble_fraction(1, 8), bubble_fraction(2, 1)
    (0.0, 0.5)
    """
    p = check_positive_size(pipeline, "pipeline")
    m = check_positive_size(micro_batches, "micro_batches")
    v = check_positive_size(virtual_stages, "virtual_stages")
    return (p - 1) / (v * m + p - 1)


@dataclass(frozen=True)
class LayoutTime:
    """One optimizer step of a layout: seconds of compute, of communication by axis (``communication``:
    all of it; ``exposed``: on the critical path), of pipeline bubble; on the slowest ``stage``."""

    layout: ParallelLayout
    micro_batch: int
    micro_batches: int
    compute: float
    communication: dict
    exposed: dict
    bubble: float
    stage: int
    tokens_per_step: int

    @property
    def total(self) -> float:
        """Seconds per optimizer step."""
        return self.compute + sum(self.exposed.values()) + self.bubble

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.total

    @property
    def bottleneck(self) -> str:
        """What, beside compute, costs the step most: an axis's exposed communication or the bubble."""
        costs = {**{axis: seconds for axis, seconds in self.exposed.items() if seconds > 0}, "bubble": self.bubble}
        name, seconds = max(costs.items(), key=lambda item: item[1])
        return name if seconds > 0 else "compute"


def attention_seconds(config: TransformerConfig, layout: ParallelLayout, micro_batch: int, micro_batches: int,
                      flops_per_second: float) -> float:
    """Seconds one rank spends in the attention core (scores and mixing, forward and backward) of the
    busiest stage's blocks in a step: its s/C queries against all s keys, its H/T heads, at this rate."""
    s, c = config.sequence_length, layout.context
    per_sequence = 2 * (s // c) * s * (config.heads // layout.tensor) * (config.head_width + config.value_head_width)
    blocks = busiest_rank_blocks(config, layout)
    return 3 * per_sequence * blocks * micro_batch * micro_batches / flops_per_second


@lru_cache(maxsize=64)
def training_flops_per_sequence(config: TransformerConfig) -> int:
    """Model FLOPs of one sequence's forward and backward (a step's are this × its sequences: every
    term of :func:`transformer_flops` is linear in the batch)."""
    return transformer_flops(config, batch_size=1).training


def _data_window(sharding: str, collective: str, compute: float, micro_batches: int) -> float:
    """The compute that hides a data-parallel collective (module docstring)."""
    if sharding == "zero3" or (sharding == "zero2" and collective == "reduce-scatter"):
        return compute
    if collective == "all-gather":  # the updated weights, before the next step's first forward
        return compute / (3 * micro_batches)
    return 2 * compute / (3 * micro_batches)  # the gradients, during the last micro-batch's backward


def layout_step_time(config: TransformerConfig, layout: ParallelLayout, device: PlanDevice, links: Links, *,
                     micro_batch: int, micro_batches: int = 1, mfu: float = 0.4, precision="bf16-mixed",
                     recompute: str = "none", traffic=None) -> LayoutTime:
    """Seconds per step of ``layout`` at ``micro_batch`` sequences × ``micro_batches`` per data-parallel rank
    (the global batch is D × m × b), on ``device`` at ``mfu`` over ``links`` (see the module docstring).

    ``traffic``: :func:`step_traffic`'s rows when already computed.

    >>> from accounting.plan.devices import plan_device
    >>> from accounting.plan.links import device_links
    >>> config = TransformerConfig(layers=8, width=1024, heads=8, sequence_length=2048, vocabulary=32000)
    >>> time = layout_step_time(config, ParallelLayout(devices=16, tensor=8, pipeline=2), plan_device(
    ...     "H100 SXM", "bfloat16"), device_links("H100 SXM"), micro_batch=1, micro_batches=8)
    >>> round(time.bubble / (time.total - time.exposed.get("data", 0)), 4) == round(bubble_fraction(2, 8), 4)
    True
    """
    b = check_positive_size(micro_batch, "micro_batch")
    m = check_positive_size(micro_batches, "micro_batches")
    rate = check_positive(mfu, "mfu")
    if rate > 1:
        raise AccountingError(f"mfu is a fraction of the peak and cannot exceed 1, got {mfu!r}")
    rows = traffic if traffic is not None else step_traffic(config, b, layout, micro_batches=m, precision=precision,
                                                           recompute=recompute)
    global_batch = layout.data * m * b
    flops_per_second = device.peak_flops_per_second * rate
    compute = training_flops_per_sequence(config) * global_batch / (layout.devices * flops_per_second)
    attention = attention_seconds(config, layout, b, m, flops_per_second)
    best = None
    for stage in range(layout.pipeline):
        mine = [row for row in rows if row.stage in (None, stage)]
        seconds: dict[str, float] = {}
        for row in mine:
            seconds[row.axis] = seconds.get(row.axis, 0.0) + row.bytes / links.bandwidth(row.within_node)
        exposed = {axis: seconds[axis] for axis in ON_THE_PATH if axis in seconds}
        if "context" in seconds:
            exposed["context"] = max(0.0, seconds["context"] - attention)
        windows: dict[float, float] = {}
        for row in mine:
            if row.axis == "data":
                window = _data_window(layout.sharding_stage, row.collective, compute, m)
                windows[window] = windows.get(window, 0.0) + row.bytes / links.bandwidth(row.within_node)
        if windows:
            exposed["data"] = sum(max(0.0, busy - window) for window, busy in windows.items())
        per_micro_batch = (compute + sum(exposed.get(axis, 0.0) for axis in (*ON_THE_PATH, "context"))) / m
        bubble = (layout.pipeline - 1) / layout.virtual_stages * per_micro_batch
        result = LayoutTime(layout, b, m, compute, seconds, exposed, bubble, stage,
                            global_batch * config.sequence_length)
        if best is None or result.total > best.total:
            best = result
    return best
