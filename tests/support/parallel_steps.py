"""Training steps of small Hugging Face models on 2 real gloo ranks under torch's own parallel implementations,
measured per rank by the package's live-tensor tracer.

Kept apart from the test module so a spawned rank imports only this, torch, transformers and the package.
:func:`spawn_parallel_steps` starts ``WORLD`` ranks (spawned processes, a ``FileStore``, gloo); each runs every
layout of ``LAYOUTS`` in turn and writes ``rank{r}.json``: for each layout, the bytes it measured by part.

- ``"fsdp2"``: ``fully_shard`` on each block and the root, a 1-D CPU mesh (ZeRO-3 over 2 ranks), Llama;
- ``"tp-sp"``: ``parallelize_module`` with torchtitan's Llama plan (vocabulary-parallel embedding and head,
  sequence-parallel norms, column/row-parallel attention and MLP), the loss under ``loss_parallel()``, Llama;
- ``"pp-1f1b"``: ``torch.distributed.pipelining``'s ``PipelineStage`` and ``Schedule1F1B`` over 2 stages and
  ``MICRO_BATCHES`` micro-batches, Llama split by blocks (stage 0: embedding and the first half; stage 1: the
  second half, the final norm, the head and the loss);
- ``"ep"``: Mixtral with each layer's routed experts split over the 2 ranks, tokens sent to the rank owning
  their expert and back by ``all_to_all_single``, the rest data-parallel (its gradients all-reduced as DDP does).

What is measured (fp32, AdamW for-loop, eager attention; the second of two steps, as
:func:`accounting.model.traced_step.traced_training_step_memory` measures one device):

- ``parameters``, ``gradients``, ``optimizer`` (AdamW's two moments; ``step_counters`` apart, 4 bytes a tensor,
  which the formulas leave out): the storages of this rank's own tensors (DTensors' local shards), read from the
  module, after backward and from the optimizer's state;
- ``saved``: bytes autograd had saved when backward began (a saved-tensors hook marks them; ``saved_most``: the
  most alive at once, which is what a pipeline stage holds with micro-batches in flight);
- ``peak``: the high-water mark of every storage alive in the step (the tracer, a ``TorchDispatchMode``: DTensor
  ops are let through to their local ops, which it sees, and FSDP2's storage resizes of the gathered parameters
  are followed); ``at_peak``: what was alive at the peak, by part (``gathered``: FSDP2's unsharded parameters;
  ``buffers``: the pipeline's receive buffers, made before the step and alive through it).
"""

import json
import os
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

WORLD = 2
LAYOUTS = ("fsdp2", "tp-sp", "pp-1f1b", "ep")
MICRO_BATCHES = 4
"""m: micro-batches per step in the pipeline layout."""
LLAMA = dict(layers=4, width=64, heads=4, kv_heads=2, ffn_width=128, vocabulary=256, positions=64)
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
        """

        def __init__(self):
            super().__init__()
            self.gathered: set[int] = set()
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
            return super().__torch_dispatch__(func, types, args, kwargs)

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


def _alive(log) -> dict:
    from accounting.model.traced_step import _alive as alive

    return alive(log)


def measure(model_parameters, optimizer, forward_backward, *, inputs=(), buffers=()) -> dict:
    """One warm-up step, then a traced one: this rank's bytes by part (the module docstring).

    ``forward_backward()`` runs the step's forward and backward (a pipeline schedule's whole step) and returns
    the loss as a float (``None`` on a pipeline stage without the loss), kept from the warm-up step as ``loss``;
    ``buffers``: tensors alive through the step made before it (a pipeline's receive buffers).
    """
    parameters = list(model_parameters)
    loss = forward_backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    state = [value for entry in optimizer.state.values() for value in entry.values() if isinstance(value, torch.Tensor)]
    moments = [value for value in state if value.dim() > 0]
    counters = [value for value in state if value.dim() == 0]
    tracer = _tracer_class()()
    known = {"parameters": parameters, "optimizer": state, "inputs": list(inputs), "buffers": list(buffers)}
    marks = {}
    grads = {}
    started = time.perf_counter()
    with tracer, torch.autograd.graph.saved_tensors_hooks(tracer.save_for_backward, lambda tensor: tensor):
        for tensors in known.values():
            tracer.track(*[_local(tensor) for tensor in tensors])
        marks["start"] = len(tracer.log)
        forward_backward(marks=marks, log=tracer.log)
        grads["bytes"] = _storage_bytes(p.grad for p in parameters if p.grad is not None)
        marks["optimizer step"] = len(tracer.log)
        optimizer.step()
    seconds = time.perf_counter() - started
    parts = {}
    for part, tensors in known.items():
        for tensor in tensors:
            parts.setdefault(tracer.serial_of(tensor), part)
    for parameter in parameters:
        if parameter.grad is not None:
            parts.setdefault(tracer.serial_of(parameter.grad), "gradients")
    parts.pop(None, None)
    log, start = tracer.log, marks["start"]
    current = sum(size for size, _ in log[:start])
    peak, peak_at = current, start
    saved_now, saved_most = 0, 0
    alive_saved = set()
    for position in range(start, len(log)):
        size, serial = log[position]
        current += size
        if current > peak:
            peak, peak_at = current, position + 1
        if serial in tracer.saved and serial not in parts:
            saved_now += size
            saved_most = max(saved_most, saved_now)
    backward_at = marks.get("backward", marks["optimizer step"])
    saved = sum(size for serial, size in _alive(log[:backward_at]).items()
                if serial in tracer.saved and serial not in parts)
    at_peak = dict.fromkeys(("parameters", "optimizer", "inputs", "buffers", "gradients", "gathered", "saved",
                             "other"), 0)
    for serial, size in _alive(log[:peak_at]).items():
        part = parts.get(serial) or ("gathered" if serial in tracer.gathered else
                                     "saved" if serial in tracer.saved else "other")
        at_peak[part] += size
    phase = [name for name, position in sorted(marks.items(), key=lambda item: item[1]) if position < peak_at]
    return {
        "parameters": _storage_bytes(parameters),
        "gradients": grads["bytes"],
        "optimizer": _storage_bytes(moments),
        "step_counters": _storage_bytes(counters),
        "buffers": _storage_bytes(buffers),
        "saved": saved,
        "saved_most": saved_most,
        "peak": peak,
        "phase": phase[-1] if phase else "start",
        "at_peak": at_peak,
        "seconds": seconds,
        "loss": loss,
    }


# ---- models -----------------------------------------------------------------------------------


def _llama(seed=0, **sizes):
    from tests.support.hf_models import build_hf_model

    return build_hf_model("llama", seed=seed, **{**LLAMA, **sizes})


def _tokens(config, batch, seed):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, config.vocabulary, (batch, config.sequence_length), generator=generator)


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


def run_fsdp2(rank: int) -> dict:
    """FSDP2 (ZeRO-3 over 2): ``fully_shard`` on each block, then the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (WORLD,))
    model, config = _llama()
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    tokens = _tokens(config, MICRO_BATCH, seed=rank)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = _marked_step(lambda: _loss(model(input_ids=tokens).logits, tokens))
    return measure(model.parameters(), optimizer, step, inputs=[tokens])


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
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def forward_backward(marks=None, log=None):
        with loss_parallel():
            return _marked_step(lambda: _loss(model(input_ids=tokens).logits, tokens))(marks, log)

    return measure(model.parameters(), optimizer, forward_backward, inputs=[tokens])


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
    optimizer = torch.optim.AdamW(stage_module.parameters(), lr=1e-3)

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
    return measure(stage_module.parameters(), optimizer, forward_backward, inputs=[tokens], buffers=buffers)


class _ExpertParallel(torch.nn.Module):
    """Hugging Face's experts of one layer, those of this rank only; tokens dispatched by ``all_to_all_single``.

    Called as Hugging Face's experts module is: ``(hidden_states, top_k_index, top_k_weights)``. Each routed copy
    of a token goes to the rank owning its expert, is computed there as Hugging Face computes it (gate and up
    from ``gate_up_proj``, the activation, ``down_proj``) and comes back, weighted, to its token.
    """

    def __init__(self, experts, rank: int, world: int):
        super().__init__()
        self.local = experts.num_experts // world
        self.experts = experts.num_experts
        own = slice(rank * self.local, (rank + 1) * self.local)
        self.gate_up_proj = torch.nn.Parameter(experts.gate_up_proj.detach()[own].clone())
        self.down_proj = torch.nn.Parameter(experts.down_proj.detach()[own].clone())
        self.act_fn = experts.act_fn
        self.world = world

    def forward(self, hidden_states, top_k_index, top_k_weights):
        from torch.distributed._functional_collectives import all_to_all_single_autograd

        flat = top_k_index.flatten()
        order = flat.argsort(stable=True)
        tokens = order // top_k_index.shape[1]
        counts = torch.bincount(flat, minlength=self.experts)
        received = torch.empty_like(counts)
        dist.all_to_all_single(received, counts)  # routed copies each expert here gets from each rank
        send = counts.view(self.world, self.local).sum(1).tolist()
        receive_by_expert = received.view(self.world, self.local)
        receive = receive_by_expert.sum(1).tolist()
        dispatched = all_to_all_single_autograd(hidden_states[tokens], receive, send, dist.group.WORLD)
        pieces = dispatched.split(receive_by_expert.flatten().tolist())
        outputs = []
        for position, piece in enumerate(pieces):
            expert = position % self.local
            gate, up = F.linear(piece, self.gate_up_proj[expert]).chunk(2, dim=-1)
            outputs.append(F.linear(self.act_fn(gate) * up, self.down_proj[expert]))
        computed = torch.cat(outputs)
        combined = all_to_all_single_autograd(computed, send, receive, dist.group.WORLD)
        weights = top_k_weights.flatten()[order, None].to(combined.dtype)
        return torch.zeros_like(hidden_states).index_add(0, tokens, combined * weights)


def run_ep(rank: int) -> dict:
    """Expert parallelism over 2 ranks, data parallel on the rest (the non-expert gradients all-reduced)."""
    from tests.support.hf_models import build_hf_model

    model, config = build_hf_model("mixtral", seed=0, **MIXTRAL)
    for layer in model.model.layers:
        layer.mlp.experts = _ExpertParallel(layer.mlp.experts, rank, WORLD)
    dense = [parameter for name, parameter in model.named_parameters() if ".experts." not in name]
    tokens = _tokens(config, MICRO_BATCH, seed=rank)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def compute_loss():
        return _loss(model(input_ids=tokens).logits, tokens)

    def forward_backward(marks=None, log=None):
        loss = _marked_step(compute_loss)(marks, log)
        for parameter in dense:  # as DDP: the data-parallel gradients averaged
            dist.all_reduce(parameter.grad)
            parameter.grad /= WORLD
        return loss

    return measure(model.parameters(), optimizer, forward_backward, inputs=[tokens])


RUNS = {"fsdp2": run_fsdp2, "tp-sp": run_tp_sp, "pp-1f1b": run_pp_1f1b, "ep": run_ep}


# ---- the ranks ----------------------------------------------------------------------------------


def run_rank(rank: int, store_path: str, out_dir: str, layouts) -> None:
    """One rank: a gloo group on a FileStore, each layout in turn, ``rank{rank}.json`` written."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
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
            dist.barrier()
    finally:
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results, indent=1))
        dist.destroy_process_group()


def spawn_parallel_steps(out_dir: Path, layouts=LAYOUTS, timeout_s: float = 120.0) -> list:
    """Run ``layouts`` on ``WORLD`` spawned ranks; each rank's results (``None`` for a rank that wrote none)."""
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    processes = [context.Process(target=run_rank, args=(rank, str(out_dir / "store"), str(out_dir), tuple(layouts)),
                                 daemon=True) for rank in range(WORLD)]
    for process in processes:
        process.start()
    deadline = time.monotonic() + timeout_s
    for process in processes:
        process.join(max(deadline - time.monotonic(), 0))
    outcomes = []
    for rank, process in enumerate(processes):
        if process.is_alive():
            process.kill()
            process.join()
        path = out_dir / f"rank{rank}.json"
        outcomes.append(json.loads(path.read_text()) if path.exists() else None)
    return outcomes
