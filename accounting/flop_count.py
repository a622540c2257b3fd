"""FLOPs counted for you: one call of a function under ``torch.utils.flop_counter.FlopCounterMode``.

The timers (:func:`accounting.timing.time_fn` and the pytest plugin's ``flops_benchmark``)
use this when no ``flops=`` is given, and to cross-check one that is. The count follows
the package convention (:mod:`accounting.flops`: 2 FLOPs per multiply-add, matmul-class
work only), because it *is* ``FlopCounterMode``'s count: ``mm``, ``addmm``, ``bmm``,
``baddbmm``, convolutions, ``_scaled_mm`` and the fused attention kernels it knows.
It misses ``aten.dot``/``aten.mv`` and any kernel launched outside torch's operators (a
Triton kernel called directly), so a function made only of those counts 0 — that is
refused, never turned into an MFU of 0.

Formulas are supplied here where this torch's registry lacks them (:func:`missing_formulas`),
each in the same convention: ``torch._scaled_mm`` (every fp8 matmul; torch counts it only from
2.7, pytorch/pytorch#144973) and ``_scaled_mm_v2`` (``torch.nn.functional.scaled_mm``),
``torch._grouped_mm`` and ``torch._scaled_grouped_mm`` (and its ``_v2``: the expert matmuls of a
mixture of experts, from the routing offsets: :func:`grouped_mm_flop`) and the fused attention
kernels, forward and backward (:func:`attention_flop`): the CPU's flash kernel, which torch does not
count, and the CUDA ones (flash, memory-efficient, cuDNN) where torch's own formula cannot count fewer
key/value heads than query heads (torch 2.5 to 2.11 assert equal heads; 2.12 counts them,
pytorch/pytorch#177188). Each counts as torch counts the flash kernel with the key/value heads repeated to
every query head, so SDPA with ``enable_gqa`` counts the same on every device and every torch.

Every matmul-class operator is counted or refused (:func:`is_matmul_class`): where the function
runs one that neither torch nor the package has a formula for (a quantised or sparse matmul, a
custom op's kernel), :func:`count_flops` raises an :class:`AccountingError` naming it, instead of
returning a total that leaves its work out. Matrix-vector and vector products (``mv``, ``dot``,
``addmv``, ``ger``) are outside the convention, as in ``FlopCounterMode``, and count 0.

Counting runs the function once, untimed. Where running it for real is expensive, give
a version that does the same work on ``device="meta"`` tensors (``count_fn``): shapes
only, no memory, no arithmetic.

>>> import torch
>>> a = torch.ones(64, 32)
>>> count = count_flops(lambda: a @ a.T)
>>> count.total, count.by_operator
(262144, {'aten.mm': 262144})
>>> meta = torch.ones(64, 32, device="meta")
>>> count_flops(lambda: meta @ meta.T).total   # the same count, with no arithmetic done
262144
"""

import functools
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch._subclasses.fake_tensor import is_fake
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from accounting.errors import AccountingError, AccountingTypeError

FLOPS_MISMATCH_TOLERANCE = 0.01
"""A given ``flops=`` further than this fraction from the counted FLOPs is reported as a mismatch."""

MATMUL_WORDS = frozenset({
    "mm", "bmm", "addmm", "addbmm", "baddbmm", "smm", "hspmm", "sspaddmm", "matmul",
    "linear", "bilinear", "trilinear", "conv", "conv1d", "conv2d", "conv3d", "convolution", "attention",
})
"""Words of an operator's name (split at ``_``) that make it matmul-class: torch's matrix products, linear
layers, convolutions and attention kernels (``aten._grouped_mm``, ``aten.mkldnn_linear``, ``aten.thnn_conv2d``,
``aten._scaled_dot_product_flash_attention_for_cpu``, a custom ``mylib::expert_mm``)."""

PREPARATION_WORDS = frozenset({"pack", "prepack", "reorder", "search", "choice", "combination", "quantize",
                               "upsample"})
"""Words that mark an operator with a matmul word as no product at all: weight packing and layout changes
(``fbgemm_pack_gemm_matrix_fp16``, ``mkldnn_reorder_conv2d_weight``), kernel choice (``_cslt_sparse_mm_search``),
weight quantisation and bilinear interpolation (``__upsample_bilinear``)."""


class FlopsMismatchWarning(UserWarning):
    """A ``flops=`` given to a timer differs from what ``FlopCounterMode`` counted by more than 1 %."""


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one call, in total and per aten operator (``"aten.mm"``, ``"aten.bmm"``...).

    ``seconds`` is the wall time the counted call took (the counter's overhead included);
    ``source`` names what was run: ``"fn"`` or ``"count_fn"``. ``uncounted``: the matmul-class
    operators that ran without a formula, with their number of calls (empty unless
    :func:`count_flops` was told ``allow_uncounted=True``); a count with any is refused as a total.
    """

    total: int
    by_operator: dict = field(default_factory=dict)
    seconds: float = 0.0
    source: str = "fn"
    uncounted: dict = field(default_factory=dict)


def operator_name(op) -> str:
    """The name an operator is reported by: ``"aten.mm"`` for ``torch.ops.aten.mm`` or any of its overloads,
    ``"flex_attention"`` for a higher-order operator, a plain string unchanged.

    >>> operator_name(torch.ops.aten.mm.default), operator_name(torch.ops.aten._grouped_mm)
    ('aten.mm', 'aten._grouped_mm')
    """
    if isinstance(op, str):
        return op
    if isinstance(op, torch._ops.OpOverload):
        op = op.overloadpacket
    if isinstance(op, torch._ops.OpOverloadPacket):
        return str(op)
    if isinstance(op, torch._ops.HigherOrderOperator):
        return op.name()
    return getattr(op, "__name__", str(op))  # a Triton kernel, counted through its own registry entry


def is_matmul_class(op) -> bool:
    """Whether an operator does matmul-class work ``FlopCounterMode`` needs a formula for.

    Read from its name (namespace and overload dropped, split at ``_``): a word of
    :data:`MATMUL_WORDS` and none of :data:`PREPARATION_WORDS`. Every operator torch's own
    registry has a formula for answers yes; ``mv``, ``dot``, ``addmv`` and ``ger`` (matrix-vector and
    vector products, outside the convention) answer no.

    >>> is_matmul_class(torch.ops.aten._grouped_mm), is_matmul_class("aten.upsample_bilinear2d")
    (True, False)
    >>> is_matmul_class("mylib::expert_mm"), is_matmul_class("aten::mm.default"), is_matmul_class("aten.mv")
    (True, True, False)
    """
    name = operator_name(op)
    if "::" in name:  # "aten::mm", "aten::mm.default"
        name = name.split("::", 1)[1].split(".")[0]
    else:  # "aten.mm", "aten.mm.default", "mm"
        parts = name.split(".")
        name = parts[1] if len(parts) > 1 else parts[0]
    words = set(name.split("_"))
    return bool(words & MATMUL_WORDS) and not words & PREPARATION_WORDS


def scaled_mm_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of ``torch._scaled_mm(a, b, ...)``: 2·m·n·k for an (m, k) by (k, n) product, 2 per multiply-add.

    Takes shapes (as ``FlopCounterMode`` hands a custom formula) or tensors; scales, bias and
    output dtype add no matmul work.

    >>> scaled_mm_flop((64, 32), (32, 16))
    65536
    """
    (m, k), (_, n) = (tuple(getattr(x, "shape", x)) for x in (a_shape, b_shape))
    return 2 * m * n * k


def scaled_mm_v2_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of ``torch._scaled_mm_v2`` (what ``torch.nn.functional.scaled_mm`` runs): 2·m·n·k, with (m, n) the
    output's shape and k what is left of ``a``, whichever dimension ``contraction_dim`` names.

    >>> scaled_mm_v2_flop((64, 32), (32, 16), out_shape=(64, 16))
    65536
    """
    m, n = out_shape
    return 2 * m * n * (math.prod(a_shape) // m)


def _routed(offsets, extent: int, describe: str) -> int:
    """How much of the grouped dimension (``extent`` long) the groups cover: the last offset.

    Offsets are each group's end, cumulative from 0. Without values to read (meta or fake
    tensors: shapes only) every row is taken as routed, torch's own rule for variable-length
    attention offsets; that is exact for dropless routing, where every row goes to a group.
    """
    if offsets is None:
        raise AccountingError(f"{describe}: the grouped dimension needs offs=, got None")
    if isinstance(offsets, torch.Tensor):
        if offsets.device.type == "meta" or is_fake(offsets):
            return extent
        offsets = offsets.tolist()
    ends = [int(end) for end in offsets]
    if not ends or any(end < start for start, end in zip([0] + ends, ends)) or ends[-1] > extent:
        raise AccountingError(
            f"{describe}: offs must be non-decreasing group ends from 0 to at most {extent} "
            f"(the grouped dimension), got {ends}")
    return ends[-1]


def grouped_mm_flop(a, b, offs=None, *args, out_val=None, **kwargs) -> int:
    """FLOPs of ``torch._grouped_mm(a, b, offs)``: each group's product, 2·rows·k·n, summed over the groups.

    Every form torch runs, forward and backward (autograd of ``_grouped_mm`` calls ``_grouped_mm``):

    - (m, k) by (g, k, n), offs over the m rows: 2·offs[-1]·k·n (the experts' forward; the input's gradient);
    - (g, m, k) by (g, k, n), no offs: 2·g·m·k·n;
    - (m, k) by (k, n), offs over k, giving (g, m, n): 2·m·offs[-1]·n (the experts' weight gradient);
    - (g, m, k) by (k, n), offs over the n columns: 2·m·k·offs[-1].

    Rows past ``offs[-1]`` are not computed and cost nothing. ``a`` and ``b`` are tensors or shapes,
    ``offs`` a tensor (raw, as ``FlopCounterMode`` hands it to this formula) or a sequence.

    >>> grouped_mm_flop((10, 16), (3, 16, 8), [3, 3, 7])   # 7 of 10 rows routed, one group empty
    1792
    >>> grouped_mm_flop((7, 16), (3, 16, 8), torch.tensor([3, 5, 9]))
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: _grouped_mm of shapes (7, 16) and (3, 16, 8): offs must be non-decreasing group ends from 0 to at most 7 (the grouped dimension), got [3, 5, 9]
    """
    a_shape, b_shape = (tuple(getattr(x, "shape", x)) for x in (a, b))
    describe = f"_grouped_mm of shapes {a_shape} and {b_shape}"
    if len(a_shape) == 3 and len(b_shape) == 3:
        groups, m, k = a_shape
        return 2 * groups * m * k * b_shape[2]
    if len(a_shape) == 2 and len(b_shape) == 3:
        (m, k), n = a_shape, b_shape[2]
        return 2 * _routed(offs, m, describe) * k * n
    if len(a_shape) == 2 and len(b_shape) == 2:
        (m, k), n = a_shape, b_shape[1]
        return 2 * m * _routed(offs, k, describe) * n
    if len(a_shape) == 3 and len(b_shape) == 2:
        (_, m, k), n = a_shape, b_shape[1]
        return 2 * m * k * _routed(offs, n, describe)
    raise AccountingError(f"{describe}: operands must be 2-D or 3-D")


grouped_mm_flop._get_raw = True  # FlopCounterMode hands it the tensors, so it can read the offsets


def scaled_grouped_mm_flop(a, b, scale_a=None, scale_b=None, offs=None, *args, out_val=None, **kwargs) -> int:
    """FLOPs of ``torch._scaled_grouped_mm(a, b, scale_a, scale_b, offs, ...)``: :func:`grouped_mm_flop`'s
    (the scales, bias and output dtype add no matmul work).

    >>> scaled_grouped_mm_flop((32, 64), (4, 64, 32), None, None, [8, 16, 24, 32])
    131072
    """
    return grouped_mm_flop(a, b, offs)


scaled_grouped_mm_flop._get_raw = True


def scaled_grouped_mm_v2_flop(a, b, scale_a=None, recipe_a=None, swizzle_a=None, scale_b=None, recipe_b=None,
                              swizzle_b=None, offs=None, *args, out_val=None, **kwargs) -> int:
    """FLOPs of ``torch._scaled_grouped_mm_v2`` (what ``torch.nn.functional.scaled_grouped_mm`` runs):
    :func:`grouped_mm_flop`'s, its offsets after the scales, recipes and swizzles.

    >>> scaled_grouped_mm_v2_flop((32, 64), (4, 64, 32), *[None] * 6, [8, 16, 24, 32])
    131072
    """
    return grouped_mm_flop(a, b, offs)


scaled_grouped_mm_v2_flop._get_raw = True


def _heads_repeated(query, key, value) -> tuple[tuple, tuple, tuple]:
    """The shapes of a fused attention call with its key/value heads repeated to every query head.

    ``query`` is (batch, heads, length, width), ``key`` and ``value`` (batch, kv_heads, key length, width): a kernel
    given fewer key/value heads than query heads (grouped-query attention, ``enable_gqa``) serves each group of
    query heads from one key/value head, and every query head still does its full QKᵀ and PV work.
    """
    shapes = tuple(tuple(getattr(x, "shape", x)) for x in (query, key, value))
    describe = f"attention of query {shapes[0]}, key {shapes[1]}, value {shapes[2]}"
    if any(len(shape) != 4 for shape in shapes):
        raise AccountingError(f"{describe}: each must be (batch, heads, length, width)")
    heads = shapes[0][1]
    for name, shape in zip(("key", "value"), shapes[1:]):
        if shape[1] < 1 or heads % shape[1]:
            raise AccountingError(f"{describe}: {heads} query heads are not a multiple of the {name}'s {shape[1]}")
    return shapes[0], *((batch, heads, *rest) for batch, _, *rest in shapes[1:])


def attention_flop(query, key, value, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of a fused attention forward (flash, memory-efficient, cuDNN, the CPU's flash kernel): torch's count
    of the call with its key/value heads repeated to every query head, so grouped-query attention counts on every
    torch (both products over the full (s × s) scores; a causal mask halves nothing, as in ``FlopCounterMode``).

    Takes tensors or shapes, as ``FlopCounterMode`` hands them to a formula.

    >>> attention_flop((2, 4, 32, 16), (2, 4, 32, 16), (2, 4, 32, 16))  # 2 products of 2·(2·4)·32·32·16
    524288
    >>> attention_flop((2, 4, 32, 16), (2, 1, 32, 16), (2, 1, 32, 16))  # one key/value head for 4 query heads
    524288
    """
    return flop_counter.sdpa_flop_count(*_heads_repeated(query, key, value))


def attention_backward_flop(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of a fused attention backward: torch's count with the key/value heads repeated to every query head
    (QKᵀ recomputed, then dO·Vᵀ, Pᵀ·dO, dS·K and dSᵀ·Q).

    >>> attention_backward_flop(*[(2, 4, 32, 16)] * 2, (2, 2, 32, 16), (2, 2, 32, 16))  # 5 products: 2.5 × forward
    1310720
    """
    return flop_counter.sdpa_backward_flop_count(tuple(getattr(grad_out, "shape", grad_out)),
                                                 *_heads_repeated(query, key, value))


ATTENTION_FORMULAS = {
    "_scaled_dot_product_flash_attention": attention_flop,
    "_scaled_dot_product_efficient_attention": attention_flop,
    "_scaled_dot_product_cudnn_attention": attention_flop,
    "_scaled_dot_product_flash_attention_for_cpu": attention_flop,
    "_scaled_dot_product_flash_attention_backward": attention_backward_flop,
    "_scaled_dot_product_efficient_attention_backward": attention_backward_flop,
    "_scaled_dot_product_cudnn_attention_backward": attention_backward_flop,
    "_scaled_dot_product_flash_attention_for_cpu_backward": attention_backward_flop,
}
"""The fused attention kernels SDPA runs, by aten operator name, and the package's formula for each: used where
this torch has none (the CPU's kernel) or where its own cannot count fewer key/value heads than query heads
(:func:`counts_grouped_heads`; torch 2.5 to 2.11 assert equal heads)."""

_PROBE_HEADS = ((1, 4, 8, 16), (1, 2, 8, 16))
"""A query with 4 heads and a key/value with 2, to ask a formula about grouped heads."""


@functools.lru_cache(maxsize=64)
def counts_grouped_heads(formula, backward: bool) -> bool:
    """Whether a fused attention formula counts a call with fewer key/value heads than query heads as the same call
    with them repeated to every query head (and does not raise).

    Asked once per formula (a few milliseconds, against every count): a formula registered in place of another is
    asked anew; one whose behaviour is changed in place needs ``counts_grouped_heads.cache_clear()``.

    >>> counts_grouped_heads(attention_flop, backward=False)
    True
    >>> counts_grouped_heads(lambda query, key, value, out_val=None: key.shape[1], backward=False)  # the key's heads
    False
    """
    query, grouped = (torch.empty(shape, device="meta") for shape in _PROBE_HEADS)
    first = (query,) if backward else ()  # a backward's gradient of the output, shaped like the query
    try:
        return formula(*first, query, grouped, grouped, out_val=None) == formula(*first, query, query, query,
                                                                               out_val=None)
    except Exception:  # torch 2.5-2.11: AssertionError on unequal heads
        return False


SUPPLIED_FORMULAS = {
    "_scaled_mm": scaled_mm_flop,
    "_grouped_mm": grouped_mm_flop,
    "_scaled_grouped_mm": scaled_grouped_mm_flop,
    "_scaled_mm_v2": scaled_mm_v2_flop,
    "_scaled_grouped_mm_v2": scaled_grouped_mm_v2_flop,
    **ATTENTION_FORMULAS,
}
"""The package's formulas, by aten operator name; each is used only where this torch has the operator and
its ``FlopCounterMode`` has no formula for it, or (a fused attention kernel) one that cannot count grouped heads."""


def missing_formulas() -> dict:
    """The formulas this torch's ``FlopCounterMode`` lacks and the package supplies (:data:`SUPPLIED_FORMULAS`).

    Read from ``torch.utils.flop_counter.flop_registry`` at each call, so a torch that has a formula
    keeps its own, and an operator this torch does not have is skipped. A fused attention kernel's own
    formula is kept only where it counts fewer key/value heads than query heads (:func:`counts_grouped_heads`):
    torch 2.5 to 2.11 assert equal heads, so a grouped-query call (``enable_gqa``) could not be counted there.

    >>> supplied = missing_formulas()
    >>> registry = flop_counter.flop_registry
    >>> all(op not in registry or not counts_grouped_heads(registry[op], "backward" in str(op)) for op in supplied)
    True
    >>> torch.ops.aten._scaled_mm in supplied or torch.ops.aten._scaled_mm in registry
    True
    """
    formulas = {}
    for name, formula in SUPPLIED_FORMULAS.items():
        try:
            op = getattr(torch.ops.aten, name)
        except AttributeError:  # an older torch without the operator: nothing to count
            continue
        own = flop_counter.flop_registry.get(op)
        if own is None or (name in ATTENTION_FORMULAS and not counts_grouped_heads(own, name.endswith("_backward"))):
            formulas[op] = formula
    return formulas


class _CheckedFlopCounter(FlopCounterMode):
    """``FlopCounterMode`` that also notes each matmul-class operator it ran without a formula."""

    def __init__(self):
        super().__init__(display=False, custom_mapping=missing_formulas())
        self.uncounted = Counter()

    def _count_flops(self, func_packet, out, args, kwargs):
        # Called for every operator run (after any decomposition), with or without a formula.
        if func_packet not in self.flop_registry and is_matmul_class(func_packet):
            self.uncounted[operator_name(func_packet)] += 1
        return super()._count_flops(func_packet, out, args, kwargs)


def _describe_uncounted(uncounted: dict) -> str:
    return ", ".join(f"{name} ({calls} call{'s' if calls != 1 else ''})" for name, calls in sorted(uncounted.items()))


def count_flops(fn: Callable[[], object], *, source: str = "fn", allow_uncounted: bool = False) -> FlopCount:
    """Run ``fn()`` once under ``FlopCounterMode`` and return its matmul FLOPs.

    ``fn`` may run on any device, ``meta`` included. An exception from ``fn`` is re-raised
    as :class:`AccountingError` naming ``source`` and the original error (chained). A matmul-class
    operator run without a formula is refused by name (its FLOPs would be missing from the total)
    unless ``allow_uncounted``: the count then lists it in ``uncounted``.

    >>> count_flops(lambda: 1 / 0)
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: counting FLOPs: fn raised ZeroDivisionError: division by zero
    >>> a = torch.ones(8, 8, dtype=torch.int8)
    >>> count_flops(lambda: torch._int_mm(a.repeat(4, 1), a.repeat(1, 4)))
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: counting FLOPs: fn ran aten._int_mm (1 call), matmul-class with no formula in FlopCounterMode: its FLOPs would be missing from the total; register one (torch.utils.flop_counter.register_flop_formula) or give flops= with count_flops=False
    """
    if not callable(fn):
        raise AccountingTypeError(f"{source} must be callable, got {fn!r}")
    if not isinstance(allow_uncounted, bool):
        raise AccountingTypeError(f"allow_uncounted must be True or False, got {allow_uncounted!r}")
    counter = _CheckedFlopCounter()
    start = time.perf_counter()
    try:
        with counter:
            fn()
    except Exception as error:
        raise AccountingError(f"counting FLOPs: {source} raised {type(error).__name__}: {error}") from error
    seconds = time.perf_counter() - start
    by_operator = {str(op): int(flops) for op, flops in counter.get_flop_counts().get("Global", {}).items()}
    uncounted = dict(counter.uncounted)
    if uncounted and not allow_uncounted:
        raise AccountingError(
            f"counting FLOPs: {source} ran {_describe_uncounted(uncounted)}, matmul-class with no formula in "
            "FlopCounterMode: its FLOPs would be missing from the total; register one "
            "(torch.utils.flop_counter.register_flop_formula) or give flops= with count_flops=False"
        )
    return FlopCount(int(counter.get_total_flops()), by_operator, seconds, source, uncounted)


def flops_mismatch(given, counted: FlopCount, tolerance: float = FLOPS_MISMATCH_TOLERANCE) -> str | None:
    """Why a given FLOP figure disagrees with a count (``None`` when within ``tolerance`` of it).

    A count with ``uncounted`` operators cannot confirm any figure: that is always reported.

    >>> count = FlopCount(1000, {"aten.mm": 1000})
    >>> print(flops_mismatch(1005, count))
    None
    >>> flops_mismatch(2000, count)
    'flops=2000 given, but FlopCounterMode counted 1000 in fn (aten.mm: 1000): 100.0% apart'
    >>> flops_mismatch(1000, FlopCount(1000, {"aten.mm": 1000}, uncounted={"aten._int_mm": 2}))
    'flops=1000 given, but FlopCounterMode counted 1000 in fn (aten.mm: 1000): aten._int_mm (2 calls) not counted'
    """
    given = int(given)
    if abs(given - counted.total) <= tolerance * counted.total and not counted.uncounted:
        return None
    operators = ", ".join(f"{name}: {flops}" for name, flops in counted.by_operator.items()) or "no matmul ops"
    if counted.uncounted:
        apart = f"{_describe_uncounted(counted.uncounted)} not counted"
    else:
        apart = f"{abs(given - counted.total) / counted.total:.1%} apart" if counted.total else "nothing counted"
    return f"flops={given} given, but FlopCounterMode counted {counted.total} in {counted.source} ({operators}): {apart}"


def counted_total(count: FlopCount) -> int:
    """The count's total, refusing a count of 0 (the function's work is invisible to ``FlopCounterMode``)
    and one that left out a matmul-class operator.

    >>> counted_total(FlopCount(0, {}, source="fn"))
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: FlopCounterMode counted 0 matmul FLOPs in fn (it does not see aten.dot, aten.mv or custom kernels); pass flops= explicitly
    >>> counted_total(FlopCount(64, {"aten.mm": 64}, uncounted={"aten._int_mm": 1}))
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: FlopCounterMode counted 64 FLOPs in fn but has no formula for aten._int_mm (1 call); pass flops= explicitly
    """
    if count.uncounted:
        raise AccountingError(
            f"FlopCounterMode counted {count.total} FLOPs in {count.source} but has no formula for "
            f"{_describe_uncounted(count.uncounted)}; pass flops= explicitly"
        )
    if count.total <= 0:
        raise AccountingError(
            f"FlopCounterMode counted 0 matmul FLOPs in {count.source} (it does not see aten.dot, aten.mv or "
            "custom kernels); pass flops= explicitly"
        )
    return count.total
