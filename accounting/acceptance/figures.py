"""The headline figures of each step's outputs, each judged against what a healthy device reads.

Pure functions of the JSON the steps wrote (the report's, the fleet's, pytest-benchmark's, the clock
check's) and the device's name: no file is read here, so every rule is tested on hand-made documents.

>>> doc = {"bandwidth": {"measured_bytes_per_s": 3.9e12}, "dtypes": {}}
>>> [(f.name, f.value, f.verdict) for f in report_figures(doc, "NVIDIA H200", step="report")]
[('memory bandwidth (device copy)', 3.9, 'in range')]
"""

import re
import statistics
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
from accounting.acceptance.gpu_checks import POWER_CAP
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
    clocks = _clock_note({k: v for k, v in (headline.get("telemetry") or {}).items() if k.startswith("clock_mhz_")})
    if clocks:
        note += f"{'; ' if note else ''}{clocks}"
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


# ---- the GPU checks: what only a real GPU answers -------------------------------------------------------------

SOAK_LABEL = "after a soak"
"""In the name of each figure of the sustained-shape windows (the summary finds the check made by it)."""
HOT_ROUNDS_LABEL = "hot rounds"
SWEEP_ROW_LABEL = "sweep row"
ALLOC_RETRIES_LABEL = "num_alloc_retries"

_TIMED_AS = {"time_fn": "time_fn, call by call", "back_to_back": "the package's back-to-back window",
             "one_event_pair": "one event pair, back to back"}


def _clock_note(entry: dict) -> str:
    """``clock min/median/max 1410/1455/1500 MHz, 690 W`` from a window's telemetry (what of it there is)."""
    clocks = [entry.get(name) for name in ("clock_mhz_min", "clock_mhz_median", "clock_mhz_max")]
    parts = []
    if any(value is not None for value in clocks):
        parts.append("clock min/median/max " + "/".join("?" if v is None else f"{v:.0f}" for v in clocks) + " MHz")
    if entry.get("power_w_median") is not None:
        parts.append(f"{entry['power_w_median']:.0f} W")
    if entry.get("throttle_reasons"):
        parts.append(", ".join(entry["throttle_reasons"]))
    return "; ".join(parts)


def _median_entry(windows: list[dict]) -> dict:
    """Each telemetry field's median over a way's windows (the turns)."""
    merged = {}
    for name in ("clock_mhz_min", "clock_mhz_median", "clock_mhz_max", "power_w_median"):
        values = [w[name] for w in windows if w.get(name) is not None]
        if values:
            merged[name] = statistics.median(values)
    merged["throttle_reasons"] = sorted({r for w in windows for r in w.get("throttle_reasons") or []})
    return merged


def gpu_check_figures(document: dict, device_name: str | None, *, step: str) -> list[Figure]:
    """The clock check's GPU checks (:mod:`accounting.acceptance.gpu_checks`): the sustained shape's TFLOP/s after a
    soak timed each way, with the clock's min/median/max (back to back: against mamf-finder's MSMF where measured),
    the ratios to the one-event-pair loop, and the hot rounds' share with the power-cap reason during a round and
    after its synchronize. A check not made is a figure without a value, its reason in the note."""
    checks = document.get("gpu_checks") or {}
    figures = []
    sustained = checks.get("sustained_windows")
    if sustained is not None:
        label = f"{sustained.get('dtype', 'bfloat16')} {_shape(sustained.get('shape'))} {SOAK_LABEL}"
        if "median_tflops" not in sustained:
            figures.append(Figure(step, f"{label}: sustained windows", None, "TFLOP/s",
                                  note=f"not measured: {sustained.get('error') or sustained.get('skipped')}"))
        else:
            for how, tflops in sustained["median_tflops"].items():
                windows = [w for w in sustained.get("windows", []) if w.get("how") == how]
                expected = None if how == "time_fn" else expected_headline(device_name, "bfloat16", "sustained")
                figures.append(Figure(step, f"{label}, {_TIMED_AS.get(how, how)}", tflops, "TFLOP/s", expected,
                                      _clock_note(_median_entry(windows))))
            figures.append(Figure(step, f"{label}: time_fn / one event pair", sustained["time_fn_over_one_event_pair"],
                                  "×", note="above 1: the spin and synchronize between calls let the clock stay high",
                                  digits=3))
            if sustained.get("back_to_back_over_one_event_pair") is not None:
                figures.append(Figure(step, f"{label}: the package's back to back / one event pair",
                                      sustained["back_to_back_over_one_event_pair"], "×",
                                      expected_ratio(AGREEMENT, "the same work back to back, timed two ways"), digits=3))
    rounds = checks.get("hot_rounds")
    if rounds is not None:
        label = f"{rounds.get('dtype', 'bfloat16')} {_shape(rounds.get('shape'))} {HOT_ROUNDS_LABEL}"
        if "after_sync" not in rounds:
            figures.append(Figure(step, f"{label}: power-cap share", None, "",
                                  note=f"not measured: {rounds.get('error') or rounds.get('skipped')}"))
        else:
            for side, words in (("during", "while the round runs"), ("after_sync", "after its synchronize")):
                entry = rounds[side]
                figures.append(Figure(step, f"{label}: share read with {POWER_CAP} {words}",
                                      entry.get("power_cap_share"), "", note=f"{rounds['rounds']} rounds; "
                                      + _clock_note({k: v for k, v in entry.items() if k != "per_round"}), digits=3))
    return figures


SWEEP_ROWS_SHOWN = 3
"""Of each dtype's sweep, the fastest rows shown with their clock: where the physical check matters."""


def sweep_row_figures(document: dict, *, step: str, rows: int = SWEEP_ROWS_SHOWN) -> list[Figure]:
    """The fastest sweep rows of each dtype of a report, each figure beside its window's clock min/median/max
    (``clock_mhz_min``, ``clock_mhz_median``, ``clock_mhz_max`` of the row; a row with one clock says so)."""
    figures = []
    for dtype, entry in (document.get("dtypes") or {}).items():
        measured = sorted((row for row in entry.get("measurements") or [] if row.get("tflops") is not None),
                          key=lambda row: row["tflops"], reverse=True)
        for row in measured[:rows]:
            if any(row.get(name) is not None for name in ("clock_mhz_min", "clock_mhz_median", "clock_mhz_max")):
                note = _clock_note(row)
            elif row.get("clock_mhz") is not None:
                note = f"clock {row['clock_mhz']:.0f} MHz (the row gives one clock, no min/median/max)"
            else:
                note = "no clock read"
            if row.get("tags"):
                note += "; " + "; ".join(str(tag) for tag in row["tags"])
            figures.append(Figure(step, f"{dtype} {SWEEP_ROW_LABEL} {_shape((row.get('m'), row.get('k'), row.get('n')))}",
                                  row["tflops"], "TFLOP/s", note=note))
    return figures


def anchor_step_figures(document: dict, *, step: str) -> list[Figure]:
    """Each model's step in the anchor: the allocator's ``num_alloc_retries`` inside its timed steps (a retry is a
    failed cudaMalloc, the cache freed and the allocation tried again: time spent inside a timed step), with the SDPA
    kernel it ran in the note. Read defensively: a document without them gives figures without a value."""
    if document.get("skipped") or not isinstance(document.get("steps"), dict):
        return []
    figures = []
    for name, label in (("hugging_face", "Hugging Face"), ("package", "package")):
        entry = document["steps"].get(name) or {}
        kernel = entry.get("attention_kernel") or (document.get("attention_kernels") or {}).get(name)
        retries = entry.get("alloc_retries")
        per_step = "" if not isinstance(retries, list) else f" ({', '.join('?' if r is None else str(r) for r in retries)})"
        figures.append(Figure(step, f"{label} step: {ALLOC_RETRIES_LABEL} in its timed steps",
                              entry.get("alloc_retries_total"), "retries",
                              note=f"attention {kernel or 'not recorded'}{per_step}", digits=0))
    return figures
