"""Helpers shared by the command-line tests: run ``accounting`` in-process, edit a document.

>>> edited({"a": {"b": 1}}, ("a", "b"), 2), edited({"a": {"b": 1}}, ("a", "b"), ...)
({'a': {'b': 2}}, {'a': {}})
"""

import copy

from accounting.__main__ import main
from accounting.fleet import launch


def run_main(argv, capsys):
    """``main(argv)`` as the console script runs it: the exit status, stdout and stderr."""
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def fleet_bad_input(argv, capsys, monkeypatch) -> str:
    """``accounting fleet ARGV`` outside a launcher, which must refuse it with exit status 2 and one line: that line."""
    for name in launch.LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    status, _out, err = run_main(["fleet", *argv], capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1, (status, err)
    return err


def edited(document, path, value):
    """A deep copy of ``document`` with the entry at ``path`` (a tuple of keys/indices) set to ``value`` (deleted if ``...``)."""
    document = copy.deepcopy(document)
    target = document
    for key in path[:-1]:
        target = target[key]
    if value is ...:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return document
