"""How a training run's devices are arranged: the parallel axes and what each one divides.

A layout is a set of divisors. ``devices`` = T × P × C × D, where

- T, ``tensor``: tensor parallelism (Megatron's column/row split of each block's matrices, the heads and the
  MLP's width divided T ways, the vocabulary divided T ways in the embedding and the loss); with
  ``sequence_parallel`` (the default, as Megatron-LM and torchtitan run it) the norms, dropouts and residual
  stream between the matrices are divided T ways along the sequence;
- P, ``pipeline``: pipeline parallelism, the blocks divided into P stages (``virtual_stages`` V chunks per rank
  with ``schedule="interleaved-1f1b"``), run by ``schedule`` over the step's micro-batches;
- C, ``context``: context parallelism (ring attention), each sequence divided C ways, keys and values passed
  around the ring;
- D, :attr:`ParallelLayout.data`: what is left, the data-parallel copies, over which ``sharding`` (DDP, ZeRO-1/2/3,
  FSDP, or ``"hsdp"``: ZeRO-3 within a node, replicated across nodes) divides the model states. CP ranks
  hold the same weights, so the states are divided over D × C ranks, as Megatron's distributed optimizer and
  torchtitan's FSDP mesh (``dp_shard_cp``) divide them.

E, ``expert``: expert parallelism, each layer's routed experts divided E ways. Its ranks are borrowed from
the T × C × D ranks of a pipeline stage (Megatron-core's expert layout: EP × ETP × EDP = T × C × D), with
``expert_tensor`` (ETP) ways of tensor parallelism inside each expert (1 by default, torchtitan's default and
common practice for fine-grained experts); the ranks holding the same expert shard are the expert data
parallel group, EDP = T × C × D / (E × ETP), over which ``sharding`` divides the experts' states.

>>> layout = ParallelLayout(devices=64, tensor=8, pipeline=4)
>>> layout.data, layout.model_parallel, layout.sharding_degree
(2, 32, 2)
>>> moe = ParallelLayout(devices=64, tensor=2, pipeline=2, expert=8, sharding="zero1")
>>> moe.data, moe.expert_data, moe.sharding_degree
(16, 4, 16)
>>> ParallelLayout(devices=12, tensor=8)
Traceback (most recent call last):
...
accounting.errors.AccountingError: devices 12 is not a multiple of tensor × pipeline × context = 8 × 1 × 1 = 8
"""

from dataclasses import dataclass

from accounting._checks import check_choice, check_positive_size
from accounting.errors import AccountingError, AccountingTypeError
from accounting.model.sharding import SHARDINGS, sharding_stage

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")
"""Pipeline schedules: GPipe (every micro-batch's forward, then every backward), 1F1B (one forward, one
backward once the pipeline is full: PipeDream-Flush, Megatron's default) and interleaved 1F1B (V model chunks
per rank, Megatron's virtual pipeline)."""

HSDP = "hsdp"
"""Hybrid sharding: ZeRO-3 among the data-parallel ranks of one node, replicated across nodes."""

LAYOUT_SHARDINGS = (*SHARDINGS, HSDP)
"""Every ``sharding`` a layout accepts: :data:`accounting.model.sharding.SHARDINGS` and ``"hsdp"``."""

DEFAULT_NODE_SIZE = 8
"""Devices per node when none is given (an HGX/DGX board: 8 GPUs on NVLink)."""


@dataclass(frozen=True)
class ParallelLayout:
    """The parallel degrees of a run (see the module docstring); ``data`` is what ``devices`` leaves.

    ``node_size``: devices per node (the NVLink domain): where HSDP's shards end, and which axes cross
    the network (tensor parallelism is placed innermost, then context, expert, data, pipeline outermost).
    """

    devices: int = 1
    tensor: int = 1
    pipeline: int = 1
    context: int = 1
    expert: int = 1
    expert_tensor: int = 1
    sequence_parallel: bool = True
    schedule: str = "1f1b"
    virtual_stages: int = 1
    sharding: str = "ddp"
    node_size: int = DEFAULT_NODE_SIZE

    def __post_init__(self):
        for name in ("devices", "tensor", "pipeline", "context", "expert", "expert_tensor", "virtual_stages",
                     "node_size"):
            check_positive_size(getattr(self, name), name)
        if not isinstance(self.sequence_parallel, bool):
            raise AccountingTypeError(f"sequence_parallel must be True or False, got {self.sequence_parallel!r}")
        check_choice(self.schedule, SCHEDULES, "schedule")
        if not isinstance(self.sharding, str) and self.sharding is not None:
            raise AccountingTypeError(f"sharding must be a name such as 'zero3', got {self.sharding!r}")
        name = "none" if self.sharding is None else self.sharding.strip().lower()
        object.__setattr__(self, "sharding", HSDP if name == HSDP else sharding_stage(name))
        model_parallel = self.tensor * self.pipeline * self.context
        if self.devices % model_parallel:
            raise AccountingError(
                f"devices {self.devices} is not a multiple of tensor × pipeline × context = {self.tensor} × "
                f"{self.pipeline} × {self.context} = {model_parallel}")
        if self.virtual_stages > 1 and self.schedule != "interleaved-1f1b":
            raise AccountingError(f"virtual_stages {self.virtual_stages} needs schedule 'interleaved-1f1b', "
                                  f"got {self.schedule!r}")
        if self.schedule == "interleaved-1f1b" and self.pipeline == 1:
            raise AccountingError("schedule 'interleaved-1f1b' needs pipeline parallelism (pipeline > 1)")
        stage_ranks = self.tensor * self.context * self.data
        if stage_ranks % (self.expert * self.expert_tensor):
            raise AccountingError(
                f"expert × expert_tensor = {self.expert} × {self.expert_tensor} must divide the tensor × context × "
                f"data = {self.tensor} × {self.context} × {self.data} = {stage_ranks} ranks of a pipeline stage")

    @property
    def data(self) -> int:
        """D: the data-parallel degree, ``devices`` / (T × P × C)."""
        return self.devices // (self.tensor * self.pipeline * self.context)

    @property
    def model_parallel(self) -> int:
        """T × P × C: the devices one copy of the model is spread over."""
        return self.tensor * self.pipeline * self.context

    @property
    def stages(self) -> int:
        """Model chunks the blocks are divided into: P × V."""
        return self.pipeline * self.virtual_stages

    @property
    def sharding_stage(self) -> str:
        """The ZeRO stage the states are divided under (``"hsdp"`` is ``"zero3"``)."""
        return "zero3" if self.sharding == HSDP else self.sharding

    @property
    def sharding_degree(self) -> int:
        """Ranks the dense states are divided over: D × C, or under HSDP those of them within one node.

        Tensor parallelism is innermost, so a node holds ``node_size`` / T ranks of the D × C group.
        """
        group = self.data * self.context
        if self.sharding != HSDP:
            return group
        in_node = max(1, self.node_size // self.tensor)
        degree = min(group, in_node)
        while group % degree:  # the largest divisor of the group that fits in a node
            degree -= 1
        return degree

    @property
    def expert_data(self) -> int:
        """EDP: ranks holding the same shard of the routed experts, T × C × D / (E × ETP)."""
        return self.tensor * self.context * self.data // (self.expert * self.expert_tensor)

    @property
    def expert_sharding_degree(self) -> int:
        """Ranks the routed experts' states are divided over: EDP, or under HSDP those within one node."""
        if self.sharding != HSDP:
            return self.expert_data
        in_node = max(1, self.node_size // (self.expert * self.expert_tensor))
        degree = min(self.expert_data, in_node)
        while self.expert_data % degree:
            degree -= 1
        return degree

    def describe(self) -> str:
        """The layout in one line, the axes above 1 only.

        >>> ParallelLayout(devices=64, tensor=8, pipeline=4, sharding="zero1").describe()
        'TP 8 (SP) × PP 4 (1f1b) × DP 2 (zero1)'
        """
        parts = []
        if self.tensor > 1:
            parts.append(f"TP {self.tensor}" + (" (SP)" if self.sequence_parallel else ""))
        if self.pipeline > 1:
            virtual = f", V {self.virtual_stages}" if self.virtual_stages > 1 else ""
            parts.append(f"PP {self.pipeline} ({self.schedule}{virtual})")
        if self.context > 1:
            parts.append(f"CP {self.context}")
        if self.expert > 1:
            parts.append(f"EP {self.expert}" + (f" (ETP {self.expert_tensor})" if self.expert_tensor > 1 else ""))
        parts.append(f"DP {self.data} ({self.sharding})")
        return " × ".join(parts)


def check_layout_for_model(config, layout: ParallelLayout) -> None:
    """Raise :class:`AccountingError` naming the value when ``layout`` cannot divide ``config``'s model.

    Heads and the MLP's width must divide T ways (key/value heads fewer than T are replicated, as Megatron
    does); the blocks must divide into P × V stages; the routed experts E ways; the sequence C ways (2C
    chunks: ring attention balances the causal work by giving each rank two) and, with sequence parallelism,
    its C-th part T ways.

    >>> from accounting.model.config import TransformerConfig
    >>> config = TransformerConfig(layers=6, width=64, heads=4, sequence_length=32, vocabulary=100)
    >>> check_layout_for_model(config, ParallelLayout(devices=8, tensor=8))
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: tensor 8 must divide the 4 query heads
    """
    checks = [
        (config.heads % layout.tensor == 0, f"tensor {layout.tensor} must divide the {config.heads} query heads"),
        (config.kv_heads % layout.tensor == 0 or layout.tensor % config.kv_heads == 0,
         f"tensor {layout.tensor} and the {config.kv_heads} key/value heads must divide one or the other"),
        (config.ffn_width % layout.tensor == 0,
         f"tensor {layout.tensor} must divide the MLP width {config.ffn_width}"),
        (config.vocabulary >= layout.tensor, f"tensor {layout.tensor} is more than the vocabulary {config.vocabulary}"),
        (config.layers >= layout.stages,
         f"pipeline × virtual_stages = {layout.stages} stages is more than the {config.layers} blocks"),
        (config.experts % layout.expert == 0 if config.experts > 1 else layout.expert == 1,
         f"expert {layout.expert} must divide the {config.experts} routed experts" if config.experts > 1 else
         f"expert {layout.expert} needs a mixture-of-experts model; this one is dense"),
        (config.sequence_length % (2 * layout.context) == 0 if layout.context > 1 else True,
         f"context {layout.context}: the sequence of {config.sequence_length} tokens must divide into "
         f"2 × {layout.context} chunks"),
    ]
    if layout.tensor > 1 and layout.sequence_parallel:
        local = config.sequence_length // layout.context
        checks.append((local % layout.tensor == 0,
                       f"sequence parallelism: the {local} tokens of a rank's sequence must divide tensor "
                       f"{layout.tensor} ways"))
    for holds, message in checks:
        if not holds:
            raise AccountingError(message)
