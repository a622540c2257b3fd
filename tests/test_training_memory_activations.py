"""Activation and peak memory of a training step: predicted vs measured.

On the CPU the truth is :class:`LiveTensorBytes`, a dispatch-mode tracker of live storage
bytes (itself checked here against the tensors a test keeps alive); on CUDA it is
``torch.cuda.memory_allocated`` / ``max_memory_allocated``.

Tolerances (the reasons are in the docstrings of ``transformer_activation_bytes`` and
``TrainingMemory``):

- saved activations, fp32 on the CPU: exact up to 0.1 % + 64 bytes (the loss keeps two
  scalars the formula leaves out); measured agreement is to 8 bytes.
- saved activations, bf16 on the CPU: 2 % (CPU LayerNorm keeps its statistics in bf16, the
  formula assumes fp32 as on CUDA).
- peak of a steady-state step: ``TrainingMemory.peak`` is a lower bound and the measured peak
  is at most 25 % above it: transients the model leaves out (attention-score temporaries, the
  optimizer's per-tensor temporaries) stay under that on configs shaped like real ones.
- CUDA: activations within 3 %, peak within -3 % / +25 % (allocator rounding to 512 bytes,
  foreach-optimizer temporaries).
"""

import gc

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st

from accounting import (
    LiveTensorBytes,
    TransformerConfig,
    measure_optimizer_state_bytes,
    same_storage,
    storage_bytes,
    transformer_activation_bytes,
    transformer_training_memory,
)
from tests.support.strategies_training import (
    OPTIMIZER_CASES,
    ReferenceGPT,
    language_model_loss,
    random_tokens,
    realistic_configs,
    step_counter_bytes,
    transformer_configs,
)

PEAK_OVERSHOOT = 1.25
"""Largest measured/predicted peak ratio accepted: transients the peak model leaves out."""

# Each example runs training steps under the tracker (0.1 to 0.5 s on a busy 2-core machine):
# far fewer than the profile's, the case tables multiply them.
ACTIVATION_EXAMPLES = settings(max_examples=15)
PEAK_EXAMPLES = settings(max_examples=5)

# ---- the tracker itself -------------------------------------------------------------


@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=8),
    dtypes=st.lists(st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.bool]), min_size=8, max_size=8),
    dropped=st.sets(st.integers(0, 7)),
)
def test_tracker_counts_the_storages_a_program_keeps(sizes, dtypes, dropped):
    kept, expected_peak = {}, 0
    with LiveTensorBytes() as live:
        for position, size in enumerate(sizes):
            base = torch.ones(size, dtype=dtypes[position])
            kept[position] = base
            kept[-position - 1] = base[: size // 2]  # a view: no new bytes
            base.fill_(0)  # in place: no new bytes
            expected_peak = max(expected_peak, storage_bytes(*kept.values()))
            assert live.current == storage_bytes(*kept.values())
        del base
        for position in dropped:
            kept.pop(position, None)
            kept.pop(-position - 1, None)
    assert live.current == storage_bytes(*kept.values())
    assert live.peak == expected_peak


def test_tracker_counts_existing_tensors_only_when_told():
    weights = torch.zeros(100)
    with LiveTensorBytes() as live:
        view = weights[:10] * 1  # a new 40-byte tensor; weights themselves existed before
        assert live.current == view.untyped_storage().nbytes()
        live.track(weights, weights[5:])
        assert live.current == storage_bytes(view, weights)
        live.reset_peak()
        assert live.peak == live.current


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device to compare with torch.cuda.memory_allocated")
def test_tracker_agrees_with_the_cuda_allocator():
    sizes = [128, 4096, 1 << 20, 3 << 18]  # float32 elements: multiples of the allocator's 512-byte rounding
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with LiveTensorBytes() as live:
        kept = [torch.ones(size, device="cuda") for size in sizes]
        doubled = [x * 2 for x in kept[:2]]
        del kept[0]
        torch.cuda.synchronize()
        assert live.current == torch.cuda.memory_allocated() - before
    assert live.current == storage_bytes(*kept, *doubled)


# ---- one training step on the CPU ---------------------------------------------------


def _train_steps(model, optimizer, tokens, targets, steps: int = 2):
    """Run ``steps`` steps; return the tracker of the last one and the activations it measured."""
    for _ in range(steps):
        optimizer.zero_grad()  # frees the gradients (set_to_none=True, torch's default)
        with LiveTensorBytes() as live:
            loss = language_model_loss(model(tokens), targets)
            activations = live.current
            loss.backward()
            del loss
            optimizer.step()
    return live, activations


@ACTIVATION_EXAMPLES
@given(config=transformer_configs(max_layers=2, max_width=32, max_length=16), batch_size=st.integers(1, 3))
@example(config=TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=100), batch_size=4)
def test_saved_activations_fp32(config, batch_size):
    torch.manual_seed(0)
    model = ReferenceGPT(config)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    tokens, targets = random_tokens(config, batch_size), random_tokens(config, batch_size)
    _, measured = _train_steps(model, optimizer, tokens, targets, steps=1)
    predicted = transformer_activation_bytes(config, batch_size, "fp32")
    assert measured == pytest.approx(predicted, rel=1e-3, abs=64)


def test_saved_activations_bf16():
    config = TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=128)
    model = ReferenceGPT(config).to(torch.bfloat16)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    tokens, targets = random_tokens(config, 2), random_tokens(config, 2)
    _, measured = _train_steps(model, optimizer, tokens, targets, steps=1)
    assert measured == pytest.approx(transformer_activation_bytes(config, 2, "bf16"), rel=0.02)


@pytest.mark.parametrize("name", [pytest.param(name, id=name) for name in OPTIMIZER_CASES])
@PEAK_EXAMPLES
@given(config=realistic_configs(), batch_size=st.integers(2, 3), data=st.data())
@example(
    config=TransformerConfig(layers=2, width=48, heads=4, sequence_length=24, vocabulary=64), batch_size=2, data=None
).via("a GPT-shaped pin")
def test_peak_of_a_steady_state_step(name, config, batch_size, data):
    optimizer_class, settings_strategy = OPTIMIZER_CASES[name]
    optimizer_settings = data.draw(settings_strategy, label="settings") if data else {}
    torch.manual_seed(0)
    model = ReferenceGPT(config)
    optimizer = optimizer_class(model.parameters(), lr=1e-3, **optimizer_settings)
    tokens, targets = random_tokens(config, batch_size), random_tokens(config, batch_size)
    live, _ = _train_steps(model, optimizer, tokens, targets)  # the second step has optimizer state

    predicted = transformer_training_memory(config, batch_size, name, "fp32", **optimizer_settings)
    persistent = storage_bytes(*model.parameters()) + measure_optimizer_state_bytes(optimizer)
    assert persistent - step_counter_bytes(optimizer) == predicted.persistent
    measured_peak = persistent + live.peak
    assert predicted.peak <= measured_peak <= PEAK_OVERSHOOT * predicted.peak


# ---- one training step on CUDA ------------------------------------------------------

# Activations dominate (gradients are ~7x smaller) and attention scores are a fifth of them,
# so the transients the peak model leaves out stay well inside PEAK_OVERSHOOT.
CUDA_CONFIG = TransformerConfig(layers=2, width=512, heads=8, sequence_length=256, vocabulary=1024)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device for torch.cuda.max_memory_allocated")
@pytest.mark.parametrize(
    "precision, dtype, dropout",
    [
        pytest.param("fp32", torch.float32, False, id="fp32"),
        pytest.param("bf16", torch.bfloat16, False, id="bf16"),
        pytest.param("bf16", torch.bfloat16, True, id="bf16-dropout"),
    ],
)
def test_activations_and_peak_on_cuda(precision, dtype, dropout):
    batch_size = 8
    torch.manual_seed(0)
    model = ReferenceGPT(CUDA_CONFIG, dropout=0.1 if dropout else 0.0).to("cuda", dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = random_tokens(CUDA_CONFIG, batch_size, device="cuda")
    targets = random_tokens(CUDA_CONFIG, batch_size, device="cuda")
    for step in range(2):  # the first step creates optimizer state and cuBLAS workspaces
        optimizer.zero_grad()
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        loss = language_model_loss(model(tokens), targets)
        torch.cuda.synchronize()
        activations = torch.cuda.memory_allocated() - before
        loss.backward()
        del loss
        optimizer.step()
        torch.cuda.synchronize()
    peak_above_persistent = torch.cuda.max_memory_allocated() - before

    predicted = transformer_training_memory(CUDA_CONFIG, batch_size, "adamw", precision, dropout=dropout)
    assert activations == pytest.approx(predicted.activations, rel=0.03)
    predicted_above_persistent = predicted.peak - predicted.persistent
    assert 0.97 * predicted_above_persistent <= peak_above_persistent <= PEAK_OVERSHOOT * predicted_above_persistent


# ---- dropout on the CPU --------------------------------------------------------------

DROPOUT = 0.1


def _forward(model, tokens, targets):
    """Bytes a forward pass leaves alive for backward (the tracker), and the tensors autograd saved."""
    saved = []

    def pack(tensor):
        saved.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), LiveTensorBytes() as live:
        loss = language_model_loss(model(tokens), targets)
        activations = live.current
    del loss
    return activations, saved


@ACTIVATION_EXAMPLES
@given(config=transformer_configs(max_layers=2, max_width=32, max_length=16), batch_size=st.integers(1, 3))
@example(config=TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=100), batch_size=4)
def test_saved_activations_with_dropout_fp32(config, batch_size):
    """Dropout as CUDA runs it (``torch.native_dropout``: bool masks), here on the CPU."""
    torch.manual_seed(0)
    model = ReferenceGPT(config, dropout=DROPOUT, fused_dropout=True)
    measured, _ = _forward(model, random_tokens(config, batch_size), random_tokens(config, batch_size))
    predicted = transformer_activation_bytes(config, batch_size, "fp32", dropout=True)
    assert measured == pytest.approx(predicted, rel=1e-3, abs=64)


@pytest.mark.parametrize("dtype", [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")])
def test_cpu_dropout_saves_masks_of_the_activation_dtype(dtype):
    """The docstring's CPU note: ``F.dropout`` on the CPU saves e-byte masks where the fused kernel
    saves bool ones, and nothing else it saves differs."""
    config = TransformerConfig(layers=2, width=32, heads=2, sequence_length=16, vocabulary=64)
    tokens, targets = random_tokens(config, 2), random_tokens(config, 2)
    measured = {}
    for fused in (False, True):
        torch.manual_seed(0)
        model = ReferenceGPT(config, dropout=DROPOUT, fused_dropout=fused).to(dtype)
        measured[fused], saved = _forward(model, tokens, targets)
    causal_masks = list(model.buffers())  # saved by masked_fill, but they existed before the step
    masks = [
        tensor for tensor in saved
        if tensor.dtype == torch.bool and not any(same_storage(tensor, buffer) for buffer in causal_masks)
    ]
    mask_elements = storage_bytes(*masks) // torch.bool.itemsize
    assert mask_elements > 0
    assert measured[False] - measured[True] == (dtype.itemsize - torch.bool.itemsize) * mask_elements


# ---- TrainingMemory.total: a step that keeps its gradients ---------------------------


def test_total_is_every_part_alive_in_a_step_that_keeps_its_gradients():
    """``total`` against real tensors: weights, optimizer state, gradients kept by
    ``zero_grad(set_to_none=False)``, the activations saved by the forward pass, and the two fp32
    loss gradients (of the log-probabilities and of the logits) caught by tensor hooks."""
    config = TransformerConfig(layers=2, width=48, heads=4, sequence_length=24, vocabulary=64)
    batch_size = 2
    torch.manual_seed(0)
    model = ReferenceGPT(config, dropout=DROPOUT, fused_dropout=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    tokens, targets = random_tokens(config, batch_size), random_tokens(config, batch_size)
    for _ in range(2):  # the second step has optimizer state
        optimizer.zero_grad(set_to_none=False)
        loss_gradients = []
        with LiveTensorBytes() as live:
            logits = model(tokens).float()
            # F.cross_entropy, as language_model_loss computes it, in its two autograd steps:
            log_probabilities = F.log_softmax(logits.flatten(0, 1), dim=-1)
            logits.register_hook(loss_gradients.append)
            log_probabilities.register_hook(loss_gradients.append)
            loss = F.nll_loss(log_probabilities, targets.flatten())
            del logits, log_probabilities
            activations = live.current
            loss.backward()
            del loss
            optimizer.step()

    persistent = storage_bytes(*model.parameters()) + measure_optimizer_state_bytes(optimizer)
    persistent -= step_counter_bytes(optimizer)
    gradients = storage_bytes(*(p.grad for p in model.parameters()))
    transient = storage_bytes(*loss_gradients)
    predicted = transformer_training_memory(config, batch_size, "adam", "fp32", dropout=True)
    assert predicted.total == pytest.approx(persistent + gradients + activations + transient, abs=64)
    assert predicted.total <= persistent + gradients + live.peak <= PEAK_OVERSHOOT * predicted.total
