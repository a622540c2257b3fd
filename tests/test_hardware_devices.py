"""Which device is in use: detection and its errors, the driver, and the properties torch reports for a GPU.

Each GPU test stands in for a device property, a torch version or a driver: ``torch.cuda`` is faked where
the code under test reads it (torch 2.4 reports no L2 size; ROCm builds fill ``gcnArchName`` with the arch,
CUDA builds with the name; an MI300X's last-level cache is the 256 MB Infinity Cache).
"""

import sys
from types import SimpleNamespace

import pytest
import torch

from accounting import timing
from accounting.errors import AccountingError, AccountingTypeError
from accounting.hardware import devices
from accounting.hardware.devices import UNREPORTED_CACHE_BYTES, detect_device, l2_cache_bytes
from accounting.hardware.peaks import chip_row


def test_detect_device_defaults_to_cpu_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert detect_device().kind == "cpu"


@pytest.mark.parametrize("device, message", [
    pytest.param("cuda", r"^device 'cuda' is not available: torch.cuda.is_available\(\) is False", id="no-cuda"),
    pytest.param("mps", r"^device 'mps' is not supported: only cpu and cuda are", id="mps"),
    pytest.param("tpu:0", r"^unknown device 'tpu:0'", id="nonsense"),
])
def test_detect_device_names_what_it_cannot_use(monkeypatch, device, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(AccountingError, match=message):
        detect_device(device)


def test_detect_device_rejects_an_index_past_the_last_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(AccountingError, match=r"^device 'cuda:3' is not available: 1 CUDA device\(s\) present"):
        detect_device("cuda:3")


def test_detect_device_rejects_a_non_device():
    with pytest.raises(AccountingTypeError, match=r"^device must be a string, torch.device or DeviceInfo, got 3"):
        detect_device(3)


def test_driver_version_asks_nvml_once(monkeypatch):
    inits = []
    fake = SimpleNamespace(nvmlInit=lambda: inits.append(1), nvmlSystemGetDriverVersion=lambda: b"550.54.15")
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    devices._driver_version.cache_clear()
    try:
        assert [devices._driver_version() for _ in range(3)] == ["550.54.15"] * 3
        assert inits == [1]
    finally:
        devices._driver_version.cache_clear()  # forget the fake driver


# ---- properties as torch reports them ----------------------------------------------------------------------

GIB = 2**30
GFX942 = "gfx942:sramecc+:xnack-"


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
        monkeypatch.setattr(devices, "_driver_version", lambda: None)
        return props

    return install


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


def test_mi300x_flush_covers_the_infinity_cache_not_one_xcds_l2(fake_cuda):
    fake_cuda(torch_2_4_properties(name="AMD Instinct MI300X", major=9, minor=4, total_memory=192 * GIB,
                                   multi_processor_count=304, L2_cache_size=4 * 2**20, gcnArchName=GFX942),
              hip="6.2.41133")
    assert timing.flush_bytes("cuda:0") == 256 * 2**20
    operands = torch.empty(100 * 2**20, dtype=torch.uint8, device="meta")  # 100 MiB: past L2, inside the 256 MB
    assert timing.should_flush_l2("cuda:0", operands), "operands held in the Infinity Cache must be flushed"


def test_gcn_arch_name_is_not_an_arch_on_cuda_builds(fake_cuda):
    """CUDA builds fill gcnArchName with the device name; only ROCm's is an arch."""
    fake_cuda(torch_2_4_properties(L2_cache_size=50 * 2**20, gcnArchName="NVIDIA H100 80GB HBM3"))
    assert detect_device("cuda:0").arch is None


def test_gcn_arch_name_is_kept_on_rocm(fake_cuda):
    fake_cuda(torch_2_4_properties(name="AMD Radeon Graphics", major=9, minor=4, L2_cache_size=4 * 2**20,
                                   gcnArchName=GFX942), hip="6.2.41133")
    info = detect_device("cuda:0")
    assert info.arch == GFX942 and info.runtime == "ROCm 6.2.41133" and chip_row(info) == "MI300X"


class _FakeProperties:
    def __init__(self, **fields):
        self.__dict__.update(fields)


@pytest.mark.parametrize("fields, expected", [
    pytest.param({"uuid": "1f2e3d4c-0000-1111-2222-333344445555", "pci_domain_id": 0, "pci_bus_id": 0x1B,
                  "pci_device_id": 0}, ("GPU-1f2e3d4c-0000-1111-2222-333344445555", "0000:1b:00.0"), id="nvidia"),
    pytest.param({"uuid": "GPU-abc"}, ("GPU-abc", None), id="older-torch-no-pci"),
    pytest.param({}, (None, None), id="nothing"),
])
def test_uuid_and_bus_id_from_torchs_device_properties(fields, expected, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: _FakeProperties(**fields))
    monkeypatch.setattr(torch.version, "hip", None)
    assert devices.cuda_uuid_and_bus_id("cuda:3") == expected
