"""The bandwidth a collective gets within a node and across nodes: a datasheet's, or the fleet's measured.

A layout's communication time is its bus bytes (:mod:`accounting.model.parallel.communication`) over
the bus bandwidth of the group's scope, nccl-tests' ``busbw``, whose ceiling is one GPU's link
bandwidth in one direction. Defaults per device, from the vendors' datasheets (GB/s = 10⁹ B/s):

- within a node: NVLink through NVSwitch, per GPU, one direction (the datasheets print both
  directions added: H100/H200 SXM "900 GB/s" is 450 each way);
- across nodes: the GPU's own network adapter (one rail per GPU, as DGX/HGX nodes are built),
  400 Gb/s NDR InfiniBand = 50 GB/s.

These are ceilings: nccl-tests reaches about 80 % of them on a healthy node (``benchmarks.json``'s
``h100-sxm-ndr400`` preset gives the measured figures), so times computed from them are lower bounds.
A measured figure replaces them (:func:`read_links`): ``accounting fleet --json``'s document, or
``{"intra_node_gbps": 360, "inter_node_gbps": 45}``.

>>> links = device_links("H100 SXM")
>>> links.intra_node_bytes_per_s / 1e9, links.inter_node_bytes_per_s / 1e9
(450.0, 50.0)
>>> read_links({"intra_node_gbps": 360}, links).intra_node_bytes_per_s / 1e9
360.0
"""

import json
import numbers
from dataclasses import dataclass, replace
from pathlib import Path

from accounting._units import GB
from accounting.errors import AccountingError, AccountingTypeError


@dataclass(frozen=True)
class Links:
    """Bus bandwidth (bytes/s) of a collective within one node and across nodes, and where each came from."""

    intra_node_bytes_per_s: float
    inter_node_bytes_per_s: float
    intra_source: str
    inter_source: str

    def bandwidth(self, within_node: bool) -> float:
        """The bus bandwidth of a group within a node (``True``) or spanning nodes."""
        return self.intra_node_bytes_per_s if within_node else self.inter_node_bytes_per_s


NDR = (50 * GB, "400 Gb/s NDR InfiniBand, one adapter per GPU (ConnectX-7; DGX H100/H200/B200 user guides)")
HDR = (25 * GB, "200 Gb/s HDR InfiniBand, one adapter per GPU (ConnectX-6; DGX A100 user guide)")

DEVICE_LINKS = (
    # (peak-table row prefix, (within a node, its source), (across nodes, its source)); the first match wins.
    ("H100 SXM", (450 * GB, "NVLink 4, 900 GB/s per GPU both ways (NVIDIA H100 datasheet)"), NDR),
    ("H200 SXM", (450 * GB, "NVLink 4, 900 GB/s per GPU both ways (NVIDIA H200 datasheet)"), NDR),
    ("B200", (900 * GB, "NVLink 5, 1.8 TB/s per GPU both ways (NVIDIA DGX B200 datasheet)"), NDR),
    ("A100 SXM", (300 * GB, "NVLink 3, 600 GB/s per GPU both ways (NVIDIA A100 datasheet)"), HDR),
    ("MI300X", (448 * GB, "Infinity Fabric, 7 links x 64 GB/s each way "
                          "(AMD Instinct MI300X datasheet: 896 GB/s both ways)"), NDR),
)
"""Datasheet link bandwidths per device (one direction per GPU)."""


def known_links(name: str) -> Links | None:
    """:func:`device_links`, or ``None`` for a device without datasheet figures here.

    >>> known_links("T4") is None, known_links("H200 SXM").inter_node_bytes_per_s / 1e9
    (True, 50.0)
    """
    try:
        return device_links(name)
    except AccountingError:
        return None


def device_links(name: str) -> Links:
    """The datasheet bandwidths of the device called ``name`` (a peak-table row, e.g. ``"H100 SXM"``).

    >>> device_links("MI300X").intra_source.split(",")[0]
    'Infinity Fabric'
    >>> device_links("T4")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: no link bandwidths known for 'T4' (known: H100 SXM, ...): give them ...
    """
    if not isinstance(name, str):
        raise AccountingTypeError(f"device must be a name such as 'H100 SXM', got {name!r}")
    for prefix, (intra, intra_source), (inter, inter_source) in DEVICE_LINKS:
        if name.startswith(prefix):
            return Links(intra, inter, intra_source, inter_source)
    known = ", ".join(prefix for prefix, _, _ in DEVICE_LINKS)
    raise AccountingError(f"no link bandwidths known for {name!r} (known: {known}): give them with --links JSON, "
                          'e.g. {"intra_node_gbps": 300, "inter_node_gbps": 50}')


SIMPLE_KEYS = ("intra_node_gbps", "inter_node_gbps")
FLEET_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
"""The fleet's collectives a layout runs (its broadcast is left out)."""


def _gbps(document: dict, key: str) -> float:
    value = document[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise AccountingError(f"links: {key} must be a positive number of GB/s, got {value!r}")
    return float(value) * GB


def _fleet_scope(rows, scope: str) -> float | None:
    """The bus bandwidth of ``scope`` in a fleet document's collective rows: for each collective, its best
    size that is not launch-bound; the least of those (the slowest collective a layout runs there)."""
    best = {}
    for row in rows:
        if row.get("scope") == "world" and row.get("nodes") == 1:
            row = {**row, "scope": "intra-node"}  # a single node's world is its intra-node scope
        if row.get("scope") != scope or row.get("collective") not in FLEET_COLLECTIVES or row.get("launch_bound"):
            continue
        busbw = row.get("busbw_bytes_per_s")
        if isinstance(busbw, bool) or not isinstance(busbw, numbers.Real) or not busbw > 0:
            raise AccountingError(f"links: a {scope} {row.get('collective')} row's busbw_bytes_per_s must be a "
                                  f"positive number, got {busbw!r}")
        best[row["collective"]] = max(best.get(row["collective"], 0.0), float(busbw))
    return min(best.values()) if best else None


def read_links(source, default: Links | None = None) -> Links:
    """``default`` with what ``source`` measured or states put in its place (without a ``default``, the
    source must give both scopes).

    ``source``: a path to a JSON file, or its parsed ``dict``; either ``accounting fleet --json``'s
    document (its ``collectives`` rows: the ``intra-node`` scope, or a one-node ``world``, and the
    ``inter-node`` scope, each read as the least over all-reduce, all-gather and reduce-scatter of each
    one's best busbw among sizes not launch-bound), or ``{"intra_node_gbps": …, "inter_node_gbps": …}``
    (GB/s = 10⁹ B/s, either key alone allowed). A scope the source does not give keeps the default.

    >>> fleet = {"schema": "accounting-fleet/1", "collectives": [
    ...     {"scope": "world", "nodes": 1, "collective": "all_gather", "busbw_bytes_per_s": 3.5e11},
    ...     {"scope": "world", "nodes": 1, "collective": "all_reduce", "busbw_bytes_per_s": 4.0e11}]}
    >>> links = read_links(fleet, device_links("H100 SXM"))
    >>> links.intra_node_bytes_per_s / 1e9, links.intra_source, links.inter_node_bytes_per_s / 1e9
    (350.0, 'measured by accounting fleet (intra-node)', 50.0)
    >>> read_links({"intra_node_gbps": "fast"}, links)
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: links: intra_node_gbps must be a positive number of GB/s, got 'fast'
    """
    name = "links"
    if isinstance(source, (str, Path)):
        name = str(source)
        try:
            source = json.loads(Path(source).read_text())
        except OSError as error:
            raise AccountingError(f"links: cannot read {name}: {error.strerror or error}") from None
        except json.JSONDecodeError as error:
            raise AccountingError(f"links: {name} is not JSON: {error}") from None
    if not isinstance(source, dict):
        raise AccountingError(f"links: {name} must hold a JSON object (accounting fleet --json's document, or "
                              f"{{\"intra_node_gbps\": ..., \"inter_node_gbps\": ...}}), got {type(source).__name__}")
    if "collectives" in source:
        rows = source["collectives"]
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise AccountingError(f"links: {name}'s collectives must be a list of rows (accounting fleet --json)")
        intra, inter = _fleet_scope(rows, "intra-node"), _fleet_scope(rows, "inter-node")
        if intra is None and inter is None:
            raise AccountingError(f"links: {name} has no intra-node or inter-node all_reduce, all_gather or "
                                  "reduce_scatter row with a bandwidth that is not launch-bound")
        if default is None and (intra is None or inter is None):
            missing = "intra-node" if intra is None else "inter-node"
            raise AccountingError(f"links: {name} measured no {missing} scope and the device has no datasheet "
                                  f"figure for it: give it as {SIMPLE_KEYS[0] if intra is None else SIMPLE_KEYS[1]}")
        links = default or Links(intra, inter, "", "")
        if intra is not None:
            links = replace(links, intra_node_bytes_per_s=intra,
                            intra_source="measured by accounting fleet (intra-node)")
        if inter is not None:
            links = replace(links, inter_node_bytes_per_s=inter,
                            inter_source="measured by accounting fleet (inter-node)")
        return links
    unknown = sorted(set(source) - set(SIMPLE_KEYS))
    if unknown or not source:
        raise AccountingError(f"links: unknown key {unknown[0]!r} in {name}" if unknown else
                              f"links: {name} gives neither {SIMPLE_KEYS[0]} nor {SIMPLE_KEYS[1]}")
    if default is None:
        missing = [key for key in SIMPLE_KEYS if key not in source]
        if missing:
            raise AccountingError(f"links: {name} must give {missing[0]}: the device has no datasheet figure for it")
        default = Links(0.0, 0.0, "", "")
    links = default
    if "intra_node_gbps" in source:
        links = replace(links, intra_node_bytes_per_s=_gbps(source, "intra_node_gbps"), intra_source=name)
    if "inter_node_gbps" in source:
        links = replace(links, inter_node_bytes_per_s=_gbps(source, "inter_node_gbps"), inter_source=name)
    return links
