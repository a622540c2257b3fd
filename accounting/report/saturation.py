"""Whether a timed window may be published as *sustained*: seconds long, sampled throughout, power-saturated, settled.

A sustained figure says what a hot device does under steady load, so its window must show it:

- it lasted at least ``SUSTAINED_MIN_S`` (one second: a power limiter acts over tens of milliseconds and
  an energy counter updates every 20–100 ms; 9 single products of 1–2 ms each measure the burst again);
- on a GPU, telemetry sampled throughout it, at least ``MIN_READINGS`` readings (its clock and power
  are the readings' medians: an edge reading taken at the end of a soak cannot stand for them);
- evidence of saturation: the average power (the energy counter's, else the readings' median) at least
  ``SATURATION_POWER_FRACTION`` × the power limit the device enforces, or a power-cap or thermal throttle
  reason during the window;
- a settled clock: the medians of its first and second half of readings within
  ``CLOCK_SETTLED_FRACTION`` of each other;
- the figure within what the SMs can do at that clock
  (:func:`accounting.hardware.flops_per_clock.physical_check`).

A device that reports no power limit and no throttle reasons (a CPU) cannot show saturation; its figure
is published with the tag ``saturation-unknown`` rather than withheld for what it cannot report.

>>> gpu = {"backend": "nvml", "samples": 103, "clock_mhz_median": 1455.0, "clock_mhz_early": 1455.0,
...        "clock_mhz_late": 1455.0, "power_w_median": 691.0, "power_limit_w": 700.0, "throttle_reasons": ["sw_power_cap"]}
>>> print(withheld_because(gpu, seconds=2.07))
None
>>> for reason in withheld_because({**gpu, "samples": 2}, seconds=0.015).split("; "):
...     print(reason)
the window ran 0.015 s, under the 1 s a sustained figure needs
2 telemetry readings in the window, under the 10 a sustained figure needs
"""

import statistics

from accounting.hardware.devices import DeviceInfo
from accounting.hardware.flops_per_clock import highest_clock_mhz, nvidia_capability, physical_check
from accounting.telemetry.validity import POWER_SUSPECT_FRACTION, saturating_reasons, window_power_w

SUSTAINED_MIN_S = 1.0
"""A sustained window lasts at least this long."""
SUSTAINED_TARGET_S = 2.0
"""…and this long where the budget allows (mamf-finder's MSMF and the recorded H200 windows used 2 s)."""
MIN_READINGS = 10
"""A GPU's sustained window has at least this many telemetry readings (the sampler reads every 20 ms)."""
SATURATION_POWER_FRACTION = POWER_SUSPECT_FRACTION
"""At or above this share of the enforced power limit a window is power-saturated."""
CLOCK_SETTLED_FRACTION = 0.03
"""The clock has settled when its first- and second-half medians differ by at most this share of their median."""
SATURATION_UNKNOWN = "saturation-unknown"
"""The tag of a sustained figure from a device that reports no power limit and no throttle reasons."""
GPU_BACKENDS = frozenset({"nvml", "amdsmi"})


def is_gpu_window(telemetry) -> bool:
    """Whether the window was read by a GPU's telemetry (whose readings the sustained rules ask for)."""
    telemetry = telemetry or {}
    return telemetry.get("backend") in GPU_BACKENDS or telemetry.get("power_limit_w") is not None


def window_average_power_w(telemetry) -> float | None:
    """The window's average power: its energy counter's joules over its seconds where it has an energy counter (what a
    power limiter acts on: no instant reading, high or low, moves it), else the median of its readings.

    >>> window_average_power_w({"energy_j": 1380.0, "energy_source": "counter", "duration_s": 2.0, "power_w_median": 650.0})
    690.0
    >>> window_average_power_w({"energy_j": 1300.0, "energy_source": "power×time", "duration_s": 2.0, "power_w_median": 650.0})
    650.0
    """
    telemetry = telemetry or {}
    joules, seconds = telemetry.get("energy_j"), telemetry.get("duration_s")
    if telemetry.get("energy_source") == "counter" and joules is not None and seconds:
        return joules / seconds
    return window_power_w(telemetry)


def saturation_evidence(telemetry) -> str | None:
    """What shows the window was power- or thermally saturated (``None``: nothing does).

    >>> saturation_evidence({"power_w_median": 640.0, "power_limit_w": 700.0, "throttle_reasons": []})
    'power 640 W ≥ 0.9 × the enforced limit 700 W'
    >>> saturation_evidence({"power_w_median": 500.0, "power_limit_w": 700.0, "throttle_reasons": ["sw_power_cap"]})
    'throttle reason sw_power_cap'
    """
    telemetry = telemetry or {}
    power, limit = window_average_power_w(telemetry), telemetry.get("power_limit_w")
    if power is not None and limit and power >= SATURATION_POWER_FRACTION * limit:
        return f"power {power:.0f} W ≥ {SATURATION_POWER_FRACTION} × the enforced limit {limit:.0f} W"
    reasons = saturating_reasons(telemetry)
    if reasons:
        return f"throttle reason {', '.join(reasons)}"
    return None


def not_saturated(telemetry) -> bool:
    """Whether a GPU window shows no saturation (:func:`saturation_evidence` finds none).

    >>> not_saturated({"backend": "nvml", "power_w_median": 500.0, "power_limit_w": 700.0}), not_saturated({})
    (True, False)
    """
    return is_gpu_window(telemetry) and saturation_evidence(telemetry) is None


def soak_may_help(telemetry) -> bool:
    """Whether a longer thermal soak may turn the window into a sustained figure: it was not saturated
    (:func:`not_saturated`) or its clock was still moving (:func:`clock_unsettled`)."""
    return not_saturated(telemetry) or clock_unsettled(telemetry) is not None


def clock_unsettled(telemetry) -> str | None:
    """Why the window's clock had not settled (``None``: it had, or its halves are unknown).

    >>> clock_unsettled({"clock_mhz_early": 1650.0, "clock_mhz_late": 1455.0, "clock_mhz_median": 1500.0})
    'the clock was still moving: 1650 MHz in the first half of the window, 1455 MHz in the second'
    """
    telemetry = telemetry or {}
    early, late = telemetry.get("clock_mhz_early"), telemetry.get("clock_mhz_late")
    if early is None or late is None:
        return None
    centre = statistics.fmean([early, late])
    if centre > 0 and abs(early - late) > CLOCK_SETTLED_FRACTION * centre:
        return f"the clock was still moving: {early:.0f} MHz in the first half of the window, {late:.0f} MHz in the second"
    return None


def physical_facts(info: DeviceInfo):
    """``(compute capability, SM count)`` of a CUDA device for :func:`figure_check`; ``None`` on a CPU. The capability
    is an NVIDIA GPU's only (:func:`~accounting.hardware.flops_per_clock.nvidia_capability`): ROCm reports a gfx
    version in the same fields (gfx90a as (9, 0)), which must not read Hopper's rates.

    >>> physical_facts(DeviceInfo("cuda", "NVIDIA H200", 0, 2**37, compute_capability=(9, 0), multiprocessors=132))
    ((9, 0), 132)
    >>> physical_facts(DeviceInfo("cuda", "AMD Instinct MI250X/MI250", 0, 2**36, compute_capability=(9, 0),
    ...                           multiprocessors=110, arch="gfx90a"))
    (None, 110)
    """
    return (nvidia_capability(info), info.multiprocessors) if info.kind == "cuda" else None


def figure_check(flops_per_s, dtype, clock_mhz, physical) -> str | None:
    """:func:`accounting.hardware.flops_per_clock.physical_check` of a figure at ``clock_mhz``; ``physical``:
    ``(compute capability, SM count)`` of the device, ``None`` (unknown) or no figure: not made.

    >>> figure_check(793.1e12, "bfloat16", 1350.0, ((9, 0), 132))[:40]
    'impossible: 793.1 TFLOP/s > 132 SMs × 40'
    >>> print(figure_check(793.1e12, "bfloat16", 1350.0, None))
    None
    """
    if physical is None or not flops_per_s:
        return None
    capability, multiprocessors = physical
    return physical_check(flops_per_s, capability, dtype, multiprocessors=multiprocessors, clock_mhz=clock_mhz)


def withheld_because(telemetry, *, seconds: float, flops_per_s: float | None = None, dtype: str | None = None,
                     physical=None) -> str | None:
    """Why a window of ``seconds`` with ``telemetry`` (``Summary.to_dict()``) is not a sustained figure (every reason,
    joined by ``"; "``); ``None``: it is one.

    ``physical``: ``(compute capability, SM count)`` for the physical check of ``flops_per_s`` of ``dtype``.
    """
    telemetry = telemetry or {}
    reasons = []
    if seconds < SUSTAINED_MIN_S:
        reasons.append(f"the window ran {seconds:.3g} s, under the {SUSTAINED_MIN_S:g} s a sustained figure needs")
    gpu = is_gpu_window(telemetry)
    readings = telemetry.get("samples") or 0
    if gpu and readings < MIN_READINGS:
        reasons.append(f"{readings} telemetry readings in the window, under the {MIN_READINGS} a sustained figure needs")
    impossible = None if dtype is None else figure_check(flops_per_s, dtype, highest_clock_mhz(telemetry), physical)
    if impossible:
        reasons.append(impossible)
    if not_saturated(telemetry):
        power, limit = window_average_power_w(telemetry), telemetry.get("power_limit_w")
        drew = "power unknown" if power is None else f"{power:.0f} W"
        against = "" if not limit else f" < {SATURATION_POWER_FRACTION} × the enforced limit {limit:.0f} W"
        reasons.append(f"not power-saturated: {drew}{against} and no power-cap or thermal throttle reason")
    unsettled = clock_unsettled(telemetry)
    if unsettled:
        reasons.append(unsettled)
    return "; ".join(reasons) or None


def saturation_tags(telemetry) -> list[str]:
    """``[saturation-unknown: ...]`` for a device that cannot show saturation (not a GPU window), else ``[]``."""
    if is_gpu_window(telemetry) or saturation_evidence(telemetry) is not None:
        return []
    return [f"{SATURATION_UNKNOWN}: the device reports no power limit or throttle reason, so saturation is not shown"]
