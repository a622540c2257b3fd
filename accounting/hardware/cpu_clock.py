"""The CPU core clock the peak is computed with (:func:`cpu_clock_ghz`), and the clock under scalar load.

Virtual machines often hide the real clock: no ``cpufreq`` in ``/sys`` and a
``cpu MHz`` that is only the nominal TSC rate, while the cores run at turbo. And
cores lower their clock under wide-vector load, so the clock a peak FLOP/s figure
needs is the one the cores hold while their FMA units are busy: measured in
:mod:`accounting.hardware.vector_clock` (its names are re-exported here).

- Scalar (:func:`measure_cpu_ghz`): a 64-bit ``imul`` has a latency of 3 cycles on
  every x86-64 core of the last decade (Intel since Nehalem, AMD since Zen), so a chain
  of ``n`` dependent multiplies takes ``3n`` cycles; cycles over seconds is the clock.
  The loop is a few bytes of machine code in an executable page, timed by the thread's own
  CPU time, the fastest of many kept (as the vector loops are).

:func:`measure_cpu_ghz` measures afresh each call (to compare with work done just
before it); :func:`measured_cpu_ghz` measures once per process.

>>> ghz = measured_cpu_ghz()
>>> ghz is None or 0.5 < ghz < 10
True
"""

import functools
import os
import re
import time
from pathlib import Path

from accounting._checks import positive_number_from_text
from accounting.errors import AccountingError
from accounting.hardware.cpu_facts import cpuinfo_blocks, read_text
from accounting.hardware.environment import CPU_GHZ_ENV
from accounting.hardware.vector_clock import (  # noqa: F401 - the vector clock's names, imported from here by users
    VectorClock,
    executable_loop,
    fma_latency_cycles,
    full_load_clock_ghz,
    measure_fma_ceiling,
    measure_vector_clock,
    measured_vector_clock,
    supported_platform,
    vector_clock_supported,
    vector_isa,
)

SCALAR_CLOCK_SOURCE = "imul-chain measurement"
"""Where the peak's clock came from when it was measured under scalar load (:func:`measure_cpu_ghz`)."""
VECTOR_CLOCK_SOURCE = "FMA measurement, all cores at full FMA load"
"""Where the peak's clock came from when it was measured under vector FMA load (:func:`measure_vector_clock`)."""
MEASURED_CLOCK_SOURCES = (VECTOR_CLOCK_SOURCE, SCALAR_CLOCK_SOURCE)
"""Clock sources that are measurements (they jitter by a few percent from run to run)."""

_CPUFREQ_MAX = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
_KHZ_PER_GHZ = 1e6
_MHZ_PER_GHZ = 1e3

IMUL_LATENCY_CYCLES = 3
_MULTIPLIES_PER_ITERATION = 4
_ITERATIONS = 250_000  # 3 M cycles: about 1 ms at 3 GHz, shorter than a scheduler time slice
_REPEATS = 25  # take the fastest: the run least disturbed by other work

# uint64_t loop(uint64_t n): rax = 3; do { rax *= rax (x4) } while (--n); return rax
_LOOP_CODE = bytes.fromhex(
    "48c7c003000000"  # mov rax, 3
    + "480fafc0" * _MULTIPLIES_PER_ITERATION  # imul rax, rax   (the dependent chain)
    + "48ffcf"  # dec rdi            (independent of the chain; runs alongside it)
    + "75eb"  # jnz back to the first imul (-21 bytes)
    + "c3"  # ret
)


@functools.cache
def measured_cpu_ghz() -> float | None:
    """:func:`measure_cpu_ghz`, measured on the first call and remembered for the process."""
    return measure_cpu_ghz()


def measure_cpu_ghz() -> float | None:
    """The clock (GHz) of the core this runs on, measured now (about 0.1 s); ``None`` where it cannot be.

    The fastest of a few short runs is taken, so the figure is the turbo clock one busy
    core reaches — an upper bound on the all-core clock under a long matmul.
    """
    if not supported_platform():
        return None
    try:
        _, loop = executable_loop(_LOOP_CODE)
    except (OSError, ValueError, AttributeError):
        return None
    loop(_ITERATIONS * 4, None)  # warm up: let the core leave any idle state
    best = float("inf")
    for _ in range(_REPEATS):
        start = time.thread_time()  # this thread's CPU time: a run preempted by other work is not billed for it
        loop(_ITERATIONS, None)
        best = min(best, time.thread_time() - start)
    cycles = _ITERATIONS * _MULTIPLIES_PER_ITERATION * IMUL_LATENCY_CYCLES
    return cycles / best / 1e9


# ---- the clock the CPU peak is computed with ------------------------------------------------

_MODEL_GHZ = re.compile(r"@\s*([0-9.]+)\s*GHz", re.IGNORECASE)


def cpu_clock_ghz() -> tuple[float, str]:
    """The clock (GHz) the CPU peak is computed with, and where it came from.

    In order of preference:

    1. ``$ACCOUNTING_CPU_GHZ`` — a user who knows the sustained all-core clock says so.
    2. Measured with every FMA unit busy (x86-64 with AVX2+FMA or AVX-512, a CPU generation
       whose FMA latency is known): the mean clock of every physical core while all of
       them run FMAs on the widest registers the CPU has (:func:`measure_vector_clock`).
       Cores lower their clock under wide-vector load, the more the busier their units,
       so this is the clock a float32 peak holds at; a scalar clock, or one measured with
       the units partly busy, overstates the peak (measured: docs/peaks-and-cpu-estimates.md).
       (bf16/fp16 peaks on AMX hosts use it too; their tile units may run at yet another clock.)
    3. ``cpufreq/cpuinfo_max_freq`` — the maximum (turbo) clock. It is an upper bound
       on the sustained all-core clock, so the peak may be high and MFU low, never
       the reverse: MFU above 1 would be worse than a pessimistic MFU.
    4. Measured under scalar load (x86-64): the clock one busy core runs at, from the
       latency of a chain of dependent multiplies (:func:`measure_cpu_ghz`). VMs
       hide cpufreq and report only the nominal clock, while the cores run at turbo;
       a peak from the nominal clock can make MFU read above 1. Single-core turbo is
       again an upper bound on the all-core clock.
    5. ``@ 2.70GHz`` in the model name — the base clock Intel prints there.
    6. The highest ``cpu MHz`` in ``/proc/cpuinfo`` — the current clock on bare metal;
       in a VM, the nominal TSC clock the hypervisor reports. Turbo can run above
       both 5 and 6, so there MFU may read high; set ``$ACCOUNTING_CPU_GHZ`` (or pass
       ``ghz=``) if you know better.

    The scalar measurement stays beside the chosen clock in :class:`DeviceInfo`
    (``scalar_clock_ghz``) and in the report.
    """
    override = os.environ.get(CPU_GHZ_ENV)
    if override:
        return positive_number_from_text(override, f"${CPU_GHZ_ENV}", "GHz"), f"${CPU_GHZ_ENV}"
    vector = measured_vector_clock()
    if vector is not None:
        return round(vector.ghz, 2), VECTOR_CLOCK_SOURCE
    text = read_text(_CPUFREQ_MAX)
    if text and text.strip().isdigit():
        return int(text) / _KHZ_PER_GHZ, "cpufreq cpuinfo_max_freq"
    measured = measured_cpu_ghz()
    if measured is not None:
        return round(measured, 2), SCALAR_CLOCK_SOURCE
    blocks = cpuinfo_blocks()
    match = _MODEL_GHZ.search(blocks[0].get("model name", "")) if blocks else None
    if match:
        return float(match.group(1)), "model name"
    mhz = [float(block["cpu MHz"]) for block in blocks if block.get("cpu MHz")]
    if mhz:
        return max(mhz) / _MHZ_PER_GHZ, "/proc/cpuinfo cpu MHz"
    raise AccountingError(
        f"cannot find this CPU's clock (no cpufreq, no GHz in the model name, no cpu MHz); set ${CPU_GHZ_ENV}"
    )

