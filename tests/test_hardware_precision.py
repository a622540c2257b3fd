"""TF32: the flag read and set through torch's legacy global and, on torch 2.9+, its per-backend ``fp32_precision``
flags, which inherit from the generic one; ``float32_matmul_mode`` keeps both APIs consistent and restores them."""

import pytest
import torch

from accounting.errors import AccountingError
from accounting.hardware.precision import (
    HIPBLASLT_ALLOW_TF32,
    float32_matmul_mode,
    rocm_tf32_blocker,
    tf32_enabled,
    torch_release,
)
from tests.support.tf32_flags import new_api, tf32_state


def test_float32_matmul_mode_sets_and_restores_the_flag():
    before = tf32_enabled()
    for wanted in (True, False):
        with float32_matmul_mode(tf32=wanted):
            assert tf32_enabled() is wanted
        assert tf32_enabled() == before
    with pytest.raises(RuntimeError), float32_matmul_mode(tf32=not before):
        raise RuntimeError("restored even on error")
    assert tf32_enabled() == before


@new_api
def test_tf32_enabled_follows_inherited_flags(tf32_restored):
    torch.backends.fp32_precision = "tf32"  # generic: cuda matmul "none" inherits it
    torch.backends.cuda.matmul.fp32_precision = "none"
    assert tf32_enabled()
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    assert not tf32_enabled()


TF32_STARTS = [
    pytest.param(legacy, cuda, mkldnn, id=f"{legacy}-cuda_{cuda}-mkldnn_{mkldnn}")
    for legacy in ("highest", "high", "medium")
    for cuda in ("none", "ieee", "tf32")
    for mkldnn in ("none", "ieee", "tf32", "bf16")
]


@new_api
@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "fp32"])
@pytest.mark.parametrize("legacy, cuda, mkldnn", TF32_STARTS)
def test_float32_matmul_mode_keeps_both_apis_consistent_and_restores_exactly(tf32_restored, legacy, cuda, mkldnn, tf32):
    torch.set_float32_matmul_precision(legacy)
    torch._C._set_fp32_precision_setter("cuda", "matmul", cuda)  # the new API alone: possibly a mixed state
    torch._C._set_fp32_precision_setter("mkldnn", "matmul", mkldnn)
    before = tf32_state()
    with float32_matmul_mode(tf32=tf32):
        assert torch.get_float32_matmul_precision() == ("high" if tf32 else "highest")  # legacy reads: no error
        assert torch.backends.cuda.matmul.allow_tf32 is tf32  # what cuBLAS's allowTF32CuBLAS() checks
        assert torch.backends.cuda.matmul.fp32_precision == ("tf32" if tf32 else "ieee")
        assert tf32_enabled() is tf32
    assert tf32_state() == before


# ---- ROCm: what torch does with the flags ----------------------------------------------------------
# ATen's sources: ROCm builds before 2.7 compile the TF32 compute type out (CUDABlas.cpp, #ifndef USE_ROCM);
# 2.7 to 2.9 check c10::utils::check_env("HIPBLASLT_ALLOW_TF32") (true only for "1") in allowTF32CuBLAS;
# later sources do not.


@pytest.mark.parametrize("version, variable, blocked", [
    pytest.param("2.4.0+rocm6.1", "1", True, id="2.4"),
    pytest.param("2.6.0+rocm6.2.4", "1", True, id="2.6"),
    pytest.param("2.7.0+rocm6.3", None, True, id="2.7-unset"),
    pytest.param("2.7.0+rocm6.3", "1", False, id="2.7-on"),
    pytest.param("2.9.0+rocm6.4", "yes", True, id="2.9-not-1"),
    pytest.param("2.9.0+rocm6.4", "1", False, id="2.9-on"),
    pytest.param("2.10.0+rocm7.0", None, False, id="2.10"),
    pytest.param("2.13.0a0+git94c6e04", "0", False, id="2.13-variable-ignored"),
])
@pytest.mark.parametrize("flags", [True, False], ids=["tf32-allowed", "fp32"])
def test_tf32_enabled_on_a_rocm_build_is_what_torch_will_do(monkeypatch, version, variable, blocked, flags):
    monkeypatch.setattr(torch.version, "hip", "6.4.43482", raising=False)
    monkeypatch.setattr(torch, "__version__", version)
    monkeypatch.delenv(HIPBLASLT_ALLOW_TF32, raising=False)
    if variable is not None:
        monkeypatch.setenv(HIPBLASLT_ALLOW_TF32, variable)
    with float32_matmul_mode(tf32=flags):
        assert tf32_enabled() is (flags and not blocked)
    assert (rocm_tf32_blocker() is not None) is blocked


def test_the_rocm_check_is_not_applied_to_a_cuda_build(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch, "__version__", "2.8.0+cu128")
    monkeypatch.delenv(HIPBLASLT_ALLOW_TF32, raising=False)
    with float32_matmul_mode(tf32=True):
        assert tf32_enabled()


def test_the_blocker_names_the_torch_the_variable_and_how_to_turn_tf32_on():
    unset = rocm_tf32_blocker("2.8.0+rocm6.4", {})
    assert f"only with {HIPBLASLT_ALLOW_TF32}=1" in unset and "(it is not set)" in unset
    assert unset.endswith(f"to turn TF32 on, run with {HIPBLASLT_ALLOW_TF32}=1 (set before Python starts)")
    wrong = rocm_tf32_blocker("2.8.0+rocm6.4", {HIPBLASLT_ALLOW_TF32: "true"})
    assert "(it is 'true'; torch reads only '1' as on)" in wrong
    old = rocm_tf32_blocker("2.5.1+rocm6.2", {HIPBLASLT_ALLOW_TF32: "1"})
    assert old.startswith("torch 2.5.1+rocm6.2 on ROCm has no TF32 (XF32) path") and "install torch 2.7 or later" in old


@pytest.mark.parametrize("version, release", [
    ("2.4.0", (2, 4)), ("2.10.0.dev20251101+rocm7.0", (2, 10)), ("10.1", (10, 1)), (" 2.7.1", (2, 7)),
])
def test_torch_release_reads_major_and_minor_as_numbers(version, release):
    assert torch_release(version) == release


@pytest.mark.parametrize("version", ["", "rocm", "2", "v2.7.0"])
def test_an_unreadable_torch_version_is_named(version):
    with pytest.raises(AccountingError, match=rf"^torch version {version!r} does not start with major.minor$"):
        torch_release(version)


def test_tf32_enabled_never_raises_on_an_unreadable_rocm_torch_version(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.4.43482", raising=False)
    monkeypatch.setattr(torch, "__version__", "unknown")
    with float32_matmul_mode(tf32=True):
        assert tf32_enabled()
