"""What a telemetry backend reads and what a window's summary holds: the types every backend shares.

A reading the backend cannot give is ``None`` (:data:`UNAVAILABLE`) and
``Summary.unavailable`` says why; nothing is invented.

>>> Reading(time_s=0.0).clock_mhz is UNAVAILABLE
True
"""

import dataclasses
import time
from dataclasses import dataclass, field

UNAVAILABLE = None
"""The value of every reading a backend cannot give; ``Summary.unavailable`` holds the reason."""

GPU_INTERVAL_S = 0.02
"""Default sampling interval on GPUs (50 Hz)."""
CPU_INTERVAL_S = 0.25
"""Default sampling interval on CPUs (4 Hz: the sampler shares the timed cores; see the module docstring)."""
ENERGY_COUNTER_MIN_WINDOW_S = 1.0
"""A GPU's total-energy counter is used only over windows at least this long; shorter ones use power × time."""

POWER_INSTANT = "instant"
"""``power_source`` of a power reading taken at that moment (NVML's instant field, AMD's current socket power)."""
POWER_AVERAGE_1S = "1 s average"
"""``power_source`` of NVML's ``nvmlDeviceGetPowerUsage`` on Ampere (but GA100) and newer: the mean of the last second."""
POWER_AVERAGE_UNPUBLISHED = "average"
"""``power_source`` of an average over a window the vendor does not publish (AMD's average socket power)."""
POWER_AVERAGING_S = {POWER_INSTANT: 0.0, POWER_AVERAGE_1S: 1.0}
"""Seconds each ``power_source`` averages over, where known: a window shorter than that reads power from before it."""

READING_FIELDS = (
    "clock_mhz_min",
    "clock_mhz_mean",
    "clock_mhz_max",
    "clock_mhz_median",
    "power_w_mean",
    "power_w_max",
    "power_w_median",
    "power_limit_w",
    "energy_j",
    "temperature_c_max",
    "load_average_1m",
    "other_process_memory_bytes",
    "foreign_cpu_share",
    "stolen_cpu_share",
)
HOST_FIELDS = ("load_average_1m", "foreign_cpu_share", "stolen_cpu_share")
"""Readings of the host, not the device: the sampler takes them whatever backend reads the device."""


@dataclass(frozen=True)
class Reading:
    """One instantaneous reading of a device, as a backend returns it (``None``: not read).

    ``energy_j`` is the backend's cumulative energy counter (joules since some origin,
    wrap-around already undone); ``throttle_reasons`` are decoded names; ``power_source`` says
    what ``power_w`` is (:data:`POWER_INSTANT`, :data:`POWER_AVERAGE_1S`, ...); ``power_limit_w`` is the
    power limit the device enforces now (NVML's enforced limit), read at a window's edges only.
    """

    time_s: float
    clock_mhz: float | None = None
    power_w: float | None = None
    power_source: str | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None
    temperature_c: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    other_process_memory_bytes: int | None = None
    busy_siblings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Summary:
    """Device readings over a window (see the module docstring); ``None`` fields have a reason in ``unavailable``.

    ``clock_*``: the GPU's SM clock, or the CPU's clock (``clock_source`` says from
    where); ``clock_mhz_median`` and ``power_w_median`` are the medians of every reading in the window
    (what a sustained figure quotes: one reading at an edge cannot move them), ``clock_mhz_early`` and
    ``clock_mhz_late`` the medians of its first and second half of readings (whether the clock settled).
    ``power_limit_w``: the lowest power limit the device enforced during the window (NVML's enforced
    limit; ``None`` where the device does not say). ``energy_source`` is ``"counter"`` (a GPU's total-energy counter),
    ``"rapl"`` (the CPU's RAPL counter) or ``"power×time"`` (mean power × duration).
    ``throttle_reasons``: every reason seen during the window that held the clock
    down (idle and display-clock reasons are left out: they do not slow work).
    ``busy_siblings``: other GPUs more than 10 % utilised or holding more than 4 GiB (the GPUs of the
    sampler's ``fleet_devices`` left out). ``foreign_cpu_share``: the share (0 to 1) of the time of the
    CPUs this process may run on (``foreign_cpus``, its affinity mask) that other processes ran there during
    the window; ``stolen_cpu_share`` the share the hypervisor gave to other guests
    (:class:`accounting.telemetry.cpu.ForeignCpuWindow`). ``power_source``: what the power readings are
    (``"instant"``, ``"1 s average"``: NVML on Ampere and newer where the driver has no instant field;
    several joined with ``" + "``). ``mig_slice``: the ``MIG-`` uuid where the device is a MIG slice
    (which has no published peak); ``notes``: what the backend wants said about its readings.

    >>> s = Summary(device="cpu", backend=None, duration_s=0.0, samples=0, logical_cpus=2,
    ...             unavailable={"clock_mhz_mean": "no backend"})
    >>> s.to_dict()["unavailable"], s.throttled
    ({'clock_mhz_mean': 'no backend'}, False)
    """

    device: str
    backend: str | None
    duration_s: float
    samples: int
    logical_cpus: int
    clock_mhz_min: float | None = None
    clock_mhz_mean: float | None = None
    clock_mhz_max: float | None = None
    clock_mhz_median: float | None = None
    clock_mhz_early: float | None = None
    clock_mhz_late: float | None = None
    clock_source: str | None = None
    power_w_mean: float | None = None
    power_w_max: float | None = None
    power_w_median: float | None = None
    power_limit_w: float | None = None
    power_source: str | None = None
    energy_j: float | None = None
    energy_source: str | None = None
    temperature_c_max: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    load_average_1m: float | None = None
    other_process_memory_bytes: int | None = None
    busy_siblings: tuple[str, ...] = ()
    foreign_cpu_share: float | None = None
    stolen_cpu_share: float | None = None
    foreign_cpus: tuple[int, ...] = ()
    mig_slice: str | None = None
    notes: tuple[str, ...] = ()
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def throttled(self) -> bool:
        """Whether any throttle reason was seen during the window."""
        return bool(self.throttle_reasons)

    def to_dict(self) -> dict:
        """The summary as plain JSON values (tuples become lists)."""
        out = dataclasses.asdict(self)
        out["throttle_reasons"] = list(self.throttle_reasons)
        out["busy_siblings"] = list(self.busy_siblings)
        out["foreign_cpus"] = list(self.foreign_cpus)
        out["notes"] = list(self.notes)
        out["unavailable"] = dict(self.unavailable)
        return out


class NoBackend:
    """The backend of a device nothing can read: every reading ``None``, each with ``reason``."""

    name = None
    default_interval_s = GPU_INTERVAL_S
    energy_source = None
    energy_update_period_s = 0.0

    def __init__(self, reason: str):
        self.unavailable = {
            name: reason for name in (*READING_FIELDS, "throttle_reasons") if name not in HOST_FIELDS
        }
        self.notes: list[str] = []

    def read(self, *, edge: bool) -> Reading:  # noqa: ARG002 - same signature as the real backends
        return Reading(time_s=time.perf_counter())

    def close(self) -> None:
        pass
