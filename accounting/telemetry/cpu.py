"""The CPU backend of :mod:`accounting.telemetry`: what Linux exposes about the cores this process runs on.

- Clock: the mean ``cpufreq/scaling_cur_freq`` of the CPUs in the affinity mask; on
  bare metal without cpufreq, their ``cpu MHz`` in ``/proc/cpuinfo``; in a VM (the
  ``hypervisor`` flag, no cpufreq) that line is only the nominal TSC clock, so the
  clock is measured under vector load on every core at the window's edges
  (:func:`accounting.hardware.cpu_clock.measure_vector_clock`; the scalar imul chain where
  the CPU has no AVX2+FMA).
- Energy and power: the RAPL package counters ``/sys/class/powercap/intel-rapl:N/energy_uj``
  (AMD exposes its own under the same name), where readable (root-only since Linux
  5.10), with wrap-around at ``max_energy_range_uj`` undone; power is the energy of
  each interval over its length.
- Temperature: ``hwmon`` sensors of the CPU driver (``coretemp``, ``k10temp``, ``zenpower``).
- Throttling: a rise in ``thermal_throttle/*_throttle_count`` (Intel) during the window.
- Host CPU time: the whole machine's busy and stolen CPU seconds from ``/proc/stat``
  (:func:`read_host_cpu_times`), so a caller can tell its own work from everyone else's.
- Neighbours on this process's cores: the ``cpuN`` lines of ``/proc/stat`` for the CPUs in the
  affinity mask (:func:`read_core_times`), less this process's own CPU time, over a window
  (:class:`ForeignCpuWindow`): the share of *these* cores other processes took. A rank pinned
  to one core of a busy machine reads its own neighbour, not the machine's load average.

Paths are module constants so tests can point them at a fake tree.

>>> backend = CpuBackend(measure_clock=False)
>>> backend.read(edge=False).time_s > 0
True
"""

import os
import time
from dataclasses import dataclass
from pathlib import Path

from accounting.hardware import cpu_clock
from accounting.hardware.cpu_facts import parse_cpuinfo, read_text
from accounting.telemetry.readings import CPU_INTERVAL_S, Reading

SYS_CPU = Path("/sys/devices/system/cpu")
PROC_STAT = Path("/proc/stat")
PROC_CPUINFO = Path("/proc/cpuinfo")
POWERCAP = Path("/sys/class/powercap")
HWMON = Path("/sys/class/hwmon")

RAPL_UPDATE_PERIOD_S = 0.001
"""RAPL's energy status counters update about every millisecond (Intel SDM vol. 3B, 15.10.3: ~976 µs)."""
_CPU_SENSOR_DRIVERS = ("coretemp", "k10temp", "zenpower")
_KHZ_PER_MHZ = 1e3
_UJ_PER_J = 1e6
_MILLI = 1e3

WINDOW_VECTOR_CLOCK_SOURCE = "measured under vector load before and after the window (FMA chains, all cores)"
"""``clock_source`` where a VM shows only a nominal clock and the clock is measured at the window's edges."""
WINDOW_SCALAR_CLOCK_SOURCE = "measured under scalar load before and after the window (imul chain, one core)"
"""The same, on a CPU without AVX2+FMA or of unknown FMA latency."""
WINDOW_MEASURED_CLOCK_SOURCES = (WINDOW_VECTOR_CLOCK_SOURCE, WINDOW_SCALAR_CLOCK_SOURCE)
"""Window clocks measured by this backend at the window's edges (the measuring is CPU work of its own)."""
_EDGE_REPEATS = 10  # runs per core at each edge (~0.1 s): the window's neighbours, not the peak


def _read_number(path: Path) -> float | None:
    text = read_text(path)
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class HostCpuTimes:
    """CPU seconds the whole machine has spent since boot, summed over its logical CPUs.

    ``busy_s``: running anything (user, nice, system, irq, softirq; guests' time is part of
    user). ``steal_s``: time the hypervisor ran another guest while one of this machine's vCPUs wanted
    to run — a neighbour's load that no process here shows.
    """

    busy_s: float
    steal_s: float
    cpus: int


# /proc/stat "cpu" line fields (proc(5)): user nice system idle iowait irq softirq steal guest guest_nice
_BUSY_FIELDS = (0, 1, 2, 5, 6)
_STEAL_FIELD = 7


def read_host_cpu_times(path: Path | None = None) -> HostCpuTimes | None:
    """The machine's busy and stolen CPU seconds (``None`` where ``/proc/stat`` is not there or not understood).

    >>> times = read_host_cpu_times()
    >>> times is None or (times.busy_s > 0 and times.steal_s >= 0 and times.cpus >= 1)
    True
    """
    text = read_text(path or PROC_STAT)
    if text is None:
        return None
    lines = text.splitlines()
    total = next((line.split()[1:] for line in lines if line.startswith("cpu ")), None)
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    try:
        ticks = [int(value) for value in total or ()]
    except ValueError:
        return None
    if len(ticks) <= _STEAL_FIELD or cpus < 1:
        return None
    per_second = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # USER_HZ
    return HostCpuTimes(sum(ticks[index] for index in _BUSY_FIELDS) / per_second, ticks[_STEAL_FIELD] / per_second,
                        cpus)


# /proc/stat per-CPU fields that are a process's work on that CPU: user, nice, system (a guest's time is in user).
# irq and softirq are left out: the kernel bills them to whichever CPU took the interrupt, and loopback TCP
# (gloo between ranks of one host) would put one rank's network work on its neighbour's core.
_WORK_FIELDS = (0, 1, 2)


@dataclass(frozen=True)
class CoreTimes:
    """CPU seconds some logical CPUs (``cpus``) have spent since boot: ``work_s`` running processes
    (user, nice, system), ``steal_s`` waiting while the hypervisor ran another guest."""

    cpus: tuple[int, ...]
    work_s: float
    steal_s: float


def read_core_times(cpus, path: Path | None = None) -> CoreTimes | None:
    """``/proc/stat``'s ``cpuN`` lines summed over ``cpus`` (``None`` where a CPU has no line or the file is absent).

    >>> times = read_core_times([0])
    >>> times is None or (times.cpus == (0,) and times.work_s > 0)
    True
    """
    wanted = tuple(sorted(set(cpus)))
    text = read_text(path or PROC_STAT)
    if text is None or not wanted:
        return None
    lines = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name.startswith("cpu") and name[3:].isdigit():
            lines[int(name[3:])] = rest.split()
    if any(cpu not in lines or len(lines[cpu]) <= _STEAL_FIELD for cpu in wanted):
        return None
    try:
        ticks = [[int(value) for value in lines[cpu]] for cpu in wanted]
    except ValueError:
        return None
    per_second = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # USER_HZ
    return CoreTimes(wanted, sum(row[index] for row in ticks for index in _WORK_FIELDS) / per_second,
                     sum(row[_STEAL_FIELD] for row in ticks) / per_second)


@dataclass(frozen=True)
class ForeignCpu:
    """Over a window of ``wall_s`` seconds, the share of ``cpus``' time (0 to 1) other processes ran there
    (``foreign_share``) and the hypervisor gave to other guests (``stolen_share``)."""

    cpus: tuple[int, ...]
    wall_s: float
    foreign_share: float
    stolen_share: float


def foreign_cpu(before: CoreTimes, after: CoreTimes, *, own_s: float, wall_s: float) -> ForeignCpu | None:
    """Other processes' share of the cores between two :func:`read_core_times` readings, given this
    process's own CPU seconds ``own_s`` in between (all its threads ran on those cores: its affinity mask);
    ``None`` for an empty window or readings of different CPUs.

    >>> foreign_cpu(CoreTimes((1,), 100.0, 2.0), CoreTimes((1,), 110.0, 2.5), own_s=5.0, wall_s=10.0)
    ForeignCpu(cpus=(1,), wall_s=10.0, foreign_share=0.5, stolen_share=0.05)
    """
    if wall_s <= 0 or before.cpus != after.cpus:
        return None
    capacity = wall_s * len(after.cpus)
    others = max(0.0, after.work_s - before.work_s - own_s)
    stolen = max(0.0, after.steal_s - before.steal_s)
    return ForeignCpu(after.cpus, wall_s, min(1.0, others / capacity), min(1.0, stolen / capacity))


class ForeignCpuWindow:
    """Other processes' share of this process's cores over a window: :meth:`start`, the work, :meth:`stop`.

    ``cpus`` defaults to the affinity mask (a fleet rank is pinned to its share of the cores, so these are
    its cores); the process's own CPU time (every thread's, :func:`time.process_time`) is subtracted. The
    clock ticks of ``/proc/stat`` are 10 ms: a window of a second or more reads to a percent.

    >>> window = ForeignCpuWindow().start()
    >>> _ = sum(range(10000))
    >>> share = window.stop()
    >>> share is None or 0.0 <= share.foreign_share <= 1.0
    True
    """

    def __init__(self, cpus=None, *, read=read_core_times, own=time.process_time, now=time.monotonic):
        self.cpus = tuple(sorted(cpus)) if cpus is not None else tuple(_allowed_cpus())
        self._read, self._own, self._now = read, own, now
        self._start = None

    def start(self) -> "ForeignCpuWindow":
        self._start = (self._read(self.cpus), self._own(), self._now())
        return self

    def stop(self) -> ForeignCpu | None:
        """The window's :class:`ForeignCpu` (``None`` where ``/proc/stat`` does not say, or before :meth:`start`)."""
        if self._start is None:
            return None
        before, own, then = self._start
        after = self._read(self.cpus)
        if before is None or after is None:
            return None
        return foreign_cpu(before, after, own_s=self._own() - own, wall_s=self._now() - then)


def _allowed_cpus() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


class _RaplDomain:
    """One RAPL package counter, read as a monotonic total (joules) with wrap-around undone."""

    def __init__(self, path: Path):
        self.path = path / "energy_uj"
        self.range_uj = _read_number(path / "max_energy_range_uj")
        self._last_uj = None
        self.total_j = 0.0

    def read(self) -> float | None:
        now = _read_number(self.path)
        if now is None:
            return None
        if self._last_uj is not None:
            delta = now - self._last_uj
            if delta < 0:  # the counter wrapped (it counts modulo max_energy_range_uj + 1)
                delta += (self.range_uj or 0) + 1
            self.total_j += delta / _UJ_PER_J
        self._last_uj = now
        return self.total_j


def _rapl_domains() -> tuple[list[_RaplDomain], str | None]:
    """The readable package-level RAPL counters, or ``([], why not)``."""
    packages = sorted(POWERCAP.glob("intel-rapl:*")) if POWERCAP.is_dir() else []
    packages = [path for path in packages if path.name.count(":") == 1]  # packages, not their sub-domains
    if not packages:
        return [], f"no RAPL counters under {POWERCAP} (a VM or a kernel without powercap)"
    readable = [path for path in packages if _read_number(path / "energy_uj") is not None]
    if not readable:
        return [], f"RAPL counters under {POWERCAP} are not readable by this user (root-only since Linux 5.10)"
    return [_RaplDomain(path) for path in readable], None


def _temperature_inputs() -> list[Path]:
    inputs = []
    for sensor in sorted(HWMON.glob("hwmon*")) if HWMON.is_dir() else []:
        if (read_text(sensor / "name") or "").strip() in _CPU_SENSOR_DRIVERS:
            inputs.extend(sorted(sensor.glob("temp*_input")))
    return inputs


class CpuBackend:
    """Reads the CPUs this process may run on; see the module docstring for what and from where."""

    name = "cpu"
    energy_source = "rapl"
    energy_update_period_s = RAPL_UPDATE_PERIOD_S

    def __init__(self, *, measure_clock: bool = True, default_interval_s: float = CPU_INTERVAL_S, now=time.perf_counter):
        self._now = now
        self.default_interval_s = default_interval_s
        self.unavailable: dict[str, str] = {
            "other_process_memory_bytes": "not measured on a CPU: host memory is shared by every process",
        }
        self._cpus = _allowed_cpus()
        self._measure_clock = measure_clock
        self.clock_source = self._choose_clock()
        self._rapl, rapl_reason = _rapl_domains()
        if rapl_reason:
            self.unavailable["power_w_mean"] = self.unavailable["power_w_max"] = rapl_reason
            self.unavailable["energy_j"] = rapl_reason
        self._last_energy = None
        self._temperatures = _temperature_inputs()
        if not self._temperatures:
            self.unavailable["temperature_c_max"] = (
                f"no CPU temperature sensor ({', '.join(_CPU_SENSOR_DRIVERS)}) under {HWMON}"
            )
        self._throttle_counts = [
            path
            for cpu in self._cpus
            for path in sorted((SYS_CPU / f"cpu{cpu}" / "thermal_throttle").glob("*_throttle_count"))
        ]
        self._first_throttle = None
        self._opened = False  # the first edge reading opens the window, the next one closes it
        if not self._throttle_counts:
            self.unavailable["throttle_reasons"] = "no thermal_throttle counters (Intel only) on this machine"

    def _choose_clock(self) -> str | None:
        if all((SYS_CPU / f"cpu{cpu}" / "cpufreq" / "scaling_cur_freq").exists() for cpu in self._cpus):
            return "cpufreq scaling_cur_freq"
        blocks = parse_cpuinfo(read_text(PROC_CPUINFO) or "")
        virtual = bool(blocks) and "hypervisor" in blocks[0].get("flags", "").split()
        if not virtual and blocks and blocks[0].get("cpu MHz"):
            return "/proc/cpuinfo cpu MHz"
        if not virtual:
            self.unavailable["clock_mhz_mean"] = "no cpufreq and no cpu MHz in /proc/cpuinfo"
            return None
        if not self._measure_clock:
            self.unavailable["clock_mhz_mean"] = (
                "a VM shows only the nominal clock and the measurement was not asked for (measure_clock=False)"
            )
            return None
        if cpu_clock.vector_clock_supported():
            return WINDOW_VECTOR_CLOCK_SOURCE
        return WINDOW_SCALAR_CLOCK_SOURCE

    def _clock_mhz(self, *, edge: bool) -> float | None:
        if self.clock_source == "cpufreq scaling_cur_freq":
            khz = [_read_number(SYS_CPU / f"cpu{cpu}" / "cpufreq" / "scaling_cur_freq") for cpu in self._cpus]
            khz = [value for value in khz if value is not None]
            return sum(khz) / len(khz) / _KHZ_PER_MHZ if khz else None
        if self.clock_source == "/proc/cpuinfo cpu MHz":
            blocks = parse_cpuinfo(read_text(PROC_CPUINFO) or "")
            mhz = [float(b["cpu MHz"]) for b in blocks if b.get("cpu MHz") and int(b.get("processor", -1)) in self._cpus]
            return sum(mhz) / len(mhz) if mhz else None
        if self.clock_source in WINDOW_MEASURED_CLOCK_SOURCES and edge:
            if self.clock_source == WINDOW_VECTOR_CLOCK_SOURCE:
                vector = cpu_clock.measure_vector_clock(repeats=_EDGE_REPEATS)
                ghz = vector.ghz if vector is not None else None
            else:
                ghz = cpu_clock.measure_cpu_ghz()
            if ghz is None:
                self.unavailable["clock_mhz_mean"] = "a VM shows only the nominal clock and it cannot be measured here"
                return None
            return ghz * _MILLI
        return None

    def _energy_and_power(self, now: float) -> tuple[float | None, float | None]:
        if not self._rapl:
            return None, None
        totals = [domain.read() for domain in self._rapl]
        if any(total is None for total in totals):
            return None, None
        energy = sum(totals)
        power = None
        if self._last_energy is not None and now > self._last_energy[0]:
            power = (energy - self._last_energy[1]) / (now - self._last_energy[0])
        self._last_energy = (now, energy)
        return energy, power

    def _throttle_reasons(self) -> tuple[str, ...]:
        counts = [_read_number(path) for path in self._throttle_counts]
        if not counts or any(count is None for count in counts):
            return ()
        if self._first_throttle is None:
            self._first_throttle = counts
            return ()
        return ("thermal_throttle",) if any(now > then for now, then in zip(counts, self._first_throttle)) else ()

    def read(self, *, edge: bool) -> Reading:
        """One reading. At an edge in a VM the clock is measured outside the window: before it opens, after it closes."""
        closing = edge and self._opened
        self._opened = self._opened or edge
        clock = None if closing else self._clock_mhz(edge=edge)
        now = self._now()
        energy, power = self._energy_and_power(now)
        temperatures = [_read_number(path) for path in self._temperatures]
        temperatures = [value / _MILLI for value in temperatures if value is not None]
        throttle_reasons = self._throttle_reasons()
        if closing:
            clock = self._clock_mhz(edge=edge)
        return Reading(
            time_s=now,
            clock_mhz=clock,
            power_w=power,
            energy_j=energy,
            temperature_c=max(temperatures) if temperatures else None,
            throttle_reasons=throttle_reasons,
        )

    def close(self) -> None:
        pass
