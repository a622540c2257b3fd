"""Units and number formats shared by the report's text, verdicts and plot (one place for each).

Byte counts are written with :func:`accounting._units.readable_bytes`, as everywhere in the package.

>>> tflops(2.3711e11), tflops(7.9e14), tflops(None)
('0.237', '790', '—')
"""

from accounting.hardware import TERA  # FLOP/s per TFLOP/s, one definition for the package

GB = 1e9
"""Bytes per GB (bandwidths are quoted in decimal units, as vendors do)."""

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
