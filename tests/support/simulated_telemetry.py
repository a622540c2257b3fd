"""A telemetry sampler on a simulated clock, for report tests whose timed work takes no real time.

The real :class:`accounting.telemetry.sampler.Sampler` reads its backend every 20 ms of wall time; a fake
matmul that "takes" two simulated seconds returns at once, so the real one would see two edge readings.
:class:`SimulatedSampler` opens the same backend (a fake ``pynvml`` installed in ``sys.modules``), and on exit
takes one reading per ``interval_s`` of the simulated time that passed (at most ``MAX_READINGS``), each stamped
with its simulated time, then summarises them as the real sampler does. ``on_read(gpu_index)`` runs before each
reading, so a test can feed the fake device the readings a real one gave.
"""

import dataclasses

from accounting.telemetry import sampler as sampling
from accounting.telemetry.readings import GPU_INTERVAL_S

MAX_READINGS = 400


class SimulatedSampler:
    """``with SimulatedSampler(device, clock): ...`` → ``.summary`` (see the module docstring)."""

    on_read = None
    """Class-wide hook ``on_read(reading_index_in_window, readings_in_window)`` called before each reading."""

    def __init__(self, device, clock, interval_s=GPU_INTERVAL_S):
        self.device = sampling._device_name(device)
        self.clock = clock
        self.interval_s = interval_s
        self.summary = None

    def __enter__(self):
        self.backend = sampling._open_backend(self.device, measure_clock=False)
        self.started = self.clock()
        return self

    def __exit__(self, *exc_info):
        elapsed = max(self.clock() - self.started, 0.0)
        count = min(MAX_READINGS, int(elapsed / self.interval_s)) + 2
        readings = []
        for position in range(count):
            if SimulatedSampler.on_read is not None:
                SimulatedSampler.on_read(position, count)
            edge = position in (0, count - 1)
            reading = self.backend.read(edge=edge)
            stamp = self.started + elapsed * position / (count - 1)
            readings.append(dataclasses.replace(reading, time_s=stamp))
        self.backend.close()
        self.summary = sampling.summarise(self.device, self.backend, readings)
        return False
