"""``accounting fleet``: the arguments, their one-line errors, and every rank's run to its exit status.

Launched by ``torchrun`` (one process per device), every rank parses the same arguments;
rank 0 checks its output paths before measuring, prints the tables and writes the files.

Exit status: 0 the fleet ran (whatever it found), 1 with ``--strict`` when anything is flagged
— and always when a rank hung or a barrier failed, so ``torchrun`` stops the ranks still
waiting — 2 for bad input (one line on stderr).
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
    EXIT_UNHEALTHY,
    check_writable,
    require_matplotlib,
)
from accounting.errors import AccountingError
from accounting.fleet.gather import FleetStopped
from accounting.fleet.launch import read_launch
from accounting.fleet.plot import write_plot
from accounting.fleet.render import render
from accounting.fleet.run import FleetOptions, Hooks, run_fleet
from accounting.fleet.thresholds import parse_min_busbw
from accounting.fleet.throttle import parse_slow_rank
from accounting.memory import format_name
from accounting.report.cli import dtype_list, positive_seconds, write_outputs

DEFAULT_BUDGET_S = 60.0
"""Default ``--budget`` per rank: its own device, then its share of the collectives."""
REPORT_GRACE_S = 30.0
"""How long a rank other than 0 waits, after a barrier failed, before it exits with status 1. ``torchrun``
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
    "driver, CUDA/ROCm, torch), collectives below --min-busbw, failed and hung ranks."
)
EPILOG = (
    "one node: torchrun --standalone --nproc-per-node=gpu -m accounting fleet; several: torchrun --nnodes=N "
    "--nproc-per-node=gpu --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT --rdzv-id=JOB -m accounting fleet on each "
    "node. exit status: 0 the fleet ran, 1 with --strict when anything is flagged (and always when a rank hung), "
    "2 bad input."
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


def barrier_seconds(text: str) -> float:
    try:
        return positive_number_from_text(text, "--barrier-timeout", "seconds")
    except AccountingError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``fleet`` options, on ``parser``."""
    parser.add_argument("--budget", metavar="SECONDS", type=positive_seconds, default=DEFAULT_BUDGET_S,
                        help="time per rank for its own device and the collectives. Default: %(default)r")
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
    parser.add_argument("--strict", action="store_true", help="exit with status 1 when anything is flagged")
    parser.add_argument("--barrier-timeout", metavar="SECONDS", type=barrier_seconds, default=None,
                        help="how long rank 0 waits at a barrier before naming the ranks that did not arrive. "
                             "Default: a quarter of the budget, at least 30 s")
    parser.add_argument("--slow-rank", metavar="RANK[:FACTOR]", type=slow_rank, default=None,
                        help="make RANK a deliberate straggler: each of its timed matmuls does FACTOR (default 2) "
                             "times the work, as a device at 1/FACTOR of its clock would; to see the verdict catch one")
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
    return FleetOptions(budget_s=args.budget, dtypes=dtypes, min_busbw_gbps=args.min_busbw,
                        barrier_timeout_s=args.barrier_timeout, slow_rank=args.slow_rank)


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
        return EXIT_UNHEALTHY
    except AccountingError as error:  # a bad value found only on this rank's device ($LOCAL_RANK, a dtype)
        print(f"{parser.prog}: error: rank {launch.rank}: {error}", file=stderr)
        return EXIT_BAD_INPUT
    if document is None:
        return EXIT_OK
    print(render(document), file=stdout, flush=True)
    if not write_outputs(document, args, write_plot=write_plot, prog=parser.prog, stdout=stdout, stderr=stderr):
        return EXIT_BAD_INPUT
    if document["hung_ranks"] or (args.strict and document["verdict"] != "healthy"):
        return EXIT_UNHEALTHY
    return EXIT_OK
