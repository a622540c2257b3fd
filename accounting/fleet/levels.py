"""``accounting fleet --level quick|standard|long``: what every rank's report runs, and what the ranks time together.

Every rank runs the report at the same level (:mod:`accounting.report.levels`); the level also sets the phases
between the ranks:

- **quick** (a node prolog, :data:`~accounting.report.levels.QUICK_MAX_S` per node): the report's quick level on every
  rank (health counters, one checked product per dtype, a short copy), then one checked ``all_reduce`` over the whole
  world, messages up to :data:`QUICK_MAX_MESSAGE_BYTES`; no intra-/inter-node split, the other collectives and the
  point-to-point matrix skipped. It still finds a wrong result, a lost or hung device, wrong values on the wire and
  configuration drift; it judges no MFU floor, bus bandwidth minimum or slow link.
- **standard** (the default): the whole report on every rank, the four collectives in every scope, the link matrix.
- **long**: the report's long level on every rank (its sustained phase at full load), then what standard does.

>>> quick = fleet_level("quick")
>>> quick.collectives, quick.every_scope, quick.links, quick.max_message_bytes // 2**20
(('all_reduce',), False, False, 64)
>>> fleet_level("standard").collectives == COLLECTIVES and fleet_level("long").links
True
"""

from dataclasses import dataclass

from accounting.fleet.collectives import COLLECTIVES
from accounting.report.levels import (
    LONG,
    QUICK,
    QUICK_MAX_S,
    STANDARD,
    default_budget_s,
    level_named,
)

QUICK_MAX_MESSAGE_BYTES = 64 * 2**20
"""The quick level's largest all_reduce message: on 8 GPUs over NVLink a fraction of a millisecond a call, so
the collective phase is set-up (NCCL's first call) and a few gloo agreements, not transfers."""


@dataclass(frozen=True)
class FleetLevel:
    """What the fleet does at one level: the collectives timed, whether each scope (intra-/inter-node) is timed
    beside the world, whether the point-to-point links are, and a cap on the message size (``None``: none)."""

    name: str
    collectives: tuple
    every_scope: bool
    links: bool
    max_message_bytes: int | None
    does: str


FLEET_LEVELS = {
    QUICK: FleetLevel(QUICK, ("all_reduce",), False, False, QUICK_MAX_MESSAGE_BYTES,
                      "every rank's quick report (counters, one checked product per dtype, a short copy), one checked "
                      f"all_reduce over the world up to {QUICK_MAX_MESSAGE_BYTES // 2**20} MiB, no other collective, "
                      f"no scopes, no link matrix (a node prolog: at most {QUICK_MAX_S:g} s on 8 ranks)"),
    STANDARD: FleetLevel(STANDARD, COLLECTIVES, True, True, None,
                         "every rank's standard report, the four collectives in every scope, the link matrix"),
    LONG: FleetLevel(LONG, COLLECTIVES, True, True, None,
                     "every rank's long report (a sustained phase at full load), then what standard does"),
}


def fleet_level(name: str) -> FleetLevel:
    """The :class:`FleetLevel` called ``name``; :class:`~accounting.errors.AccountingError` naming it otherwise."""
    return FLEET_LEVELS[level_named(name).name]


def fleet_budget_s(level: str) -> float:
    """``--budget``'s default per rank at ``level``: the report's default for that level.

    >>> fleet_budget_s("quick"), fleet_budget_s("standard")
    (20.0, 60.0)
    """
    return default_budget_s(level)


def levels_help() -> str:
    """What each level does, for ``--help``."""
    return "; ".join(f"{level.name}: {level.does} (default budget {fleet_budget_s(level.name):g} s)"
                     for level in FLEET_LEVELS.values())
