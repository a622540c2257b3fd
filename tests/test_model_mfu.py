"""The training-step benchmark's parts, against independent truths.

- FLOPs: ``FlopCounterMode`` on the model's step equals :func:`transformer_flops` (model
  FLOPs) without recomputation, and :func:`hardware_flops` with it; checkpointing with torch's
  early stop off recomputes every block's whole forward (``transformer_flops(embeddings=False)``).
- MFU and HFU: the arithmetic from a measurement's own fields, and HFU/MFU = hardware/model FLOPs.
- Memory: saved activations against :func:`transformer_activation_bytes` (live-tensor tracker).
- Bad input: named errors. GPU paths: fakes for torch.cuda.
- The model's numbers: its logits are those of torch's own pre-norm layer given the same weights,
  ``nn.TransformerEncoderLayer(norm_first=True, activation="gelu")`` with a causal mask (GPT-2's block is
  exactly that layer); the loss is torch's cross entropy over every position.
- Named sizes: the model torch builds from a size (on ``meta``: shapes only) shows every override, its MLP
  4 × the width it ends up with.
- The step: torch's own dtypes and devices of the built model and batch, its float32 matmul precision as
  read inside the model's forward, and messages that name the offending value.
"""

from types import SimpleNamespace

import pytest
import torch
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from jaxtyping import jaxtyped
from torch import nn
from torch.utils.checkpoint import set_checkpoint_early_stop

from accounting import (
    AccountingError,
    AccountingTypeError,
    LiveTensorBytes,
    TransformerConfig,
    count_flops,
    transformer_activation_bytes,
    transformer_flops,
)
from torch.utils._python_dispatch import TorchDispatchMode

from accounting.hardware.devices import DeviceInfo
from accounting.hardware.precision import float32_matmul_mode
from accounting.model_mfu import (
    GPT,
    _peak_memory,
    build_training_step,
    check_ceiling,
    check_fits,
    check_peak_memory,
    hardware_flops,
    language_model_loss,
    measure_training_step,
    model_size,
)
from accounting.model_mfu import measure as measure_module
from accounting.model_mfu import step as step_module
from accounting.model_mfu.kernels import FUSED_KERNELS
from accounting.model_mfu.measure import ModelMeasurement
from accounting.model_mfu.sizes import MODEL_SIZES
from accounting.model_mfu.step import LEARNING_RATE, TrainingStep, check_step_device, predicted_peak_bytes
from accounting.timing import MEMORY_FRACTION
from tests.support.strategies_training import transformer_configs

STEP_EXAMPLES = settings(max_examples=8)  # each builds a model; the case tables and the pin add more


def _meta_step_flops(config, batch_size, recompute=False) -> int:
    """FlopCounterMode's count of forward + backward on meta tensors (no arithmetic done).

    A head width or sequence length of 1 turns an attention einsum into an elementwise
    product (torch's ``mul``, not matmul work): the formula's convention holds from 2 up.
    """
    assume(config.head_width > 1 and config.sequence_length > 1)
    with torch.device("meta"):
        model = GPT(config, recompute=recompute)
        tokens = torch.randint(0, config.vocabulary, (batch_size, config.sequence_length))
    return count_flops(lambda: language_model_loss(model(tokens), tokens).backward()).total


@STEP_EXAMPLES
@given(config=transformer_configs(max_layers=3, max_width=48, max_length=24), batch_size=st.integers(1, 3))
@example(config=TransformerConfig(layers=12, width=768, heads=12, sequence_length=1024, vocabulary=50257), batch_size=12)
def test_model_flops_equal_flop_counter(config, batch_size):
    assert _meta_step_flops(config, batch_size) == transformer_flops(config, batch_size).training


@STEP_EXAMPLES
@given(config=transformer_configs(max_layers=3, max_width=48, max_length=24), batch_size=st.integers(1, 3))
def test_hardware_flops_with_recomputation_equal_flop_counter(config, batch_size):
    counted = _meta_step_flops(config, batch_size, recompute=True)
    assert counted == hardware_flops(config, batch_size, recompute=True)
    with set_checkpoint_early_stop(False):  # every block's forward recomputed, its last matmul too
        full = _meta_step_flops(config, batch_size, recompute=True)
    assert full == transformer_flops(config, batch_size).training + transformer_flops(
        config, batch_size, embeddings=False).forward


def _attention_ops(step) -> set:
    """The attention operators torch dispatches in one step (its own record, not the package's counter)."""
    seen = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    with Record():
        step()
    return {name for name in seen if "attention" in name or name == "aten.bmm"}


@pytest.mark.parametrize("name", ["tiny", "tiny-llama"])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_the_real_step_counts_what_the_formula_says(name, attention):
    """On the CPU, for real: time_fn's count of a training step (optimizer included) is the model FLOPs, plus,
    where torch ran a fused attention kernel, the QKᵀ its backward computes again; the kernel named is the one
    torch dispatched."""
    step = build_training_step(model_size(name, layers=1, seq=16), precision="fp32", attention=attention)
    result = measure_training_step(step, device="cpu", peak_flops=1e12, warmup=1, repeats=1)
    config = step.size.config
    assert result.model_flops == transformer_flops(config, 4).training
    assert result.hardware_flops == hardware_flops(config, 4, False, result.attention_kernel)
    fused = {op for op in _attention_ops(step) if op.startswith("aten._scaled_dot_product") and "backward" not in op}
    if attention == "eager":
        assert result.attention_kernel == "eager" and not fused and result.hardware_flops == result.model_flops
    elif fused:
        assert [result.attention_kernel] == [FUSED_KERNELS[op] for op in fused]
        assert result.hardware_flops - result.model_flops == 2 * 4 * config.heads * 16 * 16 * config.head_width
    else:  # the math kernel: matmuls, the model's FLOPs exactly
        assert result.attention_kernel == "math" and result.hardware_flops == result.model_flops


def test_mfu_and_hfu_arithmetic_on_a_checkpointed_step():
    step = build_training_step(model_size("tiny", layers=2, seq=32), precision="fp32", recompute=True,
                               attention="eager")
    peak = 2e11
    result = measure_training_step(step, device="cpu", peak_flops=peak, warmup=1, repeats=2)
    config, batch = step.size.config, step.size.batch_size
    assert result.model_flops == transformer_flops(config, batch).training
    assert result.hardware_flops == hardware_flops(config, batch, True, result.attention_kernel) > result.model_flops
    assert result.mfu == pytest.approx(result.model_flops / result.median_s / peak)
    assert result.hfu == pytest.approx(result.hardware_flops / result.median_s / peak)
    assert result.hfu / result.mfu == pytest.approx(result.hardware_flops / result.model_flops)
    assert result.tokens_per_s == pytest.approx(batch * config.sequence_length / result.median_s)
    assert result.as_dict()["hfu"] == result.hfu and result.as_dict()["recompute"] is True
    check_peak_memory(result)  # recomputation: only the upper end of the band applies
    assert 0.9 <= result.memory_ratio <= 1  # a prediction of the recomputing step (0.92 here), not a loose bound


def test_a_recomputing_bf16_step_is_predicted_within_a_few_percent():
    """The prediction with recomputation against a measured bf16-mixed step (measured/predicted 0.98 here; the
    prediction without recomputation, an upper bound, read 0.67 at the "small" size)."""
    step = build_training_step(model_size("tiny", layers=2, seq=32), precision="bf16-mixed", recompute=True)
    result = measure_training_step(step, device="cpu", peak_flops=2e11, warmup=1, repeats=1)
    assert 0.95 <= result.memory_ratio <= 1.05


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("name", ["tiny", "tiny-llama"])
def test_saved_activations_of_the_einops_model(name, attention, precision):
    """What a forward keeps for backward (live-tensor tracker) against the formula of the attention that ran.

    Exact (but for the loss's scalars) for the Llama family with either attention and for GPT-2 with eager
    attention (bf16: CPU LayerNorm keeps bf16 statistics where the formula counts fp32). GPT-2 with SDPA keeps two
    (tokens × width) tensors a layer fewer than the formula counts: the formula counts Hugging Face's default step,
    whose key-value cache (on in training too) saves contiguous copies of K and V while Q, a view of the fused
    projection, keeps it alive (tests/test_training_memory_gpt2_sdpa.py measures both); this model has no cache
    and saves what Hugging Face's GPT-2 block saves without it (the next test). ``PEAK_MEMORY_BAND`` allows it.
    """
    config = model_size(name, layers=2, seq=32).config
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    model = GPT(config, attention=attention).to(dtype)
    tokens = torch.randint(0, config.vocabulary, (3, 32))
    with LiveTensorBytes() as live:
        loss = language_model_loss(model(tokens), tokens)
        saved = live.current
    del loss
    predicted = transformer_activation_bytes(config, 3, precision, attention=attention)
    if name == "tiny" and attention == "sdpa":  # Hugging Face's cache copies of K and V, a layer
        predicted -= config.layers * 2 * (3 * 32) * config.attention_width * dtype.itemsize
    layernorm_bf16 = name == "tiny" and dtype == torch.bfloat16
    assert saved == pytest.approx(predicted, rel=0.02 if layernorm_bf16 else 1e-3, abs=64)


def _saved_storages(fn) -> list:
    """(shape, bytes) of every storage a call saves for backward, by ``saved_tensors_hooks``."""
    seen = {}

    def pack(tensor):
        seen[tensor.untyped_storage().data_ptr()] = (tuple(tensor.shape), tensor.untyped_storage().nbytes())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return sorted(seen.values())


def test_a_gpt2_block_with_sdpa_saves_what_hugging_faces_gpt2_block_saves():
    transformers = pytest.importorskip("transformers")
    config = TransformerConfig(layers=1, width=64, heads=4, sequence_length=32, vocabulary=100)
    theirs = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=64, n_head=4, n_positions=32, vocab_size=100, attn_pdrop=0.0, resid_pdrop=0.0,
        embd_pdrop=0.0, activation_function="gelu", attn_implementation="sdpa")).transformer.h[0]
    x = torch.randn(3, 32, 64, requires_grad=True)
    assert _saved_storages(lambda: GPT(config).blocks[0](x)) == _saved_storages(lambda: theirs(x))


def test_the_model_is_shape_checked_under_jaxtyping():
    config = TransformerConfig(layers=1, width=16, heads=2, sequence_length=8, vocabulary=32)
    model = GPT(config)
    beartype = pytest.importorskip("beartype").beartype   # a test extra: skipped, not a collection error
    checked = jaxtyped(typechecker=beartype)(GPT.forward)
    assert checked(model, torch.zeros(2, 8, dtype=torch.long)).shape == (2, 8, 32)
    with pytest.raises(Exception, match="tokens"):
        checked(model, torch.zeros(2, 8))  # floats are not token ids


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed", "bf16"])
def test_every_policy_trains_and_lays_out_memory_as_predicted(precision):
    step = build_training_step(model_size("tiny", layers=1, seq=32), precision=precision)
    before = [p.detach().clone() for p in step.model.parameters()]
    result = measure_training_step(step, device="cpu", peak_flops=1e12, warmup=1, repeats=1)
    assert any(not torch.equal(a, p) for a, p in zip(before, step.model.parameters()))  # the weights moved
    assert all(p.grad is None for p in step.model.parameters())  # zero_grad: nothing outlives the step
    assert {p.dtype for p in step.model.parameters()} == {torch.float32 if precision == "fp32" else torch.bfloat16}
    assert (step.master is not None) == (precision == "bf16-mixed")
    check_peak_memory(result)


# ---- bad input -------------------------------------------------------------------------------


def test_a_model_on_another_device_than_stated():
    step = build_training_step(model_size("tiny", layers=1, seq=8), precision="fp32")
    with pytest.raises(AccountingError, match=r"^the model's parameters are on cpu but device='cuda:0' was given$"):
        measure_training_step(step, device="cuda:0", peak_flops=1e12)


def test_a_config_that_does_not_fit_memory_is_refused_before_allocating(monkeypatch):
    monkeypatch.setattr(step_module, "free_memory_bytes", lambda device: 2**30)
    with pytest.raises(AccountingError, match=r"^gpt2-small: 12 layers, width 768, .* in bf16-mixed needs [0-9.]+ GiB "
                                              r"at its predicted peak, but cpu has 1.00 GiB free"):
        build_training_step(model_size("gpt2-small"), precision="bf16-mixed")
    assert check_fits(model_size("tiny"), "fp32", "cpu", free_bytes=2**30) > 0


@pytest.mark.parametrize("call, error, message", [
    pytest.param(lambda: model_size("medium"), AccountingError,
                 r"^model size must be one of 'tiny', 'small', 'gpt2-small', 'tiny-llama', 'tinyllama-1.1b', got 'medium'", id="unknown-size"),
    pytest.param(lambda: model_size("tiny", heads=5), AccountingError, r"^heads=5 does not divide width=64",
                 id="heads-do-not-divide"),
    pytest.param(lambda: model_size("tiny", batch=0), AccountingError, r"^batch must be a positive integer, got 0",
                 id="zero-batch"),
    pytest.param(lambda: build_training_step(model_size("tiny"), precision="fp16-mixed"), AccountingError,
                 r"^precision of a training step must be one of 'fp32', 'bf16-mixed', 'bf16', got 'fp16-mixed'",
                 id="fp16-needs-loss-scaling"),
    pytest.param(lambda: build_training_step("tiny"), AccountingTypeError,
                 r"^size must be a ModelSize \(see model_size\), got 'tiny'", id="size-by-name"),
    pytest.param(lambda: GPT(model_size("tiny").config)(torch.zeros(1, 65, dtype=torch.long)), AccountingError,
                 r"^tokens have 65 positions but the model was built for sequence_length=64", id="too-long"),
    pytest.param(lambda: measure_training_step(lambda: None), AccountingError,
                 r"^step must be a TrainingStep", id="not-a-step"),
])
def test_bad_input_is_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


def _measurement(**changes) -> ModelMeasurement:
    fields = dict(size=model_size("tiny"), precision="fp32", recompute=False, device="fake", device_kind="cpu",
                  dtype="float32", median_s=1.0, iqr_s=0.0, repeats=3, model_flops=10**12, hardware_flops=10**12,
                  peak_flops=2e12, measured_peak_bytes=110, predicted_peak_bytes=100, flop_count_seconds=0.1)
    return ModelMeasurement(**{**fields, **changes})


@pytest.mark.parametrize("changes, message", [
    pytest.param({"measured_peak_bytes": 140}, r"measured peak 140 bytes is 1.400 x the predicted 100 bytes; "
                                               r"allowed \[0.93, 1.3\]$", id="above"),
    pytest.param({"measured_peak_bytes": 90}, r"is 0.900 x the predicted", id="below"),
    pytest.param({"measured_peak_bytes": 140, "recompute": True}, r"allowed at most 1.3 \(recomputation\)$",
                 id="above-with-recomputation"),
])
def test_peak_memory_outside_the_band_fails(changes, message):
    with pytest.raises(AccountingError, match=message):
        check_peak_memory(_measurement(**changes))


def test_peak_memory_inside_the_band_passes():
    check_peak_memory(_measurement(measured_peak_bytes=96))
    check_peak_memory(_measurement(measured_peak_bytes=20, recompute=True))


def test_mfu_or_hfu_above_the_ceiling_fails():
    check_ceiling(_measurement(median_s=0.5))  # MFU 1.0
    with pytest.raises(AccountingError, match=r"MFU 1.111 exceeds 1.05"):
        check_ceiling(_measurement(median_s=0.45))
    with pytest.raises(AccountingError, match=r"HFU 1.250 exceeds 1.05"):
        check_ceiling(_measurement(hardware_flops=int(1.25e12), median_s=0.5, recompute=True))
    assert _measurement(peak_flops=None).mfu is None


# ---- CUDA paths, with fakes ------------------------------------------------------------------


def test_cuda_peak_memory_is_max_allocated_less_what_was_there(monkeypatch):
    log = []
    allocated = {"now": 1000, "max": 1000}
    monkeypatch.setattr(_peak_memory, "synchronize", lambda device: log.append(f"sync {device}"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: log.append(f"reset {device}"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: allocated["now"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: allocated["max"])
    with _peak_memory.PeakMemory("cuda:1") as memory:
        allocated["max"] = 5096  # the block's high-water mark
    assert memory.peak == 4096
    assert log == ["sync cuda:1", "reset cuda:1", "sync cuda:1"]  # synchronized before reading the counters


def test_fp32_steps_on_cuda_turn_tf32_off(monkeypatch):
    """The FP32 peak is the divisor, so a CUDA fp32 step runs plain FP32 (TF32 off) whatever the global flag."""
    step = build_training_step(model_size("tiny", layers=1, seq=8), precision="fp32")
    seen = []

    class FakeMode:
        def __init__(self, *, tf32):
            seen.append(tf32)

        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            return None

    monkeypatch.setattr(step_module, "float32_matmul_mode", FakeMode)
    monkeypatch.setattr(type(step), "device", property(lambda self: torch.device("cuda", 0)))
    step()
    assert seen == [False]


def test_measure_takes_the_table_peak_of_the_policy_dtype(monkeypatch):
    asked = []
    monkeypatch.setattr(measure_module, "device_peak_flops", lambda info, dtype: asked.append(dtype) or 1e12)
    info = DeviceInfo("cpu", "fake CPU", None, 2**30, cpu_flags=frozenset({"avx2", "fma"}), cores=1, clock_ghz=1.0)
    step = build_training_step(model_size("tiny", layers=1, seq=8), precision="bf16-mixed")
    result = measure_training_step(step, device="cpu", warmup=1, repeats=1, info=info)
    assert asked == ["bfloat16"] and result.peak_flops == 1e12 and result.device == "fake CPU"


# ---- the reference GPT's numbers (model_mfu.gpt) -----------------------------------------------------------

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


# ---- named sizes (model_mfu.sizes) -------------------------------------------------------------------------


def _shapes(size) -> dict:
    with torch.device("meta"):
        model = GPT(size.config)
    return {name: tuple(parameter.shape) for name, parameter in model.named_parameters()}


@pytest.mark.parametrize("overrides", [dict(width=32), dict(width=32, vocabulary=100), dict(layers=3, seq=16),
                                       dict(heads=2, vocabulary=50)])
def test_every_override_reaches_the_model_and_the_mlp_stays_four_times_the_width(overrides):
    base = MODEL_SIZES["tiny"].config
    shapes = _shapes(model_size("tiny", **overrides))
    width = overrides.get("width", base.width)
    vocabulary = overrides.get("vocabulary", base.vocabulary)
    assert shapes["token_embedding.weight"] == (vocabulary, width)
    assert shapes["position_embedding"] == (overrides.get("seq", base.sequence_length), width)
    assert shapes["blocks.0.up.weight"] == (4 * width, width) and shapes["blocks.0.down.weight"] == (width, 4 * width)
    assert sum(name.endswith(".up.weight") for name in shapes) == overrides.get("layers", base.layers)


@pytest.mark.parametrize("call, error, message", [
    pytest.param(lambda: model_size(3), AccountingTypeError, "model size must be a name such as 'tiny', got 3",
                 id="name-not-text"),
    pytest.param(lambda: model_size("tiny", layers=0), AccountingError, "layers must be a positive integer, got 0",
                 id="layers-0"),
    pytest.param(lambda: model_size("tiny", vocabulary=0), AccountingError,
                 "vocabulary must be a positive integer, got 0", id="vocabulary-0"),
])
def test_bad_sizes_are_named_with_their_value(call, error, message):
    with pytest.raises(error) as caught:
        call()
    assert str(caught.value) == message


# ---- the training step (model_mfu.step) --------------------------------------------------------------------

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


def test_cuda_without_an_index_is_the_device_the_step_is_on():
    """A step on cuda:1 measured with device="cuda" is timed and measured on cuda:1 (whatever the current device),
    and a batch left on another CUDA device is named."""
    on = lambda index: torch.device("cuda", index)  # noqa: E731
    step = SimpleNamespace(device=on(1), tokens=SimpleNamespace(device=on(1)))
    assert check_step_device(step, "cuda") == on(1)
    assert check_step_device(step, "cuda:1") == on(1)
    split = SimpleNamespace(device=on(1), tokens=SimpleNamespace(device=on(0)))
    with pytest.raises(AccountingError) as caught:
        check_step_device(split, "cuda")
    assert str(caught.value) == "the tokens are on cuda:0 but device='cuda' was given"


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
