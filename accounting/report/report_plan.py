"""A report's plan (:class:`Plan`): what it will measure and compare against, and those choices in words.

:func:`accounting.report.run.prepare` settles the plan before anything is measured; the words here are what
the report says about it: where each dtype's peak comes from (:func:`peak_source`), what a non-native dtype's
MFU is a fraction of (:func:`mfu_against`), why a configured dtype is not timed by default
(:func:`not_native_note`), and the device as plain JSON values (:func:`describe_device`).

>>> cpu = DeviceInfo("cpu", "a CPU", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}), cores=4, clock_ghz=3.0)
>>> describe_device(cpu)["cpu_flags"]
['avx2', 'fma']
"""

import dataclasses
from dataclasses import dataclass, field

from accounting.hardware.cpu_peak import cpu_matmul_path
from accounting.hardware.devices import DeviceInfo
from accounting.hardware.native import NativeMatmul, native_matmul  # noqa: F401 (native_matmul: the doctests)
from accounting.hardware.peaks import PEAK_TFLOPS_ENV, peak_override_tflops


@dataclass
class Plan:
    """What the report will measure and compare against, settled before measuring."""

    info: DeviceInfo
    dtypes: list[str]
    peaks: dict
    peak_sources: dict
    floors: dict
    spec_bandwidth: float | None
    budget_s: float
    requested_device: str | None
    notes: list[str] = field(default_factory=list)
    load_average: float | None = None
    native: dict = field(default_factory=dict)
    """Per dtype, :func:`accounting.hardware.native.native_matmul`'s answer (judged only when native)."""

    @property
    def settings(self) -> dict:
        return {"device": self.requested_device or str(self.info.device), "dtypes": list(self.dtypes),
                "budget_s": self.budget_s}


def describe_device(info: DeviceInfo) -> dict:
    """The device as plain JSON values (sets become sorted lists, tuples lists)."""
    described = dataclasses.asdict(info)
    if info.cpu_flags is not None:
        described["cpu_flags"] = sorted(info.cpu_flags)
    if info.compute_capability is not None:
        described["compute_capability"] = list(info.compute_capability)
    return described


def peak_source(info: DeviceInfo, dtype: str, chip) -> str:
    """Where a dtype's peak comes from, in words: the override, the table row, or the CPU estimate.

    >>> cpu = DeviceInfo("cpu", "a CPU", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}), cores=4, clock_ghz=3.0)
    >>> peak_source(cpu, "float32", None)
    '4 cores × 3 GHz × 32 FLOP/cycle (AVX2+FMA)'
    >>> peak_source(dataclasses.replace(cpu, clock_ghz=None, clock_source="no cpufreq"), "float32", None)
    'no CPU clock (no cpufreq)'
    >>> peak_source(cpu, "bfloat16", None)
    '4 cores × 3 GHz × 32 FLOP/cycle (AVX2+FMA: the float32 path, bfloat16 is emulated on it)'
    """
    if peak_override_tflops() is not None:
        return f"${PEAK_TFLOPS_ENV}"
    if info.kind == "cuda":
        if chip is None:
            return "not in the peak table"
        return f"table row {chip.row}" + (" (estimated)" if chip.estimated else "")
    path = cpu_matmul_path(dtype, info.cpu_flags or (), vendor=info.vendor)
    if path is None:
        return f"a CPU has no {dtype} units"
    if info.clock_ghz is None:
        return f"no CPU clock ({info.clock_source or 'none found'})"
    name = path.name if path.native else f"{path.name}: the float32 path, {dtype} is emulated on it"
    return f"{info.cores} cores × {info.clock_ghz:g} GHz × {path.flops_per_cycle} FLOP/cycle ({name})"


def mfu_against(info: DeviceInfo, answer: NativeMatmul) -> str | None:
    """What a dtype's MFU is a fraction of, in words, when the dtype is not native (``None`` when it is).

    >>> cpu = DeviceInfo("cpu", "a CPU", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}), cores=4, clock_ghz=3.0)
    >>> mfu_against(cpu, native_matmul(cpu, "bf16"))
    "the float32 path's peak"
    """
    if answer.native:
        return None
    if peak_override_tflops() is not None:
        return f"${PEAK_TFLOPS_ENV}"
    if info.kind == "cpu":
        return "the float32 path's peak"
    return f"the table's {answer.dtype} peak"


def not_native_note(answer: NativeMatmul, info: DeviceInfo) -> str:
    """The note for a configured dtype the report leaves out by default: why, and how to time it anyway.

    >>> cpu = DeviceInfo("cpu", "a CPU", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}))
    >>> print(not_native_note(native_matmul(cpu, "bf16"), cpu))  # doctest: +NORMALIZE_WHITESPACE
    bfloat16 not timed by default: this CPU has no native bfloat16 matmul path (that needs AMX-BF16 or
    AVX512-BF16); torch would emulate it through float32 on AVX2+FMA; time it anyway with --dtypes bfloat16
    (measured and shown, not judged)
    """
    if not answer.runs:
        return f"{answer.dtype} skipped: it cannot run on {info.device}: {answer.reason}"
    return (f"{answer.dtype} not timed by default: {answer.reason}; time it anyway with --dtypes {answer.dtype} "
            "(measured and shown, not judged)")

