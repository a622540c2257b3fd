"""``--level quick|standard|long``: how long the report takes, and what each level checks.

- **quick** (a job prolog, at most :data:`QUICK_MAX_S` per node): the health counters, one checked
  product per dtype at one mid-size shape (:data:`QUICK_SIZE`, timed briefly, its TFLOP/s shown but
  judged against no floor), a short device copy. No sweep, no headlines.
- **standard** (the default): the whole report (bandwidth, the budgeted sweep, burst and sustained
  headlines, a verdict per dtype against its MFU floor), every timed product checked once, and the
  counters around it.
- **long** (minutes): the standard report in part of the budget, then a sustained phase at full load
  (:mod:`accounting.report.burn`): one large product per dtype repeated for a stated time, every result
  compared bit for bit with the first, Freivalds-checked periodically, clocks and power sampled throughout.

>>> default_budget_s("quick"), default_budget_s("standard"), default_budget_s("long")
(20.0, 60.0, 600.0)
>>> round(report_budget_s("long", 600.0), 1), round(burn_budget_s("long", 600.0), 1), burn_budget_s("standard", 60.0)
(300.0, 300.0, 0.0)
"""

from dataclasses import dataclass

from accounting.errors import AccountingError

QUICK, STANDARD, LONG = "quick", "standard", "long"
QUICK_MAX_S = 30.0
"""What a quick run may take per node (the budget default is below it)."""
QUICK_SIZE = {"cpu": 1024, "cuda": 8192}
"""Edge of the quick level's one product per dtype: mid-size (not launch-bound, a few ms on a GPU,
tens of ms on a CPU core), capped by free memory."""
QUICK_TARGET_S = 0.1
"""The quick product is timed for about this long."""
LONG_BURN_FRACTION = 0.5
"""At ``--level long`` the sustained phase takes this share of the budget; the standard report the rest."""


@dataclass(frozen=True)
class Level:
    name: str
    default_budget_s: float
    checks: str


LEVELS = {
    QUICK: Level(QUICK, 20.0, "health counters, one checked product per dtype at one mid-size shape, a short copy "
                              f"(a job prolog: at most {QUICK_MAX_S:g} s; no sweep, no headlines, no MFU floor)"),
    STANDARD: Level(STANDARD, 60.0, "the whole report (bandwidth, sweep, headlines, MFU floors), every timed "
                                    "product checked once, health counters around it"),
    LONG: Level(LONG, 600.0, f"standard in {1 - LONG_BURN_FRACTION:.0%} of the budget, then a sustained phase at "
                             "full load for the rest: one large product per dtype repeated, every result compared "
                             "bit for bit with the first and Freivalds-checked periodically, clocks and power sampled"),
}


def level_named(name: str) -> Level:
    """The :class:`Level` called ``name``; :class:`AccountingError` naming it otherwise."""
    try:
        return LEVELS[name]
    except KeyError:
        raise AccountingError(f"unknown level {name!r}; known: {', '.join(LEVELS)}") from None


def default_budget_s(level: str) -> float:
    """``--budget``'s default at ``level``."""
    return level_named(level).default_budget_s


def report_budget_s(level: str, budget_s: float) -> float:
    """The part of ``budget_s`` the standard report takes (all of it but at ``long``)."""
    return budget_s * (1 - LONG_BURN_FRACTION) if level_named(level).name == LONG else budget_s


def burn_budget_s(level: str, budget_s: float) -> float:
    """The part of ``budget_s`` the sustained phase takes (none but at ``long``)."""
    return budget_s - report_budget_s(level, budget_s)


def levels_help() -> str:
    """What each level checks, for ``--help``."""
    return "; ".join(f"{level.name}: {level.checks} (default budget {level.default_budget_s:g} s)"
                     for level in LEVELS.values())
