"""Live tensor bytes on any device, measured by watching every op (no CUDA needed).

:class:`LiveTensorBytes` is a ``TorchDispatchMode``: each op's output storages are
recorded when they first appear and dropped when torch frees them, so ``current`` is the
bytes of storages created under the mode and still alive, and ``peak`` its maximum. Ops
run under autograd's backward and inside optimizers are seen too. Storages that existed
before the mode (parameters, inputs) are not counted unless passed to :meth:`track`.

Unlike ``torch.cuda.max_memory_allocated`` it counts exact storage sizes: no allocator
rounding, no cached blocks, no library workspaces.

>>> import torch
>>> with LiveTensorBytes() as live:
...     x = torch.ones(1000)          # 4000 bytes
...     y = x * 2                     # 4000 more
...     view = y[:10]                 # a view: nothing new
...     del x
>>> live.current, live.peak
(4000, 8000)
"""

import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from accounting.errors import AccountingTypeError


class LiveTensorBytes(TorchDispatchMode):
    """Current and peak bytes of the live storages created while the mode is active."""

    def __init__(self):
        super().__init__()
        self._sizes: dict[int, int] = {}
        self._references: dict[int, weakref.ref] = {}
        self.current = 0
        self.peak = 0

    def track(self, *tensors: torch.Tensor) -> None:
        """Count the storages of these existing tensors as live too (each storage once)."""
        for position, tensor in enumerate(tensors):
            if not isinstance(tensor, torch.Tensor):
                raise AccountingTypeError(f"tensor {position} must be a torch.Tensor, got {type(tensor).__name__}")
            self._record(tensor)

    def reset_peak(self) -> None:
        """Start a new peak from the bytes live now."""
        self.peak = self.current

    def _record(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self._sizes:
            return
        size = storage.nbytes()
        self._sizes[key] = size
        # torch keeps one Python object per storage alive as long as the storage lives,
        # so this reference dies exactly when the storage is freed.
        self._references[key] = weakref.ref(storage, lambda _, key=key: self._release(key))
        self.current += size
        self.peak = max(self.peak, self.current)

    def _release(self, key: int) -> None:
        self.current -= self._sizes.pop(key, 0)
        self._references.pop(key, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # Views and in-place ops return storages of their inputs: those are not new.
        inputs = {
            value.untyped_storage()._cdata
            for value in tree_flatten((args, kwargs))[0]
            if isinstance(value, torch.Tensor)
        }
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor) and value.untyped_storage()._cdata not in inputs:
                self._record(value)
        return out


@dataclass(frozen=True)
class StepMemory:
    """Measured bytes of one training step: what it began with, what its forward saved, its peak.

    ``persistent``: the tensors alive when the step began (weights, master weights, optimizer
    state); ``activations``: what the forward pass left alive (saved for backward, and the loss);
    ``peak``: the high-water mark of everything, the persistent tensors included.
    """

    persistent: int
    activations: int
    peak: int


def measure_step_memory(
    persistent: Iterable[torch.Tensor],
    forward: Callable[[], torch.Tensor],
    update: Callable[[torch.Tensor], object],
) -> StepMemory:
    """Run ``update(forward())`` under the tracker and report a :class:`StepMemory`.

    ``persistent``: the tensors alive before the step (counted once each, by storage);
    ``forward()``: returns the loss; ``update(loss)``: backward, optimizer step and whatever
    else the step does. The caller must hold no other reference to the loss.

    >>> model = torch.nn.Linear(100, 10)
    >>> sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> inputs = torch.ones(8, 100)
    >>> def update(loss):
    ...     loss.backward()
    ...     sgd.step()
    >>> memory = measure_step_memory(model.parameters(), lambda: model(inputs).square().sum(), update)
    >>> memory.persistent, memory.activations  # 1010 weights; the linear's output (saved by square), the loss
    (4040, 324)
    """
    with LiveTensorBytes() as live:
        live.track(*persistent)
        before = live.current
        loss = forward()
        activations = live.current - before
        update(loss)
        del loss
    return StepMemory(before, activations, live.peak)
