"""The plan's numbers, against the library functions they come from and against torch and transformers.

Truths: the memory functions (``transformer_training_memory`` with ``sharded_model_states``)
for every fit decision and micro-batch choice; ``FlopCounterMode`` on the Hugging Face model
built from the same config.json on the meta device for FLOPs per step; that model's own
parameters for the parameter count; the peak table for the device.
"""

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from accounting.model.activations import ATTENTIONS, RECOMPUTES
from accounting.model.attention_kernels import AttentionDevice
from accounting.errors import AccountingError, AccountingTypeError
from accounting.hardware.peaks import find_chip, peak_flops
from accounting.plan import PlanSettings, make_plan, plan_device, plan_document, render_plan
from accounting.plan.compute import LARGEST_MICRO_BATCH
from accounting.plan.devices import TORCH_CAPACITIES, PlanDevice
from accounting.model.sharding import SHARDINGS
from accounting.model.training_memory import transformer_training_memory
from accounting.model.config import TransformerConfig
from tests.support.hf_models import hf_config, model_from_config_json
from tests.support.published_configs import PUBLISHED

GPT2_SMALL = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024,
              "vocab_size": 50257, "n_inner": None, "activation_function": "gelu_new", "bos_token_id": 50256,
              "eos_token_id": 50256, "tie_word_embeddings": True}
"""GPT-2 small's config.json (openai-community/gpt2), the keys that size it."""

LLAMA_3_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
              "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
              "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}
"""Llama-3-8B's config.json (meta-llama/Meta-Llama-3-8B), the keys that size it."""

TINY_LLAMA = {**LLAMA_3_8B, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 32}
TINY_GPT2 = {**GPT2_SMALL, "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 32, "vocab_size": 128,
             "bos_token_id": None, "eos_token_id": None}

H100 = plan_device("H100 SXM", "bfloat16")


def expected_peak(config, micro_batch, settings: PlanSettings, device=H100) -> int:
    """Per-device peak from the library's memory function, called as a user would call it (SDPA's kernel
    chosen for the device's compute capability, an A100's where the device's is not known)."""
    capability = device.attention_device or AttentionDevice("cuda", (8, 0))
    return transformer_training_memory(
        config, micro_batch, optimizer=settings.optimizer, precision=settings.precision, attention=settings.attention,
        recompute=settings.recompute, sharding=settings.sharding, devices=settings.devices, device=capability,
    ).peak


def fits(config, micro_batch, settings, device=H100) -> bool:
    return expected_peak(config, micro_batch, settings, device) <= device.memory_bytes * (1 - settings.headroom)


# ---- memory and fit decisions, against the memory functions -------------------------------------

plan_settings = st.builds(
    PlanSettings,
    devices=st.sampled_from([1, 2, 3, 8, 64, 512]),
    sharding=st.sampled_from(SHARDINGS),
    precision=st.sampled_from(["fp32", "bf16-mixed", "fp16-mixed", "bf16"]),
    optimizer=st.sampled_from(["adamw", "sgd", "adagrad"]),
    attention=st.sampled_from(ATTENTIONS),
    recompute=st.sampled_from(RECOMPUTES),
    headroom=st.sampled_from([0.0, 0.1, 0.25]),
)


models = st.sampled_from([(GPT2_SMALL, 256), (GPT2_SMALL, 1024), (LLAMA_3_8B, 512), (LLAMA_3_8B, 4096)])
"""A config.json and a sequence length it can run (GPT-2's learned positions stop at 1024)."""


@settings(max_examples=25)
@given(plan_settings, models, st.integers(1, 64))
def test_fit_and_micro_batch_are_the_memory_functions_decisions(settings_, model, per_device):
    hf, sequence_length = model
    config = TransformerConfig.from_hf(hf, sequence_length=sequence_length)
    plan = make_plan(config, H100, settings_, global_batch=per_device * settings_.devices)
    assert plan.memory.peak == expected_peak(config, plan.micro_batch, settings_)
    divisors = [size for size in range(1, per_device + 1) if per_device % size == 0]
    fitting = [size for size in divisors if fits(config, size, settings_)]
    assert plan.fits == bool(fitting)
    assert plan.micro_batch == (fitting[-1] if fitting else 1)
    assert plan.accumulation_steps * plan.micro_batch * settings_.devices == plan.global_batch
    largest = plan.largest_micro_batch
    assert largest == 0 or fits(config, largest, settings_)
    assert largest == per_device or not fits(config, largest + 1, settings_)


@settings(max_examples=15)
@given(plan_settings, models)
def test_without_a_global_batch_each_device_runs_the_largest_micro_batch_that_fits(settings_, model):
    hf, sequence_length = model
    config = TransformerConfig.from_hf(hf, sequence_length=sequence_length)
    plan = make_plan(config, H100, settings_)
    largest = plan.largest_micro_batch
    assert plan.fits == (largest > 0)
    assert plan.micro_batch == max(largest, 1) and plan.accumulation_steps == 1 and not plan.batch_given
    assert plan.fits == (f"the largest micro-batch that fits is {largest}, which each device runs (no --global-batch)"
                         in render_plan(plan, "x"))
    assert plan.global_batch == plan.micro_batch * settings_.devices
    if largest:
        assert fits(config, largest, settings_) and (largest == LARGEST_MICRO_BATCH
                                                     or not fits(config, largest + 1, settings_))


def test_a_model_whose_states_alone_do_not_fit_says_so_and_how_many_devices_would_do():
    config = TransformerConfig.from_hf(LLAMA_3_8B, sequence_length=1024)
    a10 = plan_device("A10", "bfloat16")
    settings_ = PlanSettings(devices=1, sharding="ddp")
    plan = make_plan(config, a10, settings_, global_batch=8)
    assert not plan.fits
    states = 16 * config.parameter_count  # mixed-precision AdamW: 2 + 2 + 4 + 4 + 4 bytes per parameter
    assert plan.reasons[0] == (f"model states alone need {states / 2**30:.2f} GiB per device under ddp on 1 device, "
                               f"more than A10's {24e9 * 0.9 / 2**30:.2f} GiB usable (90% of 24 GB)")
    fewest = int(plan.reasons[1].rpartition("from ")[2].split()[0])
    zero3 = [PlanSettings(devices=n, sharding="zero3") for n in (fewest - 1, fewest)]
    assert not fits(config, 1, zero3[0], a10) and fits(config, 1, zero3[1], a10)


A100 = plan_device("NVIDIA A100-SXM4-80GB", "bfloat16")


@pytest.mark.parametrize("beyond_fewest", [-1, 0, 5])
def test_zero3_is_named_when_it_would_fit_on_these_devices_or_how_many(beyond_fewest):
    config = TransformerConfig.from_hf(LLAMA_3_8B, sequence_length=1024)
    fewest = next(n for n in range(1, 64) if fits(config, 1, PlanSettings(devices=n, sharding="zero3"), A100))
    devices = fewest + beyond_fewest
    plan = make_plan(config, A100, PlanSettings(devices=devices, sharding="ddp"), global_batch=devices)
    assert not plan.fits and plan.reasons[0].startswith("model states alone need")
    if fewest <= devices:
        assert plan.reasons[1] == (f"with --sharding zero3, one sequence per device fits on these {devices} devices "
                                   f"(from {fewest})")
    else:
        assert plan.reasons[1] == f"under zero3, one sequence per device fits from {fewest} devices"


def test_a_remedy_already_taken_is_not_offered():
    config = TransformerConfig.from_hf(LLAMA_3_8B, sequence_length=16384)
    settings_ = PlanSettings(devices=8, sharding="zero3", attention="sdpa", recompute="full")
    plan = make_plan(config, plan_device("A10", "bfloat16"), settings_, global_batch=8)
    assert not plan.fits
    assert not any(reason.startswith("with --recompute") or reason.startswith("with --attention")
                   for reason in plan.reasons)


def gpt2_xl(sequence_length=1024):
    return TransformerConfig.from_hf({**GPT2_SMALL, "n_layer": 48, "n_embd": 1600, "n_head": 25},
                                     sequence_length=sequence_length)


@pytest.mark.parametrize(("memory_gb", "devices"), [(24, 1), (48, 1), (24, 2), (16, 4), (20, 2), (16, 8)])
def test_the_reason_names_the_model_states_exactly_when_they_alone_do_not_fit(memory_gb, devices):
    """GPT-2 XL's 1.6B parameters take 23 GiB of model states: more than a 24 GB device holds, less than twice it."""
    config, chip = gpt2_xl(), plan_device("a device", "bfloat16", memory_gb=memory_gb, peak_tflops=100)
    settings_ = PlanSettings(devices=devices, sharding="zero1", attention="eager")
    plan = make_plan(config, chip, settings_, global_batch=devices)
    memory = transformer_training_memory(config, 1, "adamw", "bf16-mixed", attention="eager", sharding="zero1",
                                         devices=devices)
    states = memory.parameters + memory.gradients + memory.master_weights + memory.optimizer_state
    usable = chip.memory_bytes * 0.9
    assert plan.fits == fits(config, 1, settings_, chip) == (not plan.reasons)
    assert plan.fits or plan.reasons[0].startswith("model states alone") == (states > usable)


def test_a_peak_of_exactly_the_usable_memory_fits():
    config = TransformerConfig.from_hf(GPT2_SMALL)
    settings_ = PlanSettings(headroom=0.0)
    peak = expected_peak(config, 4, settings_)
    exact = PlanDevice("exact", peak, 1e15, "bfloat16", "test", "test")
    plan = make_plan(config, exact, settings_, global_batch=4)
    assert plan.fits and plan.largest_micro_batch == plan.micro_batch == 4
    smaller = PlanDevice("smaller", peak - 1, 1e15, "bfloat16", "test", "test")
    assert make_plan(config, smaller, settings_, global_batch=4).largest_micro_batch == 3
    one = PlanDevice("one sequence", expected_peak(config, 1, settings_), 1e15, "bfloat16", "test", "test")
    plan = make_plan(config, one, settings_, global_batch=4)
    assert plan.fits and plan.micro_batch == 1 and plan.accumulation_steps == 4


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_activations_that_do_not_fit_beside_the_states_are_named_with_what_would_fit(attention):
    config = TransformerConfig.from_hf(LLAMA_3_8B, sequence_length=16384)
    settings_ = PlanSettings(devices=8, sharding="zero3", attention=attention)
    plan = make_plan(config, H100, settings_, global_batch=8)
    assert not plan.fits and not fits(config, 1, settings_)
    assert plan.reasons[0].startswith("one sequence per device needs ")
    assert "its largest phase, the saved activations and the loss's gradients" in plan.reasons[0]
    recompute = PlanSettings(devices=8, sharding="zero3", attention=attention, recompute="full")
    assert ("with --recompute full, one sequence per device fits" in plan.reasons) == fits(config, 1, recompute)
    sdpa = PlanSettings(devices=8, sharding="zero3", attention="sdpa")
    assert ("with --attention sdpa, one sequence per device fits" in plan.reasons) == (
        attention == "eager" and fits(config, 1, sdpa))


def test_a_micro_batch_too_large_is_named_with_the_largest_that_fits():
    config = TransformerConfig.from_hf(GPT2_SMALL)
    plan = make_plan(config, H100, PlanSettings(attention="eager"), global_batch=64, micro_batch=64)
    assert not plan.fits
    assert plan.reasons == (f"micro-batch 64 needs {plan.memory.peak / 2**30:.2f} GiB per device, more than the "
                            f"{plan.usable_bytes / 2**30:.2f} GiB usable; the largest that fits is "
                            f"{plan.largest_micro_batch}",)
    assert fits(config, plan.largest_micro_batch, plan.settings)


# ---- FLOPs, parameters and time, against torch and transformers ----------------------------------


@pytest.mark.parametrize("hf", [pytest.param(TINY_GPT2, id="gpt2"), pytest.param(TINY_LLAMA, id="llama")])
@pytest.mark.parametrize(("devices", "global_batch"), [(1, 3), (4, 8)])
def test_flops_per_step_are_flop_counter_modes_on_the_hugging_face_model(hf, devices, global_batch):
    config = TransformerConfig.from_hf(hf)
    plan = make_plan(config, H100, PlanSettings(devices=devices), global_batch=global_batch)
    model = model_from_config_json(hf)  # eager attention: full score matrices, as the plan counts
    ids = torch.zeros(global_batch, config.sequence_length, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    assert plan.flops_per_step == counter.get_total_flops()
    assert plan_document(plan, "x")["model"]["parameters"] == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("device", "precision", "dtype"), [
    pytest.param("H100 SXM", "bf16-mixed", "bfloat16", id="h100-bf16"),
    pytest.param("NVIDIA A100-SXM4-40GB", "fp32", "float32", id="a100-fp32"),
    pytest.param("MI300X", "fp16-mixed", "float16", id="mi300x-fp16"),
])
def test_time_is_flops_over_devices_peak_and_mfu(device, precision, dtype):
    config = TransformerConfig.from_hf(GPT2_SMALL)
    chip = plan_device(device, dtype)
    if chip.name not in TORCH_CAPACITIES:  # the datasheet's GB, where torch's figure is not known
        assert chip.memory_bytes == find_chip(device).memory_gb * 10**9
    assert chip.peak_flops_per_second == peak_flops(device, dtype)
    settings_ = PlanSettings(devices=16, precision=precision, mfu=0.35)
    plan = make_plan(config, chip, settings_, global_batch=64, tokens=3e11)
    assert plan.seconds_per_step == pytest.approx(plan.flops_per_step / (16 * chip.peak_flops_per_second * 0.35))
    assert plan.tokens_per_second == pytest.approx(64 * 1024 / plan.seconds_per_step)
    assert plan.days == pytest.approx(3e11 / plan.tokens_per_second / 86400)


# ---- output --------------------------------------------------------------------------------------


def test_the_text_shows_every_part_and_the_verdict():
    config = TransformerConfig.from_hf(GPT2_SMALL)
    plan = make_plan(config, H100, PlanSettings(devices=8, sharding="zero2"), global_batch=512, tokens=1e10)
    text = render_plan(plan, "gpt2.json")
    for part in ("parameters", "gradients", "optimizer", "activations", "transient", "peak", "usable"):
        value = plan.usable_bytes if part == "usable" else getattr(plan.memory, part)
        assert f"  {part}" in text and f"{value / 2**30:.2f}" in text
    assert f"Fits: yes, {(plan.usable_bytes - plan.memory.peak) / 2**30:.2f} GiB to spare" in text
    whole = f"each device's {plan.per_device_batch} sequences fit in one micro-batch"
    assert (whole in text) == (plan.largest_micro_batch == plan.per_device_batch)
    assert (f"the largest micro-batch that fits is {plan.largest_micro_batch}." in text) != (whole in text)
    assert f"At MFU 0.4 (--mfu): {plan.seconds_per_step:.3g} s per step" in text
    assert f"{plan.days:,.1f} days" in text


def test_the_document_is_json_and_holds_the_plan():
    config = TransformerConfig.from_hf(LLAMA_3_8B, sequence_length=2048)
    plan = make_plan(config, H100, PlanSettings(devices=8, sharding="full_shard"), global_batch=64)
    document = json.loads(json.dumps(plan_document(plan, "llama.json")))
    assert set(document) == {"model", "device", "training", "batch", "memory_per_device", "fits", "reasons", "compute"}
    assert document["training"]["sharding"] == "zero3"
    assert document["memory_per_device"]["peak"] == expected_peak(config, plan.micro_batch, plan.settings)
    assert document["batch"]["global"] == 64 and document["batch"]["per_device"] == 8
    assert document["compute"]["days"] is None and document["fits"] == plan.fits


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "message"), [
    pytest.param({"global_batch": 12}, r"^global batch 12 is not a multiple of the 8 devices", id="batch-devices"),
    pytest.param({"global_batch": 16, "micro_batch": 3}, r"^micro-batch 3 does not divide the 2 sequences per device",
                 id="micro-batch"),
    pytest.param({"global_batch": 0}, r"^global batch must be a positive integer, got 0$", id="zero-batch"),
    pytest.param({"tokens": -1.0}, r"^tokens must be positive, got -1.0$", id="negative-tokens"),
])
def test_bad_batches_are_named(options, message):
    config = TransformerConfig.from_hf(GPT2_SMALL)
    with pytest.raises(AccountingError, match=message):
        make_plan(config, H100, PlanSettings(devices=8), **options)


def test_a_config_that_is_not_a_transformer_config_is_a_type_error():
    with pytest.raises(AccountingTypeError, match=r"^config must be a TransformerConfig, got dict$"):
        make_plan(GPT2_SMALL, H100, PlanSettings())


@pytest.mark.parametrize(("settings_", "message"), [
    pytest.param({"mfu": 1.5}, r"^mfu is a fraction of the peak and cannot exceed 1, got 1.5$", id="mfu"),
    pytest.param({"headroom": 1.0}, r"^headroom is the fraction of device memory kept free, in \[0, 1\), got 1.0$",
                 id="headroom"),
    pytest.param({"sharding": "zero4"}, r"^sharding must be one of .*got 'zero4'$", id="sharding"),
    pytest.param({"devices": 0}, r"^devices must be a positive integer, got 0$", id="devices"),
])
def test_bad_settings_are_named(settings_, message):
    with pytest.raises(AccountingError, match=message):
        PlanSettings(**settings_)


@pytest.mark.parametrize(("name", "options", "message"), [
    pytest.param("H100", {}, r"^device 'H100' is not in the peak table \(known: H100 SXM, ", id="ambiguous"),
    pytest.param("TPU v5p", {"memory_gb": 95}, r"^device 'TPU v5p' is not in the peak table", id="half-override"),
    pytest.param("T4", {}, r"^T4 has no published bfloat16 peak: give one with --peak-tflops$", id="no-bf16"),
])
def test_bad_devices_are_named(name, options, message):
    with pytest.raises(AccountingError, match=message):
        plan_device(name, "bfloat16", **options)


# ---- which attention kernel the plan counts ------------------------------------------------------

TINYLLAMA = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
             "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
             "max_position_embeddings": 2048, "tie_word_embeddings": False, "hidden_act": "silu"}


@pytest.mark.parametrize("precision, dtype, kernel", [("fp32", "float32", "math"), ("bf16-mixed", "bfloat16", "cudnn")])
def test_the_plan_says_which_kernel_it_counted(precision, dtype, kernel):
    """TinyLlama's shape on an H200: fp32 with grouped-query heads runs the math kernel (its s x s weights
    counted, as the H200 measured), bf16 a fused one; the text and the document say which."""
    config = TransformerConfig.from_hf(TINYLLAMA)
    h200 = plan_device("H200 SXM", dtype)
    plan = make_plan(config, h200, PlanSettings(precision=precision), global_batch=4, micro_batch=4)
    assert plan.memory.attention == f"sdpa-{kernel}"
    assert plan.memory.peak == expected_peak(config, 4, PlanSettings(precision=precision), h200)
    text = render_plan(plan, "tinyllama.json")
    assert f"Attention: sdpa runs its {kernel} kernel on cuda (compute capability 9.0)" in text
    assert ("saves the (s x s) attention weights" in text) == (kernel == "math")
    document = plan_document(plan, "tinyllama.json")["training"]
    assert document["attention_counted"] == f"sdpa-{kernel}" and document["attention_kernel"]["source"] == "rules"


def test_a_device_of_unknown_capability_is_planned_as_an_a100_and_says_so():
    config = TransformerConfig.from_hf(TINYLLAMA)
    device = plan_device("my-accelerator", "float32", memory_gb=200, peak_tflops=100)
    plan = make_plan(config, device, PlanSettings(precision="fp32"), global_batch=1)
    assert "compute capability of my-accelerator not known: assumed 8.0" in render_plan(plan, "x")
    assert render_plan(make_plan(config, device, PlanSettings(attention="eager"), global_batch=1), "x").count(
        "Attention:") == 0


# ---- device capacities ------------------------------------------------------------------------------

RECORDED_H200 = "tests/data/hosts/nvidia-h200/sdpa-kernels-and-sustained-window.json"


def test_the_h200_holds_what_torch_reported_on_one():
    """The recorded host's torch.cuda.get_device_properties: the capacity the plan fits into, the headroom
    its only margin."""
    with open(RECORDED_H200, encoding="utf-8") as file:
        recorded = json.load(file)["props"]
    assert recorded["name"] == "NVIDIA H200"
    device = plan_device(recorded["name"], "bfloat16")
    assert device.memory_bytes == recorded["total_memory"]
    assert "torch" in device.memory_source
    plan = make_plan(TransformerConfig.from_hf(GPT2_SMALL), device, PlanSettings(headroom=0.1), global_batch=8)
    assert plan.usable_bytes == int(0.9 * recorded["total_memory"])


def test_an_h100_holds_more_than_its_datasheets_80_gb():
    """torch reports 85.0-85.5 GB on an H100 80GB HBM3 (nvidia-smi: 81,559 MiB, the driver's reserve
    included): more than 80 x 10**9 bytes, and no more than nvidia-smi's total."""
    device = plan_device("NVIDIA H100 80GB HBM3", "bfloat16")
    assert 85.0e9 <= device.memory_bytes <= 81_559 * 2**20


# ---- the families read from config.json: active parameters and their convention ---------------------


@pytest.mark.parametrize(("name", "active", "convention"), [
    pytest.param("qwen3-30b-a3b", 3_353_032_704, "both embeddings counted", id="qwen3-moe"),  # Qwen's card: 3.3B
    pytest.param("gpt-oss-20b", 3_608_307_264, "the embedding lookup not", id="gpt-oss"),  # OpenAI's card: 3.6B
])
def test_a_mixture_of_experts_plan_reports_active_parameters_by_the_publishers_convention(name, active, convention):
    config_json, total = PUBLISHED[name]
    config = TransformerConfig.from_hf(config_json, sequence_length=1024)
    plan = make_plan(config, H100, PlanSettings(devices=8, sharding="zero3"), global_batch=8)
    model = plan_document(plan, "x")["model"]
    assert (model["parameters"], model["active_parameters"]) == (total, active)
    first_line = render_plan(plan, "x").splitlines()[0]
    assert f"{total:,} parameters ({active:,} active per token: " in first_line and convention in first_line


def test_a_mixture_of_experts_plans_flops_are_the_models_step_with_its_routed_experts():
    """FLOPs per token from the experts each token is routed to (and the shared ones, and the dense first
    block): FlopCounterMode around DeepSeek-V3's own module, small, on the CPU."""
    hf = hf_config("deepseek_v3").to_dict()
    config = TransformerConfig.from_hf(hf)
    plan = make_plan(config, H100, PlanSettings(devices=2), global_batch=2)
    model = model_from_config_json(hf, device="cpu")
    ids = torch.zeros(2, config.sequence_length, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    assert plan.flops_per_step == counter.get_total_flops()
    assert "each token through its 2 routed experts" in render_plan(plan, "x")


def test_a_plan_says_what_it_assumed_of_soft_caps_sinks_and_windows():
    gemma = TransformerConfig.from_hf(PUBLISHED["gemma-2-9b"][0], sequence_length=8192)
    text = render_plan(make_plan(gemma, H100, PlanSettings(devices=8, sharding="zero3", recompute="full"),
                                 global_batch=8), "x")
    assert "soft-capped scores: counted as eager attention" in text
    assert "21 of 42 blocks attend to the last 4096 tokens; SDPA is passed their mask" not in text  # eager: no SDPA
    assert "21 of 42 blocks attend to the last 4096 tokens" in text
    phi = TransformerConfig.from_hf(PUBLISHED["phi-3-mini"][0])
    text = render_plan(make_plan(phi, H100, PlanSettings(), global_batch=1), "x")
    assert "32 of 32 blocks attend to the last 2047 tokens; SDPA is passed their mask" in text
