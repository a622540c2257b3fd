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
    "FlopCount",
    "count_flops",
    "einsum_flops",
    "linear_flops",
    "matmul_flops",
    "mfu",
    # training memory and model FLOPs
    "LiveTensorBytes",
    "OPTIMIZERS",
    "PRECISION_POLICIES",
    "PrecisionPolicy",
    "TrainingMemory",
    "TrainingTime",
    "TransformerConfig",
    "TransformerFlops",
    "measure_optimizer_state_bytes",
    "optimizer_state_bytes",
    "optimizer_state_slots",
    "parameter_count",
    "precision_policy",
    "training_flops",
    "training_memory",
    "training_time",
    "transformer_activation_bytes",
    "transformer_flops",
    "transformer_training_memory",
    # hardware, timing and the benchmark matrix
    "BenchConfig",
    "DeviceInfo",
    "MatmulCase",
    "PeakUnknownWarning",
    "Timing",
    "cpu_peak_flops",
    "detect_device",
    "device_peak_flops",
    "load_benchmarks",
    "matmul_case",
    "peak_bandwidth",
    "peak_flops",
    "synchronize",
    "time_fn",
    "time_matmul",
]

from accounting.bench.matrix import BenchConfig, load_benchmarks
from accounting.flop_count import FlopCount, count_flops
from accounting.flops import einsum_flops, linear_flops, matmul_flops, mfu
from accounting.hardware.clocks import synchronize
from accounting.hardware.cpu_peak import cpu_peak_flops
from accounting.hardware.devices import DeviceInfo, detect_device
from accounting.hardware.peaks import PeakUnknownWarning, device_peak_flops, peak_bandwidth, peak_flops
from accounting.live_memory import LiveTensorBytes
from accounting.memory import DtypeInfo, dtype_info, format_name, same_storage, storage_bytes, tensor_bytes
from accounting.strides import contiguous_strides, element_offset, is_contiguous, view_strides
from accounting.timing import MatmulCase, Timing, matmul_case, time_fn, time_matmul
from accounting.training_memory import (
    OPTIMIZERS,
    PRECISION_POLICIES,
    PrecisionPolicy,
    TrainingMemory,
    measure_optimizer_state_bytes,
    optimizer_state_bytes,
    optimizer_state_slots,
    parameter_count,
    precision_policy,
    training_memory,
    transformer_activation_bytes,
    transformer_training_memory,
)
from accounting.transformer import TransformerConfig
from accounting.transformer_flops import (
    TrainingTime,
    TransformerFlops,
    training_flops,
    training_time,
    transformer_flops,
)
