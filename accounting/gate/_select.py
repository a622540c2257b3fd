"""A pytest plugin the gate loads (``-p accounting.gate._select``) to re-measure only its suspects.

Keeps the collected items whose node id is listed, one a line, in the file named by
``$ACCOUNTING_GATE_ONLY``, and deselects the rest, so the user's own arguments (``-m cpu -k
1024``, options) stay as they were: the suspects are their intersection, where adding node ids
to the command line would have run their union.

It also collects only those node ids, not the paths of the command line (``testpaths`` or
the user's): a run of 2 benchmarks in this project's suite otherwise imported and collected
all of its ~2,000 tests, about 3 s of an 8.5 s process. The options (``-m``, ``-k``,
``--matmul-shapes``) still apply, and so does the deselection above, so a node id the
user's options would not select still does not run.
"""

import os
from pathlib import Path

ONLY_ENV = "ACCOUNTING_GATE_ONLY"


def _wanted() -> list[str] | None:
    listing = os.environ.get(ONLY_ENV)
    if not listing:
        return None
    return [line for line in Path(listing).read_text().splitlines() if line]


def pytest_configure(config):
    wanted = _wanted()
    if wanted:
        config.args = list(wanted)  # what the session collects: these node ids' files only


def pytest_collection_modifyitems(config, items):
    wanted = _wanted()
    if wanted is None:
        return
    wanted = set(wanted)
    keep = [item for item in items if item.nodeid in wanted]
    dropped = [item for item in items if item.nodeid not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
