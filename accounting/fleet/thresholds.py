"""Minimum bus bandwidths per scope and collective: what ``--min-busbw`` accepts, and which minimum a row meets.

One number cannot judge every scope: eight H100s on NVSwitch reach 400+ GB/s of busbw, one
rank per node over a single 400 Gb/s rail at most 50. ``--min-busbw`` therefore takes

- a number of GB/s, for every scope and collective (``300``);
- ``SCOPE=GBPS`` and ``SCOPE:COLLECTIVE=GBPS`` items, comma-separated (``intra-node=300,inter-node=40``);
  a scope or collective left out is not judged;
- the name of a preset in ``benchmarks.json`` (``fleet.min_busbw_gbps``, with its reasoning and sources).

A table is ``{scope: {collective: GB/s}}``, ``"*"`` standing for any. The world of a single node is
judged as ``intra-node`` (:func:`judged_scope`): it is the same NVLink/PCIe fabric.

>>> table = parse_min_busbw("intra-node=300,inter-node=40,inter-node:broadcast=35")
>>> minimum_for(table, "inter-node", "broadcast"), minimum_for(table, "inter-node", "all_reduce")
(35.0, 40.0)
>>> minimum_for(table, "world", "all_reduce") is None
True
>>> minimum_for(parse_min_busbw("300"), "world", "all_gather")
300.0
"""

from accounting._checks import positive_number_from_text
from accounting.bench.matrix import FLEET_COLLECTIVES, FLEET_SCOPES
from accounting.errors import AccountingError

ANY = "*"


def as_table(value) -> dict | None:
    """``None``, a number of GB/s (every scope and collective) or a table, as a table.

    >>> as_table(25), as_table(None)
    ({'*': {'*': 25.0}}, None)
    """
    if value is None or isinstance(value, dict):
        return value
    return {ANY: {ANY: float(value)}}


def parse_min_busbw(text: str, presets=None) -> dict:
    """``--min-busbw TEXT`` as a table; ``presets`` (name -> table) are benchmarks.json's.

    >>> parse_min_busbw("intra-node:all_reduce=300")
    {'intra-node': {'all_reduce': 300.0}}
    >>> parse_min_busbw("nvlink=300")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: --min-busbw: unknown scope 'nvlink' in 'nvlink=300'; scopes: world, intra-node, inter-node
    """
    text = text.strip()
    presets = presets or {}
    if text in presets:
        return {scope: dict(values) for scope, values in presets[text].items()}
    if "=" not in text:
        try:
            float(text)
        except ValueError:
            known = f"; presets in benchmarks.json: {', '.join(sorted(presets))}" if presets else ""
            raise AccountingError(f"--min-busbw must be GBPS, SCOPE[:COLLECTIVE]=GBPS,... or a preset name, "
                                  f"got {text!r}{known}") from None
        return as_table(positive_number_from_text(text, "--min-busbw", "GB/s"))
    table: dict = {}
    for item in text.split(","):
        key, _, number = item.partition("=")
        scope, _, collective = key.strip().partition(":")
        scope, collective = scope.strip(), collective.strip() or ANY
        if scope not in FLEET_SCOPES:
            raise AccountingError(f"--min-busbw: unknown scope {scope!r} in {item!r}; scopes: "
                                  f"{', '.join(FLEET_SCOPES)}")
        if collective != ANY and collective not in FLEET_COLLECTIVES:
            raise AccountingError(f"--min-busbw: unknown collective {collective!r} in {item!r}; collectives: "
                                  f"{', '.join(FLEET_COLLECTIVES)}")
        table.setdefault(scope, {})[collective] = positive_number_from_text(number.strip(), "--min-busbw", "GB/s")
    return table


def judged_scope(scope: str, nodes: int | None) -> str:
    """The scope whose minimum a row meets: a world on one node is ``intra-node``.

    >>> judged_scope("world", 1), judged_scope("world", 2), judged_scope("inter-node", 4)
    ('intra-node', 'world', 'inter-node')
    """
    return "intra-node" if scope == "world" and nodes == 1 else scope


def minimum_for(table, scope: str, collective: str) -> float | None:
    """The minimum busbw (GB/s) ``table`` sets for ``collective`` in ``scope`` (``None``: not judged)."""
    if not table:
        return None
    for where in (scope, ANY):
        values = table.get(where) or {}
        for what in (collective, ANY):
            if what in values:
                return float(values[what])
    return None
