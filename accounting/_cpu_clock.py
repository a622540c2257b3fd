"""Measure the CPU core clock by timing a chain of dependent integer multiplies.

Virtual machines often hide the real clock: no ``cpufreq`` in ``/sys`` and a
``cpu MHz`` that is only the nominal TSC rate, while the cores run at turbo. A
64-bit ``imul`` has a latency of 3 cycles on every x86-64 core of the last decade
(Intel since Nehalem, AMD since Zen), so a chain of ``n`` dependent multiplies takes
``3n`` cycles, and cycles over seconds is the clock the core really runs at.

The loop is a few bytes of machine code placed in an executable page (x86-64,
System V calling convention: Linux, macOS); elsewhere, or where the system refuses
executable memory, the measurement is unavailable and returns ``None``.

:func:`measure_cpu_ghz` measures afresh each call (to compare with work done just
before it); :func:`measured_cpu_ghz` measures once per process (for the CPU peak).

>>> ghz = measured_cpu_ghz()
>>> ghz is None or 0.5 < ghz < 10
True
"""

import ctypes
import functools
import mmap
import platform
import sys
import time

IMUL_LATENCY_CYCLES = 3
_MULTIPLIES_PER_ITERATION = 4
_ITERATIONS = 4_000_000  # ~50 M cycles: about 15 ms at 3 GHz
_REPEATS = 5  # take the fastest: the run least disturbed by other work

# uint64_t loop(uint64_t n): rax = 3; do { rax *= rax (x4) } while (--n); return rax
_LOOP_CODE = bytes.fromhex(
    "48c7c003000000"  # mov rax, 3
    + "480fafc0" * _MULTIPLIES_PER_ITERATION  # imul rax, rax   (the dependent chain)
    + "48ffcf"  # dec rdi            (independent of the chain; runs alongside it)
    + "75eb"  # jnz back to the first imul (-21 bytes)
    + "c3"  # ret
)


def _supported() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64") and sys.platform in ("linux", "darwin")


@functools.cache
def _compiled_loop():
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(_LOOP_CODE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    function = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64)(address)
    return page, function  # keep the page alive as long as the function


@functools.cache
def measured_cpu_ghz() -> float | None:
    """:func:`measure_cpu_ghz`, measured on the first call and remembered for the process."""
    return measure_cpu_ghz()


def measure_cpu_ghz() -> float | None:
    """The clock (GHz) of the core this runs on, measured now (about 0.1 s); ``None`` where it cannot be.

    The fastest of a few short runs is taken, so the figure is the turbo clock one busy
    core reaches — an upper bound on the all-core clock under a long matmul.
    """
    if not _supported():
        return None
    try:
        _, loop = _compiled_loop()
    except (OSError, ValueError, AttributeError):
        return None
    loop(_ITERATIONS // 10)  # warm up: let the core leave any idle state
    best = float("inf")
    for _ in range(_REPEATS):
        start = time.perf_counter()
        loop(_ITERATIONS)
        best = min(best, time.perf_counter() - start)
    cycles = _ITERATIONS * _MULTIPLIES_PER_ITERATION * IMUL_LATENCY_CYCLES
    return cycles / best / 1e9
