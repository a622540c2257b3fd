"""Helpers shared by the command-line tests: run ``accounting`` in-process, edit a document.

>>> edited({"a": {"b": 1}}, ("a", "b"), 2), edited({"a": {"b": 1}}, ("a", "b"), ...)
({'a': {'b': 2}}, {'a': {}})
"""

import copy

from accounting.__main__ import main


def run_main(argv, capsys):
    """``main(argv)`` as the console script runs it: the exit status, stdout and stderr."""
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


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
