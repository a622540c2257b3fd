"""Memory of training a model: parameters, gradients, optimizer state, master weights, activations.

Bytes per parameter, by precision policy and optimizer (step counters aside; see
:func:`optimizer_state_bytes`)::

    policy       weights  grads  master  optimizer state per slot  Adam total
    fp32         4        4      -       4                         4+4+8   = 16
    bf16-mixed   2        2      4       4                         2+2+4+8 = 16
    fp16-mixed   2        2      4       4                         2+2+4+8 = 16
    bf16         2        2      -       2                         2+2+4   = 8

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
from dataclasses import dataclass, fields

import torch

from accounting._checks import check_choice, check_non_negative, check_positive_size, check_size
from accounting._units import readable_bytes
from accounting.errors import AccountingError, AccountingTypeError
from accounting.memory import storage_bytes, storage_dtype, storage_key
from accounting.transformer import TransformerConfig

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


# ---- precision policies -------------------------------------------------------------


@dataclass(frozen=True)
class PrecisionPolicy:
    """Where each copy of the model lives, as format names (see :func:`accounting.format_name`).

    ``weights``: the parameters the forward pass reads. ``master_weights``: a separate
    higher-precision copy the optimizer updates (``None``: the optimizer updates ``weights``).
    """

    name: str
    weights: str
    gradients: str
    master_weights: str | None
    optimizer_state: str
    activations: str

    def bytes_of(self, part: str) -> int:
        """Bytes per element of one part (``"weights"``, ``"gradients"``…); 0 for an absent copy."""
        fmt = getattr(self, part)
        return 0 if fmt is None else storage_dtype(fmt).itemsize


PRECISION_POLICIES = {
    policy.name: policy
    for policy in (
        PrecisionPolicy("fp32", "float32", "float32", None, "float32", "float32"),
        # Megatron/ZeRO-style mixed precision: 16-bit weights and gradients for compute and
        # communication, an fp32 master copy and fp32 optimizer state for the update.
        PrecisionPolicy("bf16-mixed", "bfloat16", "bfloat16", "float32", "float32", "bfloat16"),
        PrecisionPolicy("fp16-mixed", "float16", "float16", "float32", "float32", "float16"),
        # Everything in bf16 ("bf16-true"): half the memory, and bf16 rounding in the update.
        PrecisionPolicy("bf16", "bfloat16", "bfloat16", None, "bfloat16", "bfloat16"),
    )
}


def precision_policy(name) -> PrecisionPolicy:
    """The policy of this name (``"fp32"``, ``"bf16-mixed"``, ``"fp16-mixed"``, ``"bf16"``).

    >>> precision_policy("bf16-mixed").master_weights
    'float32'
    """
    if isinstance(name, PrecisionPolicy):
        return name
    if not isinstance(name, str):
        raise AccountingTypeError(f"precision must be a policy name such as 'bf16-mixed', got {name!r}")
    return PRECISION_POLICIES[check_choice(name.strip().lower(), tuple(PRECISION_POLICIES), "precision")]


# ---- activations --------------------------------------------------------------------

# torch's fused dropout (CUDA) keeps a bool mask; on the CPU, torch's dropout multiplies by a
# noise tensor of the activation dtype and keeps that instead (e bytes per element).
_DROPOUT_MASK_BYTES = 1


def transformer_activation_bytes(
    config: TransformerConfig, batch_size: int, precision="bf16-mixed", dropout: bool = False
) -> int:
    """Bytes of the tensors a GPT-style transformer saves in its forward pass for backward.

    The count of Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
    Transformer Models", arXiv:2205.05198, section 4), for eager attention that materialises the (s × s) scores.
    With s = sequence length, b = batch, h = width, f = MLP width, a = heads, V = vocabulary
    and e = bytes per activation element, each layer saves

    - LayerNorm inputs 2·sbh, the shared Q/K/V input sbh, Q, K and V 3·sbh, softmax output
      a·s²·b, output-projection input sbh, MLP input sbh, GELU input and MLP output-layer
      input 2·sbf: **e·(8·sbh + 2·sbf + a·s²·b)**;
    - with ``dropout``, also the attention-dropout output (e·a·s²·b) and three bool masks
      (a·s²·b and 2·sbh bytes; CUDA's fused dropout, the CPU keeps e-byte masks). With e = 2
      and f = 4h this is the paper's 34·sbh + 5·a·s²·b.

    Outside the layers: the final LayerNorm's input and the unembedding's input (e·2·sbh),
    and the log-probabilities of the loss, kept in fp32 (4·sbV bytes); with ``dropout``, the
    embedding dropout's mask (sbh bytes). Beyond the paper, each of the 2L + 1 LayerNorms
    keeps a mean and a reciprocal standard deviation per token in fp32 (8·sb bytes).
    Left out: scalars of the loss, and everything transient (not saved for backward).
    Fused attention (``scaled_dot_product_attention`` with flash kernels) saves no s² term.

    >>> from accounting import TransformerConfig
    >>> config = TransformerConfig(layers=1, width=4, heads=2, sequence_length=3, vocabulary=10)
    >>> transformer_activation_bytes(config, batch_size=1, precision="fp32")  # 4*(96 + 96 + 18) + 4*24 + 4*30 + 3*8*3
    1128
    """
    if not isinstance(config, TransformerConfig):
        raise AccountingTypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    b = check_positive_size(batch_size, "batch_size")
    if not isinstance(dropout, bool):
        raise AccountingTypeError(f"dropout must be True or False, got {dropout!r}")
    e = precision_policy(precision).bytes_of("activations")
    s, h, f, a = config.sequence_length, config.width, config.ffn_width, config.heads
    tokens = s * b
    scores = a * s * s * b
    layer = e * (8 * tokens * h + 2 * tokens * f + scores)
    if dropout:
        layer += e * scores + _DROPOUT_MASK_BYTES * (scores + 2 * tokens * h)
    fp32_bytes = torch.float32.itemsize
    outside = e * 2 * tokens * h + fp32_bytes * tokens * config.vocabulary
    if dropout:
        outside += _DROPOUT_MASK_BYTES * tokens * h
    norm_statistics = (2 * config.layers + 1) * 2 * fp32_bytes * tokens
    return config.layers * layer + outside + norm_statistics


# ---- the whole breakdown ------------------------------------------------------------


@dataclass(frozen=True)
class TrainingMemory:
    """Bytes held during a training step, by part.

    ``peak`` is the high-water mark of a steady-state step whose gradients were freed by
    ``zero_grad()`` (torch's default): weights, master weights and optimizer state live
    throughout; saved activations (plus ``transient`` bytes alive next to them) peak as the
    backward pass starts, and are freed as gradients appear, so only the larger side counts.
    ``total`` adds everything, the bound when gradients are kept between steps.
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

    @property
    def persistent(self) -> int:
        """Weights, master weights and optimizer state: alive for the whole run."""
        return self.parameters + self.master_weights + self.optimizer_state

    @property
    def peak(self) -> int:
        return self.persistent + max(self.activations + self.transient, self.gradients)

    @property
    def total(self) -> int:
        return self.persistent + self.gradients + self.activations + self.transient

    @property
    def bytes_per_parameter(self) -> float:
        """Bytes of weights, gradients, master copy and optimizer state per parameter."""
        return (self.persistent + self.gradients) / self.parameter_count if self.parameter_count else 0.0

    def __str__(self) -> str:
        rows = [f"{self.parameter_count:,} parameters, {self.optimizer}, {self.precision}"]
        for field in fields(self)[3:]:
            label = field.name.replace("_", " ")
            rows.append(f"  {label:<18} {readable_bytes(getattr(self, field.name))}")
        rows.append(f"  {'peak':<18} {readable_bytes(self.peak)}")
        rows.append(
            f"  {'total':<18} {readable_bytes(self.total)}  "
            f"({self.bytes_per_parameter:.1f} bytes/parameter before activations)"
        )
        return "\n".join(rows)


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
    **optimizer_settings,
) -> TrainingMemory:
    """Bytes of weights, gradients, master weights, optimizer state and activations in training.

    ``parameters``: a parameter count, a :class:`TransformerConfig` or a module (frozen
    parameters then get no gradient, master copy or state). ``precision``: a policy name
    (table in the module docstring). ``activations``: bytes saved for backward, e.g. from
    :func:`transformer_activation_bytes`; ``transient``: short-lived bytes alive next to them
    at the peak. ``optimizer_settings`` as for :func:`optimizer_state_bytes`; step counters
    (4 bytes per parameter tensor) are left out.

    >>> fp32 = training_memory(10**9, optimizer="adam", precision="fp32")
    >>> fp32.bytes_per_parameter, training_memory(10**9, "sgd", "bf16").bytes_per_parameter
    (16.0, 4.0)
    """
    count, trainable = _count_parameters(parameters)
    policy = precision_policy(precision)
    slots = optimizer_state_slots(optimizer, **optimizer_settings)
    return TrainingMemory(
        parameter_count=count,
        optimizer=optimizer.strip().lower(),
        precision=policy.name,
        parameters=count * policy.bytes_of("weights"),
        gradients=trainable * policy.bytes_of("gradients"),
        master_weights=trainable * policy.bytes_of("master_weights"),
        optimizer_state=trainable * slots * policy.bytes_of("optimizer_state"),
        activations=check_size(activations, "activations"),
        transient=check_size(transient, "transient"),
    )


def transformer_training_memory(
    config: TransformerConfig,
    batch_size: int,
    optimizer: str = "adam",
    precision="bf16-mixed",
    dropout: bool = False,
    **optimizer_settings,
) -> TrainingMemory:
    """:func:`training_memory` of a GPT-style transformer, activations from its config.

    The transient part is the two fp32 (tokens × vocabulary) gradients of the loss (of the
    log-probabilities and of the logits), alive together as the backward pass starts.

    >>> from accounting import TransformerConfig
    >>> config = TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=100)
    >>> memory = transformer_training_memory(config, batch_size=4, optimizer="adam", precision="fp32")
    >>> memory.activations == transformer_activation_bytes(config, 4, "fp32")
    True
    >>> memory.peak == memory.persistent + memory.activations + memory.transient
    True
    """
    activations = transformer_activation_bytes(config, batch_size, precision, dropout)
    tokens = batch_size * config.sequence_length
    loss_gradients = 2 * torch.float32.itemsize * tokens * config.vocabulary
    return training_memory(config, optimizer, precision, activations, loss_gradients, **optimizer_settings)
