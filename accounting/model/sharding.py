"""Model states per device under data parallelism: replicated (DDP) or partitioned (ZeRO, FSDP).

Model states are the parameters, their gradients and the optimizer's state (for mixed
precision this includes the fp32 master copy, as the ZeRO paper counts it). With Ψ
parameters, N data-parallel devices and K bytes of optimizer state per parameter
(mixed-precision Adam: K = 12, fp32 master + two moments; 2-byte weights and gradients),
each device holds (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models", arXiv:1910.02054, section 5 and Table 1)::

    sharding                      parameters   gradients   optimizer   mixed-precision Adam
    None, "ddp"  (replicated)     2Ψ           2Ψ          KΨ          (2 + 2 + K)Ψ
    "zero1"      (P_os)           2Ψ           2Ψ          KΨ/N        4Ψ + KΨ/N
    "zero2"      (P_os+g)         2Ψ           2Ψ/N        KΨ/N        2Ψ + (2 + K)Ψ/N
    "zero3"      (P_os+g+p)       2Ψ/N         2Ψ/N        KΨ/N        (2 + 2 + K)Ψ/N

FSDP's strategies are the same partitions: ``"full_shard"`` (and ``"fsdp"``, FSDP's default
strategy and what FSDP2's ``fully_shard`` does) is ``"zero3"``, ``"shard_grad_op"`` is
``"zero2"``, ``"no_shard"`` is ``"ddp"``. ``None`` (or ``"none"``) is one device holding
everything, whatever ``devices`` says. Hybrid sharding (within a node, replicated across
nodes) needs the node size and is not modelled.

**A part that does not divide evenly.** DeepSpeed's ZeRO and FSDP's flat parameter lay a
part's elements out in one flat buffer padded to a multiple of N, so each device holds
⌈elements / N⌉ elements: the devices together hold the part plus fewer than N elements of
padding. Given ``parameter_count=Ψ``, a device holds ⌈Ψ / N⌉ parameters' share of each part
(rounded up to a whole byte); without it, each byte counts as an element (⌈bytes / N⌉),
which differs from the padded figure by less than one element's bytes. Per-tensor sharding
(FSDP2, ZeRO-3's gathering) pads each tensor rather than the whole, which adds fewer than N
elements per tensor: left out. So is what a sharded step gathers for a moment (ZeRO-3: one
layer's full parameters, ZeRO-2: a bucket of full gradients): that is working memory, not
model state.

>>> states = sharded_model_states(2 * 10**9, 2 * 10**9, 12 * 10**9, "zero3", 8, parameter_count=10**9)
>>> states.parameters, states.gradients, states.optimizer, states.total
(250000000, 250000000, 1500000000, 2000000000)
>>> sharded_model_states(2 * 10**9, 2 * 10**9, 12 * 10**9, "zero1", 8).total == 4 * 10**9 + 12 * 10**9 // 8
True
"""

from dataclasses import dataclass

from accounting._checks import check_positive_size, check_size
from accounting.errors import AccountingError, AccountingTypeError

NONE, DDP, ZERO1, ZERO2, ZERO3 = "none", "ddp", "zero1", "zero2", "zero3"

_PARTITIONED = {
    NONE: frozenset(),
    DDP: frozenset(),
    ZERO1: frozenset({"optimizer"}),
    ZERO2: frozenset({"optimizer", "gradients"}),
    ZERO3: frozenset({"optimizer", "gradients", "parameters"}),
}
"""Which model states each stage partitions across the data-parallel devices (the rest are replicated)."""

SHARDING_ALIASES = {
    # source: torch.distributed.fsdp.ShardingStrategy (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD); FULL_SHARD
    # is FSDP's default and what FSDP2's fully_shard does with reshard_after_forward=True (its default).
    "full_shard": ZERO3,
    "fsdp": ZERO3,
    "shard_grad_op": ZERO2,
    "no_shard": DDP,
}
"""Other names for the stages: FSDP's sharding strategies, lower case."""

SHARDINGS = (*_PARTITIONED, *SHARDING_ALIASES)
"""Every accepted ``sharding`` name (``None`` is accepted too, as ``"none"``)."""


def sharding_stage(sharding) -> str:
    """The stage a sharding name means: ``"none"``, ``"ddp"``, ``"zero1"``, ``"zero2"`` or ``"zero3"``.

    Case and surrounding spaces are ignored; ``None`` is ``"none"``.

    >>> sharding_stage("FULL_SHARD"), sharding_stage("shard_grad_op"), sharding_stage(None)
    ('zero3', 'zero2', 'none')
    >>> sharding_stage("zero4")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: sharding must be one of 'none', 'ddp', 'zero1', 'zero2', 'zero3', 'full_shard', 'fsdp', 'shard_grad_op', 'no_shard', got 'zero4'
    """
    if sharding is None:
        return NONE
    if not isinstance(sharding, str):
        raise AccountingTypeError(f"sharding must be a name such as 'zero3' or None, got {sharding!r}")
    name = sharding.strip().lower()
    if name not in SHARDINGS:
        listed = ", ".join(repr(choice) for choice in SHARDINGS)
        raise AccountingError(f"sharding must be one of {listed}, got {sharding!r}")
    return SHARDING_ALIASES.get(name, name)


def shard_size(size: int, devices: int) -> int:
    """Elements each device holds of ``size`` elements padded to a multiple of ``devices``: ⌈size / devices⌉.

    >>> shard_size(10, 4), shard_size(12, 4), shard_size(0, 4)
    (3, 3, 0)
    """
    size = check_size(size, "size")
    devices = check_positive_size(devices, "devices")
    return -(-size // devices)


@dataclass(frozen=True)
class ShardedStates:
    """Bytes of model states one device holds: ``parameters``, ``gradients``, ``optimizer`` (and ``total``).

    ``sharding`` is the stage (:func:`sharding_stage`), ``devices`` the data-parallel degree.
    """

    sharding: str
    devices: int
    parameters: int
    gradients: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer


def _share(part_bytes: int, devices: int, parameter_count: int | None) -> int:
    """One device's bytes of a partitioned part (see the module docstring for the padding)."""
    if parameter_count is None or part_bytes == 0:
        return shard_size(part_bytes, devices)
    # ⌈Ψ/N⌉ parameters' share of the part's bytes, rounded up to a whole byte.
    return -(-shard_size(parameter_count, devices) * part_bytes // parameter_count)


def sharded_model_states(
    parameter_bytes: int,
    gradient_bytes: int,
    optimizer_bytes: int,
    sharding,
    devices: int,
    *,
    parameter_count: int | None = None,
) -> ShardedStates:
    """Bytes of parameters, gradients and optimizer state each of ``devices`` devices holds under ``sharding``.

    The three sizes are the whole model's (one replica). ``optimizer_bytes`` is everything the
    optimizer keeps: its state and, under mixed precision, the fp32 master weights. ``sharding``:
    ``None``/``"none"``, ``"ddp"``, ``"zero1"``, ``"zero2"``, ``"zero3"`` or an FSDP strategy name
    (the table in the module docstring). ``parameter_count``: Ψ, to divide each part as the
    padded flat buffer of Ψ parameters is divided (⌈Ψ/N⌉ parameters per device); without it,
    bytes are divided directly (⌈bytes/N⌉).

    >>> psi = 7_500_000_000  # the ZeRO paper's Table 1: 7.5B parameters, K = 12, 64 devices
    >>> states = sharded_model_states(2 * psi, 2 * psi, 12 * psi, "zero2", 64, parameter_count=psi)
    >>> round(states.total / 1e9, 1)  # GB
    16.6
    """
    sizes = {
        "parameters": check_size(parameter_bytes, "parameter_bytes"),
        "gradients": check_size(gradient_bytes, "gradient_bytes"),
        "optimizer": check_size(optimizer_bytes, "optimizer_bytes"),
    }
    devices = check_positive_size(devices, "devices")
    stage = sharding_stage(sharding)
    if parameter_count is not None:
        parameter_count = check_size(parameter_count, "parameter_count")
        if parameter_count == 0 and any(sizes.values()):
            raise AccountingError(f"parameter_count is 0 but the model states are not empty: {sizes}")
    partitioned = _PARTITIONED[stage]
    per_device = {
        part: _share(size, devices, parameter_count) if part in partitioned else size
        for part, size in sizes.items()
    }
    return ShardedStates(stage, devices, **per_device)
