"""A report's document from its plan and what was measured: the per-dtype sections, the machine, the telemetry
facts, and the evidence for the health judgement (:func:`check_evidence`, :func:`throttle_reasons_seen`).

Pure functions of what :func:`accounting.report.run.build_report` measured; :func:`preview` is the document
before measuring (the header: device, peaks, floors).

>>> telemetry_section({"run_max_clock_mhz": 1980.0})
{'run_max_clock_mhz': 1980.0, 'run_max_power_w': None, 'power_limit_w': None, 'soak': None}
"""

from accounting.report.checks import ResultChecker
from accounting.report.levels import QUICK, STANDARD
from accounting.report.report_plan import Plan, describe_device, mfu_against
from accounting.report.results import assemble, bandwidth_section, dtype_section, machine_section
from accounting.report.saturation import physical_facts

QUICK_FLOOR_REASON = "the quick level times one mid-size shape; MFU floors are judged at --level standard"


def dtype_sections(plan: Plan, sweeps: dict, bandwidth, found=None, checker: ResultChecker | None = None,
                   level: str = STANDARD) -> dict:
    """Each planned dtype's section: its sweep, peak, floor (none at the quick level), headlines and checks."""
    measured = bandwidth.bytes_per_second if bandwidth is not None else None
    found = found or {}
    skipped = checker.skipped if checker is not None else []
    return {
        dtype: dtype_section(dtype, sweeps.get(dtype, []), peak=plan.peaks[dtype],
                             floor=None if level == QUICK else plan.floors[dtype],
                             reason=QUICK_FLOOR_REASON if level == QUICK else None,
                             bandwidth=measured, spec_bandwidth=plan.spec_bandwidth,
                             peak_source=plan.peak_sources[dtype], native=plan.native.get(dtype),
                             mfu_against=mfu_against(plan.info, plan.native[dtype]) if dtype in plan.native else None,
                             headlines=found.get("headlines", {}).get(dtype),
                             physical=physical_facts(plan.info),
                             check_seconds=None if checker is None else checker.seconds.get(dtype, 0.0),
                             checks_skipped=[item for item in skipped if item.startswith(f"{dtype} ")])
        for dtype in plan.dtypes
    }


def telemetry_section(found: dict) -> dict:
    """The run's telemetry facts for the JSON: highest clock and power, and the thermal soak."""
    return {"run_max_clock_mhz": found.get("run_max_clock_mhz"), "run_max_power_w": found.get("run_max_power_w"),
            "power_limit_w": found.get("power_limit_w"),
            "soak": found["soak"].to_dict() if found.get("soak") is not None else None}


def machine_of(plan: Plan) -> dict:
    """The machine section: the planned device and the load average read before measuring."""
    return machine_section(describe_device(plan.info), load_average=plan.load_average)


def preview(plan: Plan) -> dict:
    """The report document before measuring (for the header: device, peaks, floors)."""
    return assemble(settings=plan.settings, machine=machine_of(plan), bandwidth=bandwidth_section(None, plan.spec_bandwidth),
                    dtypes=dtype_sections(plan, {}, None), elapsed_s=0.0, notes=plan.notes)


def throttle_reasons_seen(sweeps: dict, found: dict, burns: dict) -> list[str]:
    """Every throttle reason the telemetry saw during the timed work (sweep, headlines, sustained phase)."""
    summaries = [getattr(done, "telemetry", None) for measurements in sweeps.values() for done in measurements]
    for figures in found.get("headlines", {}).values():
        nested = list((figures.get("default_accumulation") or {}).values())  # fp8 with default accumulation
        summaries += [getattr(figure, "telemetry", None) for figure in [*figures.values(), *nested]]
    summaries += [result.telemetry for result in burns.values()]
    reasons = []
    for summary in summaries:
        for reason in (summary or {}).get("throttle_reasons") or ():
            if reason not in reasons:
                reasons.append(reason)
    return reasons


def check_evidence(sweeps: dict, burns: dict, checker: ResultChecker | None, plan: Plan,
                   found: dict | None = None) -> tuple[list, list[str]]:
    """The result checks for the health judgement, and what went unchecked (a product out of memory, a dtype
    with no product checked); ``found``: the headlines, whose fp8 default-accumulation product is checked too."""
    checks = [done.check for measurements in sweeps.values() for done in measurements
              if getattr(done, "check", None) is not None]
    for figures in (found or {}).get("headlines", {}).values():
        check = (figures.get("default_accumulation") or {}).get("check")
        if check is not None:
            checks.append(check)
    for result in burns.values():
        checks += result.checks
    unchecked = []
    if checker is not None:
        unchecked += [f"result check: {item}" for item in checker.skipped]
        for dtype in plan.dtypes:
            if not any(getattr(done, "check", None) is not None for done in sweeps.get(dtype, [])):
                unchecked.append(f"result check: no {dtype} product was checked")
    return checks, unchecked

