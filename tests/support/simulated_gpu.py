"""A simulated H200 behind the package's clock and telemetry seams, calibrated on the recorded H200.

The replays (:mod:`tests.support.h200_report_replay`) stand in for the measuring code; this stands in for the
*device*, so the package's own timing (:func:`accounting.timing.time_fn`, the real
:class:`~accounting.hardware.clocks.EventClock`), its headline phase and its NVML backend run against it unchanged.

One virtual time line holds the host and the GPU. The host pays for what it does (a kernel launch, an event
record, waking from a synchronize); the GPU runs what was queued, in order, at the current SM clock:

- a product of ``flops`` takes ``flops / rate(dtype, clock)``; the rate scales with the clock as the recorded bf16
  figures do (``rate_scale``);
- the spin :class:`~accounting.hardware.clocks.EventClock` queues (``torch.cuda._sleep(cycles)``) takes
  ``cycles / clock``; an L2 flush takes its bytes over the recorded bandwidth;
- power follows what runs (``busy_power_w``; the spin, a flush and idle have their own);
- a power limiter every ``LIMITER_PERIOD_S`` compares the average power over the last ``LIMITER_WINDOW_S`` with
  the enforced limit and moves the clock one ``CLOCK_STEP_MHZ`` step down (above it) or up (below it), between
  ``MIN_CLOCK_MHZ`` and ``MAX_CLOCK_MHZ``; ``sw_power_cap`` is set while the clock is held below its maximum.

NVML reads that state through a fake ``pynvml`` (:class:`SimulatedNvml`, a
:class:`tests.support.fake_nvml.FakeNvml`), so :class:`accounting.telemetry.gpu_nvml.NvmlBackend` reads it as it
reads a real GPU: SM clock, instant power (the mean over the last limiter period), the energy counter (mJ),
throttle reasons, the enforced limit. :meth:`SimulatedH200.sampler` reads it every 20 ms of virtual time, as
the real :class:`~accounting.telemetry.sampler.Sampler` does in wall time.

>>> gpu = SimulatedH200()
>>> gpu.product(322_223_210_496)              # the recorded sustained shape, 4608x6208x5632 bf16
>>> gpu.synchronize()
>>> round(322_223_210_496 / gpu.busy_s / 1e12)  # at the boost clock: the recorded burst figure
826
"""

import collections
import dataclasses
import math
import sys
import types

import torch

from accounting.hardware.clocks import EventClock
from accounting.telemetry import sampler as sampling
from accounting.telemetry.readings import GPU_INTERVAL_S
from accounting.timing import MatmulCase
from tests.support.fake_nvml import SW_POWER_CAP, FakeGpu, FakeNvml

# ---- calibration: each constant once, with its source (tests/data/hosts/nvidia-h200/) -----------------------

MAX_CLOCK_MHZ = 1980.0
"""Boost clock: ``props.clock_rate`` 1980000 kHz (sdpa-kernels-and-sustained-window.json); every burst read it."""
MIN_CLOCK_MHZ = 1005.0
"""Lowest clock the limiter may set (below the lowest recorded, 1140 MHz in window 0)."""
CLOCK_STEP_MHZ = 15.0
"""Every recorded SM clock (1140, 1410, 1440, 1455, 1485, 1500, 1545, 1890, 1980) is a multiple of 15 MHz."""
POWER_LIMIT_W = 700.0
"""``power_limit_w`` (sdpa-kernels-and-sustained-window.json): NVML's enforced limit."""
L2_BYTES = 62_914_560
"""``props.L2_cache_size``."""
MEMORY_BYTES_PER_S = 4.25e12
"""report.json ``bandwidth.measured_bytes_per_s`` (4.25 TB/s): what an L2 flush's writes run at."""

RATE_AT_BOOST_TFLOPS = {"float32": 54.0, "tf32": 403.9, "bfloat16": 825.9, "float16": 790.9, "float8_e4m3fn": 1567.3,
                        "float8_e5m2": 1567.3}
"""Each dtype's product rate at 1980 MHz: report.json's burst figures (1980 MHz each); e5m2 times as e4m3."""
RATE_POINTS = ((1455.0, 685.0 / 825.9), (1980.0, 1.0))
"""The rate's share of its boost figure at two clocks, from bf16 on the sustained shape 4608x6208x5632: 685.0
TFLOP/s at a median 1455 MHz back to back (windows 1-3) and 825.9 at 1980 (report.json's burst). Linear between and
beyond them: the product does not speed up in proportion to the clock (memory time does not shrink with it)."""
BUSY_POWER_POINTS = ((1455.0, 700.0), (1980.0, 900.0))
"""bf16 product power at two clocks: the limiter held the back-to-back windows at 1455 MHz (685-691 W read, held
at the 700 W limit); about 900 W at 1980 MHz (the run's instant readings 894-931 W, report*.json)."""
POWER_SHARE = {"float32": 0.51, "tf32": 0.72, "bfloat16": 1.0, "float16": 1.0, "float8_e4m3fn": 1.094,
               "float8_e5m2": 1.094}
"""Each dtype's power above idle as a share of bf16's at the same clock: float32 drew 518 W at 1968 MHz
(report.json's float32 sustained window); tf32 683 W at 1980 (its burst window); fp8 held 693 W at 1325 MHz
(mamf-fp8.txt MSMF), where bf16 would draw 650 W."""
IDLE_POWER_W = 125.0
"""Idle: report-bf16-budget60.json's burst window read 125 W after its idle second."""
SPIN_POWER_W = 215.0
"""The spin (one thread busy, the clock up): the one constant fitted rather than read, so that the time_fn
regime's limiter settles where the recorded sweep row read 1890 MHz; within the 125-264 W the recorded idle and spin
windows read (report.json's burst windows 206 W, 264 W)."""
FLUSH_POWER_W = 400.0
"""An L2 flush (a memset at full memory bandwidth): not recorded; it lasts ~30 µs a call, so it moves little."""

LAUNCH_S = 8e-6
"""Host time to launch one kernel from Python (the clocks module: launches take "tens of µs" for three)."""
EVENT_RECORD_S = 3e-6
"""Host time to record a CUDA event."""
SYNC_WAKE_S = 15e-6
"""Host time from the GPU finishing to the host running again after a synchronize."""
QUEUE_DEPTH = 1024
"""Launches the host may queue ahead of the GPU before a launch blocks (CUDA's launch queue)."""
EDGE_READ_S = 2e-3
"""Host time of a telemetry edge reading (processes and siblings are read there: milliseconds)."""

LIMITER_PERIOD_S = 0.005
LIMITER_WINDOW_S = 0.02
"""The limiter averages power over this long (tens of ms: a power limiter acts over tens of milliseconds)."""


def rate_scale(clock_mhz: float) -> float:
    """A product's rate at ``clock_mhz`` as a share of its rate at the boost clock (``RATE_POINTS``)."""
    (c0, s0), (c1, s1) = RATE_POINTS
    return s0 + (s1 - s0) * (clock_mhz - c0) / (c1 - c0)


def busy_power_w(dtype: str, clock_mhz: float) -> float:
    """Power while a product of ``dtype`` runs at ``clock_mhz`` (``BUSY_POWER_POINTS``, ``POWER_SHARE``)."""
    (c0, p0), (c1, p1) = BUSY_POWER_POINTS
    bf16 = p0 + (p1 - p0) * (clock_mhz - c0) / (c1 - c0)
    return IDLE_POWER_W + (bf16 - IDLE_POWER_W) * POWER_SHARE[dtype]


@dataclasses.dataclass
class _Op:
    kind: str  # "product", "spin", "flush", "event"
    work: float  # flops, cycles, seconds, or 0
    dtype: str = "bfloat16"
    event: object = None


class SimulatedEvent:
    """A CUDA event on the simulated GPU: ``record`` queues it, ``synchronize`` waits for it, ``elapsed_time`` in ms."""

    def __init__(self, gpu):
        self.gpu, self.at = gpu, None

    def record(self, stream=None):
        self.at = None
        self.gpu._host(EVENT_RECORD_S)
        self.gpu._launch(_Op("event", 0.0, event=self))

    def synchronize(self):
        self.gpu._wait(lambda: self.at is not None)

    def query(self):
        return self.at is not None

    def elapsed_time(self, end):
        if self.at is None or end.at is None:
            raise RuntimeError("elapsed_time of an event that has not completed")
        return (end.at - self.at) * 1e3


class SimulatedEventClock(EventClock):
    """The package's :class:`EventClock` on the simulated GPU; only the L2 flush (a real buffer) is the GPU's."""

    def __init__(self, gpu, device="cuda:0"):
        super().__init__(device, event_factory=gpu.event, synchronize=gpu.synchronize, sleep=gpu.sleep)
        self.gpu = gpu

    def flush_cache(self) -> None:
        self.gpu.flush()


class SimulatedNvml(FakeNvml):
    """``pynvml`` reading the simulated GPU's state at the current virtual time."""

    def __init__(self, gpu):
        self.sim = gpu
        super().__init__([FakeGpu(power_limit_mw=gpu.power_limit_w * 1e3, energy_mj=0)])

    def _gpu(self, handle):
        state = self.gpus[0]
        sim = self.sim
        state.clock_mhz = sim.clock_mhz
        state.power_mw = sim.instant_power_w() * 1e3
        state.average_power_mw = sim.average_power_w(1.0) * 1e3
        state.energy_mj = int(sim.energy_j * 1e3)
        state.power_limit_mw = sim.power_limit_w * 1e3
        state.throttle_mask = SW_POWER_CAP if sim.clock_mhz < sim.max_clock_mhz else 0
        state.utilisation_pct = 100 if sim.queue or sim.current is not None else 0
        return state


class SimulatedH200:
    """The simulated GPU (see the module docstring). Host calls: :meth:`product`, :meth:`sleep` (the spin),
    :meth:`flush`, :meth:`event`, :meth:`synchronize`, :meth:`idle`; :meth:`now` is the virtual time.

    ``clock_mhz``: the clock it starts at; ``power_limit_w``: the enforced limit.
    """

    def __init__(self, *, clock_mhz: float = MAX_CLOCK_MHZ, power_limit_w: float = POWER_LIMIT_W):
        self.t = 0.0
        self.clock_mhz = float(clock_mhz)
        self.max_clock_mhz = MAX_CLOCK_MHZ
        self.power_limit_w = float(power_limit_w)
        self.queue = collections.deque()
        self.current = None
        self.energy_j = 0.0
        self.busy_s = 0.0
        """Seconds the GPU spent running products."""
        self.product_energy_j = 0.0
        """Joules drawn while products ran (what their work cost, nothing else)."""
        self.product_flops = 0.0
        """Work the products have done."""
        self.products = 0
        self._next_tick = LIMITER_PERIOD_S
        self._tick_energy = 0.0
        self._tick_energies = collections.deque(maxlen=max(1, round(LIMITER_WINDOW_S / LIMITER_PERIOD_S)))
        self._long_energies = collections.deque(maxlen=round(1.0 / LIMITER_PERIOD_S))
        self._last_tick_w = IDLE_POWER_W
        self._samplers = []
        self.nvml = SimulatedNvml(self)

    # ---- host side ----------------------------------------------------------------------------------------------

    def now(self) -> float:
        """The virtual time (seconds): the host's clock, and the GPU has run up to it."""
        return self.t

    def idle(self, seconds: float) -> None:
        """The host waits ``seconds`` (``time.sleep``); the GPU runs on meanwhile."""
        self._host(seconds)

    def product(self, flops: int, dtype: str = "bfloat16") -> None:
        """Queue a product of ``flops`` in ``dtype``."""
        self._host(LAUNCH_S)
        self._launch(_Op("product", float(flops), dtype))

    def sleep(self, cycles: int) -> None:
        """Queue a spin of ``cycles`` SM clock cycles (``torch.cuda._sleep``)."""
        self._host(LAUNCH_S)
        self._launch(_Op("spin", float(cycles)))

    def flush(self) -> None:
        """Queue an L2 flush (the clock's write of twice the L2)."""
        self._host(LAUNCH_S)
        self._launch(_Op("flush", 2 * L2_BYTES / MEMORY_BYTES_PER_S))

    def event(self) -> SimulatedEvent:
        return SimulatedEvent(self)

    def synchronize(self) -> None:
        """Wait until everything queued has run."""
        self._wait(lambda: not self.queue and self.current is None)

    def event_clock(self, device="cuda:0") -> SimulatedEventClock:
        """The package's event clock on this GPU (needs :meth:`install`'s ``torch.cuda.current_stream``)."""
        return SimulatedEventClock(self, device)

    # ---- what telemetry reads -----------------------------------------------------------------------------------

    def instant_power_w(self) -> float:
        """NVML's instant power: the mean over the last limiter period."""
        return self._last_tick_w

    def average_power_w(self, seconds: float) -> float:
        """Mean power over the last ``seconds`` (whole limiter periods; at most one second is kept)."""
        count = max(1, min(len(self._long_energies), round(seconds / LIMITER_PERIOD_S)))
        recent = list(self._long_energies)[-count:]
        return sum(recent) / (len(recent) * LIMITER_PERIOD_S) if recent else IDLE_POWER_W

    @property
    def throttled(self) -> bool:
        """Whether the limiter holds the clock below its maximum (``sw_power_cap``)."""
        return self.clock_mhz < self.max_clock_mhz

    def backend(self):
        """The package's NVML backend reading this GPU (stamped in virtual time): ``backend().read(edge=...)``."""
        from accounting.telemetry.gpu_nvml import NvmlBackend

        self.nvml.nvmlInit()
        return NvmlBackend(self.nvml, 0, now=self.now)

    def sampler(self, device="cuda:0", *args, measure_clock: bool = True, **kwargs):
        """A telemetry window read every 20 ms of virtual time (the real Sampler's rule), through the real backend."""
        return SimulatedGpuSampler(self, device)

    # ---- the seams ----------------------------------------------------------------------------------------------

    def should_flush(self, device, *tensors) -> bool:
        """:func:`accounting.timing.should_flush_l2` on this GPU: the operands' bytes fit in its L2."""
        return sum(x.numel() * x.element_size() for x in tensors) <= L2_BYTES

    def case_factory(self, dtype, m, k, n, device="cuda:0", *, seed=0, fp8_fast_accum=True) -> MatmulCase:
        """:func:`accounting.timing.matmul_case` on this GPU: ``fn()`` queues the product (and multiplies meta
        tensors of the same shapes, so torch's FLOP counter counts it); ``operands`` are meta tensors."""
        name = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(dtype, dtype)
        storage = {"tf32": torch.float32}.get(name) or getattr(torch, name)
        a = torch.empty(m, k, dtype=storage, device="meta")
        b = torch.empty(k, n, dtype=storage, device="meta")
        out = torch.empty(m, n, dtype=torch.bfloat16 if name.startswith("float8") else storage, device="meta")
        counted_a, counted_b = (torch.empty(shape, device="meta") for shape in ((m, k), (k, n)))
        flops = 2 * m * k * n

        def fn():
            self.product(flops, name)
            return torch.matmul(counted_a, counted_b)

        accumulation = None
        if name.startswith("float8"):
            accumulation = "fast" if fp8_fast_accum else "default"
        return MatmulCase(name, (m, k, n), str(device), fn, flops, (a, b, out), name, None, accumulation)

    def install(self, monkeypatch) -> "SimulatedH200":
        """Put this GPU behind the package's seams for one test: ``pynvml``, the CUDA stream and clock, and the
        report timer's synchronize, flush rule, sampler and host clock."""
        from accounting import timing
        from accounting.report import measure

        monkeypatch.setitem(sys.modules, "pynvml", self.nvml)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "simulated stream")
        monkeypatch.setattr(timing, "clock_for", lambda device, cache_bytes=None: self.event_clock(device))
        monkeypatch.setattr(timing, "flush_bytes", lambda device: L2_BYTES)
        monkeypatch.setattr(measure, "synchronize", lambda device: self.synchronize())
        monkeypatch.setattr(measure, "should_flush_l2", self.should_flush)
        monkeypatch.setattr(measure, "Sampler", self.sampler)
        monkeypatch.setattr(measure, "time", types.SimpleNamespace(
            monotonic=self.now, perf_counter=self.now, sleep=self.idle))
        return self

    # ---- the time line ------------------------------------------------------------------------------------------

    def _host(self, seconds: float) -> None:
        self._run_to(self.t + seconds)

    def _launch(self, op: _Op) -> None:
        if len(self.queue) >= QUEUE_DEPTH:
            self._wait(lambda: len(self.queue) < QUEUE_DEPTH)
        self.queue.append(op)

    def _wait(self, done) -> None:
        """The host blocks until ``done()``, then wakes (``SYNC_WAKE_S``)."""
        while not done():
            if not self.queue and self.current is None:
                raise RuntimeError("the host waits for work the simulated GPU was never given")
            self._run_to(self._next_boundary(), stop=done)
        self._host(SYNC_WAKE_S)

    def _next_boundary(self) -> float:
        ends = [self._next_tick] + [s.next_read for s in self._samplers]
        op = self.current or (self.queue[0] if self.queue else None)
        if op is not None:
            ends.append(self.t + self._op_seconds_left(op))
        return min(ends)

    def _rate(self, op: _Op) -> float:
        return RATE_AT_BOOST_TFLOPS[op.dtype] * 1e12 * rate_scale(self.clock_mhz)

    def _op_seconds_left(self, op: _Op) -> float:
        if op.kind == "product":
            return op.work / self._rate(op)
        if op.kind == "spin":
            return op.work / (self.clock_mhz * 1e6)
        return op.work  # flush: seconds; event: 0

    def _consume(self, op: _Op, seconds: float) -> None:
        if op.kind == "product":
            op.work -= seconds * self._rate(op)
        elif op.kind == "spin":
            op.work -= seconds * self.clock_mhz * 1e6
        else:
            op.work -= seconds

    def _power_of(self, op) -> float:
        if op is None:
            return IDLE_POWER_W
        return {"product": lambda: busy_power_w(op.dtype, self.clock_mhz), "spin": lambda: SPIN_POWER_W,
                "flush": lambda: FLUSH_POWER_W, "event": lambda: IDLE_POWER_W}[op.kind]()

    def _run_to(self, until: float, stop=None) -> None:
        """Run the GPU (and the limiter, and open samplers' readings) up to ``until``; ``stop()``: end early."""
        while self.t < until - 1e-15:
            if self.current is None and self.queue:
                self.current = self.queue.popleft()
            op = self.current
            end = min(until, self._next_tick, *(s.next_read for s in self._samplers))
            finishes = op is not None and self.t + self._op_seconds_left(op) <= end
            if finishes:
                end = self.t + self._op_seconds_left(op)
            seconds = max(end - self.t, 0.0)
            watts = self._power_of(op)
            self.energy_j += watts * seconds
            self._tick_energy += watts * seconds
            if op is not None and op.kind == "product":
                self.busy_s += seconds
                self.product_energy_j += watts * seconds
                self.product_flops += min(op.work, seconds * self._rate(op))
            if op is not None:
                self._consume(op, seconds)
            self.t = end
            if finishes:
                self._finish(op)
            if self.t >= self._next_tick - 1e-15:
                self._tick()
            for sampler in list(self._samplers):
                if self.t >= sampler.next_read - 1e-15:
                    sampler.take(edge=False)
            if stop is not None and stop():
                return
        if self.current is None and self.queue and self.queue[0].kind == "event":
            self.current = self.queue.popleft()  # a zero-length mark at the head completes at once
            self._finish(self.current)

    def _finish(self, op: _Op) -> None:
        if op.kind == "event":
            op.event.at = self.t
        if op.kind == "product":
            self.products += 1
        self.current = None
        while self.queue and self.queue[0].kind == "event":  # marks right behind it complete with it
            self.queue.popleft().event.at = self.t

    def _tick(self) -> None:
        self._tick_energies.append(self._tick_energy)
        self._long_energies.append(self._tick_energy)
        self._last_tick_w = self._tick_energy / LIMITER_PERIOD_S
        self._tick_energy = 0.0
        self._next_tick += LIMITER_PERIOD_S
        average = sum(self._tick_energies) / (len(self._tick_energies) * LIMITER_PERIOD_S)
        if average > self.power_limit_w:
            self.clock_mhz = max(MIN_CLOCK_MHZ, self.clock_mhz - CLOCK_STEP_MHZ)
        else:
            self.clock_mhz = min(self.max_clock_mhz, self.clock_mhz + CLOCK_STEP_MHZ)


class SimulatedGpuSampler:
    """``with gpu.sampler("cuda:0") as s: ...`` → ``s.summary``: the real backend read at the edges and every
    ``GPU_INTERVAL_S`` of virtual time, summarised as :class:`accounting.telemetry.sampler.Sampler` does."""

    def __init__(self, gpu: SimulatedH200, device="cuda:0", interval_s: float = GPU_INTERVAL_S):
        self.gpu, self.device, self.interval_s = gpu, sampling._device_name(device), interval_s
        self.summary = None
        self.readings = []
        self.next_read = math.inf

    def take(self, *, edge: bool) -> None:
        reading = self.backend.read(edge=edge)
        self.readings.append(dataclasses.replace(reading, time_s=self.gpu.now()))
        self.next_read = self.gpu.now() + self.interval_s

    def __enter__(self):
        self.backend = sampling._open_backend(self.device, measure_clock=False)
        self.gpu._host(EDGE_READ_S)
        self.take(edge=True)
        self.gpu._samplers.append(self)
        return self

    def __exit__(self, *exc_info):
        self.gpu._samplers.remove(self)
        self.gpu._host(EDGE_READ_S)
        self.take(edge=True)
        self.backend.close()
        self.summary = sampling.summarise(self.device, self.backend, self.readings)
        return False
