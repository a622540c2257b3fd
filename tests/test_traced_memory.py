"""A training step traced on the meta device, against the same step on real CPU tensors and torch's MemTracker.

Truths: the same step run on the CPU with real data (every part identical, byte for byte);
``torch.distributed._tools.mem_tracker.MemTracker``, torch's own per-category tracker, run on
the same step; the parameter and optimizer-state bytes of the real model and optimizer; and
the parameter count of ``TransformerConfig`` for Llama-3-8B, traced with ``transformers``.
"""

import pytest
import torch
from torch import nn
from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

from accounting.errors import AccountingError, AccountingTypeError
from accounting.live_memory import LiveTensorBytes, measure_step_memory
from accounting.memory import storage_bytes
from accounting.model.traced_step import TracedStepMemory, traced_training_step_memory
from accounting.model.training_memory import optimizer_state_bytes
from accounting.model.config import TransformerConfig
from tests.support.hf_models import FAMILIES, build_hf_model, model_from_config_json, random_token_ids

PARTS = ("parameters", "buffers", "optimizer_state", "inputs", "gradients", "activations", "temporaries")


def family_step(family: str, dtype=torch.float32, **sizes):
    """A factory of ``family``'s ``transformers`` model (tests/support/hf_models.py) and a batch for it."""
    _model, config = build_hf_model(family, device="meta", **sizes)
    ids = random_token_ids(config, batch_size=2)

    def factory():
        return build_hf_model(family, device=torch.get_default_device(), **sizes)[0].to(dtype)

    return factory, {"input_ids": ids, "labels": ids}


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(48, 96), nn.GELU(), nn.LayerNorm(96), nn.Linear(96, 16))


def squared_error(output, batch):
    return (output - 1).pow(2).mean()


OPTIMIZER_CASES = [
    pytest.param("adamw", id="adamw"),
    pytest.param("sgd", id="sgd"),
    pytest.param(lambda parameters: torch.optim.SGD(parameters, lr=0.1, momentum=0.9), id="sgd-momentum"),
    pytest.param(lambda parameters: torch.optim.Adam(parameters, amsgrad=True), id="adam-amsgrad"),
    pytest.param("rmsprop", id="rmsprop"),
    pytest.param(None, id="no-optimizer"),
]


# ---- meta is the CPU, byte for byte --------------------------------------------------------


@pytest.mark.parametrize("optimizer", OPTIMIZER_CASES)
def test_an_mlp_traced_on_meta_is_the_same_step_on_the_cpu(optimizer):
    batch = torch.randn(16, 48)
    meta = traced_training_step_memory(mlp, batch, loss_fn=squared_error, optimizer=optimizer)
    cpu = traced_training_step_memory(mlp, batch, loss_fn=squared_error, optimizer=optimizer, device="cpu")
    assert meta.device == "meta" and cpu.device == "cpu"
    assert [getattr(meta, part) for part in (*PARTS, "phase", "after_step")] == \
           [getattr(cpu, part) for part in (*PARTS, "phase", "after_step")]


@pytest.mark.parametrize("family", [family for family in FAMILIES if family != "mixtral"])
def test_each_familys_model_traced_on_meta_is_the_same_step_on_the_cpu(family):
    factory, batch = family_step(family)
    meta = traced_training_step_memory(factory, batch)
    cpu = traced_training_step_memory(factory, batch, device="cpu")
    assert meta == TracedStepMemory(**{**cpu.__dict__, "device": "meta"})
    assert meta.activations > 0 and meta.temporaries > 0


def test_a_bf16_llama_traced_on_meta_is_the_same_step_on_the_cpu():
    factory, batch = family_step("llama", torch.bfloat16)
    meta = traced_training_step_memory(factory, batch, optimizer="adam")
    cpu = traced_training_step_memory(factory, batch, optimizer="adam", device="cpu")
    assert meta == TracedStepMemory(**{**cpu.__dict__, "device": "meta"})
    assert meta.parameters == 2 * build_hf_model("llama", device="meta")[1].parameter_count


def test_routed_experts_cannot_run_on_meta_and_say_so():
    """Which expert a token goes to depends on values; an eager MoE asks nonzero(), which meta cannot answer."""
    factory, batch = family_step("mixtral")
    with pytest.raises(AccountingError, match=r"^the step reads the values of a tensor, which the meta device"):
        traced_training_step_memory(factory, batch)


# ---- the parts, against torch -----------------------------------------------------------------


def test_the_parts_are_torch_memtrackers_categories():
    """MemTracker (torch's own) on the same steady-state step: parameters, buffers, gradients, optimizer
    state and the total at the peak agree; MemTracker leaves out the inputs, made before it started."""
    factory, batch = family_step("llama")
    with torch.device("cpu"):
        model = factory()
    optimizer = torch.optim.AdamW(model.parameters())
    model(**batch).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    with tracker:
        model(**batch).loss.backward()
        optimizer.step()
    peak = tracker.get_tracker_snapshot("peak")
    by_kind = {kind: sum(device.get(kind, 0) for device in peak.values()) for kind in _MemRefType}
    total = sum(device["Total"] for device in peak.values())

    traced = traced_training_step_memory(factory, batch, device="cpu")
    assert traced.parameters == by_kind[_MemRefType.PARAM]
    assert traced.buffers == by_kind[_MemRefType.BUFFER]
    assert traced.gradients == by_kind[_MemRefType.GRAD]
    assert traced.optimizer_state == by_kind[_MemRefType.OPT]
    assert traced.peak - traced.inputs == total
    assert traced.activations + traced.temporaries == by_kind[_MemRefType.ACT] + by_kind[_MemRefType.TEMP]


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd", "adagrad", "rmsprop"])
def test_model_states_are_the_real_tensors(optimizer):
    model = mlp()
    batch = torch.randn(8, 48)
    traced = traced_training_step_memory(model, batch, loss_fn=squared_error, optimizer=optimizer)
    assert traced.parameters == storage_bytes(*model.parameters())
    assert traced.optimizer_state == optimizer_state_bytes(model, optimizer)
    assert traced.inputs == storage_bytes(batch)
    assert traced.gradients in (0, traced.parameters)  # all gradients, or none yet (a peak in the forward)
    assert traced.after_step == traced.parameters + traced.optimizer_state + traced.inputs + traced.parameters


@pytest.mark.parametrize("optimizer", [None, "adam"], ids=["no-optimizer", "adam"])
def test_the_peak_is_the_live_tensor_peak_of_the_same_step_by_hand(optimizer):
    """The breakdown is replayed from a log; the plain tracker, run over the same step written out, gives its sum."""
    layers = [nn.Linear(32, 32) for _ in range(6)]
    model = nn.Sequential(*[module for layer in layers for module in (layer, nn.Tanh())])
    batch = torch.randn(64, 32)
    steps = torch.optim.Adam(model.parameters()) if optimizer else None

    def step():
        model(batch).sum().backward()
        if steps:
            steps.step()

    step()
    model.zero_grad(set_to_none=True)
    with LiveTensorBytes() as live:
        live.track(*model.parameters(), batch, *[value for state in (steps.state.values() if steps else ())
                                                 for value in state.values()])
        step()
    peak, after_step = live.peak, live.current  # read now: the traced run below frees these gradients
    traced = traced_training_step_memory(model, batch, loss_fn=lambda out, _: out.sum(), optimizer=optimizer)
    assert traced.peak == peak
    assert traced.after_step == after_step


class WideForward(nn.Module):
    """A forward that makes a large tensor and drops it: nothing of it is saved for backward."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x):
        x = self.linear(x)
        return x.sum() * x.repeat(1000, 1).sum()  # sum's backward needs only the shape of what it summed


@pytest.mark.parametrize(("model", "batch", "phase"), [
    pytest.param(WideForward, torch.ones(8, 16), "forward", id="forward"),
    pytest.param(lambda: nn.Sequential(*[nn.Linear(32, 32) for _ in range(8)]), torch.ones(256, 32), "backward",
                 id="backward"),
    pytest.param(lambda: nn.Linear(2048, 2048), torch.ones(1, 2048), "optimizer step", id="optimizer-step"),
])
def test_the_phase_of_the_peak(model, batch, phase):
    traced = traced_training_step_memory(model, batch, loss_fn=lambda out, _: out.sum(), optimizer="adam")
    assert traced.phase == phase
    if phase == "forward":
        assert traced.temporaries >= 1000 * storage_bytes(batch) and traced.gradients == 0
    if phase == "optimizer step":
        assert traced.gradients == traced.parameters and traced.activations == 0


def test_frozen_parameters_get_no_gradient_or_state():
    model = mlp()
    model[0].requires_grad_(False)
    traced = traced_training_step_memory(model, torch.randn(8, 48), loss_fn=squared_error, optimizer="adam")
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    assert traced.optimizer_state == optimizer_state_bytes(trainable, "adam")
    assert traced.gradients in (0, storage_bytes(*trainable))


# ---- an 8B model on a laptop ------------------------------------------------------------------

LLAMA_3_8B = dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
                  rope_theta=500000.0, tie_word_embeddings=False, rms_norm_eps=1e-5)
"""Llama-3-8B's config.json (meta-llama/Meta-Llama-3-8B), the fields that size it."""


def test_llama_3_8b_traces_on_meta():
    ids = torch.zeros(1, 128, dtype=torch.long)
    traced = traced_training_step_memory(lambda: model_from_config_json(LLAMA_3_8B).to(torch.bfloat16),
                                         {"input_ids": ids, "labels": ids})
    ours = TransformerConfig(layers=32, width=4096, heads=32, kv_heads=8, sequence_length=128, vocabulary=128256,
                             ffn_width=14336, mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                             learned_positions=False)
    tensors = 2 + 32 * 9 + 1  # embeddings, unembedding; per layer q, k, v, o, gate, up, down, two norms; final norm
    assert traced.parameters == 2 * ours.parameter_count
    assert traced.optimizer_state == 2 * traced.parameters + 4 * tensors  # bf16 moments, fp32 step counters


# ---- bad input ----------------------------------------------------------------------------------


class ReadsItsInput(nn.Module):
    """A model with data-dependent control flow: it reads a value, which meta tensors do not have."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).sum() if x.sum().item() > 0 else self.linear(-x).sum()


@pytest.mark.parametrize(("model", "batch", "options", "error", "message"), [
    pytest.param(ReadsItsInput, torch.ones(2, 4), {}, AccountingError,
                 r"^the step reads the values of a tensor, which the meta device does not have \(", id="item-on-meta"),
    pytest.param("llama", torch.ones(2), {}, AccountingTypeError,
                 r"^model must be an nn.Module or a function that builds one, got str$", id="model-name"),
    pytest.param(lambda: 3, torch.ones(2), {}, AccountingTypeError,
                 r"^the model factory returned int, not an nn.Module$", id="factory-returns-int"),
    pytest.param(nn.ReLU(), torch.ones(2), {}, AccountingError, r"^the model \(ReLU\) has no parameters",
                 id="no-parameters"),
    pytest.param(mlp, torch.ones(2, 48), {}, AccountingError,
                 r"^the model returned Tensor, not a loss: pass loss_fn=", id="no-loss"),
    pytest.param(mlp, torch.ones(2, 48), {"loss_fn": lambda out, _: out}, AccountingError,
                 r"^the loss must be a scalar tensor, got Tensor \(2, 16\)$", id="loss-not-scalar"),
    pytest.param(mlp, torch.ones(2, 48), {"loss_fn": "mse"}, AccountingTypeError,
                 r"^loss_fn must be a function \(output, batch\) -> loss, got 'mse'$", id="loss-name"),
    pytest.param(mlp, torch.ones(2, 48), {"loss_fn": squared_error, "optimizer": "lion"}, AccountingError,
                 r"^optimizer must be one of 'sgd', .* got 'lion'$", id="unknown-optimizer"),
    pytest.param(mlp, torch.ones(2, 48), {"loss_fn": squared_error, "optimizer": 0.1}, AccountingTypeError,
                 r"^optimizer must be a name, a function of the parameters or None, got 0.1$", id="optimizer-number"),
    pytest.param(mlp, torch.ones(2, 48), {"loss_fn": squared_error, "optimizer": lambda parameters: None},
                 AccountingTypeError, r"^the optimizer factory returned NoneType", id="optimizer-factory-none"),
    pytest.param(mlp, "tokens", {"loss_fn": squared_error}, AccountingTypeError,
                 r"^batch must be a tensor, a tuple of arguments or a dict of keyword arguments, got str$",
                 id="batch-string"),
])
def test_bad_input_is_named(model, batch, options, error, message):
    with pytest.raises(error, match=message):
        traced_training_step_memory(model, batch, **options)


def test_saved_is_what_the_forward_left_for_backward_even_when_the_peak_is_later():
    """``saved``: the tensors autograd kept when backward began, the live tracker's forward activations less the
    loss; a wide loss-side temporary puts the peak in backward, after part of them was freed."""
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    batch = torch.ones(32, 64)

    def loss_fn(output, _batch):
        return output.exp().sum()

    traced = traced_training_step_memory(model, batch, loss_fn=loss_fn, optimizer=None, device="cpu")
    measured = measure_step_memory(list(model.parameters()), lambda: loss_fn(model(batch), batch),
                                   lambda loss: loss.backward())
    assert traced.saved == measured.activations - torch.float32.itemsize  # the scalar loss is not saved
    assert traced.phase == "backward" and traced.activations < traced.saved
