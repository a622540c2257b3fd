"""The training step of the model-MFU benchmark (``accounting.model_mfu.step``): what mutation testing found
unchecked (issue 15).

The truths: torch's own dtypes and devices of the built model and batch, its float32 matmul
precision as read inside the model's forward, and messages that name the offending value.
"""

import pytest
import torch

from accounting.hardware.precision import float32_matmul_mode
from accounting.errors import AccountingError
from accounting.model_mfu.sizes import model_size
from accounting.model_mfu.step import (
    LEARNING_RATE,
    TrainingStep,
    build_training_step,
    check_fits,
    check_step_device,
    predicted_peak_bytes,
)
from accounting.timing import MEMORY_FRACTION

TINY = model_size("tiny", layers=1, seq=8)


def test_without_a_precision_the_step_is_fp32_and_without_a_seed_it_is_seed_0():
    step = build_training_step(TINY)
    assert step.precision == "fp32" and {p.dtype for p in step.model.parameters()} == {torch.float32}
    seeded = build_training_step(TINY, seed=0)
    assert torch.equal(step.tokens, seeded.tokens) and torch.equal(step.targets, seeded.targets)
    assert all(torch.equal(a, b) for a, b in zip(step.model.parameters(), seeded.model.parameters()))


def test_the_batch_depends_on_the_seed_and_shape_only_not_on_the_model():
    """Models of different depth draw different numbers of initial weights; their batches must not move."""
    shallow, deep = build_training_step(TINY, seed=3), build_training_step(model_size("tiny", layers=3, seq=8), seed=3)
    assert torch.equal(shallow.tokens, deep.tokens) and torch.equal(shallow.targets, deep.targets)
    assert not torch.equal(shallow.tokens, build_training_step(TINY, seed=4).tokens)


def test_a_negative_seed_is_named():
    with pytest.raises(AccountingError) as caught:
        build_training_step(TINY, seed=-1)
    assert str(caught.value) == "seed must be a non-negative integer, got -1"


def test_the_model_and_batch_are_built_on_the_device_asked():
    step = build_training_step(TINY, device="meta")
    assert step.device.type == "meta" and step.tokens.device.type == "meta" and step.targets.device.type == "meta"
    assert {p.device.type for p in step.model.parameters()} == {"meta"}


def test_an_fp32_step_on_the_cpu_leaves_the_users_matmul_precision_alone():
    """Only CUDA's FP32 step turns TF32 off; on the CPU the caller's setting is the one the matmuls see."""
    step = build_training_step(TINY)
    seen = []
    step.model.register_forward_pre_hook(lambda module, args: seen.append(torch.get_float32_matmul_precision()))
    with float32_matmul_mode(tf32=True):
        step()
    assert seen == ["high"]


def test_a_step_is_checked_against_the_device_it_is_on():
    step = build_training_step(TINY)
    assert check_step_device(step, "cpu") == torch.device("cpu")
    assert check_step_device(step, "cpu:0") == torch.device("cpu:0")  # the same device, spelled with its index
    with pytest.raises(AccountingError) as caught:
        check_step_device(step, "meta")
    assert str(caught.value) == "the model's parameters are on cpu but device='meta' was given"
    with pytest.raises(AccountingError) as caught:
        check_step_device(step, "cpu:1")
    assert str(caught.value) == "the model's parameters are on cpu but device='cpu:1' was given"


def test_a_batch_moved_off_the_models_device_is_named():
    step = build_training_step(TINY)
    moved = TrainingStep(step.size, step.model, step.optimizer, step.tokens.to("meta"), step.targets, step.precision)
    with pytest.raises(AccountingError) as caught:
        check_step_device(moved, "cpu")
    assert str(caught.value) == "the tokens are on meta but device='cpu' was given"


def test_tokens_and_targets_cover_the_whole_vocabulary():
    step = build_training_step(model_size("tiny", layers=1, seq=8, vocabulary=2))  # 32 draws from {0, 1}
    assert set(step.tokens.unique().tolist()) == {0, 1} and set(step.targets.unique().tolist()) == {0, 1}


def test_the_first_update_moves_the_weights_by_the_learning_rate():
    """Adam's first step is lr · m̂ / (√v̂ + ε) = lr · sign(gradient) for every weight with a gradient
    (AdamW's decay adds lr · 0.01 · weight): the largest move is the learning rate the step was built with."""
    step = build_training_step(TINY)
    before = [p.detach().clone() for p in step.model.parameters()]
    step()
    moved = max((after.detach() - was).abs().max().item() for after, was in zip(step.model.parameters(), before))
    assert moved == pytest.approx(LEARNING_RATE, rel=0.05)


def test_a_step_that_needs_exactly_the_usable_memory_fits_and_with_less_it_does_not():
    size = model_size("tiny")
    predicted = predicted_peak_bytes(size, "fp32")
    free = predicted * 5 // 4  # MEMORY_FRACTION (0.8) of it is exactly the prediction
    assert MEMORY_FRACTION * free == predicted
    assert check_fits(size, "fp32", "cpu", free_bytes=free) == predicted
    with pytest.raises(AccountingError, match="needs .* at its predicted peak, but cpu has"):
        check_fits(size, "fp32", "cpu", free_bytes=free - 2)


def test_a_negative_free_memory_is_named():
    with pytest.raises(AccountingError) as caught:
        check_fits(TINY, "fp32", "cpu", free_bytes=-1)
    assert str(caught.value) == "free_bytes must be a non-negative integer, got -1"
