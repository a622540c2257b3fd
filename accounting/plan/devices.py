"""The device a plan is for: its memory and its dense peak for the run's dtype, from the peak table.

A device is named as the peak table knows it (:data:`accounting.hardware.peaks.CHIP_ROWS`:
``"H100 SXM"``, ``"B200"``, ``"MI300X"``) or as ``torch.cuda.get_device_name()`` prints it
(``"NVIDIA A100-SXM4-80GB"``: the A100 and GH200 rows come in two memory sizes, so they need
the full name). ``memory_gb`` and ``peak_tflops`` replace the table's figures, or stand in for
a device it does not know.

Memory is what torch reports the card holds (``torch.cuda.get_device_properties(i).total_memory``)
where that is known (:data:`TORCH_CAPACITIES`, each with its source), so that the plan's
``--headroom`` is its only margin: a datasheet's "80 GB" read as 80 × 10⁹ bytes is 6 % less than
the 85.0 GB torch reports on an H100 80GB HBM3, and a 10 % headroom on top would leave 16 % of the
card unused. Elsewhere it is the datasheet's capacity in GB of 10⁹ bytes, which the source says.

>>> device = plan_device("H200 SXM", "bfloat16")
>>> device.name, device.memory_bytes, device.peak_flops_per_second
('H200 SXM', 150109880320, 989400000000000.0)
>>> a100 = plan_device("NVIDIA A100-SXM4-40GB", "float32")
>>> a100.memory_bytes, a100.memory_source
(40000000000, 'datasheet (torch reports somewhat more)')

Which attention kernel ``scaled_dot_product_attention`` runs depends on the GPU's compute
capability (:mod:`accounting.model.attention_kernels`): each NVIDIA row has its own
(:data:`COMPUTE_CAPABILITIES`); for any other device the plan assumes an A100's (8.0) and says so.

>>> plan_device("H200 SXM", "bfloat16").attention_device
AttentionDevice(type='cuda', capability=(9, 0))
"""

import warnings
from dataclasses import dataclass

from accounting._checks import check_positive
from accounting._units import GB, TERA
from accounting.model.attention_kernels import AttentionDevice
from accounting.errors import AccountingError, AccountingTypeError
from accounting.hardware.peaks import CHIP_ROWS, PeakUnknownWarning, find_chip, peak_flops


@dataclass(frozen=True)
class PlanDevice:
    """One accelerator: its name (the table row, or the name given), memory in bytes, dense peak FLOP/s."""

    name: str
    memory_bytes: int
    peak_flops_per_second: float
    dtype: str
    memory_source: str
    peak_source: str
    attention_device: AttentionDevice | None = None


TORCH_CAPACITIES = {
    # source: torch.cuda.get_device_properties(0).total_memory on this project's H200 (NVIDIA H200, 141 GB
    # HBM3e), recorded in tests/data/hosts/nvidia-h200/sdpa-kernels-and-sustained-window.json (props).
    "H200 SXM": (150_109_880_320, "torch's total_memory, recorded on an H200"),
    # source: torch's _CudaDeviceProperties as users print them for an H100 80GB HBM3 in public issue threads:
    # total_memory=81082MB, 81089MB and 81090MB (MiB, by driver; nvidia-smi shows 81,559 MiB, the driver's reserve
    # included), 85.02-85.03 GB. Not yet recorded on this project's hosts: replace it with a recording of one.
    "H100 SXM": (81_089 * 2**20, "torch's total_memory of an H100 80GB HBM3"),
}
"""(bytes, source) of the memory torch reports on a peak-table row's card, where known."""

COMPUTE_CAPABILITIES = (
    # NVIDIA's table of CUDA GPUs (developer.nvidia.com/cuda-gpus), by the peak table's row names; the
    # first prefix that matches a row wins (A100 before A10, A10G before A10).
    ("GH200", (9, 0)), ("H100", (9, 0)), ("H200", (9, 0)), ("GB200", (10, 0)), ("B200", (10, 0)),
    ("A100", (8, 0)), ("A10G", (8, 6)), ("A10", (8, 6)), ("L40S", (8, 9)), ("L4", (8, 9)), ("T4", (7, 5)),
    ("V100", (7, 0)), ("RTX 4090", (8, 9)), ("RTX 3090", (8, 6)),
)
"""(row prefix, compute capability) of the NVIDIA rows of the peak table."""


def compute_capability(row: str) -> tuple[int, int] | None:
    """The compute capability of a peak-table row, ``None`` for a device that has none (AMD's) or an unknown one.

    >>> compute_capability("A100 SXM"), compute_capability("A10G"), compute_capability("MI300X")
    ((8, 0), (8, 6), None)
    """
    return next((capability for prefix, capability in COMPUTE_CAPABILITIES if row.startswith(prefix)), None)


def known_devices() -> tuple[str, ...]:
    """The peak table's rows that name one chip (each accepted as ``--device``)."""
    return tuple(row for row in CHIP_ROWS if find_chip(row) is not None)


def plan_device(name: str, dtype: str, *, memory_gb=None, peak_tflops=None) -> PlanDevice:
    """The device called ``name``, for a run whose matmuls are in ``dtype`` (a peak-table column).

    >>> plan_device("T4", "bfloat16")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: T4 has no published bfloat16 peak: give one with --peak-tflops
    >>> plan_device("my-accelerator", "bfloat16", memory_gb=96, peak_tflops=500).name
    'my-accelerator'
    """
    if not isinstance(name, str) or not name.strip():
        raise AccountingTypeError(f"device must be a name such as 'H100 SXM', got {name!r}")
    chip = find_chip(name)
    if chip is None and (memory_gb is None or peak_tflops is None):
        listed = ", ".join(known_devices())
        raise AccountingError(
            f"device {name!r} is not in the peak table (known: {listed}; or the name torch.cuda.get_device_name() "
            "prints, such as 'NVIDIA A100-SXM4-80GB'); for another device give --memory-gb and --peak-tflops"
        )
    label = chip.row if chip is not None else name.strip()
    if memory_gb is not None:
        memory, memory_source = check_positive(memory_gb, "--memory-gb") * GB, "--memory-gb"
    elif chip.row in TORCH_CAPACITIES:
        memory, memory_source = TORCH_CAPACITIES[chip.row]
    elif chip.memory_gb is None:
        raise AccountingError(f"{label} has no memory size in the peak table: give one with --memory-gb")
    else:
        memory, memory_source = chip.memory_gb * GB, "datasheet (torch reports somewhat more)"
    if peak_tflops is not None:
        peak, peak_source = check_positive(peak_tflops, "--peak-tflops") * TERA, "--peak-tflops"
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PeakUnknownWarning)
            peak = peak_flops(name, dtype)
        if peak is None:
            raise AccountingError(f"{label} has no published {dtype} peak: give one with --peak-tflops")
        peak_source = "datasheet, dense"
    capability = compute_capability(chip.row) if chip is not None else None
    attention = AttentionDevice("cuda", capability) if capability is not None else None
    return PlanDevice(label, int(memory), peak, dtype, memory_source, peak_source, attention)
