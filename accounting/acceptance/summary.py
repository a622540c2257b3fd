"""The acceptance run's summary: one JSON-ready record, and the Markdown drawn from it (``summary.md``).

Rendering is a pure function of the record, so what the table says is tested without a GPU. The record
(``summary.json``): ``schema``, ``started_utc``, ``elapsed_s``, ``budget_s``, ``machine`` (the probe's
findings), ``steps`` (each outcome: name, what, status, seconds, budget, reason, exit status, headline,
whether it needs a GPU), ``figures`` (each: step, name, value, unit, expected range with its source,
verdict), ``files`` and ``result``.

:func:`result` says whether everything held: ``held`` (every step passed or was skipped for a reason that is
not a failure, no figure out of range), ``no GPU`` (every GPU step skipped: a CPU machine), or ``did not hold``.

>>> result([{"name": "probe", "status": "passed", "gpu": False}, {"name": "report", "status": "skipped", "gpu": True}], [])
'no GPU'
>>> result([{"name": "report", "status": "failed", "gpu": True}], [])
'did not hold'
"""

from accounting.acceptance.expected import ABOVE, BELOW
from accounting.acceptance.figures import ALLOC_RETRIES_LABEL, HOT_ROUNDS_LABEL, SOAK_LABEL, SWEEP_ROW_LABEL
from accounting.acceptance.probe import OPTIONAL
from accounting.acceptance.steps import FAILED, PASSED, SKIPPED

SCHEMA = "accounting-acceptance/1"
HELD, NO_GPU, NOT_HELD = "held", "no GPU", "did not hold"
MADE, NOT_MADE = "made", "not made"

GPU_CHECKS = (
    ("time_fn against one event pair at the sustained shape, after a soak", "clock-check", SOAK_LABEL),
    ("each round's throttle reasons after its synchronize, over 200 hot rounds", "clock-check", HOT_ROUNDS_LABEL),
    ("the sweep rows' clock min/median/max beside their figures", "report", SWEEP_ROW_LABEL),
    ("Hugging Face's step: its SDPA kernel and num_alloc_retries", "model-anchor", ALLOC_RETRIES_LABEL),
)
"""The checks only a real GPU makes, each with the step that makes it and the words its figures' names hold."""


def gpu_checks(steps: list[dict], figures: list[dict]) -> list[dict]:
    """Each of :data:`GPU_CHECKS`: ``made`` (a figure with a value), ``skipped`` (its step was, with the step's
    reason) or ``not made`` (why), with the step that makes it.

    >>> gpu_checks([{"name": "report", "status": "skipped", "reason": "no GPU"}], [])[2]
    {'check': "the sweep rows' clock min/median/max beside their figures", 'step': 'report', 'status': 'skipped', 'reason': 'no GPU'}
    """
    found = []
    for what, name, words in GPU_CHECKS:
        step = next((step for step in steps if step["name"] == name), None)
        made = [f for f in figures if f["step"] == name and words in f["name"]]
        if step is None:
            status, reason = NOT_MADE, f"{name} did not run"
        elif step["status"] == SKIPPED:
            status, reason = SKIPPED, step.get("reason") or "skipped"
        elif any(f["value"] is not None for f in made):
            status, reason = MADE, f"{sum(f['value'] is not None for f in made)} figures"
        else:
            why = "; ".join(dict.fromkeys(f.get("note") or "" for f in made if f.get("note")))
            status, reason = NOT_MADE, why or f"{name} {step['status']} and gave no such figure" + (
                f": {step['reason']}" if step.get("reason") else "")
        found.append({"check": what, "step": name, "status": status, "reason": reason})
    return found



def result(steps: list[dict], figures: list[dict]) -> str:
    """``held``, ``no GPU`` or ``did not hold`` (see the module's description)."""
    if any(step["status"] == FAILED for step in steps) or any(f["verdict"] in (BELOW, ABOVE) for f in figures):
        return NOT_HELD
    gpu_steps = [step for step in steps if step.get("gpu", True)]
    if gpu_steps and all(step["status"] == SKIPPED for step in gpu_steps):
        return NO_GPU
    return HELD


def exit_status(verdict: str) -> int:
    """0 when everything held (or, with no GPU, every GPU step was skipped with its reason); 1 otherwise."""
    return 0 if verdict in (HELD, NO_GPU) else 1


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _number(value, digits: int) -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}"


def _machine_lines(machine: dict | None) -> list[str]:
    if not machine:
        return ["- machine: unknown (the probe did not report)"]
    devices = machine.get("devices") or []
    if devices:
        names = ", ".join(f"cuda:{d['index']} {d['name']} ({d['total_bytes'] / 2**30:.0f} GiB, cc {d['compute_capability']})"
                          for d in devices)
    else:
        names = machine.get("no_gpu_reason") or "no GPU"
    build = f"CUDA {machine['cuda']}" if machine.get("cuda") else (f"ROCm {machine['hip']}" if machine.get("hip") else "CPU build")
    lines = [f"- devices: {names}",
             f"- torch {machine.get('torch', '?')} ({build}), Python {machine.get('python_version', '?')}, "
             f"NCCL {'yes' if machine.get('nccl') else 'no'}"]
    left_out = [f"{name}: {OPTIONAL.get(name, 'optional')}" for name in machine.get("missing_optional") or []]
    if left_out:
        lines.append(f"- left out (not installed): {'; '.join(left_out)}")
    if machine.get("missing_needed"):
        lines.append(f"- missing, so the steps needing them are skipped: {', '.join(machine['missing_needed'])}")
    if machine.get("import_errors"):
        lines.append(f"- the package does not import: {'; '.join(machine['import_errors'])}")
    return lines


def render(record: dict) -> str:
    """``summary.md``: the outcome, then a table of steps, then a table of figures against their ranges."""
    steps, figures = record.get("steps", []), record.get("figures", [])
    verdict = record.get("result") or result(steps, figures)
    counts = {status: sum(step["status"] == status for step in steps) for status in (PASSED, FAILED, SKIPPED)}
    out_of_range = sum(f["verdict"] in (BELOW, ABOVE) for f in figures)
    lines = ["# GPU acceptance run", "",
             f"**Result: {verdict}** — {counts[PASSED]} passed, {counts[FAILED]} failed, {counts[SKIPPED]} skipped; "
             f"{len(figures) - out_of_range} of {len(figures)} figures in range or without expectation, "
             f"{out_of_range} out of range. {record.get('elapsed_s', 0):.0f} s of a {record.get('budget_s', 0):g} s budget, "
             f"started {record.get('started_utc', '?')}.", ""]
    lines += _machine_lines(record.get("machine"))
    lines += ["", "## Steps", "", "| step | outcome | time (s) | budget (s) | what | headline or reason |",
              "|---|---|---|---|---|---|"]
    for step in steps:
        detail = step.get("reason") or step.get("headline") or ""
        if step.get("reason") and step.get("headline"):
            detail = f"{step['headline']}; {step['reason']}"
        lines.append(f"| {step['name']} | {step['status']} | {step['seconds']:.1f} | {step['budget_s']:g} | "
                     f"{_cell(step.get('what', ''))} | {_cell(detail)} |")
    checks = record.get("gpu_checks") or gpu_checks(steps, figures)
    lines += ["", "## Checks only a real GPU makes", "", "| check | step | outcome | why or what |", "|---|---|---|---|"]
    lines += [f"| {_cell(c['check'])} | {c['step']} | {c['status']} | {_cell(c['reason'])} |" for c in checks]
    if figures:
        lines += ["", "## Figures against a healthy device", "",
                  "| step | figure | value | expected | verdict | note | expected from |", "|---|---|---|---|---|---|---|"]
        for figure in figures:
            expected = figure.get("expected")
            digits = {"": 3, "×": 3, "MHz": 0, "W": 0, "TFLOP/s": 1, "retries": 0}.get(figure.get("unit"), 2)
            if expected:
                low = _number(expected["low"], digits) if expected["low"] is not None else ""
                high = _number(expected["high"], digits) if expected["high"] is not None else ""
                span = f"{low}–{high}" if low and high else (f"≤ {high}" if high else f"≥ {low}")
            else:
                span = "—"
            mark = "**" if figure["verdict"] in (BELOW, ABOVE) else ""
            lines.append(f"| {figure['step']} | {_cell(figure['name'])} | {_number(figure['value'], digits)} "
                         f"{figure.get('unit', '')} | {span} | {mark}{figure['verdict']}{mark} | "
                         f"{_cell(figure.get('note', ''))} | {_cell(expected['source'] if expected else '')} |")
    if record.get("files"):
        lines += ["", f"Files: {', '.join(record['files'])}."]
    return "\n".join(lines) + "\n"
