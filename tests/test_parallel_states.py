"""Parameters and model states per rank under tensor, pipeline, expert and data parallelism.

Truths: the single-device count (an all-1 layout must be today's ``training_memory`` exactly); torch's own
tensor-parallel plan (``parallelize_module`` with torchtitan's Llama plan), ``fully_shard`` (FSDP2) and
expert sharding (``distribute_module`` with ``Shard(0)``, torchtitan's ``ExpertParallel``) applied to Hugging
Face models on a fake process group of N ranks in this one process, each rank's ``to_local()`` elements
summed; the modules each pipeline stage keeps when a Hugging Face model's layers are split; Megatron-LM's
weight-and-optimizer estimate re-derived in closed form and against a published parameter count.
"""

import contextlib
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module
from torch.testing._internal.distributed.fake_pg import FakeStore

from accounting import AccountingError, AccountingTypeError, TransformerConfig
from accounting.model.parallel.layout import ParallelLayout
from accounting.model.parallel.states import (
    PARTS,
    megatron_parameters_on_most_loaded_shard,
    megatron_weight_and_optimizer_bytes,
    stage_parameters,
    stage_states,
)
from accounting.model.training_memory import training_memory
from tests.support.hf_models import build_hf_model
from tests.support.published_configs import PUBLISHED
from tests.support.strategies_training import transformer_configs

SHARDINGS = ("none", "ddp", "zero1", "zero2", "zero3", "fsdp")


def published(name: str, **changes) -> TransformerConfig:
    config_json, _ = PUBLISHED[name]
    return TransformerConfig.from_hf(config_json, sequence_length=1024, **changes)


# ---- an all-1 layout is one device ---------------------------------------------------------------


def assert_single_device(config, sharding, devices, precision="bf16-mixed", optimizer="adamw"):
    layout = ParallelLayout(devices=devices, sharding=sharding)
    (rank,) = stage_parameters(config, layout)
    assert rank.total == config.parameter_count
    assert sum(rank.parts.values()) == rank.total and set(rank.parts) == set(PARTS)
    (states,) = stage_states(config, layout, precision, optimizer)
    truth = training_memory(config, optimizer, precision, sharding=sharding, devices=devices)
    assert (states.parameters, states.gradients, states.master_weights, states.optimizer_state) == \
        (truth.parameters, truth.gradients, truth.master_weights, truth.optimizer_state)


@settings(max_examples=40, deadline=None)
@given(transformer_configs(), st.sampled_from(SHARDINGS), st.integers(1, 12),
       st.sampled_from(["fp32", "bf16-mixed", "bf16"]), st.sampled_from(["adamw", "sgd", "adagrad"]))
def test_an_all_one_layout_holds_what_one_device_holds(config, sharding, devices, precision, optimizer):
    assert_single_device(config, sharding, devices, precision, optimizer)


@pytest.mark.parametrize("name", ["gpt2", "llama-3-8b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "phi-3-mini",
                                  "gpt-oss-20b", "olmo-2-7b", "gemma-2-9b"])
@pytest.mark.parametrize("sharding, devices", [("ddp", 1), ("zero1", 8), ("zero3", 24)])
def test_an_all_one_layout_of_a_published_model_holds_what_one_device_holds(name, sharding, devices):
    config_json, _ = PUBLISHED[name]
    config = TransformerConfig.from_hf(config_json, sequence_length=1024, mtp=name == "deepseek-v3")
    assert_single_device(config, sharding, devices)


# ---- torch's own tensor parallelism, FSDP and expert sharding on a fake process group ----------------------


@contextlib.contextmanager
def fake_world(rank: int, size: int):
    """A world of ``size`` ranks in this process, seen from ``rank`` (collectives do nothing)."""
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def local_elements(model: torch.nn.Module) -> int:
    """Elements this rank holds: each parameter's local shard (a plain tensor is whole)."""
    return sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in model.parameters())


def shard_experts(experts: torch.nn.Module, mesh) -> None:
    """torchtitan's ``ExpertParallel``: every expert tensor divided along its first (expert) dimension."""
    def partition(name, module, device_mesh):
        for key, parameter in list(module.named_parameters(recurse=False)):
            module.register_parameter(key, torch.nn.Parameter(distribute_tensor(parameter, device_mesh, [Shard(0)])))
    distribute_module(experts, mesh, partition)


def tensor_parallel(model: torch.nn.Module, mesh) -> None:
    """torchtitan's Llama plan on a Hugging Face model: vocabulary-parallel embedding and head, column-parallel
    Q/K/V (fused: by the whole matrix), gate and up, row-parallel outputs, norms as sequence parallelism; latent
    attention as Megatron splits it (the latents' down-projections replicated); routed experts by ``Shard(0)``."""
    parallelize_module(model, mesh, {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "model.norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    })
    for layer in model.model.layers:
        plan = {"input_layernorm": SequenceParallel(), "post_attention_layernorm": SequenceParallel(),
                "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1))}
        names = {name for name, _ in layer.named_modules()}
        for name in ("q_proj", "k_proj", "v_proj", "qkv_proj", "q_b_proj", "kv_b_proj"):
            if f"self_attn.{name}" in names:
                plan[f"self_attn.{name}"] = ColwiseParallel()
        for mlp in ("mlp", "mlp.shared_experts"):
            for name in ("gate_proj", "up_proj", "gate_up_proj"):
                if f"{mlp}.{name}" in names:
                    plan[f"{mlp}.{name}"] = ColwiseParallel()
            if f"{mlp}.down_proj" in names:
                plan[f"{mlp}.down_proj"] = RowwiseParallel(output_layouts=Shard(1))
        parallelize_module(layer, mesh, plan)
        if "mlp.experts" in names:
            shard_experts(layer.mlp.experts, mesh)


def fully_sharded(model: torch.nn.Module, mesh) -> None:
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


@pytest.mark.parametrize("family, tensor, data, sharding", [
    ("llama", 2, 1, "ddp"),
    ("llama", 2, 2, "fsdp"),
    ("llama", 1, 4, "fsdp"),
    ("phi3", 2, 1, "ddp"),           # fused qkv_proj and gate_up_proj
    ("phi3", 2, 2, "fsdp"),
    ("deepseek_v3", 2, 1, "ddp"),    # latent attention, a dense first block, shared and routed experts
    ("qwen3_moe", 2, 1, "ddp"),      # Q/K norms, a dense first block, experts over the tensor ranks
])
def test_each_rank_holds_what_torch_s_own_plans_leave_on_it(family, tensor, data, sharding):
    size = tensor * data
    _, config = build_hf_model(family, device="meta")
    expert = tensor if config.experts > 1 else 1
    layout = ParallelLayout(devices=size, tensor=tensor, expert=expert, sharding=sharding)
    (predicted,) = stage_states(config, layout, "fp32")  # 4 bytes an element
    (elements,) = stage_parameters(config, layout)
    for rank in range(size):
        with fake_world(rank, size):
            model, _ = build_hf_model(family, device="meta")
            mesh = init_device_mesh("cpu", (data, tensor), mesh_dim_names=("data", "tensor"))
            if tensor > 1:
                tensor_parallel(model, mesh["tensor"])
            assert local_elements(model) == elements.total, f"rank {rank}"
            if data > 1:
                fully_sharded(model, mesh["data"])
            assert 4 * local_elements(model) == predicted.parameters, f"rank {rank}"


def test_experts_are_divided_over_their_own_ranks_and_sharded_over_the_rest():
    # Mixtral on 4 ranks: experts 2 ways (EP), each shard FSDP-sharded over the other 2 (EDP); the rest over all 4.
    _, config = build_hf_model("mixtral", device="meta")
    layout = ParallelLayout(devices=4, expert=2, sharding="fsdp")
    assert (layout.sharding_degree, layout.expert_sharding_degree) == (4, 2)
    (predicted,) = stage_states(config, layout, "fp32")
    for rank in range(4):
        with fake_world(rank, 4):
            model, _ = build_hf_model("mixtral", device="meta")
            world = init_device_mesh("cpu", (4,), mesh_dim_names=("data",))
            experts_mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("expert_data", "expert"))
            for layer in model.model.layers:
                shard_experts(layer.mlp.experts, experts_mesh["expert"])
                fully_shard(layer.mlp.experts, mesh=experts_mesh["expert_data"])
            fully_sharded(model, world["data"])
            assert 4 * local_elements(model) == predicted.parameters, f"rank {rank}"


def test_expert_tensor_parallelism_splits_each_expert_s_matrices():
    # Mixtral's experts (E, 2f, h) gate-and-up and (E, h, f) down on 4 ranks: 2 ways by expert, each expert's
    # matrices 2 ways by its width (torchtitan's expert tensor parallelism: column gate/up, row down)
    _, config = build_hf_model("mixtral", device="meta")
    layout = ParallelLayout(devices=4, expert=2, expert_tensor=2)
    (predicted,) = stage_parameters(config, layout)
    placements = {"gate_up_proj": [Shard(0), Shard(1)], "down_proj": [Shard(0), Shard(2)]}
    for rank in range(4):
        with fake_world(rank, 4):
            model, _ = build_hf_model("mixtral", device="meta")
            mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("expert", "expert_tensor"))
            for layer in model.model.layers:
                experts = layer.mlp.experts
                for name, placement in placements.items():
                    whole = getattr(experts, name)
                    experts.register_parameter(name, torch.nn.Parameter(distribute_tensor(whole, mesh, placement)))
            assert local_elements(model) == predicted.total, f"rank {rank}"


def test_gpt_oss_s_biases_and_sinks_follow_their_heads_and_experts():
    # Q/K/V biases split with their features, the output bias and router whole, sinks by head, each expert whole
    # with its biases on one of the 2 ranks
    _, config = build_hf_model("gpt_oss", device="meta")
    layout = ParallelLayout(devices=2, tensor=2, expert=2)
    (predicted,) = stage_parameters(config, layout)
    for rank in range(2):
        with fake_world(rank, 2):
            model, _ = build_hf_model("gpt_oss", device="meta")
            mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("tensor",))
            tensor_parallel(model, mesh)
            for layer in model.model.layers:
                attention = layer.self_attn
                attention.sinks = torch.nn.Parameter(distribute_tensor(attention.sinks, mesh, [Shard(0)]))
            assert local_elements(model) == predicted.total, f"rank {rank}"


def test_hybrid_sharding_divides_the_states_within_a_node_only():
    # HSDP on 8 ranks of 4 a node: fully_shard over a (replicate, shard) mesh of 2 × 4
    _, config = build_hf_model("llama", device="meta")
    layout = ParallelLayout(devices=8, sharding="hsdp", node_size=4)
    (predicted,) = stage_states(config, layout, "fp32")
    for rank in (0, 5):
        with fake_world(rank, 8):
            model, _ = build_hf_model("llama", device="meta")
            fully_sharded(model, init_device_mesh("cpu", (2, 4), mesh_dim_names=("replicate", "shard")))
            assert 4 * local_elements(model) == predicted.parameters, f"rank {rank}"


def pipeline_stage(family: str, keep: list[int], first: bool, last: bool, **sizes) -> torch.nn.Module:
    """The modules a pipeline stage keeps of a Hugging Face model, as torchtitan cuts one: its layers, the
    embedding on the first stage, the final norm and the head on the last."""
    model, _ = build_hf_model(family, device="meta", **sizes)
    model.model.layers = torch.nn.ModuleList(layer for index, layer in enumerate(model.model.layers) if index in keep)
    if not first:
        model.model.embed_tokens = None
    if not last:
        model.model.norm = None
        model.lm_head = None
    return model


@pytest.mark.parametrize("family, layers, pipeline, virtual, tied", [
    ("llama", 4, 2, 1, False),
    ("llama", 5, 2, 1, False),    # uneven: the last stage one block longer
    ("llama", 4, 2, 1, True),     # the last stage keeps its own copy of the tied embedding
    ("llama", 8, 2, 2, False),    # interleaved: rank p holds chunks p and p + P
    ("deepseek_v3", 3, 3, 1, False),
])
def test_each_pipeline_stage_holds_the_modules_it_keeps(family, layers, pipeline, virtual, tied):
    sizes = {"layers": layers, "tied_embeddings": tied}
    _, config = build_hf_model(family, device="meta", **sizes)
    schedule = "interleaved-1f1b" if virtual > 1 else "1f1b"
    layout = ParallelLayout(devices=pipeline, pipeline=pipeline, schedule=schedule, virtual_stages=virtual)
    lengths = [len(chunk) for chunk in np.array_split(np.arange(layers), pipeline * virtual)][::-1]
    chunks = np.split(np.arange(layers), np.cumsum(lengths)[:-1])  # the last chunks one block longer
    stages = stage_parameters(config, layout)
    for stage in range(pipeline):
        keep = [int(index) for chunk in chunks[stage::pipeline] for index in chunk]
        module = pipeline_stage(family, keep, stage == 0, stage == pipeline - 1, **sizes)
        assert stages[stage].layers == tuple(keep)
        assert stages[stage].total == sum(p.numel() for p in module.parameters()), f"stage {stage}"


def test_deepseek_s_dense_first_block_and_mtp_modules_fall_on_the_ends():
    config = published("deepseek-v3", mtp=True)
    layout = ParallelLayout(devices=64, tensor=1, pipeline=8, expert=8)
    stages = stage_parameters(config, layout)
    assert stages[0].layers[:config.dense_layers] == tuple(range(config.dense_layers))
    assert [stage.parts["mtp"] > 0 for stage in stages] == [False] * 7 + [True]
    # every parameter is on some stage; the last keeps a copy of the embedding for its MTP module
    held = sum(stage.dense + stage.experts * layout.expert for stage in stages)
    assert held == config.parameter_count + config.embedding_parameter_count


def test_key_value_heads_fewer_than_tensor_ranks_are_replicated():
    config = published("llama-3-8b")  # 8 key/value heads
    eight, sixteen = (stage_parameters(config, ParallelLayout(devices=t, tensor=t))[0] for t in (8, 16))
    h, d = config.width, config.head_width
    per_block = (eight.parts["blocks"] - 2 * sixteen.parts["blocks"]) // config.layers
    # from 8 to 16 ranks Q, O, gate, up and down halve; K and V stay one whole head each, norms whole
    norms = config.norms_per_layer * config.norm_parameter_count
    assert per_block == -norms - 2 * h * d


# ---- Megatron-LM's estimate ----------------------------------------------------------------------


def test_megatron_s_count_of_llama_3_8b_on_one_device_is_its_published_count():
    config_json, published_count = PUBLISHED["llama-3-8b"]
    config = TransformerConfig.from_hf(config_json)
    assert megatron_parameters_on_most_loaded_shard(config, ParallelLayout(), vocabulary_multiple=1) == published_count


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen3-30b-a3b"])
def test_megatron_s_count_of_a_mixture_of_experts_leaves_out_its_routers_and_qk_norms(name):
    # the Hub's total for the checkpoint, less each expert block's h × E router and Qwen3's per-head Q/K norms
    config_json, published_count = PUBLISHED[name]
    config = TransformerConfig.from_hf(config_json)
    routers = config.sparse_layers * config.width * config.experts
    qk_norms = config.layers * 2 * config.head_width if config.qk_norm == "head" else 0
    shard = megatron_parameters_on_most_loaded_shard(config, ParallelLayout(), vocabulary_multiple=1)
    assert shard == published_count - routers - qk_norms


def test_megatron_s_gpt3_175b_bytes_rederived_in_closed_form():
    # 96 layers of 12h² + 4h (Q, K, V, O; two 4h MLP matrices; two LayerNorms of weight and bias), the final
    # LayerNorm, 50257 tokens padded to 128 × 8 = 1024's multiple, 51200; TP 8, PP 16, DP 8.
    gpt3 = TransformerConfig(layers=96, width=12288, heads=96, sequence_length=2048, vocabulary=50257)
    h, layout = 12288, ParallelLayout(devices=1024, tensor=8, pipeline=16)
    shard = Fraction(96 * (12 * h * h + 4 * h) + 2 * h, 16 * 8) + Fraction(h * 51200, 8)
    assert megatron_parameters_on_most_loaded_shard(gpt3, layout) == shard
    assert megatron_weight_and_optimizer_bytes(gpt3, layout) == round(shard * Fraction(15, 2))
    assert megatron_weight_and_optimizer_bytes(gpt3, layout, distributed_optimizer=False) == round(shard * 18)


@pytest.mark.parametrize("tensor, pipeline, data", [(1, 1, 4), (2, 1, 2), (4, 2, 2), (8, 4, 2), (2, 4, 1)])
def test_megatron_s_bytes_differ_from_ours_by_the_replicated_norms_and_the_fp32_gradients(tensor, pipeline, data):
    # a dense RMSNorm model without biases whose vocabulary divides 128·T (no padding) and blocks divide P
    config = TransformerConfig(layers=8, width=256, heads=8, kv_heads=8, sequence_length=64, vocabulary=128 * 8 * 3,
                               ffn_width=512, mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                               learned_positions=False)
    layout = ParallelLayout(devices=tensor * pipeline * data, tensor=tensor, pipeline=pipeline, sharding="zero1")
    first = stage_parameters(config, layout)[0]
    norm = config.norm_parameter_count
    block_norms = len(first.layers) * config.norms_per_layer * norm
    # ours keeps norms whole (Megatron divides them by T); Megatron puts the final norm's 1/P on every stage
    difference = Fraction(block_norms * (tensor - 1), tensor)
    difference += Fraction(norm * (tensor - 1), tensor) if pipeline == 1 else -Fraction(norm, pipeline * tensor)
    megatron = megatron_parameters_on_most_loaded_shard(config, layout)
    assert first.total - megatron == difference
    # bytes: Megatron's 2 + 4 (fp32 gradients) + 12/DP; ours under ZeRO-1 with bf16-mixed 2 + 2 + 12/DP
    assert megatron_weight_and_optimizer_bytes(config, layout) == round(megatron * (6 + Fraction(12, data)))
    # (Megatron's vocabulary-parallel embedding keeps its gradient's V/T rows; torch's would be whole)
    (ours,) = stage_states(config, layout, "bf16-mixed", "adamw", embedding_gradients="vocabulary-parallel")[:1]
    assert first.total % data == 0 and ours.total == 4 * first.total + 12 * first.total // data


# ---- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("call, error, message", [
    (lambda c: stage_parameters("llama", ParallelLayout()), AccountingTypeError,
     r"^config must be a TransformerConfig, got str"),
    (lambda c: stage_parameters(c, (2, 2)), AccountingTypeError, r"^layout must be a ParallelLayout, got tuple"),
    (lambda c: stage_parameters(c, ParallelLayout(devices=3, tensor=3)), AccountingError,
     r"^tensor 3 must divide the 4 query heads"),
    (lambda c: stage_parameters(c, ParallelLayout(devices=4, pipeline=4)), AccountingError,
     r"^pipeline × virtual_stages = 4 stages is more than the 2 blocks"),
    (lambda c: megatron_weight_and_optimizer_bytes(c, ParallelLayout(), distributed_optimizer=1),
     AccountingTypeError, r"^distributed_optimizer must be True or False, got 1"),
])
def test_bad_input_is_named(call, error, message):
    config = TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=100)
    with pytest.raises(error, match=message):
        call(config)


def test_an_expert_width_the_expert_tensor_ranks_cannot_divide_is_named():
    config = TransformerConfig(layers=2, width=16, heads=2, sequence_length=8, vocabulary=32, ffn_width=6, experts=4)
    with pytest.raises(AccountingError, match=r"^expert_tensor 4 must divide the expert MLP width 6"):
        stage_parameters(config, ParallelLayout(devices=4, expert_tensor=4))


def test_tensor_parallel_embedding_gradient_is_whole_on_every_rank_as_torch_makes_it():
    # torchtitan's Llama plan (the measured runs' own, tests/support/parallel_steps.py) on 4 ranks, a step under
    # loss_parallel: the vocabulary-parallel embedding (RowwiseParallel, Replicate -> Shard(1)) holds V/4 rows
    # but its gradient comes back Replicate (torch's embedding backward), the whole V x h on every rank; every
    # other gradient is its parameter's shard. Megatron's convention keeps V/T rows.
    import torch.nn.functional as F
    from torch.distributed.tensor.parallel import loss_parallel

    from tests.support.parallel_steps import LLAMA, _tensor_parallel_plan

    tensor, sizes = 4, {**LLAMA, "kv_heads": 4}
    _, config = build_hf_model("llama", **sizes)
    layout = ParallelLayout(devices=tensor, tensor=tensor)
    (torch_like,) = stage_states(config, layout, "fp32")
    (megatron,) = stage_states(config, layout, "fp32", embedding_gradients="vocabulary-parallel")
    with fake_world(0, tensor):
        model, _ = build_hf_model("llama", **sizes)
        parallelize_module(model, init_device_mesh("cpu", (tensor,)), _tensor_parallel_plan(model))
        tokens = torch.randint(0, config.vocabulary, (2, config.sequence_length))
        with loss_parallel():
            logits = model(input_ids=tokens).logits
            F.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
        gradients = sum(p.grad.to_local().numel() if isinstance(p.grad, DTensor) else p.grad.numel()
                        for p in model.parameters())
        assert model.model.embed_tokens.weight.grad.placements == (Replicate(),)
    assert 4 * gradients == torch_like.gradients > megatron.gradients
    assert 4 * local_elements(model) == megatron.gradients == torch_like.parameters
