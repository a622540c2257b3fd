"""The fleet as one JSON document: every rank's raw figures, the collective rows, the flags.

Fields (``SCHEMA`` names the version):

- ``schema``, ``created_utc``, ``elapsed_s`` (rank 0's wall time, start-up included)
- ``settings``: ``world_size``, ``backend``, ``budget_s`` (per rank), ``dtypes``, ``straggler_fraction``,
  ``min_busbw_gbps`` (``null``, or ``{scope: {collective: GB/s}}`` with ``"*"`` for any),
  ``barrier_timeout_s``, ``slow_rank``
- ``ranks``: one record per rank (``null`` for a rank that hung before leaving one): ``rank``,
  ``identity`` (see :mod:`accounting.fleet.identity`), ``report`` (the whole ``accounting report``
  document of :mod:`accounting.report.results` for that rank's device), ``telemetry`` (clocks, power,
  temperature and throttle reasons sampled during the sweep, where the device gives them),
  ``collectives`` (per scope: ``ranks`` and ``results``, each with ``collective``, ``bytes``, ``count``,
  ``type``, ``redop``, ``root``, ``seconds`` per call, ``launch_seconds`` (the host's time per call spent
  launching; ``null`` on the CPU), ``iterations``, ``wrong``, ``ranks`` timed with; ``interrupted``: where a
  failing rank stopped the group, ``collective``, ``bytes``, ``ranks``, ``failed_ranks``), ``errors``
  (``phase``, ``error``)
- ``collectives``: rows merged over ranks (see :func:`accounting.fleet.verdict.collective_rows`): ``seconds``
  is the mean over ranks (``time_over_ranks``: ``mean``, nccl-tests' default), with ``slowest_rank``,
  ``slowest_seconds``, ``nodes``, ``launch_bound``, ``algbw_bytes_per_s``, ``busbw_bytes_per_s``
- ``hung_ranks``, ``flags`` (``kind``, ``rank``, ``message``), ``notes``, ``verdict`` (``healthy`` or ``flagged``)
"""

import datetime

from accounting.fleet.verdict import judge

SCHEMA = "accounting-fleet/1"


def document(records, *, settings: dict, elapsed_s: float, notes=(), hung=()) -> dict:
    """The whole document, judged (:func:`accounting.fleet.verdict.judge`)."""
    verdict = judge(records, fraction=settings["straggler_fraction"], hung=hung,
                    min_busbw_gbps=settings.get("min_busbw_gbps"))
    return {
        "schema": SCHEMA,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "elapsed_s": elapsed_s,
        "settings": settings,
        "ranks": list(records),
        "collectives": verdict["collectives"],
        "hung_ranks": list(hung),
        "flags": verdict["flags"],
        "notes": list(notes),
        "verdict": verdict["verdict"],
    }
