"""``python -m accounting <command>``; the ``accounting`` console script runs the same.

Commands:

- ``report`` — how fast this machine's matmuls and memory really are, and whether that is
  healthy (see :mod:`accounting.report`).
- ``gate`` — a regression gate over saved pytest-benchmark runs: ``save``, ``check``,
  ``compare`` (see :mod:`accounting.gate`).
- ``fleet`` — every device of a node and every node of a cluster, one process per device under
  ``torchrun`` (see :mod:`accounting.fleet`).
- ``plan`` — size a training run before renting it: memory per device and whether it fits,
  the micro-batch, FLOPs and days at a stated MFU (see :mod:`accounting.plan`).

Bad arguments end with one line on stderr and exit status 2.
"""

import os
import sys
import time

from accounting.console import OneLineParser
from accounting.fleet import cli as fleet_cli
from accounting.gate import cli as gate_cli
from accounting.plan import cli as plan_cli
from accounting.report import cli as report_cli

EXIT_BROKEN_PIPE = 141
"""What a shell reports for a command killed by SIGPIPE (128 + 13)."""


def build_parser():
    """``accounting`` with its sub-commands."""
    parser = OneLineParser(prog=report_cli.PROG, description="PyTorch resource accounting.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    commands.required = True
    report = commands.add_parser("report", help="measure matmul FLOP/s and memory bandwidth; judge the machine",
                                 description=report_cli.DESCRIPTION, epilog=report_cli.EPILOG)
    report_cli.add_arguments(report)
    report.set_defaults(run=report_cli.run, parser=report)
    gate = commands.add_parser("gate", help="fail CI on a benchmark regression that is not noise",
                               description=gate_cli.DESCRIPTION, epilog=gate_cli.EPILOG)
    gate_cli.add_arguments(gate)
    fleet = commands.add_parser("fleet", help="validate every GPU of a node and every node of a cluster (torchrun)",
                                description=fleet_cli.DESCRIPTION, epilog=fleet_cli.EPILOG)
    fleet_cli.add_arguments(fleet)
    fleet.set_defaults(run=fleet_cli.run, parser=fleet)
    plan = commands.add_parser("plan", help="size a training run before renting it: memory, fit, FLOPs, days",
                               description=plan_cli.DESCRIPTION, epilog=plan_cli.EPILOG)
    plan_cli.add_arguments(plan)
    plan.set_defaults(run=plan_cli.run, parser=plan)
    return parser


def main(argv=None) -> int:
    """Entry point of ``python -m accounting`` and the ``accounting`` console script; returns the exit status."""
    started = time.monotonic()  # a command's time budget counts from here
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return args.run(args, parser=args.parser, started=started)
    except BrokenPipeError:
        # The reader went away (`accounting report | head`): stop quietly, as command-line tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
