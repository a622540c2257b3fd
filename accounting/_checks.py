"""Input checks shared by every module: sizes, shapes and finite positive numbers.

Checks raise, never ``assert`` (asserts vanish under ``python -O``).
"""

import math
import numbers
from collections.abc import Iterable

from accounting.errors import AccountingError, AccountingTypeError


def check_size(value, what: str) -> int:
    """Return ``value`` as an ``int`` if it is a non-negative integer (not a bool).

    >>> check_size(3, "batch")
    3
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise AccountingTypeError(f"{what} must be a non-negative integer, got {value!r}")
    if value < 0:
        raise AccountingError(f"{what} must be a non-negative integer, got {value!r}")
    return int(value)


def check_positive_size(value, what: str) -> int:
    """Like :func:`check_size`, but zero is rejected too."""
    size = check_size(value, what)
    if size == 0:
        raise AccountingError(f"{what} must be a positive integer, got {value!r}")
    return size


def check_shape(shape, what: str = "shape") -> tuple[int, ...]:
    """Return ``shape`` as a tuple of non-negative ints, or raise naming the bad entry.

    >>> check_shape([2, 3])
    (2, 3)
    """
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
        raise AccountingTypeError(f"{what} must be a sequence of integers, got {shape!r}")
    shape = tuple(shape)
    for position, size in enumerate(shape):
        is_integer = isinstance(size, numbers.Integral) and not isinstance(size, bool)
        if not is_integer or size < 0:
            error = AccountingError if is_integer else AccountingTypeError
            raise error(f"{what} {shape!r}: entry {position} must be a non-negative integer, got {size!r}")
    return tuple(int(size) for size in shape)


def check_real(value, what: str) -> float:
    """Return ``value`` as a finite float, or raise naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise AccountingTypeError(f"{what} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise AccountingError(f"{what} must be finite, got {value!r}")
    return value


def check_positive(value, what: str) -> float:
    """Return ``value`` as a float if it is finite and > 0."""
    number = check_real(value, what)
    if number <= 0:
        raise AccountingError(f"{what} must be positive, got {value!r}")
    return number


def check_non_negative(value, what: str) -> float:
    """Return ``value`` as a float if it is finite and >= 0."""
    number = check_real(value, what)
    if number < 0:
        raise AccountingError(f"{what} must be non-negative, got {value!r}")
    return number


def check_choice(value, choices, what: str):
    """Return ``value`` if it is one of ``choices``, else raise listing them."""
    if value not in choices:
        listed = ", ".join(repr(choice) for choice in choices)
        raise AccountingError(f"{what} must be one of {listed}, got {value!r}")
    return value


def positive_number_from_text(text: str, what: str, unit: str | None = None) -> float:
    """Parse ``text`` (an environment variable, a command-line value) as a finite number above zero.

    >>> positive_number_from_text(" 2.5 ", "$ACCOUNTING_CPU_GHZ", "GHz")
    2.5
    >>> positive_number_from_text("nan", "$ACCOUNTING_CPU_GHZ", "GHz")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: $ACCOUNTING_CPU_GHZ must be a positive number of GHz, got 'nan'
    """
    if not isinstance(text, str):
        raise AccountingTypeError(f"{what} must be given as text, got {text!r}")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        number = f"a positive number of {unit}" if unit else "a positive number"
        raise AccountingError(f"{what} must be {number}, got {text!r}")
    return value
