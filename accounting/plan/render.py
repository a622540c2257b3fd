"""A plan as text (what ``accounting plan`` prints) and as a JSON-ready document (``--json``).

Both are pure functions of a :class:`~accounting.plan.compute.Plan`: nothing is computed here
that the plan does not hold. Bytes are printed in GiB (2³⁰ bytes), device memory in the
datasheet's GB (10⁹ bytes); the JSON document holds bytes and FLOPs as integers.
"""

from accounting._units import readable_duration
from accounting.console import table
from accounting.model.parallel.activations import micro_batches_in_flight, stage_blocks
from accounting.plan.compute import Plan
from accounting.plan.layout_time import bubble_fraction
from accounting.plan.traced import UNKNOWABLE as UNKNOWABLE_TEXT

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


ACTIVE_CONVENTIONS = {
    "both": "both embeddings counted, as Qwen counts",
    "unembedding": "the unembedding counted, the embedding lookup not, as DeepSeek and OpenAI count",
}
"""How each ``TransformerConfig.active_embeddings`` convention is named in the output."""


def describe_model(plan: Plan) -> str:
    """``8,030,261,248 parameters: 32 layers, width 4096, 32 heads (8 key/value), swiglu MLP 14336, ...``;
    for a mixture of experts, the parameters one token uses and the convention they follow."""
    c = plan.config
    heads = f"{c.heads} heads" + (f" ({c.kv_heads} key/value)" if c.kv_heads != c.heads else "")
    experts = ""
    if c.experts > 1:
        shared = f" + {c.shared_experts} shared" if c.shared_experts else ""
        dense = f", {c.dense_layers} dense layers of MLP {c.dense_ffn_width}" if c.dense_layers else ""
        experts = f", {c.experts} experts{shared} ({c.experts_per_token} per token){dense}"
    active = (f" ({c.active_parameter_count:,} active per token: {ACTIVE_CONVENTIONS[c.active_embeddings]})"
              if c.experts > 1 else "")
    if c.mtp_modules:
        experts += (f", {c.mtp_modules} multi-token-prediction module{'s' if c.mtp_modules > 1 else ''} "
                    f"({c.mtp_parameter_count:,} parameters, counted)")
    return (f"{c.parameter_count:,} parameters{active}: {c.layers} layers, width {c.width}, {heads}, {c.mlp} MLP "
            f"{c.ffn_width}{experts}, {c.norm}, vocabulary {c.vocabulary}, {c.sequence_length} tokens per sequence")


def describe_attention(plan: Plan) -> list[str]:
    """What the formulas assumed of the model's attention beyond the kernel: the blocks' own kinds
    (latent, sinks, soft caps, local windows), and any kernel the model's attention keeps out."""
    c, m = plan.config, plan.memory
    notes = []
    if c.latent_attention:
        notes.append(f"multi-head latent attention (keys and values from a {c.kv_lora_rank}-wide latent; "
                     f"scores over {c.head_width} features a head, values {c.value_head_width})")
    if c.attention_softcap or c.attention_sinks:
        kind = "soft-capped scores" if c.attention_softcap else "attention sinks"
        notes.append(f"{kind}: counted as eager attention, which transformers runs for them (no SDPA kernel "
                     "takes them)")
    if c.sliding_layers:
        window = f"{c.sliding_layers} of {c.layers} blocks attend to the last {c.sliding_window} tokens"
        if c.sliding_window >= c.sequence_length:
            window += f" (no fewer than the {c.sequence_length} of a sequence: counted as global blocks)"
        elif getattr(m, "local_attention_kernel", None) is not None:
            window += f"; SDPA is passed their mask: {_kernel_text(plan, m.local_attention_kernel)}"
        notes.append(window)
    return notes


def _gib(count: int) -> str:
    return f"{count / 2**30:.2f}"


def _kernel_text(plan: Plan, kernel=None) -> str:
    """Which kernel ``--attention sdpa`` was counted as (default the global blocks'), on which device, and why."""
    kernel = kernel or plan.memory.attention_kernel
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
        *[f"Attention: {note}" for note in describe_attention(plan)],
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
        "Compute (model FLOPs: matmuls, 2 per multiply-add, full causal score matrices"
        + (f"; each token through its {plan.config.experts_per_token} routed experts" if plan.config.experts > 1
           else "") + "):",
        f"  FLOPs per step   {plan.flops_per_step:.3e}",
        f"  FLOPs per token  {plan.flops_per_token:.4g}",
        f"  At MFU {s.mfu:g} (--mfu): {plan.seconds_per_step:.3g} s per step, "
        f"{plan.tokens_per_second:,.0f} tokens/s ({plan.tokens_per_second / s.devices:,.0f} per device)",
    ]
    if plan.days is not None:
        years = f" ({readable_duration(plan.days * 86400)})" if plan.days >= 365 else ""
        lines.append(f"  {plan.tokens:.3g} tokens (--tokens): {plan.days:,.1f} days{years}")
    return "\n".join(lines)


def _model_document(plan, source: str) -> dict:
    """The ``model`` entry of a plan's document: the config's sizes, parameter counts and attention notes."""
    c = plan.config
    return {
        "model": {
            "source": source, "parameters": c.parameter_count, "layers": c.layers, "width": c.width,
            "heads": c.heads, "kv_heads": c.kv_heads, "head_width": c.head_width, "ffn_width": c.ffn_width,
            "mlp": c.mlp, "norm": c.norm, "experts": c.experts, "experts_per_token": c.experts_per_token,
            "vocabulary": c.vocabulary, "sequence_length": c.sequence_length,
            "active_parameters": c.active_parameter_count, "active_embeddings": c.active_embeddings,
            "mtp_modules": c.mtp_modules, "mtp_parameters": c.mtp_parameter_count,
            "attention_notes": describe_attention(plan),
        },
    }


def plan_document(plan: Plan, source: str) -> dict:
    """The plan as JSON-ready data: every figure the text shows, bytes and FLOPs as integers."""
    s, d, m = plan.settings, plan.device, plan.memory
    return {
        **_model_document(plan, source),
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


def render_traced(traced, device, settings, source: str) -> str:
    """A traced plan (:mod:`accounting.plan.traced`) as ``accounting plan`` prints it: what was measured,
    whether one device's step fits, the FLOPs and time, and what a trace cannot know."""
    m = traced.memory
    usable = int(device.memory_bytes * (1 - settings.headroom))
    rows = [["parameters", _gib(m.parameters), f"{traced.dtype}"],
            ["gradients", _gib(m.gradients), ""],
            ["optimizer", _gib(m.optimizer_state + traced.master_bytes),
             "optimizer state" + (" and the master copy (added, not traced)" if traced.master_bytes else "")],
            ["activations", _gib(m.activations), f"saved for backward, alive at the peak ({m.phase})"],
            ["temporaries", _gib(m.temporaries + m.buffers + m.inputs), "everything else alive at the peak"],
            ["peak", _gib(traced.peak), "the traced step's high-water mark"],
            ["usable", _gib(usable), f"{1 - settings.headroom:.0%} of {device.memory_bytes / 1e9:g} GB "
                                     f"({device.memory_source}); --headroom {settings.headroom:g}"]]
    seconds = traced.flops / (device.peak_flops_per_second * settings.mfu)
    fits = traced.peak <= usable
    lines = [
        f"Model ({source}): {traced.parameters:,} parameters: {traced.architecture}, model_type {traced.model_type!r}, "
        "traced (the formulas do not describe it)",
        f"Run: 1 x {device.name} ({device.memory_bytes / 1e9:g} GB, {device.peak_flops_per_second / 1e12:g} TFLOP/s "
        f"dense {device.dtype}), {settings.precision}, {settings.optimizer}, micro-batch {traced.batch_size} x "
        f"{traced.sequence_length} tokens",
        f"Traced: one training step built on the meta device (nothing allocated); a trace cannot know "
        + "; ".join(UNKNOWABLE_TEXT),
        "",
        f"Memory of one device's step at micro-batch {traced.batch_size}:",
        table(["part", "GiB", ""], rows, indent="  "),
        "",
        f"Fits: {'yes' if fits else 'no'}, peak {_gib(traced.peak)} GiB of {_gib(usable)} GiB usable.",
        "",
        "Compute (matmul FLOPs counted on the traced step, 2 per multiply-add):",
        f"  FLOPs per step   {traced.flops:.3e}",
        f"  FLOPs per token  {traced.flops / traced.tokens:.4g}",
        f"  At MFU {settings.mfu:g} (--mfu): {seconds:.3g} s per step, {traced.tokens / seconds:,.0f} tokens/s per device",
    ]
    return "\n".join(lines)


# ---- a plan over a parallel layout --------------------------------------------------------------------

RANK_PARTS = (
    ("parameters", "this rank's share of the weights"),
    ("gradients", ""),
    ("optimizer", "master weights and optimizer state"),
    ("gathered", "ZeRO-3/FSDP: the unsharded weights and gradients alive at the peak"),
    ("activations", "saved for backward, of every micro-batch in flight"),
    ("transient", "the loss's gradients (last stage), alive beside them"),
    ("update", "the optimizer step's temporaries, beside the gradients"),
    ("backward", "with recomputation: the recomputed block's backward"),
)
"""A rank's parts in the order the per-rank table shows them (its buffers by name after them)."""


def _layout_line(plan) -> str:
    layout, d = plan.layout, plan.device
    return (f"Layout: {layout.describe()} on {layout.devices} x {d.name} ({d.memory_bytes / 1e9:g} GB, "
            f"{d.peak_flops_per_second / 1e12:g} TFLOP/s dense {d.dtype}), {layout.node_size} per node")


def _rank_rows(plan) -> list[list[str]]:
    """The per-rank table's rows: each part, each buffer by name, the peak and the usable memory."""
    ranks, layout = plan.memory.ranks, plan.layout
    blocks = stage_blocks(plan.config.layers, layout)
    flight = [micro_batches_in_flight(layout, rank.stage, plan.micro_batches) for rank in ranks]
    rows = [["blocks", *(str(len(blocks[rank.stage])) for rank in ranks), "transformer blocks this rank holds"],
            ["in flight", *(f"{float(count):g}" for count in flight),
             "micro-batches whose activations are alive at the peak"
             + (f" ({layout.schedule})" if layout.pipeline > 1 else "")]]
    for part, note in RANK_PARTS:
        values = [getattr(rank, part) for rank in ranks]
        if any(values) or part not in OPTIONAL_PARTS:
            rows.append([part, *map(_gib, values), note])
    names = sorted({name for rank in ranks for name in rank.buffers})
    for name in names:
        rows.append([f"buffer: {name}", *(_gib(rank.buffers.get(name, 0)) for rank in ranks), "communication buffer"])
    names = sorted({name for rank in ranks for name in rank.exchange})
    for name in names:
        rows.append([f"exchange: {name}", *(_gib(rank.exchange.get(name, 0)) for rank in ranks),
                     "expert all-to-all buffer, alive in a phase of its own"])
    rows.append(["peak", *(_gib(rank.peak) for rank in ranks), "persistent parts + buffers + the largest phase"])
    return rows


def _axis_rows(plan) -> list[dict]:
    """Communication by axis on the rank the step's time is set by (``plan.time.stage``): its collectives,
    group sizes, bus bytes, whether the groups stay within a node, seconds on the links and seconds exposed."""
    t = plan.time
    rows = [row for row in plan.traffic if row.stage in (None, t.stage)]
    axes = []
    for axis in dict.fromkeys(row.axis for row in rows):
        mine = [row for row in rows if row.axis == axis]
        axes.append({"axis": axis, "collectives": sorted({row.collective for row in mine}),
                     "groups": sorted({row.group for row in mine}), "calls": sum(row.calls for row in mine),
                     "bytes": sum(row.bytes for row in mine), "within_node": all(row.within_node for row in mine),
                     "seconds": t.communication.get(axis, 0.0), "exposed_seconds": t.exposed.get(axis, 0.0)})
    return axes


def _traffic_rows(plan) -> list[list[str]]:
    return [[a["axis"], ", ".join(a["collectives"]), ", ".join(map(str, a["groups"])), f"{a['calls']:,}",
             f"{a['bytes'] / 2**30:.2f}", "node" if a["within_node"] else "network", f"{a['seconds']:.3g}",
             f"{a['exposed_seconds']:.3g}"] for a in _axis_rows(plan)]


def _bubble(plan) -> float:
    layout = plan.layout
    return bubble_fraction(layout.pipeline, plan.micro_batches, layout.virtual_stages)


def render_layout_plan(plan, source: str) -> str:
    """A layout plan (:mod:`accounting.plan.layout_plan`) as ``accounting plan`` prints it: the layout in one line,
    memory per rank by part for each pipeline stage with the most loaded named, whether it fits, communication
    by axis, and the step's time with the pipeline bubble."""
    s, d, layout, t = plan.settings, plan.device, plan.layout, plan.time
    most = plan.memory.most_loaded
    recompute = s.recompute + (f" ({s.selective})" if s.recompute == "selective" else "")
    plural = "es" if plan.micro_batches > 1 else ""
    lines = [
        f"Model ({source}): {describe_model(plan)}",
        _layout_line(plan),
        f"Run: {s.precision}, {s.optimizer}, attention {s.attention}, recompute {recompute}",
        *([f"Attention: {_kernel_text(plan, plan.attention_kernel)}"] if plan.attention_kernel is not None else []),
        *[f"Attention: {note}" for note in describe_attention(plan)],
        f"Batch: {plan.global_batch} sequences per step = DP {layout.data} x micro-batch {plan.micro_batch} x "
        f"{plan.micro_batches} micro-batch{plural}; {plan.tokens_per_step:,} tokens",
        "",
        f"Memory per rank at micro-batch {plan.micro_batch} (GiB), by pipeline stage:",
        table(["part", *(f"stage {rank.stage}" for rank in plan.memory.ranks), ""], _rank_rows(plan), indent="  "),
        f"  usable {_gib(plan.usable_bytes)} GiB: {1 - s.headroom:.0%} of {d.memory_bytes / 1e9:g} GB "
        f"({d.memory_source}); --headroom {s.headroom:g}",
        f"Most loaded: stage {most.stage}, {_gib(most.peak)} GiB, at its peak phase ({most.peak_phase}).",
    ]
    if plan.fits:
        lines.append(f"Fits: yes, {_gib(plan.usable_bytes - most.peak)} GiB to spare on the most loaded rank; the "
                     f"largest micro-batch that fits is {plan.largest_micro_batch}.")
    else:
        lines.append("Fits: no.")
        lines += [f"  - {reason}" for reason in plan.reasons]
    lines += [
        "",
        f"Communication per step on stage {t.stage}'s ranks (bus GiB each rank sends; seconds at "
        f"{plan.links.intra_node_bytes_per_s / 1e9:g} GB/s within a node, {plan.links.inter_node_bytes_per_s / 1e9:g}"
        " GB/s across; exposed: not hidden behind compute):",
        table(["axis", "collective", "group", "calls", "GiB", "link", "seconds", "exposed"], _traffic_rows(plan),
              indent="  "),
        "",
        f"Time (model FLOPs {plan.flops_per_step:.3e} per step, {plan.flops_per_token:.4g} per token; at MFU "
        f"{s.mfu:g}, --mfu):",
        f"  compute {t.compute:.3g} s + exposed communication {sum(t.exposed.values()):.3g} s + bubble "
        f"{t.bubble:.3g} s ({_bubble(plan):.1%} of the pipeline's time) = {t.total:.3g} s per step "
        f"(stage {t.stage}'s ranks)",
        f"  {plan.tokens_per_second:,.0f} tokens/s ({plan.tokens_per_second / layout.devices:,.0f} per device)",
    ]
    if plan.days is not None:
        years = f" ({readable_duration(plan.days * 86400)})" if plan.days >= 365 else ""
        lines.append(f"  {plan.tokens:.3g} tokens (--tokens): {plan.days:,.1f} days{years}")
    return "\n".join(lines)


def _rank_document(plan, rank) -> dict:
    return {"stage": rank.stage, "blocks": len(stage_blocks(plan.config.layers, plan.layout)[rank.stage]),
            "in_flight": float(micro_batches_in_flight(plan.layout, rank.stage, plan.micro_batches)),
            **{part: getattr(rank, part) for part, _ in RANK_PARTS}, "buffers": dict(rank.buffers),
            "exchange": dict(rank.exchange), "gathered_phases": dict(rank.gathered_phases),
            "phases": dict(rank.phases), "peak_phase": rank.peak_phase, "peak": rank.peak}


def layout_plan_document(plan, source: str) -> dict:
    """A layout plan as JSON-ready data: every figure the text shows, bytes and FLOPs as integers."""
    s, d, layout, t = plan.settings, plan.device, plan.layout, plan.time
    links = plan.links
    document = _model_document(plan, source)
    document.update({
        "layout": {"describe": layout.describe(), "devices": layout.devices, "tensor": layout.tensor,
                   "sequence_parallel": layout.sequence_parallel, "pipeline": layout.pipeline,
                   "schedule": layout.schedule, "virtual_stages": layout.virtual_stages, "context": layout.context,
                   "expert": layout.expert, "expert_tensor": layout.expert_tensor, "data": layout.data,
                   "sharding": layout.sharding, "sharding_degree": layout.sharding_degree,
                   "expert_data": layout.expert_data, "node_size": layout.node_size},
        "device": {"name": d.name, "count": layout.devices, "memory_bytes": d.memory_bytes,
                   "memory_source": d.memory_source, "usable_bytes": plan.usable_bytes, "headroom": s.headroom,
                   "dtype": d.dtype, "peak_flops_per_second": d.peak_flops_per_second, "peak_source": d.peak_source},
        "training": {"precision": s.precision, "optimizer": s.optimizer, "attention": s.attention,
                     "recompute": s.recompute, "selective_policy": s.selective,
                     "attention_kernel": None if plan.attention_kernel is None else {
                         "name": plan.attention_kernel.name, "device": str(plan.attention_kernel.device),
                         "source": plan.attention_kernel.source, "reason": plan.attention_kernel.reason}},
        "batch": {"global": plan.global_batch, "global_given": plan.batch_given, "micro": plan.micro_batch,
                  "micro_batches": plan.micro_batches, "largest_micro_batch": plan.largest_micro_batch,
                  "tokens_per_step": plan.tokens_per_step},
        "memory_per_rank": [_rank_document(plan, rank) for rank in plan.memory.ranks],
        "most_loaded_stage": plan.memory.most_loaded.stage,
        "fits": plan.fits,
        "reasons": list(plan.reasons),
        "communication": {
            "links": {"intra_node_bytes_per_s": links.intra_node_bytes_per_s, "intra_source": links.intra_source,
                      "inter_node_bytes_per_s": links.inter_node_bytes_per_s, "inter_source": links.inter_source},
            "by_axis": _axis_rows(plan),
            "rows": [{"axis": a.axis, "collective": a.collective, "part": a.part, "group": a.group,
                      "calls": a.calls, "buffer": a.buffer, "bytes": a.bytes, "within_node": a.within_node,
                      "stage": a.stage} for a in plan.traffic],
        },
        "compute": {"flops_per_step": plan.flops_per_step, "flops_per_token": plan.flops_per_token, "mfu": s.mfu,
                    "compute_seconds": t.compute, "exposed_communication_seconds": sum(t.exposed.values()),
                    "bubble_seconds": t.bubble, "bubble_fraction": _bubble(plan), "slowest_stage": t.stage,
                    "seconds_per_step": plan.seconds_per_step, "tokens_per_second": plan.tokens_per_second,
                    "tokens": plan.tokens, "days": plan.days},
    })
    return document


def render_search(choices, config, device, settings, source: str, *, global_batch: int, devices: int) -> str:
    """``plan --search``'s ranked table (:func:`accounting.plan.search.search_layouts`): the layouts of the devices
    that fit, fastest first, each at its fastest micro-batch, with its most loaded rank and what slows it most."""
    s, d = settings, device
    lines = [
        f"Model ({source}): {config.parameter_count:,} parameters, {config.layers} layers, width {config.width}, "
        f"{config.sequence_length} tokens per sequence",
        f"Search: {devices} x {d.name} ({d.memory_bytes / 1e9:g} GB, usable "
        f"{_gib(int(d.memory_bytes * (1 - s.headroom)))} GiB), global batch {global_batch}, {s.precision}, {s.optimizer}, recompute {s.recompute}, MFU {s.mfu:g}",
        "",
    ]
    if not choices:
        lines.append("No layout of these devices fits: try --recompute full, more devices or a smaller global batch.")
        return "\n".join(lines)
    rows = [[str(rank), choice.layout.describe(), f"{choice.micro_batch} x {choice.micro_batches}",
             _gib(choice.peak), str(choice.most_loaded_stage), f"{choice.seconds_per_step:.3g}",
             f"{choice.tokens_per_second:,.0f}", choice.bottleneck]
            for rank, choice in enumerate(choices, 1)]
    lines.append(table(["#", "layout", "micro-batch x m", "peak GiB", "stage", "s/step", "tokens/s", "beside compute"],
                       rows, indent="  "))
    lines.append("")
    lines.append("Each layout at its fastest micro-batch that fits; peak: its most loaded rank (that stage's); "
                 "beside compute: what costs the step most after compute (an axis's exposed communication, or the "
                 "pipeline bubble). Plan one with its options for the per-rank table.")
    return "\n".join(lines)


def search_document(choices, config, device, settings, source: str, *, global_batch: int, devices: int) -> dict:
    """``plan --search --json``: the ranked layouts, each with its batch, most loaded rank and time."""
    return {
        "model": {"source": source, "parameters": config.parameter_count, "sequence_length": config.sequence_length},
        "device": {"name": device.name, "count": devices, "memory_bytes": device.memory_bytes,
                   "usable_bytes": int(device.memory_bytes * (1 - settings.headroom))},
        "training": {"precision": settings.precision, "optimizer": settings.optimizer,
                     "attention": settings.attention, "recompute": settings.recompute, "mfu": settings.mfu,
                     "global_batch": global_batch},
        "layouts": [{"rank": rank, "describe": choice.layout.describe(), "tensor": choice.layout.tensor,
                     "pipeline": choice.layout.pipeline, "schedule": choice.layout.schedule,
                     "virtual_stages": choice.layout.virtual_stages, "context": choice.layout.context,
                     "expert": choice.layout.expert, "data": choice.layout.data, "sharding": choice.layout.sharding,
                     "micro_batch": choice.micro_batch, "micro_batches": choice.micro_batches, "peak": choice.peak,
                     "most_loaded_stage": choice.most_loaded_stage, "seconds_per_step": choice.seconds_per_step,
                     "tokens_per_second": choice.tokens_per_second, "bottleneck": choice.bottleneck}
                    for rank, choice in enumerate(choices, 1)],
    }
