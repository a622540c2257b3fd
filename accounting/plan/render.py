"""A plan as text (what ``accounting plan`` prints) and as a JSON-ready document (``--json``).

Both are pure functions of a :class:`~accounting.plan.compute.Plan`: nothing is computed here
that the plan does not hold. Bytes are printed in GiB (2³⁰ bytes), device memory in the
datasheet's GB (10⁹ bytes); the JSON document holds bytes and FLOPs as integers.
"""

from accounting._units import readable_duration
from accounting.console import table
from accounting.plan.compute import Plan

MEMORY_PARTS = (
    ("parameters", "the weights the forward pass reads"),
    ("gradients", ""),
    ("optimizer", "master weights and optimizer state"),
    ("gathered", "ZeRO-3: the full weights and gradients of the unit in flight"),
    ("activations", "saved for the backward pass"),
    ("transient", "the loss's gradients, alive beside them"),
    ("update", "the optimizer step's temporaries, beside the gradients"),
    ("backward", "with recomputation: the bottom block's backward"),
)


OPTIONAL_PARTS = frozenset({"gathered", "transient", "update", "backward"})
"""Parts the text leaves out when they are zero (no ZeRO-3, no recomputation...); the JSON always has them."""


def describe_model(plan: Plan) -> str:
    """``8,030,261,248 parameters: 32 layers, width 4096, 32 heads (8 key/value), swiglu MLP 14336, ...``."""
    c = plan.config
    heads = f"{c.heads} heads" + (f" ({c.kv_heads} key/value)" if c.kv_heads != c.heads else "")
    experts = f", {c.experts} experts ({c.experts_per_token} per token)" if c.experts > 1 else ""
    return (f"{c.parameter_count:,} parameters: {c.layers} layers, width {c.width}, {heads}, {c.mlp} MLP "
            f"{c.ffn_width}{experts}, {c.norm}, vocabulary {c.vocabulary}, {c.sequence_length} tokens per sequence")


def _gib(count: int) -> str:
    return f"{count / 2**30:.2f}"


def _kernel_text(plan: Plan) -> str:
    """Which kernel ``--attention sdpa`` was counted as, on which device, and why."""
    kernel = plan.memory.attention_kernel
    assumed = "" if plan.device.attention_device else (
        f" (compute capability of {plan.device.name} not known: assumed {kernel.device.capability[0]}."
        f"{kernel.device.capability[1]})")
    why = f": {kernel.reason}" if kernel.reason else ""
    saves = "saves the (s x s) attention weights" if not kernel.fused else "saves no (s x s) scores"
    return f"sdpa runs its {kernel.name} kernel on {kernel.device}{assumed}, which {saves}{why}"


def render_plan(plan: Plan, source: str) -> str:
    """The plan as ``accounting plan`` prints it; ``source`` names where the model came from.

    The phases of a step, of which the peak holds the largest: the saved activations with the
    loss's transient gradients (as backward starts), the gradients with the update's temporaries
    (the optimizer step), and with recomputation the bottom block's backward.
    """
    s, d, m = plan.settings, plan.device, plan.memory
    plural = "s" if s.devices > 1 else ""
    lines = [
        f"Model ({source}): {describe_model(plan)}",
        f"Run: {s.devices} x {d.name} ({d.memory_bytes / 1e9:g} GB, {d.peak_flops_per_second / 1e12:g} TFLOP/s "
        f"dense {d.dtype}), {s.sharding}, {s.precision}, {s.optimizer}, attention {s.attention}, "
        f"recompute {s.recompute}",
        *([f"Attention: {_kernel_text(plan)}"] if m.attention_kernel is not None else []),
        f"Batch: {plan.global_batch} sequences per step = {s.devices} device{plural} x micro-batch {plan.micro_batch}"
        f" x {plan.accumulation_steps} accumulation step{'s' if plan.accumulation_steps > 1 else ''}; "
        f"{plan.tokens_per_step:,} tokens",
        "",
        f"Memory per device at micro-batch {plan.micro_batch}:",
    ]
    rows = [[part, _gib(getattr(m, part)), note] for part, note in MEMORY_PARTS
            if getattr(m, part) or part not in OPTIONAL_PARTS]
    rows.append(["peak", _gib(m.peak), "parameters + optimizer + gathered + the largest phase of the step"])
    rows.append(["usable", _gib(plan.usable_bytes),
                 f"{1 - s.headroom:.0%} of {d.memory_bytes / 1e9:g} GB ({d.memory_source}); --headroom {s.headroom:g}"])
    lines.append(table(["part", "GiB", ""], rows, indent="  "))
    lines.append("")
    if plan.fits:
        spare = _gib(plan.usable_bytes - m.peak)
        if not plan.batch_given:
            largest = (f"the largest micro-batch that fits is {plan.largest_micro_batch}, which each device runs "
                       "(no --global-batch)")
        elif plan.largest_micro_batch >= plan.per_device_batch:
            largest = f"each device's {plan.per_device_batch} sequences fit in one micro-batch"
        else:
            largest = f"the largest micro-batch that fits is {plan.largest_micro_batch}"
        lines.append(f"Fits: yes, {spare} GiB to spare; {largest}.")
    else:
        lines.append("Fits: no.")
        lines += [f"  - {reason}" for reason in plan.reasons]
    lines += [
        "",
        "Compute (model FLOPs: matmuls, 2 per multiply-add, full causal score matrices):",
        f"  FLOPs per step   {plan.flops_per_step:.3e}",
        f"  FLOPs per token  {plan.flops_per_token:.4g}",
        f"  At MFU {s.mfu:g} (--mfu): {plan.seconds_per_step:.3g} s per step, "
        f"{plan.tokens_per_second:,.0f} tokens/s ({plan.tokens_per_second / s.devices:,.0f} per device)",
    ]
    if plan.days is not None:
        years = f" ({readable_duration(plan.days * 86400)})" if plan.days >= 365 else ""
        lines.append(f"  {plan.tokens:.3g} tokens (--tokens): {plan.days:,.1f} days{years}")
    return "\n".join(lines)


def plan_document(plan: Plan, source: str) -> dict:
    """The plan as JSON-ready data: every figure the text shows, bytes and FLOPs as integers."""
    c, s, d, m = plan.config, plan.settings, plan.device, plan.memory
    return {
        "model": {
            "source": source, "parameters": c.parameter_count, "layers": c.layers, "width": c.width,
            "heads": c.heads, "kv_heads": c.kv_heads, "head_width": c.head_width, "ffn_width": c.ffn_width,
            "mlp": c.mlp, "norm": c.norm, "experts": c.experts, "experts_per_token": c.experts_per_token,
            "vocabulary": c.vocabulary, "sequence_length": c.sequence_length,
        },
        "device": {
            "name": d.name, "count": s.devices, "memory_bytes": d.memory_bytes, "memory_source": d.memory_source,
            "usable_bytes": plan.usable_bytes, "headroom": s.headroom, "dtype": d.dtype,
            "peak_flops_per_second": d.peak_flops_per_second, "peak_source": d.peak_source,
        },
        "training": {"sharding": s.sharding, "precision": s.precision, "optimizer": s.optimizer,
                     "attention": s.attention, "recompute": s.recompute, "attention_counted": m.attention,
                     "attention_kernel": None if m.attention_kernel is None else {
                         "name": m.attention_kernel.name, "device": str(m.attention_kernel.device),
                         "source": m.attention_kernel.source, "reason": m.attention_kernel.reason}},
        "batch": {
            "global": plan.global_batch, "global_given": plan.batch_given, "per_device": plan.per_device_batch,
            "micro": plan.micro_batch,
            "accumulation_steps": plan.accumulation_steps, "largest_micro_batch": plan.largest_micro_batch,
            "tokens_per_step": plan.tokens_per_step,
        },
        "memory_per_device": {
            **{part: getattr(m, part) for part, _ in MEMORY_PARTS},
            "model_states": m.model_states, "peak": m.peak,
        },
        "fits": plan.fits,
        "reasons": list(plan.reasons),
        "compute": {
            "flops_per_step": plan.flops_per_step, "flops_per_token": plan.flops_per_token, "mfu": s.mfu,
            "seconds_per_step": plan.seconds_per_step, "tokens_per_second": plan.tokens_per_second,
            "tokens": plan.tokens, "days": plan.days,
        },
    }
