"""The report's model section (``accounting report --model SIZE``): one training step per precision policy.

For the named size (:data:`accounting.model_mfu.MODEL_SIZES`, with ``--layers``/``--width``/
``--heads``/``--seq``/``--batch`` overrides) it times a training step under each precision
policy ``benchmarks.json`` lists for the size on this device kind (``model.<kind>.sizes.<size>.precisions``, else
``model.<kind>.precisions``; all of :data:`~accounting.model_mfu.STEP_POLICIES` without one), then the first policy
again with activation recomputation, through :func:`accounting.model_mfu.measure_training_step`, and
records tokens/s, achieved TFLOP/s, MFU, HFU, the attention kernel that ran and peak memory measured against
predicted. A size whose batch does not fit the free memory runs at the largest batch that does (the section says
so); ``--compile`` adds, after each step, the same step through ``torch.compile`` (or why it failed).
The section runs after the matmul sweep, outside ``--budget``.

>>> from accounting.model_mfu import model_size
>>> section = {"size": {"name": "tiny"}, "describe": model_size("tiny").describe(), "rows": []}
>>> model_lines(section)[0]
'Model training step (tiny: 2 layers, width 64, 4 heads, 64 tokens x batch 4, vocabulary 256; AdamW):'
"""

from accounting.bench.matrix import load_benchmarks
from accounting.console import table
from accounting.errors import AccountingError
from accounting.model_mfu import (
    PEAK_MEMORY_BAND,
    STEP_POLICIES,
    build_training_step,
    measure_compiled_step,
    measure_training_step,
    model_size,
    size_that_fits,
)

WARMUP_STEPS = 1
REPEATS = 3
MODEL_ARGUMENTS = ("layers", "width", "heads", "seq", "batch")
"""``--layers`` ... ``--batch``: numbers of the named size to replace."""


def size_from_args(args):
    """The :class:`~accounting.model_mfu.ModelSize` the arguments ask for, or ``None`` without ``--model``."""
    given = {name: getattr(args, name, None) for name in MODEL_ARGUMENTS}
    name = getattr(args, "model", None)
    if name is None:
        stray = [f"--{key}" for key, value in given.items() if value is not None]
        if stray:
            raise AccountingError(f"{', '.join(stray)} change the model of --model SIZE; give --model too")
        return None
    try:
        return model_size(name, **given)
    except AccountingError as error:
        raise AccountingError(f"--model: {error}") from None


def precisions_for(kind: str, size: str | None = None) -> tuple[str, ...]:
    """The policies ``benchmarks.json`` lists for this size on this device kind; every step policy without one."""
    try:
        matrix = load_benchmarks().model(kind)
    except AccountingError:
        return STEP_POLICIES
    return matrix.precisions if size is None else matrix.precisions_of(size)


def _floor(kind: str, precision: str, size: str | None = None, chip: str | None = None):
    try:
        return load_benchmarks().model_floor(kind, precision, size, chip=chip)
    except AccountingError:
        return None


def fitted_size(size, info):
    """``size`` at the largest batch (at most its own) whose every policy fits the device; ``(size, why)``.

    Raises :class:`AccountingError` naming the need and the free memory where not even batch 1 fits.
    """
    chosen, why = size_that_fits(size, precisions_for(info.kind, size.name), info.device)
    if chosen is None:
        raise AccountingError(why)
    return chosen, why


def check_model(size, info) -> None:
    """Refuse, before measuring, a size that does not fit the device even at batch 1 (one line, naming it)."""
    fitted_size(size, info)


def measure_model_section(size, info, *, progress=None, compile: bool = False) -> dict:
    """Time one step per policy (and the first one with recomputation), each compiled too with ``compile``;
    the JSON-ready section."""
    size, fit = fitted_size(size, info)
    precisions = precisions_for(info.kind, size.name)
    runs = [(precision, False) for precision in precisions]
    runs.append((runs[0][0], True))
    rows = []
    for precision, recompute in runs:
        if progress is not None:
            progress(f"model {size.name} {precision}{' recompute' if recompute else ''}")
        step = build_training_step(size, precision=precision, device=info.device, recompute=recompute)
        result = measure_training_step(step, device=info.device, warmup=WARMUP_STEPS, repeats=REPEATS, info=info)
        measured = [result]
        failure = None
        if compile:
            if progress is not None:
                progress(f"model {size.name} {precision}{' recompute' if recompute else ''} torch.compile")
            compiled, failure = measure_compiled_step(step, result, device=info.device, repeats=REPEATS)
            measured += [compiled] if compiled is not None else []
        for measurement in measured:
            row = measurement.as_dict()
            row["floor"] = _floor(info.kind, precision, size.name, info.name)
            row["memory_band"] = list(PEAK_MEMORY_BAND)
            rows.append(row)
        if failure is not None:
            rows[-1]["compile_failure"] = failure
        del step
    config = size.config
    return {"size": {"name": size.name, "layers": config.layers, "width": config.width, "heads": config.heads,
                     "kv_heads": config.kv_heads, "sequence_length": config.sequence_length,
                     "vocabulary": config.vocabulary, "batch_size": size.batch_size},
            "describe": size.describe(), "fit": fit, "rows": rows}


def _number(value, digits=3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def model_lines(section: dict) -> list[str]:
    """The section as text: one row per step, MFU beside HFU, memory measured over predicted."""
    lines = [f"Model training step ({section['describe']}; AdamW):"]
    if section.get("fit") and " of " in section["fit"].split(":")[0]:
        lines.append(f"  {section['fit']}")
    header = ["precision", "recompute", "compiled", "attention", "tokens/s", "TFLOP/s", "MFU", "HFU", "floor",
              "peak memory", "predicted", "ratio"]
    rows = []
    failures = []
    for row in section["rows"]:
        rows.append([
            row["precision"], "yes" if row["recompute"] else "no", "yes" if row.get("compiled") else "no",
            row.get("attention_kernel") or "-", f"{row['tokens_per_s']:,.0f}",
            f"{row['achieved_tflops']:.4g}", _number(row["mfu"]), _number(row["hfu"]),
            _number(row["floor"]), f"{row['measured_peak_bytes'] / 2**20:.1f} MiB",
            f"{row['predicted_peak_bytes'] / 2**20:.1f} MiB", f"{row['memory_ratio']:.3f}",
        ])
        if row.get("compile_failure"):
            failures.append(f"  {row['precision']}{' recompute' if row['recompute'] else ''}: "
                            f"{row['compile_failure']}")
    if rows:
        lines.append(table(header, rows, indent="  "))
        lines.extend(failures)
        low, high = section["rows"][0]["memory_band"]
        lines.append(f"  MFU: model FLOPs (transformer_flops) / step time / dense peak; HFU adds the forward "
                     f"recomputed by activation checkpointing and the QKᵀ a fused attention kernel recomputes in "
                     f"backward. Peak memory (of the eager step) band: {low}-{high} x predicted for the attention "
                     "kernel that ran (recomputation: at most the upper end).")
    return lines


def draw_model_panel(axes, section: dict) -> None:
    """MFU and HFU per step as grouped bars, the measured/predicted memory ratio written above each pair."""
    rows = section["rows"]
    labels = [f"{row['precision']}{' +recompute' if row['recompute'] else ''}{' compiled' if row.get('compiled') else ''}"
              for row in rows]
    positions = range(len(rows))
    mfu = [row["mfu"] or 0 for row in rows]
    hfu = [row["hfu"] or 0 for row in rows]
    # Labels starting with "_" keep the bars out of the figure-wide legend of the sweep panel.
    mfu_bars = axes.bar([p - 0.2 for p in positions], mfu, width=0.4, label="_MFU")
    hfu_bars = axes.bar([p + 0.2 for p in positions], hfu, width=0.4, label="_HFU")
    for position, row in zip(positions, rows):
        axes.annotate(f"mem {row['memory_ratio']:.2f}x", (position, max(mfu[position], hfu[position])),
                      textcoords="offset points", xytext=(0, 4), ha="center", fontsize="x-small")
    axes.set_xticks(list(positions))
    axes.set_xticklabels(labels, fontsize="small")
    axes.set_ylabel("utilisation of dense peak")
    axes.set_title(f"Training step: {section['describe']}", fontsize="small")
    axes.legend([mfu_bars, hfu_bars], ["MFU", "HFU"], fontsize="small")
    axes.grid(True, axis="y", alpha=0.3)


__all__ = ["check_model", "draw_model_panel", "fitted_size", "measure_model_section", "model_lines",
           "size_from_args"]
