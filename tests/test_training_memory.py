"""Parameter counts, optimizer state and the precision-policy breakdown, against real torch objects.

Truths: torch's own parameter lists, the state tensors of real ``torch.optim`` optimizers
after a step, and the gradients and master copies a hand-written mixed-precision step makes.
"""

import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st
from torch import nn

from accounting import (
    AccountingError,
    AccountingTypeError,
    PrecisionPolicy,
    TransformerConfig,
    measure_optimizer_state_bytes,
    optimizer_state_bytes,
    parameter_count,
    precision_policy,
    storage_bytes,
    training_memory,
    transformer_activation_bytes,
    transformer_training_memory,
)
from tests.support.strategies_training import (
    OPTIMIZER_CASES,
    ReferenceGPT,
    small_models,
    step_counter_bytes,
    transformer_configs,
)

# ---- parameter_count ----------------------------------------------------------------


@given(transformer_configs())
@example(TransformerConfig(layers=1, width=4, heads=2, sequence_length=3, vocabulary=5, tied_embeddings=True))
@example(TransformerConfig(layers=1, width=4, heads=2, sequence_length=3, vocabulary=5, tied_embeddings=False))
def test_parameter_count_matches_torch_and_config(config):
    model = ReferenceGPT(config)
    torch_count = sum(p.numel() for p in model.parameters())  # torch lists a tied weight once
    assert parameter_count(model) == torch_count
    assert config.parameter_count == torch_count


def test_gpt2_small_parameter_count_on_meta():
    config = TransformerConfig(layers=12, width=768, heads=12, sequence_length=1024, vocabulary=50257)
    with torch.device("meta"):
        model = ReferenceGPT(config)
    assert parameter_count(model) == sum(p.numel() for p in model.parameters()) == config.parameter_count


def test_tied_weight_counted_once():
    embedding = nn.Embedding(10, 4)
    head = nn.Linear(4, 10, bias=False)
    untied = nn.ModuleList([embedding, head])
    before = parameter_count(untied)
    head.weight = embedding.weight
    assert parameter_count(untied) == before - head.weight.numel()
    assert parameter_count(untied) == len(torch.nn.utils.parameters_to_vector(untied.parameters()))


def test_distinct_parameters_sharing_a_storage_counted_once():
    base = nn.Parameter(torch.zeros(6, 4))
    alias = nn.Parameter(base.data)  # a second Parameter object on the same storage
    model = nn.Module()
    model.a, model.b = base, alias
    assert sum(p.numel() for p in model.parameters()) == 48  # torch sees two parameters
    assert parameter_count(model) == base.untyped_storage().nbytes() // base.element_size()


def test_trainable_only():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 5))
    model[0].requires_grad_(False)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert parameter_count(model, trainable_only=True) == trainable < parameter_count(model)


# ---- optimizer state ----------------------------------------------------------------


def _take_one_step(model, optimizer):
    first = next(iter(model))
    inputs = torch.randn(3, first.in_features, dtype=first.weight.dtype)
    model(inputs).float().square().sum().backward()
    optimizer.step()


@pytest.mark.parametrize("name", [pytest.param(name, id=name) for name in OPTIMIZER_CASES])
@given(model=small_models(), data=st.data())
def test_predicted_state_bytes_equal_real_state(name, model, data):
    optimizer_class, settings_strategy = OPTIMIZER_CASES[name]
    settings = data.draw(settings_strategy, label="settings")
    optimizer = optimizer_class(model.parameters(), lr=1e-3, **settings)
    _take_one_step(model, optimizer)
    assert measure_optimizer_state_bytes(optimizer) == optimizer_state_bytes(model, name, **settings)


@pytest.mark.parametrize("name", [pytest.param(name, id=name) for name in OPTIMIZER_CASES])
@given(model=small_models(), data=st.data())
def test_frozen_parameters_get_no_optimizer_state(name, model, data):
    """torch creates no state for a parameter whose grad is None (frozen layers, adapters, LoRA)."""
    model[0].requires_grad_(False)
    assume(any(p.requires_grad for p in model.parameters()))  # a tied last layer may be frozen with it
    optimizer_class, settings_strategy = OPTIMIZER_CASES[name]
    settings = data.draw(settings_strategy, label="settings")
    optimizer = optimizer_class(model.parameters(), lr=1e-3, **settings)  # frozen ones handed over too
    _take_one_step(model, optimizer)
    # Adagrad's constructor creates state for every parameter; the others wait for a gradient.
    assert all((p in optimizer.state) == (name == "adagrad") for p in model[0].parameters())
    assert measure_optimizer_state_bytes(optimizer) == optimizer_state_bytes(model, name, **settings)


@pytest.mark.parametrize(
    "name, settings",
    [pytest.param("adam", {}, id="adam"), pytest.param("sgd", {"momentum": 0.9}, id="sgd-momentum")],
)
def test_frozen_first_layer_of_an_mlp(name, settings):
    """A frozen first Linear holds no optimizer state: Adam's is 2644 bytes, not the 3804 that counting it would give."""
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    model[0].requires_grad_(False)
    optimizer = OPTIMIZER_CASES[name][0](model.parameters(), lr=1e-3, **settings)
    model(torch.randn(3, 8)).square().sum().backward()
    optimizer.step()
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert measure_optimizer_state_bytes(optimizer) == optimizer_state_bytes(model, name, **settings)
    assert optimizer_state_bytes(model, name, **settings) == optimizer_state_bytes(trainable, name, **settings)


@pytest.mark.parametrize(
    "name, settings",
    [
        pytest.param("sgd", {"momentum": 0.9, "fused": True}, id="sgd-fused"),
        pytest.param("adagrad", {"fused": True}, id="adagrad-fused"),
        pytest.param("adam", {"fused": True}, id="adam-fused"),
        pytest.param("adamw", {"amsgrad": True, "fused": True}, id="adamw-amsgrad-fused"),
    ],
)
def test_fused_optimizers(name, settings):
    model = nn.Sequential(nn.Linear(5, 7), nn.Linear(7, 2))
    optimizer = OPTIMIZER_CASES[name][0](model.parameters(), lr=1e-3, **settings)
    _take_one_step(model, optimizer)
    assert measure_optimizer_state_bytes(optimizer) == optimizer_state_bytes(model, name, **settings)


@pytest.mark.parametrize("name", [pytest.param(name, id=name) for name in ("adam", "adagrad", "rmsprop")])
def test_step_counters_follow_float64_default_dtype(name):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model = nn.Sequential(nn.Linear(4, 3))
        optimizer = OPTIMIZER_CASES[name][0](model.parameters(), lr=1e-3)
        _take_one_step(model, optimizer)
        assert measure_optimizer_state_bytes(optimizer) == optimizer_state_bytes(model, name)
    finally:
        torch.set_default_dtype(previous)


def test_no_state_before_the_first_step():
    model = nn.Sequential(nn.Linear(4, 3))
    assert measure_optimizer_state_bytes(torch.optim.Adam(model.parameters())) == 0


# ---- the training-memory breakdown against real tensors -------------------------------


@pytest.mark.parametrize("name", [pytest.param(name, id=name) for name in OPTIMIZER_CASES])
def test_fp32_breakdown_matches_real_tensors(name):
    model = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 8))
    optimizer = OPTIMIZER_CASES[name][0](model.parameters(), lr=1e-3)
    _take_one_step(model, optimizer)
    memory = training_memory(model, name, "fp32")
    assert memory.parameters == storage_bytes(*model.parameters())
    assert memory.gradients == storage_bytes(*(p.grad for p in model.parameters()))
    assert memory.master_weights == 0
    assert memory.optimizer_state == measure_optimizer_state_bytes(optimizer) - step_counter_bytes(optimizer)


@given(widths=st.lists(st.integers(1, 24), min_size=2, max_size=4), amsgrad=st.booleans())
def test_bf16_mixed_breakdown_matches_a_real_mixed_precision_step(widths, amsgrad):
    """bf16 weights and gradients for compute, fp32 master weights and Adam state for the update."""
    model = nn.Sequential(*(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))).to(torch.bfloat16)
    master = [p.detach().float().requires_grad_() for p in model.parameters()]
    optimizer = torch.optim.AdamW(master, lr=1e-3, amsgrad=amsgrad)
    model(torch.randn(5, widths[0], dtype=torch.bfloat16)).float().square().sum().backward()
    for copy, weight in zip(master, model.parameters()):
        copy.grad = weight.grad.float()
    optimizer.step()
    with torch.no_grad():
        for copy, weight in zip(master, model.parameters()):
            weight.copy_(copy)

    memory = training_memory(model, "adamw", "bf16-mixed", amsgrad=amsgrad)
    assert memory.parameters == storage_bytes(*model.parameters())
    assert memory.gradients == storage_bytes(*(p.grad for p in model.parameters()))
    assert memory.master_weights == storage_bytes(*master)
    assert memory.optimizer_state == measure_optimizer_state_bytes(optimizer) - step_counter_bytes(optimizer)


@pytest.mark.parametrize(
    "name, precision, dtype",
    [
        pytest.param(name, precision, dtype, id=f"{name}-{precision}")
        for name in OPTIMIZER_CASES
        for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
    ],
)
def test_bytes_per_parameter_match_real_tensors(name, precision, dtype):
    model = nn.Sequential(nn.Linear(12, 20), nn.Linear(20, 6)).to(dtype)
    optimizer = OPTIMIZER_CASES[name][0](model.parameters(), lr=1e-3)
    _take_one_step(model, optimizer)
    real = (
        storage_bytes(*model.parameters())
        + storage_bytes(*(p.grad for p in model.parameters()))
        + measure_optimizer_state_bytes(optimizer)
        - step_counter_bytes(optimizer)
    )
    memory = training_memory(model, name, precision)
    assert memory.bytes_per_parameter * parameter_count(model) == real
    assert str(memory).startswith(f"{parameter_count(model)} parameters, {name}, {precision}")


def test_frozen_parameters_get_no_gradient_or_state():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    model[0].requires_grad_(False)
    memory = training_memory(model, "adam", "fp32")
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert memory.parameters == storage_bytes(*model.parameters())
    assert memory.gradients == storage_bytes(*trainable)


def test_parameters_given_as_a_generator():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    assert training_memory(model.parameters(), "adam") == training_memory(model, "adam")


# ---- bad input ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, error, message",
    [
        pytest.param(lambda: optimizer_state_bytes(nn.Linear(2, 2), "lion"), AccountingError,
                     r"^optimizer must be one of .*got 'lion'", id="unknown-optimizer"),
        pytest.param(lambda: optimizer_state_bytes(nn.Linear(2, 2), "sgd", amsgrad=True), AccountingError,
                     r"^sgd has no setting 'amsgrad'", id="setting-of-another-optimizer"),
        pytest.param(lambda: optimizer_state_bytes(nn.Linear(2, 2), "sgd", momentum=-0.9), AccountingError,
                     r"^sgd setting momentum must be non-negative, got -0.9", id="negative-momentum"),
        pytest.param(lambda: optimizer_state_bytes(nn.Linear(2, 2), "adam", amsgrad=1), AccountingTypeError,
                     r"^adam setting amsgrad must be True or False, got 1", id="amsgrad-not-bool"),
        pytest.param(lambda: optimizer_state_bytes(torch.zeros(3), "adam"), AccountingTypeError,
                     r"^parameters must be an nn.Module or an iterable of tensors, got Tensor", id="bare-tensor"),
        pytest.param(lambda: optimizer_state_bytes([torch.zeros(3), "w"], "adam"), AccountingTypeError,
                     r"^parameters: item 1 must be a torch.Tensor, got str", id="not-a-tensor"),
        pytest.param(lambda: training_memory(10, "adam", "int8"), AccountingError,
                     r"^precision must be one of 'fp32', 'bf16-master', 'bf16-mixed', 'fp16-mixed', 'bf16-autocast', 'bf16', "
                     r"got 'int8'",
                     id="unknown-policy"),
        pytest.param(lambda: training_memory(-5), AccountingError,
                     r"^parameters must be a non-negative integer, got -5", id="negative-count"),
        pytest.param(lambda: training_memory(1.5e9), AccountingTypeError,
                     r"^parameters must be a count", id="float-count"),
        pytest.param(lambda: training_memory(10, activations=-1), AccountingError,
                     r"^activations must be a non-negative integer, got -1", id="negative-activations"),
        pytest.param(lambda: measure_optimizer_state_bytes({"state": {}}), AccountingTypeError,
                     r"^expected a torch.optim.Optimizer, got dict", id="not-an-optimizer"),
        pytest.param(lambda: parameter_count("model"), AccountingTypeError,
                     r"^model must be an nn.Module or an iterable of tensors, got str", id="count-a-string"),
    ],
)
def test_bad_input_raises_clear_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---- precision policies given as objects, names as users type them ----------------------


def test_a_policy_object_is_used_as_given():
    """A policy outside the table (everything in fp16), passed as an object, against a real fp16 step."""
    fp16 = PrecisionPolicy("fp16", "float16", "float16", None, "float16", "float16")
    model = nn.Sequential(nn.Linear(12, 20), nn.Linear(20, 6)).to(torch.float16)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    _take_one_step(model, optimizer)
    memory = training_memory(model, "sgd", fp16, momentum=0.9)
    assert memory.precision == "fp16"
    assert memory.parameters == storage_bytes(*model.parameters())
    assert memory.gradients == storage_bytes(*(p.grad for p in model.parameters()))
    assert memory.master_weights == 0
    assert memory.optimizer_state == measure_optimizer_state_bytes(optimizer)


def test_names_are_matched_ignoring_case_and_surrounding_spaces():
    model = nn.Linear(10, 5)
    optimizer = torch.optim.AdamW(model.parameters())
    _take_one_step(nn.Sequential(model), optimizer)
    assert optimizer_state_bytes(model, " AdamW ") == measure_optimizer_state_bytes(optimizer)
    memory = training_memory(model, " AdamW ", " BF16-Mixed ")
    assert (memory.optimizer, memory.precision) == ("adamw", "bf16-mixed")


# ---- wrong types: the named error, naming the value ---------------------------------------

_CONFIG = TransformerConfig(layers=1, width=4, heads=2, sequence_length=3, vocabulary=10)


@pytest.mark.parametrize(
    "call, error, message",
    [
        pytest.param(lambda: transformer_activation_bytes(_CONFIG, 1, "fp32", dropout=1), AccountingTypeError,
                     r"^dropout must be True or False, got 1$", id="dropout-int"),
        pytest.param(lambda: transformer_activation_bytes(_CONFIG, 1, "fp32", dropout="no"), AccountingTypeError,
                     r"^dropout must be True or False, got 'no'$", id="dropout-string"),
        pytest.param(lambda: transformer_training_memory(_CONFIG, 1, dropout=None), AccountingTypeError,
                     r"^dropout must be True or False, got None$", id="training-dropout-none"),
        pytest.param(lambda: transformer_activation_bytes({"layers": 1}, 1), AccountingTypeError,
                     r"^config must be a TransformerConfig, got dict$", id="config-dict"),
        pytest.param(lambda: transformer_activation_bytes(_CONFIG, 2.0), AccountingTypeError,
                     r"^batch_size must be a non-negative integer, got 2.0$", id="batch-float"),
        pytest.param(lambda: transformer_activation_bytes(_CONFIG, 0), AccountingError,
                     r"^batch_size must be a positive integer, got 0$", id="batch-zero"),
        pytest.param(lambda: precision_policy(16), AccountingTypeError,
                     r"^precision must be a policy name such as 'bf16-mixed', got 16$", id="precision-int"),
        pytest.param(lambda: training_memory(10, "adam", None), AccountingTypeError,
                     r"^precision must be a policy name such as 'bf16-mixed', got None$", id="precision-none"),
        pytest.param(lambda: training_memory(10, optimizer=None), AccountingTypeError,
                     r"^optimizer must be a name such as 'adam', got None$", id="optimizer-none"),
        pytest.param(lambda: training_memory(10, "sgd", momentum="0.9"), AccountingTypeError,
                     r"^sgd setting momentum must be a real number, got '0.9'$", id="momentum-string"),
        pytest.param(lambda: training_memory(10, "rmsprop", centered=0), AccountingTypeError,
                     r"^rmsprop setting centered must be True or False, got 0$", id="centered-int"),
        pytest.param(lambda: training_memory(10, transient=2.5), AccountingTypeError,
                     r"^transient must be a non-negative integer, got 2.5$", id="transient-float"),
        pytest.param(lambda: training_memory(10, activations=-1), AccountingError,
                     r"^activations must be a non-negative integer, got -1$", id="activations-negative"),
        pytest.param(lambda: training_memory(True), AccountingTypeError,
                     r"^parameters must be a count, a TransformerConfig, an nn.Module or tensors, got True$",
                     id="count-bool"),
        pytest.param(lambda: training_memory("1e9"), AccountingTypeError,
                     r"^parameters must be a count, a TransformerConfig, an nn.Module or tensors, got '1e9'$",
                     id="count-string"),
        pytest.param(lambda: parameter_count([torch.zeros(2), 3]), AccountingTypeError,
                     r"^model: item 1 must be a torch.Tensor, got int: 3$", id="count-item"),
        pytest.param(lambda: optimizer_state_bytes(nn.Linear(2, 2), "adam", lr=0.1), AccountingError,
                     r"^adam has no setting 'lr' that affects memory \(accepted: amsgrad, fused\)$",
                     id="setting-without-memory"),
    ],
)
def test_wrong_types_raise_the_named_error_with_the_value(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("name", [pytest.param(name, id=name) for name in ("adam", "adagrad")])
def test_fused_step_counters_stay_float32_under_a_float64_default(name):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model = nn.Sequential(nn.Linear(4, 3))
        optimizer = OPTIMIZER_CASES[name][0](model.parameters(), lr=1e-3, fused=True)
        _take_one_step(model, optimizer)
        assert measure_optimizer_state_bytes(optimizer) == optimizer_state_bytes(model, name, fused=True)
        assert optimizer_state_bytes(model, name, fused=True) < optimizer_state_bytes(model, name)
    finally:
        torch.set_default_dtype(previous)


def test_a_tensor_listed_twice_is_counted_once():
    """Tied weights gathered from two modules' parameter lists: one tensor, one state, as in torch."""
    embedding = nn.Embedding(10, 4)
    head = nn.Linear(4, 10)
    head.weight = embedding.weight
    model = nn.ModuleList([embedding, head])  # torch lists the tied weight once
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model[1](model[0](torch.tensor([1, 2, 3]))).square().sum().backward()
    optimizer.step()
    listed = [*embedding.parameters(), *head.parameters()]
    assert len(listed) == 3 and listed[0] is listed[1]
    assert optimizer_state_bytes(listed, "adam") == measure_optimizer_state_bytes(optimizer)
    assert training_memory(listed, "adam") == training_memory(model, "adam")


def test_defaults_are_the_documented_ones():
    """training_memory: Adam in fp32; transformer_training_memory and transformer_activation_bytes:
    bf16-mixed (Adam), no dropout."""
    assert transformer_activation_bytes(_CONFIG, 2) == transformer_activation_bytes(_CONFIG, 2, "bf16-mixed", False)
    plain = training_memory(1000)
    assert (plain.optimizer, plain.precision) == ("adam", "fp32")
    memory = transformer_training_memory(_CONFIG, 2)
    assert (memory.optimizer, memory.precision) == ("adam", "bf16-mixed")
    assert memory == transformer_training_memory(_CONFIG, 2, "adam", "bf16-mixed", dropout=False)


# ---- the two meanings of bf16 mixed precision, against real steps ---------------------------


def test_bf16_mixed_is_bf16_master():
    """The first name of the master-copy policy keeps its meaning: every part laid out the same."""
    master, mixed = precision_policy("bf16-master"), precision_policy("bf16-mixed")
    assert [getattr(master, f) for f in ("weights", "gradients", "master_weights", "optimizer_state")] == [
        getattr(mixed, f) for f in ("weights", "gradients", "master_weights", "optimizer_state")]
    assert training_memory(1000, "adamw", "bf16-master").peak == training_memory(1000, "adamw", "bf16-mixed").peak


def test_bf16_autocast_breakdown_matches_a_real_autocast_step():
    """torch.autocast keeps fp32 weights, gradients and AdamW state: no master copy."""
    model = nn.Sequential(nn.Linear(12, 20), nn.Linear(20, 6))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output = model(torch.randn(5, 12))
    assert output.dtype == torch.bfloat16
    output.float().square().sum().backward()
    optimizer.step()
    memory = training_memory(model, "adamw", "bf16-autocast")
    assert memory.parameters == storage_bytes(*model.parameters())
    assert memory.gradients == storage_bytes(*(p.grad for p in model.parameters()))
    assert memory.master_weights == 0
    assert memory.optimizer_state == measure_optimizer_state_bytes(optimizer) - step_counter_bytes(optimizer)


# ---- sharded model states ----------------------------------------------------------------


@pytest.mark.parametrize(
    "sharding, parts",
    [
        pytest.param(None, (), id="none"),
        pytest.param("ddp", (), id="ddp"),
        pytest.param("zero1", ("master_weights", "optimizer_state"), id="zero1"),
        pytest.param("shard_grad_op", ("gradients", "master_weights", "optimizer_state"), id="zero2"),
        pytest.param("full_shard", ("parameters", "gradients", "master_weights", "optimizer_state"), id="zero3"),
    ],
)
def test_sharding_divides_the_partitioned_parts(sharding, parts):
    devices = 4
    whole = training_memory(10**6, "adamw", "bf16-master")
    split = training_memory(10**6, "adamw", "bf16-master", sharding=sharding, devices=devices)
    for part in ("parameters", "gradients", "master_weights", "optimizer_state"):
        expected = getattr(whole, part) // devices if part in parts else getattr(whole, part)
        assert getattr(split, part) == expected, part


def test_zero3_holds_what_fsdp2_gathers_in_each_phase():
    """FSDP2 wrapping each block and the root (measured per phase on 2 gloo ranks in test_parallel_measured.py):
    at the start of backward the root's weights (embedding, final norm, head), in a block's backward the root,
    the block, the next block prefetched and the block's gradients but its attention's and input norm's, nothing
    in the update; counted from the Hugging Face model's own modules."""
    from tests.support.hf_models import build_hf_model

    model, config = build_hf_model("llama")
    sharded = transformer_training_memory(config, 2, "adamw", "bf16-master", sharding="zero3", devices=8)
    replicated = transformer_training_memory(config, 2, "adamw", "bf16-master", sharding="zero2", devices=8)
    layer = model.model.layers[0]
    block = sum(p.numel() for p in layer.parameters())
    attention = sum(p.numel() for module in (layer.self_attn, layer.input_layernorm) for p in module.parameters())
    root = sum(p.numel() for name, p in model.named_parameters() if ".layers." not in name)
    assert sharded.gathered_phases == {"forward end": 2 * root,
                                       "block backward": 2 * (root + 2 * block) + 2 * (block - attention)}
    assert replicated.gathered_phases == {} and replicated.gathered == 0
    assert sharded.gathered == sharded.gathered_phases[sharded.peak_phase]
    assert sharded.phases["update"] == sharded.gradients + sharded.update  # nothing gathered in the update


@pytest.mark.parametrize(
    "call, error, message",
    [
        pytest.param(lambda: training_memory(10, sharding="zero4", devices=2), AccountingError,
                     r"^sharding must be one of .*got 'zero4'$", id="unknown-sharding"),
        pytest.param(lambda: training_memory(10, sharding="zero3", devices=0), AccountingError,
                     r"^devices must be a positive integer, got 0$", id="no-devices"),
        pytest.param(lambda: transformer_training_memory(_CONFIG, 1, attention="flash"), AccountingError,
                     r"^attention must be one of 'eager', 'sdpa', 'sdpa-flash', 'sdpa-efficient', 'sdpa-cudnn', 'sdpa-math', got 'flash'$", id="unknown-attention"),
        pytest.param(lambda: transformer_training_memory(_CONFIG, 1, recompute=True), AccountingError,
                     r"^recompute must be one of 'none', 'full', got True$", id="recompute-bool"),
        pytest.param(lambda: transformer_activation_bytes(_CONFIG, 1, gelu="tanh"), AccountingError,
                     r"^gelu must be one of 'fused', 'unfused', got 'tanh'$", id="unknown-gelu"),
    ],
)
def test_bad_step_settings_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()
