"""The grouped matmuls of a mixture of experts and the CPU's fused attention, counted by ``count_flops``.

Truths: the same products run as plain matmuls (``mm``/``bmm``, which ``FlopCounterMode`` counts
itself), one group at a time, forward and backward; ``torch._grouped_mm``'s own output (the loop
must compute the same numbers, so the offsets are read as torch reads them); the schema of
``torch._scaled_grouped_mm`` for where its offsets are; torch's own flash-attention formulas; and a
Hugging Face Mixtral step whose experts run as ``batched_mm`` against the same step on ``grouped_mm``.
"""

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from accounting import AccountingError
from accounting.flop_count import count_flops, missing_formulas, scaled_grouped_mm_flop, scaled_grouped_mm_v2_flop

pytestmark = pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="this torch has no torch._grouped_mm")

ALIGN = 4  # the CPU kernel wants each row 16 bytes aligned: fp32 widths in multiples of 4


def _counted_by_torch(fn) -> int:
    """FlopCounterMode's own total, without the package's supplement: the truth for plain matmuls."""
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


def _forward_backward(product, *operands):
    """Leaf copies of ``operands``, and a function running ``product`` on them and its backward."""
    leaves = [x.detach().clone().requires_grad_() for x in operands]
    grad = {}

    def step():
        out = product(*leaves)
        if "out" not in grad:  # one fixed, dense upstream gradient (an expanded one breaks the grouped kernel)
            grad["out"] = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
        out.backward(grad["out"])
        return out
    return step


def _ends(lengths) -> list[int]:
    ends, total = [], 0
    for length in lengths:
        total += length
        ends.append(total)
    return ends


@st.composite
def routed_rows(draw):
    """Tokens routed to experts: rows per expert (empty experts allowed), rows left unrouted at the end, widths."""
    lengths = draw(st.lists(st.integers(0, 6), min_size=1, max_size=4))
    unrouted = draw(st.integers(0, 3))
    k, n = (ALIGN * draw(st.integers(1, 4)) for _ in range(2))
    return lengths, unrouted, k, n


@given(routed_rows())
@example(([3, 0, 4], 2, 16, 8))  # an empty expert and two unrouted rows
@example(([5], 0, 4, 4))
def test_experts_forward_and_backward_count_as_their_plain_matmuls(case):
    """(m, k) by (g, k, n): the forward, and a backward that calls the (m, k)-by-(k, n) weight-gradient form."""
    lengths, unrouted, k, n = case
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randn(sum(lengths) + unrouted, k, generator=generator)
    weights = torch.randn(len(lengths), k, n, generator=generator)
    ends = _ends(lengths)
    offs = torch.tensor(ends, dtype=torch.int32)

    def per_expert(x, w):
        return torch.cat([x[end - length:end] @ w[g] for g, (length, end) in enumerate(zip(lengths, ends))])

    grouped = _forward_backward(lambda x, w: torch._grouped_mm(x, w, offs=offs), tokens, weights)
    count = count_flops(grouped)
    assert count.total == _counted_by_torch(_forward_backward(per_expert, tokens, weights))
    assert set(count.by_operator) == {"aten._grouped_mm"}
    routed = ends[-1]
    torch.testing.assert_close(grouped()[:routed], per_expert(tokens, weights))  # offs read as torch reads them


@pytest.mark.parametrize("groups, m, k, n", [(3, 5, 16, 8), (1, 1, 4, 4), (4, 7, 8, 12)])
def test_batched_groups_count_as_bmm(groups, m, k, n):
    a, b = torch.randn(groups, m, k), torch.randn(groups, k, n)
    count = count_flops(_forward_backward(lambda x, w: torch._grouped_mm(x, w), a, b))
    assert count.total == _counted_by_torch(_forward_backward(torch.bmm, a, b))


@pytest.mark.parametrize("lengths, unrouted", [([4, 8, 4], 0), ([0, 12], 4), ([8], 0), ([4, 0], 8)], ids=str)
def test_groups_along_k_and_along_n_count_as_their_plain_matmuls(lengths, unrouted):
    """(m, k) by (k, n) grouped along k, giving (g, m, n); (g, m, k) by (k, n) grouped along n; past the last
    offset (``unrouted``) nothing is computed."""
    ends, extent = _ends(lengths), sum(lengths) + unrouted
    offs = torch.tensor(ends, dtype=torch.int32)
    starts = [end - length for end, length in zip(ends, lengths)]
    a, b = torch.randn(8, extent), torch.randn(extent, 12)
    along_k = _forward_backward(lambda x, y: torch._grouped_mm(x, y, offs=offs), a, b)
    plain_k = _forward_backward(lambda x, y: torch.stack([x[:, s:e] @ y[s:e] for s, e in zip(starts, ends)]), a, b)
    assert count_flops(along_k).total == _counted_by_torch(plain_k)
    torch.testing.assert_close(along_k(), plain_k())

    a, b = torch.randn(len(lengths), 8, 12), torch.randn(12, extent)
    along_n = _forward_backward(lambda x, y: torch._grouped_mm(x, y, offs=offs), a, b)
    plain_n = _forward_backward(lambda x, y: torch.cat([x[g] @ y[:, s:e] for g, (s, e) in enumerate(zip(starts, ends))],
                                                       dim=1), a, b)
    assert count_flops(along_n).total == _counted_by_torch(plain_n)
    torch.testing.assert_close(along_n()[:, :ends[-1]], plain_n())


def test_on_meta_every_row_counts_as_routed():
    """Meta offsets have no values: the count is the one of the same product with every row routed."""
    lengths, k, n = [3, 5, 0, 8], 16, 8
    offs = _ends(lengths)

    def experts(device):
        x = torch.zeros(sum(lengths), k, device=device, dtype=torch.bfloat16)
        w = torch.zeros(len(lengths), k, n, device=device, dtype=torch.bfloat16)
        return lambda: torch._grouped_mm(x, w, offs=torch.tensor(offs, dtype=torch.int32, device=device))
    on_meta = count_flops(experts("meta")).total
    assert on_meta == count_flops(experts("cpu")).total == 2 * sum(lengths) * k * n
    with FakeTensorMode():  # fake tensors (torch.compile's tracing) have no values either
        assert count_flops(experts("cpu")).total == on_meta


@pytest.mark.parametrize("offs, why", [
    pytest.param([3, 2, 10], "non-decreasing", id="decreasing"),
    pytest.param([3, 7, 11], "at most 10", id="one-past-the-rows"),
])
def test_offsets_torch_would_misread_are_refused_by_value(offs, why):
    x, w = torch.randn(10, 16), torch.randn(3, 16, 8)
    with pytest.raises(AccountingError, match=rf"^counting FLOPs: fn raised AccountingError: _grouped_mm of shapes "
                                              rf"\(10, 16\) and \(3, 16, 8\): offs must be .*{why}.*got \{offs}"):
        count_flops(lambda: torch._grouped_mm(x, w, offs=torch.tensor(offs, dtype=torch.int32)))


# ---- fp8 experts: torch._scaled_grouped_mm (no CPU kernel: run on meta, and its formula read at the schema) ------


def test_scaled_grouped_mm_counts_as_the_grouped_product_on_meta():
    lengths, k, n = [8, 16, 8], 32, 48
    a = torch.zeros(sum(lengths), k, device="meta").to(torch.float8_e4m3fn)
    b = torch.zeros(len(lengths), n, k, device="meta").to(torch.float8_e4m3fn).transpose(-2, -1)
    scale_a, scale_b = torch.ones(sum(lengths), device="meta"), torch.ones(len(lengths), n, device="meta")
    offs = torch.tensor(_ends(lengths), dtype=torch.int32, device="meta")
    count = count_flops(lambda: torch._scaled_grouped_mm(a, b, scale_a, scale_b, offs=offs, out_dtype=torch.bfloat16))
    plain = _counted_by_torch(lambda: [torch.zeros(rows, k, device="meta") @ torch.zeros(k, n, device="meta")
                                       for rows in lengths])
    assert count.by_operator == {"aten._scaled_grouped_mm": plain}


@pytest.mark.parametrize("name, formula", [
    pytest.param("_scaled_grouped_mm", scaled_grouped_mm_flop, id="v1"),
    pytest.param("_scaled_grouped_mm_v2", scaled_grouped_mm_v2_flop, id="v2"),
])
def test_scaled_grouped_mm_reads_its_offsets_where_the_schema_puts_them(name, formula):
    if not hasattr(torch.ops.aten, name):
        pytest.skip(f"this torch has no aten.{name}")
    schema = getattr(torch.ops.aten, name).default._schema
    position = [argument.name for argument in schema.arguments].index("offs")
    a, b = torch.zeros(20, 16), torch.zeros(3, 16, 8)
    args = [a, b] + [None] * (position - 2) + [torch.tensor([4, 4, 9], dtype=torch.int32)]
    assert formula(*args) == _counted_by_torch(lambda: [a[:4] @ b[0], a[4:9] @ b[2]])


@pytest.mark.skipif(not hasattr(torch.nn.functional, "scaled_mm"), reason="this torch has no F.scaled_mm")
@pytest.mark.parametrize("m, k, n", [(32, 64, 48), (16, 32, 16)])
def test_functional_scaled_mm_counts_as_its_matmul(m, k, n):
    """``torch.nn.functional.scaled_mm`` runs ``_scaled_mm_v2``, which FlopCounterMode has no formula for."""
    from torch.nn.functional import ScalingType

    a = torch.zeros(m, k, device="meta").to(torch.float8_e4m3fn)
    b = torch.zeros(n, k, device="meta").to(torch.float8_e4m3fn).t()
    scale = torch.ones((), device="meta")
    count = count_flops(lambda: torch.nn.functional.scaled_mm(a, b, scale, ScalingType.TensorWise, scale,
                                                              ScalingType.TensorWise, output_dtype=torch.bfloat16))
    assert count.total == _counted_by_torch(lambda: torch.zeros(m, k, device="meta") @ torch.zeros(k, n, device="meta"))
    assert list(count.by_operator) == ["aten._scaled_mm_v2"]


def test_a_torch_with_its_own_grouped_formula_keeps_it(monkeypatch):
    def torch_formula(*args, out_val=None, **kwargs):
        return 7

    monkeypatch.setitem(flop_counter.flop_registry, torch.ops.aten._grouped_mm, torch_formula)
    assert torch.ops.aten._grouped_mm not in missing_formulas()
    x, w = torch.randn(4, 8), torch.randn(2, 8, 4)
    assert count_flops(lambda: torch._grouped_mm(x, w, offs=torch.tensor([1, 4], dtype=torch.int32))).total == 7


# ---- the CPU's fused attention kernel ----------------------------------------------------------------------


def _attention(query_heads, kv_heads, causal):
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, query_heads, 32, 16, generator=generator)
    k, v = (torch.randn(2, kv_heads, 32, 16, generator=generator) for _ in range(2))
    gqa = {"enable_gqa": True} if kv_heads != query_heads else {}
    return q, k, v, lambda *qkv: torch.nn.functional.scaled_dot_product_attention(*qkv, is_causal=causal, **gqa)


@pytest.mark.parametrize("query_heads, kv_heads, causal", [(4, 4, True), (4, 2, False), (4, 1, True)])
def test_cpu_attention_counts_as_torch_counts_the_flash_kernel(query_heads, kv_heads, causal):
    q, k, v, attention = _attention(query_heads, kv_heads, causal)
    forward = count_flops(lambda: attention(q, k, v))
    assert set(forward.by_operator) == {"aten._scaled_dot_product_flash_attention_for_cpu"}  # the fused kernel ran
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        assert forward.total == _counted_by_torch(lambda: attention(q, k, v))  # the same products as two bmm
    step = count_flops(_forward_backward(attention, q, k, v))
    flash = flop_counter.flop_registry
    by_torch = (flash[torch.ops.aten._scaled_dot_product_flash_attention](q, k, v)
                + flash[torch.ops.aten._scaled_dot_product_flash_attention_backward](q, q, k, v))
    assert step.total == by_torch
