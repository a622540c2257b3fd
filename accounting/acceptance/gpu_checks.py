"""The GPU checks only a real GPU answers, made after the clock check in its process: ``python -m
accounting.acceptance.gpu_checks OUT.json`` runs :mod:`~accounting.acceptance.clock_check` (same arguments), then
adds :func:`run_gpu_checks`'s record to its JSON under ``gpu_checks``; the exit status stays the clock check's.

Two questions a replay cannot settle, each asked of the device the way the package measures:

- **call by call against back to back, at the sustained shape after a soak** (:func:`sustained_windows`). The
  recorded H200 read bf16 4608×6208×5632 at 792.6 TFLOP/s (1890 MHz) timed call by call through
  :func:`accounting.timing.time_fn` (a spin, the product between two events, a host synchronize, every call), and at
  684-689 (1455-1500 MHz) back to back for 2 s. After a soak of back-to-back products, windows timed three ways take
  turns: ``time_fn`` (its figure: the work over the median call), the package's back-to-back window
  (:func:`accounting.timing.time_back_to_back`, what its sustained figure times) and an independent loop with one
  event pair around it (:func:`~accounting.acceptance.clock_check.time_loop`), each with the clock (min, median, max)
  and power its telemetry read.
- **each round's throttle reasons after its synchronize, over 200 hot rounds** (:func:`hot_rounds`). The regression
  gate reads a GPU benchmark's telemetry after each timed round has synchronized. On a GPU at its power cap, is the
  cap reason still set then, and what do clock and power read, beside a reading taken while the round still runs?

The device is reached through seams (``ops`` as :func:`~accounting.acceptance.clock_check.time_loop` takes them, a
``window`` factory that samples telemetry over a ``with`` block, a ``read`` of one reading), so the arithmetic and
the order are tested on the CPU. A check that cannot be made says why in its record; none stops the others.

>>> share_with([("sw_power_cap",), (), ("sw_power_cap", "hw_slowdown")], "sw_power_cap")
0.667
"""

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass

import torch

from accounting import timing
from accounting.acceptance import clock_check
from accounting.acceptance.clock_check import MIN_CALLS, CudaOps, time_loop
from accounting.errors import AccountingError
from accounting.telemetry.gpu import open_gpu_backend
from accounting.telemetry.readings import NoBackend
from accounting.telemetry.sampler import Sampler

SUSTAINED_DTYPE = "bfloat16"
SUSTAINED_SHAPE = (4608, 6208, 5632)
"""m, k, n of the bf16 product the report chose for its sustained window on the recorded H200 (report.json), the
shape of its 2-s back-to-back windows (sdpa-kernels-and-sustained-window.json)."""
ROUND_SHAPE = (8192, 8192, 8192)
"""One round of the hot rounds: the gate's bf16 8192³ benchmark's product (1.4 ms on the recorded H200)."""
SOAK_S = 3.0
"""Back-to-back products before the windows: the recorded H200 reached its capped clock within the first of its 2-s
windows (1140-1980 MHz there, 1410-1545 after)."""
WINDOW_S = 0.8
"""Each window's least length: 40 telemetry readings at 20 ms."""
SETTLE_S = 0.5
"""Back-to-back products, untimed, after each ``time_fn`` window and before the back-to-back ones: the duty-cycled
calls let the clock rise again, and the limiter takes a while to bring it back down (on the simulated H200, 0.15 s
from 1890 to 1455 MHz; without it, the back-to-back window right after read 3.5 % high there)."""
PAIRS = 3
"""Turns of the three timings; each figure is the median over turns."""
HOT_ROUNDS = 200
POWER_CAP = "sw_power_cap"
"""The throttle reason of the software power cap, as the NVML backend names it."""
WINDOW_FIELDS = ("clock_mhz_min", "clock_mhz_median", "clock_mhz_max", "power_w_median", "power_limit_w",
                 "energy_j", "samples", "duration_s")


def telemetry_of(summary) -> dict:
    """What a window's telemetry summary says, for the record: clock min/median/max, power, reasons (``{}``: none)."""
    if summary is None:
        return {}
    values = summary.to_dict() if hasattr(summary, "to_dict") else dict(summary)
    found = {name: values.get(name) for name in WINDOW_FIELDS if values.get(name) is not None}
    found["throttle_reasons"] = list(values.get("throttle_reasons") or [])
    return found


@dataclass(frozen=True)
class Timed:
    """One window: how it was timed, its calls, the seconds its figure divides the work by, its telemetry."""

    how: str
    calls: int
    seconds: float
    flops_per_s: float
    telemetry: dict

    def as_dict(self) -> dict:
        return {"how": self.how, "calls": self.calls, "seconds": self.seconds, "tflops": self.flops_per_s / 1e12,
                **self.telemetry}


def _sampled(window, measure):
    """``measure()`` inside a telemetry window (``window()``: a context manager with ``summary`` after it, or
    ``None``: no telemetry); returns ``(result, telemetry)``."""
    if window is None:
        return measure(), {}
    sampler = window()
    with sampler:
        result = measure()
    return result, telemetry_of(getattr(sampler, "summary", None))


def sustained_windows(ops, call, *, flops: int, package_time, package_back_to_back=None, window=None,
                      soak_s: float = SOAK_S, window_s: float = WINDOW_S, settle_s: float = SETTLE_S,
                      pairs: int = PAIRS) -> dict:
    """Soak, then ``pairs`` turns of: ``package_time()`` (``time_fn``'s :class:`~accounting.timing.Timing`; the
    work over its median call), ``settle_s`` of untimed back-to-back calls, ``package_back_to_back()`` (a
    :class:`~accounting.timing.BackToBack`; skipped when ``None``) and one ``time_loop`` of ``call`` sized to
    ``window_s`` from the soak, each timed window in a telemetry ``window``.

    Returns the record: the soak, every window, each way's median TFLOP/s over turns, and the ratios of
    ``time_fn``'s and the package's back-to-back figure to the one-event-pair loop's.
    """
    if flops <= 0 or pairs < 1:
        raise AccountingError(f"flops and pairs must be positive, got flops={flops!r}, pairs={pairs!r}")
    one = time_loop(ops, call, 1)
    per_call = max(one.event_per_call_s, 1e-9)
    soak, soak_telemetry = _sampled(window, lambda: time_loop(ops, call, max(MIN_CALLS, math.ceil(soak_s / per_call))))
    per_call = max(soak.event_per_call_s, 1e-9)
    calls = max(MIN_CALLS, math.ceil(window_s / per_call))
    windows = []
    for _turn in range(pairs):
        timing, telemetry = _sampled(window, package_time)
        windows.append(Timed("time_fn", len(timing.samples), timing.median, flops / timing.median, telemetry))
        if settle_s > 0:
            time_loop(ops, call, max(1, math.ceil(settle_s / per_call)))
        if package_back_to_back is not None:
            back, telemetry = _sampled(window, package_back_to_back)
            windows.append(Timed("back_to_back", back.calls, back.seconds, flops * back.calls / back.seconds,
                                 telemetry))
        loop, telemetry = _sampled(window, lambda: time_loop(ops, call, calls))
        windows.append(Timed("one_event_pair", loop.calls, loop.event_s, flops * loop.calls / loop.event_s,
                             telemetry))
    medians = {how: statistics.median(w.flops_per_s for w in windows if w.how == how) / 1e12
               for how in dict.fromkeys(w.how for w in windows)}
    loop_tflops = medians["one_event_pair"]
    return {"flops": flops,
            "soak": {"calls": soak.calls, "seconds": soak.event_s, "tflops": flops * soak.calls / soak.event_s / 1e12,
                     **soak_telemetry},
            "windows": [w.as_dict() for w in windows], "median_tflops": medians,
            "time_fn_over_one_event_pair": medians["time_fn"] / loop_tflops,
            "back_to_back_over_one_event_pair": (medians["back_to_back"] / loop_tflops
                                                 if "back_to_back" in medians else None)}


def share_with(reasons_per_round, reason: str) -> float | None:
    """The share of rounds whose reasons include ``reason``, to 3 places (``None``: no rounds)."""
    rounds = list(reasons_per_round)
    if not rounds:
        return None
    return round(sum(reason in (found or ()) for found in rounds) / len(rounds), 3)


def _median(values) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def hot_rounds(ops, call, read, *, rounds: int = HOT_ROUNDS) -> dict:
    """``rounds`` rounds of ``call``, each read twice: right after it is queued (the device still runs it) and after
    ``ops.synchronize()`` (where the gate's per-round reading is taken). ``read()`` returns a
    :class:`~accounting.telemetry.readings.Reading`.

    Returns, for each side (``during``, ``after_sync``): the share of rounds with the power-cap reason, every reason
    seen with its share, the clock's min/median/max and the median power; and each round's readings.
    """
    if rounds < 1:
        raise AccountingError(f"rounds must be positive, got {rounds!r}")
    ops.synchronize()
    sides = {"during": [], "after_sync": []}
    for _ in range(rounds):
        call()
        sides["during"].append(read())
        ops.synchronize()
        sides["after_sync"].append(read())
    record = {"rounds": rounds}
    for side, readings in sides.items():
        reasons = [tuple(reading.throttle_reasons or ()) for reading in readings]
        clocks = [reading.clock_mhz for reading in readings if reading.clock_mhz is not None]
        record[side] = {
            "power_cap_share": share_with(reasons, POWER_CAP),
            "reasons": {name: share_with(reasons, name) for name in sorted({r for found in reasons for r in found})},
            "clock_mhz_min": min(clocks, default=None), "clock_mhz_median": _median(clocks),
            "clock_mhz_max": max(clocks, default=None),
            "power_w_median": _median(reading.power_w for reading in readings),
            "per_round": [{"clock_mhz": r.clock_mhz, "power_w": r.power_w, "throttle_reasons": list(found)}
                          for r, found in zip(readings, reasons)],
        }
    return record


def _guarded(check) -> dict:
    """``check()``'s record, or why it could not be made (any error: the other checks still run)."""
    try:
        return check()
    except Exception as error:  # noqa: BLE001 - one check's failure is recorded, never the end of the others
        return {"error": f"{type(error).__name__}: {error}"}


def run_gpu_checks(device: str = "cuda:0", *, ops=None, case_factory=None, open_backend=open_gpu_backend,
                   sampler=Sampler) -> dict:
    """Both checks on a CUDA ``device``, the sustained windows first (they heat the GPU for the hot rounds).

    The device's seams, each defaulting to the real one: ``ops`` (:class:`~accounting.acceptance.clock_check.CudaOps`),
    ``case_factory`` (:func:`accounting.timing.matmul_case`), ``open_backend`` (the telemetry backend of a GPU index),
    ``sampler`` (a telemetry window on ``device``).
    """
    ops = CudaOps(device) if ops is None else ops
    case_factory = timing.matmul_case if case_factory is None else case_factory
    backend = open_backend(torch.device(device).index or 0)
    telemetry = None if isinstance(backend, NoBackend) else backend
    window = None if telemetry is None else (lambda: sampler(device))
    unavailable = None if telemetry is not None else \
        f"no telemetry: {next(iter(backend.unavailable.values()), 'no backend')}"

    def sustained():
        case = case_factory(SUSTAINED_DTYPE, *SUSTAINED_SHAPE, device)
        calls = max(MIN_CALLS, 4 * math.ceil(WINDOW_S / 1e-4))  # a cap only: the window's time ends it
        record = sustained_windows(
            ops, case.fn, flops=case.flops, window=window,
            package_time=lambda: timing.time_fn(case.fn, device=device, warmup=0, min_time_s=WINDOW_S,
                                                max_repeats=calls, flops=case.flops, count_flops=False),
            package_back_to_back=lambda: timing.time_back_to_back(case.fn, seconds=WINDOW_S, device=device,
                                                                  flops=case.flops, max_calls=calls))
        del case
        return {"dtype": SUSTAINED_DTYPE, "shape": list(SUSTAINED_SHAPE), **record,
                **({"telemetry": unavailable} if unavailable else {})}

    def rounds():
        if telemetry is None:
            return {"skipped": unavailable}
        case = case_factory(SUSTAINED_DTYPE, *ROUND_SHAPE, device)
        record = hot_rounds(ops, case.fn, lambda: telemetry.read(edge=False))
        del case
        return {"dtype": SUSTAINED_DTYPE, "shape": list(ROUND_SHAPE), **record}

    try:
        return {"sustained_windows": _guarded(sustained), "hot_rounds": _guarded(rounds)}
    finally:
        if telemetry is not None:
            telemetry.close()
        torch.cuda.empty_cache()


def brief(found: dict) -> dict:
    """The checks' record without its per-window and per-round detail: what the log shows of it.

    >>> brief({"hot_rounds": {"rounds": 2, "during": {"power_cap_share": 1.0, "per_round": [{}, {}]}}})
    {'hot_rounds': {'rounds': 2, 'during': {'power_cap_share': 1.0}}}
    """
    shown = {}
    for name, record in found.items():
        shown[name] = {key: ({k: v for k, v in value.items() if k != "per_round"} if isinstance(value, dict) else value)
                       for key, value in (record or {}).items() if key != "windows"}
    return shown


def main(argv=None) -> int:
    """The clock check (:func:`accounting.acceptance.clock_check.main`, same arguments), then the GPU checks added to
    its JSON; the exit status is the clock check's (a GPU check's figures are judged in the summary)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    status = clock_check.main(argv)
    if status == 2:  # no GPU, or bad arguments: the clock check said why
        return status
    parser = argparse.ArgumentParser(add_help=False)  # the clock check's own parser has checked them
    parser.add_argument("json_path")
    parser.add_argument("--device", default="cuda:0")
    args, _rest = parser.parse_known_args(argv)
    path, device = args.json_path, args.device
    with open(path) as handle:
        document = json.load(handle)
    document["gpu_checks"] = run_gpu_checks(device)
    print(f"gpu checks: {json.dumps(brief(document['gpu_checks']))}", flush=True)
    with open(path, "w") as handle:
        json.dump(document, handle, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
