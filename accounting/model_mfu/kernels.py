"""Which attention kernel a counted step ran, read off its FLOP count, and what that kernel costs and saves.

``scaled_dot_product_attention`` picks its kernel at run time (dtype, device, head width, grouped-query
attention, mask): the step's ``FlopCounterMode`` count names the aten operator that ran, so the measurement says
which kernel it measured instead of assuming one. The fused kernels (flash, memory-efficient, cuDNN, the CPU's
flash) save no (s × s) matrix (the memory formula's ``"sdpa-flash"``…) and recompute QKᵀ in backward: five
(s × s)-sized products there to the math kernel's four, one more QKᵀ per layer, which ``FlopCounterMode`` counts
as hardware FLOPs (torch's own flash-backward formula) and the model-FLOP convention does not. The math kernel
runs the products as ``bmm`` and keeps the (s × s) weights (``"sdpa-math"``), as eager attention does
(``"eager"``). Before a step runs, :func:`accounting.model.attention_kernels.choose_sdpa_kernel` predicts the kernel (the
memory formulas' ``attention="sdpa"`` on a device).

>>> from accounting.flop_count import FlopCount
>>> count = FlopCount(10, {"aten.mm": 6, "aten._scaled_dot_product_flash_attention_for_cpu": 4})
>>> attention_kernel(count, "sdpa"), formula_attention(attention_kernel(count, "sdpa"))
('flash (CPU)', 'sdpa-flash')
>>> attention_kernel(FlopCount(10, {"aten.mm": 6, "aten.bmm": 4}), "sdpa")
'math'

Where a step is not counted (or a torch's counter cannot count its attention), :func:`kernel_that_ran` reads the
same name off the operators torch dispatched while the step ran.
"""

from torch.utils._python_dispatch import TorchDispatchMode

from accounting._checks import check_choice
from accounting.flop_count import operator_name
from accounting.model import attention_kernels
from accounting.model.config import TransformerConfig

FUSED_KERNELS = {
    "aten._scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten._scaled_dot_product_flash_attention": "flash",
    "aten._scaled_dot_product_efficient_attention": "memory-efficient",
    "aten._scaled_dot_product_cudnn_attention": "cuDNN",
}
"""The aten operator of each fused attention kernel (its forward), and the kernel's name; a step whose count has
none ran ``math`` (``scaled_dot_product_attention``'s fallback: matmuls and a softmax, the weights kept) or
``eager`` (the model's own attention written out, ``attention="eager"``)."""


def attention_kernel(count, attention: str) -> str:
    """The kernel a counted step's attention ran: a fused kernel's name, ``"math"`` or ``"eager"``."""
    return _kernel_of({operator for operator, flops in count.by_operator.items() if flops}, attention)


def _kernel_of(operators, attention: str) -> str:
    for operator, name in FUSED_KERNELS.items():
        if operator in operators:
            return name
    return "math" if attention == "sdpa" else "eager"


class _Operators(TorchDispatchMode):
    """Records the name of every aten operator dispatched inside it (after autograd: the kernels that run)."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.add(operator_name(func))
        return func(*args, **(kwargs or {}))


def kernel_that_ran(run, attention: str = "sdpa") -> str:
    """Call ``run()`` once and name the kernel its attention ran, as :func:`attention_kernel` names it from a count,
    from the operators torch dispatched (no FLOP formulas: any step of any model, on any torch).

    >>> import torch
    >>> q = torch.ones(1, 2, 4, 8)
    >>> kernel_that_ran(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True))
    'flash (CPU)'
    """
    with _Operators() as operators:
        run()
    return _kernel_of(operators.seen, attention)


FORMULA_ATTENTIONS = {"flash (CPU)": "sdpa-flash", "flash": "sdpa-flash", "memory-efficient": "sdpa-efficient",
                      "cuDNN": "sdpa-cudnn", "math": "sdpa-math", "eager": "eager"}
"""The memory formulas' attention for each kernel (:data:`accounting.model.activations.ATTENTIONS`)."""


def formula_attention(kernel: str) -> str:
    """The memory formulas' attention for a kernel that ran: ``"sdpa-flash"``, ``"sdpa-math"``, ``"eager"``…

    >>> formula_attention("flsh")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: attention kernel must be one of 'flash (CPU)', 'flash', 'memory-efficient', 'cuDNN', 'math', 'eager', got 'flsh'
    """
    return FORMULA_ATTENTIONS[check_choice(kernel, tuple(FORMULA_ATTENTIONS), "attention kernel")]


def is_fused(kernel: str) -> bool:
    """A fused kernel (flash, memory-efficient, cuDNN): no (s × s) weights kept, QKᵀ recomputed in backward
    (:data:`accounting.model.attention_kernels.FUSED_KERNELS`, by the memory formulas' name for it)."""
    return formula_attention(kernel).removeprefix("sdpa-") in attention_kernels.FUSED_KERNELS


def recomputed_scores_flops(config: TransformerConfig, batch_size: int) -> int:
    """FLOPs of the QKᵀ a fused kernel's backward computes again: 2·b·H·s·s·d per layer, 2 per multiply-add.

    >>> recomputed_scores_flops(TransformerConfig(layers=2, width=8, heads=2, sequence_length=4, vocabulary=5), 3)
    1536
    """
    s = config.sequence_length
    return config.layers * 2 * batch_size * config.heads * s * s * config.head_width
