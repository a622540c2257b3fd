"""Resource accounting for PyTorch: memory, FLOPs, and how well hardware delivers them.

>>> import accounting
>>> accounting.linear_flops(tokens=1024, in_features=256, out_features=64)
33554432

The public names are loaded when first used (PEP 562): ``import accounting`` imports none of the
modules below, so neither it nor the pytest plugin (whose import runs this file first) pays for torch
in a process that never touches them. ``from accounting import X``, ``accounting.X``, ``dir()`` and
``__all__`` work as for names imported eagerly.
"""

import importlib

_PUBLIC = {
    # Each public name and the module it comes from, in the order of ``__all__``. Adding a name is one line.
    "AccountingError": "accounting.errors",
    "AccountingTypeError": "accounting.errors",
    # memory
    "DtypeInfo": "accounting.memory",
    "dtype_info": "accounting.memory",
    "format_name": "accounting.memory",
    "same_storage": "accounting.memory",
    "storage_bytes": "accounting.memory",
    "tensor_bytes": "accounting.memory",
    # strides
    "contiguous_strides": "accounting.strides",
    "element_offset": "accounting.strides",
    "is_contiguous": "accounting.strides",
    "view_strides": "accounting.strides",
    # flops
    "FlopCount": "accounting.flop_count",
    "count_flops": "accounting.flop_count",
    "einsum_flops": "accounting.flops",
    "linear_flops": "accounting.flops",
    "matmul_flops": "accounting.flops",
    "mfu": "accounting.flops",
    # training memory and model FLOPs
    "LiveTensorBytes": "accounting.live_memory",
    "OPTIMIZERS": "accounting.model.training_memory",
    "PRECISION_POLICIES": "accounting.model.training_memory",
    "PrecisionPolicy": "accounting.model.training_memory",
    "TrainingMemory": "accounting.model.training_memory",
    "TrainingTime": "accounting.model.flops",
    "TransformerConfig": "accounting.model.config",
    "TransformerFlops": "accounting.model.flops",
    "measure_optimizer_state_bytes": "accounting.model.training_memory",
    "optimizer_state_bytes": "accounting.model.training_memory",
    "optimizer_state_slots": "accounting.model.training_memory",
    "parameter_count": "accounting.model.training_memory",
    "precision_policy": "accounting.model.training_memory",
    "training_flops": "accounting.model.flops",
    "training_memory": "accounting.model.training_memory",
    "training_time": "accounting.model.flops",
    "transformer_activation_bytes": "accounting.model.training_memory",
    "transformer_flops": "accounting.model.flops",
    "transformer_training_memory": "accounting.model.training_memory",
    # measured steps, sharding, planning
    "StepMemory": "accounting.live_memory",
    "measure_step_memory": "accounting.live_memory",
    "SHARDINGS": "accounting.model.sharding",
    "ShardedStates": "accounting.model.sharding",
    "sharded_model_states": "accounting.model.sharding",
    "sharding_stage": "accounting.model.sharding",
    "AttentionDevice": "accounting.model.attention_kernels",
    "choose_sdpa_kernel": "accounting.model.attention_kernels",
    "TracedStepMemory": "accounting.model.traced_step",
    "traced_training_step_memory": "accounting.model.traced_step",
    # hardware, timing and the benchmark matrix
    "BenchConfig": "accounting.bench.matrix",
    "DeviceInfo": "accounting.hardware.devices",
    "MatmulCase": "accounting.timing",
    "PeakUnknownWarning": "accounting.hardware.peaks",
    "Timing": "accounting.timing",
    "cpu_peak_flops": "accounting.hardware.cpu_peak",
    "detect_device": "accounting.hardware.devices",
    "device_peak_flops": "accounting.hardware.peaks",
    "load_benchmarks": "accounting.bench.matrix",
    "matmul_case": "accounting.timing",
    "peak_bandwidth": "accounting.hardware.peaks",
    "peak_flops": "accounting.hardware.peaks",
    "synchronize": "accounting.hardware.clocks",
    "time_fn": "accounting.timing",
    "time_matmul": "accounting.timing",
}

__all__ = list(_PUBLIC)


def __getattr__(name: str):
    """A public name, imported from its module on first use and kept here (PEP 562)."""
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # later lookups find it without calling __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
