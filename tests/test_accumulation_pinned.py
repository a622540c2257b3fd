"""The fp8 bound against an emulated 14-bit tensor-core accumulator: never below its worst error, never far above it.

The recorded H200 errors sit 360 times inside the bound, so they cannot tell a bound from twice it. The truth
here is an emulation written from the hardware's description, not from the module: DeepSeek-V3's report
(arXiv:2412.19437, §3.3.2) on Hopper's fp8 tensor cores — each instruction (PTX ``wgmma``, k = 32 for e4m3)
adds its products to the accumulator after aligning them to the largest exponent, keeping about 14 significant
bits — and the libraries' default promotion of the partial sum to a float32 accumulator every 128 products
(DeepSeek-V3's ``N_C``; CUTLASS's ``mma_promotion_interval`` of 4 instructions). Fast accumulation never
promotes. The worst case of that accumulator: a large product followed by products each just under the
accumulator's last kept bit, every one of them cut away. The bound must lie above the emulated error on it
(and on random fp8 data), and within :data:`TIGHT` of it, so a bound twice as large is caught.
"""

import math
import random
import struct

import pytest
import torch

from accounting.errors import AccountingError
from accounting.health.accumulation import DEFAULT, FAST, fp8_coefficient

KEPT_BITS = 14
"""Significant bits the tensor cores keep when they accumulate fp8 products (DeepSeek-V3, §3.3.2)."""
PER_INSTRUCTION = 32
"""Products one fp8 tensor-core instruction adds (PTX ISA: ``wgmma.mma_async`` with .e4m3/.e5m2 has k = 32)."""
PROMOTION = 128
"""Products between promotions to float32 under default accumulation (DeepSeek-V3's N_C = 128)."""
FLOAT32_UNIT = torch.finfo(torch.float32).eps / 2
TIGHT = 1.5
"""The bound may be at most this factor above the worst emulated error (twice the bound is not)."""


def fp8(value: float) -> float:
    """``value`` as an e4m3 number; it must be one exactly (the inputs are chosen to be)."""
    stored = float(torch.tensor(value, dtype=torch.float64).to(torch.float8_e4m3fn).double())
    assert stored == value, value
    return stored


def cut(value: float, exponent: int) -> float:
    """``value`` truncated toward zero to the grid of a 14-bit significand whose top bit is 2^(exponent - 1)."""
    step = math.ldexp(1.0, exponent - KEPT_BITS)
    return math.trunc(value / step) * step


def top_exponent(value: float) -> int:
    return math.frexp(value)[1]


def instruction(accumulator: float, products: list[float]) -> float:
    """One tensor-core instruction: the accumulator and its products aligned to the largest exponent among them,
    each cut to 14 bits there, summed, and the sum cut to 14 significant bits."""
    terms = [accumulator, *products]
    largest = max((top_exponent(term) for term in terms if term), default=None)
    if largest is None:
        return 0.0
    total = math.fsum(cut(term, largest) for term in terms)  # on one grid: exact
    return cut(total, top_exponent(total)) if total else 0.0


def tensor_core_sum(products: list[float]) -> float:
    """The tensor cores' accumulator over ``products``, one instruction per 32."""
    accumulator = 0.0
    for start in range(0, len(products), PER_INSTRUCTION):
        accumulator = instruction(accumulator, products[start:start + PER_INSTRUCTION])
    return accumulator


def float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def promoted_sum(partials) -> float:
    """The float32 accumulator the partial sums are promoted into (round to nearest, as the CUDA cores add)."""
    total = 0.0
    for partial in partials:
        total = float32(total + float32(partial))
    return total


def emulated(products: list[float], accumulation: str) -> float:
    """The product's result (scale 1) as the emulated GPU sums ``products``."""
    if accumulation == FAST:
        return float32(tensor_core_sum(products))
    return promoted_sum(tensor_core_sum(products[start:start + PROMOTION])
                        for start in range(0, len(products), PROMOTION))


def relative_error(products: list[float], accumulation: str) -> float:
    """``|fl(a·b) − a·b| / (|a|·|b|)`` of the emulated sum, the measure the bound is a multiple of."""
    return abs(emulated(products, accumulation) - math.fsum(products)) / math.fsum(abs(p) for p in products)


BIG = fp8(256.0) * fp8(256.0)
"""2^16: a product whose 14-bit accumulator keeps multiples of 8."""
UNDER_A_STEP = fp8(3.5) * fp8(2.25)
"""7.875: just under the accumulator's last kept bit at ``BIG``, so cut away whole."""


def worst_case(k: int, accumulation: str) -> list[float]:
    """A large product, then products each just under the accumulator's step; under default accumulation the
    large product opens every promoted chunk (each chunk's tensor-core sum starts from zero)."""
    period = PROMOTION if accumulation == DEFAULT else k
    return [BIG if index % period == 0 else UNDER_A_STEP for index in range(k)]


def test_the_emulation_cuts_at_14_bits_and_keeps_what_fits():
    """The emulated accumulator itself: 2^16 + 8 is kept (14 bits reach 8), 2^16 + 7.875 loses the 7.875."""
    assert tensor_core_sum([BIG, 8.0]) == BIG + 8.0
    assert tensor_core_sum([BIG, UNDER_A_STEP]) == BIG
    assert tensor_core_sum([1.0] * 64) == 64.0  # small integers are exact
    assert emulated(worst_case(256, DEFAULT), DEFAULT) == 2 * BIG
    assert relative_error([BIG] * 4, FAST) == 0.0


@pytest.mark.parametrize("accumulation, k", [(FAST, 32), (FAST, 128), (FAST, 256), (FAST, 1024),
                                             (DEFAULT, 128), (DEFAULT, 1024), (DEFAULT, 8192)])
def test_the_bound_is_above_the_worst_emulated_error_and_within_a_small_factor_of_it(accumulation, k):
    """From above: the emulated accumulator never loses more than the bound. From below: the bound is not more
    than TIGHT × that loss, so a bound with twice the coefficient (or a wrong unit, instruction size or promotion
    interval) fails one side or the other."""
    worst = relative_error(worst_case(k, accumulation), accumulation)
    bound = fp8_coefficient(k, accumulation)
    assert worst <= bound <= TIGHT * worst, (worst, bound, bound / worst)


@pytest.mark.parametrize("accumulation", [FAST, DEFAULT])
def test_the_bound_is_above_the_emulated_error_on_random_fp8_products(accumulation):
    """Random e4m3 values of one sign and of both, 1 to 2048 products: the emulated error stays inside the bound."""
    values = [float(v) for v in torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).double()]
    values = [v for v in values if v > 0]
    draw = random.Random(7)
    for k in (1, 31, 33, 129, 500, 2048):
        for signed in (False, True):
            products = [draw.choice(values) * draw.choice(values) * (draw.choice((-1, 1)) if signed else 1)
                        for _ in range(k)]
            assert relative_error(products, accumulation) <= fp8_coefficient(k, accumulation), (k, signed)


def test_at_a_vast_k_the_float32_sums_of_the_promoted_partials_are_bounded_and_the_bound_is_tight():
    """k = 2^26: 2^19 promoted partials. The first chunk loses its small products in the tensor cores; every
    later partial is half of float32's last bit of the running total (2^-8 at 2^16) and rounds away (ties to
    even), so float32's part of the bound is reached too. Without it (float32's unit too small, too few sums)
    the bound falls below the loss; counted twice it is more than TIGHT above it."""
    k, chunks = 2**26, 2**19
    first = worst_case(PROMOTION, DEFAULT)
    later = [fp8(2.0**-4) * fp8(2.0**-4)] + [0.0] * (PROMOTION - 1)
    later_partial = tensor_core_sum(later)
    assert later_partial == 2.0**-8
    result = promoted_sum([tensor_core_sum(first), *[later_partial] * (chunks - 1)])
    exact = math.fsum(first) + (chunks - 1) * later_partial
    loss = abs(result - exact) / exact
    bound = fp8_coefficient(k, DEFAULT)
    assert loss <= bound <= TIGHT * loss, (loss, bound)


def test_default_accumulation_is_fast_accumulation_over_each_chunk_then_float32_sums():
    """Promotion in two levels: a default product of n × 128 products is n fast products of 128, each
    compounded with the float32 adds of the partials and the scale's multiply: (1 + fast(128))·(1 + u)^n."""
    for chunks in (1, 2, 8, 64, 512):
        compounded = (1 + fp8_coefficient(PROMOTION, FAST)) * (1 + FLOAT32_UNIT) ** chunks - 1
        assert fp8_coefficient(chunks * PROMOTION, DEFAULT) == pytest.approx(compounded, rel=1e-12, abs=0)


def test_the_bound_steps_where_an_instruction_starts_and_stops_growing_in_the_tensor_cores_at_promotion():
    """Fast: one step per 32 products (an instruction), flat in between. Default: the same steps up to 128; past
    a promotion only float32's units are added (the chunk's tensor-core sum starts again from zero)."""
    for accumulation in (FAST, DEFAULT):
        for instructions in (1, 2, 3):
            last = instructions * PER_INSTRUCTION
            assert fp8_coefficient(last - PER_INSTRUCTION + 1, accumulation) == fp8_coefficient(last, accumulation)
            assert fp8_coefficient(last + 1, accumulation) > fp8_coefficient(last, accumulation) + 2**-13
    assert fp8_coefficient(PROMOTION + 1, FAST) > fp8_coefficient(PROMOTION, FAST) + 2**-13
    for past in (PROMOTION, 2 * PROMOTION, 10 * PROMOTION):
        step = fp8_coefficient(past + 1, DEFAULT) - fp8_coefficient(past, DEFAULT)
        assert 0 < step < 4 * FLOAT32_UNIT


def test_a_bad_k_is_refused_naming_it():
    with pytest.raises(AccountingError, match=r"^k must be a positive integer, got 0$"):
        fp8_coefficient(0, DEFAULT)
