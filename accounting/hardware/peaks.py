"""Peak FLOP/s and memory bandwidth of a device: published accelerator figures, the CPU estimate, an override.

Accelerators: a table keyed by chip, then dtype, of *dense* vendor peaks (sparse
datasheet figures halved), from ``shared/reference/accelerators.md``. Names are
matched as ``torch.cuda.get_device_name()`` prints them, whole-name and
case-insensitively, so look-alikes (``GB200``/``B200``, ``GH200``/``H200``,
``A10``/``A100``, ``L4``/``L40``/``L40S``, ``V100S``/``V100``) never meet. An unknown
chip, or a dtype a chip has no rate for, gives ``None`` and a :class:`PeakUnknownWarning`
saying how to override it — never a guess that would make MFU silently wrong.

Two suffixes name what a cloud VM is given. ``VF`` (an SR-IOV virtual function: "AMD Instinct
MI300X VF", as Azure's MI300X VMs show it) is the whole chip passed to the VM, so it reads the
chip's row. ``MIG 1g.10gb`` (an NVIDIA Multi-Instance GPU slice, "NVIDIA H100 80GB HBM3 MIG
1g.10gb") is a fraction of the chip's SMs and memory bandwidth that NVIDIA publishes no peak
for: it gets no row, so no peak, no floors and no table cache, and the warning says so.

Dtype columns: ``float64`` (FP64 tensor cores where the chip has them: cuBLAS DGEMM
uses them), ``float32`` (plain FP32, no tensor cores), ``"tf32"`` (float32 matmuls on
tensor cores), ``bfloat16``, ``float16``, ``float8_e4m3fn`` and ``float8_e5m2`` (one FP8
rate, which AMD's fnuz variants ``float8_e4m3fnuz``/``float8_e5m2fnuz`` read too), ``int8``
(TOPS, as FLOP/s). Which of them a given device runs natively is
:mod:`accounting.hardware.native`'s question.

:func:`device_peak_flops` is the one lookup for a detected device: the user's override,
else the table (GPUs), else the CPU estimate (:mod:`accounting.hardware.cpu_peak`).

>>> peak_flops("NVIDIA H100 80GB HBM3", "bf16")
989400000000000.0
>>> peak_flops("NVIDIA H100 80GB HBM3", "tf32", sparse=True) / 1e12
989.4
>>> peak_bandwidth("NVIDIA A100-SXM4-80GB") / 1e12
2.039
>>> peak_flops("AMD Instinct MI300X VF", "bf16") == peak_flops("AMD Instinct MI300X", "bf16")
True
"""

import os
import re
import warnings
from dataclasses import dataclass

from accounting._checks import check_positive, positive_number_from_text
from accounting._units import TERA
from accounting.errors import AccountingTypeError
from accounting.hardware.cpu_peak import cpu_peak_flops
from accounting.hardware.devices import UNREPORTED_CACHE_BYTES, DeviceInfo
from accounting.hardware.dtypes import FP8, INT8, peak_column
from accounting.hardware.environment import PEAK_TFLOPS_ENV
from accounting.hardware.native import kind_reason
from accounting.memory import TF32

_COLUMNS = ("float64", "float32", TF32, "bfloat16", "float16", FP8, INT8)
_SPARSE_DTYPES = frozenset({TF32, "bfloat16", "float16", FP8, INT8})
"""Dtypes whose tensor-core rate doubles with 2:4 structured sparsity."""


class PeakUnknownWarning(UserWarning):
    """No published peak for this device/dtype: MFU cannot be computed without an override."""


@dataclass(frozen=True)
class Chip:
    """One row of the peak table. ``tflops`` maps a dtype column to dense TFLOP/s (TOPS for int8).

    ``cache_mib`` is a last-level cache beyond the L2 that torch reports (AMD's Infinity Cache), for
    the L2 flush: see :func:`last_level_cache_bytes`.
    """

    row: str
    tflops: dict
    bandwidth_tbs: float | None
    memory_gb: float | None
    sparsity: bool = True
    estimated: bool = False
    cache_mib: float | None = None


def _rates(fp64, fp64_tc, fp32, tf32, bf16, fp16, fp8, int8) -> dict:
    """A chip's dense rates; ``float64`` is the tensor-core figure when the chip has one."""
    values = (fp64_tc if fp64_tc is not None else fp64, fp32, tf32, bf16, fp16, fp8, int8)
    return {column: value for column, value in zip(_COLUMNS, values) if value is not None}


_H100_SXM = _rates(33.5, 66.9, 66.9, 494.7, 989.4, 989.4, 1978.9, 1978.9)
_H100_NVL = _rates(30, 60, 60, 417.5, 835.5, 835.5, 1670.5, 1670.5)
_A100 = _rates(9.7, 19.5, 19.5, 156, 312, 312, None, 624)
_A10 = _rates(None, None, 31.2, 62.5, 125, 125, None, 250)
_V100_SXM2 = _rates(7.8, None, 15.7, None, None, 125, None, None)
_V100_PCIE = _rates(7.0, None, 14.0, None, None, 112, None, None)

# Keys are whole-name patterns, matched against the normalised device name (lower case,
# vendor words dropped, "-" and "_" as spaces): see _normalise.
_CHIPS: dict[str, Chip] = {
    # source: NVIDIA H100 Tensor Core GPU datasheet (SXM5); TF32..INT8 printed with sparsity, halved.
    r"h100 80gb hbm3|h100 sxm5?( 80gb)?( hbm3)?": Chip("H100 SXM", _H100_SXM, 3.35, 80),
    # source: NVIDIA H100 datasheet (PCIe column), sparse figures halved.
    r"h100 pcie( 80gb)?": Chip("H100 PCIe", _rates(25.6, 51.2, 51.2, 378, 756, 756, 1513, 1513), 2.0, 80),
    # source: NVIDIA H100 NVL datasheet; one GPU (the sheet's pair figure halved), sparse halved.
    r"h100 nvl( 94gb)?": Chip("H100 NVL (one GPU)", _H100_NVL, 3.9, 94),
    # source: NVIDIA H200 datasheet (SXM column); same compute as H100 SXM, sparse halved.
    r"h200( sxm)?( 141gb)?( hbm3e)?": Chip("H200 SXM", _H100_SXM, 4.8, 141),
    # source: NVIDIA H200 datasheet (NVL column), sparse halved.
    r"h200 nvl": Chip("H200 NVL", _H100_NVL, 4.8, 141),
    # source: NVIDIA Blackwell B200 datasheet (HGX B200, per GPU), sparse halved.
    r"b200": Chip("B200", _rates(37, 37, 75, 1100, 2250, 2250, 4500, 4500), 7.7, 180),
    # source: NVIDIA GB200 NVL72 datasheet, per GPU, sparse halved.
    r"gb200": Chip("GB200 (per GPU)", _rates(40, 40, 80, 1250, 2500, 2500, 5000, 5000), 8.0, 186),
    # source: NVIDIA A100 datasheet (SXM4 40GB / 80GB columns), sparse halved; no FP8 units.
    r"a100 sxm4 40gb": Chip("A100 SXM", _A100, 1.555, 40),
    r"a100 sxm4 80gb": Chip("A100 SXM", _A100, 2.039, 80),
    # source: NVIDIA A100 datasheet (PCIe 40GB / 80GB columns), sparse halved.
    r"a100 pcie 40gb": Chip("A100 PCIe", _A100, 1.555, 40),
    r"a100 80gb pcie": Chip("A100 PCIe", _A100, 1.935, 80),
    # source: NVIDIA A10 datasheet, sparse halved.
    r"a10": Chip("A10", _A10, 0.6, 24),
    # source: none from NVIDIA (an AWS part); A10's figures, as commonly given. Estimated.
    r"a10g": Chip("A10G", _A10, 0.6, 24, estimated=True),
    # source: NVIDIA L4 datasheet, sparse halved.
    r"l4": Chip("L4", _rates(None, None, 30.3, 60, 121, 121, 242.5, 242.5), 0.3, 24),
    # source: NVIDIA L40S datasheet, sparse halved.
    r"l40s": Chip("L40S", _rates(None, None, 91.6, 183, 362, 362, 733, 733), 0.864, 48),
    # source: NVIDIA T4 datasheet (Turing: FP16/INT8 tensor cores, no sparsity, no TF32/BF16).
    r"t4": Chip("T4", _rates(None, None, 8.1, None, None, 65, None, 130), 0.32, 16, sparsity=False),
    # source: NVIDIA V100 datasheet (SXM2 / PCIe columns); Volta has no sparsity.
    r"v100 sxm2( (16|32)gb)?": Chip("V100 SXM2", _V100_SXM2, 0.9, 32, sparsity=False),
    r"v100 pcie( (16|32)gb)?": Chip("V100 PCIe", _V100_PCIE, 0.9, 32, sparsity=False),
    # source: NVIDIA Ada Lovelace architecture whitepaper, FP32-accumulate column (what PyTorch uses).
    r"rtx 4090": Chip("RTX 4090", _rates(None, None, 82.6, 82.6, 165.2, 165.2, 330.3, 660.6), 1.008, 24),
    # source: NVIDIA Ampere GA102 whitepaper, FP32-accumulate column.
    r"rtx 3090": Chip("RTX 3090", _rates(None, None, 35.6, 35.6, 71, 71, None, 284), 0.936, 24),
    # source: NVIDIA GH200 Grace Hopper Superchip datasheet (the H100 GPU of the module; TF32..INT8
    # printed with sparsity, halved). HBM3 96 GB at 4 TB/s ("GH200 480GB": 480 GB is the Grace LPDDR5X)
    # or HBM3e 144 GB at 4.9 TB/s; same compute.
    r"gh200 480gb|gh200 96gb( hbm3)?": Chip(
        "GH200 (96GB HBM3)", _rates(34, 67, 67, 494.5, 989.5, 989.5, 1979, 1979), 4.0, 96),
    r"gh200 144gb?( hbm3e)?": Chip(
        "GH200 (144GB HBM3e)", _rates(34, 67, 67, 494.5, 989.5, 989.5, 1979, 1979), 4.9, 144),
    # source: AMD Instinct MI300X datasheet (dense matrix figures). cache_mib: 256 MB Infinity Cache
    # (AMD CDNA 3 white paper; ROCm "GPU specifications" table, L3 256 MiB, L2 4 MiB per XCD, which
    # is all torch's L2_cache_size reports), shared by every gfx942 part below.
    r"mi300x": Chip("MI300X", _rates(81.7, 163.4, 163.4, 653.7, 1307.4, 1307.4, 2614.9, 2614.9), 5.3, 192,
                    cache_mib=256),
    # source: AMD Instinct MI300A datasheet (APU, 228 CUs; dense matrix figures; HBM3 shared with its CPUs).
    r"mi300a": Chip("MI300A", _rates(61.3, 122.6, 122.6, 490.3, 980.6, 980.6, 1961.2, 1961.2), 5.3, 128,
                    cache_mib=256),
    # source: AMD Instinct MI325X datasheet: MI300X's compute, HBM3E 256 GB at 6 TB/s.
    r"mi325x": Chip("MI325X", _rates(81.7, 163.4, 163.4, 653.7, 1307.4, 1307.4, 2614.9, 2614.9), 6.0, 256,
                    cache_mib=256),
    # source: none public (a cut-down gfx942 sold in China). Listed, with no rates, so that its name is
    # known and the gfx942 arch never gives it MI300X's peaks: its peaks need --peak-tflops.
    r"mi308x": Chip("MI308X", {}, None, 192, cache_mib=256),
    # source: AMD Instinct MI250X datasheet, per GCD (torch sees each GCD as a device); no sparsity.
    # float32 is the FP32 *matrix* rate (95.7 per module, 47.9 per GCD), not the vector rate (23.9 per
    # GCD): rocBLAS/Tensile SGEMM on gfx90a runs on the matrix cores (v_mfma_f32_*_f32), so with the
    # vector rate a healthy float32 MFU reads near 2 and fails the ceiling.
    # The driver prints "MI250X/MI250" for both; MI250 is slower, so MFU there reads low, never high.
    r"mi250x( ?/ ?mi250)?": Chip(
        "MI250X (per GCD, as torch sees it)", _rates(24, 47.9, 47.9, None, 191.5, 191.5, None, 191.5), 1.6, 64,
        sparsity=False,
    ),
}
_COMPILED = [(re.compile(pattern), chip) for pattern, chip in _CHIPS.items()]
CHIP_ROWS = tuple(dict.fromkeys(chip.row for chip in _CHIPS.values()))
"""Every row name of the peak table, in table order (what ``benchmarks.json``'s ``chip_floors`` may key on)."""

# Names that are real but do not say which table row they are.
_AMBIGUOUS = {"h100": "H100 SXM, H100 PCIe or H100 NVL", "gh200": "GH200 (96GB HBM3) or GH200 (144GB HBM3e)"}
# ROCm: gcnArchName when the marketing name says nothing (no model number: "AMD Radeon Graphics").
# gfx942 is also MI300A, MI308X and MI325X, gfx90a also MI210: a name naming any chip is never overruled.
_ROCM_ARCH = {"gfx942": "mi300x", "gfx90a": "mi250x"}
_VENDOR_WORDS = ("nvidia", "tesla", "geforce", "amd", "instinct", "radeon")


_VIRTUAL_FUNCTION = "vf"
"""Last word of an SR-IOV virtual function's name ("AMD Instinct MI300X VF"): the whole chip, passed to a VM."""


def _normalise(device_name: str) -> str:
    """``"NVIDIA A100-SXM4-40GB"`` → ``"a100 sxm4 40gb"``: lower case, vendor words and a ``VF`` suffix dropped.

    >>> _normalise("AMD Instinct MI300X VF")
    'mi300x'
    """
    words = [word for word in re.sub(r"[-_\s]+", " ", device_name.strip().lower()).split()
             if word not in _VENDOR_WORDS]
    if len(words) > 1 and words[-1] == _VIRTUAL_FUNCTION:
        words.pop()
    return " ".join(words)


def mig_slice(device_name: str) -> tuple[str, str] | None:
    """``(the whole chip's name, the slice's profile)`` for an NVIDIA MIG slice's name, else ``None``.

    >>> mig_slice("NVIDIA H100 80GB HBM3 MIG 1g.10gb")
    ('NVIDIA H100 80GB HBM3', '1g.10gb')
    >>> print(mig_slice("NVIDIA H100 80GB HBM3"))
    None
    """
    if not isinstance(device_name, str):
        raise AccountingTypeError(f"device_name must be a string, got {device_name!r}")
    match = re.fullmatch(r"\s*(?P<chip>.*?)[-_\s]+mig[-_\s]+(?P<profile>\S.*?)\s*", device_name, re.IGNORECASE)
    return (match.group("chip"), match.group("profile")) if match else None


def _unknown_why(device_name: str) -> str:
    """Why a device name has no table row, in words: a MIG slice, an ambiguous name, or not in the table."""
    sliced = mig_slice(device_name)
    if sliced is not None:
        chip = find_chip(sliced[0])
        whole = chip.row if chip is not None else repr(sliced[0])
        return (f"it is a MIG slice ({sliced[1]}) of {whole}: NVIDIA publishes no peak for a slice, "
                "and the whole chip's would overstate it")
    ambiguous = _AMBIGUOUS.get(_normalise(device_name))
    return f"it could be {ambiguous}" if ambiguous else "it is not in the peak table"


def find_chip(device_name: str, *, arch: str | None = None) -> Chip | None:
    """The table row for a device name (or ROCm ``arch``), or ``None`` if there is none.

    ``arch`` is used only when the name says nothing (it has no model number): an MI300A
    or an MI210 is not an MI300X or an MI250X because its arch is theirs. A virtual function
    (``VF``) reads its chip's row; a MIG slice has none.

    >>> find_chip("NVIDIA GB200").row, find_chip("NVIDIA GH200 480GB").row
    ('GB200 (per GPU)', 'GH200 (96GB HBM3)')
    >>> find_chip("AMD Instinct MI300X VF").row, find_chip("NVIDIA H100 80GB HBM3 MIG 1g.10gb")
    ('MI300X', None)
    >>> find_chip("AMD Radeon Graphics", arch="gfx942:sramecc+:xnack-").row
    'MI300X'
    >>> print(find_chip("AMD Instinct MI210", arch="gfx90a"))
    None
    """
    if not isinstance(device_name, str):
        raise AccountingTypeError(f"device_name must be a string, got {device_name!r}")
    if mig_slice(device_name) is not None:
        return None  # a slice of a chip has none of the chip's published figures (see the module doc)
    candidates = [_normalise(device_name)]
    if arch and not re.search(r"\d", candidates[0]):
        candidates.append(_ROCM_ARCH.get(arch.split(":")[0].lower(), ""))
    for name in candidates:
        for pattern, chip in _COMPILED:
            if pattern.fullmatch(name):
                return chip
    return None


def chip_row(info: DeviceInfo) -> str | None:
    """The peak-table row of a detected device (by name, then ROCm ``arch``); ``None`` for a CPU or an unknown chip.

    The one lookup for anything keyed by chip (``benchmarks.json``'s ``chip_floors``):
    a gfx942 card whose driver prints only ``"AMD Radeon Graphics"`` is the MI300X row.

    >>> chip_row(DeviceInfo("cuda", "AMD Radeon Graphics", 0, 2**30, arch="gfx942:sramecc+:xnack-"))
    'MI300X'
    >>> print(chip_row(DeviceInfo("cpu", "some CPU", None, 2**30)))
    None
    """
    if not isinstance(info, DeviceInfo):
        raise AccountingTypeError(f"info must be a DeviceInfo (see detect_device), got {info!r}")
    if info.kind != "cuda":
        return None
    chip = find_chip(info.name, arch=info.arch)
    return chip.row if chip is not None else None


def last_level_cache_bytes(info: DeviceInfo) -> int:
    """Bytes of the largest cache a cold call must miss on a detected device (0 for a CPU).

    The larger of the L2 torch reports and the table row's ``cache_mib`` (MI300X: the L2 that torch
    reports is one XCD's 4 MB; the 256 MB Infinity Cache behind it is the table's), else
    :data:`accounting.hardware.devices.UNREPORTED_CACHE_BYTES` (torch < 2.5 reports no L2).

    >>> mi300x = DeviceInfo("cuda", "AMD Instinct MI300X", 0, 192 * 2**30, l2_cache_bytes=4 * 2**20)
    >>> last_level_cache_bytes(mi300x) // 2**20
    256
    >>> last_level_cache_bytes(DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0, 80 * 2**30, l2_cache_bytes=50 * 2**20)) // 2**20
    50
    """
    if not isinstance(info, DeviceInfo):
        raise AccountingTypeError(f"info must be a DeviceInfo (see detect_device), got {info!r}")
    if info.kind != "cuda":
        return 0
    chip = find_chip(info.name, arch=info.arch)
    table = int(chip.cache_mib * 2**20) if chip is not None and chip.cache_mib else 0
    cache = max(table, info.l2_cache_bytes or 0)
    return cache or UNREPORTED_CACHE_BYTES


def _override_hint(dtype: str) -> str:
    return (
        f"pass override_tflops= (pytest: --peak-tflops) or set ${PEAK_TFLOPS_ENV} "
        f"to the device's dense {dtype} TFLOP/s"
    )


def peak_flops(device_name: str, dtype, *, sparse: bool = False, arch: str | None = None) -> float | None:
    """Dense peak FLOP/s of a named accelerator for a dtype (2:4-sparse rate if ``sparse``).

    ``None``, with a :class:`PeakUnknownWarning` saying how to override it, for an
    unknown chip or a dtype the chip has no published rate for.

    >>> peak_flops("Tesla V100-SXM2-16GB", "float16") / 1e12
    125.0
    >>> peak_flops("NVIDIA H100 80GB HBM3", "fp8") == peak_flops("NVIDIA H100 80GB HBM3", "float8_e5m2")
    True
    """
    column = peak_column(dtype)
    chip = find_chip(device_name, arch=arch)
    if chip is None:
        warnings.warn(f"no peak FLOP/s for device {device_name!r}: {_unknown_why(device_name)}; "
                      f"{_override_hint(column)}", PeakUnknownWarning, stacklevel=2)
        return None
    tflops = chip.tflops.get(column)
    if tflops is None:
        warnings.warn(f"{chip.row} ({device_name!r}) has no published {column} rate; {_override_hint(column)}",
                      PeakUnknownWarning, stacklevel=2)
        return None
    if sparse:
        if not (chip.sparsity and column in _SPARSE_DTYPES):
            warnings.warn(f"{chip.row} has no 2:4-sparse {column} rate; {_override_hint(column)}",
                          PeakUnknownWarning, stacklevel=2)
            return None
        tflops *= 2
    return tflops * TERA


def peak_bandwidth(device_name: str, *, arch: str | None = None) -> float | None:
    """Peak memory bandwidth of a named accelerator in bytes/s (``None`` + warning if unknown).

    >>> peak_bandwidth("NVIDIA H100 80GB HBM3") / 1e12
    3.35
    """
    chip = find_chip(device_name, arch=arch)
    if chip is None or chip.bandwidth_tbs is None:
        if chip is not None:
            why = f"{chip.row} has no published bandwidth"
        else:
            why = "it is not in the table" if mig_slice(device_name) is None else _unknown_why(device_name)
        warnings.warn(f"no peak bandwidth for device {device_name!r}: {why}", PeakUnknownWarning, stacklevel=2)
        return None
    return chip.bandwidth_tbs * TERA


def peak_override_tflops(override_tflops=None) -> float | None:
    """The user's peak override in TFLOP/s: the argument, else ``$ACCOUNTING_PEAK_TFLOPS``, else ``None``."""
    if override_tflops is not None:
        return check_positive(override_tflops, "override_tflops")
    text = os.environ.get(PEAK_TFLOPS_ENV, "").strip()
    if not text:
        return None
    return positive_number_from_text(text, f"${PEAK_TFLOPS_ENV}", "TFLOP/s")


def device_peak_flops(info: DeviceInfo, dtype, *, override_tflops=None, sparse: bool = False) -> float | None:
    """Peak FLOP/s of a detected device for ``dtype``: the user's override, the table, or the CPU estimate.

    The override (argument or ``$ACCOUNTING_PEAK_TFLOPS``, in TFLOP/s) wins; it is the
    peak of whatever dtype is being measured. A CUDA or ROCm device is looked up by
    name (ROCm also by ``gcnArchName``); a CPU is estimated. ``None`` with a
    :class:`PeakUnknownWarning` where nothing is known.

    >>> cpu = DeviceInfo("cpu", "some CPU", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}), cores=4, clock_ghz=3.0)
    >>> device_peak_flops(cpu, "float32") / 1e9
    384.0
    >>> device_peak_flops(cpu, "float32", override_tflops=1.5)
    1500000000000.0
    """
    if not isinstance(info, DeviceInfo):
        raise AccountingTypeError(f"info must be a DeviceInfo (see detect_device), got {info!r}")
    override = peak_override_tflops(override_tflops)
    if override is not None:
        return override * TERA
    if info.kind == "cuda":
        return peak_flops(info.name, dtype, sparse=sparse, arch=info.arch)
    column = peak_column(dtype)
    reason = kind_reason("cpu", column)
    if reason:
        warnings.warn(f"{reason}, so no {column} peak", PeakUnknownWarning, stacklevel=2)
        return None
    if info.clock_ghz is None:
        warnings.warn(f"no clock for CPU {info.name!r} ({info.clock_source}); {_override_hint(column)}",
                      PeakUnknownWarning, stacklevel=2)
        return None
    return cpu_peak_flops(dtype, flags=info.cpu_flags, cores=info.cores, ghz=info.clock_ghz, vendor=info.vendor)
