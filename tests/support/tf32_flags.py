"""TF32 flags as torch 2.9+ keeps them: every per-backend ``fp32_precision`` flag read and put back.

``tests/conftest.py``'s ``tf32_restored`` fixture puts them back after each test that asks for it.
"""

import pytest
import torch

FP32_FLAGS = [("generic", "all")] + [(backend, op) for backend in ("cuda", "mkldnn") for op in ("all", "matmul", "conv", "rnn")]
LINKED = (("cuda", "matmul"), ("mkldnn", "matmul"))  # what set_float32_matmul_precision writes (ATen Context.cpp)
new_api = pytest.mark.skipif(not hasattr(torch._C, "_get_fp32_precision_getter"),
                             reason=f"torch {torch.__version__} has no per-backend fp32_precision flags (2.9+)")


def tf32_state():
    """Every per-backend flag as set, and the legacy global (read with the linked flags at "ieee", where torch
    cannot call the state mixed; the flags are put back)."""
    raw = {flag: torch._C._get_fp32_precision_getter(*flag) for flag in FP32_FLAGS}
    for flag in LINKED:
        torch._C._set_fp32_precision_setter(*flag, "ieee")
    legacy = torch.get_float32_matmul_precision()
    for flag in LINKED:
        torch._C._set_fp32_precision_setter(*flag, raw[flag])
    return legacy, raw


def set_tf32_state(state):
    legacy, raw = state
    torch.set_float32_matmul_precision(legacy)
    for flag, value in raw.items():
        torch._C._set_fp32_precision_setter(*flag, value)
