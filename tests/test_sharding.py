"""Model states per device under DDP, ZeRO and FSDP, against the ZeRO paper's table and FSDP's own sharding.

Truths: Table 1 of Rajbhandari et al. 2020 (arXiv:1910.02054), figures as printed; the shard
FSDP's flat parameter gives each rank (``FlatParamHandle._get_shard`` on meta tensors, so any
size is free); and the properties any partition must have.
"""

import math
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from torch.distributed.fsdp._flat_param import FlatParamHandle

from accounting.errors import AccountingError, AccountingTypeError
from accounting.model.sharding import (
    SHARDINGS,
    shard_size,
    sharded_model_states,
    sharding_stage,
)

# ---- the ZeRO paper's Table 1 -------------------------------------------------------------

# source: Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
# Models", arXiv:1910.02054, Table 1 (7.5B model, K = 12: per-device model-state memory in GB,
# DP degree Nd; columns P_os, P_os+g, P_os+g+p; the baseline, data parallelism, is 120 GB at every Nd).
ZERO_TABLE_1_PSI = 7_500_000_000
ZERO_TABLE_1_K = 12
ZERO_TABLE_1 = {
    4: {"ddp": "120", "zero1": "52.5", "zero2": "41.3", "zero3": "30"},
    16: {"ddp": "120", "zero1": "35.6", "zero2": "21.6", "zero3": "7.5"},
    64: {"ddp": "120", "zero1": "31.4", "zero2": "16.6", "zero3": "1.88"},
    256: {"ddp": "120", "zero1": "30.4", "zero2": "15.4", "zero3": "0.47"},
    1024: {"ddp": "120", "zero1": "30.1", "zero2": "15.1", "zero3": "0.12"},
}


def as_printed(value_gb: float, printed: str) -> str:
    """``value_gb`` rounded half-up to as many decimals as ``printed`` has, and printed the same way."""
    decimals = len(printed.partition(".")[2])
    rounded = Decimal(repr(value_gb)).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)
    return str(rounded)


@pytest.mark.parametrize(
    ("devices", "sharding"),
    [pytest.param(devices, sharding, id=f"{sharding}-Nd{devices}")
     for devices, row in ZERO_TABLE_1.items() for sharding in row],
)
@pytest.mark.parametrize("by_element", [True, False], ids=["per-parameter", "per-byte"])
def test_zero_table_1(devices, sharding, by_element):
    psi = ZERO_TABLE_1_PSI
    states = sharded_model_states(2 * psi, 2 * psi, ZERO_TABLE_1_K * psi, sharding, devices,
                                  parameter_count=psi if by_element else None)
    printed = ZERO_TABLE_1[devices][sharding]
    assert as_printed(states.total / 1e9, printed) == printed


def test_zero_table_1_formulas():
    """The paper's formulas, in exact arithmetic, where Ψ divides evenly."""
    psi, k = 1024 * 3 * 5, 12
    for devices in (1, 2, 4, 8, 1024):
        expected = {
            "ddp": (2 + 2 + k) * psi,
            "zero1": 2 * psi + 2 * psi + k * psi // devices,
            "zero2": 2 * psi + (2 + k) * psi // devices,
            "zero3": (2 + 2 + k) * psi // devices,
        }
        for sharding, total in expected.items():
            states = sharded_model_states(2 * psi, 2 * psi, k * psi, sharding, devices, parameter_count=psi)
            assert states.total == total, (sharding, devices)


# ---- padding, against FSDP's flat parameter ----------------------------------------------


@given(st.integers(0, 10**12), st.integers(1, 4096))
@example(10, 4)
@example(1, 4)
@example(0, 3)
def test_shard_size_is_fsdp_flat_parameter_shard(elements, devices):
    flat = torch.empty(elements, device="meta")
    for rank in (0, devices - 1):
        shard, _padding = FlatParamHandle._get_shard(flat, rank, devices)
        assert shard_size(elements, devices) == shard.numel()


@given(st.integers(1, 10**11), st.integers(1, 1024), st.sampled_from([1, 2, 4, 12]),
       st.sampled_from(["zero1", "zero2", "zero3"]))
def test_a_parameter_share_is_the_flat_buffer_shard_times_its_bytes(psi, devices, bytes_per_parameter, sharding):
    flat = torch.empty(psi, device="meta")
    shard = FlatParamHandle._get_shard(flat, 0, devices)[0].numel()
    states = sharded_model_states(2 * psi, 2 * psi, bytes_per_parameter * psi, sharding, devices,
                                  parameter_count=psi)
    assert states.optimizer == bytes_per_parameter * shard


@given(st.integers(1, 10**9), st.integers(0, 10**10), st.integers(1, 4096))
def test_a_share_of_a_part_with_whole_or_fractional_bytes_per_parameter_is_rounded_up(psi, part, devices):
    """Frozen parameters make bytes per parameter fractional: a device holds ⌈Ψ/N⌉ parameters' share, rounded up."""
    states = sharded_model_states(0, 0, part, "zero1", devices, parameter_count=psi)
    assert states.optimizer == math.ceil(Fraction(math.ceil(Fraction(psi, devices)) * part, psi))


# ---- properties ----------------------------------------------------------------------------

model_states = st.tuples(st.integers(0, 10**13), st.integers(0, 10**13), st.integers(0, 10**14))


@given(model_states, st.integers(1, 10**4), st.sampled_from(SHARDINGS))
def test_devices_together_hold_every_byte_and_less_than_a_device_each_of_padding(sizes, devices, sharding):
    states = sharded_model_states(*sizes, sharding, devices)
    for part, whole in zip(("parameters", "gradients", "optimizer"), sizes):
        share = getattr(states, part)
        assert share * devices >= whole
        if share != whole:  # partitioned: at most devices - 1 bytes of padding in all
            assert share * devices - whole < devices


@given(st.integers(1, 10**11), st.sampled_from([(2, 2, 12), (4, 4, 8), (2, 2, 4), (2, 2, 0)]),
       st.integers(1, 4096), st.sampled_from(SHARDINGS))
def test_per_parameter_padding_is_less_than_one_parameter_per_device(psi, bytes_per_parameter, devices, sharding):
    sizes = [b * psi for b in bytes_per_parameter]
    states = sharded_model_states(*sizes, sharding, devices, parameter_count=psi)
    for part, whole, b in zip(("parameters", "gradients", "optimizer"), sizes, bytes_per_parameter):
        share = getattr(states, part)
        assert whole <= share * devices
        assert share * devices - whole < devices * max(b, 1) or share == whole


@given(model_states, st.integers(1, 10**4), st.one_of(st.none(), st.integers(1, 10**12)))
def test_each_stage_holds_no_more_than_the_one_before(sizes, devices, psi):
    totals = [sharded_model_states(*sizes, stage, devices, parameter_count=psi).total
              for stage in ("none", "ddp", "zero1", "zero2", "zero3")]
    assert totals[0] == totals[1] == sum(sizes)
    assert totals[1] >= totals[2] >= totals[3] >= totals[4]


@given(model_states, st.sampled_from(SHARDINGS))
def test_one_device_holds_everything(sizes, sharding):
    states = sharded_model_states(*sizes, sharding, 1)
    assert (states.parameters, states.gradients, states.optimizer) == sizes


@given(model_states, st.integers(2, 10**4))
def test_each_stage_partitions_exactly_its_parts(sizes, devices):
    replicated = sharded_model_states(*sizes, "ddp", devices)
    parts = ("parameters", "gradients", "optimizer")
    partitioned = {"zero1": {"optimizer"}, "zero2": {"optimizer", "gradients"}, "zero3": set(parts)}
    for stage, expected in partitioned.items():
        states = sharded_model_states(*sizes, stage, devices)
        for part in parts:
            share = -(-getattr(replicated, part) // devices)
            assert getattr(states, part) == (share if part in expected else getattr(replicated, part)), (stage, part)


# source: torch.distributed.fsdp.ShardingStrategy's docstring: FULL_SHARD shards parameters, gradients and
# optimizer states; SHARD_GRAD_OP gradients and optimizer states; NO_SHARD none (like DDP).
@pytest.mark.parametrize(("name", "stage"), [pytest.param(name, stage, id=str(name)) for name, stage in [
    ("full_shard", "zero3"), ("fsdp", "zero3"), ("shard_grad_op", "zero2"), ("no_shard", "ddp"),
    ("ZeRO3", "zero3"), (" zero1 ", "zero1"), ("DDP", "ddp"), (None, "none"), ("FULL_SHARD", "zero3"),
]])
def test_fsdp_names_are_zero_stages(name, stage):
    sizes = (2 * 10**6 + 1, 2 * 10**6 + 1, 12 * 10**6 + 5)
    assert sharding_stage(name) == stage
    assert sharded_model_states(*sizes, name, 7) == sharded_model_states(*sizes, stage, 7)


# ---- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(("arguments", "error", "message"), [
    pytest.param((1, 1, 1, "zero4", 2), AccountingError, r"^sharding must be one of .*got 'zero4'$", id="zero4"),
    pytest.param((1, 1, 1, "hybrid_shard", 2), AccountingError, r"^sharding must be one of .*'hybrid_shard'$",
                 id="hybrid"),
    pytest.param((1, 1, 1, 3, 2), AccountingTypeError, r"^sharding must be a name such as 'zero3' or None, got 3$",
                 id="number"),
    pytest.param((1, 1, 1, "zero3", 0), AccountingError, r"^devices must be a positive integer, got 0$",
                 id="no-devices"),
    pytest.param((1, 1, 1, "zero3", -2), AccountingError, r"^devices must be a non-negative integer, got -2$",
                 id="negative-devices"),
    pytest.param((1, 1, 1, "zero3", 2.0), AccountingTypeError, r"^devices must be a non-negative integer, got 2.0$",
                 id="float-devices"),
    pytest.param((-1, 1, 1, "zero3", 2), AccountingError, r"^parameter_bytes must be a non-negative integer, got -1$",
                 id="negative-bytes"),
    pytest.param((1, 0.5, 1, "zero3", 2), AccountingTypeError, r"^gradient_bytes must be .*got 0.5$",
                 id="float-bytes"),
    pytest.param((1, 1, None, "zero3", 2), AccountingTypeError, r"^optimizer_bytes must be .*got None$",
                 id="none-bytes"),
])
def test_bad_input_is_named(arguments, error, message):
    with pytest.raises(error, match=message):
        sharded_model_states(*arguments)


def test_parameter_count_zero_with_bytes_is_refused():
    with pytest.raises(AccountingError, match=r"^parameter_count is 0 but the model states are not empty"):
        sharded_model_states(2, 2, 12, "zero3", 2, parameter_count=0)
    assert sharded_model_states(0, 0, 0, "zero3", 2, parameter_count=0).total == 0
