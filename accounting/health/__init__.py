"""Fast but wrong is not healthy: check timed results, read health counters, judge each device.

- :mod:`~accounting.health.results`: Freivalds' check of a product against a rounding-error
  bound (:mod:`~accounting.health.precision`; an fp8 product's on a GPU by its accumulation,
  :mod:`~accounting.health.accumulation`), and a repeat check (:func:`check_case` for a benchmark's case);
- :mod:`~accounting.health.faults`: an injected wrong element or flipped bit, to see the check fire;
- :mod:`~accounting.health.counters`: readings around a run (:class:`Window`), filled by
  :mod:`~accounting.health.nvml`, :mod:`~accounting.health.amd` and :mod:`~accounting.health.cpu`;
- :mod:`~accounting.health.states`: healthy, degraded or failed with reasons (:func:`judge`),
  rolled up per node and fleet (:func:`roll_up`), and exit statuses for a prolog or node check.

See docs/health.md.
"""

from accounting.health.counters import Counter, DeviceId, Snapshot, Window
from accounting.health.faults import Fault, faulty, parse_fault
from accounting.health.results import ResultCheck, check_case, check_product
from accounting.health.states import (
    DEGRADED,
    EXIT_DEGRADED,
    EXIT_FAILED,
    EXIT_HEALTHY,
    FAILED,
    HEALTHY,
    Rollup,
    Verdict,
    judge,
    judge_window,
    roll_up,
)

__all__ = ["DEGRADED", "EXIT_DEGRADED", "EXIT_FAILED", "EXIT_HEALTHY", "FAILED", "HEALTHY", "Counter", "DeviceId",
           "Fault", "ResultCheck", "Rollup", "Snapshot", "Verdict", "Window", "check_case", "check_product", "faulty",
           "judge", "judge_window", "parse_fault", "roll_up"]
