"""The saved benchmark run tells fast fp8 accumulation from default, and a product with no bound is not failed."""

import json
from types import SimpleNamespace

import pytest
import torch

from accounting.bench.fixture import FlopsBenchmark
from accounting.bench.summary import SUMMARY
from accounting.health.results import check_product, precision_of
from accounting.timing import matmul_case


class _Benchmark:
    """What check_result touches of pytest-benchmark's fixture."""

    def __init__(self):
        self.extra_info, self.name = {}, "test_gpu_matmul[float8_e4m3fn-64x64x32]"


def _runner():
    config = SimpleNamespace(getoption=lambda name, default=None: None, stash=pytest.Stash())
    return FlopsBenchmark(_Benchmark(), config)


@pytest.mark.parametrize("fast, named", [(True, "fast"), (False, "default")])
def test_an_fp8_benchmark_records_its_accumulation_in_the_saved_json(fast, named):
    runner = _runner()
    runner.check_result(matmul_case("float8_e4m3fn", 64, 64, 32, fp8_fast_accum=fast))
    saved = json.loads(json.dumps(runner.benchmark.extra_info))  # as pytest-benchmark writes it
    assert saved["accumulation"] == named
    assert saved["result_check"]["ok"] is True and saved["result_check"]["checked"] is True


def test_other_dtypes_name_no_accumulation():
    runner = _runner()
    runner.check_result(matmul_case("bfloat16", 64, 64, 32))
    assert "accumulation" not in runner.benchmark.extra_info


def test_a_product_with_no_bound_is_recorded_not_checked_and_does_not_fail_the_benchmark(monkeypatch):
    """The fixture's check judged with a model whose bound overflows: recorded, said, not failed."""
    from accounting.health import results

    coarse = precision_of("bfloat16", out_dtype=torch.bfloat16)
    coarse = type(coarse)(0, 1e10, coarse.output_unit)  # (1 + 10¹⁰)^65 is past float64

    def unbounded(*args, **kwargs):
        return check_product(*args, **{**kwargs, "precision": coarse})

    monkeypatch.setattr(results, "check_product", unbounded)
    runner = _runner()
    runner.check_result(matmul_case("bfloat16", 64, 64, 32))  # no pytest.fail
    record = runner.benchmark.extra_info["result_check"]
    assert record["ok"] is True and record["checked"] is False
    assert record["not_checked_reason"].startswith("no finite rounding bound at k=64")
    assert record["excess"] is None  # JSON has no NaN
    assert runner.config.stash[SUMMARY] == [
        f"{runner.benchmark.name}: bfloat16 64x64x32 product not checked: {record['not_checked_reason']}"]
