"""Bytes each rank moves per step, checked against the collectives torch's own parallel code issues.

The independent truth: a small Hugging Face Llama parallelized by torch (``parallelize_module`` with
torchtitan's Llama plan: colwise/rowwise matrices, ``SequenceParallel`` norms, a vocabulary-parallel
embedding and head, ``loss_parallel``; ``fully_shard`` per block and at the root) on a *fake* process
group of 4 ranks in this one process (``FakeStore``: the collectives run as no-ops, every shape is a
real rank's), one forward and backward under ``CommDebugMode``, which sees each collective DTensor and
FSDP issue. Every call's buffer is read from its tensors and priced with the bus-bytes convention, and
compared, per collective, with :func:`step_traffic`'s rows.
"""

import pytest
import torch
import torch.distributed as dist

from accounting.errors import AccountingError
from accounting.model.config import TransformerConfig
from accounting.model.parallel.communication import AXES, AxisTraffic, bus_factor, step_traffic, traffic_by_axis
from accounting.model.parallel.layout import ParallelLayout

WORLD = 4
TORCH_HOOK_WARNINGS = pytest.mark.filterwarnings("ignore:.*backward hook:UserWarning")
"""CommDebugMode's module tracker hooks Hugging Face modules whose outputs are not tensors; torch warns."""


@pytest.fixture(scope="module")
def fake_world():
    """A fake process group of :data:`WORLD` ranks (this process is rank 0)."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    yield WORLD
    dist.destroy_process_group()


def _recorder():
    """A ``CommDebugMode`` that also keeps each collective's kind and whole buffer ``S`` in bytes."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.debug import CommDebugMode

    class Recorder(CommDebugMode):
        def __init__(self, ranks):
            super().__init__()
            self.ranks, self.calls = ranks, []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not any(kind is DTensor for kind in types):
                name = str(func._overloadpacket)

                def size(tensor):
                    return tensor.numel() * tensor.element_size()
                if name.endswith("all_gather_into_tensor"):  # funcol: the local shard in
                    self.calls.append(("all-gather", size(args[0]) * self.ranks))
                elif name.endswith("reduce_scatter_tensor"):
                    self.calls.append(("reduce-scatter", size(args[0])))
                elif name.endswith(".all_reduce"):
                    self.calls.append(("all-reduce", size(args[0])))
                elif name == "c10d._allgather_base_":  # (output, input): the gathered whole first
                    self.calls.append(("all-gather", size(args[0])))
                elif name == "c10d._reduce_scatter_base_":  # (output, input): the whole input second
                    self.calls.append(("reduce-scatter", size(args[1])))
            return super().__torch_dispatch__(func, types, args, kwargs)

    return Recorder(WORLD)


def _by_collective(pairs):
    """{collective: (calls, bus bytes)} of (collective, buffer) calls."""
    totals = {}
    for collective, buffer in pairs:
        calls, moved = totals.get(collective, (0, 0))
        totals[collective] = (calls + 1, moved + buffer * bus_factor(collective, WORLD))
    return totals


def _rows_by_collective(rows, axis):
    totals = {}
    for row in rows:
        if row.axis == axis:
            calls, moved = totals.get(row.collective, (0, 0))
            totals[row.collective] = (calls + row.calls, moved + row.bytes)
    return totals


def _llama(**sizes):
    from support.hf_models import build_hf_model

    return build_hf_model("llama", layers=2, heads=4, kv_heads=4, sequence_length=16, **sizes)


def _tensor_parallel(model, mesh):
    """torchtitan's Llama plan (``parallelize_llama``'s ``apply_tp``), by Hugging Face's module names; the
    residual stream kept a DTensor sharded along the sequence (so Hugging Face's shapes read whole)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    block = {
        "input_layernorm": SequenceParallel(),
        "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                        desired_input_kwarg_layouts={"hidden_states": Replicate()}),
        "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        "post_attention_layernorm": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
    }
    for layer in model.model.layers:
        parallelize_module(layer, mesh, block)
    parallelize_module(model, mesh, {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1),
                                              use_local_output=False),
        "model.norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    })


def _tensor_parallel_step(model, token_ids, recorder):
    from torch.distributed.tensor.parallel import loss_parallel

    with recorder:
        logits = model(input_ids=token_ids).logits
        with loss_parallel():
            torch.nn.functional.cross_entropy(logits.flatten(0, 1), token_ids.flatten()).backward()


@TORCH_HOOK_WARNINGS
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_tensor_and_sequence_parallel_traffic_is_what_torch_issues(fake_world, recompute):
    from torch.distributed.device_mesh import init_device_mesh

    model, config = _llama()
    if recompute == "full":
        model.activation_checkpointing_enable({"use_reentrant": False})
    _tensor_parallel(model, init_device_mesh("cpu", (WORLD,)))
    recorder = _recorder()
    batch = 2
    _tensor_parallel_step(model, torch.randint(0, config.vocabulary, (batch, config.sequence_length)), recorder)
    rows = step_traffic(config, batch, ParallelLayout(devices=WORLD, tensor=WORLD), precision="fp32",
                        recompute=recompute)
    assert _rows_by_collective(rows, "tensor") == _by_collective(recorder.calls)


@TORCH_HOOK_WARNINGS
def test_tensor_parallel_without_sequence_parallelism_is_megatrons_fused_all_reduces(fake_world):
    """Without sequence parallelism (the colwise/rowwise plan, the stream replicated), torch all-reduces
    each column-parallel projection's input gradient on its own: Q, K, V and gate, up, 5 a block. Megatron's
    fused QKV and gate-up matrices share one input, so one each: 2, which is what the model counts. The
    forward's (after attention and after the MLP), the embedding's, the head's and the loss's are the same."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    model, config = _llama()
    mesh = init_device_mesh("cpu", (WORLD,))
    block = {name: ColwiseParallel() for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                  "mlp.gate_proj", "mlp.up_proj")}
    block |= {"self_attn.o_proj": RowwiseParallel(), "mlp.down_proj": RowwiseParallel()}
    for layer in model.model.layers:
        parallelize_module(layer, mesh, block)
    parallelize_module(model, mesh, {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
        "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)})
    recorder = _recorder()
    batch = 2
    _tensor_parallel_step(model, torch.randint(0, config.vocabulary, (batch, config.sequence_length)), recorder)
    rows = step_traffic(config, batch, ParallelLayout(devices=WORLD, tensor=WORLD, sequence_parallel=False),
                        precision="fp32")
    calls, moved = _rows_by_collective(rows, "tensor")["all-reduce"]
    unfused = 3 * config.layers  # (Q, K, V → 1) and (gate, up → 1): 3 more a block
    stream = batch * config.sequence_length * config.width * 4
    assert _by_collective(recorder.calls) == {
        "all-reduce": (calls + unfused, moved + unfused * stream * bus_factor("all-reduce", WORLD))}


@TORCH_HOOK_WARNINGS
def test_fully_sharded_traffic_is_what_fsdp_issues(fake_world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model, config = _llama()
    mesh = init_device_mesh("cpu", (WORLD,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    recorder = _recorder()
    token_ids = torch.randint(0, config.vocabulary, (2, config.sequence_length))
    with recorder:
        model(input_ids=token_ids, labels=token_ids).loss.backward()
    rows = step_traffic(config, 2, ParallelLayout(devices=WORLD, sharding="fsdp"), precision="fp32")
    assert _rows_by_collective(rows, "data") == _by_collective(recorder.calls)


CONFIG = TransformerConfig(layers=8, width=256, heads=8, kv_heads=4, sequence_length=64, vocabulary=1000,
                           mlp="swiglu", norm="rmsnorm", bias=False, learned_positions=False, tied_embeddings=False)
MOE = TransformerConfig(layers=4, width=128, heads=8, sequence_length=64, vocabulary=500, mlp="swiglu",
                        norm="rmsnorm", bias=False, learned_positions=False, experts=8, experts_per_token=2,
                        ffn_width=64)


def _total(rows, axis, collective=None):
    return sum(row.bytes for row in rows if row.axis == axis and collective in (None, row.collective))


def test_sequence_parallelism_moves_the_bytes_of_megatrons_all_reduces():
    """Korthikanti et al. 2022, section 4.2.2: an all-reduce is a reduce-scatter and an all-gather, so
    sequence parallelism moves the same bus bytes (2(T−1)/T against 2 × (T−1)/T a pair)."""
    on = step_traffic(CONFIG, 2, ParallelLayout(devices=8, tensor=4))
    off = step_traffic(CONFIG, 2, ParallelLayout(devices=8, tensor=4, sequence_parallel=False))
    blocks = [sum(row.bytes for row in rows if row.part == "blocks") for rows in (on, off)]
    assert blocks[0] == blocks[1] > 0


def test_pipeline_sends_by_hand():
    """Each micro-batch crosses P·V − 1 chunk boundaries forward and as many backward; a middle rank sends
    at each of its V chunks both ways, the first and last at one fewer (counted here by walking the chunks)."""
    for pipeline, virtual in ((4, 1), (4, 2), (2, 3)):
        schedule = "interleaved-1f1b" if virtual > 1 else "1f1b"
        layout = ParallelLayout(devices=8 * pipeline, tensor=8, pipeline=pipeline, schedule=schedule,
                                virtual_stages=virtual)
        (row,) = [row for row in step_traffic(CONFIG, 1, layout, micro_batches=6) if row.axis == "pipeline"]
        chunks = pipeline * virtual  # chunk k lives on rank k mod P; forward sends k -> k+1, backward k+1 -> k
        sends = [0] * pipeline
        for chunk in range(chunks - 1):
            sends[chunk % pipeline] += 6  # forward, per micro-batch
            sends[(chunk + 1) % pipeline] += 6  # backward
        assert row.calls == max(sends)
        assert row.buffer == 64 * 256 * 2 // 8  # a micro-batch's residual stream, split over the tensor ranks
        assert row.within_node is False


def test_ring_attention_rotations_by_hand():
    """torch's ``_templated_ring_attention`` (context_parallel, CUDA kernels only, so not run here): each
    rank's keys and values visit the C − 1 others in the forward and again in the backward, and the
    backward's loop sends the accumulated fp32 gradients on at each of its C steps, the last home."""
    def sent(context, recompute="none"):
        layout = ParallelLayout(devices=context, context=context)
        rows = step_traffic(CONFIG, 1, layout, recompute=recompute)
        return [sum(row.bytes for row in rows if row.part == part) for part in ("keys and values",
                                                                              "key and value gradients")]

    for context in (2, 4, 8):
        chunk = CONFIG.sequence_length // context * 2 * CONFIG.kv_width  # K and V of a rank's tokens, elements
        blocks = CONFIG.layers
        assert sent(context) == [2 * (context - 1) * blocks * chunk * 2, context * blocks * chunk * 4]
        assert sent(context, "full")[0] == 3 * (context - 1) * blocks * chunk * 2


def test_expert_all_to_all_scales_with_top_k_and_keeps_a_share_local():
    layout = ParallelLayout(devices=8, expert=8)
    top2 = _total(step_traffic(MOE, 1, layout), "expert")
    top1 = _total(step_traffic(MOE.__class__(**{**MOE.__dict__, "experts_per_token": 1}), 1, layout), "expert")
    assert top2 == 2 * top1
    tokens = MOE.sequence_length
    # 4 expert blocks × (dispatch + combine) × (forward + backward), each 7/8 of the routed bytes leaving
    assert top1 == 4 * 4 * tokens * MOE.width * 2 * 7 // 8


def test_data_parallel_bytes_follow_zero_stages():
    """ZeRO (Rajbhandari et al. 2020, section 7): stages 1 and 2 move what DDP's all-reduce moves
    (a reduce-scatter and an all-gather), stage 3 half as much again (the weights gathered twice)."""
    def data(sharding, micro_batches=1):
        layout = ParallelLayout(devices=8, sharding=sharding)
        return _total(step_traffic(CONFIG, 1, layout, micro_batches=micro_batches), "data")

    assert data("ddp") == data("zero1") == data("zero2")
    # ZeRO-3: gathers for forward and backward of the blocks; the root (embedding, head) once
    outer = (CONFIG.embedding_parameter_count + CONFIG.unembedding_parameter_count + CONFIG.norm_parameter_count)
    assert data("zero3") == pytest.approx(1.5 * data("ddp") - 0.5 * outer * 2 * 2 * 7 / 8, abs=1)
    assert data("zero1", 4) == data("zero1") and data("zero2", 4) > data("zero2")


def test_hsdp_crosses_nodes_with_a_node_shard():
    layout = ParallelLayout(devices=32, sharding="hsdp")
    rows = [row for row in step_traffic(CONFIG, 1, layout) if row.axis == "data"]
    across = [row for row in rows if row.collective == "all-reduce"]
    inside = [row for row in rows if row.collective != "all-reduce"]
    assert all(row.group == 4 and not row.within_node for row in across)
    assert all(row.group == 8 and row.within_node for row in inside)


def test_placement_decides_what_crosses_nodes():
    rows = step_traffic(CONFIG, 1, ParallelLayout(devices=64, tensor=8, pipeline=4))
    by_axis = {row.axis: row.within_node for row in rows}
    assert by_axis == {"tensor": True, "pipeline": False, "data": False}
    assert traffic_by_axis(rows).keys() == {"tensor", "pipeline", "data"}
    everything = step_traffic(MOE, 1, ParallelLayout(devices=64, tensor=2, pipeline=2, context=2, expert=8))
    order = list(dict.fromkeys(row.axis for row in everything))
    assert order == list(AXES)
    assert all(isinstance(row, AxisTraffic) and isinstance(row.bytes, int) for row in rows)


def test_bad_input_is_named():
    with pytest.raises(AccountingError, match="recompute"):
        step_traffic(CONFIG, 1, ParallelLayout(), recompute="some")
    with pytest.raises(AccountingError, match="tensor 3"):
        step_traffic(CONFIG, 1, ParallelLayout(devices=3, tensor=3))
