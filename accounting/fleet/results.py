"""The fleet as one JSON document: every rank's raw figures, the collective rows, the flags.

Fields (``SCHEMA`` names the version):

- ``schema``, ``created_utc``, ``elapsed_s`` (rank 0's wall time, start-up included)
- ``settings``: ``world_size``, ``backend``, ``budget_s`` (per rank), ``dtypes``, ``straggler_fraction``,
  ``figure_fractions`` (``memory_bandwidth``, ``slowest_share``, ``p2p_link``), ``busy_cpu_share``,
  ``min_busbw_gbps`` (``null``, or ``{scope: {collective: GB/s}}`` with ``"*"`` for any),
  ``barrier_timeout_s``, ``slow_rank``, ``level`` (``quick``, ``standard``, ``long``), ``strict``, ``inject_fault``
  (``RANK:DTYPE:SPEC`` or ``null``)
- ``ranks``: one record per rank (``null`` for a rank that hung before leaving one): ``rank``,
  ``identity`` (see :mod:`accounting.fleet.identity`), ``report`` (the whole ``accounting report``
  document of :mod:`accounting.report.results` for that rank's device), ``telemetry`` (clocks, power,
  temperature and throttle reasons sampled during the sweep, where the device gives them),
  ``collectives`` (per scope: ``ranks`` and ``results``, each with ``collective``, ``bytes``, ``count``,
  ``type``, ``redop``, ``root``, ``seconds`` per call, ``launch_seconds`` (the host's time per call spent
  launching; ``null`` on the CPU), ``iterations``, ``wrong``, ``ranks`` timed with; ``interrupted``: where a
  failing rank stopped the group, ``collective``, ``bytes``, ``ranks``, ``failed_ranks``), ``p2p`` (this rank's
  view of its point-to-point transfers, :func:`accounting.fleet.p2p.time_links`: ``bytes``, ``rounds``,
  ``rounds_run``, ``results`` with ``scope``, ``src``, ``dst``, ``seconds``, ``iterations``, ``wrong``;
  ``skipped``, ``errors``), ``neighbours`` (other processes' share of the rank's cores while it timed the
  collectives and links: ``foreign_cpu_share``, ``stolen_cpu_share``, ``cpus``, ``wall_s``), ``errors``
  (``phase``, ``error``; ``scope`` and ``collective`` for a collective that raised), ``health`` (the fleet's
  verdict on this rank's device, as in ``health.ranks`` below; its report's own is ``report.health``)
- ``collectives``: rows merged over ranks (see :func:`accounting.fleet.verdict.collective_rows`): ``seconds``
  is the mean over ranks (``time_over_ranks``: ``mean``, nccl-tests' default), with ``slowest_rank``,
  ``slowest_seconds``, ``nodes``, ``launch_bound``, ``algbw_bytes_per_s``, ``busbw_bytes_per_s``
- ``links``: the point-to-point matrix (see :func:`accounting.fleet.links.link_rows`): ``scope``, ``src``, ``dst``,
  ``bytes``, ``seconds`` (the mean of the two ends', ``time_over_ends``), ``seconds_by_end``, ``bytes_per_s``, ``wrong``
- ``figures``: per rank (keys are ranks as text) ``memory_bytes_per_s``, ``slowest_share`` (``share``, ``rows``,
  ``chance``) and ``neighbours`` (:func:`accounting.fleet.neighbours.neighbours`: ``share``, ``where``, ``windows``,
  ``shared_with``, ``busy``, ``why``)
- ``hung_ranks``, ``flags`` (``kind``, ``rank``, ``message``, ``subject``: the figure, dtype or field; ``ranks``: both
  ends of a link), ``notes``, ``verdict`` (``healthy``; ``busy`` when every flag is a busy rank's; else ``flagged``)
- ``health`` (:func:`accounting.fleet.health.fleet_health`): ``state`` (``healthy``, ``degraded``, ``failed``: the
  worst of the nodes'), ``exit_status`` (4 failed, 3 degraded with ``strict``, else 0), ``strict``, ``nodes`` (per
  host: ``state``, ``ranks``, ``counts`` per state, ``reasons``), ``reasons`` (``state``, ``device``: the rank with its
  host, device, UUID and PCI bus id, ``code``, ``text``), ``unchecked`` (grouped over ranks), ``notes`` (busy ranks:
  neighbours, not faults), ``ranks`` (one entry per rank, hung ones included: ``rank``, ``host``, ``device``,
  ``uuid``, ``pci_bus_id``, ``label``, ``state``, ``report_state``, ``reasons``, ``unchecked``, ``notes``)
"""

import datetime

from accounting.fleet.health import fleet_health
from accounting.fleet.verdict import judge

SCHEMA = "accounting-fleet/1"
"""Fields are only ever added under one version (``health`` and ``settings.level``/``strict``/``inject_fault`` were)."""


def document(records, *, settings: dict, elapsed_s: float, notes=(), hung=()) -> dict:
    """The whole document, judged (:func:`accounting.fleet.verdict.judge`), each device's health rolled up per node and
    for the fleet (:func:`accounting.fleet.health.fleet_health`, ``settings["strict"]`` for its exit status)."""
    verdict = judge(records, fraction=settings["straggler_fraction"], hung=hung,
                    min_busbw_gbps=settings.get("min_busbw_gbps"), figure_fractions=settings.get("figure_fractions"),
                    busy_cpu_share=settings.get("busy_cpu_share"))
    health = fleet_health(records, verdict["flags"], hung=hung, strict=bool(settings.get("strict")))
    ranks = [None if record is None else {**record, "health": health["ranks"][rank]}
             for rank, record in enumerate(records)]
    return {
        "schema": SCHEMA,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "elapsed_s": elapsed_s,
        "settings": settings,
        "ranks": ranks,
        "collectives": verdict["collectives"],
        "links": verdict["links"],
        "figures": verdict["figures"],
        "hung_ranks": list(hung),
        "flags": verdict["flags"],
        "notes": list(notes),
        "verdict": verdict["verdict"],
        "health": health,
    }
