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
