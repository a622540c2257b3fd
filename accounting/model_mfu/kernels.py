"""Which attention kernel a counted step ran, read off its FLOP count, and what that kernel costs and saves.

``scaled_dot_product_attention`` picks its kernel at run time (dtype, device, head width, grouped-query
attention, mask): the step's ``FlopCounterMode`` count names the aten operator that ran, so the measurement says
which kernel it measured instead of assuming one. The fused kernels (flash, memory-efficient, cuDNN, the CPU's
flash) save no (s × s) matrix (the memory formula's ``attention="sdpa"``) and recompute QKᵀ in backward: five
(s × s)-sized products there to the math kernel's four, one more QKᵀ per layer, which ``FlopCounterMode`` counts
as hardware FLOPs (torch's own flash-backward formula) and the model-FLOP convention does not. The math kernel
(and eager attention) runs the products as ``bmm`` and keeps the (s × s) weights (``attention="eager"``).

>>> from accounting.flop_count import FlopCount
>>> count = FlopCount(10, {"aten.mm": 6, "aten._scaled_dot_product_flash_attention_for_cpu": 4})
>>> attention_kernel(count, "sdpa"), formula_attention(attention_kernel(count, "sdpa"))
('flash (CPU)', 'sdpa')
>>> attention_kernel(FlopCount(10, {"aten.mm": 6, "aten.bmm": 4}), "sdpa")
'math'
"""

from accounting.transformer import TransformerConfig

FUSED_KERNELS = {
    "aten._scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten._scaled_dot_product_flash_attention": "flash",
    "aten._scaled_dot_product_efficient_attention": "memory-efficient",
    "aten._scaled_dot_product_cudnn_attention": "cuDNN",
}
"""The aten operator of each fused attention kernel (its forward), and the kernel's name."""
UNFUSED_KERNELS = ("math", "eager")
"""``math``: ``scaled_dot_product_attention``'s fallback (matmuls and a softmax, the weights kept);
``eager``: the model's own attention written out (``attention="eager"``)."""


def attention_kernel(count, attention: str) -> str:
    """The kernel a counted step's attention ran: a fused kernel's name, ``"math"`` or ``"eager"``."""
    for operator, name in FUSED_KERNELS.items():
        if count.by_operator.get(operator):
            return name
    return "math" if attention == "sdpa" else "eager"


def formula_attention(kernel: str) -> str:
    """The memory formulas' attention for a kernel: ``"sdpa"`` for a fused one, ``"eager"`` for the others."""
    return "eager" if kernel in UNFUSED_KERNELS else "sdpa"


def recomputed_scores_flops(config: TransformerConfig, batch_size: int) -> int:
    """FLOPs of the QKᵀ a fused kernel's backward computes again: 2·b·H·s·s·d per layer, 2 per multiply-add.

    >>> recomputed_scores_flops(TransformerConfig(layers=2, width=8, heads=2, sequence_length=4, vocabulary=5), 3)
    1536
    """
    s = config.sequence_length
    return config.layers * 2 * batch_size * config.heads * s * s * config.head_width


def expected_formula_attention(config: TransformerConfig, precision: str, device_type: str, attention: str = "sdpa"
                               ) -> str:
    """The memory formulas' attention to predict a step with before it runs (to decide whether it fits).

    ``"eager"`` for eager attention, and for SDPA where its fused kernels refuse the inputs: on CUDA, fp32 with
    grouped-query attention (recorded on an H200, torch 2.11: flash, memory-efficient and cuDNN all refuse it,
    and the math kernel kept 2.17 x the fused prediction). ``"sdpa"`` otherwise. A rule read off one recorded
    run, for fit decisions only; a measurement uses the kernel its FLOP count names.

    >>> from accounting.model_mfu.sizes import model_size
    >>> llama = model_size("tinyllama-1.1b").config
    >>> [expected_formula_attention(llama, precision, "cuda") for precision in ("fp32", "bf16")]
    ['eager', 'sdpa']
    """
    if attention == "eager":
        return "eager"
    grouped = config.kv_heads < config.heads
    return "eager" if device_type == "cuda" and precision == "fp32" and grouped else "sdpa"
