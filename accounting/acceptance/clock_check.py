"""The package's timer against an independent clock, in one process: ``python -m accounting.acceptance.clock_check OUT.json``.

A timing fault (a timer that misses work, or times a launch instead of a kernel) would make every figure
of the acceptance run wrong the same way, so no figure could show it. This times one product two ways:

- the package: :func:`accounting.timing.time_matmul`, the median of per-call CUDA-event timings;
- independently: a plain loop of the same ``torch.matmul(a, b, out=out)`` with one CUDA event before and
  one after the whole loop, and the host clock around it, read only after a synchronize
  (:func:`time_loop`), so nothing queued earlier is counted and nothing queued inside is missed.

The two run in pairs, interleaved (package, loop, package, loop, ...), so drift of the clock or the power
state falls on both; the ratios are the medians over pairs and must lie in
:data:`~accounting.acceptance.expected.AGREEMENT` (package over events) and
:data:`~accounting.acceptance.expected.HOST_AGREEMENT` (host over events). FLOPs are 2·m·k·n per product
(a multiply-add is 2 FLOPs). TF32 is off for float32, set explicitly for the whole check.

The device calls go through an ``ops`` object (:class:`CudaOps` on a GPU), so the arithmetic and the order
of synchronizations are tested on the CPU with a fake.
"""

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from accounting.acceptance.expected import AGREEMENT, HOST_AGREEMENT, expected_matmul, judge
from accounting.errors import AccountingError
from accounting.flops import matmul_flops
from accounting.hardware.devices import cuda_available
from accounting.hardware.precision import float32_matmul_mode, tf32_flags
from accounting.timing import time_matmul

WARMUP_CALLS = 3
"""Untimed products first (cuBLAS handles, kernel choice)."""
PAIRS = 3
"""(package, loop) measurements; each ratio is the median over pairs."""
MIN_LOOP_S = 0.2
"""Each loop runs at least this long, so a launch and a synchronize are a negligible part of it."""
MIN_CALLS = 10
CHECKS = (("bfloat16", 8192), ("float32", 8192))
"""The products compared: the headline dtype, and plain FP32 (TF32 off), where a TF32 flag left on would show
as a package timing faster than the loop's. 8192² operands (128 MiB in bf16) exceed any L2, so the package's
timer does not flush the cache between calls and both time the same cold-from-HBM product."""


class CudaOps:
    """The device seam of :func:`time_loop` on CUDA: synchronize, the host clock, events on the device's stream."""

    def __init__(self, device):
        self.device = torch.device(device)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def now(self) -> float:
        return time.perf_counter()

    def record(self):
        """Record an event on the device's current stream (does not wait)."""
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def elapsed(self, start, end) -> float:
        """Seconds between two recorded events, after waiting for the later one."""
        end.synchronize()
        return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds


@dataclass(frozen=True)
class LoopTiming:
    """One loop of ``calls`` products: the seconds between its events, and on the host clock around it."""

    calls: int
    event_s: float
    host_s: float

    @property
    def event_per_call_s(self) -> float:
        return self.event_s / self.calls

    @property
    def host_per_call_s(self) -> float:
        return self.host_s / self.calls


def time_loop(ops, call: Callable[[], object], calls: int) -> LoopTiming:
    """Time ``calls`` back-to-back calls with one event pair and the host clock around them.

    Order: synchronize (nothing earlier still runs), host clock, start event, the calls, end event,
    synchronize (every call finished), host clock; then the events' elapsed time.
    """
    if calls < 1:
        raise AccountingError(f"a loop needs at least one call, got {calls!r}")
    ops.synchronize()
    host_start = ops.now()
    start = ops.record()
    for _ in range(calls):
        call()
    end = ops.record()
    ops.synchronize()
    host_end = ops.now()
    return LoopTiming(calls, ops.elapsed(start, end), host_end - host_start)


@dataclass(frozen=True)
class ClockComparison:
    """The package's median per call and the loops', and their ratios (medians over pairs)."""

    dtype: str
    shape: tuple[int, int, int]
    flops: int
    package_s: tuple[float, ...]
    loops: tuple[LoopTiming, ...]

    @property
    def package_over_events(self) -> float:
        return statistics.median(p / loop.event_per_call_s for p, loop in zip(self.package_s, self.loops))

    @property
    def host_over_events(self) -> float:
        return statistics.median(loop.host_per_call_s / loop.event_per_call_s for loop in self.loops)

    @property
    def event_tflops(self) -> float:
        """TFLOP/s by the loop's events (median per call over loops)."""
        return self.flops / statistics.median(loop.event_per_call_s for loop in self.loops) / 1e12

    @property
    def package_tflops(self) -> float:
        return self.flops / statistics.median(self.package_s) / 1e12

    def problems(self) -> list[str]:
        """What does not agree, in words (empty when both ratios are within their bounds)."""
        found = []
        for name, value, (low, high) in (("time_matmul / event loop", self.package_over_events, AGREEMENT),
                                         ("host clock / event loop", self.host_over_events, HOST_AGREEMENT)):
            if not low <= value <= high:
                found.append(f"{self.dtype} {'x'.join(map(str, self.shape))}: {name} = {value:.3f}, "
                             f"outside {low:g}–{high:g}")
        return found

    def as_dict(self, device_name: str | None = None) -> dict:
        expected = expected_matmul(device_name, self.dtype)
        return {"dtype": self.dtype, "shape": list(self.shape), "flops": self.flops,
                "package_s": list(self.package_s),
                "loops": [{"calls": loop.calls, "event_s": loop.event_s, "host_s": loop.host_s} for loop in self.loops],
                "package_over_events": self.package_over_events, "host_over_events": self.host_over_events,
                "event_tflops": self.event_tflops, "package_tflops": self.package_tflops,
                "event_tflops_verdict": judge(self.event_tflops, expected), "problems": self.problems()}


def compare_clocks(ops, call: Callable[[], object], package_time: Callable[[], float], *, flops: int, dtype: str,
                   shape: tuple[int, int, int], pairs: int = PAIRS, warmup: int = WARMUP_CALLS,
                   min_loop_s: float = MIN_LOOP_S, min_calls: int = MIN_CALLS) -> ClockComparison:
    """Warm up, size the loop to ``min_loop_s`` from one timed call, then ``pairs`` of (package, loop)."""
    for _ in range(warmup):
        call()
    one = time_loop(ops, call, 1)
    calls = max(min_calls, math.ceil(min_loop_s / max(one.event_per_call_s, 1e-9)))
    package, loops = [], []
    for _ in range(pairs):
        package.append(package_time())
        loops.append(time_loop(ops, call, calls))
    return ClockComparison(dtype, shape, flops, tuple(package), tuple(loops))


def check_device(device: str, dtype: str, size: int) -> ClockComparison:
    """The comparison for one square product on a CUDA device (TF32 off, set explicitly)."""
    generator = torch.Generator(device=device).manual_seed(0)
    torch_dtype = getattr(torch, dtype)
    a = torch.randn(size, size, generator=generator, device=device, dtype=torch_dtype)
    b = torch.randn(size, size, generator=generator, device=device, dtype=torch_dtype)
    out = torch.empty(size, size, device=device, dtype=torch_dtype)
    with float32_matmul_mode(tf32=False):
        result = compare_clocks(
            CudaOps(device), lambda: torch.matmul(a, b, out=out),
            lambda: time_matmul(a, b, flush_cache=False, min_time_s=MIN_LOOP_S).median,
            flops=matmul_flops((size, size), (size, size)), dtype=dtype, shape=(size, size, size))
    del a, b, out
    torch.cuda.empty_cache()
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m accounting.acceptance.clock_check",
                                     description="time_matmul against a CUDA-event loop and the host clock")
    parser.add_argument("json_path", metavar="OUT.json")
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args(argv)
    if not cuda_available():
        print(f"{parser.prog}: error: needs a CUDA or ROCm device; torch {torch.__version__} sees none", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(torch.device(args.device))
    with float32_matmul_mode(tf32=False):
        flags = tf32_flags()
    checks = []
    for dtype, size in CHECKS:
        comparison = check_device(args.device, dtype, size)
        checks.append(comparison.as_dict(name))
        print(f"{dtype} {size}^3: time_matmul {comparison.package_tflops:.1f} TFLOP/s, event loop "
              f"{comparison.event_tflops:.1f}, time_matmul/events {comparison.package_over_events:.3f}, "
              f"host/events {comparison.host_over_events:.3f}", flush=True)
    document = {"device": args.device, "device_name": name, "torch": torch.__version__, "tf32_flags_during": flags,
                "agreement": list(AGREEMENT), "host_agreement": list(HOST_AGREEMENT), "checks": checks}
    with open(args.json_path, "w") as handle:
        json.dump(document, handle, indent=1)
    # Only disagreement fails this step: whether the TFLOP/s are healthy is the figures table's question.
    problems = [problem for check in checks for problem in check["problems"]]
    for problem in problems:
        print(f"disagreement: {problem}", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
