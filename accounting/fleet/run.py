"""One rank's whole run: who am I, measure my device, time the collectives with my peers, meet rank 0.

The phases, in order (each rank runs all of them; only rank 0 returns the document):

1. identity, and the CPU share of a CPU rank (:mod:`~accounting.fleet.launch`);
2. its own device within ``MEASURE_SHARE`` of the budget (:mod:`~accounting.fleet.measure`), no
   communication at all — an error here is recorded, not raised;
3. a checkpoint (:mod:`~accounting.fleet.gather`): a rank that never arrives is named here;
4. the collectives, per scope (:mod:`~accounting.fleet.scopes`), within ``COLLECTIVE_SHARE`` of the budget;
5. a last checkpoint, where the records travel to rank 0 as one ``all_gather_object``.

``Hooks`` let the tests make a rank fail, hang, lie about itself or corrupt a result, on a
real multi-process run.
"""

import datetime
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch.distributed as dist

from accounting.bench.matrix import DEFAULT_STRAGGLER_FRACTION, load_benchmarks
from accounting.errors import AccountingError
from accounting.fleet import collectives
from accounting.fleet.gather import RanksHung, checkpoint
from accounting.fleet.identity import identify
from accounting.fleet.launch import LAUNCH_HINT, Launch, device_backend, local_device, pin_cpu, process_groups
from accounting.fleet.measure import measure_rank
from accounting.fleet.results import document
from accounting.fleet.scopes import plan_scopes
from accounting.fleet.throttle import throttled
from accounting.hardware.devices import detect_device, free_memory_bytes

MEASURE_SHARE = 0.6
"""Share of the per-rank budget for the rank's own device (bandwidth and the matmul sweep)."""
COLLECTIVE_SHARE = 0.3
"""Share for the collectives, split evenly between scopes and then collectives; the rest is start-up and gathering."""
WORLD_OF_ONE_SHARE = MEASURE_SHARE + COLLECTIVE_SHARE
"""A world of one has no collectives: its device gets their share too."""
MIN_BARRIER_TIMEOUT_S = 30.0
BARRIER_TIMEOUT_BUDGET_FRACTION = 0.25
"""Default barrier timeout: ranks finish the same budget at nearly the same time, so this much of it
(at least ``MIN_BARRIER_TIMEOUT_S``) is ample for a live rank and short for a hung one."""
GROUP_TIMEOUT_MARGIN_S = 60.0
"""Collectives and barriers time out this long after the budget: a dead peer ends the job with an error."""


@dataclass(frozen=True)
class FleetOptions:
    """What to measure and how to judge it (the command line's options, as values)."""

    budget_s: float = 60.0
    dtypes: list | None = None
    min_busbw_gbps: float | None = None
    barrier_timeout_s: float | None = None
    slow_rank: tuple[int, int] | None = None
    straggler_fraction: float | None = None
    """``None``: ``fleet.straggler_fraction`` from benchmarks.json."""
    bandwidth_bytes: int | None = None
    """Bytes per device copy (``None``: the report's default); tests make it small."""
    max_message_bytes: int | None = None

    def barrier_timeout(self) -> float:
        """``barrier_timeout_s``, or the default from the budget.

        >>> FleetOptions(budget_s=400).barrier_timeout(), FleetOptions(budget_s=20).barrier_timeout()
        (100.0, 30.0)
        """
        if self.barrier_timeout_s is not None:
            return self.barrier_timeout_s
        return max(MIN_BARRIER_TIMEOUT_S, BARRIER_TIMEOUT_BUDGET_FRACTION * self.budget_s)


@dataclass(frozen=True)
class Hooks:
    """Faults to inject (module-level functions, so ``torch.multiprocessing.spawn`` can pickle them)."""

    identity: Callable | None = None
    """``identity(rank, identity) -> identity``: a doctored identity (configuration drift, another host)."""
    before_measure: Callable | None = None
    """``before_measure(rank)``: may raise, as a rank with a broken device does."""
    before_barrier: Callable | None = None
    """``before_barrier(rank)``: may never return, as a hung rank does."""
    corrupt: Callable | None = None
    """``corrupt(rank, collective, output)``: may damage a checked result, as a bad link does."""


def straggler_fraction(options: FleetOptions, notes: list) -> float:
    """The straggler threshold: the option, else benchmarks.json's, else the default (with a note)."""
    if options.straggler_fraction is not None:
        return options.straggler_fraction
    try:
        return load_benchmarks().fleet.straggler_fraction
    except AccountingError as error:
        notes.append(f"straggler fraction {DEFAULT_STRAGGLER_FRACTION} (the default): {error}")
        return DEFAULT_STRAGGLER_FRACTION


def _attempt(record: dict, phase: str, work):
    """``work()``, or ``None`` with the error kept in ``record["errors"]`` (a rank reports, it does not die)."""
    try:
        return work()
    except Exception as error:  # noqa: BLE001 - whatever broke, rank 0 must hear of it
        text = str(error).strip().splitlines()[0] if str(error).strip() else ""
        record["errors"].append({"phase": phase, "error": f"{type(error).__name__}: {text}".rstrip(": ")})
        return None


def _measure(options: FleetOptions, launch: Launch, device, hooks: Hooks, budget_s: float):
    if hooks.before_measure is not None:
        hooks.before_measure(launch.rank)
    extra = {}
    if options.slow_rank is not None and options.slow_rank[0] == launch.rank:
        extra["case_factory"] = throttled(options.slow_rank[1])
    return measure_rank(device, dtypes=options.dtypes, budget_s=budget_s, bandwidth_bytes=options.bandwidth_bytes,
                        **extra)


def _time_collectives(scope_name, ranks, group, device, *, budget_s, options, hooks, rank) -> dict:
    """Every collective on this rank's group in one scope; the same sizes on every rank of the group."""
    local = collectives.largest_message(device, free_memory_bytes(device))
    if options.max_message_bytes is not None:
        local = min(local, options.max_message_bytes)
    largest = int(-collectives.shared_max([-local], group=group, device=device)[0])
    sizes = collectives.message_sizes(collectives.MIN_MESSAGE_BYTES, max(largest, collectives.MIN_MESSAGE_BYTES), ranks=len(ranks))
    corrupt = None
    if hooks.corrupt is not None:
        def corrupt(name, output):
            hooks.corrupt(rank, name, output)
    results = []
    for name in collectives.COLLECTIVES:
        results += [done.as_dict() for done in collectives.sweep_collective(
            name, sizes, group=group, device=device, budget_s=budget_s / len(collectives.COLLECTIVES), corrupt=corrupt)]
    return {"ranks": list(ranks), "results": results}


def run_fleet(options: FleetOptions, launch: Launch, *, store=None, hooks: Hooks = Hooks(),
              clock=time.monotonic, started: float | None = None):
    """Run this rank; return the fleet document on rank 0 (see :mod:`accounting.fleet.results`), ``None`` elsewhere.

    ``store``: a ready ``torch.distributed`` store (tests pass a ``FileStore``); default the
    launcher's ``env://`` rendezvous. Raises :class:`~accounting.fleet.gather.FleetStopped`
    on ranks other than 0 when a barrier fails (rank 0 then reports the hung rank).
    """
    started = clock() if started is None else started
    device = local_device(launch)
    cpus = pin_cpu(launch) if device.type == "cpu" and launch.distributed else None
    notes = [] if launch.distributed else [LAUNCH_HINT]
    settings = {
        "world_size": launch.world_size, "backend": device_backend(device) if launch.distributed else None,
        "budget_s": options.budget_s, "dtypes": options.dtypes, "straggler_fraction": straggler_fraction(options, notes),
        "min_busbw_gbps": options.min_busbw_gbps, "barrier_timeout_s": options.barrier_timeout(),
        "slow_rank": None if options.slow_rank is None else list(options.slow_rank),
    }
    record = {"rank": launch.rank, "identity": None, "report": None, "telemetry": None, "collectives": {},
              "errors": []}
    info = detect_device(device)
    identity = identify(info, rank=launch.rank, local_rank=launch.local_rank, cpus=cpus)
    record["identity"] = hooks.identity(launch.rank, identity) if hooks.identity is not None else identity
    share = MEASURE_SHARE if launch.distributed else WORLD_OF_ONE_SHARE
    measured = _attempt(record, "measuring its device",
                        lambda: _measure(options, launch, device, hooks, share * options.budget_s))
    if measured is not None:
        record["report"], record["telemetry"] = measured
    if not launch.distributed:
        return document([record], settings=settings, elapsed_s=clock() - started, notes=notes)

    barrier_timeout = options.barrier_timeout()
    group_timeout = options.budget_s + barrier_timeout + GROUP_TIMEOUT_MARGIN_S
    meet = {"rank": launch.rank, "world_size": launch.world_size, "timeout_s": barrier_timeout}
    with process_groups(launch, device, timeout_s=group_timeout, store=store) as groups:
        meet.update(store=groups.store, group=groups.control)
        try:
            if hooks.before_barrier is not None:
                hooks.before_barrier(launch.rank)
            hosts = checkpoint(record, stage="measured", share=record["identity"]["host"], **meet)
            scopes = plan_scopes(hosts)
            per_scope = COLLECTIVE_SHARE * options.budget_s / len(scopes)
            for scope in scopes:
                # Every rank creates every group of the scope, in the same order, as new_group requires.
                made = [groups.device if scope.name == "world" else
                        dist.new_group(ranks, backend=groups.backend, timeout=_timedelta(group_timeout))
                        for ranks in scope.groups]
                mine = scope.group_of(launch.rank)
                if mine is not None:
                    group = made[scope.groups.index(mine)]
                    timed = _attempt(record, f"timing {scope.name} collectives", lambda: _time_collectives(
                        scope.name, mine, group, device, budget_s=per_scope, options=options, hooks=hooks,
                        rank=launch.rank))
                    record["collectives"][scope.name] = timed or {"ranks": mine, "results": []}
                dist.barrier(group=groups.control)
            records = checkpoint(record, stage="gathered", **meet)
        except RanksHung as hung:
            notes.append(str(hung))
            return document(hung.records, settings=settings, elapsed_s=clock() - started, notes=notes, hung=hung.hung)
    if launch.rank != 0:
        return None
    return document(records, settings=settings, elapsed_s=clock() - started, notes=notes)


def _timedelta(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=math.ceil(seconds))
