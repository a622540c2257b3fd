"""GPT-2 with SDPA: the two (tokens × width) tensors a layer that Hugging Face's key-value cache keeps.

Hugging Face's ``GPT2LMHeadModel`` builds its key-value cache in training too (``use_cache`` defaults to on): the
cache's update concatenates K and V into new contiguous tensors, SDPA saves those, and Q, a view of the fused QKV
projection, keeps that projection's output alive whole. So the default step saves two tensors of the attention's
width a layer more than a model without the cache (the package's GPT, or ``use_cache=False``); the formula counts
the default (byte for byte: ``test_training_memory_exact.py``). Truth here: the same model measured with the cache
on and off on the CPU, and the recorded H200 steps of Hugging Face's GPT-2 small, whose attention is the only
difference between its two runs.
"""

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")  # the truth these tests check against (a test extra)

from accounting import AttentionDevice, TransformerConfig, transformer_training_memory
from accounting.model_mfu.sizes import model_size
from studies.training_memory_families import hf_model, measure_model

RECORDED = Path(__file__).parent / "data" / "hosts" / "nvidia-h200" / "hf-gpt2-small-step.json"
H200 = AttentionDevice("cuda", (9, 0))
RECORDED_BATCH = 12
GB = 1e9  # the record's unit
RECORDED_PEAK_TOLERANCE = 0.01
"""Measured/predicted of each recorded peak (1.005 with SDPA, 1.004 eager); without the cache's two copies a layer
SDPA's would read 1.037."""
BATCH = 4
CONFIG = TransformerConfig(layers=2, width=32, heads=2, sequence_length=32, vocabulary=64)
FP32 = 4


def _activations(use_cache: bool) -> int:
    torch.manual_seed(0)
    model = hf_model("gpt2", CONFIG, "sdpa")
    model.config.use_cache = use_cache
    return measure_model(model, CONFIG, "fp32", "none", BATCH).activations


def test_hugging_faces_cache_keeps_two_tensors_a_layer_under_sdpa():
    """The cache's K and V copies, and nothing else, are what the step without the cache does not keep."""
    copies = CONFIG.layers * 2 * BATCH * CONFIG.sequence_length * CONFIG.attention_width * FP32
    assert _activations(use_cache=True) - _activations(use_cache=False) == copies


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_the_recorded_h200_steps_of_hugging_faces_gpt2_small(attention):
    """bf16 weights, AdamW, 12 x 1024 tokens, GPT-2's tanh GELU; SDPA as the documented rules pick it on cc 9.0."""
    measured = json.loads(RECORDED.read_text())[attention]["peak_GB"] * GB
    predicted = transformer_training_memory(model_size("gpt2-small").config, RECORDED_BATCH, "adamw", "bf16",
                                            attention=attention, device=H200, gelu="unfused").peak
    assert measured == pytest.approx(predicted, rel=RECORDED_PEAK_TOLERANCE)
