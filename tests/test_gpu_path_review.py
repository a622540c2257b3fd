"""The GPU path against what a first real GPU would show (issue 8), tested on the CPU with fakes.

Each test stands in for a device property, a torch version, a flag or a driver, as
tests/test_report_gpu_paths.py does: torch.cuda is faked where the code under test reads it.
"""

from types import SimpleNamespace

import pytest
import torch

from accounting import device as device_module
from accounting import timing
from accounting.device import UNREPORTED_CACHE_BYTES, detect_device, l2_cache_bytes
from accounting.report.measure import MatmulTimer

GIB = 2**30


def torch_2_4_properties(**overrides):
    """What ``torch.cuda.get_device_properties`` gives on torch 2.4: no ``L2_cache_size`` (torch 2.5 added it)."""
    fields = dict(name="NVIDIA H100 80GB HBM3", major=9, minor=0, total_memory=80 * GIB, multi_processor_count=132)
    fields.update(overrides)
    return SimpleNamespace(**fields)


@pytest.fixture
def fake_cuda(monkeypatch):
    """``fake_cuda(props, count=1, hip=None)``: torch.cuda answers as a machine with ``count`` such devices."""

    def install(props, *, count=1, hip=None, cuda_version="12.4"):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: props.name)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (props.major, props.minor))
        monkeypatch.setattr(torch.version, "hip", hip, raising=False)
        monkeypatch.setattr(torch.version, "cuda", None if hip else cuda_version, raising=False)
        monkeypatch.setattr(device_module, "_driver_version", lambda: None)
        return props

    return install


# ---- item 2: torch 2.4 -----------------------------------------------------------------------


def test_torch_2_4_properties_without_l2_size_give_a_conservative_cache(fake_cuda):
    fake_cuda(torch_2_4_properties())
    assert l2_cache_bytes("cuda:0") == UNREPORTED_CACHE_BYTES
    info = detect_device("cuda:0")
    assert info.l2_cache_bytes is None, "an unreported L2 is not invented in the device description"
    small = torch.ones(1024, 1024)  # 4 MiB: fits any L2, so it must still be flushed
    assert timing.should_flush_l2("cuda:0", small)


def test_reported_l2_size_is_used_when_torch_has_it(fake_cuda):
    fake_cuda(torch_2_4_properties(L2_cache_size=50 * 2**20))
    assert l2_cache_bytes("cuda:0") == detect_device("cuda:0").l2_cache_bytes == 50 * 2**20


def test_out_of_memory_is_recognised_without_the_torch_2_5_alias(monkeypatch):
    """torch 2.4 may lack ``torch.OutOfMemoryError``; ``torch.cuda.OutOfMemoryError`` is there since 1.13."""
    error_class = torch.cuda.OutOfMemoryError
    monkeypatch.delattr(torch, "OutOfMemoryError", raising=False)
    from accounting.report import measure

    def out_of_memory(dtype, m, k, n, device):
        raise error_class("CUDA error: tried to allocate 8.00 GiB")  # no "out of memory" in the text

    monkeypatch.setattr(measure, "matmul_case", out_of_memory)
    monkeypatch.setattr(measure, "release_cached_memory", lambda device: None)
    h100 = device_module.DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 80 * GIB)
    assert MatmulTimer(h100, target_s=0.1)("bfloat16", 65536, 65536, 65536) is None
