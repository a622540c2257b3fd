"""Grouped-query attention (fewer key/value heads than query heads) counted by ``count_flops`` on every torch.

torch 2.5 to 2.11 (torch/utils/flop_counter.py: ``sdpa_flop_count`` and ``sdpa_backward_flop_count``) assert
that query, key and value have as many heads, so counting a fused SDPA kernel called with ``enable_gqa`` fails
there; later torch counts it. These tests simulate such a torch by putting the equal-heads check back in front of
torch's own counts (the formulas torch registers for the fused kernels call them), and hold the package's count
to independent truths: ``FlopCounterMode``'s count of the same call with the key/value heads repeated to every
query head (what a kernel does with grouped heads: each query head still does its full QKᵀ and PV work), and
the same products run as plain matmuls, which torch counts itself.
"""

import importlib.util

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.torch_version import TorchVersion
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from accounting import AccountingError
from accounting.flop_count import (
    attention_backward_flop, attention_flop, count_flops, counts_grouped_heads, missing_formulas)
from accounting.model_mfu import build_training_step, layers, model_size

aten = torch.ops.aten
SDPA_TAKES_ENABLE_GQA = TorchVersion(torch.__version__) >= "2.5"
needs_enable_gqa = pytest.mark.skipif(not SDPA_TAKES_ENABLE_GQA, reason="no kernel of this torch takes grouped heads")


@pytest.fixture
def torch_that_asserts_equal_heads(monkeypatch):
    """torch 2.5-2.11's SDPA counts: every tensor must have as many heads as the query, else AssertionError."""
    for name in ("sdpa_flop_count", "sdpa_backward_flop_count"):
        count = getattr(flop_counter, name)

        def equal_heads_only(*shapes, _count=count, _name=name):
            if len({shape[1] for shape in shapes}) != 1:
                raise AssertionError(f"{_name}: query/key/value shapes are incompatible")
            return _count(*shapes)

        monkeypatch.setattr(flop_counter, name, equal_heads_only)
    counts_grouped_heads.cache_clear()  # torch's formulas now answer differently
    yield
    monkeypatch.undo()
    counts_grouped_heads.cache_clear()


def _counted_by_torch(fn) -> dict:
    """FlopCounterMode's own count by operator name, without the package's formulas."""
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return {str(op): flops for op, flops in counter.get_flop_counts().get("Global", {}).items()}


def _meta(*shape):
    return torch.empty(*shape, device="meta", dtype=torch.bfloat16)


def _repeated(kv, group):
    return kv.repeat_interleave(group, dim=1)


# Each fused kernel's forward and backward, called as SDPA calls them (shapes only: meta tensors).
def _flash(q, k, v, grad):
    out, lse, cum_q, cum_k, max_q, max_k, seed, offset, _ = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)
    aten._scaled_dot_product_flash_attention_backward(grad, q, k, v, out, lse, cum_q, cum_k, max_q, max_k, 0.0, True,
                                                      seed, offset)


def _efficient(q, k, v, grad):
    out, lse, seed, offset = aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, True)
    aten._scaled_dot_product_efficient_attention_backward(grad, q, k, v, torch.empty(0, device="meta"), out, lse,
                                                          seed, offset, 0.0, [True, True, True, False], True)


def _cudnn(q, k, v, grad):
    out, lse, cum_q, cum_k, max_q, max_k, seed, offset, _ = aten._scaled_dot_product_cudnn_attention(
        q, k, v, None, True, 0.0, True)
    aten._scaled_dot_product_cudnn_attention_backward(grad, q, k, v, out, lse, seed, offset,
                                                      torch.empty(0, device="meta"), cum_q, cum_k, max_q, max_k, 0.0,
                                                      True)


def _cpu_flash(q, k, v, grad):
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)
    aten._scaled_dot_product_flash_attention_for_cpu_backward(grad, q, k, v, out, lse, 0.0, True)


KERNELS = {"_scaled_dot_product_flash_attention": _flash,
           "_scaled_dot_product_efficient_attention": _efficient,
           "_scaled_dot_product_cudnn_attention": _cudnn,
           "_scaled_dot_product_flash_attention_for_cpu": _cpu_flash}


@pytest.mark.parametrize("simulated", [False, True], ids=["this torch", "torch 2.5-2.11"])
@pytest.mark.parametrize("kernel", [name for name in KERNELS if hasattr(aten, name)])
@pytest.mark.parametrize("heads, kv_heads", [pytest.param(8, 2, marks=needs_enable_gqa),
                                             pytest.param(6, 1, marks=needs_enable_gqa), (4, 4)])
def test_each_fused_kernel_counts_grouped_heads_as_the_same_call_with_them_repeated(
        request, kernel, simulated, heads, kv_heads):
    if simulated:
        request.getfixturevalue("torch_that_asserts_equal_heads")
    q, grad = _meta(2, heads, 24, 16), _meta(2, heads, 24, 16)
    k, v = _meta(2, kv_heads, 40, 16), _meta(2, kv_heads, 40, 16)
    run = KERNELS[kernel]
    count = count_flops(lambda: run(q, k, v, grad))
    # The truth: torch counting the call with every query head's key/value head repeated (equal heads, which every
    # torch counts); the CPU's kernel counts as torch counts the CUDA flash kernel.
    truth_kernel = "_scaled_dot_product_flash_attention" if kernel.endswith("_for_cpu") else kernel
    truth = _counted_by_torch(lambda: KERNELS[truth_kernel](q, _repeated(k, heads // kv_heads),
                                                            _repeated(v, heads // kv_heads), grad))
    assert count.by_operator == {name.replace(truth_kernel, kernel): flops
                                 for name, flops in truth.items()}
    assert count.total == sum(truth.values()) > 0


@needs_enable_gqa
@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (4, 1)])
def test_a_cpu_step_with_grouped_heads_counts_as_repeated_and_as_the_math_kernel_does(
        torch_that_asserts_equal_heads, heads, kv_heads):
    """The real CPU kernel, forward and backward. Truths: the same step with K and V repeated; and SDPA's math kernel
    (plain matmuls, counted by torch): its 2 forward and 4 backward products, to which the fused backward adds one,
    QKᵀ recomputed (half the forward's work at equal head widths)."""
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, heads, 32, 16, generator=generator, requires_grad=True)
    k, v = (torch.randn(2, kv_heads, 32, 16, generator=generator, requires_grad=True) for _ in range(2))
    group = heads // kv_heads

    def step(grouped: bool):
        keys, values = (k, v) if grouped else (_repeated(k, group), _repeated(v, group))
        torch.nn.functional.scaled_dot_product_attention(q, keys, values, is_causal=True,
                                                         enable_gqa=grouped).sum().backward()

    grouped = count_flops(lambda: step(True))
    assert set(grouped.by_operator) == {"aten._scaled_dot_product_flash_attention_for_cpu",
                                        "aten._scaled_dot_product_flash_attention_for_cpu_backward"}
    assert grouped.total == count_flops(lambda: step(False)).total
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        math = _counted_by_torch(lambda: step(True))
        math_forward = sum(_counted_by_torch(
            lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)).values())
    assert grouped.total == sum(math.values()) + math_forward // 2


@given(batch=st.integers(1, 3), kv_heads=st.integers(1, 3), group=st.integers(1, 4), query_length=st.integers(1, 9),
       key_length=st.integers(1, 9), width=st.integers(1, 8), value_width=st.integers(1, 8))
def test_the_formulas_count_each_product_a_grouped_kernel_does(batch, kv_heads, group, query_length, key_length, width,
                                                               value_width):
    """Forward: QKᵀ and PV, for every query head; backward: QKᵀ again, dO·Vᵀ, Pᵀ·dO, dS·K and dSᵀ·Q. Truth: those
    products run as plain matmuls on meta tensors, with K and V repeated to every query head, counted by torch."""
    heads = kv_heads * group
    q, out = _meta(batch, heads, query_length, width), _meta(batch, heads, query_length, value_width)
    k, v = _meta(batch, kv_heads, key_length, width), _meta(batch, kv_heads, key_length, value_width)
    keys, values = _repeated(k, group), _repeated(v, group)
    scores = _meta(batch, heads, query_length, key_length)
    forward = _counted_by_torch(lambda: (q @ keys.mT) @ values)
    backward = _counted_by_torch(lambda: (q @ keys.mT, out @ values.mT, scores.mT @ out, scores @ keys,
                                          scores.mT @ q))
    assert attention_flop(q, k, v) == sum(forward.values())
    assert attention_backward_flop(out, q, k, v) == sum(backward.values())
    assert attention_flop(q.shape, k.shape, v.shape) == attention_flop(q, k, v)  # shapes or tensors alike


def test_heads_that_do_not_group_are_named():
    with pytest.raises(AccountingError) as caught:
        attention_flop((1, 6, 8, 16), (1, 4, 8, 16), (1, 4, 8, 16))
    assert str(caught.value) == ("attention of query (1, 6, 8, 16), key (1, 4, 8, 16), value (1, 4, 8, 16): "
                                 "6 query heads are not a multiple of the key's 4")


@needs_enable_gqa  # the kernels take grouped heads from torch 2.5
def test_a_torch_formula_that_counts_grouped_heads_is_kept(monkeypatch):
    def torch_formula(*args, out_val=None, **kwargs):
        return 7  # the same for grouped and repeated heads

    monkeypatch.setitem(flop_counter.flop_registry, aten._scaled_dot_product_flash_attention, torch_formula)
    assert aten._scaled_dot_product_flash_attention not in missing_formulas()
    q, k = _meta(1, 4, 8, 16), _meta(1, 2, 8, 16)
    assert count_flops(lambda: aten._scaled_dot_product_flash_attention(q, k, k, 0.0, True)).total == 7


@needs_enable_gqa
def test_a_torch_formula_that_miscounts_grouped_heads_is_replaced(monkeypatch):
    """A formula that counts the key's heads (a quarter of the work at 4 query heads per key/value head)."""
    def by_key_heads(query, key, value, *args, out_val=None, **kwargs):
        (batch, _, length, width), heads = query.shape, key.shape[1]
        return 4 * batch * heads * length * key.shape[2] * width

    for name in ("_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention"):
        monkeypatch.setitem(flop_counter.flop_registry, getattr(aten, name), by_key_heads)
    assert {aten._scaled_dot_product_efficient_attention, aten._scaled_dot_product_cudnn_attention} <= set(
        missing_formulas())
    q, k, grad = _meta(1, 8, 8, 16), _meta(1, 2, 8, 16), _meta(1, 8, 8, 16)
    count = count_flops(lambda: _efficient(q, k, k, grad))
    truth = _counted_by_torch(lambda: _flash(q, _repeated(k, 4), _repeated(k, 4), grad))
    assert count.total == sum(truth.values())


# ---- the package's own step ---------------------------------------------------------------------------------


def _layers_as_imported_now():
    """A fresh copy of ``accounting.model_mfu.layers``, its constants read on the torch as it is now."""
    spec = importlib.util.spec_from_file_location("_layers_fresh", layers.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_enable_gqa
def test_the_llama_step_passes_grouped_heads_to_sdpa_whatever_torch_can_count(torch_that_asserts_equal_heads,
                                                                              monkeypatch):
    """On a torch whose counter asserts equal heads the package's own step still calls SDPA with enable_gqa (no copy of
    K and V, as Hugging Face calls it), and its count is that of the step with the heads repeated."""
    assert _layers_as_imported_now().SDPA_TAKES_GQA
    size = model_size("tiny-llama", layers=1, seq=8, batch=1)
    assert size.config.kv_heads < size.config.heads
    seen = set()
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, *args, **options):
        seen.add((query.shape[1], key.shape[1], bool(options.get("enable_gqa"))))
        return real(query, key, value, *args, **options)

    monkeypatch.setattr(layers.F, "scaled_dot_product_attention", spy)
    grouped = count_flops(build_training_step(size))
    assert seen == {(size.config.heads, size.config.kv_heads, True)}
    assert grouped.total == count_flops(build_training_step(size, enable_gqa=False)).total
