"""``pytest -m gpu`` on a multi-GPU node: one benchmark per visible GPU (or per ``--gpus`` entry), the device
in the test id, so each GPU keeps its own baseline. Tested with faked device counts."""

import pytest

from accounting.bench import skips as pytest_plugin


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
    assert pytest_plugin.gpu_indices(FakeConfig(gpus), device_count=count) == expected


@pytest.mark.parametrize("count, gpus, message", [
    pytest.param(4, "4", r"^--gpus '4': cuda:4 does not exist \(4 CUDA device\(s\) visible\)$", id="beyond"),
    pytest.param(4, "0,x", r"^--gpus '0,x': 'x' is not a device index", id="not-an-index"),
    pytest.param(4, ",", r"^--gpus ',': '' is not a device index", id="empty"),
])
def test_bad_gpus_stop_the_run_naming_the_value(count, gpus, message):
    with pytest.raises(pytest.UsageError, match=message):
        pytest_plugin.gpu_indices(FakeConfig(gpus), device_count=count)


def test_each_gpu_is_its_own_test_id(monkeypatch):
    monkeypatch.setattr(pytest_plugin, "cuda_device_names", lambda: ["NVIDIA H100 80GB HBM3"] * 4)
    params = pytest_plugin.gpu_device_params(FakeConfig())
    assert [param.id for param in params] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert [param.values for param in params] == [("cuda:0",), ("cuda:1",), ("cuda:2",), ("cuda:3",)]


def test_the_gpu_benchmarks_are_collected_once_per_device(pytestconfig, monkeypatch):
    """The matmul benchmark module's own parametrization, with three fake GPUs."""
    from tests.benchmarks import test_matmul as test_bench_matmul

    monkeypatch.setattr(pytest_plugin, "cuda_device_names", lambda: ["GPU"] * 3)

    class Metafunc:
        fixturenames = ["gpu_point", "gpu_device"]
        config = pytestconfig
        calls = {}

        def parametrize(self, name, params):
            self.calls[name] = params

    metafunc = Metafunc()
    test_bench_matmul.pytest_generate_tests(metafunc)
    assert [param.id for param in metafunc.calls["gpu_device"]] == ["cuda:0", "cuda:1", "cuda:2"]
    assert metafunc.calls["gpu_point"], "the dtype × shape points are still there"
