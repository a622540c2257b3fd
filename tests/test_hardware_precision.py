"""TF32: the flag read and set through torch's legacy global and, on torch 2.9+, its per-backend ``fp32_precision``
flags, which inherit from the generic one; ``float32_matmul_mode`` keeps both APIs consistent and restores them."""

import pytest
import torch

from accounting.hardware.precision import float32_matmul_mode, tf32_enabled
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
