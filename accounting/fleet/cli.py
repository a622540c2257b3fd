"""``accounting fleet``: the arguments, their one-line errors, and every rank's run to its exit status.

Launched by ``torchrun`` (one process per device), every rank parses the same arguments;
rank 0 checks its output paths before measuring, prints the tables and writes the files.

Exit status, as ``accounting report``'s (:mod:`accounting.fleet.health`): 4 (``EXIT_FAILED``) when any
device failed — a wrong result, a rank that raised, hung or was lost, wrong values in a collective —
with or without ``--strict`` (a rank other than 0 whose barrier failed exits 4 too, so ``torchrun``
stops the ranks still waiting); 3 (``EXIT_DEGRADED``) with ``--strict`` when a device is degraded (a
straggler, slow memory or link, drift, below an MFU floor; a busy rank is a neighbour's doing, not
degraded); 0 otherwise; 2 for bad input (one line on stderr).

``--level quick|standard|long`` is passed to every rank's report and sets the phases between the
ranks (:mod:`accounting.fleet.levels`); ``--inject-fault RANK:DTYPE:SPEC`` is the result check's
self-test on one rank: the fleet must then name that rank's device failed and exit 4.
"""

import argparse
import dataclasses
import sys
import time

from accounting._checks import positive_number_from_text
from accounting.bench.matrix import load_benchmarks
from accounting.console import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    check_writable,
    require_matplotlib,
)
from accounting.errors import AccountingError
from accounting.fleet.gather import FleetStopped
from accounting.fleet.launch import read_launch
from accounting.fleet.levels import FLEET_LEVELS, fleet_budget_s, levels_help
from accounting.fleet.plot import write_plot
from accounting.fleet.render import render
from accounting.fleet.run import FleetOptions, Hooks, run_fleet
from accounting.fleet.thresholds import parse_min_busbw
from accounting.fleet.throttle import parse_slow_rank
from accounting.health.states import EXIT_DEGRADED, EXIT_FAILED
from accounting.memory import format_name
from accounting.report.checks import parse_injected_fault
from accounting.report.cli import dtype_list, positive_seconds, write_outputs
from accounting.report.levels import STANDARD

DEFAULT_BUDGET_S = fleet_budget_s(STANDARD)
"""Default ``--budget`` per rank at the default level: its own device, then its share of the collectives
(each level's default: :func:`accounting.fleet.levels.fleet_budget_s`)."""
REPORT_GRACE_S = 30.0
"""How long a rank other than 0 waits, after a barrier failed, before it exits with status 4. ``torchrun``
stops every worker as soon as one exits with an error: a rank leaving at once would kill rank 0 while it
prints and writes the report naming the hung rank. If rank 0 finishes first its own exit stops this one;
if rank 0 is the rank that hung, this exit is what stops the job."""

DESCRIPTION = (
    "Validate every device of a node, and every node of a cluster: one process per device (start it with "
    "torchrun), each measuring its own matmul TFLOP/s, MFU and memory bandwidth with the report's code, then "
    "all_reduce, all_gather, reduce_scatter and broadcast timed together as nccl-tests times them (algbw, busbw, "
    "wrong values counted), then every pair's point-to-point link. Rank 0 prints a table per rank, per collective and "
    "per link and flags the rank below its fraction of benchmarks.json × the median of the other ranks on every "
    "figure (matmul TFLOP/s or the dtype's MFU floor, memory bandwidth, how often it is the slowest), slow links "
    "with both ends, ranks that shared their cores or device with other work (busy), configuration drift (device, "
    "driver, CUDA/ROCm, torch), collectives below --min-busbw, failed and hung ranks. Every timed product is "
    "checked and each rank's health counters read: each device is healthy, degraded or failed with its reasons, "
    "rolled up per node and for the fleet (worst wins)."
)
EPILOG = (
    "one node: torchrun --standalone --nproc-per-node=gpu -m accounting fleet; several: torchrun --nnodes=N "
    "--nproc-per-node=gpu --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT --rdzv-id=JOB -m accounting fleet on each "
    f"node. exit status: {EXIT_FAILED} a device failed (a wrong result, a rank that raised, hung or was lost, wrong "
    f"values in a collective), with or without --strict; {EXIT_DEGRADED} with --strict when a device is degraded (a "
    "straggler, slow memory or link, drift, below an MFU floor; a busy rank shared with other work is a neighbour, "
    "not degraded); 0 otherwise; 2 bad input."
)


def gbps(text: str) -> dict:
    """``--min-busbw``: GB/s (10⁹ bytes per second) for every scope, per scope and collective, or a preset
    of benchmarks.json (:mod:`accounting.fleet.thresholds`), as a table."""
    try:
        presets = {}
        if "=" not in text:
            try:
                presets = load_benchmarks().fleet.min_busbw_gbps
            except AccountingError:
                presets = {}  # no readable benchmarks.json: numbers and SCOPE=GBPS lists still work
        return parse_min_busbw(text, presets)
    except AccountingError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def slow_rank(text: str) -> tuple[int, int]:
    try:
        return parse_slow_rank(text)
    except AccountingError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def rank_fault(text: str) -> tuple:
    """``--inject-fault``: ``RANK:DTYPE:SPEC``, the rank and the report's fault (:func:`accounting.report.checks.parse_injected_fault`).

    >>> rank, fault = rank_fault("1:bfloat16:flip:5:14")
    >>> rank, str(fault)
    (1, 'bfloat16:flip:5:14')
    >>> rank_fault("x:float32:flip:0:30")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: --inject-fault is RANK:DTYPE:SPEC with RANK a rank number, got 'x:float32:flip:0:30'
    """
    rank, _separator, rest = text.strip().partition(":")
    if not rank.isdigit():
        raise argparse.ArgumentTypeError(f"--inject-fault is RANK:DTYPE:SPEC with RANK a rank number, got {text!r}")
    try:
        return int(rank), parse_injected_fault(rest)
    except AccountingError as error:
        raise argparse.ArgumentTypeError(f"{error} (in {text!r})") from None


def barrier_seconds(text: str) -> float:
    try:
        return positive_number_from_text(text, "--barrier-timeout", "seconds")
    except AccountingError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``fleet`` options, on ``parser``."""
    parser.add_argument("--level", choices=tuple(FLEET_LEVELS), default=STANDARD,
                        help=f"how long to run and what to check, on every rank. {levels_help().replace('%', '%%')}. "
                             "Default: %(default)s")
    parser.add_argument("--budget", metavar="SECONDS", type=positive_seconds, default=None,
                        help="time per rank for its own device and the collectives. Default: the level's ("
                             + ", ".join(f"{name} {fleet_budget_s(name):g}" for name in FLEET_LEVELS) + ")")
    parser.add_argument("--dtypes", metavar="LIST", type=dtype_list, default=None,
                        help="comma-separated dtypes to sweep. Default: the device kind's dtypes in benchmarks.json "
                             "that the device runs natively")
    parser.add_argument("--json", metavar="PATH", dest="json_path", default=None,
                        help="write every rank's raw figures to PATH as JSON (rank 0)")
    parser.add_argument("--plot", metavar="PATH", dest="plot_path", default=None,
                        help="draw each rank's best TFLOP/s per dtype, the median and the straggler line, to PATH")
    parser.add_argument("--min-busbw", metavar="SPEC", type=gbps, default=None,
                        help="flag a collective whose best bus bandwidth is below a minimum: GBPS for every scope, "
                             "SCOPE[:COLLECTIVE]=GBPS,... (scopes world, intra-node, inter-node; a single node's "
                             "world is intra-node), or a preset of benchmarks.json's fleet.min_busbw_gbps "
                             "(h100-sxm-ndr400). Default: not judged")
    parser.add_argument("--strict", action="store_true",
                        help=f"exit with status {EXIT_DEGRADED} when a device is degraded (a straggler, slow memory or "
                             f"link, drift, below an MFU floor); a failed device exits {EXIT_FAILED} with or without it")
    parser.add_argument("--barrier-timeout", metavar="SECONDS", type=barrier_seconds, default=None,
                        help="how long rank 0 waits at a barrier before naming the ranks that did not arrive. "
                             "Default: a quarter of the budget, at least 30 s")
    parser.add_argument("--slow-rank", metavar="RANK[:FACTOR]", type=slow_rank, default=None,
                        help="make RANK a deliberate straggler: each of its timed matmuls does FACTOR (default 2) "
                             "times the work, as a device at 1/FACTOR of its clock would; to see the verdict catch one")
    parser.add_argument("--inject-fault", metavar="RANK:DTYPE:SPEC", type=rank_fault, default=None,
                        help="the result check's self-test on one rank: corrupt the first checked product of DTYPE on "
                             "RANK, SPEC as the report's --inject-fault (flip:INDEX:BIT or add:INDEX:DELTA, optionally "
                             "@CALL), e.g. 1:bfloat16:flip:5:14; the fleet must then name that rank's device failed "
                             f"(exit status {EXIT_FAILED}) and keep the others' figures")
    return parser


def options_from(args: argparse.Namespace) -> FleetOptions:
    """The parsed arguments as :class:`FleetOptions`; unknown dtype names raise :class:`AccountingError`."""
    dtypes = None
    if args.dtypes is not None:
        dtypes = []
        for name in args.dtypes:
            try:
                dtypes.append(format_name(name))
            except AccountingError as error:
                raise AccountingError(f"--dtypes: {error}") from None
    level = getattr(args, "level", STANDARD)
    fault = getattr(args, "inject_fault", None)
    if fault is not None and dtypes is not None and fault[1].dtype not in dtypes:
        raise AccountingError(f"--inject-fault: {fault[1].dtype} is not among the dtypes timed ({', '.join(dtypes)})")
    budget = args.budget if args.budget is not None else fleet_budget_s(level)
    return FleetOptions(budget_s=budget, dtypes=dtypes, min_busbw_gbps=args.min_busbw,
                        barrier_timeout_s=args.barrier_timeout, slow_rank=args.slow_rank, level=level,
                        strict=bool(args.strict), inject_fault=fault)


def run(args: argparse.Namespace, *, parser: argparse.ArgumentParser, stdout=None, stderr=None, started=None,
        store=None, hooks: Hooks | None = None, environ=None, overrides: dict | None = None, sleep=time.sleep) -> int:
    """Run a parsed ``fleet`` command on this rank; bad input ends it with ``parser``'s one-line error.

    ``store``, ``hooks``, ``environ`` and ``overrides`` (fields of :class:`FleetOptions` the command
    line does not set, such as ``bandwidth_bytes``) let tests run real ranks with injected faults;
    ``sleep`` waits :data:`REPORT_GRACE_S` on a rank other than 0 whose barrier failed.
    """
    started = time.monotonic() if started is None else started
    hooks = Hooks() if hooks is None else hooks
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        launch = read_launch(environ)
        options = dataclasses.replace(options_from(args), **(overrides or {}))
        if options.slow_rank is not None and options.slow_rank[0] >= launch.world_size:
            raise AccountingError(f"--slow-rank {options.slow_rank[0]} is not a rank of this world "
                                  f"(ranks 0..{launch.world_size - 1})")
        if options.inject_fault is not None and options.inject_fault[0] >= launch.world_size:
            raise AccountingError(f"--inject-fault: rank {options.inject_fault[0]} is not a rank of this world "
                                  f"(ranks 0..{launch.world_size - 1})")
        if launch.rank == 0:
            for path, option in ((args.json_path, "--json"), (args.plot_path, "--plot")):
                if path is not None:
                    check_writable(path, option)
            if args.plot_path is not None:
                require_matplotlib()
    except AccountingError as error:
        parser.error(str(error))
    try:
        document = run_fleet(options, launch, store=store, hooks=hooks, started=started)
    except FleetStopped as error:
        print(f"{parser.prog}: {error}", file=stderr, flush=True)
        sleep(REPORT_GRACE_S)
        return EXIT_FAILED  # a rank hung or was lost: a failed device, as rank 0's report says
    except AccountingError as error:  # a bad value found only on this rank's device ($LOCAL_RANK, a dtype)
        print(f"{parser.prog}: error: rank {launch.rank}: {error}", file=stderr)
        return EXIT_BAD_INPUT
    if document is None:
        return EXIT_OK
    print(render(document), file=stdout, flush=True)
    if not write_outputs(document, args, write_plot=write_plot, prog=parser.prog, stdout=stdout, stderr=stderr):
        return EXIT_BAD_INPUT
    return document["health"]["exit_status"]
