"""The report's health: healthy, degraded or failed per device, with reasons, from the report's own evidence.

Evidence (each device judged by :func:`accounting.health.states.judge`):

- the result checks of every timed product (:mod:`accounting.report.checks`) and, at ``--level long``,
  the sustained phase's repeat and Freivalds checks: a wrong result fails the device;
- the health counters read around the run (:mod:`accounting.report.health_counters`);
- the MFU-floor verdicts the report computes: a dtype below its floor degrades the device;
- the throttle reasons the telemetry saw during the timed work: throttling degrades it.

The timed device gets all of it; the host CPU of a GPU run its own counters. Whatever could not be
checked is listed (``unchecked``), never taken as healthy; ``strict`` degrades a device for each item.
The document (:func:`health_document`) is plain JSON, and :func:`health_lines` renders it, so the fleet
and the benchmarks can judge their devices the same way and print the same section.

Exit statuses (:func:`exit_status`): a failed device always gives :data:`~accounting.health.states.EXIT_FAILED`
(4: a wrong result never exits 0); with ``strict`` a degraded one gives
:data:`~accounting.health.states.EXIT_DEGRADED` (3); otherwise 0.

>>> from accounting.health.counters import Window, Snapshot, DeviceId, Counter
>>> from accounting.report.health_counters import NoEvents
>>> window = Window(lambda: Snapshot(DeviceId("cpu"), {"edac.corrected": Counter.missing("a VM")}), events=NoEvents())
>>> with window:
...     pass
>>> found = judge_devices([window], dtypes={"float32": {"judged": True, "verdict": {"status": "below floor",
...                       "message": "below floor: MFU 0.300 < floor 0.500"}}})
>>> doc = health_document(found, [window])
>>> doc["state"], doc["reasons"][0]["text"], doc["unchecked"]
('degraded', 'float32 below floor: MFU 0.300 < floor 0.500', ['cpu: edac.corrected: a VM'])
>>> exit_status(doc), exit_status(doc, strict=True)
(0, 3)
"""

from accounting.health.states import (
    DEGRADED,
    EXIT_DEGRADED,
    EXIT_FAILED,
    EXIT_HEALTHY,
    FAILED,
    STATES,
    Reason,
    Rollup,
    Verdict,
    judge_window,
    roll_up,
    worst,
)
from accounting.report.verdict import ABOVE_PEAK, BELOW_FLOOR, UNKNOWN

MFU_CODE = "mfu-below-floor"


def _plain(value):
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


def snapshot_dict(snap) -> dict | None:
    """A counter snapshot as JSON: the device, each value (``null`` where not available), the reasons, lost or not."""
    if snap is None:
        return None
    return {"device": snap.device.label, "lost": snap.lost, "taken_at": snap.taken_at,
            "values": {name: _plain(counter.value) for name, counter in snap.counters.items()},
            "unavailable": snap.unavailable()}


def reason_dict(reason: Reason) -> dict:
    return {"state": reason.state, "device": reason.device, "code": reason.code, "text": reason.text}


def dtype_evidence(dtypes: dict, *, judge_speed: bool = True) -> tuple[list[tuple[str, str]], list[str]]:
    """From the report's dtype sections: ``(reasons, unchecked)``; each reason ``(code, text)``.

    A judged dtype below its floor is a degraded reason; one whose speed could not be judged (no
    floor, no peak, a reading above the peak) is unchecked. ``judge_speed=False`` (the quick level,
    which times one shape and judges no floor) leaves speed out.
    """
    reasons, unchecked = [], []
    if not judge_speed:
        return reasons, unchecked
    for dtype, section in dtypes.items():
        if not section.get("judged", True):
            continue
        verdict = section["verdict"]
        if verdict["status"] == BELOW_FLOOR:
            reasons.append((MFU_CODE, f"{dtype} {verdict['message']}"))
        elif verdict["status"] in (UNKNOWN, ABOVE_PEAK):
            unchecked.append(f"MFU of {dtype}: {verdict['message']}")
    return reasons, unchecked


def _merged(verdict: Verdict, reasons, unchecked, *, strict: bool) -> Verdict:
    extra = [Reason(state, verdict.device, code, text) for state, code, text in reasons]
    if strict:
        extra += [Reason(DEGRADED, verdict.device, "unchecked", f"not checked: {item}") for item in unchecked]
    every = sorted(verdict.reasons + tuple(extra), key=lambda reason: -STATES.index(reason.state))
    return Verdict(verdict.device, worst(reason.state for reason in every), tuple(every),
                   verdict.unchecked + tuple(unchecked))


def judge_devices(windows, *, checks=(), dtypes=None, throttle_reasons=(), unchecked=(), strict: bool = False,
                  judge_speed: bool = True, name: str = "node") -> Rollup:
    """Each window's device judged; the first (the timed device) with the run's evidence too.

    ``checks``: :class:`~accounting.health.results.ResultCheck` s of the timed products (a failed one
    fails the device); ``dtypes``: the report's dtype sections (their MFU verdicts, see :func:`dtype_evidence`);
    ``throttle_reasons``: what the telemetry saw; ``unchecked``: more that could not be checked (a product
    whose check ran out of memory, a dtype with no product checked). Returns the :class:`Rollup` over the devices.
    """
    verdicts = []
    speed_reasons, speed_unchecked = dtype_evidence(dtypes or {}, judge_speed=judge_speed)
    for position, window in enumerate(windows):
        if position == 0:
            verdict = judge_window(window, results=tuple(checks), throttle_reasons=tuple(throttle_reasons),
                                   strict=strict)
            verdict = _merged(verdict, [(DEGRADED, code, text) for code, text in speed_reasons],
                              [*speed_unchecked, *unchecked], strict=strict)
        else:
            verdict = judge_window(window, strict=strict)
        verdicts.append(verdict)
    return roll_up(name, verdicts)


def _unchecked_items(verdict: Verdict) -> list[str]:
    return [f"{verdict.device}: {item}" for item in verdict.unchecked]


def health_document(rollup: Rollup, windows=(), *, strict: bool = False, checks: dict | None = None) -> dict:
    """The ``health`` entry of a report: ``state``, ``exit_status``, ``strict``, ``reasons``, ``unchecked``,
    ``devices`` (each device's state, reasons, what was not checked and its counters before, under load and
    after, and its Xids) and ``checks`` (the result checks' summary, as :func:`checks_document` gives it)."""
    devices = []
    windows = list(windows)
    for position, verdict in enumerate(rollup.members):
        window = windows[position] if position < len(windows) else None
        xids = None if window is None else window.xids
        devices.append({
            "device": verdict.device, "state": verdict.state,
            "reasons": [reason_dict(reason) for reason in verdict.reasons],
            "unchecked": list(verdict.unchecked),
            "counters": None if window is None else {
                "before": snapshot_dict(window.before), "load": snapshot_dict(window.load),
                "after": snapshot_dict(window.after)},
            "xids": None if xids is None else {"values": _plain(xids.value), "unavailable": xids.reason or None},
        })
    document = {
        "state": rollup.state,
        "strict": strict,
        "reasons": [reason_dict(reason) for reason in rollup.reasons],
        "unchecked": [item for verdict in rollup.members for item in _unchecked_items(verdict)],
        "devices": devices,
        "checks": checks or checks_document({}),
    }
    document["exit_status"] = exit_status(document, strict=strict)
    return document


def checks_document(by_dtype: dict, *, injected: dict | None = None, fault: str | None = None,
                    burn: dict | None = None) -> dict:
    """The result checks in sum: products checked and failed, their seconds, per dtype, and the self-test fault.

    ``by_dtype``: each dtype's ``checks`` entry of the report (``checked``, ``failed``, ``seconds``, ...);
    ``fault``: the ``--inject-fault`` asked for, ``injected``: where it went (``None``: nowhere);
    ``burn``: the sustained phase per dtype (``--level long``: ``products`` compared bit for bit with the
    first, ``mismatches``, Freivalds ``checks`` and the ``failed`` ones).

    >>> checks_document({"float32": {"checked": 3, "failed": [], "seconds": 0.5}})["products"]
    3
    """
    seconds = [entry.get("seconds") for entry in by_dtype.values()]
    return {"products": sum(entry.get("checked", 0) for entry in by_dtype.values()),
            "failed": sum(len(entry.get("failed", ())) for entry in by_dtype.values()),
            "seconds": None if not seconds or None in seconds else sum(seconds),
            "by_dtype": by_dtype, "fault": fault, "injected": injected, "burn": burn}


def exit_status(document: dict, *, strict: bool = False) -> int:
    """4 for a failed device (always), 3 for a degraded one with ``strict``, else 0."""
    if document["state"] == FAILED:
        return EXIT_FAILED
    if document["state"] == DEGRADED and strict:
        return EXIT_DEGRADED
    return EXIT_HEALTHY


def _grouped(items) -> list[str]:
    """``name: reason`` items with one reason joined: ``a, b: reason``."""
    groups: dict = {}
    for item in items:
        device, _, rest = item.partition(": ")
        name, separator, why = rest.partition(": ")
        key = (device, why if separator else "")
        groups.setdefault(key, []).append(name if separator else rest)
    return [f"{device}: {', '.join(names)}" + (f": {why}" if why else "") for (device, why), names in groups.items()]


def health_lines(document: dict) -> list[str]:
    """The report's Health section as text: the state and exit status, each reason, the checks, what was not checked.

    >>> doc = {"state": "failed", "exit_status": 4, "strict": False, "unchecked": ["cpu: mce.exceptions: no MCE line"],
    ...        "reasons": [{"state": "failed", "device": "cpu", "code": "wrong-result",
    ...                     "text": "float32 8x8x8 product wrong"}],
    ...        "checks": {"products": 2, "failed": 1, "seconds": 0.01, "by_dtype": {}, "fault": None, "injected": None}}
    >>> print("\\n".join(health_lines(doc)))
    Health: failed (exit status 4)
      failed: cpu: float32 8x8x8 product wrong
      result checks: 2 products checked (0.01 s, outside the timed calls), 1 failed
      not checked: cpu: mce.exceptions: no MCE line
    """
    state = document["state"]
    status = document["exit_status"]
    heading = f"Health: {state} (exit status {status}"
    if state == DEGRADED and not document.get("strict"):
        heading += f"; {EXIT_DEGRADED} with --strict"
    lines = [heading + ")"]
    lines += [f"  {reason['state']}: {reason['device']}: {reason['text']}" for reason in document["reasons"]]
    checks = document.get("checks") or {}
    if checks.get("fault"):
        where = checks.get("injected")
        lines.append(f"  self-test: --inject-fault {checks['fault']} " + (
            f"corrupted the {where['dtype']} {'x'.join(map(str, where['shape']))} product" if where
            else "found no product of its dtype holding its element: nothing was corrupted"))
    if checks:
        seconds = checks.get("seconds")
        cost = "" if seconds is None else f" ({seconds:.2g} s, outside the timed calls)"
        products, failed = checks.get("products", 0), checks.get("failed", 0)
        lines.append(f"  result checks: {products} products checked{cost}, {failed} failed")
    for dtype, found in (checks.get("burn") or {}).items():
        lines.append(f"  sustained phase {dtype}: {found['products']} products compared bit for bit with the first, "
                     f"{found['mismatches']} differed; {found['checks']} Freivalds checks, "
                     f"{len(found['failed'])} failed")
    lines += [f"  not checked: {item}" for item in _grouped(document.get("unchecked") or ())]
    return lines
