"""Injected faults: one element of one product corrupted, or one bit flipped, to prove the checks catch them.

For tests, and for a command-line option that shows an operator the result check firing:
:func:`faulty` wraps a product's ``fn`` so that one chosen call returns a corrupted result,
as a failing device would. :func:`parse_fault` reads ``flip:INDEX:BIT`` or ``add:INDEX:DELTA``
(optionally ``@CALL``, the 1-based call to corrupt; default the first).

>>> import torch
>>> x = torch.ones(4)
>>> flip_bit(x, 2, 31)      # the sign bit of float32 element 2
>>> x.tolist()
[1.0, 1.0, -1.0, 1.0]
>>> fault = parse_fault("add:0:0.5@2")
>>> fn = faulty(lambda: torch.zeros(3), fault)
>>> fn().tolist(), fn().tolist()
([0.0, 0.0, 0.0], [0.5, 0.0, 0.0])
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from accounting._checks import check_positive_size, check_real, check_size
from accounting.errors import AccountingError, AccountingTypeError

_AS_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _flat(tensor, index):
    if not isinstance(tensor, torch.Tensor):
        raise AccountingTypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_contiguous():
        raise AccountingError("the tensor to corrupt must be contiguous (a product's output is)")
    index = check_size(index, "index")
    if index >= tensor.numel():
        raise AccountingError(f"index {index} is outside a tensor of {tensor.numel()} elements")
    return index


def flip_bit(tensor: torch.Tensor, index: int, bit: int) -> None:
    """Flip bit ``bit`` (0 = least significant) of flat element ``index`` of ``tensor``, in place."""
    index = _flat(tensor, index)
    bits = tensor.element_size() * 8
    bit = check_size(bit, "bit")
    if bit >= bits:
        raise AccountingError(f"bit {bit} is outside a {bits}-bit {tensor.dtype} element")
    as_int = tensor.view(_AS_INT[tensor.element_size()]).view(-1)
    signed = as_int.dtype != torch.uint8
    mask = -(1 << bit) if signed and bit == bits - 1 else 1 << bit  # the top bit of a signed type is negative
    as_int[index] ^= mask


def corrupt_element(tensor: torch.Tensor, index: int, delta: float) -> None:
    """Add ``delta`` to flat element ``index`` of ``tensor``, in place (rounded to its dtype)."""
    index = _flat(tensor, index)
    tensor.view(-1)[index] += check_real(delta, "delta")


@dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` ``"flip"`` (bit ``amount``) or ``"add"`` (``amount`` added), at flat ``index``, on call ``call``."""

    kind: str
    index: int
    amount: float
    call: int = 1

    def apply(self, tensor: torch.Tensor) -> None:
        """Corrupt ``tensor`` in place."""
        if self.kind == "flip":
            flip_bit(tensor, self.index, int(self.amount))
        else:
            corrupt_element(tensor, self.index, self.amount)


def parse_fault(text: str) -> Fault:
    """``flip:INDEX:BIT`` or ``add:INDEX:DELTA``, with an optional ``@CALL`` (1-based).

    >>> parse_fault("flip:7:30")
    Fault(kind='flip', index=7, amount=30, call=1)
    >>> parse_fault("zap:1:2")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: a fault is flip:INDEX:BIT or add:INDEX:DELTA (optionally @CALL), got 'zap:1:2'
    """
    if not isinstance(text, str):
        raise AccountingTypeError(f"a fault must be given as text, got {text!r}")
    body, _, call = text.strip().partition("@")
    parts = body.split(":")
    try:
        if len(parts) != 3 or parts[0] not in ("flip", "add"):
            raise ValueError(text)
        index = int(parts[1])
        amount = int(parts[2]) if parts[0] == "flip" else float(parts[2])
        call_number = int(call) if call else 1
    except ValueError:
        raise AccountingError(f"a fault is flip:INDEX:BIT or add:INDEX:DELTA (optionally @CALL), got {text!r}") from None
    check_size(index, "the fault's index")
    check_positive_size(call_number, "the fault's call")
    if parts[0] == "flip":
        check_size(amount, "the fault's bit")
    else:
        check_real(amount, "the fault's delta")
    return Fault(parts[0], index, amount, call_number)


def faulty(fn: Callable[[], torch.Tensor], fault: Fault) -> Callable[[], torch.Tensor]:
    """``fn`` whose ``fault.call``-th call returns its result with ``fault`` applied (in place); other calls are untouched."""
    if not callable(fn):
        raise AccountingTypeError(f"fn must be callable, got {fn!r}")
    if not isinstance(fault, Fault):
        raise AccountingTypeError(f"fault must be a Fault (see parse_fault), got {fault!r}")
    calls = [0]

    def wrapped():
        result = fn()
        calls[0] += 1
        if calls[0] == fault.call:
            fault.apply(result)
        return result

    return wrapped

