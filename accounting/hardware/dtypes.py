"""Matmul dtype names as the peak tables and the native-dtype rule read them.

A floating-point format is named as :func:`accounting.memory.format_name` names it;
``int8`` is added (its rates are TOPS, quoted as FLOP/s). Both float8 formats read one
peak column, ``"fp8"``.

>>> dtype_name(torch.int8), dtype_name("bf16"), peak_column("float8_e5m2")
('int8', 'bfloat16', 'fp8')
"""

import torch

from accounting.memory import format_name

INT8 = "int8"
FP8 = "fp8"
"""The one peak column both float8 formats read."""


def dtype_name(dtype) -> str:
    """Canonical name of a matmul dtype: a floating-point format (:func:`accounting.memory.format_name`) or ``"int8"``.

    >>> dtype_name(torch.int8), dtype_name("bf16"), dtype_name("fp8")
    ('int8', 'bfloat16', 'float8_e4m3fn')
    """
    if dtype in (torch.int8, INT8):
        return INT8
    return format_name(dtype)


def peak_column(dtype) -> str:
    """The table column for a dtype given as a torch dtype or a name (``int8`` included)."""
    name = dtype_name(dtype)
    return FP8 if name.startswith("float8") else name
