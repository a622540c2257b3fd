"""Bytes allocated at the high-water mark of a block of code, on the CPU or on CUDA.

CPU: :class:`accounting.LiveTensorBytes` (exact storage sizes of the tensors created
inside). CUDA: the caching allocator's ``max_memory_allocated`` after
``reset_peak_memory_stats``, less what was allocated before (rounded to its 512-byte
blocks; no cached-but-free memory). Either way ``peak`` is what the block added on top
of what was alive when it began. This module touches ``torch.cuda`` only for a CUDA device.

>>> import torch
>>> with PeakMemory("cpu") as memory:
...     x = torch.ones(1000)
...     del x
...     y = torch.ones(10)
>>> memory.peak
4000
"""

import torch

from accounting.hardware.clocks import synchronize
from accounting.hardware.devices import as_device
from accounting.live_memory import LiveTensorBytes
from accounting.memory import storage_bytes


class PeakMemory:
    """Context manager: ``peak`` is the largest number of bytes the block had allocated at once."""

    def __init__(self, device):
        self.device = as_device(device)
        self.peak = 0
        self._tracker = None
        self._before = 0

    def __enter__(self):
        if self.device.type == "cuda":
            synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._before = torch.cuda.memory_allocated(self.device)
        else:
            self._tracker = LiveTensorBytes().__enter__()
        return self

    def __exit__(self, *exc_info):
        if self.device.type == "cuda":
            synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device) - self._before
            return None
        result = self._tracker.__exit__(*exc_info)
        self.peak = self._tracker.peak
        return result


def step_peak_bytes(step, run, device) -> int:
    """Peak bytes of a training step: ``step.persistent_tensors()`` (weights, optimizer state; read after the
    step, which creates the state) plus the high-water mark ``run()`` adds on ``device``."""
    with PeakMemory(device) as memory:
        run()
    return storage_bytes(*step.persistent_tensors()) + memory.peak
