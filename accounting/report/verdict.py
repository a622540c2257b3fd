"""Healthy or not: each dtype's best MFU against its floor from ``benchmarks.json``.

A pure function of numbers, so the logic is tested on crafted measurements.

>>> from accounting.report.verdict import judge
>>> print(judge("bfloat16", mfu=0.62, floor=0.5).message)
healthy: MFU 0.620 is at or above its floor 0.500
>>> v = judge("float32", mfu=0.30, floor=0.5, best_flops=1.5e11, peak_flops=5e11)
>>> v.status, round(v.shortfall, 2)
('below floor', 0.2)
>>> print(v.message)
below floor: MFU 0.300 < floor 0.500, short by 0.200 (40% under); best 0.150 TFLOP/s, the floor needs 0.250

A dtype the device does not run natively (bf16 on an AVX2-only CPU) is measured but
not judged: no floor applies to it and it never decides the machine's verdict.

>>> print(not_judged("bfloat16", 0.013, label="emulated", reason="no AVX512-BF16 or AMX-BF16").message)
emulated — not judged: MFU 0.013 of the float32 path's peak; no AVX512-BF16 or AMX-BF16
"""

from dataclasses import dataclass

from accounting._checks import check_non_negative
from accounting.console import tflops
from accounting.errors import AccountingError
from accounting.flops import MFU_CEILING
from accounting.hardware.peaks import PEAK_TFLOPS_ENV

HEALTHY = "healthy"
BELOW_FLOOR = "below floor"
ABOVE_PEAK = "above peak"
UNKNOWN = "unknown"
NOT_JUDGED = "not judged"
"""A dtype the device only emulates (or runs as another): measured and shown, never judged."""
WRONG_RESULT = "wrong result"
"""A product of the dtype failed its result check: failed, whatever its speed (emulated or not)."""


@dataclass(frozen=True)
class Verdict:
    """The judgement on one dtype. ``healthy`` is ``None`` when it cannot be judged."""

    dtype: str
    status: str
    healthy: bool | None
    mfu: float | None
    floor: float | None
    shortfall: float | None
    """``floor - mfu`` when below the floor (a fraction of peak), else ``None``."""
    message: str

    def as_dict(self) -> dict:
        """Plain fields for the JSON report."""
        return {
            "status": self.status,
            "healthy": self.healthy,
            "mfu": self.mfu,
            "floor": self.floor,
            "shortfall": self.shortfall,
            "message": self.message,
        }


def judge(dtype: str, mfu: float | None, floor: float | None, *, best_flops: float | None = None,
          peak_flops: float | None = None, reason: str | None = None) -> Verdict:
    """Judge one dtype: healthy when ``floor <= mfu <= MFU_CEILING``; otherwise say what is wrong and by how much.

    ``mfu`` is ``None`` when nothing was measured or the device has no spec peak for the
    dtype; ``floor`` is ``None`` when ``benchmarks.json`` sets none. Either gives ``unknown``,
    with ``reason`` (or a default) saying why.

    >>> judge("float16", mfu=None, floor=0.4, reason="no spec peak for float16 on this chip").message
    'unknown: no spec peak for float16 on this chip'
    >>> judge("float16", mfu=0.7, floor=None).message
    'unknown: MFU 0.700 but benchmarks.json sets no floor for float16 here'
    """
    if mfu is None:
        why = reason or f"no MFU for {dtype} (nothing measured or no spec peak)"
        return Verdict(dtype, UNKNOWN, None, None, floor, None, f"{UNKNOWN}: {why}")
    mfu = check_non_negative(mfu, "mfu")
    if mfu > MFU_CEILING:
        message = (f"{ABOVE_PEAK}: MFU {mfu:.3f} is over {MFU_CEILING}: the peak is wrong for this device "
                   f"(set ${PEAK_TFLOPS_ENV}) or the dtype ran in a faster mode (float32 on TF32)")
        return Verdict(dtype, ABOVE_PEAK, None, mfu, floor, None, message)
    if floor is None:
        why = reason or f"benchmarks.json sets no floor for {dtype} here"
        return Verdict(dtype, UNKNOWN, None, mfu, None, None, f"{UNKNOWN}: MFU {mfu:.3f} but {why}")
    floor = check_non_negative(floor, "floor")
    if mfu >= floor:
        message = f"{HEALTHY}: MFU {mfu:.3f} is at or above its floor {floor:.3f}"
        return Verdict(dtype, HEALTHY, True, mfu, floor, None, message)
    shortfall = floor - mfu
    message = f"{BELOW_FLOOR}: MFU {mfu:.3f} < floor {floor:.3f}, short by {shortfall:.3f}"
    if floor > 0:
        message += f" ({shortfall / floor:.0%} under)"
    if best_flops is not None and peak_flops is not None:
        message += f"; best {tflops(best_flops)} TFLOP/s, the floor needs {tflops(floor * peak_flops)}"
    return Verdict(dtype, BELOW_FLOOR, False, mfu, floor, shortfall, message)


def not_judged(dtype: str, mfu: float | None, *, label: str, reason: str,
               peak_label: str = "the float32 path's peak") -> Verdict:
    """The verdict on a dtype the device does not run natively: ``label`` (``"emulated"``) and why, no floor.

    ``mfu``, when given, is shown against ``peak_label`` (for an emulated CPU dtype, the
    float32 path's peak it actually runs on) and never compared with a floor.
    """
    shown = "" if mfu is None else f"MFU {check_non_negative(mfu, 'mfu'):.3f} of {peak_label}; "
    return Verdict(dtype, NOT_JUDGED, None, mfu, None, None, f"{label} — {NOT_JUDGED}: {shown}{reason}")


def wrong_result(dtype: str, checks, *, mfu: float | None = None, floor: float | None = None) -> Verdict:
    """The verdict on a dtype one of whose products failed its result check (``checks``: the failed
    :class:`~accounting.health.results.ResultCheck` s): wrong, whatever its MFU.

    >>> from accounting.health.results import ResultCheck
    >>> bad = ResultCheck("bfloat16", (256, 256, 256), 4.2e6, 0, (0, 16), 3.0, 7.1e-7)
    >>> print(wrong_result("bfloat16", [bad], mfu=0.7, floor=0.5).message)  # doctest: +NORMALIZE_WHITESPACE
    wrong result: bfloat16 256x256x256 product wrong: row 0, columns 0-15 off by 4.2e+06x its rounding tolerance
    (residual 3, tolerance 7.1e-07)
    """
    checks = list(checks)
    if not checks:
        raise AccountingError(f"wrong_result needs the failed checks of {dtype}, got none")
    message = f"{WRONG_RESULT}: " + "; ".join(check.reason for check in checks)
    return Verdict(dtype, WRONG_RESULT, False, mfu, floor, None, message)


def overall(statuses) -> str:
    """One word for the machine from the judged dtypes' statuses: ``healthy`` only when every one is.

    ``not judged`` dtypes (emulated) are left out of the speed verdict; with nothing judged the machine
    is ``unknown``. A ``wrong result`` anywhere, emulated dtypes included, makes the machine's.

    >>> overall([judge("a", 0.6, 0.5).status, judge("b", 0.2, 0.5).status])
    'below floor'
    >>> overall([HEALTHY, UNKNOWN]), overall([HEALTHY, NOT_JUDGED]), overall([NOT_JUDGED])
    ('unknown', 'healthy', 'unknown')
    """
    statuses = set(statuses)
    if WRONG_RESULT in statuses:
        return WRONG_RESULT  # a wrong result counts even on a dtype that is not judged for speed
    statuses -= {NOT_JUDGED}
    if not statuses:
        return UNKNOWN
    for worst_first in (BELOW_FLOOR, ABOVE_PEAK):
        if worst_first in statuses:
            return worst_first
    if statuses == {HEALTHY}:
        return HEALTHY
    return UNKNOWN
