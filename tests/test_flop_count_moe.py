"""A Hugging Face Mixtral training step counts the same FLOPs whichever experts implementation runs it.

``transformers`` 5 runs a mixture of experts on ``torch._grouped_mm`` where it can (its default); the
same model with ``batched_mm`` experts runs every expert product as ``bmm``, which ``FlopCounterMode``
counts itself, and with ``eager`` experts as one ``mm`` per expert and projection. Both are the truth
for the grouped step: without a formula for ``_grouped_mm`` the expert matmuls vanished from the count
(a third of this step's FLOPs were counted).
"""

import pytest
import torch

from accounting import TransformerConfig
from accounting.flop_count import count_flops
from tests.support.hf_models import hf_config, random_token_ids, training_step, transformers

pytestmark = pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="this torch has no torch._grouped_mm")

BATCH, TOKENS = 2, 64  # 2 sequences of 64 tokens, through 2 layers of 4 experts, top-2 routing


def _mixtral_step_count(experts_implementation: str):
    config = hf_config("mixtral", positions=TOKENS)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the same weights, so the router sends the same tokens to the same experts
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="eager", experts_implementation=experts_implementation)
    assert model.config._experts_implementation == experts_implementation  # the setting took
    tokens = random_token_ids(TransformerConfig.from_hf(config.to_dict(), sequence_length=TOKENS), BATCH)
    return count_flops(lambda: training_step(model, tokens))


def test_grouped_mm_experts_count_as_batched_mm_and_eager_experts():
    grouped, batched, eager = (_mixtral_step_count(name) for name in ("grouped_mm", "batched_mm", "eager"))
    assert "aten._grouped_mm" in grouped.by_operator  # the experts ran as grouped matmuls, not a fallback
    assert "aten._grouped_mm" not in batched.by_operator and "aten._grouped_mm" not in eager.by_operator
    assert grouped.total == batched.total == eager.total
