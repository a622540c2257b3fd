"""The numbers of a plan: memory per device by part, whether it fits, the micro-batch, FLOPs and time.

Memory per device is the package's model of a training step,
:func:`accounting.transformer_training_memory` with its ``sharding`` and ``devices`` (model
states divided as :func:`accounting.model.sharding.sharded_model_states` divides them, and the unit
ZeRO-3 gathers), its ``attention`` and ``recompute``. A plan *fits* when the peak is at most
the device's usable memory: its capacity less ``headroom`` (a fraction kept for what no
formula here counts — the CUDA context, communication buffers, allocator fragmentation).

Time is napkin arithmetic at a stated MFU: a step's model FLOPs (matmuls only, 2 per
multiply-add, full causal score matrices, as :func:`accounting.transformer_flops` counts
them and as MFU is usually reported) divided by devices × dense peak × MFU. Recomputed
work is not model FLOPs: it lowers the MFU a run reaches, so it is the MFU's business.
"""

import math
from dataclasses import dataclass, replace

from accounting._checks import check_choice, check_positive, check_positive_size, check_real
from accounting.model.activations import ATTENTIONS, RECOMPUTES
from accounting.model.attention_kernels import AttentionDevice, SdpaKernel
from accounting.errors import AccountingError, AccountingTypeError
from accounting.plan.devices import PlanDevice
from accounting.model.sharding import ZERO3, sharding_stage
from accounting.model.training_memory import transformer_training_memory
from accounting.model.config import TransformerConfig
from accounting.model.flops import training_time, transformer_flops

LARGEST_MICRO_BATCH = 2**20
"""Where the search for the largest micro-batch that fits stops (sequences per device)."""

MOST_DEVICES = 2**17
"""Where the search for the fewest devices that fit stops."""

ASSUMED_ATTENTION_DEVICE = AttentionDevice("cuda", (8, 0))
"""The GPU whose attention kernels a plan assumes for a device of unknown compute capability (an A100's)."""


def attention_device(device: PlanDevice) -> AttentionDevice:
    """The device whose SDPA kernel the plan counts: the device's own, else :data:`ASSUMED_ATTENTION_DEVICE`."""
    return device.attention_device or ASSUMED_ATTENTION_DEVICE


@dataclass(frozen=True)
class PlanSettings:
    """How the model is trained: everything but the model, the device and the batch."""

    devices: int = 1
    sharding: str = "ddp"
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    attention: str = "sdpa"
    recompute: str = "none"
    headroom: float = 0.1
    mfu: float = 0.4

    def __post_init__(self):
        check_positive_size(self.devices, "devices")
        object.__setattr__(self, "sharding", sharding_stage(self.sharding))
        check_choice(self.attention, ATTENTIONS, "attention")
        check_choice(self.recompute, RECOMPUTES, "recompute")
        check_headroom_and_mfu(self.headroom, self.mfu)


def check_headroom_and_mfu(headroom, mfu) -> None:
    """Raise naming the value unless ``headroom`` is a fraction in [0, 1) and ``mfu`` one in (0, 1].

    >>> check_headroom_and_mfu(0.1, 1.5)
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: mfu is a fraction of the peak and cannot exceed 1, got 1.5
    """
    fraction = check_real(headroom, "headroom")
    if not 0 <= fraction < 1:
        raise AccountingError(f"headroom is the fraction of device memory kept free, in [0, 1), got {fraction!r}")
    if check_positive(mfu, "mfu") > 1:
        raise AccountingError(f"mfu is a fraction of the peak and cannot exceed 1, got {mfu!r}")


@dataclass(frozen=True)
class DeviceMemory:
    """Bytes one device holds in a step, by part (:class:`accounting.TrainingMemory`'s, master weights
    counted with the optimizer state), and its peak."""

    micro_batch: int
    parameters: int
    gradients: int
    optimizer: int
    gathered: int
    activations: int
    transient: int
    update: int
    backward: int
    peak: int
    attention: str = "eager"
    attention_kernel: SdpaKernel | None = None
    local_attention_kernel: SdpaKernel | None = None

    @property
    def model_states(self) -> int:
        return self.parameters + self.gradients + self.optimizer


def device_memory(config: TransformerConfig, micro_batch: int, settings: PlanSettings,
                  device: AttentionDevice = ASSUMED_ATTENTION_DEVICE) -> DeviceMemory:
    """Bytes per device of a step of ``micro_batch`` sequences per device, with ``--attention sdpa``
    counted as the kernel SDPA runs on ``device`` (``attention`` and ``attention_kernel`` say which).

    The peak is :class:`accounting.TrainingMemory`'s: weights, master weights, optimizer state
    and the unit ZeRO-3 gathers throughout, and the largest phase — the saved activations with
    the loss's transient gradients, the gradients with the update's temporaries, or (with
    recomputation) the bottom block's backward.

    >>> config = TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=100)
    >>> one, four = (device_memory(config, 2, PlanSettings(devices=n, sharding="zero3")) for n in (1, 4))
    >>> one.activations == four.activations, four.model_states < one.model_states
    (True, True)
    """
    memory = transformer_training_memory(
        config, micro_batch, optimizer=settings.optimizer, precision=settings.precision,
        attention=settings.attention, recompute=settings.recompute, sharding=settings.sharding,
        devices=settings.devices, device=device,
    )
    optimizer = memory.master_weights + memory.optimizer_state
    return DeviceMemory(micro_batch, memory.parameters, memory.gradients, optimizer, memory.gathered,
                        memory.activations, memory.transient, memory.update, memory.backward, memory.peak,
                        memory.attention, memory.attention_kernel, memory.local_attention_kernel)


def usable_bytes(device: PlanDevice, settings: PlanSettings) -> int:
    """The device's memory less the headroom."""
    return int(device.memory_bytes * (1 - settings.headroom))


def largest_micro_batch(config: TransformerConfig, settings: PlanSettings, usable: int, limit: int,
                        device: AttentionDevice = ASSUMED_ATTENTION_DEVICE) -> int:
    """The most sequences per device (at most ``limit``) whose step fits in ``usable`` bytes; 0 if not even one.

    Memory grows with the micro-batch, so the answer is found by doubling, then bisection.
    """
    def fits(batch):
        return device_memory(config, batch, settings, device).peak <= usable

    if not fits(1):
        return 0
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:  # fits(low), not fits(high) (or high is past the limit)
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def fewest_devices(config: TransformerConfig, settings: PlanSettings, device: PlanDevice) -> int | None:
    """The fewest devices on which one sequence per device fits under ZeRO-3, or ``None`` (none up to the limit)."""
    def fits(devices):
        zero3 = replace(settings, devices=devices, sharding=ZERO3)
        return device_memory(config, 1, zero3, attention_device(device)).peak <= usable_bytes(device, settings)

    if not fits(MOST_DEVICES):
        return None
    low, high = 0, MOST_DEVICES  # not fits(low) (0 devices hold nothing), fits(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if fits(middle) else (middle, high)
    return high


class RunRates:
    """What a sized run's batch, FLOPs, step time and reasons give: whether it fits, tokens and FLOPs per step
    and per token, tokens per second (for a plan with ``config``, ``global_batch``, ``flops_per_step``,
    ``seconds_per_step`` and ``reasons``)."""

    @property
    def fits(self) -> bool:
        return not self.reasons

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.config.sequence_length

    @property
    def flops_per_token(self) -> float:
        return self.flops_per_step / self.tokens_per_step

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.seconds_per_step


@dataclass(frozen=True)
class Plan(RunRates):
    """A training run sized before it is rented: memory per device, the batch it runs at, and its time.

    ``largest_micro_batch``: the most sequences per device whose step fits (0: not even one), at
    most the per-device batch when the global batch was given. ``memory``: at ``micro_batch``.
    ``reasons``: why it does not fit and what would (empty when it fits). ``batch_given``: the
    global batch was asked for (else it is the devices at the largest micro-batch that fits).
    """

    config: TransformerConfig
    device: PlanDevice
    settings: PlanSettings
    usable_bytes: int
    global_batch: int
    micro_batch: int
    largest_micro_batch: int
    memory: DeviceMemory
    flops_per_step: int
    tokens: int | None
    reasons: tuple[str, ...]
    batch_given: bool = True

    @property
    def per_device_batch(self) -> int:
        return self.global_batch // self.settings.devices

    @property
    def accumulation_steps(self) -> int:
        return self.per_device_batch // self.micro_batch

    @property
    def seconds_per_step(self) -> float:
        return training_time(self.flops_per_step, self.device.peak_flops_per_second, self.settings.mfu,
                             self.settings.devices).seconds

    @property
    def days(self) -> float | None:
        """Days to train on ``tokens`` tokens at this MFU (``None`` without a token budget)."""
        if self.tokens is None:
            return None
        return training_time(self.flops_per_token * self.tokens, self.device.peak_flops_per_second, self.settings.mfu,
                             self.settings.devices).days


def _gib(count: int) -> str:
    return f"{count / 2**30:.2f} GiB"


def _largest_phase(memory: DeviceMemory) -> tuple[int, str]:
    """The bytes of the step's largest phase beyond the persistent parts, and what it holds."""
    return max(
        (memory.activations + memory.transient, "the saved activations and the loss's gradients"),
        (memory.gradients + memory.update, "the gradients and the update's temporaries"),
        (memory.backward, "the recomputed backward of the bottom block"),
    )


def _why_not(config, settings, device, memory: DeviceMemory, usable: int) -> tuple[str, ...]:
    """Why micro-batch 1 does not fit, and what would (empty when it fits)."""
    if memory.peak <= usable:
        return ()
    where = f"{device.name}'s {_gib(usable)} usable ({1 - settings.headroom:.0%} of {device.memory_bytes / 1e9:g} GB)"
    spread = f"under {settings.sharding} on {settings.devices} device{'s' if settings.devices > 1 else ''}"
    if memory.model_states > usable:
        reasons = [f"model states alone need {_gib(memory.model_states)} per device {spread}, more than {where}"]
    else:
        phase, holds = _largest_phase(memory)
        left = usable - (memory.peak - phase)
        reasons = [f"one sequence per device needs {_gib(memory.peak)} {spread}: its largest phase, {holds} "
                   f"({_gib(phase)}), does not fit in the {_gib(max(left, 0))} left of {where} beside the weights, "
                   "optimizer state and gathered unit"]
    for option, changed in (("--recompute full", replace(settings, recompute="full")),
                            ("--attention sdpa", replace(settings, attention="sdpa"))):
        if device_memory(config, 1, changed, attention_device(device)).peak <= usable:  # (a remedy taken does not fit)
            reasons.append(f"with {option}, one sequence per device fits")
    fewest = fewest_devices(config, settings, device)
    if fewest is None:
        reasons.append(f"no number of devices up to {MOST_DEVICES} fits one sequence per device under zero3: "
                       "a sequence's activations alone are too large")
    elif fewest > settings.devices:
        reasons.append(f"under zero3, one sequence per device fits from {fewest} devices")
    else:  # then the run is not under zero3 already: it would fit at micro-batch 1 on these devices
        reasons.append(f"with --sharding zero3, one sequence per device fits on these {settings.devices} devices "
                       f"(from {fewest})")
    return tuple(reasons)


def make_plan(config: TransformerConfig, device: PlanDevice, settings: PlanSettings, *,
              global_batch: int | None = None, micro_batch: int | None = None, tokens=None) -> Plan:
    """The plan for training ``config`` on ``settings.devices`` of ``device``.

    ``global_batch``: sequences per optimizer step, a multiple of the devices (default: each
    device at the largest micro-batch that fits, no accumulation). ``micro_batch``: sequences
    per device per forward/backward (default: the largest that fits and divides the per-device
    batch). ``tokens``: a token budget for the days it takes.

    >>> from accounting.plan.devices import plan_device
    >>> gpt2 = TransformerConfig(layers=12, width=768, heads=12, sequence_length=1024, vocabulary=50257)
    >>> plan = make_plan(gpt2, plan_device("H100 SXM", "bfloat16"), PlanSettings(devices=8), global_batch=512)
    >>> plan.fits, plan.per_device_batch, plan.micro_batch * plan.accumulation_steps, round(plan.tokens_per_second)
    (True, 64, 64, 3705451)
    """
    if not isinstance(config, TransformerConfig):
        raise AccountingTypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    usable = usable_bytes(device, settings)
    devices = settings.devices
    if global_batch is not None:
        global_batch = check_positive_size(global_batch, "global batch")
        if global_batch % devices:
            raise AccountingError(f"global batch {global_batch} is not a multiple of the {devices} devices: "
                                  "each device takes the same number of sequences")
    if micro_batch is not None:
        micro_batch = check_positive_size(micro_batch, "micro-batch")
        if global_batch is not None and (global_batch // devices) % micro_batch:
            raise AccountingError(f"micro-batch {micro_batch} does not divide the {global_batch // devices} "
                                  f"sequences per device of global batch {global_batch}")
    if tokens is not None:
        tokens = check_positive(tokens, "tokens")
    batch_given = global_batch is not None
    limit = LARGEST_MICRO_BATCH if global_batch is None else global_batch // devices
    kernels = attention_device(device)
    largest = largest_micro_batch(config, settings, usable, limit, kernels)
    if micro_batch is None and global_batch is None:
        micro_batch = max(largest, 1)
    elif micro_batch is None:  # the largest that fits and divides the per-device batch (largest <= per device)
        per_device = global_batch // devices
        micro_batch = max([size for size in range(1, largest + 1) if per_device % size == 0], default=1)
    if global_batch is None:
        global_batch = devices * micro_batch
    memory = device_memory(config, micro_batch, settings, kernels)
    reasons = _why_not(config, settings, device, device_memory(config, 1, settings, kernels), usable)
    if not reasons and memory.peak > usable:
        reasons = (f"micro-batch {micro_batch} needs {_gib(memory.peak)} per device, more than the {_gib(usable)} "
                   f"usable; the largest that fits is {largest}",)
    flops = transformer_flops(config, batch_size=global_batch).training
    return Plan(config, device, settings, usable, global_batch, micro_batch, largest, memory, flops,
                None if tokens is None else math.ceil(tokens), reasons, batch_given)
