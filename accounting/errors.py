"""The one error family every rejected input raises.

>>> from accounting import AccountingError, matmul_flops
>>> try:
...     matmul_flops((2, 3), (4, 5))
... except AccountingError as error:
...     print(error)
matmul of shapes (2, 3) and (4, 5): inner sizes 3 and 4 differ
"""


class AccountingError(ValueError):
    """A value this library cannot account for; the message names the value."""


class AccountingTypeError(AccountingError, TypeError):
    """A value of the wrong type (a float where a size belongs, a bool, a list of strings)."""
