"""One training step of :class:`~accounting.model_mfu.gpt.GPT` under a precision policy, as a callable.

Policies (:data:`accounting.model.training_memory.PRECISION_POLICIES`), each laid out in memory as
:func:`accounting.transformer_training_memory` predicts it:

- ``fp32``: fp32 weights, gradients and AdamW state (on CUDA, plain FP32 matmuls: TF32 off).
- ``bf16-mixed``: bf16 weights and gradients for forward and backward; an fp32 master copy
  that AdamW (fp32 state) updates, copied back into the bf16 weights after each step
  (Megatron/ZeRO's layout; :func:`torch.autocast` would keep fp32 weights instead).
- ``bf16``: everything bf16, AdamW state included.

``fp16-mixed`` needs loss scaling and is refused rather than run unscaled.

A step is forward, fp32 cross-entropy, backward, ``optimizer.step()``, then
``zero_grad()`` (gradients set to ``None``), so nothing of the step outlives it but the
weights and the optimizer state: the steady state the memory prediction describes.

The model's attention is ``scaled_dot_product_attention`` unless ``attention="eager"``
(:data:`~accounting.model_mfu.layers.ATTENTIONS`). :func:`compile_step` gives the same step with the
forward of ``torch.compile(model)``: same weights, optimizer and batch, to time beside the eager one.

>>> from accounting.model_mfu.sizes import model_size
>>> step = build_training_step(model_size("tiny", layers=1), precision="fp32")
>>> loss = step()
>>> step.device, step.tokens.shape, loss.dtype
(device(type='cpu'), torch.Size([4, 64]), torch.float32)
"""

import contextlib
import dataclasses

import torch

from accounting._checks import check_choice, check_size
from accounting._units import readable_bytes
from accounting.errors import AccountingError, AccountingTypeError
from accounting.hardware.devices import as_device, free_memory_bytes
from accounting.hardware.precision import float32_matmul_mode
from accounting.model_mfu.gpt import GPT, language_model_loss
from accounting.model_mfu.layers import check_attention
from accounting.model_mfu.sizes import ModelSize
from accounting.timing import MEMORY_FRACTION
from accounting.model.training_memory import precision_policy, transformer_training_memory

STEP_POLICIES = ("fp32", "bf16-mixed", "bf16")
"""Precision policies a training step can run (``fp16-mixed`` would need loss scaling)."""
OPTIMIZER = "adamw"
LEARNING_RATE = 1e-4


class TrainingStep:
    """``step()`` trains ``model`` on one batch; ``master`` holds the fp32 copies of ``bf16-mixed``."""

    def __init__(self, size: ModelSize, model: GPT, optimizer: torch.optim.Optimizer, tokens: torch.Tensor,
                 targets: torch.Tensor, precision: str, master: list | None = None, forward=None):
        self.size = size
        self.model = model
        self.optimizer = optimizer
        self.tokens = tokens
        self.targets = targets
        self.precision = precision
        self.master = master
        self.forward = model if forward is None else forward
        """What the step calls for the logits: the model, or ``torch.compile``'s wrapper of it."""

    @property
    def attention(self) -> str:
        return self.model.attention

    @property
    def compiled(self) -> bool:
        return self.forward is not self.model

    @property
    def device(self) -> torch.device:
        """Where the model's parameters are."""
        return next(self.model.parameters()).device

    @property
    def recompute(self) -> bool:
        return self.model.recompute

    def persistent_tensors(self) -> list:
        """Tensors alive between steps: weights, master weights and optimizer state."""
        state = [value for entry in self.optimizer.state.values() for value in entry.values()
                 if isinstance(value, torch.Tensor)]
        return [*self.model.parameters(), *(self.master or []), *state]

    def _matmul_mode(self):
        if self.precision == "fp32" and self.device.type == "cuda":
            return float32_matmul_mode(tf32=False)  # the FP32 peak is the one MFU divides by
        return contextlib.nullcontext()

    def __call__(self) -> torch.Tensor:
        return self._step(self.forward)

    def eager_step(self) -> torch.Tensor:
        """One step through the eager model, compiled or not (the step whose FLOPs and memory are predicted)."""
        return self._step(self.model)

    def _step(self, forward) -> torch.Tensor:
        with self._matmul_mode():
            loss = language_model_loss(forward(self.tokens), self.targets)
            loss.backward()
        if self.master is not None:
            for copy, weight in zip(self.master, self.model.parameters()):
                copy.grad = weight.grad.float()
                weight.grad = None  # the bf16 gradient is consumed: free it before the update
        self.optimizer.step()
        if self.master is not None:
            with torch.no_grad():
                for copy, weight in zip(self.master, self.model.parameters()):
                    weight.copy_(copy)
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()


def predicted_peak_bytes(size: ModelSize, precision: str, recompute: bool = False, attention: str = "sdpa",
                         device="cpu") -> int:
    """``transformer_training_memory`` of the step's config, batch, optimizer, policy, recomputation and attention:
    ``"sdpa"`` counts the kernel ``scaled_dot_product_attention`` runs on ``device`` (a device name, or an
    :class:`accounting.model.attention_kernels.AttentionDevice` naming a GPU by compute capability); a named kernel
    (``"sdpa-flash"``, ``"sdpa-math"``…) or ``"eager"`` counts that one."""
    return transformer_training_memory(size.config, size.batch_size, OPTIMIZER, precision, attention=attention,
                                       recompute="full" if recompute else "none", device=device).peak


def check_fits(size: ModelSize, precision: str, device, free_bytes: int | None = None, attention: str = "sdpa",
               attention_device=None) -> int:
    """The predicted peak, if it fits ``MEMORY_FRACTION`` of the free memory; else an error naming both.

    >>> from accounting.model_mfu.sizes import model_size
    >>> check_fits(model_size("gpt2-small"), "fp32", "cpu", free_bytes=2**30)
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: gpt2-small: 12 layers, width 768, 12 heads, 1024 tokens x batch 12, vocabulary 50257 in fp32 needs 15.97 GiB at its predicted peak, but cpu has 1.00 GiB free (80% of it may be used)
    """
    predicted = predicted_peak_bytes(size, precision, attention=attention,
                                     device=device if attention_device is None else attention_device)
    free = free_memory_bytes(device) if free_bytes is None else check_size(free_bytes, "free_bytes")
    if predicted > MEMORY_FRACTION * free:
        raise AccountingError(
            f"{size.describe()} in {precision} needs {readable_bytes(predicted)} at its predicted peak, but "
            f"{as_device(device)} has {readable_bytes(free)} free ({MEMORY_FRACTION:.0%} of it may be used)"
        )
    return predicted


def size_that_fits(size: ModelSize, precisions, device, free_bytes: int | None = None,
                   fallback: ModelSize | None = None, attention: str = "sdpa",
                   attention_device=None) -> tuple[ModelSize | None, str]:
    """``size`` at the largest batch (at most its own) whose every policy in ``precisions`` fits the device's free
    memory (:func:`check_fits`), else ``fallback`` at its own batch if that fits; ``(None, why)`` when neither does.

    Returns ``(size, why)``: ``why`` says what was chosen and, where the batch shrank or the fallback was taken, why.
    The prediction counts the attention kernel SDPA runs there (``attention_device``, default ``device``: from a
    machine without the GPU, name it, e.g. ``AttentionDevice("cuda", (9, 0))``).

    >>> from accounting.model_mfu.sizes import model_size
    >>> from accounting.model.attention_kernels import AttentionDevice
    >>> size, why = size_that_fits(model_size("tinyllama-1.1b"), ["bf16"], "cuda", free_bytes=24 * 2**30,
    ...                            fallback=model_size("gpt2-small"), attention_device=AttentionDevice("cuda", (9, 0)))
    >>> size.batch_size, why
    (2, 'tinyllama-1.1b at batch 2 of 4: batch 4 needs 23.83 GiB at its predicted peak in bf16, over 80% of 24.00 GiB free')
    """
    free = free_memory_bytes(device) if free_bytes is None else check_size(free_bytes, "free_bytes")
    precisions = tuple(precisions)
    where = device if attention_device is None else attention_device
    refusal = None
    for batch in range(size.batch_size, 0, -1):
        candidate = dataclasses.replace(size, batch_size=batch)
        needs = [(precision, predicted_peak_bytes(candidate, precision, attention=attention, device=where))
                 for precision in precisions]
        worst = max(needs, key=lambda pair: pair[1])
        if worst[1] <= MEMORY_FRACTION * free:
            if batch == size.batch_size:
                return candidate, f"{size.name} at batch {batch}: fits {readable_bytes(free)} free"
            return candidate, f"{size.name} at batch {batch} of {size.batch_size}: {refusal}"
        if refusal is None:
            refusal = (f"batch {batch} needs {readable_bytes(worst[1])} at its predicted peak in {worst[0]}, over "
                       f"{MEMORY_FRACTION:.0%} of {readable_bytes(free)} free")
    if fallback is not None:
        chosen, why = size_that_fits(fallback, precisions, device, free, attention=attention,
                                     attention_device=attention_device)
        if chosen is not None:
            return chosen, (f"{fallback.name} at batch {chosen.batch_size} in place of {size.name}: {size.name} does "
                            f"not fit even at batch 1 ({refusal})")
    return None, f"{size.name} does not fit even at batch 1: {refusal}"


def build_training_step(size: ModelSize, *, precision: str = "fp32", device="cpu", recompute: bool = False,
                        seed: int = 0, attention: str = "sdpa", enable_gqa: bool | None = None) -> TrainingStep:
    """The model, AdamW and one batch of random tokens for ``size``, on ``device``, under ``precision``.

    ``enable_gqa``: how SDPA gets grouped key/value heads (:func:`accounting.model_mfu.layers.attend`; default:
    as they are where ``FlopCounterMode`` can count that, else repeated).

    Refused before anything is allocated when the predicted peak does not fit (:func:`check_fits`).
    """
    if not isinstance(size, ModelSize):
        raise AccountingTypeError(f"size must be a ModelSize (see model_size), got {size!r}")
    policy = precision_policy(precision).name
    check_choice(policy, STEP_POLICIES, "precision of a training step")
    check_attention(attention)
    device = as_device(device)
    seed = check_size(seed, "seed")
    check_fits(size, policy, device, attention=attention)  # before allocating anything
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    with torch.device(device):  # initialised where it runs: a 1B model's CPU initialisation takes seconds
        model = GPT(size.config, recompute=recompute, attention=attention, enable_gqa=enable_gqa)
    if policy != "fp32":
        model = model.to(torch.bfloat16)
    master = None
    if policy == "bf16-mixed":
        master = [p.detach().float().requires_grad_() for p in model.parameters()]
    optimizer = torch.optim.AdamW(master if master is not None else model.parameters(), lr=LEARNING_RATE)
    shape = (size.batch_size, size.config.sequence_length)
    tokens = torch.randint(0, size.config.vocabulary, shape, generator=generator).to(device)
    targets = torch.randint(0, size.config.vocabulary, shape, generator=generator).to(device)
    return TrainingStep(size, model, optimizer, tokens, targets, policy, master)


def check_step_device(step: TrainingStep, device) -> torch.device:
    """``device`` as a torch device, if the step's model and batch are on it; else an error naming both.

    ``"cuda"`` without an index stands for the CUDA device the model is on (returned with its index), not the
    current one: the timing's events, the peak memory and the attention kernel are read on that device.
    """
    given = as_device(device)
    device = step.device if given.type == "cuda" and given.index is None and step.device.type == "cuda" else given
    for what, actual in (("model's parameters", step.device), ("tokens", step.tokens.device)):
        # A CPU tensor's device has no index: "cpu:0" names the same device as "cpu".
        if actual.type != device.type or (device.index is not None and (actual.index or 0) != device.index):
            raise AccountingError(f"the {what} are on {actual} but device={str(given)!r} was given")
    return device


def compile_step(step: TrainingStep, compiler=None) -> TrainingStep:
    """The same step (weights, optimizer, batch) with the forward of ``torch.compile(step.model)``.

    Compilation happens at the first call, so a compiler that fails (no C++ compiler, an unsupported op) fails
    there: :func:`accounting.model_mfu.measure.measure_compiled_step` reports that, it never raises it.
    """
    if not isinstance(step, TrainingStep):
        raise AccountingError(f"step must be a TrainingStep (see build_training_step), got {step!r}")
    compiler = torch.compile if compiler is None else compiler
    return TrainingStep(step.size, step.model, step.optimizer, step.tokens, step.targets, step.precision,
                        step.master, forward=compiler(step.model))
