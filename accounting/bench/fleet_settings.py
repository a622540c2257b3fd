"""The ``fleet`` section of ``benchmarks.json``: what :mod:`accounting.fleet` compares across ranks, and how strictly.

A rank is a straggler below ``straggler_fraction`` × the median of its peers; ``min_busbw_gbps`` holds named
presets of minimum bus bandwidths per scope and collective; ``figure_fractions`` is the straggler rule's
fraction for each of :data:`FLEET_FIGURES`; ``busy_cpu_share`` says when other processes kept a rank's cores
busy. The section is optional, and so is each key (the defaults here; benchmarks.json gives the reasoning)::

    "fleet": {"straggler_fraction": 0.9, "busy_cpu_share": 0.1,
              "figure_fractions": {"memory_bandwidth": 0.85},
              "min_busbw_gbps": {"h100-ib": {"inter-node": {"all_reduce": 40}}}}

>>> parse_fleet({"min_busbw_gbps": {"h100-ib": {"inter-node": {"*": 40}}}}, "b.json").min_busbw_gbps
{'h100-ib': {'inter-node': {'*': 40.0}}}
"""

import numbers
from dataclasses import dataclass, field

from accounting.bench.document_checks import check_keys, fail, mapping

DEFAULT_STRAGGLER_FRACTION = 0.9
"""``fleet.straggler_fraction`` when the file sets none (see benchmarks.json for the reasoning)."""
_FLEET_KEYS = {"straggler_fraction", "min_busbw_gbps", "figure_fractions", "busy_cpu_share"}
FLEET_FIGURES = ("memory_bandwidth", "slowest_share", "p2p_link")
"""The per-rank and per-link figures the fleet compares besides matmul TFLOP/s (:mod:`accounting.fleet.figures`)."""
DEFAULT_FIGURE_FRACTIONS = {"memory_bandwidth": 0.85, "slowest_share": 0.25, "p2p_link": 0.7}
"""``fleet.figure_fractions`` when the file sets none (see benchmarks.json for the reasoning)."""
DEFAULT_BUSY_CPU_SHARE = 0.1
"""``fleet.busy_cpu_share`` when the file sets none (see benchmarks.json for the reasoning)."""
FLEET_SCOPES = ("world", "intra-node", "inter-node")
"""The fleet's scopes (:mod:`accounting.fleet.scopes`), which ``fleet.min_busbw_gbps`` presets name."""
FLEET_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
"""The fleet's timed collectives (:mod:`accounting.fleet.collectives`), and ``"*"`` for any of them."""


@dataclass(frozen=True)
class FleetSettings:
    """The ``fleet`` section: a rank is a straggler below ``straggler_fraction`` × the median of its peers;
    ``min_busbw_gbps`` holds named presets of minimum bus bandwidths, ``{name: {scope: {collective: GB/s}}}``;
    ``figure_fractions`` the same rule's fraction for each of :data:`FLEET_FIGURES`; a rank is busy when other
    processes took more than ``busy_cpu_share`` of its cores while it measured."""

    straggler_fraction: float = DEFAULT_STRAGGLER_FRACTION
    min_busbw_gbps: dict = field(default_factory=dict)
    figure_fractions: dict = field(default_factory=lambda: dict(DEFAULT_FIGURE_FRACTIONS))
    busy_cpu_share: float = DEFAULT_BUSY_CPU_SHARE


def parse_fleet(value, source: str) -> FleetSettings:
    """The optional ``fleet`` section; ``straggler_fraction`` must lie in (0, 1).

    >>> parse_fleet({"straggler_fraction": 1.2}, "b.json")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: b.json: fleet.straggler_fraction = 1.2: must be a number in (0, 1)
    """
    value = mapping(value, source, "fleet")
    check_keys(value, _FLEET_KEYS, source, "fleet")
    fraction = value.get("straggler_fraction", DEFAULT_STRAGGLER_FRACTION)
    if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not 0 < fraction < 1:
        fail(source, "fleet.straggler_fraction", f"= {fraction!r}: must be a number in (0, 1)")
    busy = value.get("busy_cpu_share", DEFAULT_BUSY_CPU_SHARE)
    if isinstance(busy, bool) or not isinstance(busy, numbers.Real) or not 0 < busy < 1:
        fail(source, "fleet.busy_cpu_share", f"= {busy!r}: must be a number in (0, 1)")
    return FleetSettings(float(fraction), _busbw_presets(value.get("min_busbw_gbps", {}), source),
                         _figure_fractions(value.get("figure_fractions", {}), source), float(busy))


def _figure_fractions(value, source: str) -> dict:
    """``fleet.figure_fractions``: ``{figure: fraction in (0, 1)}`` for :data:`FLEET_FIGURES`; the defaults fill gaps.

    >>> _figure_fractions({"memory_bandwidth": 0.8}, "b.json")["memory_bandwidth"]
    0.8
    >>> _figure_fractions({"matmul": 0.8}, "b.json")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: b.json: fleet.figure_fractions has unknown key(s) 'matmul'; known: memory_bandwidth, p2p_link, slowest_share
    """
    value = mapping(value, source, "fleet.figure_fractions")
    check_keys(value, set(FLEET_FIGURES), source, "fleet.figure_fractions")
    fractions = dict(DEFAULT_FIGURE_FRACTIONS)
    for figure in FLEET_FIGURES:
        fraction = value.get(figure, fractions[figure])
        if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not 0 < fraction < 1:
            fail(source, f"fleet.figure_fractions.{figure}", f"= {fraction!r}: must be a number in (0, 1)")
        fractions[figure] = float(fraction)
    return fractions


def _busbw_presets(value, source: str) -> dict:
    """``fleet.min_busbw_gbps``: presets of ``{scope: {collective or "*": positive GB/s}}``; ``_`` keys are notes.

    >>> _busbw_presets({"x": {"inter-node": {"all_reduce": 0}}}, "b.json")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: b.json: fleet.min_busbw_gbps.x.inter-node.all_reduce = 0: must be a positive number of GB/s
    """
    presets = {}
    for name, table in mapping(value, source, "fleet.min_busbw_gbps").items():
        if name.startswith("_"):
            continue
        where = f"fleet.min_busbw_gbps.{name}"
        preset = {}
        for scope, values in mapping(table, source, where).items():
            if scope.startswith("_"):
                continue
            if scope not in FLEET_SCOPES:
                fail(source, f"{where}.{scope}", f"is not a scope; scopes: {', '.join(FLEET_SCOPES)}")
            preset[scope] = {}
            for collective, gbps in mapping(values, source, f"{where}.{scope}").items():
                if collective.startswith("_"):
                    continue
                if collective != "*" and collective not in FLEET_COLLECTIVES:
                    fail(source, f"{where}.{scope}.{collective}",
                          f"is not a collective; collectives: {', '.join(FLEET_COLLECTIVES)}, *")
                if isinstance(gbps, bool) or not isinstance(gbps, numbers.Real) or not gbps > 0:
                    fail(source, f"{where}.{scope}.{collective}", f"= {gbps!r}: must be a positive number of GB/s")
                preset[scope][collective] = float(gbps)
        presets[name] = preset
    return presets
