"""Which kernel ``scaled_dot_product_attention`` runs, and what it saves: the rules against torch and the H200.

Truths: torch's own dispatcher on the CPU (``torch._fused_sdp_choice``, what SDPA calls), the kernels
recorded on a real H200 (``tests/data/hosts/nvidia-h200/sdpa-kernels-and-sustained-window.json``:
which of flash, memory-efficient and cuDNN refused the recorded Llama attention call in fp32 and
bf16, and the bytes each default call saved), and the tensors a real SDPA call saves for backward
(``saved_tensors_hooks``): the math kernel at the recorded full shape on the meta device (shapes
only, the composite code CUDA runs), fused kernels on the CPU.
"""

import contextlib
import dataclasses
import itertools
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from accounting import TransformerConfig
from accounting.model.activations import activation_formats, sdpa_saved_bytes, transformer_activations
from accounting.model.attention_kernels import (
    AttentionDevice,
    SdpaCall,
    attention_device,
    choose_sdpa_kernel,
    cpu_kernel_rules,
    cuda_kernel_rules,
    torch_kernel_choice,
)
from accounting.errors import AccountingError, AccountingTypeError

H200 = Path(__file__).parent / "data" / "hosts" / "nvidia-h200"
MIB = 2**20
# The recorded Llama attention call: TinyLlama-1.1B's heads at batch 4 x 2048 tokens, causal, enable_gqa.
RECORDED = dict(batch=4, heads=32, kv_heads=4, sequence=2048, head_width=64)
RECORDED_CONFIG = TransformerConfig(
    layers=1, width=2048, heads=32, kv_heads=4, sequence_length=2048, vocabulary=32000, ffn_width=5632,
    mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False, learned_positions=False,
)
DTYPES = {"torch.float32": torch.float32, "torch.bfloat16": torch.bfloat16}


def _recorded_kernels() -> dict:
    return json.loads((H200 / "sdpa-kernels-and-sustained-window.json").read_text())


# ---- the kernel chosen ----------------------------------------------------------------------

CPU_CASES = [
    dict(dtype=dtype, heads=heads, kv_heads=kv_heads, enable_gqa=gqa, dropout=dropout, value_width=value_width,
         mask=mask, causal=not mask)
    for dtype, (heads, kv_heads, gqa), dropout, value_width, mask in itertools.product(
        (torch.float32, torch.bfloat16, torch.float16, torch.float64),
        ((4, 4, False), (4, 2, True), (4, 2, False), (6, 4, True), (4, 1, True)),
        (0.0, 0.1),
        (16, 8),
        (False, True),
    )
]


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda case: "-".join(str(value) for value in case.values()))
def test_cpu_rules_are_torchs_choice(case):
    """The CPU rules stated in the module are what torch's dispatcher answers, case by case."""
    call = SdpaCall(batch=2, sequence=16, head_width=16, **case)
    assert cpu_kernel_rules(call).name == torch_kernel_choice(call, "cpu")


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_cuda_rules_refuse_what_the_h200_refused(dtype):
    """On the recorded H200 (cc 9.0), each fused kernel refused or ran the Llama call as the rules say."""
    record = _recorded_kernels()
    capability = (record["props"]["major"], record["props"]["minor"])
    kernel = cuda_kernel_rules(SdpaCall(DTYPES[dtype], **RECORDED), capability)
    for name in ("flash", "efficient", "cudnn"):
        refused_there = record["sdpa"][f"{dtype}/{name}"].startswith("refused")
        assert (name in kernel.refused) == refused_there, (name, kernel.refused.get(name))
    ran = [name for name in ("flash", "efficient", "cudnn") if record["sdpa"][f"{dtype}/{name}"].startswith("ok")]
    assert kernel.name in (ran or ["math"])


def test_the_recorded_fp32_call_runs_math_and_says_why():
    kernel = choose_sdpa_kernel(SdpaCall(torch.float32, **RECORDED), AttentionDevice("cuda", (9, 0)))
    assert (kernel.name, kernel.source, kernel.fused) == ("math", "rules", False)
    assert "flash refuses" in str(kernel) and "grouped-query" in str(kernel) and kernel.label == "sdpa-math"


@pytest.mark.parametrize(
    "capability, dtype, changes, expected",
    [
        pytest.param((8, 0), torch.float32, dict(kv_heads=32), "efficient", id="a100-fp32-multi-head"),
        pytest.param((8, 0), torch.bfloat16, {}, "flash", id="a100-bf16-gqa"),
        pytest.param((7, 0), torch.float16, {}, "math", id="v100-fp16-gqa"),
        pytest.param((7, 0), torch.float16, dict(kv_heads=32), "efficient", id="v100-fp16-multi-head"),
        pytest.param((7, 0), torch.bfloat16, dict(kv_heads=32), "math", id="v100-bf16"),
        pytest.param((9, 0), torch.bfloat16, dict(head_width=320), "math", id="h200-head-width-320"),
        pytest.param((9, 0), torch.bfloat16, dict(mask=True, kv_heads=32), "cudnn", id="h200-bf16-mask"),
        pytest.param((8, 0), torch.bfloat16, dict(mask=True, kv_heads=32), "efficient", id="a100-bf16-mask"),
        pytest.param((8, 6), torch.bfloat16, dict(head_width=200, kv_heads=32), "efficient", id="sm86-training-200"),
    ],
)
def test_cuda_rules_follow_each_constraint(capability, dtype, changes, expected):
    """One constraint of torch's sdp_utils.cpp at a time: capability, dtype, head width, mask, GQA."""
    call = SdpaCall(dtype, **(RECORDED | changes))
    assert cuda_kernel_rules(call, capability).name == expected


def test_meta_runs_math_and_the_cpu_is_asked():
    call = SdpaCall(torch.float32, **RECORDED)
    assert choose_sdpa_kernel(call, "meta").name == "math"
    assert choose_sdpa_kernel(call, torch.device("cpu")).source == "torch"


def test_the_backends_enabled_now_are_asked():
    """``sdpa_kernel`` limits what torch may run: the answer follows it, and none left is an error saying why."""
    call = SdpaCall(torch.float32, batch=2, heads=4, kv_heads=2, sequence=16, head_width=16)
    with sdpa_kernel(SDPBackend.MATH):
        assert choose_sdpa_kernel(call, "cpu").name == "math"
    assert choose_sdpa_kernel(call, "cpu").name == "flash"
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), pytest.raises(AccountingError, match=r"no enabled kernel.*dropout"):
        choose_sdpa_kernel(dataclasses.replace(call, dropout=0.1), "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device to ask")
def test_a_cuda_device_without_one_here_needs_its_capability():
    with pytest.raises(AccountingError, match=r"name its compute capability"):
        choose_sdpa_kernel(SdpaCall(torch.float32, **RECORDED), "cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device to ask torch")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kv_heads", [32, 4])
def test_cuda_rules_are_torchs_choice_on_this_gpu(dtype, kv_heads):
    """The rules against torch on a real GPU; cuDNN and flash may trade places (torch prefers cuDNN on
    cc 9.0/10.x only with a recent enough cuDNN), and save the same tensors."""
    call = SdpaCall(dtype, **(RECORDED | dict(kv_heads=kv_heads)))
    ruled = cuda_kernel_rules(call, torch.cuda.get_device_capability()).name
    asked = choose_sdpa_kernel(call, "cuda").name
    assert ruled == asked or {ruled, asked} == {"flash", "cudnn"}


@pytest.mark.parametrize(
    "build, error, message",
    [
        pytest.param(lambda: SdpaCall("float32", **RECORDED), AccountingTypeError, r"dtype must be a torch.dtype",
                     id="dtype-name"),
        pytest.param(lambda: SdpaCall(torch.float32, **(RECORDED | dict(heads=0))), AccountingError,
                     r"^heads must be a positive integer, got 0$", id="no-heads"),
        pytest.param(lambda: SdpaCall(torch.float32, dropout=1.0, **RECORDED), AccountingError,
                     r"dropout must be in \[0, 1\), got 1.0", id="dropout"),
        pytest.param(lambda: attention_device("tpu"), AccountingError, r"device must be 'cpu', 'cuda'", id="tpu"),
        pytest.param(lambda: attention_device(AttentionDevice("cuda", (9,))), AccountingError,
                     r"compute capability must be \(major, minor\)", id="capability"),
        pytest.param(lambda: attention_device(AttentionDevice("cpu", (9, 0))), AccountingError,
                     r"only a CUDA device has a compute capability", id="cpu-capability"),
        pytest.param(lambda: attention_device(3), AccountingTypeError, r"device must be a name", id="number"),
        pytest.param(lambda: sdpa_saved_bytes(RECORDED_CONFIG, 1, activation_formats("fp32"), "eager"), AccountingError,
                     r"^attention must be one of 'sdpa-flash', 'sdpa-efficient', 'sdpa-cudnn', 'sdpa-math', got 'eager'$",
                     id="saved-bytes-of-eager"),
    ],
)
def test_bad_calls_and_devices_are_named(build, error, message):
    with pytest.raises(error, match=message):
        build()


# ---- what the kernel saves ------------------------------------------------------------------


def _saved_by_one_call(query, key, value, backend=None) -> tuple[int, int]:
    """(bytes per reference, bytes per storage) of the tensors one causal SDPA call saves for backward."""
    saved = []
    kernel = sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()
    with kernel, torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        output = F.scaled_dot_product_attention(query, key, value, is_causal=True, enable_gqa=True)
    storages = {t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in saved if t.numel() > 1}
    per_reference = sum(t.untyped_storage().nbytes() for t in saved if t.numel() > 1)
    del output
    return per_reference, sum(storages.values())


def _projections(batch, heads, kv_heads, sequence, head_width, dtype, device):
    """Query, key and value as Hugging Face's Llama hands them to SDPA: (batch, heads, sequence, width) views."""
    def one(count):
        return torch.randn(batch, sequence, count, head_width, dtype=dtype, device=device).transpose(1, 2)
    return one(heads).requires_grad_(), one(kv_heads).requires_grad_(), one(kv_heads).requires_grad_()


def test_math_kernel_saves_what_the_h200_recorded():
    """The math kernel at the recorded fp32 shape (meta tensors: the composite code CUDA runs, no data)
    saves 4288 MiB counted per reference, as the H200 recorded, and per storage what the formula counts."""
    recorded = _recorded_kernels()["sdpa"]["torch.float32/default_saved_total_MiB"]
    per_reference, per_storage = _saved_by_one_call(*_projections(**RECORDED, dtype=torch.float32, device="meta"))
    assert per_reference == recorded * MIB
    assert per_storage == sdpa_saved_bytes(RECORDED_CONFIG, 4, activation_formats("fp32"), "sdpa-math")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_math_kernel_saves_fp32_copies_on_the_cpu(precision):
    """The math kernel on real CPU tensors (16-bit inputs are upcast): the formula, storage by storage."""
    config = TransformerConfig(layers=1, width=64, heads=4, kv_heads=2, sequence_length=32, vocabulary=10,
                               norm="rmsnorm", mlp="swiglu")
    formats = activation_formats(precision)
    tensors = _projections(2, 4, 2, 32, 16, formats.matmul_dtype, "cpu")
    _, per_storage = _saved_by_one_call(*tensors, backend=SDPBackend.MATH)
    assert per_storage == sdpa_saved_bytes(config, 2, formats, "sdpa-math")


def test_fused_kernel_saves_what_the_formula_counts_and_the_h200_recorded():
    """The CPU's flash kernel at the recorded heads (a shorter sequence) saves Q, K, V, output and
    log-sum-exp as the formula counts; at the recorded shape the formula gives the H200's 73 MiB."""
    short = dict(RECORDED, batch=1, sequence=256)
    config = dataclasses.replace(RECORDED_CONFIG, sequence_length=256)
    formats = activation_formats("bf16")
    _, per_storage = _saved_by_one_call(*_projections(**short, dtype=torch.bfloat16, device="cpu"),
                                        backend=SDPBackend.FLASH_ATTENTION)
    assert per_storage == sdpa_saved_bytes(config, 1, formats, "sdpa-flash")
    recorded = _recorded_kernels()["sdpa"]["torch.bfloat16/default_saved_total_MiB"]
    assert round(sdpa_saved_bytes(RECORDED_CONFIG, 4, formats, "sdpa-cudnn") / MIB) == recorded


FUSED_OUTPUTS = {  # torch's CUDA kernels, run on meta tensors: their shape functions
    "sdpa-efficient": lambda q, k, v: torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0,
                                                                                           True)[:2],
    "sdpa-flash": lambda q, k, v: torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[:2],
    "sdpa-cudnn": lambda q, k, v: torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0,
                                                                                     True)[:2],
}


@pytest.mark.parametrize("attention", list(FUSED_OUTPUTS))
@pytest.mark.parametrize("sequence", [50, 64])
def test_fused_kernels_save_inputs_output_and_their_statistic(attention, sequence):
    """Each CUDA kernel's backward reads Q, K, V, the output and its fp32 statistic (memory-efficient
    attention's padded to a multiple of 32 queries): sized by torch's own shape functions on meta."""
    config = TransformerConfig(layers=1, width=64, heads=4, sequence_length=sequence, vocabulary=10,
                               norm="rmsnorm", mlp="swiglu")
    formats = activation_formats("bf16")
    q, k, v = (torch.empty(2, 4, sequence, 16, dtype=torch.bfloat16, device="meta") for _ in range(3))
    output, statistic = FUSED_OUTPUTS[attention](q, k, v)
    saved = sum(tensor.numel() * tensor.element_size() for tensor in (q, k, v, output, statistic))
    assert saved == sdpa_saved_bytes(config, 2, formats, attention)


def _saved_by_math_call(dropout: float, formats) -> int:
    torch.manual_seed(0)
    query, key, value = (torch.randn(2, 4, 32, 16, dtype=formats.matmul_dtype).requires_grad_() for _ in range(3))
    saved = []
    with sdpa_kernel(SDPBackend.MATH), torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t,
                                                                                 lambda t: t):
        F.scaled_dot_product_attention(query, key, value, dropout_p=dropout, is_causal=True)
    return sum({t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in saved if t.numel() > 1}.values())


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_math_kernel_dropout_keeps_the_dropped_weights_and_a_mask(precision):
    """With dropout the math kernel keeps the dropped weights (its width) and a mask: CUDA's fused dropout
    a bool mask, which the formula counts; the CPU's a mask of the weights' width, which the CPU measures."""
    config = TransformerConfig(layers=1, width=64, heads=4, sequence_length=32, vocabulary=10)
    formats = activation_formats(precision)
    measured = _saved_by_math_call(0.1, formats) - _saved_by_math_call(0.0, formats)
    counted = {dropout: transformer_activations(config, 2, formats, attention="sdpa-math", dropout=dropout).saved
               for dropout in (True, False)}
    tokens, scores = 2 * 32, 4 * 32 * 32 * 2
    residual_masks = torch.bool.itemsize * 3 * tokens * config.width  # after attention, after the MLP, embeddings
    cpu_mask_width = max(formats.matmul, torch.float32.itemsize) - torch.bool.itemsize
    assert measured == counted[True] - counted[False] - residual_masks + cpu_mask_width * scores


# ---- the torch asked: its version, its devices ------------------------------------------------


def _dispatcher_of_torch_2_4(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None):
    """torch 2.4's ``_fused_sdp_choice``: ``aten::_fused_sdp_choice(Tensor query, Tensor key, Tensor value,
    Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, *, float? scale=None) -> int`` (``enable_gqa``
    came in 2.5), answering as today's dispatcher does for what it takes; the calls it got are kept."""
    _dispatcher_of_torch_2_4.seen.append((query.shape[1], key.shape[1], value.shape[1]))
    return _REAL_CHOICE(query, key, value, attn_mask, dropout_p, is_causal, scale=scale)


_REAL_CHOICE = torch._fused_sdp_choice


def test_torch_2_4_without_enable_gqa_is_asked_with_the_heads_repeated(monkeypatch):
    """A dispatcher without ``enable_gqa`` (torch 2.4) is asked what runs there: key/value heads repeated to every
    query head (as models on that torch call SDPA), and the answer is the real dispatcher's for that call."""
    monkeypatch.setattr(torch, "_fused_sdp_choice", _dispatcher_of_torch_2_4)
    _dispatcher_of_torch_2_4.seen = []
    grouped = SdpaCall(torch.float32, batch=2, heads=4, kv_heads=2, sequence=16, head_width=16)
    repeated = dataclasses.replace(grouped, kv_heads=4)
    kernel = choose_sdpa_kernel(grouped, "cpu")
    assert _dispatcher_of_torch_2_4.seen[-1] == (4, 4, 4)
    assert kernel.name == _REAL_CHOICE_NAME(repeated) and kernel.source == "torch"
    assert "enable_gqa" in kernel.reason
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), pytest.raises(AccountingError, match=r"no enabled kernel"):
        choose_sdpa_kernel(dataclasses.replace(grouped, dropout=0.1), "cpu")


def _REAL_CHOICE_NAME(call):
    query, key, value = (torch.empty(1, call.sequence, heads, call.head_width).transpose(1, 2)
                         for heads in (call.heads, call.kv_heads, call.kv_heads))
    return {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}[_REAL_CHOICE(query, key, value, None, 0.0, True)]


def test_every_memory_prediction_works_on_torch_2_4(monkeypatch):
    """check_fits (and every SDPA memory prediction behind it) on torch 2.4's dispatcher: the kernel of the call
    with repeated heads, not a TypeError."""
    from accounting.model_mfu import check_fits, model_size

    monkeypatch.setattr(torch, "_fused_sdp_choice", _dispatcher_of_torch_2_4)
    _dispatcher_of_torch_2_4.seen = []
    size = model_size("tiny-llama", layers=1, seq=16, batch=2)
    predicted = check_fits(size, "bf16", "cpu", free_bytes=2**30)
    assert predicted > 0 and _dispatcher_of_torch_2_4.seen
    assert all(heads == kv for heads, kv, _ in _dispatcher_of_torch_2_4.seen)


def test_a_torch_without_enable_gqa_repeats_heads_for_the_rules_too(monkeypatch):
    """Named by capability, a GPU is judged by the rules; on a torch whose SDPA takes no enable_gqa the call judged
    is the one with repeated heads: fp32 on cc 9.0 runs memory-efficient attention, not math."""
    from accounting.model import attention_kernels

    call = SdpaCall(torch.float32, **RECORDED)
    assert choose_sdpa_kernel(call, AttentionDevice("cuda", (9, 0))).name == "math"
    monkeypatch.setattr(attention_kernels, "SDPA_TAKES_ENABLE_GQA", False)
    kernel = choose_sdpa_kernel(call, AttentionDevice("cuda", (9, 0)))
    assert kernel.name == cuda_kernel_rules(dataclasses.replace(call, kv_heads=32), (9, 0)).name == "efficient"


class _TwoGpus:
    """Two CUDA devices of different capability, made of fake tensors: what torch.cuda says about them, and a
    dispatcher answering by the device its tensors are on (an A100's flash on cuda:0, an H100's cuDNN on cuda:1)."""

    capabilities = {0: (8, 0), 1: (9, 0)}
    answers = {0: 1, 1: 3}  # SDPBackend: flash, cudnn

    def __init__(self, monkeypatch):
        self.current = 0
        self.asked = []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(torch.cuda, "get_device_capability",
                            lambda device=None: self.capabilities[self._index(device)])
        monkeypatch.setattr(torch, "_fused_sdp_choice", self.choice)

    def _index(self, device) -> int:
        if device is None:
            return self.current
        device = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
        return self.current if device.index is None else device.index

    def choice(self, query, key, value, *args, **kwargs):
        self.asked.append(str(query.device))
        return self.answers[query.device.index]


def test_each_cuda_device_is_asked_and_remembered_by_its_index(monkeypatch):
    """On a node with an A100 as cuda:0 and an H100 as cuda:1, the kernel for cuda:1 is cuda:1's answer (asked on
    cuda:1, not the current device), whichever was asked first; "cuda" is the current device."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    gpus = _TwoGpus(monkeypatch)
    call = SdpaCall(torch.bfloat16, **RECORDED)
    with FakeTensorMode():
        first = choose_sdpa_kernel(call, "cuda:0")
        second = choose_sdpa_kernel(call, "cuda:1")
        gpus.current = 1
        current = choose_sdpa_kernel(call, "cuda")
        named = choose_sdpa_kernel(call, AttentionDevice("cuda", (9, 0), index=1))
    assert (first.name, first.device.capability) == ("flash", (8, 0))
    assert (second.name, second.device.capability) == ("cudnn", (9, 0))
    assert (current.name, current.device.capability) == ("cudnn", (9, 0))
    assert named.name == "cudnn" and named.source == "torch"
    assert gpus.asked == ["cuda:0", "cuda:1"]  # the third and fourth answers are cuda:1's, remembered
    assert str(second.device) == "cuda:1 (compute capability 9.0)"


def test_a_cuda_index_this_machine_lacks_is_named(monkeypatch):
    _TwoGpus(monkeypatch)
    call = SdpaCall(torch.bfloat16, **RECORDED)
    with pytest.raises(AccountingError, match=r"no CUDA device cuda:2 here"):
        choose_sdpa_kernel(call, "cuda:2")
    assert choose_sdpa_kernel(call, AttentionDevice("cuda", (9, 0), index=2)).source == "rules"
    with pytest.raises(AccountingError, match=r"device index must be a non-negative integer, got -1"):
        attention_device(AttentionDevice("cuda", index=-1))
    with pytest.raises(AccountingError, match=r"only a CUDA device has an index"):
        attention_device(AttentionDevice("cpu", index=0))
