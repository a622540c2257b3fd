"""Which benchmarks run here: the GPU skip rules, the shape mode the marker expression picks, and one benchmark
per visible GPU (or per ``--gpus`` entry) with the device in the test id, so each GPU keeps its own baseline.
Tested with faked devices and device counts."""

from types import SimpleNamespace

import pytest
import torch

from accounting.bench import plugin, skips
from accounting.bench.skips import gpu_skip_reason, shape_mode


def _fake_cuda(monkeypatch, *, available, capability=(9, 0), name="NVIDIA H100 80GB HBM3", arch=None):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    props = SimpleNamespace(major=capability[0], minor=capability[1], total_memory=80 * 2**30,
                            multi_processor_count=132, L2_cache_size=50 * 2**20, gcnArchName=arch)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)


def test_no_cuda_skips_every_gpu_test_with_the_reason(monkeypatch):
    _fake_cuda(monkeypatch, available=False)
    assert gpu_skip_reason().startswith("no CUDA device: torch.cuda.is_available() is False")
    assert gpu_skip_reason("bf16").startswith("no CUDA device")


@pytest.mark.parametrize("capability, dtype, skipped", [
    pytest.param((8, 0), "fp8", True, id="a100-no-fp8"),
    pytest.param((8, 6), "float8_e5m2", True, id="ampere-consumer-no-fp8"),
    pytest.param((8, 9), "fp8", False, id="ada-fp8"),
    pytest.param((9, 0), "fp8", False, id="hopper-fp8"),
    pytest.param((7, 0), "bf16", False, id="volta-bf16-not-a-capability-skip"),
])
def test_fp8_is_skipped_below_capability_8_9(monkeypatch, capability, dtype, skipped):
    _fake_cuda(monkeypatch, available=True, capability=capability, name="NVIDIA Test GPU")
    reason = gpu_skip_reason(dtype)
    if skipped:
        assert reason == (f"fp8 matmul (torch._scaled_mm) needs compute capability >= 8.9; "
                          f"NVIDIA Test GPU is {capability[0]}.{capability[1]}")
    else:
        assert reason is None


def test_collection_marks_gpu_items_skipped_and_leaves_others(monkeypatch):
    _fake_cuda(monkeypatch, available=False)

    class Item:
        def __init__(self, gpu):
            self.gpu, self.added = gpu, []

        def get_closest_marker(self, name):
            return object() if name == "gpu" and self.gpu else None

        def add_marker(self, marker):
            self.added.append(marker)

    gpu_item, cpu_item = Item(True), Item(False)
    plugin.pytest_collection_modifyitems(None, [gpu_item, cpu_item])
    assert cpu_item.added == []
    (marker,) = gpu_item.added
    assert marker.mark.name == "skip" and marker.mark.kwargs["reason"].startswith("no CUDA device")


@pytest.mark.parametrize("option, markexpr, mode", [
    ("auto", "", "quick"),
    ("auto", "cpu", "full"),
    ("auto", "gpu", "full"),
    ("auto", "gpu and not slow", "full"),
    ("auto", "not gpu", "quick"),
    ("auto", "slow", "quick"),
    ("full", "", "full"),
    ("quick", "cpu", "quick"),
])
def test_shape_mode_follows_the_marker_expression(option, markexpr, mode):
    config = SimpleNamespace(getoption=lambda name, default=None: {"matmul_shapes": option, "markexpr": markexpr}[name])
    assert shape_mode(config) == mode


# ---- one benchmark per GPU ---------------------------------------------------------------------------------


class FakeConfig:
    def __init__(self, gpus=None):
        self.options = {"gpus": gpus}

    def getoption(self, name, default=None):
        return self.options.get(name, default)


@pytest.mark.parametrize("count, gpus, expected", [
    pytest.param(8, None, list(range(8)), id="every-visible-gpu"),
    pytest.param(1, None, [0], id="one-gpu"),
    pytest.param(0, None, [0], id="no-cuda-one-skipped-test"),
    pytest.param(8, "0,3", [0, 3], id="picked"),
    pytest.param(8, "cuda:5, 5,2", [5, 2], id="prefix-spaces-duplicates"),
])
def test_gpu_indices(count, gpus, expected):
    assert skips.gpu_indices(FakeConfig(gpus), device_count=count) == expected


@pytest.mark.parametrize("count, gpus, message", [
    pytest.param(4, "4", r"^--gpus '4': cuda:4 does not exist \(4 CUDA device\(s\) visible\)$", id="beyond"),
    pytest.param(4, "0,x", r"^--gpus '0,x': 'x' is not a device index", id="not-an-index"),
    pytest.param(4, ",", r"^--gpus ',': '' is not a device index", id="empty"),
])
def test_bad_gpus_stop_the_run_naming_the_value(count, gpus, message):
    with pytest.raises(pytest.UsageError, match=message):
        skips.gpu_indices(FakeConfig(gpus), device_count=count)


def test_each_gpu_is_its_own_test_id(monkeypatch):
    monkeypatch.setattr(skips, "cuda_device_names", lambda: ["NVIDIA H100 80GB HBM3"] * 4)
    params = skips.gpu_device_params(FakeConfig())
    assert [param.id for param in params] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert [param.values for param in params] == [("cuda:0",), ("cuda:1",), ("cuda:2",), ("cuda:3",)]


def test_the_gpu_benchmarks_are_collected_once_per_device(pytestconfig, monkeypatch):
    """The matmul benchmark module's own parametrization, with three fake GPUs."""
    from tests.benchmarks import test_matmul

    monkeypatch.setattr(skips, "cuda_device_names", lambda: ["GPU"] * 3)

    class Metafunc:
        fixturenames = ["gpu_point", "gpu_device"]
        config = pytestconfig
        calls = {}

        def parametrize(self, name, params):
            self.calls[name] = params

    metafunc = Metafunc()
    test_matmul.pytest_generate_tests(metafunc)
    assert [param.id for param in metafunc.calls["gpu_device"]] == ["cuda:0", "cuda:1", "cuda:2"]
    assert metafunc.calls["gpu_point"], "the dtype × shape points are still there"
