"""The fleet as one JSON document: every rank's raw figures, the collective rows, the flags.

Fields (``SCHEMA`` names the version):

- ``schema``, ``created_utc``, ``elapsed_s`` (rank 0's wall time, start-up included)
- ``settings``: ``world_size``, ``backend``, ``budget_s`` (per rank), ``dtypes``, ``straggler_fraction``,
  ``figure_fractions`` (``memory_bandwidth``, ``slowest_share``, ``p2p_link``), ``busy_cpu_share``,
  ``min_busbw_gbps`` (``null``, or ``{scope: {collective: GB/s}}`` with ``"*"`` for any),
  ``barrier_timeout_s``, ``slow_rank``
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
  (``phase``, ``error``)
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
"""

import datetime

from accounting.fleet.verdict import judge

SCHEMA = "accounting-fleet/1"


def document(records, *, settings: dict, elapsed_s: float, notes=(), hung=()) -> dict:
    """The whole document, judged (:func:`accounting.fleet.verdict.judge`)."""
    verdict = judge(records, fraction=settings["straggler_fraction"], hung=hung,
                    min_busbw_gbps=settings.get("min_busbw_gbps"), figure_fractions=settings.get("figure_fractions"),
                    busy_cpu_share=settings.get("busy_cpu_share"))
    return {
        "schema": SCHEMA,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "elapsed_s": elapsed_s,
        "settings": settings,
        "ranks": list(records),
        "collectives": verdict["collectives"],
        "links": verdict["links"],
        "figures": verdict["figures"],
        "hung_ranks": list(hung),
        "flags": verdict["flags"],
        "notes": list(notes),
        "verdict": verdict["verdict"],
    }
