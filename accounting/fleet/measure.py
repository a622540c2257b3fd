"""One rank's own figures, measured by the report's code: best matmul TFLOP/s and MFU per dtype
(the report's budgeted sweep), device memory bandwidth (its device copy), and the clocks, power,
temperature and throttle reasons sampled meanwhile (:class:`accounting.telemetry.Sampler`).

Nothing here is a second copy of the report: :func:`accounting.report.run.prepare` settles the
dtypes, peaks and floors, :func:`accounting.report.run.build_report` measures, and the rank keeps
the report's whole document, so ``--json`` holds the same fields ``accounting report --json`` does.
"""

import time
import warnings

from accounting.report.checks import ResultChecker
from accounting.report.levels import STANDARD
from accounting.report.progress import ProgressBar
from accounting.report.run import build_report, prepare
from accounting.telemetry.sampler import Sampler


def measure_rank(device, *, dtypes, budget_s: float, bandwidth_bytes: int | None = None, clock=time.monotonic,
                 case_factory=None, fleet_devices=(), level: str = STANDARD, checker: ResultChecker | None = None,
                 strict: bool = False) -> tuple[dict, dict]:
    """``(report, telemetry)`` for ``device`` within ``budget_s`` (from now): the report document (bandwidth,
    sweep, verdict per dtype) and the :class:`~accounting.telemetry.Summary` of the device meanwhile, as dicts.

    Warnings raised while planning (an unknown peak) become notes in the document, as in the report;
    ``case_factory`` makes the timed products (:mod:`accounting.fleet.throttle` slows one rank on purpose).
    ``fleet_devices``: the device indices of this node that the fleet's other ranks measure at the same
    time (:func:`accounting.fleet.launch.fleet_devices`); the sampler does not tag their work as a busy sibling.
    ``level``, ``checker`` (with ``--inject-fault``'s fault on its rank) and ``strict`` go to the report: every
    timed product is checked and the health counters are read around the run, so ``report["health"]`` says
    whether this rank's device is healthy, degraded or failed (:mod:`accounting.fleet.health` rolls them up).
    """
    started = clock()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = prepare(device=str(device), dtypes=dtypes, budget_s=budget_s)
    plan.notes.extend(str(warning.message) for warning in caught)
    with Sampler(device, fleet_devices=tuple(fleet_devices)) as sampler:
        report = build_report(plan, progress=ProgressBar(budget_s, enabled=False), started=started, clock=clock,
                              bandwidth_bytes=bandwidth_bytes, case_factory=case_factory, level=level,
                              checker=checker, strict=strict)
    return report, sampler.summary.to_dict()
