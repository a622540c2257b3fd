"""A GPU's settings that set its speed: runs under different ones are not compared.

A GPU held at its power limit runs at the clock that limit allows, so the same code reads
slower under a 500 W limit than under 700 W; application clocks set by an administrator
(``nvidia-smi -ac``) cap the clock the same way. These are settings of the machine, not
noise: the gate reads them with each run (:func:`read`, kept in the load guard's readings
under ``"settings"``) and compares them exactly (:func:`settings_difference`; the power limit to within
:data:`POWER_LIMIT_TOLERANCE_W`, NVML's milliwatt rounding). A baseline run
taken under other settings is left out, named; where none is left, the benchmark is not
compared. A setting a run did not record (an older run, a driver that does not say) decides nothing.

>>> settings_difference({"power_limit_w": 700.0, "applications_sm_clock_mhz": 1980},
...                     {"power_limit_w": 500.0, "applications_sm_clock_mhz": 1980})
'power limit 700 W in the baseline, 500 W here'
>>> settings_difference({"power_limit_w": 700.0}, {"power_limit_w": None})
''
"""

import math

SETTINGS_KEY = "settings"
"""Key of the settings in a load-guard reading (``accounting_gate.before.settings``)."""
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
"""``nvmlClockType_t`` values (nvml.h), used where pynvml does not name them."""
FIELDS = {"power_limit_w": ("power limit", "W"), "applications_sm_clock_mhz": ("application SM clock", "MHz"),
          "applications_memory_clock_mhz": ("application memory clock", "MHz")}
"""Each setting compared: its key, how a message names it, its unit."""
POWER_LIMIT_TOLERANCE_W = 1.0
"""Power limits this close are the same (NVML reports milliwatts; a limit set in watts may read 699.999)."""


def read(nvml, handle) -> dict:
    """The settings of the GPU behind ``handle`` (``nvml``: the pynvml module): each ``None`` where NVML does not say.

    The enforced power limit (``nvmlDeviceGetEnforcedPowerLimit``, milliwatts: the lowest of every limit set)
    and the application clocks (``nvmlDeviceGetApplicationsClock``).
    """
    def ask(name, *args):
        call = getattr(nvml, name, None)
        if call is None:
            return None
        try:
            value = call(handle, *args)
        except Exception:  # noqa: BLE001 - not supported here, no permission: the setting is unknown
            return None
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    limit = ask("nvmlDeviceGetEnforcedPowerLimit")
    return {"power_limit_w": None if limit is None else limit / 1000,
            "applications_sm_clock_mhz": ask("nvmlDeviceGetApplicationsClock", getattr(nvml, "NVML_CLOCK_SM",
                                                                                       NVML_CLOCK_SM)),
            "applications_memory_clock_mhz": ask("nvmlDeviceGetApplicationsClock", getattr(nvml, "NVML_CLOCK_MEM",
                                                                                           NVML_CLOCK_MEM))}


def run_settings(guard: dict | None) -> dict | None:
    """The settings a saved run recorded (its load guard's reading before the run), ``None`` where it has none.

    Where the reading has no settings but its telemetry gave the enforced power limit, that is the setting known.

    >>> run_settings({"before": {"power_limit_w": 700.0}})
    {'power_limit_w': 700.0}
    """
    reading = (guard or {}).get("before")
    if not isinstance(reading, dict):
        return None
    value = reading.get(SETTINGS_KEY)
    if isinstance(value, dict):
        return value
    limit = reading.get("power_limit_w")
    return {"power_limit_w": limit} if isinstance(limit, (int, float)) and not isinstance(limit, bool) else None


def _same(key, first, second) -> bool:
    if key == "power_limit_w":
        return abs(first - second) <= POWER_LIMIT_TOLERANCE_W
    return first == second


def settings_difference(baseline: dict | None, current: dict | None) -> str:
    """How two runs' settings differ, for a message (``""``: the same, or not both known)."""
    parts = []
    for key, (words, unit) in FIELDS.items():
        first, second = (baseline or {}).get(key), (current or {}).get(key)
        numbers = [value for value in (first, second)
                   if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)]
        if len(numbers) == 2 and not _same(key, first, second):
            parts.append(f"{words} {first:g} {unit} in the baseline, {second:g} {unit} here")
    return "; ".join(parts)


def same_settings(baseline_runs, current_runs, notes) -> tuple[list, list]:
    """The baseline runs taken under the current runs' settings (:mod:`accounting.gate.settings`), and how the others
    differ (:func:`settings_difference`); each one left out gets a note in ``notes`` naming the difference."""
    current = next((run_settings(run.guard) for run in current_runs if run_settings(run.guard)), None)
    kept, differences = [], []
    for run in baseline_runs:
        difference = settings_difference(run_settings(run.guard), current)
        if difference:
            differences.append(difference)
            notes.append(f"baseline run {run.label} not compared: taken under other settings ({difference})")
        else:
            kept.append(run)
    return kept, differences
