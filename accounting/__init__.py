"""Resource accounting for PyTorch: memory, FLOPs, and how well hardware delivers them.

>>> import accounting
>>> accounting.linear_flops(tokens=1024, in_features=256, out_features=64)
33554432
"""

from accounting.errors import AccountingError, AccountingTypeError

__all__ = [
    "AccountingError",
    "AccountingTypeError",
    # memory
    "DtypeInfo",
    "dtype_info",
    "format_name",
    "same_storage",
    "storage_bytes",
    "tensor_bytes",
    # strides
    "contiguous_strides",
    "element_offset",
    "is_contiguous",
    "view_strides",
    # flops
    "einsum_flops",
    "linear_flops",
    "matmul_flops",
    "mfu",
]

from accounting.flops import einsum_flops, linear_flops, matmul_flops, mfu
from accounting.memory import DtypeInfo, dtype_info, format_name, same_storage, storage_bytes, tensor_bytes
from accounting.strides import contiguous_strides, element_offset, is_contiguous, view_strides
