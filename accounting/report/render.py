"""The report as readable text for a terminal, drawn from the document in :mod:`~accounting.report.results`.

>>> print(table(["dtype", "TFLOP/s"], [["float32", "0.237"], ["bfloat16", "1.93"]]))
dtype     TFLOP/s
--------  -------
float32     0.237
bfloat16     1.93
"""

from accounting._units import GB, readable_bytes
from accounting.console import NOT_KNOWN, fraction, table, tflops
from accounting.hardware.cpu_clock import SCALAR_CLOCK_SOURCE
from accounting.report.accumulation import figure_label
from accounting.report.health_section import health_lines
from accounting.report.model_section import model_lines

MATMUL_CPU_FLAGS = ("fma", "avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni",
                    "amx_tile", "amx_bf16", "amx_fp16", "amx_int8")
"""CPU flags shown on the terminal: the ones matmul speed depends on (the JSON has them all)."""

def shape(row: dict) -> str:
    """``m×k×n`` of a measurement row."""
    return f"{row['m']}×{row['k']}×{row['n']}"


def _device_lines(report: dict) -> list[str]:
    device = report["machine"]["device"]
    lines = [f"Device: {device['kind']}" + (f":{device['index']}" if device.get("index") is not None else "")
             + f" — {device['name']}"]
    details = []
    if device.get("memory_bytes"):
        details.append(f"memory {readable_bytes(device['memory_bytes'])}")
    if device.get("cores"):
        details.append(f"{device['cores']} cores")
    if device.get("compute_capability"):
        details.append("compute capability " + ".".join(str(part) for part in device["compute_capability"]))
    if details:
        lines.append("  " + ", ".join(details))
    if device.get("cpu_flags"):
        shown = [flag for flag in MATMUL_CPU_FLAGS if flag in device["cpu_flags"]]
        lines.append("  ISA flags for matmuls: " + (" ".join(shown) or "none of " + " ".join(MATMUL_CPU_FLAGS)))
    if device.get("clock_ghz"):
        lines.append(f"  clock {device['clock_ghz']:g} GHz ({device.get('clock_source') or 'source unknown'})")
    if device.get("scalar_clock_ghz") and device.get("clock_source") != SCALAR_CLOCK_SOURCE:
        lines.append(f"  clock under scalar load {device['scalar_clock_ghz']:g} GHz ({SCALAR_CLOCK_SOURCE})")
    machine = report["machine"]
    lines.append(f"  torch {machine['torch']}, Python {machine['python']}, {machine['platform']}")
    return lines


def _peak_lines(report: dict) -> list[str]:
    rows = []
    for dtype, section in report["dtypes"].items():
        rows.append([dtype, tflops(section["peak_flops_per_s"]), fraction(section["floor"], 2),
                     section.get("peak_source") or NOT_KNOWN])
    spec = report["bandwidth"]["spec_bytes_per_s"]
    header = ["dtype", "peak TFLOP/s", "MFU floor", "peak from"]
    lines = ["Spec figures it compares against:", table(header, rows, indent="  ")]
    lines.append("  memory bandwidth: " + (f"{spec / GB:.0f} GB/s" if spec else "no spec figure known for this device"))
    return lines


def _bandwidth_lines(report: dict) -> list[str]:
    bandwidth = report["bandwidth"]
    if bandwidth["measured_bytes_per_s"] is None:
        return ["Memory bandwidth: not measured"]
    line = (f"Memory bandwidth: {bandwidth['measured_bytes_per_s'] / GB:.1f} GB/s "
            f"(device copy, {readable_bytes(bandwidth['bytes_moved'] // 2)} read + written, median of {bandwidth['repeats']})")
    if bandwidth["fraction_of_spec"] is not None:
        line += f", {bandwidth['fraction_of_spec']:.0%} of spec {bandwidth['spec_bytes_per_s'] / GB:.0f} GB/s"
    else:
        line += ", spec unknown"
    return [line]


def _summary_lines(report: dict) -> list[str]:
    rows = []
    for dtype, section in report["dtypes"].items():
        best = section["best"]
        rows.append([
            dtype, tflops(best and best["flops_per_s"]), shape(best) if best else NOT_KNOWN,
            tflops(section["median_flops_per_s"]), fraction(section["mfu"]), fraction(section["median_mfu"]),
            str(len(section["measurements"])),
        ])
    header = ["dtype", "best TFLOP/s", "at m×k×n", "median TFLOP/s", "MFU", "median MFU", "shapes"]
    what = ("Matmul, one checked shape per dtype (--level quick)" if report["settings"].get("level") == "quick"
            else "Matmul sweep")
    return [f"{what} (budget {report['settings']['budget_s']:g} s):", table(header, rows, indent="  ")]


def _number(value, digits: int = 0) -> str:
    return NOT_KNOWN if value is None else f"{value:.{digits}f}"


def _headline_figures(dtype: str, figures: dict):
    """``(label, kind, figure)`` of a dtype's headlines: burst and sustained, then fp8's default-accumulation ones."""
    for kind in ("burst", "sustained"):
        if figures.get(kind):
            yield figure_label(dtype, figures[kind].get("accumulation")), kind, figures[kind]
    other = figures.get("default_accumulation") or {}
    for kind in ("burst", "sustained"):
        if other.get(kind):
            yield figure_label(dtype, other[kind].get("accumulation") or "default"), kind, other[kind]


def _headline_lines(report: dict) -> list[str]:
    """Burst and sustained per dtype (fp8: per accumulation), each with its clock, power, energy, window and tags;
    then the soak and the commands."""
    rows, commands = [], []
    for dtype, section in report["dtypes"].items():
        for label, kind, figure in _headline_figures(dtype, section.get("headlines") or {}):
            shown = figure["tflops"] if figure["published"] else None
            notes = list(figure["tags"])
            if figure.get("reason") and figure["reason"] not in notes:
                notes.append(figure["reason"])
            if not figure["published"] and figure.get("tflops"):
                notes.append(f"measured {tflops(figure['flops_per_s'])} TFLOP/s")
            note = "; ".join(notes)
            window = figure.get("seconds")
            rows.append([label, kind, tflops(shown * 1e12 if shown is not None else None),
                         fraction(figure.get("mfu")) if shown is not None else NOT_KNOWN,
                         "×".join(str(size) for size in figure["shape"]) if figure.get("shape") else NOT_KNOWN,
                         NOT_KNOWN if window is None else f"{window:.3g}",
                         _number(figure.get("clock_mhz")), _number(figure.get("power_w")),
                         _number(figure.get("j_per_tflop"), 1), note])
            if figure["published"] and figure.get("command") and kind == "sustained":
                commands.append(f"  {label} sustained: {figure['command']}")
    if not rows:
        return []
    header = ["dtype", "headline", "TFLOP/s", "MFU", "at m×k×n", "window s", "clock MHz", "power W", "J/TFLOP",
              "tags / notes"]
    lines = ["Burst and sustained (burst: the highest clock its window read; sustained: at least 1 s of products back "
             "to back, power-saturated, at its window's median clock and its energy counter's average power):",
             table(header, rows, indent="  ")]
    soak = (report.get("telemetry") or {}).get("soak")
    if soak and soak.get("shape"):
        lines += soak_lines(soak)
    limit = (report.get("telemetry") or {}).get("power_limit_w")
    if limit:
        lines.append(f"  enforced power limit: {limit:.0f} W (what power-suspect and saturation are judged against)")
    if commands:
        lines.append("  reproduce:")
        lines += [f"  {command}" for command in commands]
    return lines


def soak_lines(soak: dict) -> list[str]:
    """The thermal soak in the headline section: its dtype, shape and end, the clock it settled at, and each
    window's clock early and late in it (a clock still falling from window to window is a soak cut short).

    >>> for line in soak_lines({"seconds": 4.0, "dtype": "bfloat16", "shape": [8192, 8192, 8192], "ended": "flat",
    ...                         "saturated_clock_mhz": 1455.0, "early_late_mhz": [[1980.0, 1600.0], [1470.0, 1455.0]]}):
    ...     print(line)
      thermal soak: 4.0 s of bfloat16 8192×8192×8192, ended: flat, settled at 1455 MHz
        its windows' clock, early → late (MHz): 1980 → 1600, 1470 → 1455
    """
    settled = soak.get("saturated_clock_mhz")
    lines = [f"  thermal soak: {soak['seconds']:.1f} s of {soak['dtype']} {'×'.join(map(str, soak['shape']))}, "
             f"ended: {soak['ended']}" + (f", settled at {settled:.0f} MHz" if settled is not None else "")]
    pairs = soak.get("early_late_mhz") or []
    if pairs:
        lines.append("    its windows' clock, early → late (MHz): "
                     + ", ".join(f"{_number(early, 0)} → {_number(late, 0)}" for early, late in pairs))
    return lines


def _case_lines(dtype: str, section: dict) -> list[str]:
    ridge = section["ridge_flop_per_byte"]
    title = f"{dtype} cases"
    if ridge is not None:
        title += f" (ridge point {ridge:.1f} FLOP/byte from {section['ridge_basis']})"
    rows = [
        [shape(row), tflops(row["flops_per_s"]), fraction(row["mfu"]), f"{row['arithmetic_intensity']:.1f}",
         row["bound"] or NOT_KNOWN, row["phase"]]
        for row in sorted(section["measurements"], key=lambda row: (row["size"], row["m"], row["k"]))
    ]
    if not rows:
        return [title + ": none measured"]
    lines = [title + ":", table(["m×k×n", "TFLOP/s", "MFU", "FLOP/byte", "bound", "phase"], rows, indent="  ")]
    tagged = [f"  {shape(row)}: {'; '.join(row['tags'])}" for row in section["measurements"] if row.get("tags")]
    if tagged:
        lines += ["  tagged:"] + [f"  {line}" for line in tagged]
    wrong = [f"  {row['check']['reason']}" for row in section["measurements"]
             if row.get("check") and not row["check"]["ok"]]
    if wrong:
        lines += ["  wrong results:"] + [f"  {line}" for line in wrong]
    unchecked = [f"  {row['check']['not_checked']}" for row in section["measurements"]
                 if row.get("check") and row["check"].get("checked") is False]
    if unchecked:
        lines += ["  results not checked (no rounding bound to judge them by):"] + [f"  {line}" for line in unchecked]
    return lines


def _burn_lines(report: dict) -> list[str]:
    """``--level long``'s sustained phase: per dtype the shape, time, products, mismatches, checks, clock and power."""
    burns = report.get("burn") or {}
    if not burns:
        return []
    rows = []
    for dtype, found in burns.items():
        telemetry = found.get("telemetry") or {}
        clocks = (telemetry.get("clock_mhz_min"), telemetry.get("clock_mhz_max"))
        rows.append([dtype, "×".join(map(str, found["shape"])), f"{found['seconds']:.1f}", str(found["products"]),
                     str(found["mismatches"]), str(found["checks"]), str(len(found["failed"])),
                     NOT_KNOWN if None in clocks else f"{clocks[0]:.0f}-{clocks[1]:.0f}",
                     _number(telemetry.get("power_w_mean"))])
    header = ["dtype", "m×k×n", "seconds", "products", "bits differ", "checked", "wrong", "clock MHz", "power W"]
    return ["Sustained phase (every result compared with the first; Freivalds-checked periodically):",
            table(header, rows, indent="  ")]


def _verdict_lines(report: dict) -> list[str]:
    width = max((len(dtype) for dtype in report["dtypes"]), default=0)
    lines = ["Verdict:"]
    for dtype, section in report["dtypes"].items():
        lines.append(f"  {dtype.ljust(width)}  {section['verdict']['message']}")
    machine = f"  machine: {report['verdict']}"
    not_judged = [dtype for dtype, section in report["dtypes"].items() if section.get("judged") is False]
    if not_judged:
        judged = report.get("judged_dtypes") or []
        machine += f" (from {', '.join(judged) or 'no dtype'}; not judged: {', '.join(not_judged)})"
    lines.append(machine)
    return lines


def _join(blocks) -> str:
    return "\n\n".join("\n".join(block) for block in blocks)


def render_header(report: dict) -> str:
    """What was found before measuring: the device and the spec figures it will be compared with."""
    return _join([_device_lines(report), _peak_lines(report)])


def render_results(report: dict, *, cases: bool = True) -> str:
    """What was measured: bandwidth, sweep summary, every case (``cases``), notes and verdicts."""
    blocks = [_bandwidth_lines(report), _summary_lines(report)]
    headline_lines = _headline_lines(report)
    if headline_lines:
        blocks.append(headline_lines)
    if cases:
        blocks += [_case_lines(dtype, section) for dtype, section in report["dtypes"].items()]
    if report.get("model"):  # accounting report --model SIZE
        blocks.append(model_lines(report["model"]))
    burn_lines = _burn_lines(report)
    if burn_lines:
        blocks.append(burn_lines)
    if report["notes"]:
        blocks.append(["Notes:"] + [f"  - {note}" for note in report["notes"]])
    blocks.append(_verdict_lines(report))
    if report.get("health"):
        blocks.append(health_lines(report["health"]))
    return _join(blocks)


def render(report: dict, *, cases: bool = True) -> str:
    """The whole report as text: :func:`render_header` then :func:`render_results`."""
    return render_header(report) + "\n\n" + render_results(report, cases=cases)
