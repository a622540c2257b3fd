"""Training memory with the attention kernel SDPA really runs: the H200's Llama steps replayed, and real CPU steps.

Truths: the peaks ``torch.cuda.max_memory_allocated`` read over whole AdamW steps of Hugging Face's
Llama at TinyLlama-1.1B's shape on an H200 (``tests/data/hosts/nvidia-h200/hf-llama-step-peaks.json``),
fp32 among them, where SDPA ran its math kernel (2.17 x the fused-kernel prediction); and, on the CPU,
the live-tensor tracker around the second of two AdamW steps of a small Hugging Face Llama
(:func:`studies.training_memory_families.measure_model`) with SDPA's math kernel forced and with the
CPU's own choice (its flash kernel).
"""

import contextlib
import dataclasses
import json
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

# transformers is a test extra (the truth these tests check against).
transformers = pytest.importorskip("transformers")

from accounting import TransformerConfig, transformer_training_memory
from accounting.model import attention_kernels
from accounting.model.attention_kernels import AttentionDevice
from studies.training_memory_families import hf_model, measure_model

H200_STEPS = Path(__file__).parent / "data" / "hosts" / "nvidia-h200" / "hf-llama-step-peaks.json"
H200 = AttentionDevice("cuda", (9, 0))
TOLERANCE = 0.05
# HF's loss shifts the labels into a new int64 (batch, sequence) tensor and keeps one scalar: bytes the
# formula leaves out (measured: exactly these, for every kernel and precision below).
LABEL_COPY = 8
SCALARS = 8


def _recorded_steps():
    record = json.loads(H200_STEPS.read_text())
    config = TransformerConfig.from_hf(record["fields"], sequence_length=record["seq"])
    return record, config


def _settings(row) -> dict:
    return {} if "default" in row["optimizer"] else dict(row["optimizer"])


@pytest.mark.parametrize("row", json.loads(H200_STEPS.read_text())["rows"],
                         ids=lambda row: f"{row['precision']}-{row['recompute']}-{'-'.join(row['optimizer'])}")
def test_the_h200_llama_steps_within_five_percent(row):
    """Every recorded step, fp32 (math kernel) and bf16 (fused), within 5 % of the measured peak."""
    record, config = _recorded_steps()
    predicted = transformer_training_memory(
        config, record["batch"], "adamw", row["precision"], attention="sdpa", recompute=row["recompute"],
        device=H200, **_settings(row),
    )
    assert predicted.persistent + predicted.gradients == pytest.approx(
        row["parts"]["persistent"] + row["parts"]["gradients"], rel=1e-3)
    assert row["measured_peak"] == pytest.approx(predicted.peak, rel=TOLERANCE)
    expected_kernel = "sdpa-math" if row["precision"] == "fp32" else "sdpa-cudnn"
    assert predicted.attention == expected_kernel


def test_the_fp32_step_was_mispredicted_by_a_fused_kernel():
    """The recorded fp32 prediction assumed a fused kernel: the same prediction here, and 2.17 x off."""
    record, config = _recorded_steps()
    row = next(row for row in record["rows"] if row["precision"] == "fp32")
    fused = transformer_training_memory(config, record["batch"], "adamw", "fp32", attention="sdpa-flash",
                                        **_settings(row))
    assert fused.peak == row["predicted_peak"]
    assert row["measured_peak"] / fused.peak > 2


# ---- real steps on the CPU ---------------------------------------------------------------------

LLAMA = TransformerConfig(
    layers=2, width=64, heads=4, kv_heads=2, sequence_length=64, vocabulary=128, ffn_width=256,
    mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False, learned_positions=False,
)
BATCH = 4


def _measure(precision: str, recompute: str, backend):
    torch.manual_seed(0)
    model = hf_model("llama", LLAMA, "sdpa")
    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
        return measure_model(model, LLAMA, precision, recompute, BATCH)


@pytest.mark.parametrize("precision", ["fp32", "bf16-master", "bf16-autocast"])
@pytest.mark.parametrize("kernel", ["math", "cpu-choice"])
def test_a_real_step_with_each_kernel(precision, kernel):
    """Saved activations to the byte (but HF's label copy) and the peak within 5 %, with SDPA's math kernel
    forced and with the kernel the CPU chooses (flash), each predicted from the kernel it names."""
    measured = _measure(precision, "none", SDPBackend.MATH if kernel == "math" else None)
    attention = "sdpa-math" if kernel == "math" else "sdpa"
    predicted = transformer_training_memory(LLAMA, BATCH, "adamw", precision, attention=attention, device="cpu")
    assert predicted.attention == ("sdpa-math" if kernel == "math" else "sdpa-flash")
    assert measured.activations - predicted.activations == LABEL_COPY * BATCH * LLAMA.sequence_length + SCALARS
    assert measured.peak == pytest.approx(predicted.peak, rel=TOLERANCE)


@pytest.mark.parametrize("precision", ["fp32", "bf16-master"])
def test_a_recomputing_step_with_the_math_kernel(precision):
    measured = _measure(precision, "full", SDPBackend.MATH)
    predicted = transformer_training_memory(LLAMA, BATCH, "adamw", precision, attention="sdpa-math", recompute="full")
    assert measured.peak == pytest.approx(predicted.peak, rel=TOLERANCE)


def test_the_math_kernel_costs_what_the_cpu_measures():
    """Math minus flash, measured on the same model, is the formula's difference to the byte."""
    math_step, flash_step = _measure("fp32", "none", SDPBackend.MATH), _measure("fp32", "none", None)
    predicted = {
        name: transformer_training_memory(LLAMA, BATCH, "adamw", "fp32", attention=name).activations
        for name in ("sdpa-math", "sdpa-flash")
    }
    assert math_step.activations - flash_step.activations == predicted["sdpa-math"] - predicted["sdpa-flash"]


def test_the_result_says_which_kernel_it_assumed():
    memory = transformer_training_memory(LLAMA, BATCH, "adamw", "fp32", attention="sdpa", device=H200)
    assert memory.attention == "sdpa-math" and memory.attention_kernel.source == "rules"
    assert "sdpa-math on cuda (compute capability 9.0)" in str(memory)
    eager = transformer_training_memory(LLAMA, BATCH, "adamw", "fp32")
    assert eager.attention == "eager" and eager.attention_kernel is None


def test_dropout_is_part_of_the_kernel_choice():
    """The CPU's flash kernel refuses dropout (torch says so), CUDA's flash takes it: GPT-2-style dropout
    counts the math kernel's weights and dropout mask on the CPU, a fused kernel's random state on an H200."""
    gpt2 = TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=128)
    cpu = transformer_training_memory(gpt2, 2, "adamw", "bf16", dropout=True, attention="sdpa", device="cpu")
    h200 = transformer_training_memory(gpt2, 2, "adamw", "bf16", dropout=True, attention="sdpa", device=H200)
    assert (cpu.attention, h200.attention) == ("sdpa-math", "sdpa-flash")  # cuDNN refuses p = 0.1 (not k/16)
    assert cpu.activations == transformer_training_memory(gpt2, 2, "adamw", "bf16", dropout=True,
                                                          attention="sdpa-math").activations
    without = transformer_training_memory(gpt2, 2, "adamw", "bf16", attention="sdpa", device="cpu")
    assert without.attention == "sdpa-flash"


# ---- grouped-query calls whose K and V arrive repeated -----------------------------------------

WIDE_HEADS = dataclasses.replace(LLAMA, head_width=288, value_head_width=288, sequence_length=32)


def _measure_sdpa(config: TransformerConfig, precision: str = "fp32"):
    torch.manual_seed(0)
    return measure_model(hf_model("llama", config, "sdpa"), config, precision, "none", BATCH)


@pytest.mark.parametrize("precision", ["fp32", "bf16-master"])
def test_heads_wider_than_256_get_key_and_value_repeated(precision):
    """Hugging Face passes enable_gqa only for heads up to 256 wide (use_gqa_in_sdpa): at 288 it repeats K and
    V to every query head, and SDPA saves them so; the saved bytes to the byte but HF's label copy."""
    measured = _measure_sdpa(WIDE_HEADS, precision)
    predicted = transformer_training_memory(WIDE_HEADS, BATCH, "adamw", precision, attention="sdpa")
    assert measured.activations - predicted.activations == LABEL_COPY * BATCH * WIDE_HEADS.sequence_length + SCALARS


def test_a_torch_without_enable_gqa_gets_key_and_value_repeated(monkeypatch):
    """As on torch < 2.5: the package told SDPA takes no enable_gqa, Hugging Face made to repeat K and V (what
    it must do there); the saved bytes to the byte but HF's label copy, and more than with enable_gqa."""
    with_gqa = transformer_training_memory(LLAMA, BATCH, "adamw", "fp32", attention="sdpa").activations
    monkeypatch.setattr(attention_kernels, "SDPA_TAKES_ENABLE_GQA", False)
    monkeypatch.setattr(transformers.integrations.sdpa_attention, "use_gqa_in_sdpa", lambda *args: False)
    measured = _measure_sdpa(LLAMA)
    predicted = transformer_training_memory(LLAMA, BATCH, "adamw", "fp32", attention="sdpa")
    assert measured.activations - predicted.activations == LABEL_COPY * BATCH * LLAMA.sequence_length + SCALARS
    assert predicted.activations > with_gqa
