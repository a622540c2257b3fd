"""The headline figures of each step's outputs, each judged against what a healthy device reads.

Pure functions of the JSON the steps wrote (the report's, the fleet's, pytest-benchmark's, the clock
check's) and the device's name: no file is read here, so every rule is tested on hand-made documents.

>>> doc = {"bandwidth": {"measured_bytes_per_s": 3.9e12}, "dtypes": {}}
>>> [(f.name, f.value, f.verdict) for f in report_figures(doc, "NVIDIA H200", step="report")]
[('memory bandwidth (device copy)', 3.9, 'in range')]
"""

import re
from dataclasses import dataclass

from accounting.acceptance.expected import (
    AGREEMENT,
    HOST_AGREEMENT,
    Expected,
    expected_bandwidth,
    expected_clock,
    expected_headline,
    expected_matmul,
    expected_model_mfu,
    expected_power,
    expected_ratio,
    judge,
)
from accounting.bench.matrix import load_benchmarks
from accounting.errors import AccountingError

HEADLINES = ("burst", "sustained")


@dataclass(frozen=True)
class Figure:
    """One figure of one step: its value in ``unit``, what it should be, and where it came from (``note``)."""

    step: str
    name: str
    value: float | None
    unit: str
    expected: Expected | None = None
    note: str = ""
    digits: int = 1

    @property
    def verdict(self) -> str:
        return judge(self.value, self.expected)

    def as_dict(self) -> dict:
        expected = None if self.expected is None else {
            "low": self.expected.low, "high": self.expected.high, "unit": self.expected.unit,
            "source": self.expected.source}
        return {"step": self.step, "name": self.name, "value": self.value, "unit": self.unit, "note": self.note,
                "expected": expected, "verdict": self.verdict}


def _shape(shape) -> str:
    return "x".join(str(edge) for edge in shape) if shape else "?"


def report_figures(document: dict, device_name: str | None, *, step: str) -> list[Figure]:
    """Per dtype the burst and sustained TFLOP/s with the clock and power behind each (a quick report: its one
    product), and the copy bandwidth, each against the healthy range of ``device_name``."""
    figures = []
    for dtype, entry in (document.get("dtypes") or {}).items():
        headlines = entry.get("headlines") or {}
        matmul = expected_matmul(device_name, dtype)
        if not any(headlines.get(kind) for kind in HEADLINES):  # a quick report: one product, no headlines
            best = entry.get("best") or {}
            if best.get("flops_per_s"):
                figures.append(Figure(step, f"{dtype} product", best["flops_per_s"] / 1e12, "TFLOP/s", matmul,
                                      f"{_shape((best.get('m'), best.get('k'), best.get('n')))} (m×k×n)"))
            continue
        for group in (headlines, headlines.get("default_accumulation") or {}):  # fp8: fast, then default
            for kind in HEADLINES:
                headline = group.get(kind)
                if headline:
                    figures += _headline_figures(step, dtype, kind, headline, device_name)
    bandwidth = (document.get("bandwidth") or {}).get("measured_bytes_per_s")
    if bandwidth:
        figures.append(Figure(step, "memory bandwidth (device copy)", bandwidth / 1e12, "TB/s",
                              expected_bandwidth(device_name), "bytes read + written", digits=2))
    return figures


def _headline_figures(step: str, dtype: str, kind: str, headline: dict, device_name: str | None) -> list[Figure]:
    """A headline's TFLOP/s (named with its fp8 accumulation, against mamf-finder where it measured the same
    card and accumulation: :func:`~accounting.acceptance.expected.expected_headline`), clock and power."""
    accumulation = headline.get("accumulation")
    label = dtype if accumulation is None else f"{dtype} ({accumulation} accumulation)"
    flops = headline.get("flops_per_s")
    note = _shape(headline.get("shape")) if headline.get("shape") else ""
    if headline.get("seconds"):
        note += f"{'; ' if note else ''}window {headline['seconds']:.3g} s"
    if not headline.get("published", True):
        note += f"{'; ' if note else ''}not published: {headline.get('reason')}"
    figures = [Figure(step, f"{label} {kind}", flops / 1e12 if flops else None, "TFLOP/s",
                      expected_headline(device_name, dtype, kind, accumulation), note)]
    if headline.get("clock_mhz") is not None:
        figures.append(Figure(step, f"{label} {kind} SM clock", headline["clock_mhz"], "MHz",
                              expected_clock(device_name), digits=0))
    if headline.get("power_w") is not None:
        figures.append(Figure(step, f"{label} {kind} power", headline["power_w"], "W",
                              expected_power(device_name), digits=0))
    return figures


def report_headline(document: dict) -> str:
    """The report's health and machine verdict in one line."""
    health = document.get("health") or {}
    reasons = "; ".join(str(reason.get("text", reason)) if isinstance(reason, dict) else str(reason)
                        for reason in (health.get("reasons") or [])[:2])
    return f"health {health.get('state', '?')}, verdict {document.get('verdict', '?')}" + (f" ({reasons})" if reasons else "")


def cuda_model_floor(precision: str, size: str | None = None, device_name: str | None = None) -> float | None:
    """``benchmarks.json``'s model-MFU floor on CUDA for ``precision`` (the size's on this chip where it has one),
    ``None`` where it has none."""
    try:
        return load_benchmarks().model_floor("cuda", precision, size, chip=device_name)
    except AccountingError:
        return None


def model_figures(document: dict, *, step: str, floor=cuda_model_floor) -> list[Figure]:
    """Model MFU per precision policy (and with recomputation), each against its floor in benchmarks.json."""
    figures = []
    for row in (document.get("model") or {}).get("rows", []):
        precision = row.get("precision", "?")
        name = f"model MFU {row.get('size', '')} {precision}" + (" recompute" if row.get("recompute") else "")
        note = f"{row['tokens_per_s']:,.0f} tokens/s" if row.get("tokens_per_s") else ""
        own = row.get("floor")  # the report's floor for this size on this chip, where it wrote one
        figures.append(Figure(step, name, row.get("mfu"), "", expected_model_mfu(floor(precision) if own is None else own),
                              note, digits=3))
    return figures


def pytest_figures(document: dict, device_name: str | None, *, step: str, floor=cuda_model_floor) -> list[Figure]:
    """From pytest-benchmark's JSON: each matmul benchmark's TFLOP/s (its note names an fp8 accumulation, and a
    failed physical check), each training step's model MFU."""
    figures = []
    for benchmark in document.get("benchmarks", []):
        extra = benchmark.get("extra_info") or {}
        name = benchmark.get("name", "?")
        if isinstance(extra.get("model"), dict):
            model = extra["model"]
            own = model.get("floor")  # the test's floor for this size on this chip, where it recorded one
            figures.append(Figure(step, name, model.get("mfu"), "",
                                  expected_model_mfu(floor(model.get("precision")) if own is None else own),
                                  "model MFU", digits=3))
        elif extra.get("achieved_tflops") is not None and extra.get("dtype"):
            note = f"MFU {extra.get('mfu') or 0:.3f}"
            if extra.get("accumulation"):
                note += f"; {extra['accumulation']} accumulation"
            physical = extra.get("physical_check") or {}
            if physical.get("ok") is False:
                note += f"; not as it stands: {physical.get('reason')}"
            figures.append(Figure(step, name, extra["achieved_tflops"], "TFLOP/s",
                                  expected_matmul(device_name, extra["dtype"]), note))
    return figures


def clock_figures(document: dict, device_name: str | None, *, step: str) -> list[Figure]:
    """The timer's agreement with the event loop and the host clock, and the loop's TFLOP/s, per dtype."""
    figures = []
    for check in document.get("checks", []):
        label = f"{check['dtype']} {_shape(check.get('shape'))}"
        figures.append(Figure(step, f"{label} time_matmul / event loop", check["package_over_events"], "×",
                              expected_ratio(AGREEMENT, "same product, same process, interleaved"), digits=3))
        figures.append(Figure(step, f"{label} host clock / event loop", check["host_over_events"], "×",
                              expected_ratio(HOST_AGREEMENT, "the host brackets the events"), digits=3))
        figures.append(Figure(step, f"{label} event-loop TFLOP/s", check["event_tflops"], "TFLOP/s",
                              expected_matmul(device_name, check["dtype"])))
    return figures


def fleet_headline(document: dict) -> str:
    """World size, backend, health and the best all_reduce bus bandwidth, in one line."""
    settings = document.get("settings") or {}
    health = (document.get("health") or {}).get("state", "?")
    rows = [row for row in document.get("collectives") or [] if row.get("collective") == "all_reduce"]
    busbw = max((row.get("busbw_bytes_per_s") or 0 for row in rows), default=0)
    text = f"world {settings.get('world_size', '?')} ({settings.get('backend') or 'no collectives'}), health {health}"
    return text + (f", all_reduce busbw up to {busbw / 1e9:.0f} GB/s" if busbw else "")


_PYTEST_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)")


def pytest_headline(log_text: str) -> str:
    """pytest's closing counts (``12 passed, 6 skipped``) from its log; empty when there are none.

    >>> pytest_headline("...\\n3 passed, 1 skipped, 40 deselected in 12.3s\\n")
    '3 passed, 1 skipped, 40 deselected'
    """
    for line in reversed(log_text.splitlines()):
        counts = _PYTEST_COUNTS.findall(line)
        if counts and " in " in line:
            return ", ".join(f"{number} {word}" for number, word in counts)
    return ""
