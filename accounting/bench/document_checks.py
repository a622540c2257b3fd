"""Checks of a JSON document's entries that name the entry and the file in every error.

``benchmarks.json`` is checked as it is loaded (:mod:`~accounting.bench.matrix`,
:mod:`~accounting.bench.fleet_settings`); an error names the entry, e.g. ``cuda.floors.bfloat16``, so a user
can find it. Keys starting with ``_`` are notes (JSON has no comments): kept, never checked.

>>> check_keys({"rounds": 3, "_why": "a note"}, {"rounds"}, "b.json", "cpu")
>>> mapping([1], "b.json", "cpu")
Traceback (most recent call last):
...
accounting.errors.AccountingError: b.json: cpu must be an object, got [1]
"""

from accounting.errors import AccountingError


def fail(source: str, where: str, message: str):
    """Raise :class:`AccountingError`: ``"<source>: <where> <message>"``."""
    raise AccountingError(f"{source}: {where} {message}")


def mapping(value, source, where) -> dict:
    """``value`` when it is a JSON object, else :func:`fail`."""
    if not isinstance(value, dict):
        fail(source, where, f"must be an object, got {value!r}")
    return value


def check_keys(value: dict, allowed, source, where):
    """:func:`fail` naming every key of ``value`` that is neither ``allowed`` nor a note (``_``)."""
    unknown = sorted(key for key in value if key not in allowed and not key.startswith("_"))
    if unknown:
        fail(source, where, f"has unknown key(s) {', '.join(map(repr, unknown))}; known: {', '.join(sorted(allowed))}")
