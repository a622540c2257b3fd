"""A step's memory per rank under a parallel layout.

Truths: the single-device model (an all-1 layout must be ``transformer_training_memory`` exactly, part for
part and peak, under every sharding); torch's own tensor-parallel plan and ``fully_shard`` on a fake process
group for the unit FSDP gathers on a rank (the tensor-parallel share of a block or of the root, whole).
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed.device_mesh import init_device_mesh

from accounting import AccountingError, TransformerConfig
from accounting.model.parallel.layout import ParallelLayout
from accounting.model.parallel.memory import layout_memory
from accounting.model.training_memory import transformer_training_memory
from tests.support.hf_models import build_hf_model
from tests.support.published_configs import PUBLISHED
from tests.support.strategies_training import realistic_configs, transformer_configs
from tests.test_parallel_states import fake_world, local_elements, tensor_parallel

SHARDINGS = ("none", "ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp")


def assert_single_device(config, micro_batch, sharding, devices, *, precision="bf16-mixed", optimizer="adamw",
                         attention="sdpa", recompute="none"):
    layout = ParallelLayout(devices=devices, sharding=sharding)
    memory = layout_memory(config, micro_batch, layout, precision=precision, optimizer=optimizer,
                           attention=attention, recompute=recompute)
    (rank,) = memory.ranks
    # HSDP is ZeRO-3 over the ranks of a node (8 here), replicated across nodes
    truth = transformer_training_memory(config, micro_batch, optimizer, precision, attention=attention,
                                        recompute=recompute, sharding=layout.sharding_stage,
                                        devices=layout.sharding_degree)
    assert (rank.parameters, rank.gradients, rank.optimizer, rank.gathered) == \
        (truth.parameters, truth.gradients, truth.master_weights + truth.optimizer_state, truth.gathered)
    assert (rank.activations, rank.transient, rank.update, rank.backward) == \
        (truth.activations, truth.transient, truth.update, truth.backward)
    assert rank.gathered_phases == truth.gathered_phases and rank.phases == truth.phases
    assert rank.buffer_bytes == 0 and rank.peak == truth.peak and memory.most_loaded is rank


@settings(max_examples=40, deadline=None)
@given(st.one_of(transformer_configs(), realistic_configs()), st.integers(1, 3), st.sampled_from(SHARDINGS),
       st.integers(1, 12), st.sampled_from(["fp32", "bf16-mixed", "bf16-autocast", "bf16"]),
       st.sampled_from(["adamw", "sgd", "rmsprop"]), st.sampled_from(["eager", "sdpa"]),
       st.sampled_from(["none", "full"]))
def test_an_all_one_layout_is_the_single_device_step(config, micro_batch, sharding, devices, precision, optimizer,
                                                     attention, recompute):
    assert_single_device(config, micro_batch, sharding, devices, precision=precision, optimizer=optimizer,
                         attention=attention, recompute=recompute)


@pytest.mark.parametrize("name", ["gpt2", "llama-3-8b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "phi-3-mini"])
@pytest.mark.parametrize("sharding, devices, recompute", [("ddp", 1, "none"), ("zero2", 8, "full"),
                                                          ("zero3", 16, "none"), ("fsdp", 8, "full"),
                                                          ("hsdp", 24, "full")])
def test_an_all_one_layout_of_a_published_model_is_the_single_device_step(name, sharding, devices, recompute):
    config_json, _ = PUBLISHED[name]
    config = TransformerConfig.from_hf(config_json, sequence_length=512, mtp=name == "deepseek-v3")
    assert_single_device(config, 1, sharding, devices, recompute=recompute)


def test_fsdp_gathers_by_phase_the_tensor_parallel_shares_of_its_units():
    # Llama on TP 2 x FSDP 2, bf16 weights and gradients gathered, the units as torch's plan leaves them on a rank
    # before fully_shard (measured per phase on 2 gloo ranks in test_parallel_measured.py): at the start of
    # backward the root (embedding, final norm, head); in a block's backward the root, the block, the next block
    # and the block's gradients but its attention's and input norm's; nothing in the update.
    _, config = build_hf_model("llama", device="meta")
    layout = ParallelLayout(devices=4, tensor=2, sharding="fsdp")
    (rank,) = layout_memory(config, 1, layout, attention="eager").ranks
    with fake_world(0, 4):
        model, _ = build_hf_model("llama", device="meta")
        tensor_parallel(model, init_device_mesh("cpu", (2, 2), mesh_dim_names=("data", "tensor"))["tensor"])
        blocks = [local_elements(layer) for layer in model.model.layers]
        root = local_elements(model) - sum(blocks)
        attention = local_elements(model.model.layers[0].self_attn) + \
            local_elements(model.model.layers[0].input_layernorm)
    block = max(blocks)
    assert rank.gathered_phases == {"forward end": 2 * root,
                                    "block backward": 2 * (root + 2 * block) + 2 * (block - attention)}
    assert "update" not in rank.gathered_phases
    assert rank.gathered == rank.gathered_phases[rank.peak_phase]


def test_the_most_loaded_rank_is_named_and_every_stage_has_one():
    config = TransformerConfig(layers=8, width=256, heads=8, kv_heads=2, sequence_length=256, vocabulary=32000,
                               ffn_width=688, mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                               learned_positions=False)
    layout = ParallelLayout(devices=16, tensor=2, pipeline=4, sharding="zero1")
    memory = layout_memory(config, 1, layout, micro_batches=8)
    assert [rank.stage for rank in memory.ranks] == [0, 1, 2, 3]
    assert memory.most_loaded.peak == max(rank.peak for rank in memory.ranks)


def test_accumulated_gradients_stay_beside_the_activations():
    # With more than one micro-batch a step, the second forward runs with the first's gradients alive.
    config = TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=128)
    layout = ParallelLayout(devices=2)
    (one,) = layout_memory(config, 2, layout, micro_batches=1).ranks
    (two,) = layout_memory(config, 2, layout, micro_batches=2).ranks
    assert two.phases["forward end"] == one.phases["forward end"] + one.gradients


def test_bad_micro_batches_are_named():
    config = TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=128)
    with pytest.raises(AccountingError, match=r"^micro_batches must be a positive integer, got 0"):
        layout_memory(config, 1, ParallelLayout(), micro_batches=0)
