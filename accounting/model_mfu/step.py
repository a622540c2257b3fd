"""One training step of :class:`~accounting.model_mfu.gpt.GPT` under a precision policy, as a callable.

Policies (:data:`accounting.training_memory.PRECISION_POLICIES`), each laid out in memory as
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

>>> from accounting.model_mfu.sizes import model_size
>>> step = build_training_step(model_size("tiny", layers=1), precision="fp32")
>>> loss = step()
>>> step.device, step.tokens.shape, loss.dtype
(device(type='cpu'), torch.Size([4, 64]), torch.float32)
"""

import contextlib

import torch

from accounting._checks import check_choice, check_size
from accounting._units import readable_bytes
from accounting.errors import AccountingError, AccountingTypeError
from accounting.hardware.devices import as_device, free_memory_bytes
from accounting.hardware.precision import float32_matmul_mode
from accounting.model_mfu.gpt import GPT, language_model_loss
from accounting.model_mfu.sizes import ModelSize
from accounting.timing import MEMORY_FRACTION
from accounting.training_memory import precision_policy, transformer_training_memory

STEP_POLICIES = ("fp32", "bf16-mixed", "bf16")
"""Precision policies a training step can run (``fp16-mixed`` would need loss scaling)."""
OPTIMIZER = "adamw"
LEARNING_RATE = 1e-4


class TrainingStep:
    """``step()`` trains ``model`` on one batch; ``master`` holds the fp32 copies of ``bf16-mixed``."""

    def __init__(self, size: ModelSize, model: GPT, optimizer: torch.optim.Optimizer, tokens: torch.Tensor,
                 targets: torch.Tensor, precision: str, master: list | None = None):
        self.size = size
        self.model = model
        self.optimizer = optimizer
        self.tokens = tokens
        self.targets = targets
        self.precision = precision
        self.master = master

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
        with self._matmul_mode():
            loss = language_model_loss(self.model(self.tokens), self.targets)
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


def predicted_peak_bytes(size: ModelSize, precision: str, recompute: bool = False) -> int:
    """``transformer_training_memory`` of the step's config, batch, optimizer, policy and recomputation."""
    return transformer_training_memory(size.config, size.batch_size, OPTIMIZER, precision,
                                       recompute="full" if recompute else "none").peak


def check_fits(size: ModelSize, precision: str, device, free_bytes: int | None = None) -> int:
    """The predicted peak, if it fits ``MEMORY_FRACTION`` of the free memory; else an error naming both.

    >>> from accounting.model_mfu.sizes import model_size
    >>> check_fits(model_size("gpt2-small"), "fp32", "cpu", free_bytes=2**30)
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: gpt2-small: 12 layers, width 768, 12 heads, 1024 tokens x batch 12, vocabulary 50257 in fp32 needs 21.87 GiB at its predicted peak, but cpu has 1.00 GiB free (80% of it may be used)
    """
    predicted = predicted_peak_bytes(size, precision)
    free = free_memory_bytes(device) if free_bytes is None else check_size(free_bytes, "free_bytes")
    if predicted > MEMORY_FRACTION * free:
        raise AccountingError(
            f"{size.describe()} in {precision} needs {readable_bytes(predicted)} at its predicted peak, but "
            f"{as_device(device)} has {readable_bytes(free)} free ({MEMORY_FRACTION:.0%} of it may be used)"
        )
    return predicted


def build_training_step(size: ModelSize, *, precision: str = "fp32", device="cpu", recompute: bool = False,
                        seed: int = 0) -> TrainingStep:
    """The model, AdamW and one batch of random tokens for ``size``, on ``device``, under ``precision``.

    Refused before anything is allocated when the predicted peak does not fit (:func:`check_fits`).
    """
    if not isinstance(size, ModelSize):
        raise AccountingTypeError(f"size must be a ModelSize (see model_size), got {size!r}")
    policy = precision_policy(precision).name
    check_choice(policy, STEP_POLICIES, "precision of a training step")
    device = as_device(device)
    seed = check_size(seed, "seed")
    check_fits(size, policy, device)  # before allocating anything
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = GPT(size.config, recompute=recompute).to(device)
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
    """``device`` as a torch device, if the step's model and batch are on it; else an error naming both."""
    device = as_device(device)
    for what, actual in (("model's parameters", step.device), ("tokens", step.tokens.device)):
        # A CPU tensor's device has no index: "cpu:0" names the same device as "cpu".
        if actual.type != device.type or (device.index is not None and (actual.index or 0) != device.index):
            raise AccountingError(f"the {what} are on {actual} but device={str(device)!r} was given")
    return device
