"""The report as one JSON-ready document: machine, settings, bandwidth, every matmul, verdicts.

The terminal table, the PNG and ``--json`` are all drawn from this one dict, so they
cannot disagree. Its fields (``SCHEMA`` names the version):

- ``schema``, ``created_utc``, ``elapsed_s``
- ``settings``: ``device``, ``dtypes``, ``budget_s``
- ``machine``: ``platform``, ``python``, ``torch``, ``accounting``, ``logical_cpus``,
  ``load_average_1min`` (before measuring), ``device`` (``kind``, ``name``, ``index``,
  ``memory_bytes``, ``compute_capability``, ``cpu_flags``, ``cores``, ``clock_ghz``, … as
  :class:`accounting.hardware.devices.DeviceInfo` has them)
- ``bandwidth``: ``bytes_moved``, ``seconds``, ``iqr_s``, ``repeats``, ``measured_bytes_per_s``,
  ``spec_bytes_per_s`` (``null`` where no spec figure is known, as for CPUs), ``fraction_of_spec``
- ``dtypes``: per dtype ``native``, ``judged``, ``emulated``, ``not_native_reason``, ``runs_as``
  (the dtype that ran: the fp8 variant on gfx942), ``matmul_path`` and ``mfu_against``
  (:mod:`accounting.hardware.native`; a dtype that is not native is measured, never judged),
  ``peak_flops_per_s``, ``peak_source``, ``floor``, ``ridge_flop_per_byte``,
  ``ridge_basis``, ``best`` (a measurement), ``median_flops_per_s``, ``median_tflops``,
  ``mfu`` (best ÷ peak), ``median_mfu``, ``measurements`` (each: ``m``, ``k``, ``n``, ``size``,
  ``flops``, ``seconds``, ``iqr_s``, ``repeats``, ``flops_per_s``, ``tflops``, ``mfu``,
  ``arithmetic_intensity``, ``bound``, ``phase``) and ``verdict`` (``status``, ``healthy``,
  ``mfu``, ``floor``, ``shortfall``, ``message``)
- ``notes``: things the reader should know (a dtype skipped, an unknown spec figure)
- ``judged_dtypes``: the dtypes the machine verdict is drawn from (the native ones)
- ``verdict``: ``healthy``, ``below floor`` or ``unknown`` for the machine as a whole, from
  the judged dtypes only

Telemetry (:mod:`accounting.telemetry`) adds: per measurement ``clock_mhz``, ``power_w``
and validity ``tags`` (:mod:`accounting.telemetry.validity`); per dtype ``headlines`` (``burst`` and
``sustained``, each with TFLOP/s, shape, clock, power, energy, ``j_per_tflop``, tags,
whether published and why not, and a command that reproduces it), ``j_per_tflop`` (from
the sustained window) and the verdict's ``tags``; at the top ``telemetry`` (the run's
highest clock and power, and the thermal soak).
"""

import datetime
import importlib.metadata
import json
import math
import os
import platform
from dataclasses import dataclass

import torch

from accounting._units import TERA
from accounting.console import DISTRIBUTION
from accounting.flops import achieved_mfu
from accounting.hardware.flops_per_clock import IMPOSSIBLE, highest_clock_mhz
from accounting.hardware.peaks import PEAK_TFLOPS_ENV
from accounting.report.accumulation import accumulation_of
from accounting.report.roofline import arithmetic_intensity, bound, ridge_point
from accounting.report.saturation import figure_check
from accounting.report.sweep import summarise
from accounting.report.verdict import NOT_JUDGED, UNKNOWN, WRONG_RESULT, judge, not_judged, overall, wrong_result
from accounting.telemetry.validity import validity_tags

SCHEMA = "accounting-report/1"



@dataclass(frozen=True)
class BandwidthMeasurement:
    """A timed device copy: ``bytes_moved`` counts bytes read plus bytes written."""

    bytes_moved: int
    seconds: float
    iqr_s: float
    repeats: int

    @property
    def bytes_per_second(self) -> float:
        """Achieved bandwidth: ``bytes_moved / seconds``."""
        return self.bytes_moved / self.seconds


def ridge_basis(*, spec_peak: bool, spec_bandwidth: bool) -> str:
    """What a ridge point was computed from, in words: the figures actually used.

    >>> ridge_basis(spec_peak=True, spec_bandwidth=True)
    'spec peak FLOP/s / spec bandwidth'
    >>> ridge_basis(spec_peak=False, spec_bandwidth=True)
    'best measured FLOP/s / spec bandwidth'
    """
    flops = "spec peak" if spec_peak else "best measured"
    memory = "spec" if spec_bandwidth else "measured"
    return f"{flops} FLOP/s / {memory} bandwidth"


def _finite(value):
    """``value`` as a JSON number, ``None`` where it is not finite (JSON has no infinity)."""
    return value if value is None or math.isfinite(value) else None


def check_dict(check) -> dict | None:
    """A :class:`~accounting.health.results.ResultCheck` as plain JSON values (``None`` for no check).

    ``excess`` (worst |residual| / tolerance; at most 1 passes) is ``null`` for a result that is not finite.
    ``checked`` is false for a product with no bound to judge it by (``not_checked``: why; not a failure);
    ``accumulation`` is the fp8 accumulation whose bound was used.

    >>> from accounting.health.results import ResultCheck
    >>> not_finite = ResultCheck("float32", (8, 4, 2), float("inf"), 3, (0, 2), float("nan"), 1e-6, True)
    >>> check_dict(not_finite)["excess"] is None
    True
    """
    if check is None:
        return None
    return {"ok": check.ok, "shape": list(check.shape), "excess": _finite(check.excess), "row": check.row,
            "columns": list(check.columns), "residual": _finite(check.residual), "tolerance": _finite(check.tolerance),
            "repeat_identical": check.repeat_identical, "reason": check.reason,
            "checked": getattr(check, "checked", True), "not_checked": getattr(check, "note", "") or None,
            "accumulation": getattr(check, "accumulation", None)}


def checks_summary(measurements, *, seconds: float | None = None, skipped=()) -> dict:
    """What the result checks of one dtype's products found: how many ran, which failed, the worst, their cost.

    ``seconds``: the time the checks took (outside the timed calls); ``skipped``: products not checked, and why;
    ``not_checked``: checks with no bound to judge their product by (never ``failed``).
    """
    checks = [done.check for done in measurements if getattr(done, "check", None) is not None]
    judged = [check for check in checks if getattr(check, "checked", True)]
    unjudged = [check for check in checks if not getattr(check, "checked", True)]
    finite = [check.excess for check in judged if math.isfinite(check.excess)]
    worst = math.inf if len(finite) < len(judged) else max(finite, default=None)
    return {"checked": len(judged), "failed": [check_dict(check) for check in checks if not check.ok],
            "not_checked": [check_dict(check) for check in unjudged],
            "worst_excess": _finite(worst), "seconds": seconds,
            "skipped": list(skipped)}


def _measurement_row(done, peak, ridge, physical=None) -> dict:
    intensity = arithmetic_intensity(done.m, done.k, done.n, done.dtype)
    telemetry = getattr(done, "telemetry", None) or {}
    tags = validity_tags(telemetry or None)
    # the highest clock the window read: the product ran at most at it (a lower reading may predate the product)
    impossible = figure_check(done.flops_per_second, done.dtype, highest_clock_mhz(telemetry), physical)
    if impossible:
        tags.append(impossible)
    return {
        "m": done.m, "k": done.k, "n": done.n, "size": done.size,
        "flops": done.flops, "seconds": done.seconds, "iqr_s": done.iqr_s, "repeats": done.repeats,
        "flops_per_s": done.flops_per_second, "tflops": done.flops_per_second / TERA,
        "mfu": achieved_mfu(done.flops, done.seconds, peak),
        "arithmetic_intensity": intensity,
        "bound": None if ridge is None else bound(intensity, ridge),
        "phase": done.phase,
        "clock_mhz": telemetry.get("clock_mhz_mean"),
        # the spread behind that mean: a row quoted at 1890 MHz may have read 1455 in part of its window
        **{f"clock_mhz_{stat}": telemetry.get(f"clock_mhz_{stat}") for stat in ("min", "median", "max")},
        "power_w": telemetry.get("power_w_mean"),
        "tags": tags,
        "check": check_dict(getattr(done, "check", None)),
    }


def dtype_section(dtype: str, measurements, *, peak, floor, bandwidth, spec_bandwidth, reason=None,
                  peak_source=None, native=None, mfu_against=None, headlines=None, physical=None,
                  check_seconds: float | None = None, checks_skipped=()) -> dict:
    """Everything the report says about one dtype.

    ``bandwidth`` is the measured bytes/s (or ``None``); ``reason`` explains a missing
    peak in the verdict. ``native`` is :func:`accounting.hardware.native.native_matmul`'s
    answer (``None``: taken as native); a dtype that is not native is measured and
    shown with its MFU against ``mfu_against`` (the float32 path's peak, for a CPU
    that emulates it) but gets no floor and a ``not judged`` verdict.
    ``headlines``: ``{"burst": Headline, "sustained": Headline}``
    (:mod:`accounting.report.headlines`); ``physical``: ``(compute capability, SM count)`` of the device, for
    each row's physical check (:func:`~accounting.report.saturation.figure_check` at the highest clock the row's
    window read: a figure above what the SMs can do at that clock is tagged ``impossible``). A verdict judged from a
    tagged number names the tags.
    A product that failed its result check (each measurement's ``check``) makes the verdict
    ``wrong result``, whatever the speed; ``checks`` sums the checks up (``check_seconds`` their cost).
    """
    summary = summarise(measurements)
    best = summary["best"]
    memory_speed = spec_bandwidth or bandwidth
    roof = peak if peak is not None else (best.flops_per_second if best else None)
    ridge, basis = None, None
    if roof and memory_speed:
        ridge = ridge_point(roof, memory_speed)
        basis = ridge_basis(spec_peak=peak is not None, spec_bandwidth=bool(spec_bandwidth))
    rows = [_measurement_row(done, peak, ridge, physical) for done in measurements]
    best_row = None if best is None else _measurement_row(best, peak, ridge, physical)
    median = summary["median_flops_per_second"]
    best_mfu = best_row["mfu"] if best_row else None
    if not rows:
        reason = reason or "nothing measured: the budget ran out first"
    elif peak is None:
        reason = reason or f"no spec peak for {dtype} on this device (set ${PEAK_TFLOPS_ENV})"
    judged = native is None or native.native
    if judged:
        verdict = judge(dtype, best_mfu, floor, best_flops=best_row["flops_per_s"] if best_row else None,
                        peak_flops=peak, reason=reason)
    else:
        floor = None  # a floor is written for native hardware: it never applies here
        verdict = not_judged(dtype, best_mfu, label=native.label, reason=native.reason,
                             peak_label=mfu_against or "its peak")
    failed = [done.check for done in measurements if getattr(done, "check", None) is not None and not done.check.ok]
    if failed:
        verdict = wrong_result(dtype, failed, mfu=best_mfu, floor=floor)
    verdict = verdict.as_dict()
    impossible = [tag for tag in (best_row or {}).get("tags", []) if tag.startswith(f"{IMPOSSIBLE}:")]
    if impossible and verdict["status"] != WRONG_RESULT:  # the figure and its clock cannot both be true
        verdict.update(status=UNKNOWN, healthy=None, shortfall=None,
                       message=f"unknown: the best figure fails the physical check ({impossible[0]})")
    verdict["tags"] = list(best_row["tags"]) if best_row else []
    if verdict["tags"] and verdict["healthy"] is not None:
        verdict["message"] += f" — from a tagged number ({'; '.join(verdict['tags'])})"
    headline_dicts = headline_documents(headlines, peak)
    sustained = headline_dicts.get("sustained") or {}
    return {
        "native": None if native is None else native.native,
        "accumulation": accumulation_of(dtype),
        "judged": judged,
        "emulated": False if native is None else native.emulated,
        "not_native_reason": None if native is None else native.reason,
        "runs_as": dtype if native is None else native.runs_as,
        "matmul_path": None if native is None else native.path,
        "mfu_against": None if judged else mfu_against,
        "peak_flops_per_s": peak,
        "peak_source": peak_source,
        "floor": floor,
        "ridge_flop_per_byte": ridge,
        "ridge_basis": basis,
        "best": best_row,
        "median_flops_per_s": median,
        "median_tflops": None if median is None else median / TERA,
        "mfu": best_mfu,
        "median_mfu": None if (median is None or peak is None) else median / peak,
        "measurements": rows,
        "verdict": verdict,
        "headlines": headline_dicts,
        "j_per_tflop": sustained.get("j_per_tflop"),
        "checks": checks_summary(measurements, seconds=check_seconds, skipped=checks_skipped),
    }


def headline_documents(headlines, peak) -> dict:
    """The headlines as JSON values, each with its MFU against ``peak`` (fp8 figures of both accumulations against
    the same dense fp8 peak); ``default_accumulation`` (fp8) nested the same way, with its result check.

    >>> from accounting.report.headlines import Headline
    >>> found = headline_documents({"burst": Headline("float8_e4m3fn", "burst", True, flops_per_s=1.5e15,
    ...                                                accumulation="fast")}, 1978.9e12)
    >>> round(found["burst"]["mfu"], 3), found["burst"]["accumulation"]
    (0.758, 'fast')
    """
    documents = {}
    for kind, figure in (headlines or {}).items():
        if kind == "check":
            documents[kind] = check_dict(figure)
        elif isinstance(figure, dict):
            documents[kind] = headline_documents(figure, peak)
        else:
            document = figure.to_dict()
            rate = document.get("flops_per_s")
            document["mfu"] = rate / peak if rate and peak else None
            documents[kind] = document
    return documents


def bandwidth_section(measured: "BandwidthMeasurement | None", spec_bytes_per_s: float | None) -> dict:
    """The copy measurement next to the spec figure (``None`` where none is known).

    >>> section = bandwidth_section(BandwidthMeasurement(2 * 2**28, 0.05, 0.001, 5), None)
    >>> round(section["measured_bytes_per_s"] / 1e9, 2), section["fraction_of_spec"]
    (10.74, None)
    """
    if measured is None:
        return {"bytes_moved": None, "seconds": None, "iqr_s": None, "repeats": None,
                "measured_bytes_per_s": None, "spec_bytes_per_s": spec_bytes_per_s, "fraction_of_spec": None}
    speed = measured.bytes_per_second
    return {
        "bytes_moved": measured.bytes_moved, "seconds": measured.seconds, "iqr_s": measured.iqr_s,
        "repeats": measured.repeats, "measured_bytes_per_s": speed, "spec_bytes_per_s": spec_bytes_per_s,
        "fraction_of_spec": None if not spec_bytes_per_s else speed / spec_bytes_per_s,
    }


def machine_section(device: dict, *, load_average: float | None = None) -> dict:
    """Versions, platform and the load before measuring (1-minute average), around the device's description."""
    try:
        accounting_version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        accounting_version = None
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "accounting": accounting_version,
        "logical_cpus": os.cpu_count(),
        "load_average_1min": load_average,
        "device": device,
    }


def assemble(*, settings: dict, machine: dict, bandwidth: dict, dtypes: dict, elapsed_s: float, notes=()) -> dict:
    """The whole document, with the machine-wide verdict computed from the dtypes'."""
    return {
        "schema": SCHEMA,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "elapsed_s": elapsed_s,
        "settings": settings,
        "machine": machine,
        "bandwidth": bandwidth,
        "dtypes": dtypes,
        "notes": list(notes),
        "judged_dtypes": [dtype for dtype, section in dtypes.items() if section["verdict"]["status"] != NOT_JUDGED],
        "verdict": overall(section["verdict"]["status"] for section in dtypes.values()),
    }


def write_json(report: dict, path: str) -> None:
    """Write ``report`` to ``path`` (atomically: a partial file never replaces a good one)."""
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as stream:
        json.dump(report, stream, indent=2, allow_nan=False)
        stream.write("\n")
    os.replace(temporary, path)
