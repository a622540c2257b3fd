"""fp8 on ROCm: torch ignores ``use_fast_accum`` there, so there is one fp8 kernel, named and timed once.

The truth: torch's ``aten/src/ATen/cuda/CUDABlas.cpp`` (``scaled_gemm``) sets ``CUBLASLT_MATMUL_DESC_FAST_ACCUM``
only under ``#ifndef USE_ROCM``; a ROCm build says so in ``torch.version.hip``.
"""

import pytest
import torch

from accounting.report import run
from accounting.report.accumulation import accumulation_note, accumulation_of, dtype_label, split_key

FP8 = "float8_e4m3fn"


@pytest.fixture(params=[None, "6.3.42131"], ids=["cuda-build", "rocm-build"])
def build(request, monkeypatch):
    """The torch build: CUDA (``torch.version.hip`` None) or ROCm."""
    monkeypatch.setattr(torch.version, "hip", request.param, raising=False)
    return "rocm" if request.param else "cuda"


def test_fp8_is_timed_once_per_kernel_the_build_has(build):
    notes = []
    keys = list(run.with_fp8_default_accumulation({"bfloat16": ["shape"], FP8: ["shape"]}, 17.3, notes))
    fp8_keys = [key for key in keys if split_key(key)[0] == FP8]
    accumulations = {split_key(key)[1] for key in fp8_keys}
    if build == "cuda":
        assert len(fp8_keys) == 2 and accumulations == {"fast", "default"}
    else:
        assert fp8_keys == [FP8] and accumulations == {"default"}, "one kernel: one key, one timing"


def test_the_rocm_figure_is_not_called_fast_and_says_why_it_is_alone(build):
    if build == "cuda":
        assert accumulation_of(FP8) == "fast" and accumulation_note(FP8) is None
        assert dtype_label(FP8) == f"{FP8} (fast accumulation)"
        return
    assert accumulation_of(FP8) == "default" and dtype_label(FP8) == f"{FP8} (default accumulation)"
    assert "use_fast_accum" in accumulation_note(FP8) and "timed once" in accumulation_note(FP8)
    assert accumulation_of("bfloat16") is None and accumulation_note("bfloat16") is None


def test_a_key_saved_on_cuda_reads_the_same_on_rocm(build):
    assert split_key(f"{FP8} (default accumulation)") == (FP8, "default")


@pytest.mark.parametrize("budget_s", [17.3, 3.0], ids=["budget-for-both", "budget-for-one"])
def test_the_report_says_why_rocm_has_one_fp8_figure_and_never_that_a_second_was_cut(build, budget_s):
    notes = []
    run.with_fp8_default_accumulation({"bfloat16": ["shape"], FP8: ["shape"]}, budget_s, notes)
    if build == "rocm":
        assert notes == [accumulation_note(FP8)], "the one figure is explained; nothing was left unmeasured"
    elif budget_s < 5:
        assert len(notes) == 1 and notes[0].startswith(f"{FP8} with default accumulation not measured")
    else:
        assert notes == []


def test_the_timed_case_names_the_kernel_the_build_runs(build):
    """The benchmarks' extra_info and the report's rows read the case's accumulation: on ROCm the package's usual
    ``use_fast_accum=True`` product is the default one, and must not be labelled fast."""
    from accounting.timing import matmul_case

    asked_fast = matmul_case(FP8, 16, 32, 16).accumulation
    assert asked_fast == ("fast" if build == "cuda" else "default")
    assert matmul_case(FP8, 16, 32, 16, fp8_fast_accum=False).accumulation == "default"
