"""``accounting report``: the arguments, their one-line errors, and the run from detection to verdict.

Every bad input — an unknown dtype or device, a budget that is not a positive number of
seconds, a ``--json``/``--plot`` path that cannot be written, a malformed ``--inject-fault`` —
ends the run before any measuring with one line on stderr and exit status 2, never a traceback.
Output paths are tried first, so a long sweep is never lost to a typo in a path.

``--level`` (:mod:`accounting.report.levels`) picks how long it runs and what it checks: ``quick``
(a job prolog), ``standard`` (the default) or ``long`` (a sustained phase at full load).

Exit status (the device's health, :mod:`accounting.report.health_section`): 0 when the report ran
and no device failed; 4 (``EXIT_FAILED``) when a device failed — a wrong result, an uncorrectable
error, a critical Xid — with or without ``--strict``: a wrong result never exits 0; 3
(``EXIT_DEGRADED``) with ``--strict`` when a device is degraded (a dtype below its MFU floor,
throttling, rising correctable errors); 2 for bad input; 130 when interrupted. What could not be
checked (no EDAC in a VM, no NVLink on a PCIe card) is listed, never taken for healthy, and never degrades.
"""

import argparse
import sys
import time
import warnings

from accounting._checks import positive_number_from_text
from accounting.bench.matrix import BENCHMARKS_ENV
from accounting.console import EXIT_BAD_INPUT, EXIT_INTERRUPTED, check_writable, require_matplotlib
from accounting.errors import AccountingError
from accounting.hardware.cpu_clock import CPU_GHZ_ENV
from accounting.hardware.peaks import PEAK_TFLOPS_ENV
from accounting.health.states import EXIT_DEGRADED, EXIT_FAILED
from accounting.model_mfu.sizes import MODEL_SIZES
from accounting.report.checks import ResultChecker, parse_injected_fault
from accounting.report.levels import LEVELS, STANDARD, default_budget_s, levels_help
from accounting.report.model_section import MODEL_ARGUMENTS, check_model, measure_model_section, size_from_args
from accounting.report.plot import write_plot
from accounting.report.progress import ProgressBar
from accounting.report.render import render_header, render_results
from accounting.report.results import write_json
from accounting.report.run import build_report, prepare, preview

DEFAULT_BUDGET_S = default_budget_s(STANDARD)
"""Default ``--budget`` at the default level: about a minute for the whole report (:mod:`accounting.report.levels`)."""

PROG = "accounting"

DESCRIPTION = (
    "How fast this machine's matmuls and memory really are, and whether that is healthy: a matmul sweep per "
    "dtype within the time budget (best TFLOP/s, the shape that reached it, MFU against the spec peak), a large "
    "device copy for memory bandwidth, each case placed on the roofline, and a verdict per dtype against its "
    "MFU floor in benchmarks.json. Every timed product is checked (Freivalds' check and a repeat check) and the "
    "device's health counters are read around the run: each device is healthy, degraded or failed, with reasons."
)
EPILOG = (
    f"exit status: 0 the report ran and no device failed; {EXIT_FAILED} a device failed (a wrong result, an "
    f"uncorrectable error, a critical Xid), with or without --strict; {EXIT_DEGRADED} with --strict when a device "
    "is degraded (a dtype below its MFU floor, throttling, rising correctable errors; what could not be checked is "
    "listed, not degraded); "
    "2 bad input; 130 interrupted. "
    f"Environment: {PEAK_TFLOPS_ENV} (a peak to use instead of the table or CPU estimate), "
    f"{CPU_GHZ_ENV} (the CPU clock for its estimate), {BENCHMARKS_ENV} (another benchmarks.json)."
)


def positive_seconds(text: str) -> float:
    """``--budget``: a finite number of seconds above zero.

    >>> positive_seconds("2.5")
    2.5
    >>> positive_seconds("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: --budget must be a positive number of seconds, got '0'
    """
    try:
        return positive_number_from_text(text, "--budget", "seconds")
    except AccountingError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def injected_fault(text: str):
    """``--inject-fault``: ``DTYPE:SPEC`` (:func:`accounting.report.checks.parse_injected_fault`)."""
    try:
        return parse_injected_fault(text)
    except AccountingError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def dtype_list(text: str) -> list[str]:
    """``--dtypes``: comma-separated names (``fp32,bf16`` or ``float32,bfloat16``), as given."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"--dtypes needs at least one dtype name, got {text!r}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``report`` options, on ``parser`` (the ``report`` sub-command of ``python -m accounting``)."""
    parser.add_argument("--device", metavar="DEVICE", default=None,
                        help="device to test: cpu, cuda or cuda:N. Default: cuda:0 when CUDA is available, else cpu")
    parser.add_argument("--dtypes", metavar="LIST", type=dtype_list, default=None,
                        help="comma-separated dtypes (float32,bfloat16,tf32,float16,fp8...). "
                             "Default: those of this device kind's dtypes in benchmarks.json that the device runs natively")
    parser.add_argument("--level", choices=tuple(LEVELS), default=STANDARD,
                        help=f"how long to run and what to check. {levels_help().replace('%', '%%')}. "
                             "Default: %(default)s")
    parser.add_argument("--budget", metavar="SECONDS", type=positive_seconds, default=None,
                        help="time for the whole report (the matmul sweep takes most of it). Default: the level's "
                             f"({', '.join(f'{name} {level.default_budget_s:g}' for name, level in LEVELS.items())})")
    parser.add_argument("--json", metavar="PATH", dest="json_path", default=None,
                        help="write machine info and every measurement to PATH as JSON")
    parser.add_argument("--plot", metavar="PATH", dest="plot_path", default=None,
                        help="draw TFLOP/s against matrix size, with each dtype's peak, to PATH as PNG")
    parser.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--strict", action="store_true",
                        help=f"exit with status {EXIT_DEGRADED} when a device is degraded (below an MFU floor, "
                             "throttled, rising correctable errors); a failed device exits "
                             f"{EXIT_FAILED} with or without it")
    parser.add_argument("--inject-fault", metavar="DTYPE:SPEC", type=injected_fault, default=None,
                        help="the result check's self-test: corrupt the first checked product of DTYPE, "
                             "SPEC flip:INDEX:BIT (flip one bit of flat element INDEX) or add:INDEX:DELTA, optionally "
                             "@CALL (1 the checked result, 2 its repeat), e.g. bfloat16:flip:0:14; the report must "
                             f"then say the device failed (exit status {EXIT_FAILED})")
    model = parser.add_argument_group("model training step (after the matmul sweep, outside --budget)")
    model.add_argument("--model", metavar="SIZE", choices=tuple(MODEL_SIZES), default=None,
                       help=f"also time a GPT-style training step of this size ({', '.join(MODEL_SIZES)}) per "
                            "precision policy: tokens/s, MFU, HFU, peak memory measured vs predicted")
    for name in MODEL_ARGUMENTS:
        model.add_argument(f"--{name}", metavar="N", type=int, default=None,
                           help=f"replace the {name} of --model SIZE")
    model.add_argument("--compile", action="store_true",
                       help="also time each model step through torch.compile, beside the eager one (a compiler "
                            "failure is reported in the section, not raised)")
    return parser


def write_outputs(document: dict, args: argparse.Namespace, *, write_plot, prog: str, stdout, stderr) -> bool:
    """Write ``document`` to ``args.json_path`` (JSON) and, with ``write_plot``, to ``args.plot_path`` (PNG).

    Each file written is named on ``stdout``; a file that cannot be written ends with one
    line on ``stderr`` and ``False`` (the caller exits with :data:`EXIT_BAD_INPUT`). The
    report and the fleet both write their outputs through here.
    """
    try:
        if args.json_path is not None:
            write_json(document, args.json_path)
            print(f"JSON written to {args.json_path}", file=stdout)
        if args.plot_path is not None:
            write_plot(document, args.plot_path)
            print(f"Plot written to {args.plot_path}", file=stdout)
    except (OSError, AccountingError) as error:
        print(f"{prog}: error: {error}", file=stderr)
        return False
    return True


def run(args: argparse.Namespace, *, parser: argparse.ArgumentParser, stdout=None, stderr=None, started=None) -> int:
    """Run a parsed ``report`` command; bad input ends it with ``parser``'s one-line error.

    The budget counts from ``started`` (a ``time.monotonic()`` reading; default: now), so
    detection and set-up are inside it.
    """
    started = time.monotonic() if started is None else started
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    level = getattr(args, "level", STANDARD)
    budget = args.budget if args.budget is not None else default_budget_s(level)
    fault = getattr(args, "inject_fault", None)
    try:
        for path, option in ((args.json_path, "--json"), (args.plot_path, "--plot")):
            if path is not None:
                check_writable(path, option)
        if args.plot_path is not None:
            require_matplotlib()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plan = prepare(device=args.device, dtypes=args.dtypes, budget_s=budget)
        plan.notes.extend(str(warning.message) for warning in caught)
        if fault is not None and fault.dtype not in plan.dtypes:
            timed = ", ".join(plan.dtypes)
            raise AccountingError(f"--inject-fault: {fault.dtype} is not among the dtypes timed ({timed})")
        model = size_from_args(args)
        if model is not None:
            check_model(model, plan.info)
    except AccountingError as error:
        parser.error(str(error))
    print(render_header(preview(plan)) + "\n", file=stdout, flush=True)
    progress = ProgressBar(total=budget, stream=stderr, enabled=not args.quiet)
    try:
        report = build_report(plan, progress=progress, started=started, level=level, checker=ResultChecker(fault),
                              strict=args.strict)
    except KeyboardInterrupt:
        report = None
    finally:
        progress.close()
    if report is None:
        print(f"{parser.prog}: interrupted", file=stderr)
        return EXIT_INTERRUPTED
    if model is not None:
        def note(text):
            if not args.quiet:
                print(f"  measuring {text}", file=stderr, flush=True)

        try:
            report["model"] = measure_model_section(model, plan.info, progress=note, compile=args.compile)
        except KeyboardInterrupt:
            print(f"{parser.prog}: interrupted", file=stderr)
            return EXIT_INTERRUPTED
    print(render_results(report), file=stdout, flush=True)
    if not write_outputs(report, args, write_plot=write_plot, prog=parser.prog, stdout=stdout, stderr=stderr):
        return EXIT_BAD_INPUT
    return report["health"]["exit_status"]
