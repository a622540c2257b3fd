"""A pytest plugin the gate loads (``-p accounting.gate._select``) to re-measure only its suspects.

Keeps the collected items whose node id is listed, one a line, in the file named by
``$ACCOUNTING_GATE_ONLY``, and deselects the rest, so the user's own arguments (``-m cpu -k
1024``, paths, options) stay as they were: the suspects are their intersection, where
adding node ids to the command line would have run their union.
"""

import os
from pathlib import Path

ONLY_ENV = "ACCOUNTING_GATE_ONLY"


def pytest_collection_modifyitems(config, items):
    listing = os.environ.get(ONLY_ENV)
    if not listing:
        return
    wanted = set(Path(listing).read_text().splitlines())
    keep = [item for item in items if item.nodeid in wanted]
    dropped = [item for item in items if item.nodeid not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
