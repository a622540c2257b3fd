"""Sampling a device beside a timed window: :class:`Sampler` in a background thread, :func:`snapshot` once.

The backend is chosen by the device (:mod:`accounting.telemetry.gpu` for CUDA and ROCm,
:mod:`accounting.telemetry.cpu` for the CPU); every backend returns
:class:`accounting.telemetry.readings.Reading`, and a window becomes one
:class:`accounting.telemetry.readings.Summary`.

>>> summary = snapshot("cpu")
>>> summary.device, summary.backend, summary.duration_s
('cpu', 'cpu', 0.0)
>>> summary.logical_cpus >= 1 and summary.energy_j is None
True
>>> "energy_j" in summary.unavailable
True
"""


import os
import statistics
import threading
import time

import torch

from accounting._checks import check_positive
from accounting.errors import AccountingError, AccountingTypeError
from accounting.hardware.devices import as_device
from accounting.telemetry.cpu import CpuBackend, ForeignCpuWindow, read_host_cpu_times
from accounting.telemetry.gpu import open_gpu_backend
from accounting.telemetry.readings import (
    ENERGY_COUNTER_MIN_WINDOW_S,
    GPU_INTERVAL_S,
    POWER_AVERAGING_S,
    Reading,
    Summary,
)


def _device_name(device) -> str:
    """``device`` as the string a summary carries (``"cpu"``, ``"cuda:0"``); raises for devices without telemetry."""
    device = as_device(device)
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda":
        index = device.index
        if index is None:
            index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        return f"cuda:{index}"
    raise AccountingError(f"device {str(device)!r} has no telemetry: only cpu and cuda have")


def _fleet_devices(value) -> tuple[int, ...]:
    """``value`` as a tuple of torch device indices; raises naming it when it is not a collection of them.

    >>> _fleet_devices({3, 1}), _fleet_devices(())
    ((1, 3), ())
    >>> _fleet_devices("01")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingTypeError: fleet_devices must be a collection of torch device indices (ints >= 0), got '01'
    """
    message = f"fleet_devices must be a collection of torch device indices (ints >= 0), got {value!r}"
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise AccountingTypeError(message)
    devices = tuple(value)
    if not all(isinstance(device, int) and not isinstance(device, bool) and device >= 0 for device in devices):
        raise AccountingTypeError(message)
    return tuple(sorted(set(devices)))


def _open_backend(device_name: str, *, measure_clock: bool, fleet_devices=()):
    """The backend that reads ``device_name`` (never raises: a missing one is a :class:`NoBackend`)."""
    if device_name == "cpu":
        return CpuBackend(measure_clock=measure_clock)
    return open_gpu_backend(int(device_name.split(":")[1]), fleet_devices=fleet_devices)


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _logical_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _window_energy(backend, readings: list[Reading], duration_s: float, power: list[float]):
    """``(joules, source, reason)`` for a window: the counter, else power × time; ``None`` with a reason when neither holds."""
    if duration_s == 0:
        return None, None, "a snapshot has no window to integrate over"
    period = backend.energy_update_period_s
    if duration_s < period:
        return None, None, (
            f"window of {duration_s * 1e3:.1f} ms is shorter than the energy counter's update period "
            f"({period * 1e3:.0f} ms): flagged, not reported as 0 J"
        )
    counters = [r.energy_j for r in readings if r.energy_j is not None]
    min_window = ENERGY_COUNTER_MIN_WINDOW_S if backend.energy_source == "counter" else period
    if len(counters) >= 2 and duration_s >= min_window:
        joules = counters[-1] - counters[0]
        if joules > 0:
            return joules, backend.energy_source, None
        return None, None, f"the energy counter did not advance over {duration_s:.3f} s: flagged, not reported as 0 J"
    averaged = max((POWER_AVERAGING_S.get(r.power_source, 0.0) for r in readings if r.power_w is not None), default=0.0)
    if power and duration_s < averaged:
        return None, None, (
            f"power is a {averaged:g} s average and the window is {duration_s:.3f} s: power × time would count "
            "power drawn before the window; flagged, not reported")
    if power:
        return sum(power) / len(power) * duration_s, "power×time", None
    return None, None, backend.unavailable.get("energy_j", "no energy counter and no power readings")


def summarise(device: str, backend, readings: list[Reading], *, extra_unavailable=None, foreign_cpu=None) -> Summary:
    """Fold ``readings`` (the first and last are the window's edges) into a :class:`Summary`.

    ``foreign_cpu``: the window's :class:`~accounting.telemetry.cpu.ForeignCpu` (other processes on this
    process's cores), where it was read.

    >>> readings = [Reading(0.0, clock_mhz=1400.0, power_w=300.0), Reading(2.0, clock_mhz=1200.0, power_w=500.0)]
    >>> from accounting.telemetry.readings import NoBackend
    >>> s = summarise("cuda:0", NoBackend("test"), readings)
    >>> s.clock_mhz_min, s.clock_mhz_mean, s.power_w_max, s.energy_j, s.energy_source
    (1200.0, 1300.0, 500.0, 800.0, 'power×time')
    >>> s.clock_mhz_median, s.clock_mhz_early, s.clock_mhz_late, s.power_limit_w
    (1300.0, 1400.0, 1200.0, None)
    """
    unavailable = dict(backend.unavailable)
    unavailable.update(extra_unavailable or {})
    duration = readings[-1].time_s - readings[0].time_s if readings else 0.0
    clocks = [r.clock_mhz for r in readings if r.clock_mhz is not None]
    power = [r.power_w for r in readings if r.power_w is not None]
    limits = [r.power_limit_w for r in readings if r.power_limit_w is not None]
    half = len(clocks) // 2
    temperatures = [r.temperature_c for r in readings if r.temperature_c is not None]
    others = [r.other_process_memory_bytes for r in readings if r.other_process_memory_bytes is not None]
    reasons = []
    for reading in readings:
        reasons.extend(name for name in reading.throttle_reasons if name not in reasons)
    siblings = []
    for reading in readings:
        siblings.extend(name for name in reading.busy_siblings if name not in siblings)
    power_sources = []
    for reading in readings:
        if reading.power_w is not None and reading.power_source not in power_sources:
            power_sources.append(reading.power_source)
    energy, energy_source, energy_reason = _window_energy(backend, readings, duration, power)
    values = {
        "clock_mhz_min": min(clocks) if clocks else None,
        "clock_mhz_mean": sum(clocks) / len(clocks) if clocks else None,
        "clock_mhz_max": max(clocks) if clocks else None,
        "clock_mhz_median": statistics.median(clocks) if clocks else None,
        "clock_mhz_early": statistics.median(clocks[:half]) if half else None,
        "clock_mhz_late": statistics.median(clocks[half:]) if half else None,
        "power_w_mean": sum(power) / len(power) if power else None,
        "power_w_max": max(power) if power else None,
        "power_w_median": statistics.median(power) if power else None,
        "power_limit_w": min(limits) if limits else None,
        "energy_j": energy,
        "temperature_c_max": max(temperatures) if temperatures else None,
        "load_average_1m": _load_average(),
        "other_process_memory_bytes": max(others) if others else None,
        "foreign_cpu_share": foreign_cpu.foreign_share if foreign_cpu is not None else None,
        "stolen_cpu_share": foreign_cpu.stolen_share if foreign_cpu is not None else None,
    }
    if energy_reason is not None:
        unavailable["energy_j"] = energy_reason
    if half == 0:
        for name in ("clock_mhz_early", "clock_mhz_late"):
            unavailable[name] = f"{len(clocks)} clock reading(s): no halves to compare"
    if not limits:
        unavailable.setdefault("power_limit_w", "the device reports no enforced power limit")
    for name, value in values.items():
        if value is None:
            unavailable.setdefault(name, "no reading during the window")
        else:
            unavailable.pop(name, None)
    if foreign_cpu is None and duration == 0:
        for name in ("foreign_cpu_share", "stolen_cpu_share"):
            unavailable[name] = "a snapshot has no window to share"
    if reasons:
        unavailable.pop("throttle_reasons", None)
    return Summary(
        device=device,
        backend=backend.name,
        duration_s=duration,
        samples=len(readings),
        logical_cpus=_logical_cpus(),
        clock_source=getattr(backend, "clock_source", None) if clocks else None,
        energy_source=energy_source,
        power_source=" + ".join(str(source) for source in power_sources) if power_sources else None,
        throttle_reasons=tuple(reasons),
        busy_siblings=tuple(siblings),
        foreign_cpus=foreign_cpu.cpus if foreign_cpu is not None else (),
        mig_slice=getattr(backend, "mig_slice", None),
        notes=tuple(getattr(backend, "notes", ())),
        unavailable=unavailable,
        **values,
    )


class Sampler:
    """Sample a device in a background thread while a ``with`` block runs; ``summary`` holds the result.

    One reading is taken on entry and one on exit (the window's edges, on the calling
    thread; on a CPU in a VM these measure the clock), and one every ``interval_s``
    in between (default: :data:`GPU_INTERVAL_S` on GPUs, :data:`CPU_INTERVAL_S` on CPUs).
    ``measure_clock=False`` skips the CPU clock measurement at the edges (about
    0.1 s each) where the VM shows only a nominal clock; the clock is then ``None``.
    ``fleet_devices``: torch indices of the GPUs on this node that this fleet's other ranks
    use; their work is not named in ``busy_siblings`` (another process's would be).
    Between the edges it also reads which share of this process's cores other processes took
    (``foreign_cpu_share``, :class:`~accounting.telemetry.cpu.ForeignCpuWindow`).

    >>> with Sampler("cpu", measure_clock=False) as sampler:
    ...     _ = sum(range(1000))
    >>> summary = sampler.summary
    >>> summary.device, summary.duration_s > 0, summary.samples >= 0
    ('cpu', True, True)
    """

    def __init__(self, device="cpu", interval_s: float | None = None, *, measure_clock: bool = True,
                 fleet_devices=()):
        self.device = _device_name(device)
        self._interval_s = None if interval_s is None else check_positive(interval_s, "interval_s")
        self._measure_clock = bool(measure_clock)
        self.fleet_devices = _fleet_devices(fleet_devices)
        self._summary = None
        self._thread = None
        self._stop = threading.Event()
        self._readings: list[Reading] = []
        self._backend = None
        self._sampling_error: str | None = None
        self._cpu_window = None

    @property
    def interval_s(self) -> float:
        """Seconds between background readings."""
        if self._interval_s is not None:
            return self._interval_s
        return self._backend.default_interval_s if self._backend is not None else GPU_INTERVAL_S

    def start(self) -> "Sampler":
        """Take the first edge reading and start the background thread."""
        if self._thread is not None:
            raise AccountingError(f"Sampler({self.device!r}) is already running")
        self._backend = _open_backend(self.device, measure_clock=self._measure_clock, fleet_devices=self.fleet_devices)
        self._readings = [self._backend.read(edge=True)]
        self._cpu_window = ForeignCpuWindow().start()  # after the opening edge: its clock measurement is not in it
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"telemetry-{self.device}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        interval = self.interval_s
        while not self._stop.wait(interval):
            try:
                self._readings.append(self._backend.read(edge=False))
            except Exception as error:  # noqa: BLE001 - a failing backend ends sampling, never the timed work
                self._sampling_error = f"sampling stopped: {type(error).__name__}: {error}"
                return

    def stop(self) -> Summary:
        """Stop the thread, take the last edge reading and return the window's :class:`Summary`."""
        if self._thread is None:
            raise AccountingError(f"Sampler({self.device!r}) was not started")
        self._stop.set()
        self._thread.join()
        self._thread = None
        foreign_cpu = self._cpu_window.stop() if self._cpu_window is not None else None
        try:
            self._readings.append(self._backend.read(edge=True))
        finally:
            self._backend.close()
        extra = {"samples": self._sampling_error} if self._sampling_error else None
        self._summary = summarise(self.device, self._backend, self._readings, extra_unavailable=extra,
                                  foreign_cpu=foreign_cpu)
        return self._summary

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc_info) -> bool:
        self.stop()
        return False

    @property
    def summary(self) -> Summary:
        """The window's :class:`Summary`; raises while the sampler is still running or before it ran."""
        if self._summary is None:
            state = "is still running" if self._thread is not None else "has not run"
            raise AccountingError(f"Sampler({self.device!r}) {state}: read .summary after the with block")
        return self._summary


def snapshot(device="cpu", *, measure_clock: bool = True) -> Summary:
    """One reading of ``device`` now, as a :class:`Summary` of duration 0 (energy needs a window: ``None``).

    >>> snapshot("meta")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: device 'meta' has no telemetry: only cpu and cuda have
    """
    name = _device_name(device)
    backend = _open_backend(name, measure_clock=measure_clock)
    try:
        reading = backend.read(edge=True)
    finally:
        backend.close()
    return summarise(name, backend, [reading])


def host_cpu_times():
    """The whole machine's busy and stolen CPU seconds now (:class:`accounting.telemetry.cpu.HostCpuTimes`).

    ``None`` where the system does not say (no ``/proc/stat``). Two readings around a
    window, less the CPU time of one's own processes, give the CPU time everyone else
    took during it — what the regression gate's load guard checks.

    >>> times = host_cpu_times()
    >>> times is None or times.cpus >= 1
    True
    """
    return read_host_cpu_times()


def sample_cost_s(device="cpu", *, reads: int = 50) -> float:
    """Mean seconds one background reading of ``device`` takes (its overhead is this over the interval).

    >>> from accounting.telemetry.readings import CPU_INTERVAL_S
    >>> 0 < sample_cost_s("cpu", reads=5) < CPU_INTERVAL_S
    True
    """
    backend = _open_backend(_device_name(device), measure_clock=False)
    try:
        backend.read(edge=True)
        start = time.perf_counter()
        for _ in range(reads):
            backend.read(edge=False)
        return (time.perf_counter() - start) / reads
    finally:
        backend.close()
