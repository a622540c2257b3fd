"""The Llama family of the training-step model, the sizes that fit a device, and the compiled step.

- Numbers: the package's Llama-family GPT (either attention) gives the logits of Hugging Face's own
  ``LlamaForCausalLM`` carrying the same weights (float64), and its parameters are Hugging Face's, one for one.
- Counts: parameters equal ``config.parameter_count`` and the meta step's FLOPs (SDPA's math kernel on ``meta``)
  equal ``transformer_flops`` over Llama-family configs drawn by hypothesis.
- Fit: ``size_that_fits`` against ``transformer_training_memory`` computed here, batch by batch.
- Compile: a compiler that fails is reported, not raised; one that works times the same step.
"""

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from accounting import AccountingError, TransformerConfig, count_flops, transformer_flops, transformer_training_memory
from accounting.model_mfu import (
    GPT,
    attention_kernel,
    build_training_step,
    hardware_flops,
    language_model_loss,
    measure_compiled_step,
    measure_training_step,
    model_size,
    size_that_fits,
)
from accounting.model_mfu import layers
from accounting.model.attention_kernels import AttentionDevice
from accounting.timing import MEMORY_FRACTION

LLAMA = model_size("tiny-llama", layers=2, seq=12).config


@st.composite
def llama_configs(draw):
    kv_heads = draw(st.integers(1, 3))
    heads = kv_heads * draw(st.integers(1, 3))
    head_width = 2 * draw(st.integers(1, 6))  # rotary pairs the two halves of a head
    return TransformerConfig(
        layers=draw(st.integers(1, 2)), width=draw(st.integers(2, 24)), heads=heads, kv_heads=kv_heads,
        head_width=head_width, sequence_length=draw(st.integers(2, 12)), vocabulary=draw(st.integers(2, 40)),
        ffn_width=draw(st.integers(1, 40)), mlp=draw(st.sampled_from(["swiglu", "gelu"])), norm="rmsnorm",
        bias=draw(st.booleans()), qkv_bias=draw(st.booleans()), tied_embeddings=draw(st.booleans()),
        learned_positions=draw(st.booleans()))


@settings(max_examples=10)
@given(config=llama_configs(), batch_size=st.integers(1, 2))
def test_llama_family_parameters_and_flops_are_the_configs(config, batch_size):
    assume(config.head_width > 1 and config.sequence_length > 1)  # a 1-wide matmul is a mul to torch
    with torch.device("meta"):
        model = GPT(config)
        tokens = torch.randint(0, config.vocabulary, (batch_size, config.sequence_length))
    assert sum(p.numel() for p in model.parameters()) == config.parameter_count
    counted = count_flops(lambda: language_model_loss(model(tokens), tokens).backward()).total
    assert counted == transformer_flops(config, batch_size).training


def test_tinyllama_is_the_shape_hugging_face_builds():
    """1,100,048,384 parameters: Hugging Face's count of TinyLlama-1.1B's config (recorded beside the H200 run)."""
    transformers = pytest.importorskip("transformers")
    size = model_size("tinyllama-1.1b")
    config = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                                      num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                                      max_position_embeddings=2048, tie_word_embeddings=False)
    with torch.device("meta"):
        theirs = transformers.LlamaForCausalLM(config)
        ours = GPT(size.config)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    assert size.config.parameter_count == 1_100_048_384 and size.batch_size == 4


def _hugging_face_copy(model: GPT, attention: str):
    transformers = pytest.importorskip("transformers")
    c = model.config
    config = transformers.LlamaConfig(
        hidden_size=c.width, intermediate_size=c.ffn_width, num_hidden_layers=c.layers, num_attention_heads=c.heads,
        num_key_value_heads=c.kv_heads, head_dim=c.head_width, vocab_size=c.vocabulary,
        max_position_embeddings=c.sequence_length, rms_norm_eps=1e-5, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, attn_implementation=attention)
    theirs = transformers.LlamaForCausalLM(config).double().eval()
    pairs = [(theirs.model.embed_tokens.weight, model.token_embedding.weight), (theirs.lm_head.weight, model.unembedding.weight),
             (theirs.model.norm.weight, model.final_norm.weight)]
    for layer, block in zip(theirs.model.layers, model.blocks):
        attention, mlp = layer.self_attn, layer.mlp
        pairs += [(attention.q_proj.weight, block.q.weight), (attention.k_proj.weight, block.k.weight),
                  (attention.v_proj.weight, block.v.weight), (attention.o_proj.weight, block.projection.weight),
                  (mlp.gate_proj.weight, block.gate.weight), (mlp.up_proj.weight, block.up.weight),
                  (mlp.down_proj.weight, block.down.weight), (layer.input_layernorm.weight, block.attention_norm.weight),
                  (layer.post_attention_layernorm.weight, block.mlp_norm.weight)]
    assert len(pairs) == len(list(model.parameters()))  # every parameter has its counterpart
    with torch.no_grad():
        for mine, source in pairs:
            mine.copy_(source)
    return theirs


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_the_logits_are_hugging_faces_llama(attention):
    torch.manual_seed(0)
    model = GPT(LLAMA, attention=attention).double().eval()
    with torch.no_grad():  # norm gains away from 1, so that a swapped one shows
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.3)
    theirs = _hugging_face_copy(model, attention)  # eager: both take the softmax in fp32, even in float64
    tokens = torch.randint(0, LLAMA.vocabulary, (2, LLAMA.sequence_length))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), theirs(tokens).logits, rtol=1e-9, atol=1e-9)


# ---- the size that fits -----------------------------------------------------------------------------------------


HOPPER = AttentionDevice("cuda", (9, 0))  # an H100 or H200, named from this machine without one


def _peak(size, precision, batch, attention="sdpa"):
    return transformer_training_memory(size.config, batch, "adamw", precision, attention=attention, device=HOPPER).peak


def test_the_largest_batch_that_fits_is_chosen_and_the_fallback_after_it():
    size, fallback = model_size("tinyllama-1.1b"), model_size("gpt2-small")
    need = {batch: _peak(size, "bf16", batch) for batch in (1, 2, 3, 4)}
    free = int(need[3] / MEMORY_FRACTION) + 1  # batch 3 fits, 4 does not
    chosen, why = size_that_fits(size, ["bf16"], "cuda", free_bytes=free, fallback=fallback, attention_device=HOPPER)
    assert chosen.batch_size == 3 and chosen.config == size.config and why.startswith("tinyllama-1.1b at batch 3 of 4")
    chosen, why = size_that_fits(size, ["bf16"], "cuda", free_bytes=int(need[4] / MEMORY_FRACTION) + 1,
                                 attention_device=HOPPER)
    assert chosen == size and why.startswith("tinyllama-1.1b at batch 4: fits")
    free = int(need[1] / MEMORY_FRACTION) - 1  # not even batch 1
    chosen, why = size_that_fits(size, ["bf16"], "cuda", free_bytes=free, fallback=fallback, attention_device=HOPPER)
    assert chosen.name == "gpt2-small" and _peak(chosen, "bf16", chosen.batch_size) <= MEMORY_FRACTION * free
    assert why.startswith("gpt2-small at batch") and "in place of tinyllama-1.1b" in why
    assert size_that_fits(size, ["bf16"], "cuda", free_bytes=free, attention_device=HOPPER)[0] is None


def test_every_policy_must_fit_and_fp32_grouped_attention_on_cuda_is_predicted_with_its_math_kernel():
    """fp32 with grouped-query attention runs SDPA's math kernel on a Hopper GPU (recorded on an H200: 2.17 x the
    fused prediction), so its fit is decided by the math kernel's memory, on the CPU by the CPU's flash kernel's."""
    size = model_size("tinyllama-1.1b")
    math = _peak(size, "fp32", 4, attention="sdpa-math")
    assert _peak(size, "fp32", 4) == math > 2 * _peak(size, "fp32", 4, attention="sdpa-flash")
    free = int(math / MEMORY_FRACTION) - 1
    chosen, _ = size_that_fits(size, ["bf16", "fp32"], "cuda", free_bytes=free, attention_device=HOPPER)
    assert chosen.batch_size == 3  # bf16 alone would take 4
    assert size_that_fits(size, ["bf16"], "cuda", free_bytes=free, attention_device=HOPPER)[0].batch_size == 4
    assert size_that_fits(size, ["bf16", "fp32"], "cpu", free_bytes=free)[0].batch_size == 4  # the CPU's flash


# ---- the compiled step ------------------------------------------------------------------------------------------


def test_a_compiler_that_fails_is_reported_beside_the_eager_figure_not_raised():
    step = build_training_step(model_size("tiny-llama", layers=1, seq=8), precision="fp32")
    eager = measure_training_step(step, peak_flops=1e12, warmup=1, repeats=1)

    def broken(model):
        def forward(tokens):
            raise RuntimeError("no C++ compiler found\nsecond line")
        return forward

    compiled, why = measure_compiled_step(step, eager, repeats=1, compiler=broken)
    assert compiled is None and why == "torch.compile failed: RuntimeError: no C++ compiler found"


def test_a_compiler_that_works_times_the_same_step():
    step = build_training_step(model_size("tiny-llama", layers=1, seq=8), precision="fp32")
    eager = measure_training_step(step, peak_flops=1e12, warmup=1, repeats=1)
    calls = []

    def identity(model):
        def forward(tokens):
            calls.append(tokens.shape)
            return model(tokens)
        return forward

    compiled, why = measure_compiled_step(step, eager, repeats=2, compiler=identity)
    assert why is None and compiled.compiled and not eager.compiled
    assert len(calls) >= 2 + 2 and set(calls) == {step.tokens.shape}  # warm-up and timed calls through the compiler
    assert dataclasses.replace(compiled, median_s=eager.median_s, iqr_s=eager.iqr_s, repeats=eager.repeats,
                               compiled=False) == eager


def test_an_unknown_attention_is_named():
    with pytest.raises(AccountingError) as caught:
        build_training_step(model_size("tiny", layers=1, seq=8), attention="flash")
    assert str(caught.value) == "attention must be one of 'sdpa', 'eager', got 'flash'"


def test_where_sdpa_takes_no_enable_gqa_the_heads_are_repeated_first(monkeypatch):
    """Same logits and the same FLOP count as enable_gqa, and SDPA sees as many key/value heads as query heads."""
    torch.manual_seed(0)
    model = GPT(LLAMA).double().eval()
    tokens = torch.randint(0, LLAMA.vocabulary, (2, LLAMA.sequence_length))
    with torch.no_grad():
        grouped = model(tokens)
    seen = []
    real = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(layers, "SDPA_TAKES_GQA", False)
    monkeypatch.setattr(layers.F, "scaled_dot_product_attention",
                        lambda q, k, v, **options: seen.append((q.shape[1], k.shape[1], options)) or real(q, k, v, **options))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), grouped, rtol=1e-12, atol=1e-12)
    assert seen == [(LLAMA.heads, LLAMA.heads, {"is_causal": True})] * LLAMA.layers


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_recomputing_llama_step_counts_its_hardware_flops(attention):
    """Checkpointing recomputes each block's forward (SDPA's fused forward included) but its last matmul; a fused
    kernel's backward computes QKᵀ again: FlopCounterMode's count of the real CPU step is ``hardware_flops``."""
    step = build_training_step(model_size("tiny-llama", layers=2, seq=16), precision="fp32", recompute=True,
                               attention=attention)
    count = count_flops(step)
    kernel = attention_kernel(count, attention)
    assert count.total == hardware_flops(step.size.config, 4, True, kernel) > transformer_flops(step.size.config, 4).training


def test_the_fit_prediction_replays_every_recorded_h200_llama_step_within_5_percent():
    """Hugging Face's TinyLlama-shaped step on the recorded H200 (tests/data/hosts/nvidia-h200): the prediction the
    fit decisions use (SDPA's kernel on a cc 9.0 GPU: math for fp32 with grouped-query attention, fused otherwise)
    is within 5 % of every measured peak, the fp32 one (2.17 x the fused prediction) included."""
    recorded = json.loads((Path(__file__).parent / "data" / "hosts" / "nvidia-h200" / "hf-llama-step-peaks.json")
                          .read_text())
    config = TransformerConfig.from_hf(recorded["fields"], sequence_length=recorded["seq"])
    assert config == model_size("tinyllama-1.1b").config
    for row in recorded["rows"]:
        if row["recompute"] != "none":
            continue
        memory = transformer_training_memory(config, recorded["batch"], "adamw", row["precision"], attention="sdpa",
                                             device=HOPPER)
        assert 0.95 <= row["measured_peak"] / memory.peak <= 1.05, (row["precision"], memory.attention_kernel)
        assert (memory.attention_kernel.name == "math") is (row["precision"] == "fp32")
