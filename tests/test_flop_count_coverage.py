"""Every matmul-class operator is counted or refused by name, never left out of a total.

Truths: torch's own registry of FLOP formulas (every operator in it is matmul-class by the package's
rule, which reads only names), torch's operator list and schemas, and operators that really run with
no formula: ``torch._int_mm`` on the CPU, a custom op whose matmuls ``FlopCounterMode`` cannot see
into, and a registry with an entry removed (a torch without that formula).
"""

import pytest
import torch
from torch.utils import flop_counter

from accounting import AccountingError, AccountingTypeError, time_fn
from accounting.flop_count import (
    SUPPLIED_FORMULAS, FlopCount, count_flops, counted_total, flops_mismatch, is_matmul_class, operator_name)
from tests.test_flop_count import _runner


@pytest.mark.parametrize("op", list(flop_counter.flop_registry), ids=operator_name)
def test_every_operator_torch_counts_is_matmul_class(op):
    assert is_matmul_class(op)
    if isinstance(op, torch._ops.OpOverloadPacket):  # every spelling of it: overloads, schema and dotted names
        for overload in op.overloads():
            assert is_matmul_class(getattr(op, overload)) and is_matmul_class(f"{op._qualified_op_name}.{overload}")
            assert is_matmul_class(f"{operator_name(op)}.{overload}")


@pytest.mark.parametrize("name", [name for name in SUPPLIED_FORMULAS if hasattr(torch.ops.aten, name)])
def test_every_operator_the_package_counts_is_matmul_class(name):
    assert is_matmul_class(getattr(torch.ops.aten, name))


def _aten_operator_names() -> set[str]:
    return {schema.name.removeprefix("aten::") for schema in torch._C._jit_get_all_schemas()
            if schema.name.startswith("aten::")}


@pytest.mark.parametrize("name", [
    pytest.param("mv", id="matrix-vector"), pytest.param("addmv", id="matrix-vector-add"),
    pytest.param("dot", id="vector"), pytest.param("vdot", id="complex-vector"), pytest.param("ger", id="outer"),
    pytest.param("upsample_bilinear2d", id="interpolation"), pytest.param("__upsample_bilinear", id="interp-alias"),
    pytest.param("fbgemm_pack_gemm_matrix_fp16", id="weight-packing"),
    pytest.param("mkldnn_reorder_conv2d_weight", id="weight-layout"),
    pytest.param("_cslt_sparse_mm_search", id="kernel-search"), pytest.param("_fused_sdp_choice", id="kernel-choice"),
    pytest.param("cummax", id="mm-inside-a-word"), pytest.param("_softmax", id="softmax"),
])
def test_work_outside_the_convention_is_not_matmul_class(name):
    assert name in _aten_operator_names()  # a real operator of this torch, not a made-up name
    assert not is_matmul_class(f"aten.{name}")


@pytest.mark.parametrize("name", [
    "_int_mm", "_weight_int8pack_mm", "_sparse_semi_structured_linear", "mkldnn_linear", "thnn_conv2d",
    "conv_depthwise3d", "_scaled_dot_product_fused_attention_overrideable", "_native_multi_head_attention",
    "_foreach_mm", "_trilinear", "_scaled_mm_v2",
])
def test_matmuls_torch_has_no_formula_for_are_matmul_class(name):
    if name not in _aten_operator_names():
        pytest.skip(f"this torch has no aten.{name}")
    assert is_matmul_class(f"aten.{name}")


# ---- refused by name where they run -------------------------------------------------------------------------


def _int8_product():
    a = torch.ones(32, 8, dtype=torch.int8)
    return lambda: torch._int_mm(a, a.T.contiguous())


def test_an_operator_without_a_formula_is_named_and_its_calls_counted():
    with pytest.raises(AccountingError, match=r"^counting FLOPs: fn ran aten\._int_mm \(2 calls\), matmul-class "
                                              r"with no formula in FlopCounterMode"):
        count_flops(lambda: [_int8_product()() for _ in range(2)])


def test_allowed_the_count_lists_what_it_left_out_and_is_refused_as_a_total():
    a = torch.ones(16, 16)
    count = count_flops(lambda: (a @ a, _int8_product()()), allow_uncounted=True)
    assert count.by_operator == {"aten.mm": 2 * 16**3} and count.uncounted == {"aten._int_mm": 1}
    with pytest.raises(AccountingError, match=r"^FlopCounterMode counted 8192 FLOPs in fn but has no formula for "
                                              r"aten\._int_mm \(1 call\)"):
        counted_total(count)
    assert flops_mismatch(8192, count).endswith("aten._int_mm (1 call) not counted")  # the figures agree, unchecked


@torch.library.custom_op("accounting_tests::expert_mm", mutates_args=())
def expert_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A custom op: its mm runs inside the op's kernel, where FlopCounterMode does not look."""
    return x @ w


@expert_mm.register_fake
def _(x, w):
    return x.new_empty(x.shape[0], w.shape[1])


def test_a_custom_matmul_op_is_named():
    x = torch.ones(8, 4)
    count = count_flops(lambda: expert_mm(x, x.T), allow_uncounted=True)
    assert count.total == 0 and count.uncounted == {"accounting_tests.expert_mm": 1}  # its mm was invisible
    with pytest.raises(AccountingError, match=r"^counting FLOPs: fn ran accounting_tests\.expert_mm \(1 call\)"):
        count_flops(lambda: expert_mm(x, x.T))


def test_a_torch_without_a_formula_the_package_lacks_too_is_refused(monkeypatch):
    monkeypatch.delitem(flop_counter.flop_registry, torch.ops.aten.bmm)
    batch = torch.ones(3, 4, 5)
    with pytest.raises(AccountingError, match=r"^counting FLOPs: fn ran aten\.bmm \(1 call\)"):
        count_flops(lambda: batch @ batch.transpose(1, 2))


def test_vector_products_stay_uncounted_and_unrefused():
    vector, matrix = torch.ones(16), torch.ones(8, 16)
    count = count_flops(lambda: (vector @ vector, matrix @ vector))
    assert count.total == 0 and count.uncounted == {}


def test_the_timers_refuse_by_name():
    with pytest.raises(AccountingError, match=r"^counting FLOPs: fn ran aten\._int_mm"):
        time_fn(_int8_product(), warmup=1, repeats=1, min_time_s=0)
    with pytest.raises(AccountingError, match=r"^counting FLOPs: fn ran aten\._int_mm"):
        _runner([])(_int8_product(), dtype="int8", device="cpu", peak=1e12, rounds=1, warmup_rounds=0)
    # told the FLOPs and not to count, both time it
    assert time_fn(_int8_product(), flops=2 * 32 * 8 * 32, count_flops=False, warmup=1, repeats=1, min_time_s=0).flops


def test_allow_uncounted_must_be_a_bool():
    with pytest.raises(AccountingTypeError, match=r"^allow_uncounted must be True or False, got 'yes'"):
        count_flops(lambda: None, allow_uncounted="yes")


def test_a_count_made_before_uncounted_existed_reads_as_complete():
    assert counted_total(FlopCount(10, {"aten.mm": 10})) == 10 and flops_mismatch(10, FlopCount(10)) is None
