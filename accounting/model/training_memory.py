"""Memory of training a model: parameters, gradients, optimizer state, master weights, activations.

Bytes per parameter, by precision policy and optimizer (step counters aside; see
:func:`optimizer_state_bytes`)::

    policy         weights  grads  master  optimizer state per slot  Adam total
    fp32           4        4      -       4                         4+4+8   = 16
    bf16-master    2        2      4       4                         2+2+4+8 = 16   (= bf16-mixed)
    fp16-mixed     2        2      4       4                         2+2+4+8 = 16
    bf16-autocast  4        4      -       4                         4+4+8   = 16   (+ bf16 copies in the forward)
    bf16           2        2      -       2                         2+2+4   = 8

Slots (parameter-sized state tensors): SGD 0, SGD with momentum 1, Adagrad 1, RMSprop 1
(+1 with momentum, +1 centered), Adam/AdamW 2 (+1 with amsgrad). Sources: the state each
``torch.optim`` class creates (checked in the tests against real optimizers); the 16 bytes
per parameter of mixed-precision Adam is the ZeRO paper's count (Rajbhandari et al. 2020,
"ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", arXiv:1910.02054,
section 3.1: 2Ψ + 2Ψ + 12Ψ). Activations are in :func:`transformer_activation_bytes`.

>>> from accounting import training_memory
>>> print(training_memory(1_000_000, optimizer="adam", precision="bf16-mixed"))
1,000,000 parameters, adam, bf16-mixed
  parameters         1.91 MiB
  gradients          1.91 MiB
  master weights     3.81 MiB
  optimizer state    7.63 MiB
  activations        0 bytes
  transient          0 bytes
  peak               15.26 MiB
  total              15.26 MiB  (16.0 bytes/parameter before activations)
"""

import numbers
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace

import torch

from accounting._checks import check_choice, check_non_negative, check_size
from accounting._units import readable_bytes
from accounting.model.activations import (  # the policies live there; imported here by name too
    PRECISION_POLICIES,  # noqa: F401 (public here too)
    PrecisionPolicy,  # noqa: F401 (public here too)
    activation_formats,
    precision_policy,
    weight_copy_bytes,
    block_backward_bytes,
    late_gradient_parameters,
    pending_block_gradient_parameters,
    transformer_activations,
    update_bytes,
)
from accounting.model.attention_kernels import SdpaKernel
from accounting.errors import AccountingError, AccountingTypeError
from accounting.memory import storage_bytes, storage_key
from accounting.model.sharding import sharded_model_states, sharding_stage
from accounting.model.config import TransformerConfig

# ---- parameters ---------------------------------------------------------------------


def _parameter_tensors(parameters, what: str = "parameters") -> list[torch.Tensor]:
    """Distinct tensors (by identity) from a module or an iterable of tensors."""
    if isinstance(parameters, torch.nn.Module):
        return list(parameters.parameters())
    if isinstance(parameters, (torch.Tensor, str, bytes)) or not isinstance(parameters, Iterable):
        raise AccountingTypeError(
            f"{what} must be an nn.Module or an iterable of tensors, got {type(parameters).__name__}"
        )
    tensors, seen = [], set()
    for position, tensor in enumerate(parameters):
        if not isinstance(tensor, torch.Tensor):
            raise AccountingTypeError(
                f"{what}: item {position} must be a torch.Tensor, got {type(tensor).__name__}: {tensor!r}"
            )
        if id(tensor) not in seen:
            seen.add(id(tensor))
            tensors.append(tensor)
    return tensors


def parameter_count(model, trainable_only: bool = False) -> int:
    """Number of parameters of a module (or an iterable of tensors), shared storage counted once.

    Tied weights (one ``Parameter`` registered twice) and distinct tensors looking into one
    storage are counted once, by the storage's elements (a storage is paid for whole).
    ``trainable_only`` counts only parameters with ``requires_grad``.

    >>> embedding = torch.nn.Embedding(100, 8)
    >>> head = torch.nn.Linear(8, 100, bias=False)
    >>> head.weight = embedding.weight  # tied, as in GPT-2
    >>> parameter_count(torch.nn.ModuleList([embedding, head]))
    800
    """
    tensors = _parameter_tensors(model, "model")
    if trainable_only:
        tensors = [tensor for tensor in tensors if tensor.requires_grad]
    elements = {}
    for tensor in tensors:
        elements[storage_key(tensor)] = tensor.untyped_storage().nbytes() // tensor.element_size()
    return sum(elements.values())


# ---- optimizer state ----------------------------------------------------------------

# Settings that change how much state each optimizer keeps, with their torch defaults.
_MEMORY_SETTINGS = {
    "sgd": {"momentum": 0.0, "fused": False},
    "adagrad": {"fused": False},
    "rmsprop": {"momentum": 0.0, "centered": False},
    "adam": {"amsgrad": False, "fused": False},
    "adamw": {"amsgrad": False, "fused": False},
}
OPTIMIZERS = tuple(_MEMORY_SETTINGS)
"""Optimizers known by name (lower case, as in ``torch.optim``: SGD, Adagrad, RMSprop, Adam, AdamW)."""


def _optimizer_settings(optimizer, settings: dict) -> tuple[str, dict]:
    if not isinstance(optimizer, str):
        raise AccountingTypeError(f"optimizer must be a name such as 'adam', got {optimizer!r}")
    name = check_choice(optimizer.strip().lower(), OPTIMIZERS, "optimizer")
    known = _MEMORY_SETTINGS[name]
    for key, value in settings.items():
        if key not in known:
            accepted = ", ".join(known)
            raise AccountingError(f"{name} has no setting {key!r} that affects memory (accepted: {accepted})")
        if isinstance(known[key], bool):
            if not isinstance(value, bool):
                raise AccountingTypeError(f"{name} setting {key} must be True or False, got {value!r}")
        else:
            check_non_negative(value, f"{name} setting {key}")
    return name, {**known, **settings}


def optimizer_state_slots(optimizer: str, **settings) -> int:
    """Parameter-sized state tensors an optimizer keeps for each parameter.

    >>> optimizer_state_slots("sgd"), optimizer_state_slots("sgd", momentum=0.9), optimizer_state_slots("adam")
    (0, 1, 2)
    >>> optimizer_state_slots("rmsprop", momentum=0.9, centered=True)
    3
    """
    name, settings = _optimizer_settings(optimizer, settings)
    if name == "sgd":
        return 1 if settings["momentum"] != 0 else 0  # momentum_buffer
    if name == "adagrad":
        return 1  # sum
    if name == "rmsprop":  # square_avg, momentum_buffer, grad_avg
        return 1 + (settings["momentum"] > 0) + settings["centered"]
    return 3 if settings["amsgrad"] else 2  # exp_avg, exp_avg_sq, max_exp_avg_sq


_EAGER_STATE = ("adagrad",)
"""Optimizers whose constructor creates state for every parameter, frozen or not (the others wait for a gradient)."""


def _step_counter_bytes(name: str, settings: dict) -> int:
    """Bytes of the scalar step counter torch keeps per parameter (none for SGD).

    torch stores it as a 0-d float32 tensor, float64 when the default dtype is float64 and
    the optimizer is not fused (``torch.optim.optimizer._get_scalar_dtype``).
    """
    if name == "sgd":
        return 0
    if settings.get("fused") or torch.get_default_dtype() != torch.float64:
        return torch.float32.itemsize
    return torch.float64.itemsize


def optimizer_state_bytes(parameters, optimizer: str, **settings) -> int:
    """Predicted bytes of an optimizer's state once every parameter has taken a step.

    ``parameters``: a module or an iterable of tensors (each counted once). ``settings``:
    the optimizer's keyword arguments that change its memory — ``momentum`` (SGD,
    RMSprop), ``centered`` (RMSprop), ``amsgrad`` (Adam, AdamW), ``fused`` (SGD, Adagrad,
    Adam, AdamW); other settings (lr, betas, weight decay…) change no memory and are refused.

    Each state slot is a tensor like its parameter (same dtype and element count); Adagrad,
    RMSprop, Adam and AdamW add one scalar step counter per parameter tensor (4 bytes, or 8:
    see :func:`_step_counter_bytes`). Frozen parameters (``requires_grad=False``) count
    nothing: they never get a gradient, and torch's optimizers skip a parameter whose
    ``grad`` is ``None`` without creating its state — except Adagrad, whose constructor
    creates ``sum`` and ``step`` for every parameter it is handed (hand it only the
    trainable ones and pass the same list here).

    >>> model = torch.nn.Linear(10, 5)  # 50 weights + 5 biases, two tensors
    >>> optimizer_state_bytes(model, "adam")  # 2 slots * 55 * 4 bytes + 2 step counters * 4
    448
    >>> optimizer_state_bytes(model, "sgd", momentum=0.9)
    220
    >>> _ = model.bias.requires_grad_(False)  # frozen: 50 weights in one tensor left
    >>> optimizer_state_bytes(model, "adam")  # 2 slots * 50 * 4 bytes + 1 step counter * 4
    404
    """
    name, settings = _optimizer_settings(optimizer, settings)
    slots = optimizer_state_slots(name, **{key: settings[key] for key in _MEMORY_SETTINGS[name]})
    tensors = _parameter_tensors(parameters)
    if name not in _EAGER_STATE:
        tensors = [tensor for tensor in tensors if tensor.requires_grad]
    per_tensor = [slots * tensor.numel() * tensor.element_size() for tensor in tensors]
    return sum(per_tensor) + len(tensors) * _step_counter_bytes(name, settings)


def measure_optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the tensors a live optimizer holds in its state, each storage counted once.

    >>> model = torch.nn.Linear(10, 5)
    >>> adam = torch.optim.Adam(model.parameters())
    >>> measure_optimizer_state_bytes(adam)  # no state before the first step
    0
    >>> model(torch.ones(3, 10)).sum().backward(); adam.step()
    >>> measure_optimizer_state_bytes(adam) == optimizer_state_bytes(model, "adam")
    True
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise AccountingTypeError(f"expected a torch.optim.Optimizer, got {type(optimizer).__name__}")
    tensors = [
        value
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    ]
    return storage_bytes(*tensors)


# ---- activations --------------------------------------------------------------------


def transformer_activation_bytes(
    config: TransformerConfig,
    batch_size: int,
    precision="bf16-mixed",
    dropout: bool = False,
    *,
    attention: str = "eager",
    recompute: str = "none",
    gelu: str | None = None,
    device=None,
) -> int:
    """Bytes of the tensors a transformer's forward pass saves for backward.

    Korthikanti et al. 2022's count (arXiv:2205.05198, section 4) made exact for the code that
    runs, term by term in :mod:`accounting.model.activations`: GPT-2-style blocks
    (``norm="layernorm"``) save **e·(8·sbh + 2·sbf + a·s²·b)** with a fused GELU (s = sequence,
    b = batch, h = width, f = MLP width, a = heads, e = bytes per activation) plus fp32 LayerNorm
    statistics; with ``dropout`` the paper's 34·sbh + 5·a·s²·b at e = 2, f = 4h. Llama-style
    blocks (``norm="rmsnorm"``) as Hugging Face's Llama, Qwen2 and Mixtral code saves them. Outside
    the blocks: the final norm, rotary tables and the loss's fp32 log-probabilities (4·sbV).
    ``attention``: ``"eager"``; ``"sdpa"``, counted as the kernel ``scaled_dot_product_attention`` runs
    on ``device`` (default the CPU; an :class:`accounting.model.attention_kernels.AttentionDevice` names a GPU by
    its compute capability): fused kernels have no s² term, the math kernel keeps the (s × s) weights; or
    a kernel by name (``"sdpa-flash"``, ``"sdpa-math"``…, :data:`accounting.model.activations.ATTENTIONS`);
    ``recompute="full"``: each block keeps
    only its input; ``gelu``: ``"fused"`` or ``"unfused"`` (Hugging Face's ``gelu_new``, GPT-2's); default:
    the config's own (``config.gelu``, which ``TransformerConfig.from_hf`` reads from ``activation_function``).

    >>> from accounting import TransformerConfig
    >>> config = TransformerConfig(layers=1, width=4, heads=2, sequence_length=3, vocabulary=10)
    >>> transformer_activation_bytes(config, batch_size=1, precision="fp32")  # 4*(96 + 96 + 18) + 4*24 + 4*30 + 3*8*3
    1128
    >>> transformer_activation_bytes(config, batch_size=1, precision="fp32", recompute="full")  # 4*12 + 4*9 + 240
    324
    """
    formats = activation_formats(precision)
    return transformer_activations(
        config, batch_size, formats, attention=attention, recompute=recompute, dropout=dropout, gelu=gelu,
        device=device,
    ).saved


# ---- the whole breakdown ------------------------------------------------------------


class PhasedPeak:
    """The peak's phase and what is gathered in it, for a step whose ``phases`` (name -> bytes beyond what
    persists) and ``gathered_phases`` (name -> unsharded ZeRO-3/FSDP bytes) are known."""

    @property
    def peak_phase(self) -> str:
        """The phase of the peak (the first of equals, in :attr:`phases`' order)."""
        phases = self.phases
        return max(phases, key=phases.get)

    @property
    def gathered(self) -> int:
        """Unsharded parameters and gradients (ZeRO-3/FSDP) alive at the peak."""
        return self.gathered_phases.get(self.peak_phase, 0)


@dataclass(frozen=True)
class TrainingMemory(PhasedPeak):
    """Bytes held during a training step, by part (per device when sharded).

    ``peak``: the high-water mark of a steady-state step whose gradients ``zero_grad()`` freed:
    weights, master weights and optimizer state (``persistent``), and the largest of the ``phases``:

    - ``"forward end"``, the start of backward: saved ``activations`` plus ``transient`` bytes alive next
      to them;
    - ``"update"``: ``gradients`` plus the optimizer's temporaries (``update``);
    - ``"recomputed backward"``, with recomputation, the bottom block's backward (``backward``): the
      gradients made by then, the block's recomputed activations and its MLP's working set;
    - ``"block backward"``, under ZeRO-3/FSDP only: the saved activations beside a block's unsharded
      parameters and gradients.

    ``gathered_phases``: under ZeRO-3/FSDP, the unsharded parameters and gradients alive in each phase
    (:func:`fsdp_gathered_phases`; none in the update), counted in that phase; ``gathered``: those of the
    peak's phase. ``total`` adds everything (the most gathered), the bound when gradients are kept
    between steps. ``attention``: for a transformer, the attention counted (``"eager"``,
    ``"sdpa-math"``…) and, for ``"sdpa"``, why that kernel (``attention_kernel``; the sliding-window
    blocks' own, which are passed a mask, in ``local_attention_kernel``).
    """

    parameter_count: int
    optimizer: str
    precision: str
    parameters: int
    gradients: int
    master_weights: int
    optimizer_state: int
    activations: int
    transient: int = 0
    update: int = 0
    backward: int = 0
    gathered_phases: dict = field(default_factory=dict)
    attention: str | None = None
    attention_kernel: SdpaKernel | None = None
    local_attention_kernel: SdpaKernel | None = None

    @property
    def persistent(self) -> int:
        """Weights, master weights and optimizer state: alive for the whole run."""
        return self.parameters + self.master_weights + self.optimizer_state

    @property
    def phases(self) -> dict:
        """Bytes of each phase of the step beyond the persistent states (see the class docstring)."""
        return step_phases(self.activations + self.transient, self.gradients + self.update, self.backward,
                           self.activations, self.gathered_phases)

    @property
    def peak(self) -> int:
        return self.persistent + max(self.phases.values())

    @property
    def total(self) -> int:
        gathered = max(self.gathered_phases.values(), default=0)
        return self.persistent + self.gradients + self.activations + self.transient + gathered

    @property
    def bytes_per_parameter(self) -> float:
        """Bytes of weights, gradients, master copy and optimizer state per parameter."""
        return (self.persistent + self.gradients) / self.parameter_count if self.parameter_count else 0.0

    def __str__(self) -> str:
        rows = [f"{self.parameter_count:,} parameters, {self.optimizer}, {self.precision}"]
        for field in fields(self)[3:9]:
            label = field.name.replace("_", " ")
            rows.append(f"  {label:<18} {readable_bytes(getattr(self, field.name))}")
        rows.append(f"  {'peak':<18} {readable_bytes(self.peak)}")
        if self.attention is not None:
            rows.append(f"  {'attention':<18} {self.attention_kernel or self.attention}")
        rows.append(
            f"  {'total':<18} {readable_bytes(self.total)}  "
            f"({self.bytes_per_parameter:.1f} bytes/parameter before activations)"
        )
        return "\n".join(rows)


def step_phases(forward_end: int, update: int, recomputed: int, activations: int, gathered: dict) -> dict:
    """A step's phases (bytes beyond the persistent states): ``"forward end"``, ``"update"`` and
    ``"recomputed backward"`` as given, each with what ZeRO-3/FSDP holds ``gathered`` then, and with it a
    ``"block backward"``: the saved ``activations`` beside a block's backward's gathered bytes.

    >>> step_phases(10, 4, 0, 8, {})
    {'forward end': 10, 'update': 4, 'recomputed backward': 0}
    >>> step_phases(10, 4, 0, 8, {"forward end": 1, "block backward": 5})["block backward"]
    13
    """
    phases = {"forward end": forward_end + gathered.get("forward end", 0),
              "update": update + gathered.get("update", 0),
              "recomputed backward": recomputed + gathered.get("recomputed backward", 0) if recomputed else 0}
    if "block backward" in gathered:
        phases["block backward"] = activations + gathered["block backward"]
    return phases


def fsdp_gathered_phases(root: int, block: int, block_attention: int, bottom: int, bottom_pending: int,
                         weight_bytes: int, gradient_bytes: int, *, recomputed: bool) -> dict:
    """Bytes FSDP2 (ZeRO-3) holds unsharded in each phase of a step, when it wraps each block and the root
    (the embeddings, final norm and head), from the elements of those units (a rank's share of them).

    - ``"forward end"`` (the start of backward): the root's parameters, ``root`` × ``weight_bytes``: FSDP2 does
      not reshard the root module after forward; no unsharded gradient exists yet;
    - ``"block backward"``: in the largest block's backward, at its attention's backward (which an eager
      attention's (s × s) working set makes the block's largest): the root's parameters, the block's, the next
      block's (prefetched for its backward) and the gradients the block made so far, all but its attention's
      and the norm before it (``block_attention``);
    - ``"recomputed backward"`` (``recomputed``): in the bottom block's recomputed backward, the root's and the
      bottom block's parameters and that block's gradients made so far (all but ``bottom_pending``);
    - ``"update"``: nothing gathered.

    Measured against torch's ``fully_shard`` on 2 gloo ranks (docs/parallel-measured.md).

    >>> fsdp_gathered_phases(10, 100, 40, 100, 0, 2, 2, recomputed=False)
    {'forward end': 20, 'block backward': 540}
    """
    phases = {"forward end": root * weight_bytes,
              "block backward": (root + 2 * block) * weight_bytes + (block - block_attention) * gradient_bytes}
    if recomputed:
        phases["recomputed backward"] = (root + bottom) * weight_bytes + (bottom - bottom_pending) * gradient_bytes
    return phases


def _count_parameters(parameters) -> tuple[int, int]:
    """(all parameters, trainable parameters) of a count, a config or a module."""
    if isinstance(parameters, TransformerConfig):
        return parameters.parameter_count, parameters.parameter_count
    if isinstance(parameters, numbers.Integral) and not isinstance(parameters, bool):
        count = check_size(parameters, "parameters")
        return count, count
    if isinstance(parameters, (torch.nn.Module, Iterable)) and not isinstance(parameters, (str, bytes)):
        tensors = _parameter_tensors(parameters)  # a generator can be read only once
        return parameter_count(tensors), parameter_count(tensors, trainable_only=True)
    raise AccountingTypeError(
        f"parameters must be a count, a TransformerConfig, an nn.Module or tensors, got {parameters!r}"
    )


def training_memory(
    parameters,
    optimizer: str = "adam",
    precision="fp32",
    activations: int = 0,
    transient: int = 0,
    *,
    sharding=None,
    devices: int = 1,
    **optimizer_settings,
) -> TrainingMemory:
    """Bytes of weights, gradients, master weights, optimizer state and activations in training.

    ``parameters``: a parameter count, a :class:`TransformerConfig` or a module (frozen
    parameters then get no gradient, master copy or state). ``precision``: a policy name
    (table in the module docstring). ``activations``: bytes saved for backward, e.g. from
    :func:`transformer_activation_bytes`; ``transient``: short-lived bytes alive next to them
    at the peak. ``optimizer_settings`` as for :func:`optimizer_state_bytes`; step counters
    (4 bytes per parameter tensor) are left out. ``sharding`` and ``devices``: data-parallel
    partitioning of the model states (:func:`accounting.model.sharding.sharded_model_states`: ``None``,
    ``"ddp"``, ``"zero1"``-``"zero3"``, FSDP's names); the parts are then one device's. The master
    copy is partitioned with the optimizer state, as ZeRO counts it.

    >>> fp32 = training_memory(10**9, optimizer="adam", precision="fp32")
    >>> fp32.bytes_per_parameter, training_memory(10**9, "sgd", "bf16").bytes_per_parameter
    (16.0, 4.0)
    >>> training_memory(10**9, "adam", "bf16-master", sharding="zero3", devices=8).bytes_per_parameter
    2.0
    """
    count, trainable = _count_parameters(parameters)
    policy = precision_policy(precision)
    slots = optimizer_state_slots(optimizer, **optimizer_settings)
    master = trainable * policy.bytes_of("master_weights")
    states = sharded_model_states(
        count * policy.bytes_of("weights"),
        trainable * policy.bytes_of("gradients"),
        trainable * slots * policy.bytes_of("optimizer_state"),
        sharding, devices, parameter_count=count,
    )
    master_share = sharded_model_states(0, 0, master, sharding, devices, parameter_count=count).optimizer
    return TrainingMemory(
        parameter_count=count,
        optimizer=optimizer.strip().lower(),
        precision=policy.name,
        parameters=states.parameters,
        gradients=states.gradients,
        master_weights=master_share,
        optimizer_state=states.optimizer,
        activations=check_size(activations, "activations"),
        transient=check_size(transient, "transient"),
    )


def transformer_training_memory(
    config: TransformerConfig,
    batch_size: int,
    optimizer: str = "adam",
    precision="bf16-mixed",
    dropout: bool = False,
    *,
    attention: str = "eager",
    recompute: str = "none",
    gelu: str | None = None,
    sharding=None,
    devices: int = 1,
    device=None,
    **optimizer_settings,
) -> TrainingMemory:
    """:func:`training_memory` of a transformer, activations and each phase's working bytes from its config.

    ``transient``: the loss's two fp32 (tokens × V) gradients as backward starts. ``update``: the
    optimizer's temporaries (Adam/AdamW for-loop: two fp32 tensors of the largest parameter) and,
    with a master copy, the fp32 copies of the gradients. ``backward`` (``recompute="full"``): in the
    bottom block's MLP backward, every gradient but the embedding's and those of the block's parts not yet
    reached (:func:`accounting.model.activations.pending_block_gradient_parameters`), beside the block's input,
    recomputed activations, incoming gradient and working set
    (:func:`accounting.model.activations.block_backward_bytes`).
    ``gathered_phases`` (ZeRO-3/FSDP over more than one device), as FSDP2 wraps each block and the root:
    :func:`fsdp_gathered_phases` of the root (embeddings, final norm, an untied head), the largest block
    (or MTP module) and the bottom block.
    ``attention="sdpa"`` counts the kernel SDPA runs on ``device`` (see
    :func:`transformer_activation_bytes`); ``attention`` and ``attention_kernel`` of the result say
    which. Other arguments as for :func:`transformer_activation_bytes` and :func:`training_memory`;
    measured against Hugging Face models in docs/model-mfu-and-training-memory.md.

    >>> from accounting import TransformerConfig
    >>> config = TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=100)
    >>> memory = transformer_training_memory(config, batch_size=4, optimizer="adam", precision="fp32")
    >>> memory.activations == transformer_activation_bytes(config, 4, "fp32")
    True
    >>> memory.peak == memory.persistent + memory.activations + memory.transient
    True
    """
    formats = activation_formats(precision)
    policy = precision_policy(precision)
    activations = transformer_activations(
        config, batch_size, formats, attention=attention, recompute=recompute, dropout=dropout, gelu=gelu,
        device=device,
    )
    tokens = batch_size * config.sequence_length
    loss_gradients = 2 * torch.float32.itemsize * tokens * config.vocabulary
    memory = training_memory(
        config, optimizer, precision, activations.saved, loss_gradients,
        sharding=sharding, devices=devices, **optimizer_settings,
    )
    if recompute == "full" and formats.autocast:
        # The forward's cached weight copies live until autocast exits, beside the logits and their fp32 copy.
        forward_end = config.layers * weight_copy_bytes(config, formats) + (formats.matmul + 4) * tokens * config.vocabulary
        memory = replace(memory, transient=max(loss_gradients, forward_end))
    gradient_bytes = memory.gradients / config.parameter_count  # per parameter, on this device
    # With a master copy, each 16-bit gradient is replaced by an fp32 copy before the update.
    widened = policy.bytes_of("master_weights") - policy.bytes_of("gradients") if policy.master_weights else 0
    update = round(memory.gradients * widened / policy.bytes_of("gradients")) + update_bytes(config, policy.bytes_of("optimizer_state"), memory.optimizer)
    backward = 0
    if recompute == "full":
        early = config.parameter_count - late_gradient_parameters(config) \
            - pending_block_gradient_parameters(config, formats)
        backward = round(gradient_bytes * early) + block_backward_bytes(config, batch_size, formats, activations, gelu)
    gathered = {}
    if sharding_stage(sharding) == "zero3" and devices > 1:
        root = config.parameter_count - config.blocks_parameter_count - config.mtp_parameter_count
        module = config.mtp_parameter_count // config.mtp_modules if config.mtp_modules else 0
        block = max(config.layer_parameter_count, config.dense_layer_parameter_count, module)
        attention = config.attention_parameter_count + config.norms_per_layer // 2 * config.norm_parameter_count
        dense_bottom = config.experts > 1 and config.dense_layers > 0
        bottom = config.dense_layer_parameter_count if dense_bottom else config.layer_parameter_count
        gathered = fsdp_gathered_phases(root, block, attention, bottom,
                                        pending_block_gradient_parameters(config, formats),
                                        policy.bytes_of("weights"), policy.bytes_of("gradients"),
                                        recomputed=recompute == "full")
    return replace(memory, update=update, backward=backward, gathered_phases=gathered,
                   attention=activations.attention,
                   attention_kernel=activations.kernel, local_attention_kernel=activations.local_kernel)
