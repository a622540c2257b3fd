"""``accounting gate history``: its options and its run (the change points of every benchmark's saved history).

Split from :mod:`accounting.gate.cli`, which holds the actions that measure and decide (save, check, compare,
ab); this one only reads saved runs (:mod:`accounting.gate.history`) and renders what it found.
"""

import argparse
import json
import os

from accounting.bench.matrix import BENCHMARKS_ENV, load_benchmarks
from accounting.console import EXIT_OK, check_writable, require_matplotlib
from accounting.errors import AccountingError
from accounting.gate.changepoints import ALPHA as CHANGE_POINT_ALPHA
from accounting.gate.history import RunSelection, analyse, parse_date, read_history, to_json
from accounting.gate.plot import write_change_point_plot
from accounting.gate.render import render_history_markdown, render_history_text
from accounting.gate.storage import RUN_METRICS, machine_id, run_files

SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
"""Where GitHub Actions reads a job's summary: the Markdown tables are appended to it when it is set."""

def positive_count(text: str) -> int:
    """A positive integer option value.

    >>> positive_count("3")
    3
    >>> positive_count("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be a positive integer, got '0'
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


HISTORY_DESCRIPTION = (
    "Which merge made it slower: the change points of every benchmark in the saved runs of this hardware (the "
    "storage and identity rules of `gate check`; the identity is the newest run's), each with its size (the ratio "
    "of the levels either side, with an interval), its significance (a permutation test) and the first run after "
    "it: its file, date, commit and branch. Binary segmentation of the log run values, each split permutation-tested as "
    "E-divisive tests its candidates (accounting/gate/changepoints.py: why, and the parameters); numpy only."
)


def history_arguments(parser, *, storage_argument) -> None:
    """The ``history`` action's options on ``parser``; ``storage_argument`` adds ``--storage`` as the other actions have it."""
    storage_argument(parser)
    parser.add_argument("-k", "--benchmark", metavar="PATTERN", action="append", default=None,
                        help="only benchmarks whose node id matches PATTERN (fnmatch, or a substring); repeatable")
    parser.add_argument("--since", metavar="DATE", default=None,
                        help="only runs saved on or after DATE (ISO: 2026-11-01 or 2026-11-01T12:00; UTC if no zone)")
    parser.add_argument("--until", metavar="DATE", default=None, help="only runs saved on or before DATE")
    parser.add_argument("--from-run", metavar="N", type=positive_count, default=None,
                        help="only runs numbered N or later (the NNNN_ of the file name)")
    parser.add_argument("--to-run", metavar="N", type=positive_count, default=None,
                        help="only runs numbered N or earlier")
    parser.add_argument("--last", metavar="N", type=positive_count, default=None,
                        help="only the newest N usable runs (after the other limits)")
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="also write the history, change points and levels as JSON to PATH ('-': standard output, "
                             "instead of the table)")
    parser.add_argument("--benchmarks-json", metavar="PATH", default=None,
                        help=f"benchmarks.json with the metric and thresholds. Default: ${BENCHMARKS_ENV} or "
                             "./benchmarks.json")
    parser.add_argument("--markdown", metavar="PATH", default=None,
                        help=f"also write the table as Markdown to PATH (it is appended to ${SUMMARY_ENV} anyway "
                             "when that is set)")
    parser.add_argument("--plot", metavar="PATH", default=None,
                        help="draw each benchmark's runs, levels and change points to PATH as PNG")
    parser.add_argument("--metric", choices=sorted(RUN_METRICS), default=None,
                        help="what each run's rounds are reduced to. Default: benchmarks.json's regression.metric")
    parser.add_argument("--no-load-guard", dest="load_guard", action="store_false",
                        help="use runs taken on a loaded or throttled machine too")


def run_history(args, stdout, *, reject) -> int:
    """Run a parsed ``history`` action; ``reject(run)`` gives why the load guard passes a run over (or ``None``)."""
    config = load_benchmarks(args.benchmarks_json)
    for path, option in ((args.markdown, "--markdown"), (args.plot, "--plot"),
                         (args.json if args.json != "-" else None, "--json")):
        if path is not None:
            check_writable(path, option)
    if args.plot is not None:
        require_matplotlib()
    if args.from_run is not None and args.to_run is not None and args.from_run > args.to_run:
        raise AccountingError(f"--from-run {args.from_run} is after --to-run {args.to_run}")
    selection = RunSelection(first=args.from_run, final=args.to_run,
                             since=parse_date(args.since, "--since") if args.since else None,
                             until=parse_date(args.until, "--until", end=True) if args.until else None,
                             last=args.last)
    if selection.since and selection.until and selection.since > selection.until:
        raise AccountingError(f"--since {args.since} is after --until {args.until}")
    files = run_files(args.storage, machine_id())
    if not files and selection == RunSelection():
        # A fresh storage, or `gate save -- -m gpu` on a machine without a GPU (nothing saved): nothing to look
        # through is an answer, not bad input; a range that selects nothing of a history stays an error.
        print(f"History: no runs\n\nNote: no saved runs in {args.storage} for this interpreter ({machine_id()}); "
              "`accounting gate save` saves them", file=stdout)
        return EXIT_OK
    runs, skipped = read_history(files, selection=selection, reject=reject if args.load_guard else None)
    notes = [] if args.load_guard else ["load guard off: runs on a loaded or throttled machine are used as they are"]
    result = analyse(runs, metric=args.metric or config.regression_metric, threshold_for=config.regression_threshold,
                     names=args.benchmark, skipped=skipped, notes=notes)
    if args.json == "-":
        print(json.dumps(to_json(result), indent=2), file=stdout)
    else:
        print(render_history_text(result, alpha=CHANGE_POINT_ALPHA), file=stdout, flush=True)
        if args.json:
            with open(args.json, "w", encoding="utf8") as handle:
                json.dump(to_json(result), handle, indent=2)
    markdown = render_history_markdown(result, alpha=CHANGE_POINT_ALPHA)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf8") as handle:
            handle.write(markdown + "\n")
    summary = os.environ.get(SUMMARY_ENV)
    if summary:
        with open(summary, "a", encoding="utf8") as handle:
            handle.write(markdown + "\n")
    if args.plot:
        write_change_point_plot(result, args.plot)
        if args.json != "-":
            print(f"Plot written to {args.plot}", file=stdout)
    return EXIT_OK
