"""Validity tags: why a measured number may not say what it seems to (from :mod:`accounting.telemetry` readings).

A figure measured while the device throttled, drew little power, boosted above its
settled clock or shared itself with other work is still a measurement, but a verdict
must not call the device slow or healthy from it without saying so. Each tag is a
string ``"<name>: <detail>"``; the names:

- ``throttled`` — the device reported throttle reasons during the window (named).
- ``power-suspect`` — the window's median power below ``POWER_SUSPECT_FRACTION`` × the power limit
  the device enforces (NVML's enforced limit, read in the window) with no power-cap or thermal
  throttle reason: the figure was not power-saturated, so a hot, loaded device may not hold it
  (where the power is an average over longer than the window, the tag says so: the idle time
  before a short window is in it). The limit, not the run's highest instant reading: instant
  readings overshoot it (894–931 W on a 700 W H200), and a device at its power cap is saturated
  whatever it read.
- ``boosting`` — a sustained candidate ran above ``BOOSTING_FACTOR`` × the clock the
  device settled at after its thermal soak.
- ``busy`` — another process holds more than ``BUSY_OTHER_PROCESS_BYTES`` on the device,
  or a sibling GPU is more than 10 % utilised or holds more than 4 GiB (said for the record: the
  regression gate does not count a sibling, which shares neither this GPU's power limit nor its memory).

>>> validity_tags({"throttle_reasons": [], "power_w_median": 300.0, "power_limit_w": 700.0, "busy_siblings": []})
['power-suspect: 300 W < 0.9 × the enforced power limit, 700 W']
>>> validity_tags({"throttle_reasons": ["sw_power_cap"], "power_w_median": 600.0, "power_limit_w": 700.0})
['throttled: sw_power_cap']
>>> validity_tags({"throttle_reasons": [], "power_w_mean": None})
[]
"""

from accounting._units import readable_bytes
from accounting.telemetry.gpu_amdsmi import AMD_POWER_LIMIT_REASONS, AMD_THERMAL_REASONS
from accounting.telemetry.readings import POWER_AVERAGING_S

THROTTLED = "throttled"
POWER_SUSPECT = "power-suspect"
BOOSTING = "boosting"
BUSY = "busy"
TAG_NAMES = (THROTTLED, POWER_SUSPECT, BOOSTING, BUSY)

POWER_SUSPECT_FRACTION = 0.9
"""Below this share of the enforced power limit (and with no power-cap or thermal throttle reason) a figure is
``power-suspect`` (not power-saturated)."""
POWER_CAP_REASONS = frozenset({"sw_power_cap"}) | AMD_POWER_LIMIT_REASONS
"""Throttle reasons (NVML's and AMD SMI's names) that say the power limit holds the clock: the normal state of a
busy GPU (NVIDIA's ``sw_power_cap``; AMD's package power tracking, ``ppt_power`` and ``ppt0``–``ppt3``)."""
SATURATING_REASONS = (POWER_CAP_REASONS | AMD_THERMAL_REASONS
                      | {"hw_power_brake_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown"})
"""Throttle reasons (NVML's and AMD SMI's names) that say the device is at its power or thermal limit: a window
with one is saturated."""
BOOSTING_FACTOR = 1.04
"""A sustained candidate's clock above this many times the saturated clock is ``boosting``."""
BUSY_OTHER_PROCESS_BYTES = 2 * 2**30
"""Another process holding more than this on the device makes a figure ``busy``."""
OTHER_PROCESSES_HOLD = "other processes hold"
"""How a ``busy`` tag begins its detail (what :mod:`accounting.gate.gpu_rounds` finds in windows recorded before
``window_extra_info`` kept ``other_process_memory_bytes``)."""


def _get(summary, name):
    if summary is None:
        return None
    return summary.get(name) if isinstance(summary, dict) else getattr(summary, name, None)


def window_power_w(summary) -> float | None:
    """The window's power: the median of its readings (one overshooting instant reading cannot move it), else
    the mean (a summary from before medians were kept).

    >>> window_power_w({"power_w_median": 690.0, "power_w_mean": 720.0}), window_power_w({"power_w_mean": 5.0})
    (690.0, 5.0)
    """
    median = _get(summary, "power_w_median")
    return median if median is not None else _get(summary, "power_w_mean")


def summary_clock_mhz(summary) -> float | None:
    """The window's clock: the median of its readings, else their mean (a summary from before medians were kept).

    >>> summary_clock_mhz({"clock_mhz_median": 1455.0, "clock_mhz_mean": 1500.0})
    1455.0
    """
    median = _get(summary, "clock_mhz_median")
    return median if median is not None else _get(summary, "clock_mhz_mean")


def saturating_reasons(summary) -> list[str]:
    """The window's throttle reasons that mean a power or thermal limit held the clock (:data:`SATURATING_REASONS`).

    >>> saturating_reasons({"throttle_reasons": ["sw_power_cap", "hw_slowdown"]})
    ['sw_power_cap']
    """
    return [reason for reason in _get(summary, "throttle_reasons") or () if reason in SATURATING_REASONS]


def validity_tags(summary, *, power_limit_w: float | None = None, saturated_clock_mhz: float | None = None) -> list[str]:
    """The tags a window's telemetry (a :class:`~accounting.telemetry.Summary` or its ``to_dict()``) earns.

    ``power_limit_w``: the enforced power limit (for ``power-suspect``; default the window's own
    ``power_limit_w`` reading); ``saturated_clock_mhz``: the clock after the thermal soak, given only for
    sustained candidates (for ``boosting``). A reading that is ``None`` earns no tag: unknown is not bad.
    """
    tags = []
    reasons = _get(summary, "throttle_reasons") or ()
    if reasons:
        tags.append(f"{THROTTLED}: {', '.join(reasons)}")
    power = window_power_w(summary)
    limit = power_limit_w if power_limit_w is not None else _get(summary, "power_limit_w")
    if (power is not None and limit and power < POWER_SUSPECT_FRACTION * limit
            and not saturating_reasons(summary)):
        tag = f"{POWER_SUSPECT}: {power:.0f} W < {POWER_SUSPECT_FRACTION} × the enforced power limit, {limit:.0f} W"
        source, duration = _get(summary, "power_source"), _get(summary, "duration_s")
        averaged = POWER_AVERAGING_S.get(source, 0.0)
        if duration is not None and duration < averaged:
            tag += f" (power is a {averaged:g} s average, the window {duration:.2f} s: it includes the time before)"
        tags.append(tag)
    clock = _get(summary, "clock_mhz_mean")
    if clock is not None and saturated_clock_mhz and clock > BOOSTING_FACTOR * saturated_clock_mhz:
        tags.append(f"{BOOSTING}: {clock:.0f} MHz > {BOOSTING_FACTOR} × the saturated {saturated_clock_mhz:.0f} MHz")
    others = _get(summary, "other_process_memory_bytes")
    siblings = list(_get(summary, "busy_siblings") or ())
    busy = []
    if others is not None and others > BUSY_OTHER_PROCESS_BYTES:
        busy.append(f"{OTHER_PROCESSES_HOLD} {readable_bytes(others)} on the device")
    busy.extend(siblings)
    if busy:
        tags.append(f"{BUSY}: {'; '.join(busy)}")
    return tags


def tag_names(tags) -> list[str]:
    """The names of ``tags`` (the part before the colon).

    >>> tag_names(["throttled: hw_slowdown", "busy: GPU 1: 50% utilised, 1.0 GiB used"])
    ['throttled', 'busy']
    """
    return [tag.split(":", 1)[0] for tag in tags]


def window_extra_info(summary, *, work_flops: int, power_limit_w: float | None = None) -> dict:
    """What a benchmark's ``extra_info`` records about its timed window: clock, power, energy efficiency, tags.

    ``work_flops``: all FLOPs done inside the window. ``tflop_per_j`` is ``None`` (with the
    reason in ``energy_unavailable``) where the window has no energy reading.

    >>> info = window_extra_info({"energy_j": 40.0, "energy_source": "counter", "throttle_reasons": ["hw_slowdown"],
    ...                           "clock_mhz_mean": 1410.0, "power_w_mean": 400.0}, work_flops=10**14)
    >>> info["tflop_per_j"], info["energy_source"], info["tags"]
    (2.5, 'counter', ['throttled: hw_slowdown'])
    """
    energy = _get(summary, "energy_j")
    unavailable = _get(summary, "unavailable") or {}
    return {
        "clock_mhz_mean": _get(summary, "clock_mhz_mean"),
        "clock_mhz_min": _get(summary, "clock_mhz_min"),
        "power_w_mean": _get(summary, "power_w_mean"),
        "temperature_c_max": _get(summary, "temperature_c_max"),
        "throttle_reasons": list(_get(summary, "throttle_reasons") or ()),
        "energy_j": energy,
        "energy_source": _get(summary, "energy_source"),
        "tflop_per_j": work_flops / 1e12 / energy if energy else None,
        "energy_unavailable": None if energy else unavailable.get("energy_j", "no telemetry"),
        "power_w_median": window_power_w(summary),
        "power_limit_w": power_limit_w if power_limit_w is not None else _get(summary, "power_limit_w"),
        "other_process_memory_bytes": _get(summary, "other_process_memory_bytes"),
        "tags": validity_tags(summary, power_limit_w=power_limit_w),
    }
