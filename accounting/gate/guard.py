"""The load guard: was a run measured on a quiet, unthrottled machine?

The gate takes one :func:`accounting.telemetry.snapshot` of the device before each pytest
process it starts and one after (load average, CPU clock — measured where a VM shows only
a nominal one — and on GPUs SM clock, temperature, throttle reasons, other processes'
memory, busy sibling GPUs), and keeps both in the saved run (``"accounting_gate"``). A run
is *disturbed*, and its timings are not used, when

- the device reported a throttle reason before or after it;
- other processes held more than :data:`OTHER_MEMORY_LIMIT_BYTES` on the device (they share its
  SMs, power and memory bandwidth). Other GPUs of the node decide nothing: a sibling shares neither
  this GPU's power limit nor its memory, and on a node shared with other jobs one is always busy;
- other processes used more than :func:`foreign_cpu_limit` CPUs on average during the run
  (5 % of the machine, at least a tenth of one CPU), or the hypervisor stole more than
  :data:`STEAL_LIMIT` of a CPU from it
  (:func:`foreign_cpu`: the machine's busy CPU time from ``/proc/stat`` less the gate's own,
  measured around the run — exact, not a damped average). On a GPU the CPU only launches and waits:
  there others disturb a run only when they left fewer than :data:`GPU_SPARE_CPUS` CPUs idle
  (:func:`cpu_disturbances`), which a node's other jobs do not while it has cores to spare;
- where that CPU time cannot be read (no ``/proc/stat``), the load average not explained
  by the gate's own earlier runs exceeded :data:`FOREIGN_LOAD_PER_CPU` per logical CPU,
  before or after;
- the clock moved by more than :data:`CLOCK_TOLERANCE` between before and after — a clock
  the device *reports* (cpufreq, ``cpu MHz`` on bare metal). A clock
  *measured* by timing FMA chains (a VM that shows only its nominal clock) decides nothing:
  consecutive readings swing by hundreds of MHz while the runs' fastest rounds do not follow
  them (measured figures: docs/benchmarks-and-gate.md, "Load guard"). Such a reading
  catches the host's other tenants sharing a core for a tenth of a second, not the clock
  the benchmark ran at; it is kept in the run, for the record.

A GPU's readings around the run are judged differently (:func:`is_gpu_reading`): a GPU idles at a
few hundred MHz between jobs and rises to its working clock as soon as work starts, and at full
load the power cap holds its clock (:data:`NORMAL_AT_FULL_LOAD`). So on a GPU the clock before
and after decides nothing, nor does the power cap; the clocks, power and throttle reasons
*during each benchmark's timed rounds* do (:mod:`accounting.gate.gpu_rounds`). Other processes on the
device, a machine whose CPUs others kept busy, and any other throttle reason before or after still disturb
the run, and so do new ECC errors and Xid events during it (:mod:`accounting.gate.device_events`).

A benchmark whose every current run was disturbed is *inconclusive*, with the reason named;
a disturbed baseline run is passed over for an older quiet one. A reading the backend
cannot give is ``None`` and decides nothing (the report says which were missing).

The load average is the kernel's exponentially damped count of runnable threads
(``L ← L·e^(−5/60) + n·(1 − e^(−5/60))`` every 5 s), so the gate's own previous runs —
and those of an earlier ``gate`` command or CI step — are still in it a minute later: on a
small machine, back-to-back gated runs keep it high with nothing else running, and a load
rule sets aside most runs of a quiet machine. That is why the CPU-time rule is used where
``/proc/stat`` exists; :func:`own_load` still estimates the gate's own share (average
runnable threads = CPU seconds / wall seconds) for the fallback.

>>> quiet = {"load_average_1m": 0.3, "logical_cpus": 2, "clock_mhz_mean": 3000.0, "throttle_reasons": []}
>>> disturbances(quiet, dict(quiet, clock_mhz_mean=2500.0))
['the clock moved from 3000 to 2500 MHz during the run']
>>> disturbances(dict(quiet, load_average_1m=2.4), quiet)
['load average 2.4 on 2 CPUs before the run (2.4 not from the gate; limit 1)']
>>> idle = dict(quiet, device="cuda:0", clock_source="NVML SM clock", clock_mhz_mean=345.0)
>>> disturbances(idle, dict(idle, clock_mhz_mean=1980.0, throttle_reasons=["sw_power_cap"]))
[]
>>> node = dict(idle, logical_cpus=128, busy_siblings=["GPU 1: 100% utilised, 70.0 GiB used"])
>>> disturbances(node, node, host_cpu={"busy_s": 90.0, "steal_s": 0.0, "own_s": 20.0, "wall_s": 10.0, "cpus": 128})
[]
"""

import math
import time
from dataclasses import dataclass

from accounting.gate.device_events import ECC_KEY, fault_disturbances, open_device_nvml, read_ecc
from accounting.gate.settings import SETTINGS_KEY
from accounting.gate.settings import read as read_settings
from accounting.telemetry.cpu import WINDOW_MEASURED_CLOCK_SOURCES
from accounting.telemetry.gpu_amdsmi import AmdSmiBackend
from accounting.telemetry.gpu_nvml import NvmlBackend
from accounting.telemetry.sampler import snapshot
from accounting.telemetry.validity import POWER_CAP_REASONS

FOREIGN_LOAD_PER_CPU = 0.5
"""Load average from other work, per logical CPU, above which a run is disturbed: on 2 cores,
one other busy thread (load 1) already moves a 2-thread matmul's median by tens of %."""
FOREIGN_CPU_LIMIT = 0.1
"""The fewest CPUs' worth of other processes' work, averaged over a run, that disturbs it. An idle
machine's kernel threads and interrupts stay well below it; one neighbour busy for a tenth of the run
— a `git status`, a compiler, a cron job — already reaches it."""
FOREIGN_CPU_SHARE = 0.05
"""... and on bigger machines this share of their logical CPUs: a 64-core GPU host runs daemons
(monitoring, container runtime) that use a CPU or two without touching the benchmarked device."""
STEAL_LIMIT = 0.05
"""CPUs' worth of time the hypervisor gave other guests during a run, averaged, above which it is disturbed."""
CLOCK_TOLERANCE = 0.05
"""Relative clock change during a run (or against the baseline runs' clock) that disturbs it."""
OTHER_MEMORY_LIMIT_BYTES = 4 * 2**30
"""Memory other processes may hold on the GPU before the run counts as shared (as telemetry's busy siblings)."""
GPU_SPARE_CPUS = 0.5
"""Idle CPUs, averaged over a GPU run, below which other processes may have kept its launches and synchronizes
waiting: a GPU benchmark needs about one CPU, so on a node whose cores others use only in part it is not slowed."""
LOAD_PERIOD_S = 60.0
"""Time constant of the 1-minute load average."""
NORMAL_AT_FULL_LOAD = POWER_CAP_REASONS
"""GPU throttle reasons that are a GPU's normal state under full load: the power cap holds every busy GPU's clock
(NVIDIA's ``sw_power_cap``, AMD's package power tracking: :data:`accounting.telemetry.validity.POWER_CAP_REASONS`)."""
GPU_CLOCK_SOURCES = frozenset({NvmlBackend.clock_source, AmdSmiBackend.clock_source})
"""``clock_source`` of the telemetry's GPU backends."""


@dataclass(frozen=True)
class OwnRun:
    """A pytest process the gate ran: when it ended, how long it took, how many threads it kept busy."""

    ended: float
    """``time.monotonic()`` when it ended."""
    duration_s: float
    busy_threads: float
    """CPU seconds / wall seconds of the process (its children included)."""


def own_load(runs, now: float) -> float:
    """The share of the 1-minute load average that the gate's own earlier ``runs`` still account for.

    A process keeping ``a`` threads busy for ``T`` seconds adds ``a·(1 − e^(−T/60))`` to
    the load average, which then decays as ``e^(−Δt/60)``.

    >>> round(own_load([OwnRun(ended=100.0, duration_s=60.0, busy_threads=2.0)], now=100.0), 3)
    1.264
    """
    total = 0.0
    for run in runs:
        gained = run.busy_threads * (1 - math.exp(-run.duration_s / LOAD_PERIOD_S))
        total += gained * math.exp(-max(0.0, now - run.ended) / LOAD_PERIOD_S)
    return total


def is_gpu_reading(reading: dict | None) -> bool:
    """Whether a load-guard reading is of a GPU (its device, or the source of its clock, says so).

    >>> is_gpu_reading({"device": "cuda:0"}), is_gpu_reading({"clock_source": "NVML SM clock"}), is_gpu_reading({})
    (True, True, False)
    """
    if not reading:
        return False
    return str(reading.get("device") or "").startswith("cuda") or reading.get("clock_source") in GPU_CLOCK_SOURCES


def _reported_clock(reading: dict | None):
    """The reading's mean clock where the device reported it, ``None`` where it was measured or is unknown,
    or is a GPU's (before or after a run a GPU reads its idle clock: see the module docstring)."""
    if reading and (reading.get("clock_source") in WINDOW_MEASURED_CLOCK_SOURCES or is_gpu_reading(reading)):
        return None
    return _number(reading, "clock_mhz_mean")


def _number(reading: dict | None, name: str):
    value = reading.get(name) if reading else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def foreign_cpu_limit(cpus) -> float:
    """CPUs other processes may use during a run on a machine of ``cpus`` logical CPUs.

    >>> foreign_cpu_limit(2), foreign_cpu_limit(64), foreign_cpu_limit(None)
    (0.1, 3.2, 0.1)
    """
    count = cpus if isinstance(cpus, int) and not isinstance(cpus, bool) and cpus > 0 else 1
    return max(FOREIGN_CPU_LIMIT, FOREIGN_CPU_SHARE * count)


def foreign_cpu(host_cpu: dict | None) -> tuple[float, float] | None:
    """Other processes' CPUs and stolen CPUs, averaged over a run, from its ``host_cpu`` record
    (:func:`accounting.gate.measure.host_cpu_record`); ``None`` where it has none.

    >>> foreign_cpu({"busy_s": 21.0, "steal_s": 0.5, "own_s": 19.5, "wall_s": 10.0, "cpus": 2})
    (0.15, 0.05)
    """
    if not isinstance(host_cpu, dict):
        return None
    values = [_number(host_cpu, name) for name in ("busy_s", "steal_s", "own_s", "wall_s")]
    if any(value is None for value in values) or values[3] <= 0:
        return None
    busy, steal, own, wall = values
    return max(0.0, busy - own) / wall, max(0.0, steal) / wall


def cpu_disturbances(host_cpu: dict | None, *, gpu: bool) -> list[str]:
    """Why the machine's CPU time during a run (its ``host_cpu`` record) disturbs it (empty: it does not).

    A CPU benchmark shares the cores: other processes above :func:`foreign_cpu_limit`, or time stolen above
    :data:`STEAL_LIMIT`, disturb it. A GPU benchmark (``gpu``) only needs a CPU to launch and wait: others
    disturb it when they (and the hypervisor) left fewer than :data:`GPU_SPARE_CPUS` CPUs idle beside its own use.

    >>> record = {"busy_s": 22.0, "steal_s": 0.0, "own_s": 12.0, "wall_s": 10.0, "cpus": 2}
    >>> cpu_disturbances(record, gpu=False)
    ['other processes used 1 CPUs during the run (limit 0.1)']
    >>> cpu_disturbances(record, gpu=True)
    ['other processes used 1 CPUs and the run 1.2 during it: 0 of 2 CPUs idle (a GPU run needs 0.5)']
    >>> cpu_disturbances(dict(record, cpus=64), gpu=True)
    []
    """
    cpu_time = foreign_cpu(host_cpu)
    if cpu_time is None:
        return []
    others, stolen = cpu_time
    cpus = host_cpu.get("cpus")
    if gpu:
        count = cpus if isinstance(cpus, int) and not isinstance(cpus, bool) and cpus > 0 else 1
        own = max(0.0, host_cpu["own_s"]) / host_cpu["wall_s"]
        idle = max(0.0, count - own - others - stolen)
        if others + stolen > FOREIGN_CPU_LIMIT and idle < GPU_SPARE_CPUS:
            taken = f"other processes used {others:.2g} CPUs" + (
                f", the hypervisor {stolen:.2g}," if stolen > STEAL_LIMIT else "")
            return [f"{taken} and the run {own:.2g} during it: {idle:.2g} of {count} CPUs idle "
                    f"(a GPU run needs {GPU_SPARE_CPUS:g})"]
        return []
    reasons = []
    limit = foreign_cpu_limit(cpus)
    if others > limit:
        reasons.append(f"other processes used {others:.2g} CPUs during the run (limit {limit:.2g})")
    if stolen > STEAL_LIMIT:
        reasons.append(f"the hypervisor ran other guests for {stolen:.2g} CPUs of the run (limit {STEAL_LIMIT:g})")
    return reasons


def disturbances(before: dict | None, after: dict | None, *, own_before: float = 0.0,
                 own_after: float = 0.0, host_cpu: dict | None = None, load: bool = True) -> list[str]:
    """Why a run between the ``before`` and ``after`` readings (``Summary.to_dict()``) cannot be trusted.

    ``host_cpu``: the machine's CPU time during the run (:func:`foreign_cpu`); without it,
    ``own_before``/``own_after``, the gate's own share of the load average at each reading
    (:func:`own_load`; after the run it includes the run itself), decide the load rule.
    Empty: a quiet run. ``load=False`` leaves the load rules out (other processes' CPU time, the load average):
    where the load falls on both sides of a comparison alike (``gate ab``'s pairs), it is a condition to balance,
    not a reason to set a run aside (:func:`run_load`).

    >>> disturbances(None, None, host_cpu={"busy_s": 30.0, "steal_s": 0.0, "own_s": 20.0, "wall_s": 10.0})
    ['other processes used 1 CPUs during the run (limit 0.1)']
    """
    gpu = is_gpu_reading(before) or is_gpu_reading(after)
    cpu_time = foreign_cpu(host_cpu)
    reasons = cpu_disturbances(host_cpu, gpu=gpu) if cpu_time is not None and load else []
    for when, reading, own in (("before", before, own_before), ("after", after, own_after)):
        if not reading:
            continue
        throttled = [name for name in reading.get("throttle_reasons") or []
                     if not (is_gpu_reading(reading) and name in NORMAL_AT_FULL_LOAD)]
        if throttled:
            reasons.append(f"throttled {when} the run ({', '.join(throttled)})")
        memory = _number(reading, "other_process_memory_bytes")
        if memory is not None and memory > OTHER_MEMORY_LIMIT_BYTES:
            reasons.append(f"other processes held {memory / 2**30:.1f} GiB on the device {when} the run")
        average = _number(reading, "load_average_1m")
        cpus = _number(reading, "logical_cpus") or 1
        if average is not None and cpu_time is None and load:  # the load rule is the fallback, before and after
            foreign, load_now = average - own, average
            if gpu and foreign > FOREIGN_CPU_LIMIT and cpus - load_now < GPU_SPARE_CPUS:
                reasons.append(f"load average {load_now:.2g} on {cpus:g} CPUs {when} the run ({foreign:.2g} not from "
                               f"the gate): fewer than {GPU_SPARE_CPUS:g} CPUs idle for the GPU's launches")
            elif not gpu and foreign > FOREIGN_LOAD_PER_CPU * cpus:
                reasons.append(f"load average {load_now:.2g} on {cpus:g} CPUs {when} the run ({foreign:.2g} not from "
                               f"the gate; limit {FOREIGN_LOAD_PER_CPU * cpus:g})")
    first, last = _reported_clock(before), _reported_clock(after)
    if first and last and abs(last / first - 1) > CLOCK_TOLERANCE:
        reasons.append(f"the clock moved from {first:.0f} to {last:.0f} MHz during the run")
    return reasons


def run_clock_mhz(guard: dict | None) -> float | None:
    """The clock a run was measured at: the mean of its before and after readings (``None`` if unknown, only
    measured, or a GPU's: a GPU's clock is read during each benchmark's rounds, see the module docstring)."""
    if not guard:
        return None
    clocks = [_reported_clock(guard.get(when)) for when in ("before", "after")]
    clocks = [clock for clock in clocks if clock]
    return sum(clocks) / len(clocks) if clocks else None


def clock_mismatch(current_mhz: float | None, baseline_mhz: float | None) -> str | None:
    """Why a run's clock makes it incomparable with the baseline's (``None``: comparable or unknown).

    >>> clock_mismatch(2800.0, 3200.0)
    'measured at 2800 MHz, the baseline runs at 3200 MHz (-12 %)'
    """
    if not current_mhz or not baseline_mhz or abs(current_mhz / baseline_mhz - 1) <= CLOCK_TOLERANCE:
        return None
    change = (current_mhz / baseline_mhz - 1) * 100
    return f"measured at {current_mhz:.0f} MHz, the baseline runs at {baseline_mhz:.0f} MHz ({change:+.0f} %)"


def read(device: str) -> dict:
    """One telemetry reading of ``device`` now, as plain JSON values (stored with the run); on an NVIDIA GPU
    with its settings that set its speed (power limit, application clocks: :mod:`accounting.gate.settings`) and its
    ECC counts (:mod:`accounting.gate.device_events`)."""
    reading = snapshot(device).to_dict()
    if str(device).startswith("cuda"):
        backend = open_device_nvml(device)  # one NVML session for both (None: not an NVIDIA GPU, or no NVML)
        try:
            gpu = None if backend is None else backend.device_handle()  # a MIG slice's GPU: settings and ECC are its
            reading[SETTINGS_KEY] = None if backend is None else read_settings(backend.nvml, gpu)
            reading[ECC_KEY] = None if backend is None else read_ecc(backend.nvml, gpu)
        finally:
            if backend is not None:
                backend.close()
    return reading


def now() -> float:
    """The clock :class:`OwnRun` times are on."""
    return time.monotonic()


def recorded_disturbances(guard: dict | None, *, load: bool = True) -> list[str]:
    """:func:`disturbances` of a saved run's ``"accounting_gate"`` record (empty when it has none); ``load=False``:
    the load rules left out.

    >>> recorded_disturbances({"before": {"throttle_reasons": ["hw_slowdown"]}, "after": None})
    ['throttled before the run (hw_slowdown)']
    """
    if not guard:
        return []
    return disturbances(guard.get("before"), guard.get("after"), own_before=guard.get("own_before") or 0.0,
                        own_after=guard.get("own_after") or 0.0, host_cpu=guard.get("host_cpu"),
                        load=load) + fault_disturbances(guard)


def run_load(guard: dict | None) -> float | None:
    """Other processes' CPUs, averaged over a saved run (its ``host_cpu`` record: :func:`foreign_cpu`, the time
    stolen by the hypervisor included); where the record has none, the load average not from the gate, the larger
    of before and after; ``None`` where neither was read.

    >>> run_load({"host_cpu": {"busy_s": 16.0, "steal_s": 0.0, "own_s": 11.0, "wall_s": 10.0, "cpus": 2}})
    0.5
    >>> run_load({"before": {"load_average_1m": 1.4}, "after": {"load_average_1m": 1.9}, "own_after": 0.9})
    1.4
    """
    if not guard:
        return None
    cpu_time = foreign_cpu(guard.get("host_cpu"))
    if cpu_time is not None:
        return round(sum(cpu_time), 3)
    readings = [(_number(guard.get(when), "load_average_1m"), guard.get(f"own_{when}") or 0.0)
                for when in ("before", "after")]
    excess = [max(0.0, average - own) for average, own in readings if average is not None]
    return round(max(excess), 3) if excess else None
