"""Readable renderings of byte counts, FLOP counts and durations (for ``__str__`` only).

>>> readable_bytes(16 * 2**30), readable_flops(6.3e24), readable_duration(12_436_000)
('16.00 GiB', '6.30e+24 FLOPs', '143.9 days')
"""

TERA = 1e12
"""FLOP/s per TFLOP/s (and bytes/s per TB/s): one definition for the package."""
GB = 1e9
"""Bytes per GB: bandwidths are quoted in decimal units, as vendors do."""

_BINARY_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")

_DURATIONS = (("years", 365 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60))


def readable_bytes(count: float) -> str:
    """Bytes in powers of 1024 (1 GiB = 2**30 bytes)."""
    value = float(count)
    for unit in _BINARY_UNITS:
        if abs(value) < 1024 or unit == _BINARY_UNITS[-1]:
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def readable_flops(count: float) -> str:
    """A FLOP count in scientific notation."""
    return f"{float(count):.2e} FLOPs"


def readable_duration(seconds: float) -> str:
    """Seconds in the largest unit (years, days, hours, minutes) that keeps the number >= 1."""
    for unit, length in _DURATIONS:
        if seconds >= length:
            return f"{seconds / length:.1f} {unit}"
    return f"{seconds:.3g} seconds"
