"""Injected faults change exactly what they say: one element, one bit, on one call."""

import pytest
import torch

from accounting.errors import AccountingError
from accounting.health.faults import (
    Fault,
    corrupt_element,
    faulty,
    flip_bit,
    parse_fault,
)

DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2]


@pytest.mark.parametrize("dtype", DTYPES)
def test_flipping_the_sign_bit_negates_one_element(dtype):
    x = torch.arange(1, 7, dtype=torch.float32).to(dtype)
    y = x.clone()
    flip_bit(y, 4, x.element_size() * 8 - 1)
    expected = x.to(torch.float32).clone()
    expected[4] = -expected[4]
    assert torch.equal(y.to(torch.float32), expected)


@pytest.mark.parametrize("dtype", DTYPES)
def test_flipping_the_lowest_bit_moves_one_element_by_one_step(dtype):
    x = torch.ones(3, dtype=dtype)
    flip_bit(x, 1, 0)
    assert x[1].item() == pytest.approx(1 + torch.finfo(dtype).eps) and x[0].item() == x[2].item() == 1


def test_flipping_twice_restores_the_bits():
    x = torch.randn(5)
    y = x.clone()
    flip_bit(y, 3, 17)
    assert not torch.equal(x, y)
    flip_bit(y, 3, 17)
    assert torch.equal(x, y)


def test_corrupt_element_adds_to_one_element():
    x = torch.zeros(2, 3)
    corrupt_element(x, 4, 2.5)
    assert x.tolist() == [[0, 0, 0], [0, 2.5, 0]]


def test_faulty_corrupts_only_the_chosen_call():
    fn = faulty(lambda: torch.zeros(2), parse_fault("add:1:3@2"))
    assert [fn().tolist() for _ in range(3)] == [[0, 0], [0, 3], [0, 0]]


def test_parse_fault_reads_both_kinds():
    assert parse_fault("flip:7:30") == Fault("flip", 7, 30, 1)
    assert parse_fault(" add:0:-1e3@4 ") == Fault("add", 0, -1000.0, 4)


@pytest.mark.parametrize("text", ["flip:1", "zap:1:2", "flip:-1:3", "add:1:nan", "flip:1:2@0", "add:x:1"])
def test_a_bad_fault_is_named(text):
    with pytest.raises(AccountingError, match="fault"):
        parse_fault(text)


@pytest.mark.parametrize("call, match", [
    (lambda: flip_bit(torch.ones(3), 3, 0), "index 3"),
    (lambda: flip_bit(torch.ones(3), 0, 32), "bit 32"),
    (lambda: flip_bit(torch.ones(3, 3).t(), 0, 0), "contiguous"),
    (lambda: corrupt_element([1.0], 0, 1.0), "list"),
    (lambda: faulty(lambda: None, "flip:1:2"), "'flip:1:2'"),
])
def test_bad_arguments_are_named(call, match):
    with pytest.raises((AccountingError, TypeError), match=match):
        call()
