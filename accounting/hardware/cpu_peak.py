"""The estimated peak FLOP/s of a CPU: physical cores × clock × FLOPs per cycle per core.

FLOPs per cycle come from the best matmul path the CPU's ISA flags allow for a dtype
(:func:`accounting.hardware.cpu_paths.cpu_matmul_path`); the clock is the one
:func:`accounting.hardware.cpu_clock.cpu_clock_ghz` chooses (measured with every FMA unit busy where it can be).

>>> cpu_peak_flops("float32", flags={"avx512f", "fma"}, cores=2, ghz=2.5, vendor="intel") / 1e9
320.0
"""

from accounting._checks import check_positive, check_positive_size
from accounting.hardware.cpu_clock import cpu_clock_ghz
from accounting.hardware.cpu_facts import cpu_flags, cpu_vendor, physical_cores
from accounting.hardware.cpu_paths import (  # noqa: F401 - the paths' names, imported from here by their users
    CpuPath,
    cpu_flops_per_cycle,
    cpu_matmul_path,
    cpu_native_paths,
)


def cpu_peak_flops(dtype, *, flags=None, cores=None, ghz=None, vendor=None) -> float:
    """Estimated peak FLOP/s of this CPU (or of one described by the arguments) for ``dtype``.

    physical cores × clock × FLOPs/cycle/core (:func:`cpu_flops_per_cycle`). Anything
    not given is detected: flags from ``/proc/cpuinfo`` and torch's CPUID probe, cores
    from the affinity mask, the clock as :func:`accounting.hardware.cpu_clock.cpu_clock_ghz`
    explains (override with ``ghz=`` or ``$ACCOUNTING_CPU_GHZ``).

    >>> cpu_peak_flops("bf16", flags={"amx_bf16", "amx_tile"}, cores=2, ghz=2.7) / 1e12
    5.5296
    """
    if flags is None:
        flags = cpu_flags()
        vendor = vendor if vendor is not None else cpu_vendor()
    per_cycle, _path = cpu_flops_per_cycle(dtype, flags, vendor=vendor)
    cores = physical_cores() if cores is None else check_positive_size(cores, "cores")
    ghz = cpu_clock_ghz()[0] if ghz is None else check_positive(ghz, "ghz")
    return cores * ghz * 1e9 * per_cycle
