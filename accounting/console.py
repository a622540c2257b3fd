"""What the ``accounting`` commands share: one-line argument errors, exit statuses, output paths, numbers and tables.

``report``, ``gate`` and ``fleet`` each build their own arguments and text; this module
holds only what all of them use, so no command imports another's module for its plumbing.

>>> tflops(2.3711e11), tflops(7.9e14), tflops(None)
('0.237', '790', '—')
>>> print(table(["dtype", "TFLOP/s"], [["float32", "0.237"], ["bfloat16", "1.93"]]))
dtype     TFLOP/s
--------  -------
float32     0.237
bfloat16     1.93
"""

import argparse
import os
import re

from accounting._units import TERA
from accounting.errors import AccountingError

DISTRIBUTION = "pytest-accounting"
"""The name the package is installed under (``pip install pytest-accounting``); it imports as ``accounting``
and its command is ``accounting``. The index's ``accounting`` is an unrelated money-formatting package."""

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130

DPI = 120
"""Resolution of every PNG the commands write."""

NOT_KNOWN = "—"


def tflops(flops_per_second) -> str:
    """FLOP/s as TFLOP/s with three significant figures, or ``—``."""
    if flops_per_second is None:
        return NOT_KNOWN
    return f"{flops_per_second / TERA:#.3g}".rstrip(".")


def fraction(value, digits: int = 3) -> str:
    """A fraction such as MFU with ``digits`` decimals, or ``—``.

    >>> fraction(0.69123), fraction(None)
    ('0.691', '—')
    """
    return NOT_KNOWN if value is None else f"{value:.{digits}f}"


_NUMERIC = re.compile(r"^[0-9.]+(×[0-9]+)*$")


def table(header: list[str], rows: list[list[str]], *, indent: str = "") -> str:
    """Columns padded to their widest cell; cells that look like numbers are right-aligned."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]

    def numeric(cell: str) -> bool:
        return bool(_NUMERIC.match(cell)) or cell == NOT_KNOWN

    def line(cells, align_numbers=True):
        parts = []
        for cell, width in zip(cells, widths):
            cell = str(cell)
            parts.append(cell.rjust(width) if align_numbers and numeric(cell) else cell.ljust(width))
        return (indent + "  ".join(parts)).rstrip()

    lines = [line(header, align_numbers=False), indent + "  ".join("-" * width for width in widths)]
    lines += [line(row) for row in rows]
    return "\n".join(lines)


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (``prog: error: message``), exit status 2."""

    def error(self, message):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def check_writable(path: str, option: str) -> str:
    """Make sure ``path`` can be written, by creating it (and removing it again) now.

    Raises :class:`~accounting.AccountingError` naming the option and the path otherwise.

    >>> check_writable("/nonexistent-dir/report.json", "--json")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: --json '/nonexistent-dir/report.json' cannot be written: No such file or directory
    """
    if os.path.isdir(path):
        raise AccountingError(f"{option} {path!r} cannot be written: it is a directory")
    existed = os.path.exists(path)
    try:
        with open(path, "ab"):
            pass
    except OSError as error:
        raise AccountingError(f"{option} {path!r} cannot be written: {error.strerror or error}") from None
    if not existed:
        os.remove(path)
    return path


def require_matplotlib():
    """matplotlib, or an :class:`AccountingError` saying how to get it (checked before a long sweep)."""
    try:
        import matplotlib  # deferred: start-up cost, and only a plot needs it
    except ImportError:
        raise AccountingError("--plot needs matplotlib: pip install matplotlib") from None
    return matplotlib


def load_pyplot():
    """matplotlib's pyplot on the headless ``Agg`` backend (imported on first use: a report without ``--plot``
    never pays for matplotlib)."""
    matplotlib = require_matplotlib()
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as pyplot_module  # deferred: start-up cost, and only a plot needs it

    return pyplot_module
