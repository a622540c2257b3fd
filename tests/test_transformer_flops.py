"""transformer_flops against FlopCounterMode on a real GPT, and the training-time napkin maths.

FlopCounterMode counts matmul-class ops (mm, addmm, bmm, …) with the same 2-per-multiply-add
convention; the model runs on ``device="meta"``, so GPT-2-sized configs cost nothing.
Both sides leave out the same work: embedding lookups, norms, GELU, softmax, adds and the loss.
The defaults are checked the same way: without a batch size one sequence is counted; without devices
or MFU the training time is one device at half its peak (FLOPs over devices × peak × MFU).
Today's families (grouped-query attention, SwiGLU, RMSNorm, Q/K/V biases, routed experts) are checked
on the models Hugging Face ``transformers`` itself builds (tests/support/hf_models.py), on the CPU.
"""

import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from accounting import AccountingError, AccountingTypeError, TransformerConfig, mfu
from accounting.model.flops import training_flops, training_time, transformer_flops
from tests.support.hf_models import FAMILIES, build_hf_model, hf_config, model_from_config_json, random_token_ids
from tests.support.published_configs import PUBLISHED
from tests.support.strategies_training import ReferenceGPT, language_model_loss, random_tokens, transformer_configs

# Each example builds and runs a model under FlopCounterMode (~0.15 s): fewer than the profile's.
FLOP_COUNTER_EXAMPLES = settings(max_examples=20)

GPT2_SMALL = TransformerConfig(layers=12, width=768, heads=12, sequence_length=1024, vocabulary=50257)


def _meta_model_and_batch(config: TransformerConfig, batch_size: int):
    with torch.device("meta"):
        model = ReferenceGPT(config)
        tokens = random_tokens(config, batch_size, device="meta")
        targets = random_tokens(config, batch_size, device="meta")
    return model, tokens, targets


def counted_step(config: TransformerConfig, batch_size: int):
    """FlopCounterMode's (forward, backward) counters for one step of the reference GPT on meta."""
    model, tokens, targets = _meta_model_and_batch(config, batch_size)
    forward = FlopCounterMode(display=False)
    with forward:
        loss = language_model_loss(model(tokens), targets)
    backward = FlopCounterMode(display=False)
    with backward:
        loss.backward()
    return forward, backward


def counted_training_step(config: TransformerConfig, batch_size: int) -> FlopCounterMode:
    """One counter over forward and backward, so that it can attribute both to modules."""
    model, tokens, targets = _meta_model_and_batch(config, batch_size)
    counter = FlopCounterMode(display=False)
    with counter:
        language_model_loss(model(tokens), targets).backward()
    return counter


def unembedding_flops(counter: FlopCounterMode) -> int:
    counts = counter.get_flop_counts()
    (name,) = [name for name in counts if name.endswith(".unembedding")]
    return sum(counts[name].values())


@FLOP_COUNTER_EXAMPLES
@given(config=transformer_configs(max_layers=3, max_width=64, max_length=32, max_vocabulary=128), batch_size=st.integers(1, 3))
@example(config=GPT2_SMALL, batch_size=1)
@example(config=TransformerConfig(layers=1, width=1, heads=1, sequence_length=1, vocabulary=2), batch_size=1)
def test_forward_and_backward_equal_flop_counter(config, batch_size):
    forward, backward = counted_step(config, batch_size)
    predicted = transformer_flops(config, batch_size)
    assert predicted.forward == forward.get_total_flops()
    assert predicted.backward == backward.get_total_flops()
    assert predicted.training == forward.get_total_flops() + backward.get_total_flops()


@FLOP_COUNTER_EXAMPLES
@given(config=transformer_configs(max_layers=2, max_width=32, max_length=16), batch_size=st.integers(1, 2))
@example(config=GPT2_SMALL, batch_size=1)
def test_excluding_embeddings_drops_the_unembedding(config, batch_size):
    forward, _ = counted_step(config, batch_size)
    training = counted_training_step(config, batch_size)
    predicted = transformer_flops(config, batch_size, embeddings=False)
    assert predicted.forward == forward.get_total_flops() - unembedding_flops(forward)
    assert predicted.training == training.get_total_flops() - unembedding_flops(training)


@given(config=transformer_configs(), batch_size=st.integers(1, 4), embeddings=st.booleans())
def test_per_token_training_flops_are_6n_plus_attention(config, batch_size, embeddings):
    """PaLM's 6N + 12·L·H·Q·T, with N read off torch's own module list."""
    with torch.device("meta"):
        model = ReferenceGPT(config)
    matrices = [m.weight for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not embeddings:
        matrices = [w for w in matrices if w is not model.unembedding.weight]
    n = sum(w.numel() for w in matrices)
    flops = transformer_flops(config, batch_size, embeddings=embeddings)
    attention = 12 * config.layers * config.heads * config.head_width * config.sequence_length
    assert flops.matmul_parameter_count == n
    assert flops.training_per_token == 6 * n + attention
    assert flops.forward_per_token * flops.tokens == flops.forward


@given(parameters=st.integers(1, 64), tokens=st.integers(1, 64))
def test_training_flops_equal_flop_counter_on_a_linear_model(parameters, tokens):
    """6 × tokens × parameters is exact for a bias-free linear model whose input needs a gradient."""
    x = torch.empty(tokens, parameters, device="meta", requires_grad=True)
    w = torch.empty(parameters, 1, device="meta", requires_grad=True)
    counter = FlopCounterMode(display=False)
    with counter:
        (x @ w).sum().backward()
    assert training_flops(parameters, tokens) == counter.get_total_flops()


@given(
    flops=st.floats(1e15, 1e26),
    peak=st.floats(1e12, 5e15),
    utilisation=st.floats(0.01, 1.0),
    devices=st.integers(1, 100_000),
)
def test_training_time_inverts_mfu(flops, peak, utilisation, devices):
    time = training_time(flops, peak, utilisation, devices)
    assert mfu(flops, time.seconds, peak * devices) == pytest.approx(utilisation, rel=1e-12)
    assert time.days * 24 == pytest.approx(time.hours, rel=1e-12)


def test_lecture_example_70b_on_15t_tokens_on_1024_h100s():
    """The lecture: 70B parameters, 15T tokens, 1024 H100s (bf16 dense 989.4 TFLOP/s), MFU 0.5 → about 144 days."""
    time = training_time(training_flops(70e9, 15e12), peak_flops_per_second=989.4e12, mfu=0.5, devices=1024)
    assert 140 < time.days < 150
    assert str(time).endswith(f"{time.days:.1f} days")


# ---- bad input ----------------------------------------------------------------------


def config_with(**changes):
    sizes = dict(layers=2, width=64, heads=4, sequence_length=16, vocabulary=100) | changes
    return lambda: TransformerConfig(**sizes)


@pytest.mark.parametrize(
    "call, error, message",
    [
        pytest.param(config_with(layers=0), AccountingError, r"^layers must be a positive integer, got 0", id="zero-layers"),
        pytest.param(config_with(width=-8), AccountingError, r"^width must be a non-negative integer, got -8", id="negative-width"),
        pytest.param(config_with(heads=5), AccountingError, r"^heads=5 does not divide width=64", id="heads-not-dividing"),
        pytest.param(config_with(sequence_length=2.0), AccountingTypeError, r"^sequence_length must be a non-negative integer, got 2.0", id="float-length"),
        pytest.param(config_with(vocabulary=True), AccountingTypeError, r"^vocabulary must be a non-negative integer, got True", id="bool-vocabulary"),
        pytest.param(config_with(ffn_width=0), AccountingError, r"^ffn_width must be a positive integer, got 0", id="zero-ffn"),
        pytest.param(config_with(bias="yes"), AccountingTypeError, r"^bias must be True or False, got 'yes'", id="bias-not-bool"),
        pytest.param(lambda: transformer_flops(GPT2_SMALL, batch_size=0), AccountingError, r"^batch_size must be a positive integer, got 0", id="zero-batch"),
        pytest.param(lambda: transformer_flops({"layers": 2}), AccountingTypeError, r"^config must be a TransformerConfig, got dict", id="dict-config"),
        pytest.param(lambda: training_time(1e20, 989e12, mfu=1.5), AccountingError, r"^mfu is a fraction of peak and cannot exceed 1, got 1.5", id="mfu-above-one"),
        pytest.param(lambda: training_time(1e20, 0.0), AccountingError, r"^peak_flops_per_second must be positive, got 0.0", id="zero-peak"),
        pytest.param(lambda: training_time(1e20, 989e12, devices=0), AccountingError, r"^devices must be a positive integer, got 0", id="zero-devices"),
        pytest.param(lambda: training_time(math.nan, 989e12), AccountingError, r"^flops must be finite, got nan", id="nan-flops"),
        pytest.param(lambda: training_flops(70.5e0, 10), AccountingError, r"^parameters must be a whole number, got 70.5", id="fractional-parameters"),
        pytest.param(lambda: training_flops(70e9, -1), AccountingError, r"^tokens must be a non-negative integer, got -1", id="negative-tokens"),
    ],
)
def test_bad_input_raises_clear_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---- defaults, the summary's wording, and bad arguments named with their value -----------------------------

TINY = TransformerConfig(layers=1, width=16, heads=2, sequence_length=8, vocabulary=32)


def test_without_a_batch_size_one_sequence_is_counted():
    forward, backward = counted_step(TINY, 1)
    flops = transformer_flops(TINY)
    assert (flops.forward, flops.backward) == (forward.get_total_flops(), backward.get_total_flops())
    assert flops.tokens == TINY.sequence_length


def test_without_devices_or_mfu_the_time_is_one_device_at_half_its_peak():
    flops, peak = 6.3e24, 989.4e12
    assert training_time(flops, peak).seconds == pytest.approx(flops / (1 * peak * 0.5), rel=1e-12)


@pytest.mark.parametrize("devices, words", [(1, " on 1 device of "), (2, " on 2 devices of "), (8, " on 8 devices of ")])
def test_the_summary_says_device_or_devices_as_the_count_needs(devices, words):
    assert words in str(training_time(6.3e24, 989.4e12, devices=devices))


@pytest.mark.parametrize("call, error, message", [
    pytest.param(lambda: training_time(1e21, 1e15, mfu=0), AccountingError, "mfu must be positive, got 0", id="mfu-0"),
    pytest.param(lambda: training_time(1e21, 1e15, mfu=-0.3), AccountingError, "mfu must be positive, got -0.3",
                 id="mfu-negative"),
    pytest.param(lambda: training_flops(-7e9, 1e12), AccountingError, "parameters must be non-negative, got -7000000000.0",
                 id="negative-float-parameters"),
    pytest.param(lambda: training_flops(7e9, -1e12), AccountingError, "tokens must be non-negative, got -1000000000000.0",
                 id="negative-float-tokens"),
    pytest.param(lambda: transformer_flops(TINY, embeddings="yes"), AccountingTypeError,
                 "embeddings must be True or False, got 'yes'", id="embeddings-not-bool"),
])
def test_bad_arguments_are_named_with_their_value(call, error, message):
    with pytest.raises(error) as caught:
        call()
    assert str(caught.value) == message


# ---- today's families: transformers' own models -------------------------------------------
# Each case builds the family's model in transformers (random weights, CPU, eager attention and eager
# experts) and counts one training step (forward, the next-token loss, backward) with FlopCounterMode.

FAMILY_CASES = [
    pytest.param(family, sizes, id=f"{family}-{name}")
    for family in FAMILIES
    for name, sizes in [
        ("grouped", dict(heads=4, kv_heads=2)),
        ("wide-heads-tied",
         dict(heads=4, kv_heads=1, head_width=24, tied_embeddings=True, experts=3, experts_per_token=3)),
    ]
]


def counted_hf_step(model, token_ids):
    """FlopCounterMode's (forward, backward) counters for one training step of a transformers model."""
    forward = FlopCounterMode(display=False)
    with forward:
        loss = model(input_ids=token_ids, labels=token_ids).loss
    backward = FlopCounterMode(display=False)
    with backward:
        loss.backward()
    return forward, backward


@pytest.mark.parametrize("family, sizes", FAMILY_CASES)
def test_forward_and_backward_equal_flop_counter_on_transformers_models(family, sizes):
    model, config = build_hf_model(family, width=32, positions=16, sequence_length=8, **sizes)
    forward, backward = counted_hf_step(model, random_token_ids(config, batch_size=2))
    predicted = transformer_flops(config, batch_size=2)
    assert predicted.forward == forward.get_total_flops()
    assert predicted.backward == backward.get_total_flops()


@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=4)
@given(heads=st.integers(1, 3), kv_groups=st.integers(1, 2), head_pairs=st.integers(1, 4), ffn=st.integers(1, 24),
       length=st.integers(1, 6), batch_size=st.integers(1, 2), tied=st.booleans(), experts=st.integers(2, 3),
       data=st.data())
def test_training_flops_equal_flop_counter_on_drawn_transformers_models(
    family, heads, kv_groups, head_pairs, ffn, length, batch_size, tied, experts, data
):
    sizes = dict(heads=heads * kv_groups, kv_heads=heads, width=heads * kv_groups * 2, ffn_width=ffn, positions=6,
                 sequence_length=length, tied_embeddings=tied, vocabulary=20,
                 experts=experts, experts_per_token=data.draw(st.integers(1, experts)))
    if family != "gpt2":
        sizes["head_width"] = 2 * head_pairs
    model, config = build_hf_model(family, **sizes)
    forward, backward = counted_hf_step(model, random_token_ids(config, batch_size))
    assert transformer_flops(config, batch_size).training == forward.get_total_flops() + backward.get_total_flops()


def test_experts_are_counted_for_the_tokens_routed_to_them_however_few_experts_get_them():
    """A router of zeros ties every expert: top-2 then sends every token to the same two experts, the rest get none."""
    model, config = build_hf_model("mixtral", experts=4, experts_per_token=2, width=32, positions=16, sequence_length=8)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.gate.weight.zero_()
    forward, backward = counted_hf_step(model, random_token_ids(config, batch_size=2))
    assert transformer_flops(config, batch_size=2).training == forward.get_total_flops() + backward.get_total_flops()


def test_batched_experts_do_the_same_matmul_work_as_the_eager_loop():
    """transformers' batched_mm experts gather each (token, expert) pair's weights and run one bmm:
    tokens · k rows too."""
    model, config = build_hf_model("mixtral", experts=4, experts_per_token=2, width=32, positions=16, sequence_length=8)
    model.set_experts_implementation("batched_mm")
    forward, backward = counted_hf_step(model, random_token_ids(config, batch_size=2))
    assert transformer_flops(config, batch_size=2).training == forward.get_total_flops() + backward.get_total_flops()


@pytest.mark.parametrize(
    "family, settings_that_change_no_count",
    [
        pytest.param("mistral", dict(sliding_window=3), id="mistral-sliding-window"),
        pytest.param("qwen2", dict(use_sliding_window=True, sliding_window=3, max_window_layers=1), id="qwen2-sliding-window"),
        pytest.param("gpt2", dict(reorder_and_upcast_attn=True, scale_attn_by_inverse_layer_idx=True), id="gpt2-upcast-attention"),
        pytest.param("llama", dict(pretraining_tp=2, hidden_act="gelu"), id="llama-tp-slices"),
    ],
)
def test_keys_from_hf_calls_harmless_change_no_counted_flop(family, settings_that_change_no_count):
    """Eager attention computes every score of a sliding window, masked or not: the full count stands."""
    changed = hf_config(family, width=32, positions=8).to_dict() | settings_that_change_no_count
    config = TransformerConfig.from_hf(changed)
    model = model_from_config_json(changed, device="cpu")
    forward, backward = counted_hf_step(model, random_token_ids(config, batch_size=1))
    assert transformer_flops(config).training == forward.get_total_flops() + backward.get_total_flops()


@pytest.mark.parametrize("family", FAMILIES)
def test_half_causal_counts_half_of_the_attention_flop_counter_sees(family):
    """Eager attention's score and mixing matmuls are its only bmm's: "half" takes half of those off."""
    head_width = None if family == "gpt2" else 12
    model, config = build_hf_model(family, width=32, positions=16, sequence_length=8, head_width=head_width)
    forward, backward = counted_hf_step(model, random_token_ids(config, batch_size=2))
    total = forward.get_total_flops() + backward.get_total_flops()
    attention = sum(counter.get_flop_counts()["Global"].get(torch.ops.aten.bmm, 0) for counter in (forward, backward))
    full, half = transformer_flops(config, 2), transformer_flops(config, 2, causal="half")
    assert attention > 0
    assert full.training == total
    assert half.training == total - attention // 2
    assert (half.causal, full.causal) == ("half", "full")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("causal, attention_factor", [("full", 12), ("half", 6)])
def test_per_token_flops_are_6n_plus_attention_with_n_the_weights_a_token_meets(family, causal, attention_factor):
    """N read off the real model: every matrix of the blocks (only experts_per_token / experts of the experts)
    and the unembedding."""
    model, config = build_hf_model(family, device="meta", experts=4, experts_per_token=2,
                                   **({} if family == "gpt2" else {"head_width": 12}))
    layers = model.transformer.h if family == "gpt2" else model.model.layers
    experts = [p for layer in layers for name, p in layer.named_parameters() if ".experts." in f".{name}"]
    dense = [p for p in layers.parameters() if p.dim() >= 2 and all(p is not e for e in experts)]
    n = sum(p.numel() for p in dense) + sum(p.numel() for p in experts) * 2 // 4 + model.lm_head.weight.numel()
    flops = transformer_flops(config, batch_size=3, causal=causal)
    attention = attention_factor * config.layers * config.heads * config.head_width * config.sequence_length
    assert flops.matmul_parameter_count == n
    assert flops.training_per_token == 6 * n + attention


def test_an_unknown_causal_convention_is_an_error_naming_it():
    with pytest.raises(AccountingError, match=r"^causal must be one of 'full', 'half', got 'masked'$"):
        transformer_flops(TINY, causal="masked")


def test_a_published_full_size_model_on_meta_equals_flop_counter():
    """Qwen2-0.5B as published (14 query heads on 2 key/value heads, tied embeddings, Q/K/V biases) at full width:
    transformers runs dense families on meta tensors, so full sizes cost nothing but Python (~2 s)."""
    config_json = PUBLISHED["qwen2-0.5b"][0]
    config = TransformerConfig.from_hf(config_json, sequence_length=64)
    token_ids = torch.zeros(2, 64, dtype=torch.long, device="meta")
    forward, backward = counted_hf_step(model_from_config_json(config_json), token_ids)
    predicted = transformer_flops(config, batch_size=2)
    assert (predicted.forward, predicted.backward) == (forward.get_total_flops(), backward.get_total_flops())
