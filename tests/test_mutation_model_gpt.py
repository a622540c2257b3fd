"""The reference GPT of the model-MFU benchmark (``accounting.model_mfu.gpt``): what mutation testing found
unchecked (issue 15).

The FLOP and memory tests see only shapes; these check the numbers. The truth is torch's own
pre-norm transformer layer, ``nn.TransformerEncoderLayer(norm_first=True, activation="gelu")``
with a causal mask, given the same weights: GPT-2's block is exactly that layer.
"""

import pytest
import torch
from torch import nn

from accounting import TransformerConfig
from accounting.errors import AccountingTypeError
from accounting.model_mfu.gpt import GPT, language_model_loss

CONFIG = TransformerConfig(layers=2, width=32, heads=4, sequence_length=12, vocabulary=40)


def _torch_layer(block, config) -> nn.TransformerEncoderLayer:
    """torch's layer carrying ``block``'s weights (Q, K and V stacked in that order, as both lay them out)."""
    layer = nn.TransformerEncoderLayer(config.width, config.heads, config.ffn_width, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True, bias=config.bias, dtype=torch.float64)
    pairs = [(layer.self_attn.in_proj_weight, block.qkv.weight), (layer.self_attn.out_proj.weight, block.projection.weight),
             (layer.linear1.weight, block.up.weight), (layer.linear2.weight, block.down.weight),
             (layer.norm1.weight, block.attention_norm.weight), (layer.norm2.weight, block.mlp_norm.weight)]
    if config.bias:
        pairs += [(layer.self_attn.in_proj_bias, block.qkv.bias), (layer.self_attn.out_proj.bias, block.projection.bias),
                  (layer.linear1.bias, block.up.bias), (layer.linear2.bias, block.down.bias),
                  (layer.norm1.bias, block.attention_norm.bias), (layer.norm2.bias, block.mlp_norm.bias)]
    with torch.no_grad():
        for theirs, ours in pairs:
            theirs.copy_(ours)
    return layer.eval()


def _reference_logits(model: GPT, tokens) -> torch.Tensor:
    config = model.config
    length = tokens.shape[-1]
    mask = nn.Transformer.generate_square_subsequent_mask(length, dtype=torch.float64)
    x = model.token_embedding(tokens)
    if config.learned_positions:
        x = x + model.position_embedding[:length]
    for block in model.blocks:
        x = _torch_layer(block, config)(x, src_mask=mask, is_causal=True)
    x = nn.functional.layer_norm(x, (config.width,), model.final_norm.weight, model.final_norm.bias)
    return x @ model.unembedding.weight.T


@pytest.mark.parametrize("config", [CONFIG, TransformerConfig(layers=1, width=24, heads=3, sequence_length=8,
                                                              vocabulary=30, bias=False, learned_positions=False,
                                                              tied_embeddings=False)], ids=["gpt2", "no-bias"])
@pytest.mark.parametrize("length", [None, 5], ids=["full", "shorter"])
def test_the_logits_are_those_of_torchs_own_pre_norm_causal_layers(config, length):
    torch.manual_seed(0)
    model = GPT(config).double().eval()
    with torch.no_grad():  # LayerNorm gains and biases away from 1 and 0, so that a swapped one shows
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.3)
    tokens = torch.randint(0, config.vocabulary, (3, length or config.sequence_length))
    with torch.no_grad():
        ours, theirs = model(tokens), _reference_logits(model, tokens)
    torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-9)


def test_a_model_without_biases_or_positions_has_none_and_counts_as_its_config_says():
    config = TransformerConfig(layers=2, width=16, heads=2, sequence_length=8, vocabulary=20, bias=False,
                               learned_positions=False)
    model = GPT(config)
    assert model.position_embedding is None
    assert all(getattr(module, "bias", None) is None for module in model.modules()
               if isinstance(module, (nn.Linear, nn.LayerNorm)))
    assert sum(p.numel() for p in model.parameters()) == config.parameter_count


def test_the_causal_mask_is_not_saved_with_the_weights():
    model = GPT(CONFIG)
    assert set(model.state_dict()) == {name for name, _ in model.named_parameters(remove_duplicate=False)}


def test_position_embeddings_start_at_gpt2s_scale():
    """GPT-2 (and nanoGPT) draw position embeddings from N(0, 0.02²); 64 × 64 draws pin the std to about 1 %."""
    torch.manual_seed(0)
    std = GPT(TransformerConfig(layers=1, width=64, heads=4, sequence_length=64, vocabulary=8)).position_embedding.std()
    assert std.item() == pytest.approx(0.02, rel=0.05)


@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: GPT("gpt2"), "config must be a TransformerConfig, got str", id="config"),
    pytest.param(lambda: GPT(CONFIG, recompute="yes"), "recompute must be True or False, got 'yes'", id="recompute"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(AccountingTypeError) as caught:
        call()
    assert str(caught.value) == message


def test_the_loss_is_torchs_cross_entropy_over_every_position():
    torch.manual_seed(0)
    logits, targets = torch.randn(2, 3, 5, dtype=torch.bfloat16), torch.randint(0, 5, (2, 3))
    expected = nn.functional.cross_entropy(logits.float().reshape(6, 5), targets.reshape(6))
    assert language_model_loss(logits, targets).dtype == torch.float32
    torch.testing.assert_close(language_model_loss(logits, targets), expected)
