"""Training steps of small Hugging Face models on 2 real gloo ranks under torch's own parallel implementations,
measured per rank by the package's live-tensor tracer.

Kept apart from the test module so a rank imports only this, torch, transformers and the package.
:func:`spawn_parallel_steps` starts ``WORLD`` ranks (forked processes, a ``FileStore``, gloo); each runs every
layout of ``LAYOUTS`` in turn and writes ``rank{r}.json``: for each layout, the bytes it measured by part.

- ``"fsdp2"``: ``fully_shard`` on each block and the root, a 1-D CPU mesh (ZeRO-3 over 2 ranks), Llama;
  ``"fsdp2-vocabulary"`` the same with a vocabulary of ``LARGE_VOCABULARY``, so the root unit outweighs a block;
- ``"tp-sp"``: ``parallelize_module`` with torchtitan's Llama plan (vocabulary-parallel embedding and head,
  sequence-parallel norms, column/row-parallel attention and MLP), the loss under ``loss_parallel()``, Llama;
- ``"pp-1f1b"``: ``torch.distributed.pipelining``'s ``PipelineStage`` and ``Schedule1F1B`` over 2 stages and
  ``MICRO_BATCHES`` micro-batches, Llama split by blocks (stage 0: embedding and the first half; stage 1: the
  second half, the final norm, the head and the loss);
- ``"ep"``: Mixtral with each layer's routed experts split over the 2 ranks, tokens sent to the rank owning
  their expert and back by ``all_to_all_single``, the rest data-parallel (its gradients all-reduced as DDP does);
  ``routed_rows``: the rows each layer's experts on this rank computed (routing is not balanced).

What is measured (fp32, AdamW for-loop, eager attention; the second of two steps, as
:func:`accounting.model.traced_step.traced_training_step_memory` measures one device). The learning rate is 0:
the optimizer does all its work and keeps all its state, but every step is the same step (the routing of the
experts included), so a step counted again by torch's own tracker is the one measured.

- ``parameters``, ``gradients``, ``optimizer`` (AdamW's two moments; ``step_counters`` apart, 4 bytes a tensor,
  which the formulas leave out): the storages of this rank's own tensors (DTensors' local shards), read from the
  module, after backward and from the optimizer's state;
- ``saved``: bytes autograd had saved when backward began (a saved-tensors hook marks them; ``saved_most``: the
  most alive at once, which is what a pipeline stage holds with micro-batches in flight, with the stage outputs
  the schedule keeps to run their backward from);
- ``peak``: the high-water mark of every storage alive in the step (the tracer, a ``TorchDispatchMode``: DTensor
  ops are let through to their local ops, which it sees, and FSDP2's storage resizes of the gathered parameters
  are followed); ``at_peak`` and ``at_backward``: what was alive then, by part (:data:`PEAK_PARTS`; the model's
  own buffers count as ``inputs``), the saved, communication and other bytes by the op that made them;
- ``torch_peak``: the peak of the same step as torch's ``MemTracker`` (``FSDPMemTracker`` under FSDP2) counts it,
  an independent count (not on a pipeline stage: it refuses a module called once per micro-batch).
"""

import json
import os
import time
import traceback
import weakref
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten

from tests.support.fleet_workers import reap_ranks

WORLD = 2
LAYOUTS = ("fsdp2", "fsdp2-vocabulary", "tp-sp", "pp-1f1b", "ep")
MICRO_BATCHES = 4
"""m: micro-batches per step in the pipeline layout."""
LLAMA = dict(layers=4, width=64, heads=4, kv_heads=2, ffn_width=128, vocabulary=256, positions=64)
LARGE_VOCABULARY = 4096
"""``"fsdp2-vocabulary"``: Llama with this vocabulary, its root unit (embedding and head) 14 blocks' worth."""
MIXTRAL = dict(layers=2, width=64, heads=4, kv_heads=2, ffn_width=64, vocabulary=256, positions=64, experts=4,
               experts_per_token=2)
MICRO_BATCH = 2
"""Sequences per micro-batch on each rank."""


# ---- the tracer -------------------------------------------------------------------------------


def _local(tensor):
    """The plain tensor holding a DTensor's shard or a functional collective's result."""
    from torch.distributed._functional_collectives import AsyncCollectiveTensor
    from torch.distributed.tensor import DTensor

    if isinstance(tensor, DTensor):
        return _local(tensor._local_tensor)
    return tensor.trigger_wait() if isinstance(tensor, AsyncCollectiveTensor) else tensor


def _storages_of(*tensors) -> list:
    """Weak references to these tensors' storages, for :func:`_await_freed`."""
    return [weakref.ref(tensor.untyped_storage()) for tensor in tensors]


def _await_freed(storages: list, timeout_s: float = 10.0) -> None:
    """Wait until these storages (:func:`_storages_of`), which the step no longer holds, are freed.

    gloo's worker thread holds its own reference to a collective's tensors for a moment after the collective's
    wait has returned (until it takes its next work), so a buffer the step drops right after an exchange is
    freed on that thread, at a time the scheduler sets: on a loaded machine after the step's peak, which it
    then joins, or not. Waiting for the free puts it where the program dropped the buffer, the same point in
    every run.
    """
    deadline = time.monotonic() + timeout_s
    while any(storage() is not None for storage in storages):
        if time.monotonic() > deadline:
            raise RuntimeError(f"an exchange's buffers were still alive {timeout_s} s after the step dropped them")
        time.sleep(1e-4)


class _Storage:
    """A storage passed where the tracer reads ``tensor.untyped_storage()``."""

    def __init__(self, storage):
        self.storage = storage

    def untyped_storage(self):
        return self.storage


def _tracer_class():
    from torch._guards import active_fake_mode
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.distributed._functional_collectives import AsyncCollectiveTensor
    from torch.distributed.tensor import DTensor

    from accounting.model.traced_step import _StepTracer

    class ParallelTracer(_StepTracer):
        """The package's step tracer, made to see a distributed step's storages.

        - A DTensor op is handed back (``NotImplemented``) so DTensor runs it as local ops, which the mode sees;
          tensors are known by their local storage (saved DTensors, DTensor parameters and gradients).
        - ``UntypedStorage.resize_`` is followed while the tracer is active: FSDP2 frees and re-allocates its
          unsharded parameters by resizing storages, which no op shows (a resize to 0 is a free, a resize up a
          new allocation, noted in ``gathered``).
        - Each storage's origin is kept (the op that made it), and the storages collectives read and write are
          noted in ``communication``.
        """

        def __init__(self):
            super().__init__()
            self.gathered: set[int] = set()
            self.gathered_gradients: set[int] = set()
            self.communication: set[int] = set()
            self.origin: dict[int, str] = {}
            self._resize = None

        def _record(self, tensor):
            super()._record(_local(tensor) if isinstance(tensor, torch.Tensor) else tensor)

        def serial_of(self, tensor):
            return super().serial_of(_local(tensor))

        def save_for_backward(self, tensor):
            serial = self.serial_of(tensor)
            if serial is not None:
                self.saved.add(serial)
            return tensor.detach()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(issubclass(kind, (DTensor, AsyncCollectiveTensor)) for kind in types):
                return NotImplemented  # they run as local ops, seen here
            if active_fake_mode() is not None or any(issubclass(kind, FakeTensor) for kind in types):
                return func(*args, **(kwargs or {}))  # DTensor's sharding propagation: no memory
            before = len(self.log)
            out = super().__torch_dispatch__(func, types, args, kwargs)
            collective = func.namespace in ("_c10d_functional", "c10d")
            for size, serial in self.log[before:]:
                if size > 0:
                    self.origin[serial] = func.overloadpacket.__name__
                    if collective:
                        self.communication.add(serial)
            if collective:  # the buffers it reads and writes (FSDP2's all-gather output, a reduce-scatter's input)
                for value in tree_flatten((args, kwargs))[0]:
                    if isinstance(value, torch.Tensor) and self.serial_of(value) is not None:
                        self.communication.add(self.serial_of(value))
            return out

        def __enter__(self):
            self._resize = torch.UntypedStorage.resize_
            tracer, original = self, self._resize

            def resize_(storage, size):
                key = storage._cdata
                if key in tracer._serials:
                    tracer._release(key)
                original(storage, size)
                if size:
                    tracer._record(_Storage(storage))
                    tracer.gathered.add(tracer._serials[key])
                    tracer.origin[tracer._serials[key]] = "resize_"

            torch.UntypedStorage.resize_ = resize_
            return super().__enter__()

        def __exit__(self, *exc):
            torch.UntypedStorage.resize_ = self._resize
            return super().__exit__(*exc)

    return ParallelTracer


def _storage_bytes(tensors) -> int:
    seen = {}
    for tensor in tensors:
        storage = _local(tensor).untyped_storage()
        seen[storage._cdata] = storage.nbytes()
    return sum(seen.values())


def measure(model_parameters, optimizer, forward_backward, *, inputs=(), buffers=(), gathered_parameters=(),
            outputs=tuple, stage_module=None, first_phase="forward") -> dict:
    """One warm-up step, then a traced one: this rank's bytes by part (the module docstring).

    ``forward_backward()`` runs the step's forward and backward (a pipeline schedule's whole step) and returns
    the loss as a float (``None`` on a pipeline stage without the loss), kept from the warm-up step as ``loss``;
    ``buffers``: tensors alive through the step made before it (a pipeline's receive buffers);
    ``gathered_parameters``: FSDP2's unsharded parameters, whose gradients count as ``gathered`` too;
    ``outputs()``: the tensors the step keeps once done (a pipeline's outputs of each micro-batch);
    ``stage_module``: a pipeline stage's module, whose outputs the schedule keeps to run each micro-batch's
    backward from: counted as saved; ``first_phase``: what ``phase`` calls the step before a backward mark (a
    pipeline schedule marks none: its forwards and backwards interleave).
    """
    from accounting.model.traced_step import _alive

    parameters = list(model_parameters)
    loss = forward_backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    state = [value for entry in optimizer.state.values() for value in entry.values() if isinstance(value, torch.Tensor)]
    moments = [value for value in state if value.dim() > 0]
    counters = [value for value in state if value.dim() == 0]
    tracer = _tracer_class()()
    known = {"parameters": parameters, "optimizer": state, "inputs": list(inputs), "buffers": list(buffers)}
    marks, kept = {}, {}
    hooks = [] if stage_module is None else [stage_module.register_forward_hook(
        lambda module, args, output: tracer.saved.add(tracer.serial_of(output)))]
    hooks += [parameter.register_post_accumulate_grad_hook(
        lambda parameter: tracer.gathered_gradients.add(tracer.serial_of(parameter.grad)))
        for parameter in gathered_parameters]
    started = time.perf_counter()
    with tracer, torch.autograd.graph.saved_tensors_hooks(tracer.save_for_backward, lambda tensor: tensor):
        for tensors in known.values():
            tracer.track(*[_local(tensor) for tensor in tensors])
        marks[first_phase] = len(tracer.log)
        forward_backward(marks=marks, log=tracer.log)
        kept["gradients"] = _storage_bytes(p.grad for p in parameters if p.grad is not None)
        kept["outputs"] = [tracer.serial_of(tensor) for tensor in outputs()]
        marks["optimizer step"] = len(tracer.log)
        optimizer.step()
    seconds = time.perf_counter() - started
    for hook in hooks:
        hook.remove()
    parts = {}
    for part, tensors in known.items():
        for tensor in tensors:
            parts.setdefault(tracer.serial_of(tensor), part)
    for parameter in parameters:
        if parameter.grad is not None:
            parts.setdefault(tracer.serial_of(parameter.grad), "gradients")
    for serial in kept["outputs"]:
        parts.setdefault(serial, "outputs")
    parts.pop(None, None)

    def part_of(serial):
        return parts.get(serial) or ("gathered" if serial in tracer.gathered else
                                     "gathered gradients" if serial in tracer.gathered_gradients else
                                     "saved" if serial in tracer.saved else
                                     "communication" if serial in tracer.communication else "other")

    log, start = tracer.log, marks[first_phase]
    current = sum(size for size, _ in log[:start])
    peak, peak_at = current, start
    saved_now, saved_most = 0, 0
    for position in range(start, len(log)):
        size, serial = log[position]
        current += size
        if current > peak:
            peak, peak_at = current, position + 1
        if part_of(serial) == "saved":
            saved_now += size
            saved_most = max(saved_most, saved_now)
    backward = _by_part(_alive(log[:marks.get("backward", marks["optimizer step"])]), part_of, tracer.origin)
    at_peak = _by_part(_alive(log[:peak_at]), part_of, tracer.origin)
    phase = [name for name, position in sorted(marks.items(), key=lambda item: item[1]) if position < peak_at]
    return {
        "parameters": _storage_bytes(parameters),
        "gradients": kept["gradients"],
        "optimizer": _storage_bytes(moments),
        "step_counters": _storage_bytes(counters),
        "buffers": _storage_bytes(buffers),
        "saved": backward["saved"],
        "saved_most": saved_most,
        "communication": backward["communication"],
        "peak": peak,
        "phase": phase[-1] if phase else first_phase,
        "at_peak": at_peak,
        "at_backward": backward,
        "seconds": seconds,
        "loss": loss,
    }


def torch_tracker_peak(module, optimizer, forward_backward, *, tensors=(), fsdp=False) -> int:
    """The peak of one more step as torch's own ``MemTracker`` (``FSDPMemTracker`` under FSDP2) counts it: an
    independent count of the same step's live storages (the module, the optimizer and ``tensors`` tracked)."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker

    optimizer.zero_grad(set_to_none=True)
    tracker = FSDPMemTracker(module, optimizer) if fsdp else MemTracker()
    tracker.track_external(module, optimizer, *tensors)
    with tracker:
        forward_backward()
        optimizer.step()
    return sum(snapshot["Total"] for snapshot in tracker.get_tracker_snapshot("peak").values())


PEAK_PARTS = ("parameters", "optimizer", "inputs", "buffers", "gradients", "outputs", "gathered",
              "gathered gradients", "saved", "communication", "other")
"""What :func:`measure` sorts the storages alive at a moment into (the first that applies)."""


def _by_part(alive: dict, part_of, origin: dict) -> dict:
    """Bytes alive by part, and the saved and other bytes by the op that made them (``"saved by op"``…)."""
    totals = dict.fromkeys(PEAK_PARTS, 0)
    ops = {"saved": {}, "communication": {}, "other": {}}
    for serial, size in alive.items():
        part = part_of(serial)
        totals[part] += size
        if part in ops:
            name = origin.get(serial, "?")
            ops[part][name] = ops[part].get(name, 0) + size
    for part, sizes in ops.items():
        totals[f"{part} by op"] = dict(sorted(sizes.items(), key=lambda item: -item[1]))
    return totals


# ---- models -----------------------------------------------------------------------------------


def _llama(seed=0, **sizes):
    from tests.support.hf_models import build_hf_model

    return build_hf_model("llama", seed=seed, **{**LLAMA, **sizes})


def _tokens(config, batch, seed):
    """(batch, sequence) token ids of a ``TransformerConfig`` or a Hugging Face config, from ``seed``."""
    vocabulary = getattr(config, "vocabulary", None) or config.vocab_size
    length = getattr(config, "sequence_length", None) or config.max_position_embeddings
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocabulary, (batch, length), generator=generator)


def _loss(logits, labels):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1))


def _marked_step(compute_loss):
    """``forward_backward(marks, log)`` of a step whose loss ``compute_loss()`` returns, backward marked."""

    def forward_backward(marks=None, log=None):
        loss = compute_loss()
        if marks is not None:
            marks["backward"] = len(log)
        loss.backward()
        value = _local(loss).item()
        del loss
        return value

    return forward_backward


def run_fsdp2(rank: int, **sizes) -> dict:
    """FSDP2 (ZeRO-3 over 2): ``fully_shard`` on each block, then the root; ``sizes`` change :data:`LLAMA`'s."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (WORLD,))
    model, config = _llama(**sizes)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    tokens = _tokens(config, MICRO_BATCH, seed=rank)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    step = _marked_step(lambda: _loss(model(input_ids=tokens).logits, tokens))
    step()  # FSDP2 builds its unsharded parameters in the first step
    optimizer.zero_grad(set_to_none=True)
    unsharded = [fsdp_param.unsharded_param for module in model.modules() if hasattr(module, "_get_fsdp_state")
                 for fsdp_param in module._get_fsdp_state()._fsdp_param_group.fsdp_params]
    result = measure(model.parameters(), optimizer, step, inputs=[tokens, *model.buffers()],
                     gathered_parameters=unsharded)
    return result | {"torch_peak": torch_tracker_peak(model, optimizer, step, tensors=[tokens], fsdp=True)}


def _tensor_parallel_plan(model):
    """torchtitan's Llama plan, written for Hugging Face's module names.

    The residual stream stays a DTensor sharded along the sequence (``use_local_output=False`` where the
    plan's modules hand it on), so Hugging Face's code reads the whole sequence's length from it.
    """
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    plan = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1),
                                              use_local_output=False),
        "model.norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    }
    for index in range(len(model.model.layers)):
        prefix = f"model.layers.{index}"
        plan |= {
            f"{prefix}.input_layernorm": SequenceParallel(),
            f"{prefix}.self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                      desired_input_kwarg_layouts={"hidden_states": Replicate()}),
            f"{prefix}.self_attn.q_proj": ColwiseParallel(),
            f"{prefix}.self_attn.k_proj": ColwiseParallel(),
            f"{prefix}.self_attn.v_proj": ColwiseParallel(),
            f"{prefix}.self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            f"{prefix}.post_attention_layernorm": SequenceParallel(),
            f"{prefix}.mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            f"{prefix}.mlp.gate_proj": ColwiseParallel(),
            f"{prefix}.mlp.up_proj": ColwiseParallel(),
            f"{prefix}.mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        }
    return plan


def run_tp_sp(rank: int) -> dict:
    """Tensor parallelism with sequence parallelism over 2 ranks, the loss vocabulary-parallel."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel, parallelize_module

    mesh = init_device_mesh("cpu", (WORLD,))
    model, config = _llama()
    parallelize_module(model, mesh, _tensor_parallel_plan(model))
    tokens = _tokens(config, MICRO_BATCH, seed=0)  # the same batch on both ranks of a tensor-parallel group
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)

    def forward_backward(marks=None, log=None):
        with loss_parallel():
            return _marked_step(lambda: _loss(model(input_ids=tokens).logits, tokens))(marks, log)

    result = measure(model.parameters(), optimizer, forward_backward, inputs=[tokens, *model.buffers()])
    return result | {"torch_peak": torch_tracker_peak(model, optimizer, forward_backward, tensors=[tokens])}


class _PipelineStage(torch.nn.Module):
    """One stage of a Hugging Face Llama split by blocks: the embedding on the first, norm and head on the last."""

    def __init__(self, model, blocks: slice, first: bool, last: bool):
        super().__init__()
        inner = model.model
        self.embed_tokens = inner.embed_tokens if first else None
        self.layers = torch.nn.ModuleList(list(inner.layers)[blocks])
        self.rotary_emb = inner.rotary_emb
        self.norm = inner.norm if last else None
        self.lm_head = model.lm_head if last else None

    def forward(self, hidden):
        if self.embed_tokens is not None:
            hidden = self.embed_tokens(hidden)
        length = hidden.shape[1]
        positions = torch.arange(length).unsqueeze(0)
        rotary = self.rotary_emb(hidden, positions)
        mask = torch.full((length, length), float("-inf")).triu(1)[None, None]
        for layer in self.layers:
            hidden = layer(hidden, attention_mask=mask, position_ids=positions, position_embeddings=rotary)
        if self.lm_head is not None:
            hidden = self.lm_head(self.norm(hidden))
        return hidden


def run_pp_1f1b(rank: int) -> dict:
    """Pipeline parallelism over 2 stages, 1F1B over ``MICRO_BATCHES`` micro-batches."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    model, config = _llama()
    half = config.layers // WORLD
    stage_module = _PipelineStage(model, slice(rank * half, (rank + 1) * half), rank == 0, rank == WORLD - 1)
    del model
    stage = PipelineStage(stage_module, rank, WORLD, torch.device("cpu"))
    schedule = Schedule1F1B(stage, MICRO_BATCHES, loss_fn=_loss)
    tokens = _tokens(config, MICRO_BATCH * MICRO_BATCHES, seed=0)
    optimizer = torch.optim.AdamW(stage_module.parameters(), lr=0.0)

    def forward_backward(marks=None, log=None):
        if rank == 0:
            schedule.step(tokens)
            return None
        losses = []
        schedule.step(target=tokens, losses=losses)
        return torch.stack(losses).mean().item()

    forward_backward()  # builds the stage's receive buffers
    optimizer.zero_grad(set_to_none=True)
    buffers = [info.buffer for infos in (*stage.args_recv_info.values(), *stage.grad_recv_info.values())
               for info in infos if isinstance(getattr(info, "buffer", None), torch.Tensor)]
    # No MemTracker count here: it refuses a module called more than once in a step, as micro-batches call it.
    return measure(stage_module.parameters(), optimizer, forward_backward, inputs=[tokens, *stage_module.buffers()],
                   buffers=buffers, outputs=lambda: list(stage.output_chunks), stage_module=stage_module,
                   first_phase="1f1b schedule")


class _ExpertParallel(torch.nn.Module):
    """Hugging Face's experts module of one layer holding this rank's experts only, tokens dispatched to it and
    back by ``all_to_all_single``.

    Called as Hugging Face calls its experts: ``(hidden_states, top_k_index, top_k_weights)``. Each routed copy
    of a token goes, with its routing weight, to the rank owning its expert; there Hugging Face's own experts
    module (its default grouped-matmul implementation, the one a one-device model runs) computes the rows it
    received as its local experts' (k = 1, the weights applied); the weighted rows come back and are summed
    into their tokens. Each exchange's buffers are freed where the program drops them (:func:`_await_freed`).
    """

    def __init__(self, experts, rank: int, world: int):
        super().__init__()
        self.experts_count = experts.num_experts
        self.local = experts.num_experts // world
        self.world = world
        own = slice(rank * self.local, (rank + 1) * self.local)
        experts.gate_up_proj = torch.nn.Parameter(experts.gate_up_proj.detach()[own].clone())
        experts.down_proj = torch.nn.Parameter(experts.down_proj.detach()[own].clone())
        experts.num_experts = self.local
        self.experts = experts
        self.rows = 0  # routed rows this rank's experts computed in the last forward

    def forward(self, hidden_states, top_k_index, top_k_weights):
        from torch.distributed._functional_collectives import all_to_all_single_autograd

        group = dist.group.WORLD
        flat = top_k_index.flatten()
        order = flat.argsort(stable=True)
        tokens = order // top_k_index.shape[1]
        counts = torch.bincount(flat, minlength=self.experts_count)
        received = torch.empty_like(counts)
        dist.all_to_all_single(received, counts)  # routed rows each of this rank's experts gets from each rank
        send = counts.view(self.world, self.local).sum(1).tolist()
        receive = received.view(self.world, self.local).sum(1).tolist()
        rows = self._dispatch(lambda: hidden_states[tokens], receive, send)
        weights = self._dispatch(lambda: top_k_weights.flatten()[order], receive, send)
        self.rows = sum(receive)
        local_expert = torch.arange(self.local).repeat(self.world).repeat_interleave(received)
        computed = self.experts(rows, local_expert[:, None], weights[:, None].to(rows.dtype))
        combined = _local(all_to_all_single_autograd(computed, send, receive, group))
        # Back in (token, choice) order and summed, as Hugging Face's grouped experts do (index_add would save
        # the rows for its backward).
        mixed = combined[order.argsort()].view(*top_k_index.shape, -1).sum(1)
        exchanged = _storages_of(counts, received, computed, combined)
        del counts, received, computed, combined  # where returning would drop them
        _await_freed(exchanged)
        return mixed

    @staticmethod
    def _dispatch(make_rows, receive: list[int], send: list[int]) -> torch.Tensor:
        """The rows ``make_rows()`` builds, sent to their experts' ranks; freed once sent, as a temporary is."""
        from torch.distributed._functional_collectives import all_to_all_single_autograd

        sent = make_rows()
        received = _local(all_to_all_single_autograd(sent, receive, send, dist.group.WORLD))
        exchanged = _storages_of(sent)
        del sent
        _await_freed(exchanged)
        return received


def run_ep(rank: int) -> dict:
    """Expert parallelism over 2 ranks, data parallel on the rest (the non-expert gradients all-reduced)."""
    import transformers

    from tests.support.hf_models import hf_config

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # as build_hf_model draws it, with Hugging Face's default (grouped) experts
        model = transformers.AutoModelForCausalLM.from_config(hf_config("mixtral", **MIXTRAL),
                                                              attn_implementation="eager")
    for layer in model.model.layers:
        layer.mlp.experts = _ExpertParallel(layer.mlp.experts, rank, WORLD)
    dense = [parameter for name, parameter in model.named_parameters() if ".experts." not in name]
    tokens = _tokens(model.config, MICRO_BATCH, seed=rank)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)

    def compute_loss():
        return _loss(model(input_ids=tokens).logits, tokens)

    def forward_backward(marks=None, log=None):
        loss = _marked_step(compute_loss)(marks, log)
        for parameter in dense:  # as DDP: the data-parallel gradients averaged
            dist.all_reduce(parameter.grad)
            parameter.grad /= WORLD
        return loss

    result = measure(model.parameters(), optimizer, forward_backward, inputs=[tokens, *model.buffers()])
    rows = [layer.mlp.experts.rows for layer in model.model.layers]
    return result | {"torch_peak": torch_tracker_peak(model, optimizer, forward_backward, tensors=[tokens]),
                     "routed_rows": rows}


RUNS = {"fsdp2": run_fsdp2, "fsdp2-vocabulary": lambda rank: run_fsdp2(rank, vocabulary=LARGE_VOCABULARY),
        "tp-sp": run_tp_sp, "pp-1f1b": run_pp_1f1b, "ep": run_ep}


# ---- the ranks ----------------------------------------------------------------------------------


def _import_for_the_ranks() -> None:
    """Import what every layout uses (Hugging Face's model modules load when first used), so forked ranks
    start with it."""
    from transformers import LlamaForCausalLM, MixtralForCausalLM  # noqa: F401
    from torch.distributed.device_mesh import init_device_mesh  # noqa: F401
    from torch.distributed.fsdp import fully_shard  # noqa: F401
    from torch.distributed.pipelining import PipelineStage  # noqa: F401
    from torch.distributed.tensor.parallel import parallelize_module  # noqa: F401

    from accounting.model import traced_step  # noqa: F401
    from tests.support import hf_models  # noqa: F401


def run_rank(rank: int, store_path: str, out_dir: str, layouts) -> None:
    """One rank: a gloo group on a FileStore, each layout in turn, ``rank{rank}.json`` written."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    if dist.is_initialized():  # a group the forking process had (another test's fake group): not this world's
        dist.destroy_process_group()
    store = dist.FileStore(store_path, WORLD)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD)
    results = {}
    try:
        for layout in layouts:
            started = time.perf_counter()
            try:
                results[layout] = RUNS[layout](rank)
            except Exception:  # noqa: BLE001 (reported to the test, which names it)
                results[layout] = {"error": traceback.format_exc()}
            results[layout]["wall_s"] = time.perf_counter() - started
            Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results, indent=1))  # kept if a later one hangs
            dist.barrier()
    finally:
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results, indent=1))
        dist.destroy_process_group()


def spawn_parallel_steps(out_dir: Path, layouts=LAYOUTS, timeout_s: float = 120.0, start_method: str = "fork") -> list:
    """Run ``layouts`` on ``WORLD`` new ranks; each rank's results (``None`` for a rank that wrote none).

    ``start_method``: ``"fork"`` by default, so the ranks start with torch, torch.distributed and transformers
    imported (a spawned rank spends seconds importing them again; the ranks use no CUDA, which forking would
    break); ``"spawn"`` where forking is not available.
    """
    import torch.multiprocessing as mp

    _import_for_the_ranks()
    context = mp.get_context(start_method)
    processes = [context.Process(target=run_rank, args=(rank, str(out_dir / "store"), str(out_dir), tuple(layouts)),
                                 daemon=True) for rank in range(WORLD)]
    for process in processes:
        process.start()
    deadline = time.monotonic() + timeout_s
    for process in processes:
        process.join(max(deadline - time.monotonic(), 0))
    return reap_ranks(processes, out_dir)
