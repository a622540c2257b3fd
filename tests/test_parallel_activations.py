"""Activations per rank of a parallel layout (accounting/model/parallel/activations.py), against independent truths:

- the single-device count (``transformer_training_memory``) for a layout of all-1 degrees, exactly;
- torch's own tensor and sequence parallelism (``parallelize_module`` with torchtitan's Llama plan, loss
  parallel) run on a fake process group of 2 ranks in this one process: the bytes autograd saves on a rank
  of a Hugging Face Llama block and of its final norm, output head and loss;
- the pipeline schedules' order of forwards and backwards per stage (torch's own interleaved 1F1B action
  lists; GPipe and 1F1B enumerated), the micro-batches alive at most;
- Korthikanti et al. 2022's per-layer formulas (arXiv:2205.05198, Table 2) derived from the package's own
  count of a GPT-2-style block, with the one difference named.
"""

import contextlib
import warnings
from dataclasses import replace
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting import TransformerConfig
from accounting.errors import AccountingError
from accounting.model.activations import activation_formats, late_gradient_parameters, \
    pending_block_gradient_parameters
from accounting.model.parallel.activations import (
    chunk_blocks, chunk_micro_batches_in_flight, korthikanti_layer_activations, micro_batches_in_flight,
    stage_activations, stage_blocks,
)
from accounting.model.parallel.layout import ParallelLayout
from accounting.model.parallel.memory import layout_memory
from accounting.model.training_memory import transformer_training_memory
from tests.support.hf_models import FAMILIES, NEWER_FAMILIES, build_hf_model, hf_config
from tests.support.strategies_training import transformer_configs

ONE = ParallelLayout()


# ---- all-1 degrees: the single-device count ----------------------------------------------


def _assert_single_device(config, batch, precision, recompute, attention="eager", dropout=False):
    (stage,) = stage_activations(config, batch, ONE, precision, attention=attention, recompute=recompute,
                                 dropout=dropout)
    memory = transformer_training_memory(config, batch, "adamw", precision, dropout, attention=attention,
                                         recompute=recompute)
    assert (stage.saved, stage.transient) == (memory.activations, memory.transient)
    gradients = 0
    if recompute == "full":  # backward's gradients are the model states' part, not the activations'
        early = config.parameter_count - late_gradient_parameters(config) \
            - pending_block_gradient_parameters(config, activation_formats(precision))
        gradients = round(memory.gradients / config.parameter_count * early)
    assert stage.backward == memory.backward - gradients
    assert stage.buffers == {} and stage.in_flight == 1 and stage.blocks == config.layers


@settings(max_examples=25)
@given(config=transformer_configs(max_layers=3), batch=st.integers(1, 3),
       precision=st.sampled_from(["fp32", "bf16-mixed", "bf16-autocast"]), recompute=st.sampled_from(["none", "full"]),
       dropout=st.booleans())
def test_all_one_layout_is_the_single_device_count(config, batch, precision, recompute, dropout):
    _assert_single_device(config, batch, precision, recompute, dropout=dropout)


@pytest.mark.parametrize("family", FAMILIES + NEWER_FAMILIES)
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_all_one_layout_is_the_single_device_count_for_each_family(family, recompute):
    config = TransformerConfig.from_hf(hf_config(family).to_dict())
    for precision in ("bf16-mixed", "bf16-autocast"):
        for attention in ("eager", "sdpa"):
            _assert_single_device(config, 2, precision, recompute, attention)


# ---- tensor and sequence parallelism, measured on a fake process group ----------------------

T = 2
SIZES = dict(width=64, heads=4, kv_heads=2, ffn_width=96, vocabulary=128, positions=32)


@pytest.fixture(scope="module")
def mesh():
    """A 2-rank world in this process (torch's fake process group): collectives return tensors of the right
    shapes and move nothing; each DTensor's local shard is rank 0's real one."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=T)
        yield init_device_mesh("cpu", (T,))
    dist.destroy_process_group()


def _saved_bytes(run, existing):
    """Bytes of the distinct storages autograd saves while ``run()`` runs (a DTensor's: its local shard's),
    those of ``existing`` tensors (parameters, rotary tables) left out."""
    from torch.distributed.tensor import DTensor

    def local(tensor):
        return tensor._local_tensor if isinstance(tensor, DTensor) else tensor

    before = {local(tensor).untyped_storage()._cdata for tensor in existing}
    saved = {}

    def pack(tensor):
        storage = local(tensor).untyped_storage()
        if storage._cdata not in before:
            saved[storage._cdata] = storage.nbytes()
        return tensor

    with warnings.catch_warnings(), torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        warnings.simplefilter("ignore")
        run()
    return sum(saved.values())


def _block_plan(sequence_parallel):
    """torchtitan's Llama block plan (torchtitan/models/llama3/infra/parallelize.py), on Hugging Face's names."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, \
        SequenceParallel

    colwise = {f"{module}.{name}": ColwiseParallel()
               for module, names in (("self_attn", "qkv"), ("mlp", ("gate", "up"))) for name in
               ([f"{n}_proj" for n in names])}
    if not sequence_parallel:
        return colwise | {"self_attn.o_proj": RowwiseParallel(), "mlp.down_proj": RowwiseParallel()}
    return colwise | {
        "input_layernorm": SequenceParallel(),
        "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                        desired_input_kwarg_layouts={"hidden_states": Replicate()}),
        "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
        "post_attention_layernorm": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1)),
    }


def _one_block(layout, attention, config, batch, precision="bf16", **options):
    """One block's bytes on a rank: a stage's forward with two blocks less one with one."""
    two, one = (stage_activations(replace(config, layers=layers), batch, layout, precision, attention=attention,
                                  **options)[0] for layers in (2, 1))
    return two.per_micro_batch - one.per_micro_batch


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("sequence_parallel", [True, False], ids=["sp", "no-sp"])
def test_block_on_a_rank_is_what_torch_tensor_parallelism_saves(mesh, attention, sequence_parallel):
    """Exact: torch's plan saves the all-gathered input of Q/K/V and of gate/up (the default,
    ``linear_inputs="gathered"``), Megatron's convention (``"sharded"``) saves it divided and counts less."""
    from torch.distributed.tensor.parallel import parallelize_module

    model, config = build_hf_model("llama", layers=1, **SIZES)
    model.config._attn_implementation = attention
    model = model.to(torch.bfloat16)
    layer, batch, s = model.model.layers[0], 2, config.sequence_length
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parallelize_module(layer, mesh, _block_plan(sequence_parallel))
    x = torch.randn(batch, s // T if sequence_parallel else s, config.width, dtype=torch.bfloat16, requires_grad=True)
    cos, sin = model.model.rotary_emb(x, torch.arange(s)[None].expand(batch, s))
    measured = _saved_bytes(lambda: layer(x, position_embeddings=(cos, sin)), [*layer.parameters(), cos, sin])

    layout = ParallelLayout(devices=T, tensor=T, sequence_parallel=sequence_parallel)
    assert measured == _one_block(layout, attention, config, batch)
    single = _one_block(ONE, attention, config, batch)
    assert measured < single  # and the split is real
    if sequence_parallel:
        sharded = _one_block(layout, attention, config, batch, linear_inputs="sharded")
        # Megatron keeps the gathered input's 1/T: each of the two gathered inputs (s·b·h) counted 1/T.
        assert measured - sharded == 2 * 2 * batch * s * config.width * (T - 1) // T


def test_head_and_loss_on_a_rank_are_what_loss_parallel_saves(mesh):
    """The final norm (sequence-parallel), the output head (columns: the vocabulary) and torch's
    vocabulary-parallel cross-entropy (``loss_parallel``) on rank 0: the last stage's part outside its blocks."""
    import torch.nn.functional as F
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, SequenceParallel, loss_parallel, parallelize_module

    model, config = build_hf_model("llama", layers=1, **SIZES)
    model = model.to(torch.bfloat16)
    batch, s = 2, config.sequence_length
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parallelize_module(model, mesh, {
            "model.norm": SequenceParallel(),
            "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
        })
    x = torch.randn(batch, s // T, config.width, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, config.vocabulary, (batch, s))

    def run():
        with loss_parallel():
            logits = model.lm_head(model.model.norm(x))
            F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())

    measured = _saved_bytes(run, [*model.parameters(), labels])
    layout = ParallelLayout(devices=T, tensor=T)
    stage = stage_activations(config, batch, layout, "bf16", attention="eager")[0]
    rotary = 2 * 2 * s * config.head_width  # the cos and sin tables, bf16
    predicted = stage.per_micro_batch - _one_block(layout, "eager", config, batch) - rotary
    assert measured == pytest.approx(predicted, abs=4)  # the loss's fp32 total weight, a scalar, not counted


# ---- torchtitan's op-level selective checkpointing, run ------------------------------------------

# torchtitan's _save_list (torchtitan/models/llama3/infra/parallelize.py, as of its published benchmarks), with
# the CPU's flash kernel standing in for CUDA's: these ops' outputs are kept, every second mm recomputed.
_SAC_SAVE = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_efficient_attention.default,
             torch.ops.aten._scaled_dot_product_flash_attention.default,
             torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
             torch.ops._c10d_functional.reduce_scatter_tensor.default, torch.ops.aten.max.default}


def _torchtitan_sac_context():
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    counts = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            counts[mode] += 1
        save = func in _SAC_SAVE and not (func == torch.ops.aten.mm.default and counts[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def _local_live_bytes():
    """The package's live-tensor tracker, each DTensor counted by its local shard (the bytes a rank holds)."""
    from torch.distributed.tensor import DTensor
    from torch.utils._pytree import tree_flatten

    from accounting.live_memory import LiveTensorBytes

    def local(tensor):
        return tensor._local_tensor if isinstance(tensor, DTensor) else tensor

    class LocalLiveBytes(LiveTensorBytes):
        def _record(self, tensor):
            super()._record(local(tensor))

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            inputs = {local(value).untyped_storage()._cdata for value in tree_flatten((args, kwargs))[0]
                      if isinstance(value, torch.Tensor)}
            for value in tree_flatten(out)[0]:
                if isinstance(value, torch.Tensor) and local(value).untyped_storage()._cdata not in inputs:
                    self._record(value)
            return out

    return LocalLiveBytes(), local


@pytest.mark.parametrize("tensor,sequence_parallel", [(1, False), (T, True), (T, False)], ids=["one", "tp-sp", "tp"])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_matmul_outputs_policy_is_what_torchtitans_op_level_checkpointing_keeps(mesh, tensor, sequence_parallel,
                                                                                 attention):
    """A block under ``checkpoint(..., context_fn=<torchtitan's policy>)``: what stays alive after its forward
    (its input, the kept ops' outputs) on a rank, exactly."""
    from torch.distributed.tensor.parallel import parallelize_module
    from torch.utils.checkpoint import checkpoint

    model, config = build_hf_model("llama", layers=1, **SIZES)
    model.config._attn_implementation = attention
    model = model.to(torch.bfloat16)
    layer, batch, s = model.model.layers[0], 2, config.sequence_length
    if tensor > 1:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parallelize_module(layer, mesh, _block_plan(sequence_parallel))
    tokens = s // tensor if sequence_parallel else s
    x = torch.randn(batch, tokens, config.width, dtype=torch.bfloat16, requires_grad=True)
    cos, sin = model.model.rotary_emb(x, torch.arange(s)[None].expand(batch, s))
    live, local = _local_live_bytes()
    with warnings.catch_warnings(), live:
        warnings.simplefilter("ignore")
        live.track(*(local(parameter) for parameter in layer.parameters()))
        before = live.current
        out = checkpoint(layer, x, position_embeddings=(cos, sin), use_reentrant=False,
                         context_fn=_torchtitan_sac_context)
        kept = live.current - before - local(out).untyped_storage().nbytes() + x.untyped_storage().nbytes()
    layout = ParallelLayout(devices=tensor, tensor=tensor, sequence_parallel=sequence_parallel)
    kind = "sdpa-flash" if attention == "sdpa" else "eager"
    assert kept == _one_block(layout, kind, config, batch, recompute="selective", selective="matmul-outputs")


# ---- pipeline schedules: micro-batches in flight --------------------------------------------


def _most_alive(order, weight=1):
    """The most forwards not yet backpropagated along a rank's order of "F" and "B" actions."""
    alive = most = 0
    for action in order:
        alive += 1 if action == "F" else -1
        most = max(most, alive)
    return Fraction(most, weight)


def _torch_interleaved_order(pipeline, chunks, micro_batches, rank):
    """torch's ``ScheduleInterleaved1F1B`` actions on ``rank`` (its own computation, no stages or processes)."""
    from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B, _ComputationType

    schedule = ScheduleInterleaved1F1B.__new__(ScheduleInterleaved1F1B)
    schedule.pp_group_size, schedule.n_local_stages, schedule._n_microbatches = pipeline, chunks, micro_batches
    schedule.number_of_rounds = max(1, micro_batches // pipeline)
    schedule.microbatches_per_round = micro_batches // schedule.number_of_rounds
    actions = [action for action in schedule._calculate_single_rank_operations(rank) if action is not None]
    assert {action.computation_type for action in actions} == {_ComputationType.FORWARD,
                                                               _ComputationType.FULL_BACKWARD}
    return ["F" if action.computation_type == _ComputationType.FORWARD else "B" for action in actions]


@pytest.mark.parametrize("pipeline,chunks", [(2, 2), (2, 3), (3, 2), (4, 2), (4, 3)])
@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_interleaved_in_flight_is_torchs_schedule(pipeline, chunks, rounds):
    micro_batches = rounds * pipeline
    layout = ParallelLayout(devices=pipeline, pipeline=pipeline, schedule="interleaved-1f1b", virtual_stages=chunks)
    for rank in range(pipeline):
        order = _torch_interleaved_order(pipeline, chunks, micro_batches, rank)
        assert order.count("F") == order.count("B") == micro_batches * chunks
        assert micro_batches_in_flight(layout, rank, micro_batches) == _most_alive(order, chunks)


def _torch_chunks_alive_at_most(pipeline, chunks, micro_batches, rank):
    """Each of ``rank``'s chunks' forwards not yet backpropagated, at the first moment the most are, in torch's
    ``ScheduleInterleaved1F1B`` actions."""
    from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B, _ComputationType

    schedule = ScheduleInterleaved1F1B.__new__(ScheduleInterleaved1F1B)
    schedule.pp_group_size, schedule.n_local_stages, schedule._n_microbatches = pipeline, chunks, micro_batches
    schedule.number_of_rounds = max(1, micro_batches // pipeline)
    schedule.microbatches_per_round = micro_batches // schedule.number_of_rounds
    alive, most, at_most = [0] * chunks, -1, None
    for action in schedule._calculate_single_rank_operations(rank):
        if action is None:
            continue
        alive[action.stage_index // pipeline] += 1 if action.computation_type == _ComputationType.FORWARD else -1
        if sum(alive) > most:
            most, at_most = sum(alive), tuple(alive)
    return at_most


@pytest.mark.parametrize("pipeline,chunks", [(2, 2), (2, 3), (3, 2), (4, 2), (4, 3), (8, 2)])
@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_interleaved_in_flight_by_chunk_is_torchs_schedule(pipeline, chunks, rounds):
    micro_batches = rounds * pipeline
    layout = ParallelLayout(devices=pipeline, pipeline=pipeline, schedule="interleaved-1f1b", virtual_stages=chunks)
    for rank in range(pipeline):
        alive = _torch_chunks_alive_at_most(pipeline, chunks, micro_batches, rank)
        assert chunk_micro_batches_in_flight(layout, rank, micro_batches) == alive, f"rank {rank}"
        assert sum(alive) == chunks * micro_batches_in_flight(layout, rank, micro_batches)


@pytest.mark.parametrize("recompute", ["none", "selective"])
def test_an_interleaved_rank_holds_what_a_stage_of_each_chunk_holds_per_micro_batch_alive(recompute):
    """Each chunk alive on a rank holds, per micro-batch, what a 1F1B stage of that chunk's one block holds for
    one: the embedding's part in the first chunk only, the loss's in the last only (torch runs the last chunk's
    forward and backward back to back), a stage's output in every other; so many of each as torch's schedule
    has alive."""
    config = TransformerConfig.from_hf(hf_config("llama", layers=8).to_dict())
    pipeline, chunks, micro_batches = 4, 2, 8
    one_block = stage_activations(config, 2, ParallelLayout(devices=8, pipeline=8), micro_batches=micro_batches,
                                  recompute=recompute)
    layout = ParallelLayout(devices=pipeline, pipeline=pipeline, schedule="interleaved-1f1b", virtual_stages=chunks)
    stages = stage_activations(config, 2, layout, micro_batches=micro_batches, recompute=recompute)
    for rank, stage in enumerate(stages):
        alive = _torch_chunks_alive_at_most(pipeline, chunks, micro_batches, rank)
        chunk_stages = [one_block[rank + chunk * pipeline] for chunk in range(chunks)]
        assert stage.saved == sum(count * chunk.per_micro_batch for count, chunk in zip(alive, chunk_stages))


@pytest.mark.parametrize("pipeline", [1, 2, 3, 5])
@pytest.mark.parametrize("micro_batches", [1, 2, 4, 7])
def test_gpipe_and_1f1b_in_flight_by_enumeration(pipeline, micro_batches):
    """GPipe: every forward, then every backward; 1F1B (PipeDream-flush): the stages after this one warm up
    with a forward each, then one forward and one backward, then the backwards left."""
    for rank in range(pipeline):
        gpipe = ["F"] * micro_batches + ["B"] * micro_batches
        warmup = min(pipeline - rank - 1, micro_batches)
        one_f_one_b = ["F"] * warmup + ["F", "B"] * (micro_batches - warmup) + ["B"] * warmup
        for schedule, order in (("gpipe", gpipe), ("1f1b", one_f_one_b)):
            layout = ParallelLayout(devices=pipeline, pipeline=pipeline, schedule=schedule)
            assert micro_batches_in_flight(layout, rank, micro_batches) == _most_alive(order)


class _FirstStage(torch.nn.Module):
    """Stage 0 of a Hugging Face Llama split in two: the embedding and the first block."""

    def __init__(self, model):
        super().__init__()
        self.embed, self.block, self.rotary = model.model.embed_tokens, model.model.layers[0], model.model.rotary_emb

    def forward(self, token_ids):
        hidden = self.embed(token_ids)
        positions = torch.arange(token_ids.shape[1])[None]  # (1, s), as LlamaModel makes them
        return self.block(hidden, position_embeddings=self.rotary(hidden, positions))


@pytest.mark.parametrize("schedule,micro_batches", [("1f1b", 4), ("gpipe", 3)])
def test_first_stage_holds_what_torchs_pipeline_schedule_keeps(mesh, schedule, micro_batches):
    """Stage 0 of 2 under ``torch.distributed.pipelining`` (rank 0 of the fake group; stage 1's gradients
    arrive as empty buffers): the bytes alive when its first backward starts, exactly the stage's ``saved``:
    the micro-batches in flight, each with its block's saves, its rotary tables and the stage's output."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    from accounting.live_memory import LiveTensorBytes

    model, config = build_hf_model("llama", layers=2, **SIZES)
    model, batch = model.to(torch.bfloat16), 2
    token_ids = torch.randint(0, config.vocabulary, (micro_batches * batch, config.sequence_length))
    output = torch.zeros(batch, config.sequence_length, config.width, dtype=torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stage = PipelineStage(_FirstStage(model), 0, 2, torch.device("cpu"), input_args=(token_ids[:batch],),
                              output_args=(output,))
        runner = {"1f1b": Schedule1F1B, "gpipe": ScheduleGPipe}[schedule](stage, n_microbatches=micro_batches)
    live, at_first_backward = LiveTensorBytes(), []
    backward = stage.backward_one_chunk

    def backward_one_chunk(*args, **kwargs):
        at_first_backward.append(live.current)
        return backward(*args, **kwargs)

    stage.backward_one_chunk = backward_one_chunk
    with warnings.catch_warnings(), live:
        warnings.simplefilter("ignore")
        runner.step(token_ids)
    layout = ParallelLayout(devices=2, pipeline=2, schedule=schedule)
    first = stage_activations(config, batch, layout, "bf16", attention="eager", micro_batches=micro_batches)[0]
    assert at_first_backward[0] == first.saved


@pytest.mark.parametrize("keep_outputs", [True, False])
def test_last_stage_keeps_every_micro_batchs_vocabulary_parallel_logits(mesh, keep_outputs):
    """T = 2, P = 2, 8 micro-batches: torch's schedule keeps each micro-batch's output on the last stage to
    return it from ``step()`` (``output_chunks``; measured with 4 on 2 gloo ranks in test_parallel_measured.py);
    each is the local logits of torch's vocabulary-parallel head (``ColwiseParallel``, ``Shard(-1)``), made
    here on rank 0 of the fake group. ``keep_outputs=False`` (``step(return_outputs=False)``) keeps none."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    model, config = build_hf_model("llama", layers=2, **SIZES)
    model, batch, micro_batches = model.to(torch.bfloat16), 2, 8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parallelize_module(model, mesh, {"lm_head": ColwiseParallel(output_layouts=Shard(-1))})
        logits = model.lm_head(torch.randn(batch, config.sequence_length, config.width, dtype=torch.bfloat16))
    layout = ParallelLayout(devices=2 * T, tensor=T, pipeline=2)
    first, last = stage_activations(config, batch, layout, "bf16", attention="eager", micro_batches=micro_batches,
                                    keep_outputs=keep_outputs)
    kept = micro_batches * logits.untyped_storage().nbytes() if keep_outputs else 0
    assert last.buffers.get("pipeline outputs", 0) == kept
    assert "pipeline outputs" not in first.buffers

@pytest.mark.parametrize("pipeline,chunks", [(2, 2), (4, 2), (8, 4)])
def test_interleaved_first_stage_is_korthikantis_count(pipeline, chunks):
    """Section 4.2.3: the first stage holds P micro-batches' worth, times 1 + (P − 1)/(P·V) when interleaved."""
    layout = ParallelLayout(devices=pipeline, pipeline=pipeline, schedule="interleaved-1f1b", virtual_stages=chunks)
    expected = pipeline * (1 + Fraction(pipeline - 1, pipeline * chunks))
    assert micro_batches_in_flight(layout, 0, 4 * pipeline) == expected


@pytest.mark.parametrize("layers,pipeline,chunks", [(8, 2, 1), (8, 2, 2), (10, 4, 1), (7, 3, 2), (12, 4, 3)])
def test_every_block_on_one_stage_in_chunks_of_nearly_equal_size(layers, pipeline, chunks):
    layout = ParallelLayout(devices=pipeline, pipeline=pipeline, virtual_stages=chunks,
                            schedule="interleaved-1f1b" if chunks > 1 else "1f1b")
    stages = stage_blocks(layers, layout)
    assert sorted(index for stage in stages for index in stage) == list(range(layers))
    sizes = [len(chunk) for chunk in chunk_blocks(layers, pipeline * chunks)]
    assert max(sizes) - min(sizes) <= 1
    for rank, stage in enumerate(stages):  # rank p holds chunks p, p + P, …: each chunk's blocks are consecutive
        chunks_held = [chunk for chunk in chunk_blocks(layers, pipeline * chunks)][rank::pipeline]
        assert stage == tuple(index for chunk in chunks_held for index in chunk)


def test_first_1f1b_stage_holds_pipeline_micro_batches_and_the_last_the_loss():
    config = TransformerConfig.from_hf(hf_config("llama", layers=4).to_dict())
    layout = ParallelLayout(devices=8, tensor=2, pipeline=4)
    stages = stage_activations(config, 2, layout, micro_batches=8)
    assert [stage.in_flight for stage in stages] == [4, 3, 2, 1]
    assert all(stage.saved == stage.in_flight * stage.per_micro_batch for stage in stages)
    assert [stage.transient > 0 for stage in stages] == [False, False, False, True]


@pytest.mark.parametrize("parallel", [True, False])
def test_the_loss_s_backward_holds_what_torch_s_loss_parallel_holds(mesh, parallel):
    """The last stage's transient bytes (beside the saved log-probabilities at the start of backward) against
    torch's own MemTracker over a cross-entropy's backward: plain (two fp32 logit-sized gradients) and under
    ``loss_parallel`` on vocabulary-sharded logits, whose backward (``_nll_loss_and_log_softmax_backward``)
    makes the one-hot gradient, ``exp`` of the log-probabilities, their sum and the product: three at once."""
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import loss_parallel

    config = TransformerConfig.from_hf(hf_config("llama", layers=2).to_dict())
    tensor = T if parallel else 1
    (last,) = stage_activations(config, 2, ParallelLayout(devices=tensor, tensor=tensor), "fp32")
    tokens = 2 * config.sequence_length
    logits = torch.randn(tokens, config.vocabulary // tensor, requires_grad=True)
    target = torch.randint(0, config.vocabulary // tensor, (tokens,), generator=torch.Generator().manual_seed(0))
    context = loss_parallel() if parallel else contextlib.nullcontext()
    tracker = MemTracker()
    tracker.track_external(logits)
    with warnings.catch_warnings(), tracker, context:
        warnings.simplefilter("ignore")
        inputs = DTensor.from_local(logits, mesh, [Shard(-1)]) if parallel else logits
        loss = torch.nn.functional.cross_entropy(inputs, target)
        after_forward = tracker.get_tracker_snapshot("current")[torch.device("cpu")]["Total"]
        loss.backward()
        peak = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]
    one = 4 * logits.numel()  # one fp32 logit-sized tensor; beyond them per-token indices and scalars
    assert abs(last.transient - (peak - after_forward)) < one / 2


# ---- Korthikanti et al. 2022, Table 2, from the package's count of a GPT-2-style block -------------


S, B, H, A = 64, 2, 64, 4
GPT = TransformerConfig(layers=1, width=H, heads=A, sequence_length=S, vocabulary=96)  # LayerNorm, GELU, f = 4h


@pytest.mark.parametrize("t", [1, 2, 4])
def test_korthikanti_table_2_from_our_block(t):
    """Our count of a GPT-2 block in 16 bits with dropout and eager attention is the paper's plus the two
    LayerNorms' fp32 mean and reciprocal std (2 × 2 × 4 bytes a token) that the paper leaves out; with
    sequence parallelism those are divided too. torch's plan saves the all-gathered input of the QKV and
    first MLP matrices (2 × 2sbh, whole), which Megatron (the paper) keeps divided."""
    def ours(**options):
        layout = ParallelLayout(devices=t, tensor=t, sequence_parallel=options.pop("sp", True))
        return _one_block(layout, "eager", GPT, B, "fp16-mixed", dropout=True, **options)

    def paper(**options):
        return korthikanti_layer_activations(S, B, H, A, t, **options)

    statistics = 16 * S * B
    assert ours(sp=False) == paper() + statistics
    assert ours(linear_inputs="sharded") == paper(sequence_parallel=t > 1) + statistics // t
    assert ours() == paper(sequence_parallel=t > 1) + statistics // t + 2 * 2 * S * B * H * (t - 1) // t
    assert ours(recompute="selective", linear_inputs="sharded") \
        == paper(sequence_parallel=t > 1, recompute="selective") + statistics // t
    assert ours(sp=False, recompute="selective") == paper(recompute="selective") + statistics
    assert ours(recompute="full") == paper(sequence_parallel=t > 1, recompute="full")


def test_korthikanti_one_device_is_34_sbh_plus_5_as2b():
    assert korthikanti_layer_activations(S, B, H, A) == 34 * S * B * H + 5 * A * S * S * B


# ---- context and expert parallelism, key/value heads ---------------------------------------------


@pytest.mark.parametrize("family", FAMILIES + NEWER_FAMILIES)
def test_every_family_splits_over_every_axis(family):
    """Each family's rank under T = 2 holds between half and all of one device's forward (norms replicated or
    gathered inputs whole, the rest halved), and every axis and recomputation gives an answer or a named refusal."""
    config = TransformerConfig.from_hf(hf_config(family).to_dict())
    (single,) = stage_activations(config, 2, ONE)
    (rank,) = stage_activations(config, 2, ParallelLayout(devices=2, tensor=2))
    assert single.per_micro_batch / 2 < rank.per_micro_batch < single.per_micro_batch
    third = ParallelLayout(devices=4, tensor=2, **({"expert": 2} if config.experts > 1 else {"context": 2}))
    for layout in (ParallelLayout(devices=4, tensor=2, pipeline=2), third):
        for recompute in ("none", "selective", "full"):
            for selective in ("attention-core", "matmul-outputs"):
                try:
                    stages = stage_activations(config, 2, layout, micro_batches=4, recompute=recompute,
                                               selective=selective)
                except AccountingError as error:  # soft-capped scores run eager: no ring attention
                    assert layout.context > 1 and config.attention_softcap and "'eager'" in str(error)
                    continue
                assert len(stages) == layout.pipeline and all(stage.saved > 0 for stage in stages)
                assert (recompute == "none") == all(stage.backward == 0 for stage in stages)


def test_context_parallelism_needs_a_fused_attention_kernel():
    config = TransformerConfig.from_hf(hf_config("llama").to_dict())
    for attention in ("eager", "sdpa-math"):
        with pytest.raises(AccountingError, match=f"context parallelism.*{attention}"):
            stage_activations(config, 1, ParallelLayout(devices=2, context=2), attention=attention)


def test_context_parallel_rank_saves_its_chunk_and_buffers_two_kv_blocks():
    """A fused kernel's saves grow with the tokens: a rank of C holds what one device holds for s / C tokens;
    the ring's buffers are the K and V of the local chunk being used and the one being received."""
    config = TransformerConfig.from_hf(hf_config("llama").to_dict())
    c = 2
    layout = ParallelLayout(devices=c, context=c)
    chunk = replace(config, sequence_length=config.sequence_length // c)
    assert _one_block(layout, "sdpa-flash", config, 2) == _one_block(ONE, "sdpa-flash", chunk, 2)
    (stage,) = stage_activations(config, 2, layout, "bf16", attention="sdpa-flash")
    k_and_v = 2 * 2 * chunk.sequence_length * config.kv_width * 2  # bf16 K and V of 2 sequences
    assert stage.buffers == {"context k/v blocks": 2 * k_and_v}


def test_key_value_heads_fewer_than_tensor_ranks_are_replicated():
    """T = 4 ranks, 2 key/value heads: each rank holds one, as if there were 4."""
    few, one_each = (TransformerConfig.from_hf(hf_config("llama", kv_heads=k).to_dict()) for k in (2, 4))
    layout = ParallelLayout(devices=4, tensor=4)
    assert _one_block(layout, "sdpa-flash", few, 2) == _one_block(layout, "sdpa-flash", one_each, 2)
    assert _one_block(ONE, "sdpa-flash", few, 2) < _one_block(ONE, "sdpa-flash", one_each, 2)


def test_expert_parallel_rank_routes_its_tokens_out_and_back():
    """Balanced routing: a rank's experts take as many rows as it sends, so its saves do not change with E;
    its k routed rows of each token go out and come back (dispatch and combine buffers)."""
    config = TransformerConfig.from_hf(hf_config("mixtral").to_dict())
    single, = stage_activations(config, 2, ONE, "bf16")
    split, = stage_activations(config, 2, ParallelLayout(devices=2, expert=2), "bf16")
    assert split.per_micro_batch == single.per_micro_batch
    rows = 2 * config.sequence_length * config.experts_per_token
    assert split.exchange == {"expert dispatch": 2 * rows * config.width, "expert combine": 2 * rows * config.width}
    assert "expert dispatch" not in split.buffers and not single.exchange


def test_expert_exchange_is_beside_what_is_saved_before_the_head():
    """The dispatch and combine buffers live inside an MoE layer (measured: not alive at the start of backward,
    test_parallel_measured.py); in the forward's last MoE layer they are beside everything saved but what the
    final norm, the output head and the loss save after it, measured here by torch on one device."""
    import torch.nn.functional as F

    model, config = build_hf_model("mixtral", layers=1, **SIZES, experts=4, experts_per_token=2)
    batch = 2
    x = torch.randn(batch, config.sequence_length, config.width, requires_grad=True)
    labels = torch.randint(0, config.vocabulary, (batch, config.sequence_length))

    def run():
        logits = model.lm_head(model.model.norm(x))
        F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())

    after_experts = _saved_bytes(run, [*model.parameters(), labels])
    split, = stage_activations(config, batch, ParallelLayout(devices=2, expert=2), "fp32", attention="eager")
    assert split.saved - split.exchange_saved == pytest.approx(after_experts, abs=4)  # the loss's scalar weight
    memory = layout_memory(config, batch, ParallelLayout(devices=2, expert=2), precision="fp32", attention="eager")
    (rank,) = memory.ranks
    assert rank.buffer_bytes == 0  # not on top of every phase
    assert rank.phases["expert exchange"] == split.exchange_saved + sum(split.exchange.values())
