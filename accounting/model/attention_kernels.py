"""Which kernel ``scaled_dot_product_attention`` runs for a call: flash, memory-efficient, cuDNN or math.

"SDPA" is not one kernel, and the kernels save different tensors for backward: the fused ones
(flash, memory-efficient, cuDNN) keep Q, K, V, the output and one fp32 statistic per query; the
math kernel is the textbook composition and keeps every (s × s) attention-weight matrix (in fp32
for 16-bit inputs). Which one runs depends on the dtype, the device and its compute capability,
the head width, grouped-query heads (``enable_gqa``), an explicit mask and dropout. A
training-memory formula must know which, so this module answers, in this order:

1. **torch itself**, where it can: ``torch._fused_sdp_choice`` is the dispatcher
   ``scaled_dot_product_attention`` calls, fed here with tensors of the call's shape (batch 1,
   the real strides; a few MiB) on the CPU, or on the CUDA device of this machine that is asked
   about (``"cuda:1"`` is asked on device 1, ``"cuda"`` on the current one; each answer is
   remembered per device index, so devices of different kinds in one node each get their own).
   ``torch.backends.cuda.can_use_flash_attention`` and its siblings answer the same per kernel on
   a CUDA device.
2. **the documented rules** otherwise (a GPU named by its compute capability, planned from a
   machine without it): :func:`cuda_kernel_rules`, the constraints of torch 2.5-2.13's
   ``sdp_utils.cpp``, tried in torch's order: flash, memory-efficient, math; on cc 9.0 and 10.x
   cuDNN first (torch prefers it there with cuDNN newer than 9.15). Recorded on an H200 (cc 9.0,
   torch 2.11): fp32 with grouped-query attention is refused by flash, memory-efficient and cuDNN
   alike, so math runs; bf16 at the same shape is taken by cuDNN and flash, which save the same
   tensors. Later torch (after pytorch/pytorch#191085) lets memory-efficient attention take
   grouped-query heads; these rules do not.

:func:`cpu_kernel_rules` states the CPU's rules (its own flash kernel unless dropout, unequal head
widths, or unequal heads without ``enable_gqa``); the tests hold both rule sets to torch's answers.

torch before 2.5 has no ``enable_gqa`` (neither ``scaled_dot_product_attention`` nor its
dispatcher takes it), so models there repeat the key/value heads to every query head before
calling it (Hugging Face's ``repeat_kv``, this package's own step): on such a torch a grouped-query
call is judged as that call, with as many key/value heads as query heads, by torch and by the rules
alike (:data:`SDPA_TAKES_ENABLE_GQA`).

>>> import torch
>>> call = SdpaCall(torch.float32, batch=4, heads=32, kv_heads=4, sequence=2048, head_width=64)
>>> choose_sdpa_kernel(call, AttentionDevice("cuda", (9, 0))).name
'math'
>>> choose_sdpa_kernel(call, "cpu").name, choose_sdpa_kernel(call, "cpu").source
('flash', 'torch')
"""

import functools
import math
import warnings
from dataclasses import dataclass, field, replace

import torch

from accounting.errors import AccountingError, AccountingTypeError

SDPA_KERNELS = ("flash", "efficient", "cudnn", "math")
"""The kernels ``scaled_dot_product_attention`` dispatches to (``torch.nn.attention.SDPBackend``)."""
FUSED_KERNELS = ("flash", "efficient", "cudnn")
"""Kernels that keep one statistic per query instead of the (s × s) attention weights."""
_BACKEND_NAMES = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}  # SDPBackend's values
DEVICE_TYPES = ("cpu", "cuda", "meta")

_FLASH_CAPABILITY = ((8, 0), (12, 1))  # flash and cuDNN: sm80-sm121
_EFFICIENT_CAPABILITY = ((5, 0), (12, 1))
_FLASH_MAX_HEAD_WIDTH = 256
_CUDNN_MAX_HEAD_WIDTH = 128  # 256 on cc 9.0/10.x with cuDNN newer than 9.22 only
_CUDNN_HEAD_WIDTH_MULTIPLE = 8
_CUDNN_DROPOUT_RESOLUTION = 16  # dropout probability in multiples of 1/16
_SM86_89_FLASH_TRAINING_HEAD_WIDTHS = (192, 224)  # (192, 224] refused; (224, 256] refused with dropout
_LOW_PRECISION = (torch.float16, torch.bfloat16)
_CPU_FLASH_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _dispatcher_takes_enable_gqa() -> bool:
    schema = torch.ops.aten._fused_sdp_choice.default._schema
    return any(argument.name == "enable_gqa" for argument in schema.arguments)


SDPA_TAKES_ENABLE_GQA = _dispatcher_takes_enable_gqa()
"""Whether this torch's SDPA and its dispatcher take ``enable_gqa`` (from torch 2.5, read off the dispatcher's
schema); where not, a grouped-query call is judged with its key/value heads repeated, as it runs there."""


@dataclass(frozen=True)
class SdpaCall:
    """One self-attention call as a training step makes it: query ``(batch, heads, sequence, head_width)``,
    key and value with ``kv_heads`` heads (value ``value_width`` wide, default ``head_width``).

    ``enable_gqa`` (default: ``kv_heads != heads``, as Hugging Face passes it when there is no mask),
    ``causal`` (``is_causal=True``), ``mask`` (an explicit ``attn_mask``), ``dropout`` (``dropout_p``),
    ``training`` (inputs require grad).
    """

    dtype: torch.dtype
    batch: int
    heads: int
    kv_heads: int
    sequence: int
    head_width: int
    value_width: int | None = None
    causal: bool = True
    mask: bool = False
    dropout: float = 0.0
    enable_gqa: bool | None = None
    training: bool = True

    def __post_init__(self):
        if not isinstance(self.dtype, torch.dtype):
            raise AccountingTypeError(f"dtype must be a torch.dtype, got {self.dtype!r}")
        for name in ("batch", "heads", "kv_heads", "sequence", "head_width"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise AccountingError(f"{name} must be a positive integer, got {value!r}")
        if self.value_width is None:
            object.__setattr__(self, "value_width", self.head_width)
        if self.enable_gqa is None:
            object.__setattr__(self, "enable_gqa", self.kv_heads != self.heads)
        if not 0.0 <= self.dropout < 1.0:
            raise AccountingError(f"dropout must be in [0, 1), got {self.dropout!r}")


@dataclass(frozen=True, repr=False)
class AttentionDevice:
    """Where the attention runs: ``type`` ``"cpu"``, ``"cuda"`` or ``"meta"``; for CUDA, the compute
    ``capability`` (major, minor), or ``None`` for the capability of the CUDA device of this machine named by
    ``index`` (``None``: the current device).

    >>> AttentionDevice("cuda", (9, 0)), str(AttentionDevice("cuda", (9, 0), index=1))
    (AttentionDevice(type='cuda', capability=(9, 0)), 'cuda:1 (compute capability 9.0)')
    """

    type: str
    capability: tuple[int, int] | None = None
    index: int | None = None

    @property
    def name(self) -> str:
        """``"cuda:1"``, ``"cuda"``, ``"cpu"``: the device as torch names it."""
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        index = "" if self.index is None else f", index={self.index}"
        return f"AttentionDevice(type={self.type!r}, capability={self.capability!r}{index})"

    def __str__(self) -> str:
        if self.capability is None:
            return self.name
        return f"{self.name} (compute capability {self.capability[0]}.{self.capability[1]})"


def attention_device(device) -> AttentionDevice:
    """An :class:`AttentionDevice` from one, a ``torch.device``, or a string (``"cpu"``, ``"cuda"``, ``"cuda:1"``).

    >>> attention_device("cuda:1"), attention_device(torch.device("cpu"))
    (AttentionDevice(type='cuda', capability=None, index=1), AttentionDevice(type='cpu', capability=None))
    """
    if isinstance(device, AttentionDevice):
        if device.type not in DEVICE_TYPES:
            raise AccountingError(f"device type must be one of {', '.join(DEVICE_TYPES)}, got {device.type!r}")
        capability = device.capability
        if capability is not None and (
            not isinstance(capability, tuple) or len(capability) != 2
            or not all(isinstance(part, int) and not isinstance(part, bool) and part >= 0 for part in capability)
        ):
            raise AccountingError(f"compute capability must be (major, minor), e.g. (9, 0), got {capability!r}")
        if capability is not None and device.type != "cuda":
            raise AccountingError(f"only a CUDA device has a compute capability, got {device.type} {capability}")
        index = device.index
        if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
            raise AccountingError(f"device index must be a non-negative integer, got {index!r}")
        if index is not None and device.type != "cuda":
            raise AccountingError(f"only a CUDA device has an index here, got {device.type}:{index}")
        return device
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError as error:
            raise AccountingError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}") from error
    if not isinstance(device, torch.device):
        raise AccountingTypeError(f"device must be a name, a torch.device or an AttentionDevice, got {device!r}")
    return attention_device(AttentionDevice(device.type, index=device.index if device.type == "cuda" else None))


@dataclass(frozen=True)
class SdpaKernel:
    """The kernel chosen: its ``name`` (:data:`SDPA_KERNELS`), the ``device``, whether ``torch``
    answered or the ``rules`` did (``source``), and ``reason`` (why the faster kernels refused)."""

    name: str
    device: AttentionDevice
    source: str
    reason: str = ""
    refused: dict = field(default_factory=dict, compare=False)

    @property
    def label(self) -> str:
        """``"sdpa-flash"``, ``"sdpa-math"``…: the name the memory formulas take as ``attention``."""
        return f"sdpa-{self.name}"

    @property
    def fused(self) -> bool:
        return self.name in FUSED_KERNELS

    def __str__(self) -> str:
        text = f"{self.label} on {self.device} ({'asked torch' if self.source == 'torch' else 'documented rules'})"
        return f"{text}: {self.reason}" if self.reason else text


# ---- the rules ------------------------------------------------------------------------------


def _within(capability, bounds) -> bool:
    return bounds[0] <= capability <= bounds[1]


def _heads_refusal(call: SdpaCall, supports_gqa: bool) -> str | None:
    if call.kv_heads == call.heads:
        return None
    if call.heads % call.kv_heads:
        return f"{call.heads} query heads are not a multiple of {call.kv_heads} key/value heads"
    if not call.enable_gqa:
        return "key/value heads differ from query heads without enable_gqa"
    return None if supports_gqa else "grouped-query attention (enable_gqa) is not supported"


def _flash_refusal(call: SdpaCall, capability) -> str | None:
    if not _within(capability, _FLASH_CAPABILITY):
        return "needs compute capability 8.0-12.1"
    if call.dtype not in _LOW_PRECISION:
        return f"takes fp16 and bf16 only, not {_dtype_name(call.dtype)}"
    if call.mask:
        return "takes no explicit attention mask"
    if not call.head_width == call.value_width <= _FLASH_MAX_HEAD_WIDTH:
        return f"needs equal head widths of at most {_FLASH_MAX_HEAD_WIDTH}"
    low, high = _SM86_89_FLASH_TRAINING_HEAD_WIDTHS
    if call.training and ((8, 6) <= capability <= (8, 9) or capability[0] == 12):
        if low < call.head_width <= high or (call.head_width > high and call.dropout > 0):
            return "cannot train head widths over 192 on cc 8.6-8.9 and 12.x"
    return _heads_refusal(call, supports_gqa=True)


def _gemm_alignment(dtype: torch.dtype, capability) -> int:
    """Elements a head width must be a multiple of for memory-efficient attention (``minimum_gemm_alignment``)."""
    half = dtype in _LOW_PRECISION
    tensor_cores = capability[0] >= 8 or (capability[0] >= 7 and half)
    alignment = 4 if capability[0] >= 8 else 1
    return max(alignment, 128 // (16 if half else 32)) if tensor_cores else alignment


def _efficient_refusal(call: SdpaCall, capability) -> str | None:
    if not _within(capability, _EFFICIENT_CAPABILITY):
        return "needs compute capability 5.0-12.1"
    dtypes = (torch.float16, torch.float32, torch.bfloat16) if capability[0] >= 8 else (torch.float16, torch.float32)
    if call.dtype not in dtypes:
        return f"does not take {_dtype_name(call.dtype)} on compute capability {capability[0]}.{capability[1]}"
    alignment = _gemm_alignment(call.dtype, capability)
    if call.head_width % alignment or call.value_width % alignment:
        return f"needs head widths that are multiples of {alignment}"
    return _heads_refusal(call, supports_gqa=False)


def _cudnn_refusal(call: SdpaCall, capability) -> str | None:
    if not _within(capability, _FLASH_CAPABILITY):
        return "needs compute capability 8.0-12.1"
    if call.dtype not in _LOW_PRECISION:
        return f"takes fp16 and bf16 only, not {_dtype_name(call.dtype)}"
    if call.dropout * _CUDNN_DROPOUT_RESOLUTION != math.floor(call.dropout * _CUDNN_DROPOUT_RESOLUTION):
        return "takes dropout in multiples of 1/16 only"
    widths = (call.head_width, call.value_width)
    if max(widths) > _CUDNN_MAX_HEAD_WIDTH or any(width % _CUDNN_HEAD_WIDTH_MULTIPLE for width in widths):
        return f"needs head widths that are multiples of 8, at most {_CUDNN_MAX_HEAD_WIDTH}"
    if call.heads % call.kv_heads:
        return f"{call.heads} query heads are not a multiple of {call.kv_heads} key/value heads"
    return None


def cuda_kernel_rules(call: SdpaCall, capability: tuple[int, int]) -> SdpaKernel:
    """The kernel torch 2.5-2.13 runs for ``call`` on an NVIDIA GPU of this compute ``capability``,
    by the constraints of its ``sdp_utils.cpp``; ``refused`` holds each refusing kernel's reason.

    >>> call = SdpaCall(torch.bfloat16, batch=4, heads=32, kv_heads=4, sequence=2048, head_width=64)
    >>> kernel = cuda_kernel_rules(call, (9, 0))
    >>> kernel.name, kernel.refused["efficient"]
    ('cudnn', 'grouped-query attention (enable_gqa) is not supported')
    >>> cuda_kernel_rules(call, (8, 0)).name  # an A100: torch tries flash first
    'flash'
    >>> cuda_kernel_rules(replace(call, dtype=torch.float32, kv_heads=32), (9, 0)).name  # fp32 without GQA
    'efficient'
    """
    device = attention_device(AttentionDevice("cuda", capability))
    refusals = {"flash": _flash_refusal(call, capability), "cudnn": _cudnn_refusal(call, capability),
                "efficient": _efficient_refusal(call, capability)}
    refused = {name: reason for name, reason in refusals.items() if reason is not None}
    tried = {}
    for name in _cuda_priority(capability):
        if name == "math" or name not in refused:
            return SdpaKernel(name, device, "rules", _refusal_text(tried), refused)
        tried[name] = refused[name]
    raise AssertionError("math ends every priority order")


def _cuda_priority(capability) -> tuple[str, ...]:
    """torch's order: cuDNN first on cc 9.0 and 10.x (with cuDNN newer than 9.15, as torch's CUDA 13
    wheels ship), else flash, memory-efficient, math, and cuDNN never before math."""
    if capability == (9, 0) or capability[0] == 10:
        return ("cudnn", "flash", "efficient", "math")
    return ("flash", "efficient", "math")


def cpu_kernel_rules(call: SdpaCall) -> SdpaKernel:
    """The kernel torch runs for ``call`` on the CPU: its flash kernel
    (``_scaled_dot_product_flash_attention_for_cpu``) unless it refuses, then math.

    >>> call = SdpaCall(torch.float32, batch=2, heads=4, kv_heads=2, sequence=16, head_width=16)
    >>> cpu_kernel_rules(call).name, cpu_kernel_rules(replace(call, dropout=0.1)).reason
    ('flash', 'flash refuses: dropout is not supported')
    """
    if call.dropout > 0:
        reason = "dropout is not supported"
    elif call.dtype not in _CPU_FLASH_DTYPES:
        reason = f"does not take {_dtype_name(call.dtype)}"
    elif call.head_width != call.value_width:
        reason = "needs equal head widths for query, key and value"
    else:
        reason = _heads_refusal(call, supports_gqa=True)
    device = AttentionDevice("cpu")
    if reason is None:
        return SdpaKernel("flash", device, "rules")
    return SdpaKernel("math", device, "rules", _refusal_text({"flash": reason}), {"flash": reason})


def _refusal_text(refused: dict) -> str:
    return "; ".join(f"{name} refuses: {reason}" for name, reason in refused.items())


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ---- asking torch ----------------------------------------------------------------------------


def _call_tensors(call: SdpaCall, device: str):
    """Query, key, value (batch 1, Hugging Face's (batch, sequence, heads, width) layout seen as
    (batch, heads, sequence, width)) and the mask, on ``device``."""

    def projection(heads: int, width: int) -> torch.Tensor:
        tensor = torch.empty(1, call.sequence, heads, width, dtype=call.dtype, device=device).transpose(1, 2)
        return tensor.requires_grad_(call.training and call.dtype.is_floating_point)

    mask = torch.ones(1, 1, call.sequence, call.sequence, dtype=torch.bool, device=device).tril() if call.mask else None
    return (projection(call.heads, call.head_width), projection(call.kv_heads, call.head_width),
            projection(call.kv_heads, call.value_width), mask)


def torch_kernel_choice(call: SdpaCall, device: str = "cpu") -> str:
    """The kernel name torch's own dispatcher (``torch._fused_sdp_choice``) picks for ``call`` on a
    real ``device`` of this machine (``"cpu"``, ``"cuda:1"``; ``"cuda"``: the current CUDA device),
    with the backends enabled now (``torch.nn.attention.sdpa_kernel``, ``torch.backends.cuda.enable_*_sdp``).
    A dispatcher without ``enable_gqa`` (torch before 2.5) is asked about the call it would get: the
    key/value heads repeated."""
    return _torch_choice(call, device)[0]


def _torch_choice(call: SdpaCall, device: str) -> tuple[str, bool]:
    """``(kernel name, whether the key/value heads were repeated for a dispatcher without enable_gqa)``."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())  # remembered under the index it stands for
    enabled = (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled(),
               torch.backends.cuda.math_sdp_enabled(), torch.backends.cuda.cudnn_sdp_enabled())
    return _torch_kernel_choice(call, str(device), enabled, torch._fused_sdp_choice)


@functools.lru_cache(maxsize=256)
def _torch_kernel_choice(call: SdpaCall, device: str, enabled: tuple, dispatcher) -> tuple[str, bool]:
    """:func:`_torch_choice`, remembered per call, device (with its index), enabled backends and dispatcher."""
    causal = call.causal and not call.mask
    repeated = False
    with warnings.catch_warnings(record=True) as why:  # torch warns each refusal before it gives up
        warnings.simplefilter("always")
        try:
            query, key, value, mask = _call_tensors(call, device)
            try:
                choice = dispatcher(query, key, value, mask, call.dropout, causal, enable_gqa=call.enable_gqa)
            except TypeError as error:  # torch before 2.5: no enable_gqa; the call it gets has the heads repeated
                if "enable_gqa" not in str(error):
                    raise
                asked = without_enable_gqa(call)
                repeated = asked is not call
                query, key, value, mask = _call_tensors(asked, device)
                choice = dispatcher(query, key, value, mask, call.dropout, causal)
        except RuntimeError as error:  # every enabled kernel refuses: torch's warnings say why
            reasons = "; ".join(str(warning.message).split(" (Triggered")[0] for warning in why)
            raise AccountingError(f"scaled_dot_product_attention has no enabled kernel for {call} on {device}: "
                                  f"{reasons or error}") from error
    if choice not in _BACKEND_NAMES:
        raise AccountingError(f"scaled_dot_product_attention chose backend {choice} for {call}, not a known kernel")
    return _BACKEND_NAMES[choice], repeated


def without_enable_gqa(call: SdpaCall) -> SdpaCall:
    """The call as a torch without ``enable_gqa`` gets it: key/value heads repeated to every query head
    (a call without grouped heads, or without ``enable_gqa``, unchanged).

    >>> without_enable_gqa(SdpaCall(torch.bfloat16, batch=1, heads=8, kv_heads=2, sequence=4, head_width=8)).kv_heads
    8
    """
    if not call.enable_gqa or call.kv_heads == call.heads or call.heads % call.kv_heads:
        return call
    return replace(call, kv_heads=call.heads, enable_gqa=False)


_REPEATED = "this torch's SDPA takes no enable_gqa: key/value heads repeated to every query head"


def _cuda_index(requested: int | None) -> int | None:
    """The index of the CUDA device of this machine that ``requested`` names (``None``: the current one), or
    ``None`` where this machine has no such device."""
    if not torch.cuda.is_available():
        return None
    index = torch.cuda.current_device() if requested is None else requested
    return index if index < torch.cuda.device_count() else None


def _asked_torch(call: SdpaCall, device: AttentionDevice, rules: SdpaKernel) -> SdpaKernel:
    """torch's choice on this machine's ``device``, with the ``rules``' reasons where they agree with it."""
    name, repeated = _torch_choice(call, device.name)
    reason = rules.reason if rules.name == name else ""
    if repeated:
        reason = f"{_REPEATED}; {reason}" if reason else _REPEATED
    return SdpaKernel(name, device, "torch", reason, rules.refused)


def choose_sdpa_kernel(call: SdpaCall, device="cpu") -> SdpaKernel:
    """The kernel ``scaled_dot_product_attention`` runs for ``call`` on ``device`` (see the module docstring).

    ``device``: an :class:`AttentionDevice` (``AttentionDevice("cuda", (9, 0))`` for a GPU of that compute
    capability, wherever this runs), a ``torch.device`` or its name. torch is asked for the CPU, for
    ``meta`` (math: meta tensors have no fused kernel), and for a CUDA device this machine has (with the
    capability asked for, or none named; ``"cuda:1"`` is asked on device 1); the documented rules answer for any
    other CUDA device. On a torch without ``enable_gqa`` (before 2.5) a grouped-query call is judged with its heads
    repeated, as it runs there (:func:`without_enable_gqa`).

    >>> call = SdpaCall(torch.bfloat16, batch=1, heads=8, kv_heads=8, sequence=128, head_width=64, dropout=0.1)
    >>> str(choose_sdpa_kernel(call, "cpu"))
    'sdpa-math on cpu (asked torch): flash refuses: dropout is not supported'
    """
    if not isinstance(call, SdpaCall):
        raise AccountingTypeError(f"call must be an SdpaCall, got {call!r}")
    device = attention_device(device)
    if device.type == "meta":
        return SdpaKernel("math", device, "torch", "meta tensors have no fused kernel")
    judged = call if SDPA_TAKES_ENABLE_GQA else without_enable_gqa(call)
    if device.type == "cpu":
        return _asked_torch(call, device, cpu_kernel_rules(judged))
    index = _cuda_index(device.index)
    local = None if index is None else tuple(torch.cuda.get_device_capability(index))
    if local is not None and device.capability in (None, local):
        return _asked_torch(call, AttentionDevice("cuda", local, index), cuda_kernel_rules(judged, local))
    if device.capability is None:
        raise AccountingError(
            f"no CUDA device {device.name} here to ask which attention kernel runs: name its compute capability, "
            "e.g. AttentionDevice('cuda', (9, 0)) for an H100 or H200"
        )
    kernel = cuda_kernel_rules(judged, device.capability)
    if judged is not call:
        kernel = replace(kernel, reason=f"{_REPEATED}; {kernel.reason}" if kernel.reason else _REPEATED)
    return replace(kernel, device=device) if device.index is not None else kernel
