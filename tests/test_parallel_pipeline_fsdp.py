"""FSDP2 under torch's pipelining: what a stage holds unsharded across its micro-batches.

Truth: torch's own ``fully_shard`` on a fake process group of 2 ranks (one process), driven through the hooks
``torch.distributed.pipelining``'s stage calls before every micro-batch's backward
(``set_is_last_backward(False)``, ``set_reshard_after_backward(False)``, ``set_requires_gradient_sync(False)``),
two micro-batches of a pipeline stage of a small Hugging Face Llama; then the bytes of every unsharded parameter
still allocated and of every unsharded accumulated gradient, read from FSDP2's own parameter state, against what
:func:`accounting.model.parallel.memory.layout_memory` holds gathered at the start of a backward.
"""

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from accounting.model.parallel.layout import ParallelLayout
from accounting.model.parallel.memory import accumulating_chunks, layout_memory
from tests.support.hf_models import build_hf_model, random_token_ids
from tests.test_parallel_states import fake_world, pipeline_stage

LAYERS, MICRO_BATCH, DATA = 4, 2, 2
POLICIES = {  # torchtitan's mixed precision (bf16 compute, fp32 reductions) and none
    "bf16-mixed": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
    "fp32": MixedPrecisionPolicy(),
}


def sharded_stage(stage: int, precision: str, reshard_after_forward: bool):
    """Stage ``stage`` of 2 (its blocks; the embedding on the first, the final norm and head on the last) under
    ``fully_shard`` per block and on the stage's root, as torchtitan wraps a pipeline stage; and its forward."""
    keep = range(stage * LAYERS // 2, (stage + 1) * LAYERS // 2)
    model = pipeline_stage("llama", list(keep), stage == 0, stage == 1, layers=LAYERS)
    root = model
    if stage == 0:
        root = model.model  # the stage ends at its last block's hidden states
        root.norm = torch.nn.Identity()
    mesh = init_device_mesh("cpu", (DATA,))
    settings = {"mesh": mesh, "mp_policy": POLICIES[precision], "reshard_after_forward": reshard_after_forward}
    for layer in root.modules():
        if type(layer).__name__ == "LlamaDecoderLayer":
            fully_shard(layer, **settings)
    fully_shard(root, **settings)
    root.to_empty(device="cpu")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in root.parameters():
            local = parameter.to_local()
            local.copy_(torch.randn(local.shape, generator=generator) * 0.02)
    return root


def forward(root, stage: int, config, index: int) -> torch.Tensor:
    if stage == 0:
        return root(input_ids=random_token_ids(config, MICRO_BATCH, seed=index)).last_hidden_state
    return root(inputs_embeds=torch.randn(MICRO_BATCH, config.sequence_length, config.width)).logits


def backward(root, output: torch.Tensor) -> None:
    """A micro-batch's backward under the hooks the pipeline stage sets before each one."""
    root.set_is_last_backward(False)
    root.set_reshard_after_backward(False)
    root.set_requires_gradient_sync(False)
    output.backward(torch.ones_like(output))


def unsharded_bytes(root) -> tuple[int, int, int]:
    """(unsharded parameters still allocated, unsharded accumulated gradients, sharded gradients) in bytes."""
    weights = gradients = sharded = 0
    for module in root.modules():
        if not isinstance(module, FSDPModule):
            continue
        for group in module._get_fsdp_state()._fsdp_param_groups:
            for parameter in group.fsdp_params:
                weights += parameter._unsharded_param.untyped_storage().nbytes()
                accumulated = parameter.unsharded_accumulated_grad
                if accumulated is None:  # without a reduce dtype the gradient stays on the unsharded parameter
                    accumulated = parameter._unsharded_param.grad
                gradients += 0 if accumulated is None else accumulated.untyped_storage().nbytes()
                grad = parameter.sharded_param.grad
                sharded += 0 if grad is None else grad.to_local().untyped_storage().nbytes()
    return weights, gradients, sharded


@pytest.mark.parametrize("precision", sorted(POLICIES))
@pytest.mark.parametrize("stage", [0, 1])
def test_a_pipeline_stage_keeps_its_weights_and_gradients_unsharded(stage, precision):
    """At the end of the second micro-batch's forward (the start of its backward), torchtitan's way: FSDP not
    resharding after forward when PP is on."""
    _, config = build_hf_model("llama", device="meta", layers=LAYERS)
    layout = ParallelLayout(devices=2 * DATA, pipeline=2, sharding="fsdp")
    rank = layout_memory(config, MICRO_BATCH, layout, micro_batches=2, precision=precision).ranks[stage]
    with fake_world(0, DATA):
        root = sharded_stage(stage, precision, reshard_after_forward=False)
        backward(root, forward(root, stage, config, 0))
        output = forward(root, stage, config, 1)
        weights, gradients, sharded = unsharded_bytes(root)
        backward(root, output)
    assert sharded == 0  # reduce-scattered only at the last micro-batch: no sharded gradient in the backwards
    assert rank.gathered_phases["forward end"] == weights + gradients
    assert rank.phases["forward end"] == rank.activations + rank.transient + weights + gradients


@pytest.mark.parametrize("reshard_after_forward", [False, True])
def test_after_a_backward_the_stage_is_whole_either_way(reshard_after_forward):
    """FSDP's own default (resharding after forward) still leaves every unit unsharded after a backward under
    the pipeline's hooks: what a next micro-batch's backward starts from."""
    _, config = build_hf_model("llama", device="meta", layers=LAYERS)
    layout = ParallelLayout(devices=2 * DATA, pipeline=2, sharding="fsdp")
    rank = layout_memory(config, MICRO_BATCH, layout, micro_batches=2).ranks[0]
    with fake_world(0, DATA):
        root = sharded_stage(0, "bf16-mixed", reshard_after_forward)
        for index in range(2):
            backward(root, forward(root, 0, config, index))
        weights, gradients, _ = unsharded_bytes(root)
    assert rank.gathered_phases["forward end"] == weights + gradients


def test_the_per_block_gathering_remains_an_option():
    _, config = build_hf_model("llama", device="meta", layers=LAYERS)
    layout = ParallelLayout(devices=2 * DATA, pipeline=2, sharding="fsdp")
    kept = layout_memory(config, MICRO_BATCH, layout, micro_batches=2).ranks[0]
    per_block = layout_memory(config, MICRO_BATCH, layout, micro_batches=2, stage_unsharded=False).ranks[0]
    assert per_block.gathered_phases["forward end"] < kept.gathered_phases["forward end"]
    assert per_block.accumulating and not kept.accumulating


def _torch_chunks_with_gradients_at_most_alive(pipeline, chunks, micro_batches, rank):
    """The rank's chunks that have run a backward and not yet their reduction (``REDUCE_GRAD``) at any moment
    its forwards alive are the most, in torch's own ``ScheduleInterleaved1F1B`` actions lowered with
    ``_add_reduce_grad``."""
    from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B, _add_reduce_grad, _ComputationType

    schedule = ScheduleInterleaved1F1B.__new__(ScheduleInterleaved1F1B)
    schedule.pp_group_size, schedule.n_local_stages, schedule._n_microbatches = pipeline, chunks, micro_batches
    schedule.number_of_rounds = max(1, micro_batches // pipeline)
    schedule.microbatches_per_round = micro_batches // schedule.number_of_rounds
    actions = _add_reduce_grad(schedule._calculate_single_rank_operations(rank), micro_batches)
    alive, moments, gradients = 0, [], set()
    for action in actions:
        chunk = action.stage_index // pipeline
        if action.computation_type == _ComputationType.FORWARD:
            alive += 1
        elif action.computation_type == _ComputationType.FULL_BACKWARD:
            moments.append((alive, frozenset(gradients)))  # at the start of this backward
            alive -= 1
            gradients.add(chunk)
        elif action.computation_type == _ComputationType.REDUCE_GRAD:
            gradients.discard(chunk)
    most = max(count for count, _ in moments)
    return set().union(*(held for count, held in moments if count == most))


@pytest.mark.parametrize("pipeline, chunks, rounds", [(2, 2, 1), (4, 2, 1), (4, 2, 2), (4, 3, 1), (8, 2, 1),
                                                      (4, 2, 3)])
def test_an_interleaved_rank_accumulates_the_chunks_torch_has_not_reduced(pipeline, chunks, rounds):
    layout = ParallelLayout(devices=pipeline, pipeline=pipeline, schedule="interleaved-1f1b", virtual_stages=chunks)
    for rank in range(pipeline):
        torch_chunks = _torch_chunks_with_gradients_at_most_alive(pipeline, chunks, rounds * pipeline, rank)
        # a rank whose most alive precede its first gradients (no forward after its first backward) is bounded
        assert torch_chunks <= set(accumulating_chunks(layout, rounds * pipeline)), f"rank {rank}"
    assert torch_chunks == set(accumulating_chunks(layout, rounds * pipeline))  # the last rank, the loss's
