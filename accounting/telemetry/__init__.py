"""Device readings beside a timed window: clock, power, energy, temperature, throttling, neighbours.

A TFLOP/s figure without the clock and power behind it cannot be compared: a
throttled GPU reads "slow", a boosting one "fast". This module is the one place the
package reads them; the report, the regression gate and the fleet all use it.

- :func:`snapshot` takes one reading now (a :class:`Summary` of duration 0).
- :class:`Sampler` samples in a background thread while the ``with`` block runs and
  leaves a :class:`Summary` of the window in ``sampler.summary``.

Backends (chosen by the device; see :mod:`accounting.telemetry.gpu` and
:mod:`accounting.telemetry.cpu`): NVML through ``nvidia-ml-py`` (``pip install
'pytest-accounting[gpu]'``) for CUDA devices, AMD SMI (``amdsmi``) on ROCm, and on CPUs what
the machine exposes (cpufreq or ``cpu MHz``, RAPL energy, hwmon temperature; in a VM
that shows only a nominal clock, the clock measured just before and after the window).
A reading the backend cannot give is ``None`` (:data:`UNAVAILABLE`) and
``Summary.unavailable`` says why; nothing is invented and nothing crashes.

Sampling intervals: GPUs every 20 ms (50 Hz, NVML calls are ~10 µs each and the
timed work runs on the GPU, not on the sampling core); CPUs every 250 ms, because
there the sampler competes for the very cores being timed, and nothing it reads
changes faster than that matters (``loadavg`` moves every 5 s, RAPL and cpufreq are
read as counters or averages, a RAPL counter wraps no sooner than ~20 s at 200 W).

Modules: :mod:`~accounting.telemetry.readings` (the types), :mod:`~accounting.telemetry.cpu` and
:mod:`~accounting.telemetry.gpu` (the backends), :mod:`~accounting.telemetry.sampler` (the window),
:mod:`~accounting.telemetry.validity` (the tags a window earns). The names below are the ones a
user needs.

>>> from accounting.telemetry import snapshot
>>> snapshot("cpu").device
'cpu'
"""

from accounting.telemetry.readings import UNAVAILABLE, Reading, Summary
from accounting.telemetry.sampler import Sampler, host_cpu_times, sample_cost_s, snapshot, summarise

__all__ = ["UNAVAILABLE", "Reading", "Sampler", "Summary", "host_cpu_times", "sample_cost_s", "snapshot", "summarise"]
