"""The CPU clock with every FMA unit busy, measured: the clock a float32 matmul holds, for the CPU peak.

Cores lower their clock under wide-vector load, the more the busier their units, so the clock a
peak FLOP/s figure needs is the one the cores hold while all their FMA units work.
:func:`measure_vector_clock` measures it on every physical core at once, with ``vfmadd231ps`` on
the widest registers the CPU has (zmm with AVX-512F, else ymm with AVX2+FMA; flags are checked
first, so no instruction the CPU lacks is ever run). Two loops per core, run in turn:

- chains: two dependent FMA chains set the pace (:func:`fma_latency_cycles` cycles per
  step) while independent FMAs keep the units partly busy: cycles over seconds is the clock
  at that load (*light load*);
- streams: twelve independent FMA streams keep every unit busy: the FLOP/s the units really
  deliver (the core's FMA ceiling), over the FLOPs per cycle of its units
  (:func:`accounting.hardware.cpu_paths.cpu_flops_per_cycle`), is the clock at full load.

A core's clock is the lower of the two (:func:`full_load_clock_ghz`). Why both: a clock is
lower with every unit busy on some CPUs and not on others, and nothing tells which in advance.
On a 2-vCPU Xeon guest (Emerald Rapids, AVX-512) the chains read 2.8–3.0 GHz while the
streams ran at 2.6 GHz: a peak from the chains alone was 9–15 % above what the FMA units
deliver. On AMD Zen 3 and Zen 5 guests the two agree within 2 %. The chains still matter:
where the table's FLOPs per cycle undercounts a core's units, the streams would read a
clock above the real one, and the chains cap it. :func:`measure_fma_ceiling` is the streams
alone, summed over the cores.

The loops are a few bytes of machine code placed in an executable page (x86-64, System V
calling convention: Linux, macOS); elsewhere, or where the system refuses executable memory, a
measurement is unavailable and returns ``None``. Every timed run is about a millisecond, shorter
than a scheduler time slice, timed by the thread's own CPU time (``time.thread_time``: a run
preempted by another process is not billed for the time it waited), and the fastest of many is
kept. :func:`measured_vector_clock` measures once per process (for the CPU peak).

>>> vector = measured_vector_clock()
>>> vector is None or (vector.isa in ("AVX-512", "AVX2+FMA") and 0.5 < vector.ghz < 10)
True
"""

import ctypes
import functools
import math
import mmap
import os
import platform
import sys
import threading
import time
from dataclasses import dataclass

from accounting._checks import check_positive, check_positive_size
from accounting.hardware.cpu_facts import cpu_flags, cpu_vendor, cpuinfo_blocks
from accounting.hardware.cpu_paths import cpu_flops_per_cycle


def supported_platform() -> bool:
    """x86-64 with the System V calling convention (Linux, macOS): where the measuring loops (these and the
    scalar clock's) can run."""
    return platform.machine().lower() in ("x86_64", "amd64") and sys.platform in ("linux", "darwin")

# vfmadd231ps latency in cycles, by CPU generation (Agner Fog, "Instruction tables", and
# uops.info): 5 on Intel Haswell/Broadwell and AMD Zen 1/2 (family 17h); 4 on Intel
# Skylake and later and on AMD Zen 3/4/5 (families 19h, 1Ah). An unknown CPU has no entry.
_AMD_FMA_LATENCY = {0x17: 5, 0x19: 4, 0x1A: 4}
_INTEL_FMA_LATENCY_5_MODELS = frozenset({0x3C, 0x3F, 0x45, 0x46, 0x3D, 0x47, 0x4F, 0x56})  # Haswell, Broadwell
_INTEL_FMA_LATENCY = 4

_VECTOR_ITERATIONS = 500_000  # chains: 2–2.5 M cycles per run (about 0.7 ms at 3 GHz)
_STREAM_ITERATIONS = _VECTOR_ITERATIONS // 2  # streams: 12 FMAs per iteration at 2 a cycle, ~6 cycles each
_VECTOR_REPEATS = 25
_VECTOR_BATCHES = 3
"""The runs come in this many batches, a short gap apart, and each core keeps its fastest run of all:
one batch can fall wholly inside a burst of work on the host (a busy sibling hyperthread slows a
vCPU without preempting it, so CPU time cannot see it), and the next one outside it (measured
figures: docs/peaks-and-cpu-estimates.md)."""
_BATCH_GAP_S = 0.02
_VECTOR_WARM_UP_RUNS = 10  # ~7 ms of FMAs first: the core settles into its vector-load clock
_CONSTANTS = (ctypes.c_float * 32)(*([1e-3] * 32))  # the multiplicands: every FMA adds 1e-6 to an accumulator


@dataclass(frozen=True)
class _VectorCode:
    """Machine code of one ISA's loops: ``uint64_t loop(uint64_t n, const float *constants)``."""

    isa: str
    lanes: int  # float32 lanes per register
    latency_prologue: str
    latency_body: str  # per iteration: two dependent FMA chains + independent FMAs
    chained_fmas: int
    stream_prologue: str
    stream_body: str  # per iteration: one FMA on each of 12 independent accumulators
    stream_fmas: int = 12


# Assembled with GNU as (Intel syntax) and read back with objdump; the loop is
# prologue, body, then "dec rdi; jnz body" and "vzeroupper; ret" (see _assemble).
_AVX2 = _VectorCode(
    isa="AVX2+FMA",
    lanes=8,
    latency_prologue=(
        "c57c1026"  # vmovups ymm12, [rsi]
        "c57c106e20"  # vmovups ymm13, [rsi+0x20]
        "c5fc57c0"  # vxorps ymm0, ymm0, ymm0
        "c5f457c9"  # vxorps ymm1, ymm1, ymm1
        "c4410457ff"  # vxorps ymm15, ymm15, ymm15
    ),
    latency_body=(
        "c4c21db8c5"  # vfmadd231ps ymm0, ymm12, ymm13   (chain 1)
        "c4c21db8cd"  # vfmadd231ps ymm1, ymm12, ymm13   (chain 2)
        "c57c29fa"  # vmovaps ymm2, ymm15               (eliminated at rename: breaks the dependency)
        "c4c21db8d5"  # vfmadd231ps ymm2, ymm12, ymm13   (independent)
        "c57c29fb"  # vmovaps ymm3, ymm15
        "c4c21db8dd"  # vfmadd231ps ymm3, ymm12, ymm13
        "c57c29fc"  # vmovaps ymm4, ymm15
        "c4c21db8e5"  # vfmadd231ps ymm4, ymm12, ymm13
        "c57c29fd"  # vmovaps ymm5, ymm15
        "c4c21db8ed"  # vfmadd231ps ymm5, ymm12, ymm13
    ),
    chained_fmas=6,  # 6 FMAs per 4-5 cycles: 60-75 % of two FMA units
    stream_prologue=(
        "c57c1026"  # vmovups ymm12, [rsi]
        "c57c106e20"  # vmovups ymm13, [rsi+0x20]
        "c5fc57c0" "c5f457c9" "c5ec57d2" "c5e457db"  # vxorps ymm0..ymm3
        "c5dc57e4" "c5d457ed" "c5cc57f6" "c5c457ff"  # vxorps ymm4..ymm7
        "c4413c57c0" "c4413457c9" "c4412c57d2" "c4412457db"  # vxorps ymm8..ymm11
    ),
    stream_body=(
        "c4c21db8c5" "c4c21db8cd" "c4c21db8d5" "c4c21db8dd"  # vfmadd231ps ymm0..ymm3, ymm12, ymm13
        "c4c21db8e5" "c4c21db8ed" "c4c21db8f5" "c4c21db8fd"  # vfmadd231ps ymm4..ymm7, ymm12, ymm13
        "c4421db8c5" "c4421db8cd" "c4421db8d5" "c4421db8dd"  # vfmadd231ps ymm8..ymm11, ymm12, ymm13
    ),
)
_AVX512 = _VectorCode(
    isa="AVX-512",
    lanes=16,
    latency_prologue=(
        "62717c481026"  # vmovups zmm12, [rsi]
        "62717c48106e01"  # vmovups zmm13, [rsi+0x40]
        "62f17d48efc0"  # vpxord zmm0, zmm0, zmm0
        "62f17548efc9"  # vpxord zmm1, zmm1, zmm1
        "62510548efff"  # vpxord zmm15, zmm15, zmm15
    ),
    latency_body=(
        "62d21d48b8c5"  # vfmadd231ps zmm0, zmm12, zmm13   (chain 1)
        "62d21d48b8cd"  # vfmadd231ps zmm1, zmm12, zmm13   (chain 2)
        "62d17c4828d7"  # vmovaps zmm2, zmm15
        "62d21d48b8d5"  # vfmadd231ps zmm2, zmm12, zmm13   (independent)
    ),
    chained_fmas=3,  # 3 per 4 cycles: 75 % of one 512-bit unit (Zen 4, Xeon Silver), 38 % of two
    stream_prologue=(
        "62717c481026"  # vmovups zmm12, [rsi]
        "62717c48106e01"  # vmovups zmm13, [rsi+0x40]
        "62f17d48efc0" "62f17548efc9" "62f16d48efd2" "62f16548efdb"  # vpxord zmm0..zmm3
        "62f15d48efe4" "62f15548efed" "62f14d48eff6" "62f14548efff"  # vpxord zmm4..zmm7
        "62513d48efc0" "62513548efc9" "62512d48efd2" "62512548efdb"  # vpxord zmm8..zmm11
    ),
    stream_body=(
        "62d21d48b8c5" "62d21d48b8cd" "62d21d48b8d5" "62d21d48b8dd"  # vfmadd231ps zmm0..zmm3, zmm12, zmm13
        "62d21d48b8e5" "62d21d48b8ed" "62d21d48b8f5" "62d21d48b8fd"  # vfmadd231ps zmm4..zmm7, zmm12, zmm13
        "62521d48b8c5" "62521d48b8cd" "62521d48b8d5" "62521d48b8dd"  # vfmadd231ps zmm8..zmm11, zmm12, zmm13
    ),
)


def _assemble(prologue: str, body: str) -> bytes:
    """``prologue; body: <body>; dec rdi; jnz body; vzeroupper; ret`` as bytes."""
    body_bytes = bytes.fromhex(body)
    jump = -(len(body_bytes) + 3 + 2)  # back over the body, dec rdi (3 bytes) and jnz rel8 (2 bytes)
    if jump < -128:
        raise ValueError(f"loop body of {len(body_bytes)} bytes is too long for a rel8 jump")
    return bytes.fromhex(prologue) + body_bytes + bytes.fromhex("48ffcf") + bytes([0x75, jump & 0xFF]) + bytes.fromhex(
        "c5f877c3")


def vector_isa(flags) -> str | None:
    """The widest FMA ISA these ``/proc/cpuinfo`` flags allow: ``"AVX-512"``, ``"AVX2+FMA"`` or ``None``.

    >>> vector_isa({"avx", "avx2", "fma", "avx512f"}), vector_isa({"avx", "avx2", "fma"}), vector_isa({"avx", "avx2"})
    ('AVX-512', 'AVX2+FMA', None)
    """
    flags = set(flags)
    if "avx512f" in flags:
        return _AVX512.isa
    if {"avx", "fma"} <= flags:
        return _AVX2.isa
    return None


def fma_latency_cycles(vendor: str | None, family: int | None, model: int | None) -> int | None:
    """Cycles of one ``vfmadd231ps`` step in a dependent chain on this CPU generation; ``None`` if unknown.

    >>> fma_latency_cycles("amd", 0x19, 0x01), fma_latency_cycles("amd", 0x17, 0x31)   # Zen 3, Zen 2
    (4, 5)
    >>> fma_latency_cycles("intel", 6, 0x3F), fma_latency_cycles("intel", 6, 0x8F)    # Haswell, Sapphire Rapids
    (5, 4)
    >>> print(fma_latency_cycles(None, 6, 0x8F))
    None
    """
    if vendor == "amd":
        return _AMD_FMA_LATENCY.get(family)
    if vendor == "intel" and family == 6 and model is not None:
        return 5 if model in _INTEL_FMA_LATENCY_5_MODELS else _INTEL_FMA_LATENCY
    return None


@functools.cache
def executable_loop(code: bytes):
    """``(page, function)``: machine code placed in an executable page, callable as
    ``uint64_t loop(uint64_t n, const void *data)`` (a loop that takes only ``n`` ignores the second argument);
    the page is returned to be kept alive as long as the function."""
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    function = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p)(address)
    return page, function


def _cpu_facts():
    """``(flags, vendor, family, model, one logical CPU per physical core)`` of this machine."""
    blocks = cpuinfo_blocks()
    first = blocks[0] if blocks else {}

    def number(key):
        text = first.get(key, "")
        return int(text) if text.isdigit() else None

    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    per_core = {}
    for block in blocks:
        cpu = int(block.get("processor", -1))
        if cpu in allowed:
            per_core.setdefault((block.get("physical id", "0"), block.get("core id", str(cpu))), cpu)
    cpus = sorted(per_core.values()) or sorted(allowed)
    return cpu_flags(), cpu_vendor(), number("cpu family"), number("model"), cpus


def _fastest_runs(loop, iterations: int, cpus: list[int], repeats: int = _VECTOR_REPEATS) -> list[float]:
    """Run ``loop(iterations)`` on every CPU in ``cpus`` at once (one pinned thread each); the fastest seconds per CPU."""
    start = threading.Barrier(len(cpus))
    fastest = [float("inf")] * len(cpus)
    errors = []

    def work(position: int, cpu: int):
        try:
            if hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(0, {cpu})  # this thread only (Linux); the thread ends with the measurement
            constants = ctypes.addressof(_CONSTANTS)
            for _ in range(_VECTOR_WARM_UP_RUNS):
                loop(iterations, constants)
            for _ in range(repeats):
                start.wait()  # every core starts each run together: the all-core clock under load
                began = time.thread_time()  # CPU time of this thread: time spent preempted is not counted
                loop(iterations, constants)  # ctypes releases the GIL: the threads run in parallel
                fastest[position] = min(fastest[position], time.thread_time() - began)
        except Exception as error:  # noqa: BLE001 - reported below, after every thread ends
            errors.append(error)
            start.abort()

    threads = [threading.Thread(target=work, args=(i, cpu), daemon=True) for i, cpu in enumerate(cpus)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise OSError(f"vector clock measurement failed: {errors[0]!r}")
    return fastest


@dataclass(frozen=True)
class VectorClock:
    """The clock every core held with its FMA units busy, measured; ``ghz`` is the mean over ``per_core_ghz``.

    ``light_load_ghz`` (the chains' clock) and ``ceiling_flops`` (the streams' FLOP/s) are each core's two
    measurements behind its clock (:func:`full_load_clock_ghz`); empty where only a clock was given.
    """

    ghz: float
    per_core_ghz: tuple[float, ...]
    isa: str
    latency_cycles: int
    light_load_ghz: tuple[float, ...] = ()
    ceiling_flops: tuple[float, ...] = ()

    @property
    def source(self) -> str:
        """How it was measured, for a report's clock line.

        >>> VectorClock(3.2, (3.2, 3.2), "AVX2+FMA", 4).source
        'AVX2+FMA FMA measurement on 2 cores at full load'
        """
        return f"{self.isa} FMA measurement on {len(self.per_core_ghz)} cores at full load"


def full_load_clock_ghz(light_load_ghz: float, ceiling_flops: float, flops_per_cycle: int) -> float:
    """The clock (GHz) of one core with every FMA unit busy: its FMA ceiling over its units' FLOPs per cycle,
    capped by the clock its FMA chains measured under lighter load.

    ``light_load_ghz``: the chains' clock; ``ceiling_flops``: the core's measured float32 FMA FLOP/s;
    ``flops_per_cycle``: float32 FLOPs per cycle of its units (:func:`cpu_flops_per_cycle`). A clock never
    rises as the load does, so where the ceiling implies more than the chains' clock, the table
    undercounts the units (or noise): the chains' clock is kept, and the peak is low, never high.

    >>> full_load_clock_ghz(2.9, 166.5e9, 64)   # a Xeon guest: 64 FLOPs a cycle at 2.6 GHz, not 2.9
    2.6015625
    >>> full_load_clock_ghz(4.30, 280e9, 64)    # a Zen 5 guest: the two agree; the lower is kept
    4.3
    """
    check_positive(light_load_ghz, "light_load_ghz")
    check_positive(ceiling_flops, "ceiling_flops")
    check_positive_size(flops_per_cycle, "flops_per_cycle")
    return min(light_load_ghz, ceiling_flops / flops_per_cycle / 1e9)


def _vector_code(flags) -> _VectorCode | None:
    isa = vector_isa(flags)
    return {_AVX512.isa: _AVX512, _AVX2.isa: _AVX2}.get(isa)


def vector_clock_supported(*, facts=None) -> bool:
    """Whether :func:`measure_vector_clock` can measure here (platform, ISA and FMA latency known); runs nothing."""
    flags, vendor, family, model, _cpus = facts if facts is not None else _cpu_facts()
    return supported_platform() and _vector_code(flags) is not None and fma_latency_cycles(vendor, family, model) is not None


def measure_vector_clock(*, facts=None, repeats: int = _VECTOR_REPEATS) -> VectorClock | None:
    """The all-core clock with every FMA unit busy, measured now (about 0.3 s); ``None`` where it cannot be.

    ``facts`` (flags, vendor, family, model, cpus) defaults to this machine's. Each core runs the
    chains and the streams (module docstring) in ``_VECTOR_BATCHES`` batches of ``repeats`` runs
    each, and keeps its fastest run of each loop; its clock is :func:`full_load_clock_ghz` of the two.
    ``None`` without an x86-64 System V platform, without AVX2+FMA or AVX-512, for a CPU whose
    FMA latency is not known, or where executable memory is refused.
    """
    flags, vendor, family, model, cpus = facts if facts is not None else _cpu_facts()
    code = _vector_code(flags)
    latency = fma_latency_cycles(vendor, family, model)
    if not supported_platform() or code is None or latency is None:
        return None
    per_cycle, _path = cpu_flops_per_cycle("float32", flags, vendor=vendor)
    try:
        _, chains = executable_loop(_assemble(code.latency_prologue, code.latency_body))
        _, streams = executable_loop(_assemble(code.stream_prologue, code.stream_body))
        chain_seconds = [math.inf] * len(cpus)
        stream_seconds = [math.inf] * len(cpus)
        for batch in range(_VECTOR_BATCHES):
            if batch:
                time.sleep(_BATCH_GAP_S)
            chain_seconds = list(map(min, chain_seconds, _fastest_runs(chains, _VECTOR_ITERATIONS, cpus, repeats)))
            stream_seconds = list(map(min, stream_seconds, _fastest_runs(streams, _STREAM_ITERATIONS, cpus, repeats)))
    except (OSError, ValueError, AttributeError):
        return None
    light = tuple(_VECTOR_ITERATIONS * latency / best / 1e9 for best in chain_seconds)
    ceiling = tuple(_stream_flops(code) / best for best in stream_seconds)
    per_core = tuple(full_load_clock_ghz(ghz, flops, per_cycle) for ghz, flops in zip(light, ceiling))
    return VectorClock(ghz=sum(per_core) / len(per_core), per_core_ghz=per_core, isa=code.isa, latency_cycles=latency,
                       light_load_ghz=light, ceiling_flops=ceiling)


def _stream_flops(code: _VectorCode) -> int:
    """float32 FLOPs of one run of the streams: iterations × FMAs × lanes × 2 (a multiply-add is 2 FLOPs)."""
    return _STREAM_ITERATIONS * code.stream_fmas * code.lanes * 2


@functools.cache
def measured_vector_clock() -> VectorClock | None:
    """:func:`measure_vector_clock`, measured on the first call and remembered for the process."""
    return measure_vector_clock()


def measure_fma_ceiling(*, facts=None) -> float | None:
    """float32 FLOP/s of independent FMA streams on every physical core at once, measured now; ``None`` where it cannot be.

    Twelve independent accumulators per core cover the FMA latency × throughput of every
    core listed in :func:`fma_latency_cycles` (at most 5 × 2 = 10 in flight), so the
    units, not the dependencies, set the pace: this is the FMA rate the hardware delivers.
    """
    flags, _vendor, _family, _model, cpus = facts if facts is not None else _cpu_facts()
    code = _vector_code(flags)
    if not supported_platform() or code is None:
        return None
    try:
        _, loop = executable_loop(_assemble(code.stream_prologue, code.stream_body))
        seconds = _fastest_runs(loop, _STREAM_ITERATIONS, cpus)
    except (OSError, ValueError, AttributeError):
        return None
    return sum(_stream_flops(code) / best for best in seconds)
