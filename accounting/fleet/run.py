"""One rank's whole run: who am I, measure my device, time the collectives with my peers, meet rank 0.

The phases, in order (each rank runs all of them; only rank 0 returns the document):

1. identity, and the CPU share of a CPU rank (:mod:`~accounting.fleet.launch`);
2. its own device within ``MEASURE_SHARE`` of the budget (:mod:`~accounting.fleet.measure`: the report at the
   fleet's ``--level``, every product checked, health counters around it), no communication at all — an error
   here is recorded, not raised. GPU ranks measure at the same time; CPU ranks of one node take turns, each in
   an equal share of it, with the launcher moved off the measured cores (:mod:`~accounting.fleet.turns`);
3. a checkpoint (:mod:`~accounting.fleet.gather`): a rank that never arrives is named here;
4. the collectives, per scope (:mod:`~accounting.fleet.scopes`), within ``COLLECTIVE_SHARE`` of the budget
   (at ``--level quick`` one all_reduce over the world: :mod:`~accounting.fleet.levels`);
5. the point-to-point links, pair by pair (:mod:`~accounting.fleet.p2p`), within ``LINK_SHARE`` of it (not at quick);
6. a last checkpoint, where the records travel to rank 0 as one ``all_gather_object``.

Around phases 4 and 5 each rank reads which share of its cores other processes took
(:class:`accounting.telemetry.cpu.ForeignCpuWindow`), as its sampler did during phase 2.

``Hooks`` let the tests make a rank fail, hang, lie about itself or corrupt a result, on a
real multi-process run.
"""

import datetime
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch.distributed as dist

from accounting.bench.matrix import (
    DEFAULT_BUSY_CPU_SHARE,
    DEFAULT_FIGURE_FRACTIONS,
    DEFAULT_STRAGGLER_FRACTION,
    load_benchmarks,
)
from accounting.errors import AccountingError
from accounting.fleet import agreement, collectives, p2p
from accounting.fleet.gather import RanksHung, checkpoint
from accounting.fleet.identity import identify
from accounting.fleet.launch import (
    CONTROL_BACKEND,
    LAUNCH_HINT,
    Launch,
    device_backend,
    fleet_devices,
    local_device,
    pin_cpu,
    process_groups,
    rendezvous_store,
)
from accounting.fleet.levels import fleet_level
from accounting.fleet.measure import measure_rank
from accounting.fleet.results import document
from accounting.fleet.scopes import plan_scopes
from accounting.fleet.throttle import throttled
from accounting.fleet.turns import end_turn, launcher_off, measuring_turns, wait_for_turn
from accounting.hardware.devices import detect_device, free_memory_bytes
from accounting.report.checks import ResultChecker
from accounting.report.levels import STANDARD
from accounting.telemetry.cpu import ForeignCpuWindow

MEASURE_SHARE = 0.55
"""Share of the per-rank budget for the rank's own device (bandwidth and the matmul sweep)."""
COLLECTIVE_SHARE = 0.25
"""Share for the collectives, split evenly between scopes and then collectives."""
LINK_SHARE = 0.1
"""Share for the point-to-point links (the rest is start-up and gathering). Each pair's first transfer, which
connects it, is outside it, as each collective's first call is; rounds past it are sampled away."""
WORLD_OF_ONE_SHARE = MEASURE_SHARE + COLLECTIVE_SHARE + LINK_SHARE
"""A world of one has no collectives: its device gets their share too."""
MIN_BARRIER_TIMEOUT_S = 30.0
BARRIER_TIMEOUT_BUDGET_FRACTION = 0.25
"""Default barrier timeout: ranks finish the same budget at nearly the same time, so this much of it
(at least ``MIN_BARRIER_TIMEOUT_S``) is ample for a live rank and short for a hung one."""
TURN_OVERRUN_S = 30.0
"""How far a rank's own measurement may run past its turn's budget before the ranks waiting for it call it hung:
the report's fixed costs (the clock measurement, the bandwidth copy, every product's check) do not shrink with a
small budget, and take seconds on a loaded machine."""
GROUP_TIMEOUT_MARGIN_S = 60.0
"""Collectives and barriers time out this long after the budget: a dead peer ends the job with an error."""


@dataclass(frozen=True)
class FleetOptions:
    """What to measure and how to judge it (the command line's options, as values)."""

    budget_s: float = 60.0
    dtypes: list | None = None
    min_busbw_gbps: dict | float | None = None
    """Minimum busbw: GB/s for every scope, or ``{scope: {collective: GB/s}}`` (:mod:`accounting.fleet.thresholds`)."""
    barrier_timeout_s: float | None = None
    slow_rank: tuple[int, int] | None = None
    straggler_fraction: float | None = None
    """``None``: ``fleet.straggler_fraction`` from benchmarks.json."""
    bandwidth_bytes: int | None = None
    """Bytes per device copy (``None``: the report's default); tests make it small."""
    max_message_bytes: int | None = None
    link_bytes: int | None = None
    """Bytes per point-to-point transfer (``None``: :func:`accounting.fleet.p2p.link_bytes`)."""
    figure_fractions: dict | None = None
    """``None``: ``fleet.figure_fractions`` from benchmarks.json."""
    busy_cpu_share: float | None = None
    """``None``: ``fleet.busy_cpu_share`` from benchmarks.json."""
    level: str = STANDARD
    """``quick``, ``standard`` or ``long``: every rank's report, and the phases between ranks (:mod:`~accounting.fleet.levels`)."""
    strict: bool = False
    """Exit 3 when a device is degraded (a failed one exits 4 either way)."""
    inject_fault: tuple | None = None
    """``(rank, InjectedFault)``: the result check's self-test on that rank (:func:`accounting.report.checks.parse_injected_fault`)."""

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
    device_fault: Callable | None = None
    """``device_fault(rank, collective, nbytes)``: may raise, as a rank whose device broke does; called before
    each message size of each collective, and with ``(rank, None, 0)`` by the device probe before each round."""
    link_path: Callable | None = None
    """``link_path(rank, peer)``: runs before each of the rank's point-to-point transfers with ``peer``; may
    sleep, as a slow link's path delays them."""


def straggler_fraction(options: FleetOptions, notes: list) -> float:
    """The straggler threshold: the option, else benchmarks.json's, else the default (with a note)."""
    if options.straggler_fraction is not None:
        return options.straggler_fraction
    try:
        return load_benchmarks().fleet.straggler_fraction
    except AccountingError as error:
        notes.append(f"straggler fraction {DEFAULT_STRAGGLER_FRACTION} (the default): {error}")
        return DEFAULT_STRAGGLER_FRACTION


def judging_settings(options: FleetOptions) -> dict:
    """The fractions of the figures and the busy share: the options, else benchmarks.json's, else the defaults."""
    try:
        fleet = load_benchmarks().fleet
        fractions, busy = fleet.figure_fractions, fleet.busy_cpu_share
    except AccountingError:  # straggler_fraction's note already says benchmarks.json was not read
        fractions, busy = dict(DEFAULT_FIGURE_FRACTIONS), DEFAULT_BUSY_CPU_SHARE
    return {"figure_fractions": {**fractions, **(options.figure_fractions or {})},
            "busy_cpu_share": busy if options.busy_cpu_share is None else options.busy_cpu_share}


def _time_links(hosts, launch: Launch, device, groups, *, budget_s: float, options: FleetOptions, hooks: Hooks,
                record: dict) -> None:
    """Every rank's point-to-point pairs (:func:`accounting.fleet.p2p.time_links`), after a device probe and an
    agreement on the transfer size, so a rank whose device broke sits it out and its peers skip it."""
    rank = launch.rank
    try:
        agreement.probe(device, fault=None if hooks.device_fault is None else (lambda: hooks.device_fault(rank, None, 0)))
        nbytes = options.link_bytes or p2p.link_bytes(device, free_memory_bytes(device))
        ok = True
    except Exception as error:  # noqa: BLE001 - a broken device sits the links out and is named
        record["errors"].append({"phase": "probing its device before the point-to-point links",
                                 "error": collectives.describe(error)})
        nbytes, ok = collectives.MIN_MESSAGE_BYTES, False
    agreed = agreement.agree(ok, [-nbytes], group=groups.control)
    nbytes = max(int(-agreed.values[0]), collectives.ELEMENT_BYTES)
    path = None
    if hooks.link_path is not None:
        def path(me, peer):
            hooks.link_path(me, peer)
    record["p2p"] = p2p.time_links(p2p.plan_links(hosts), rank=rank, device=device, group=groups.device,
                                   control=groups.control, budget_s=budget_s, nbytes=nbytes, path=path,
                                   excluded=agreed.failed)


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
    fault = None
    if options.inject_fault is not None and options.inject_fault[0] == launch.rank:
        fault = options.inject_fault[1]
    return measure_rank(device, dtypes=options.dtypes, budget_s=budget_s, bandwidth_bytes=options.bandwidth_bytes,
                        fleet_devices=fleet_devices(launch, device), level=options.level,
                        checker=ResultChecker(fault), strict=options.strict, **extra)


def _measure_into(record: dict, options: FleetOptions, launch: Launch, device, hooks: Hooks, budget_s: float) -> None:
    measured = _attempt(record, "measuring its device", lambda: _measure(options, launch, device, hooks, budget_s))
    if measured is not None:
        record["report"], record["telemetry"] = measured


def _measure_in_turn(record: dict, options: FleetOptions, launch: Launch, device, hooks: Hooks, budget_s: float,
                     cpus, store, barrier_timeout: float, notes: list) -> None:
    """Local rank ``t`` measures in turn ``t`` (``budget_s`` split evenly), the launcher off its cores, once the
    rank before it has measured. It waits for the turns before its own: each one's budget and the measurement's
    fixed costs beyond it (``TURN_OVERRUN_S``), and the barrier timeout."""
    turns = launch.local_world_size
    per_turn = budget_s / turns
    waited = wait_for_turn(store, launch.rank, launch.local_rank,
                           launch.local_rank * (per_turn + TURN_OVERRUN_S) + barrier_timeout)
    if waited is not None:
        notes.append(waited)
    try:
        with launcher_off(cpus or ()):
            _measure_into(record, options, launch, device, hooks, per_turn)
    finally:
        end_turn(store, launch.rank)


def _group(members: list, world_size: int, groups, timeout_s: float):
    """The timed group of ``members`` and its gloo twin; called by every rank, in the same order."""
    if members == list(range(world_size)):
        return groups.device, groups.control
    timeout = _timedelta(timeout_s)
    device = dist.new_group(members, backend=groups.backend, timeout=timeout)
    control = device if groups.backend == CONTROL_BACKEND else dist.new_group(members, backend=CONTROL_BACKEND,
                                                                                 timeout=timeout)
    return device, control


def _sizes(members, control, device, options, rank, hooks, record, scope_name) -> tuple[list, list]:
    """The message sizes every rank of the group can hold, and the ranks (global) that failed to say."""
    largest = collectives.MIN_MESSAGE_BYTES
    try:
        if hooks.device_fault is not None:
            hooks.device_fault(rank, None, 0)
        largest = collectives.largest_message(device, free_memory_bytes(device))
        for cap in (options.max_message_bytes, fleet_level(options.level).max_message_bytes):
            if cap is not None:
                largest = min(largest, cap)
        ok = True
    except Exception as error:  # noqa: BLE001 - the group hears of it before its first call
        record["errors"].append({"phase": f"sizing the {scope_name} messages", "error": collectives.describe(error)})
        ok = False
    agreed = agreement.agree(ok, [-largest], group=control)
    largest = max(int(-agreed.values[0]), collectives.MIN_MESSAGE_BYTES)
    return collectives.message_sizes(collectives.MIN_MESSAGE_BYTES, largest, ranks=len(members)), agreed.failed


def _sweep_group(scope_name, members, work, group, control, device, *, budget_s, options, hooks, rank, record,
                 left_out: set) -> list:
    """Time ``work`` (collective names) on one group; return what is left to time with the ranks still usable.

    A rank that fails (named by the group's agreement) is added to ``left_out``; the collective it
    failed in and those after it are left for a new group of the others. When *every* rank failed
    the same step, the collective (not a device) is at fault: its error is kept and the next one runs.
    """
    entry = record["collectives"][scope_name]
    sizes, failed = _sizes(members, control, device, options, rank, hooks, record, scope_name)
    if failed:
        entry["interrupted"].append({"collective": work[0], "bytes": None, "ranks": list(members),
                                     "failed_ranks": failed})
        left_out.update(failed)
        return [] if rank in failed else list(work)
    corrupt = fault = None
    if hooks.corrupt is not None:
        def corrupt(name, output):
            hooks.corrupt(rank, name, output)
    if hooks.device_fault is not None:
        def fault(name, nbytes):
            hooks.device_fault(rank, name, nbytes)
    share = budget_s / len(fleet_level(options.level).collectives)
    for index, name in enumerate(work):
        sweep = collectives.sweep_collective(name, sizes, group=group, control=control, device=device,
                                             budget_s=share, corrupt=corrupt, fault=fault)
        entry["results"] += [{**done.as_dict(), "ranks": list(members)} for done in sweep.results]
        if sweep.error is not None:
            nbytes, error = sweep.error
            record["errors"].append({"phase": f"timing {scope_name} {name} at {nbytes} B", "error": error,
                                     "scope": scope_name, "collective": name})
        if not sweep.failed:
            continue
        entry["interrupted"].append({"collective": name, "bytes": sweep.stopped_bytes, "ranks": list(members),
                                     "failed_ranks": sweep.failed})
        if set(sweep.failed) >= set(members):
            continue
        left_out.update(sweep.failed)
        return [] if rank in sweep.failed else list(work[index:])
    return []


def _time_scope(scope, launch: Launch, device, groups, *, budget_s, options, hooks, record, timeout_s) -> None:
    """Every collective in every group of ``scope``, leaving out ranks whose device is not usable.

    Before each round the ranks probe their devices and agree over gloo (``all_gather_object`` on the
    control group) on who is usable and what each group still has to time; every rank then creates
    the same new groups of the usable ranks (``new_group`` needs every rank, in the same order). A
    round ends at a gloo barrier; a group interrupted by a failing rank goes on in the next round
    without it. Each round leaves out at least one more rank or ends the scope.
    """
    rank = launch.rank
    mine = scope.group_of(rank)
    pending = list(fleet_level(options.level).collectives) if mine is not None else []
    if mine is not None:
        record["collectives"][scope.name] = {"ranks": mine, "results": [], "interrupted": []}
    left_out: set = set()
    for _round in range(launch.world_size):
        try:
            agreement.probe(device, fault=None if hooks.device_fault is None else
                         (lambda: hooks.device_fault(rank, None, 0)))
            usable = rank not in left_out
        except Exception as error:  # noqa: BLE001 - a broken device sits the NCCL phase out and is named
            record["errors"].append({"phase": f"probing its device before the {scope.name} collectives",
                                     "error": collectives.describe(error)})
            usable = False
        if not usable:
            pending = []
        states = [None] * launch.world_size
        dist.all_gather_object(states, {"usable": usable, "left_out": sorted(left_out), "pending": pending},
                               group=groups.control)
        for state in states:
            left_out.update(state["left_out"])
        plan = []
        for ranks in scope.groups:
            members = [member for member in ranks if states[member]["usable"] and member not in left_out]
            work = next((states[member]["pending"] for member in members if states[member]["pending"]), [])
            if len(members) >= 2 and work:
                plan.append((members, work))
        if not plan:
            break
        made = [_group(members, launch.world_size, groups, timeout_s) for members, _work in plan]
        pending = []
        for (members, work), (group, control) in zip(plan, made):
            if rank in members:
                pending = _sweep_group(scope.name, members, work, group, control, device, budget_s=budget_s,
                                       options=options, hooks=hooks, rank=rank, record=record, left_out=left_out)
        dist.barrier(group=groups.control)


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
        **judging_settings(options),
        "min_busbw_gbps": options.min_busbw_gbps, "barrier_timeout_s": options.barrier_timeout(),
        "slow_rank": None if options.slow_rank is None else list(options.slow_rank),
        "level": options.level, "strict": options.strict,
        "inject_fault": None if options.inject_fault is None else f"{options.inject_fault[0]}:{options.inject_fault[1]}",
    }
    record = {"rank": launch.rank, "identity": None, "report": None, "telemetry": None, "collectives": {},
              "p2p": None, "neighbours": None, "errors": []}
    info = detect_device(device)
    identity = identify(info, rank=launch.rank, local_rank=launch.local_rank, cpus=cpus)
    record["identity"] = hooks.identity(launch.rank, identity) if hooks.identity is not None else identity
    share = MEASURE_SHARE if launch.distributed else WORLD_OF_ONE_SHARE
    turns = measuring_turns(device, launch.local_world_size) if launch.distributed else 1
    settings["measuring_turns"] = turns
    if turns == 1:
        _measure_into(record, options, launch, device, hooks, share * options.budget_s)
    if not launch.distributed:
        return document([record], settings=settings, elapsed_s=clock() - started, notes=notes)
    level = fleet_level(options.level)

    barrier_timeout = options.barrier_timeout()
    group_timeout = options.budget_s + barrier_timeout + GROUP_TIMEOUT_MARGIN_S
    meet = {"rank": launch.rank, "world_size": launch.world_size, "timeout_s": barrier_timeout}
    if turns > 1:
        store = rendezvous_store(launch, group_timeout) if store is None else store
        _measure_in_turn(record, options, launch, device, hooks, share * options.budget_s, cpus, store,
                         barrier_timeout, notes)
    with process_groups(launch, device, timeout_s=group_timeout, store=store) as groups:
        meet.update(store=groups.store, group=groups.control)
        try:
            if hooks.before_barrier is not None:
                hooks.before_barrier(launch.rank)
            hosts = checkpoint(record, stage="measured", share=record["identity"]["host"], **meet)
            scopes = plan_scopes(hosts) if level.every_scope else plan_scopes(hosts)[:1]
            per_scope = COLLECTIVE_SHARE * options.budget_s / len(scopes)
            window = ForeignCpuWindow().start()
            for scope in scopes:
                _time_scope(scope, launch, device, groups, budget_s=per_scope, options=options, hooks=hooks,
                            record=record, timeout_s=group_timeout)
            if level.links:
                _time_links(hosts, launch, device, groups, budget_s=LINK_SHARE * options.budget_s, options=options,
                            hooks=hooks, record=record)
            foreign = window.stop()
            if foreign is not None:
                record["neighbours"] = {"foreign_cpu_share": foreign.foreign_share,
                                        "stolen_cpu_share": foreign.stolen_share, "cpus": list(foreign.cpus),
                                        "wall_s": foreign.wall_s}
            records = checkpoint(record, stage="gathered", **meet)
        except RanksHung as hung:
            notes.append(str(hung))
            return document(hung.records, settings=settings, elapsed_s=clock() - started, notes=notes, hung=hung.hung)
    if launch.rank != 0:
        return None
    return document(records, settings=settings, elapsed_s=clock() - started, notes=notes)


def _timedelta(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=math.ceil(seconds))
