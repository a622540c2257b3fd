"""Named model sizes for the training-step benchmark: a config and a batch, overridable.

- ``tiny``: the quick suite's size; a step takes milliseconds on one CPU core.
- ``small``: the ``-m cpu`` size; big enough that matmuls dominate the step on a CPU.
- ``gpt2-small``: GPT-2 small (124M parameters) at nanoGPT's micro-batch of 12 × 1024
  tokens (karpathy/nanoGPT ``train.py``: ``batch_size = 12``, ``block_size = 1024``).
- ``tiny-llama``: the Llama family (RMSNorm, rotary positions, grouped-query attention, SwiGLU,
  untied unembedding) at the ``tiny`` scale, for the CPU tests.
- ``tinyllama-1.1b``: TinyLlama-1.1B's shape (TinyLlama/TinyLlama-1.1B ``config.json``: 22 layers,
  width 2048, 32 heads, 4 key/value heads, SwiGLU 5632, vocabulary 32000, 2048 tokens; 1,100,048,384
  parameters) at batch 4 × 2048, the batch of the Hugging Face step recorded on an H200
  (``tests/data/hosts/nvidia-h200/hf-llama-step-peaks.json``): the 1B class, big enough to fill a GPU.

:func:`size_that_fits` picks, for a device's free memory, the named size at the largest batch that
fits (``transformer_training_memory``'s prediction), or a fallback size.

>>> size = model_size("tiny", layers=3)
>>> size.config.layers, size.batch_size, size.tokens
(3, 4, 256)
"""

import dataclasses
from dataclasses import dataclass

from accounting._checks import check_choice, check_positive_size
from accounting.errors import AccountingTypeError
from accounting.model.config import TransformerConfig


@dataclass(frozen=True)
class ModelSize:
    """A transformer config and the number of sequences per step."""

    name: str
    config: TransformerConfig
    batch_size: int

    @property
    def tokens(self) -> int:
        return self.batch_size * self.config.sequence_length

    def describe(self) -> str:
        """``tiny: 2 layers, width 64, 4 heads, 64 tokens x batch 4, vocabulary 256``."""
        c = self.config
        return (f"{self.name}: {c.layers} layers, width {c.width}, {c.heads} heads, "
                f"{c.sequence_length} tokens x batch {self.batch_size}, vocabulary {c.vocabulary}")


MODEL_SIZES = {
    size.name: size
    for size in (
        ModelSize("tiny", TransformerConfig(layers=2, width=64, heads=4, sequence_length=64, vocabulary=256), 4),
        ModelSize("small", TransformerConfig(layers=4, width=256, heads=4, sequence_length=256, vocabulary=2048), 4),
        ModelSize("gpt2-small",
                  TransformerConfig(layers=12, width=768, heads=12, sequence_length=1024, vocabulary=50257), 12),
        ModelSize("tiny-llama",
                  TransformerConfig(layers=2, width=64, heads=4, kv_heads=2, sequence_length=64, vocabulary=256,
                                    ffn_width=176, mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                                    learned_positions=False), 4),
        ModelSize("tinyllama-1.1b",
                  TransformerConfig(layers=22, width=2048, heads=32, kv_heads=4, sequence_length=2048,
                                    vocabulary=32000, ffn_width=5632, mlp="swiglu", norm="rmsnorm", bias=False,
                                    tied_embeddings=False, learned_positions=False), 4),
    )
}

_OVERRIDES = {"layers": "layers", "width": "width", "heads": "heads", "seq": "sequence_length",
              "vocabulary": "vocabulary"}


def model_size(name, *, layers=None, width=None, heads=None, seq=None, vocabulary=None, batch=None) -> ModelSize:
    """The named size, with any of its numbers replaced (the MLP keeps its ratio to the width: 4 × for GPT-2,
    5632 / 2048 for TinyLlama; key/value heads keep their share of the heads where it divides them, else one per
    query head; head width and position table follow the new sizes).

    >>> smaller = model_size("tinyllama-1.1b", width=1024, heads=16).config
    >>> smaller.ffn_width, smaller.kv_heads
    (2816, 2)

    >>> model_size("huge")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: model size must be one of 'tiny', 'small', 'gpt2-small', 'tiny-llama', 'tinyllama-1.1b', got 'huge'
    """
    if not isinstance(name, str):
        raise AccountingTypeError(f"model size must be a name such as 'tiny', got {name!r}")
    size = MODEL_SIZES[check_choice(name.strip().lower(), tuple(MODEL_SIZES), "model size")]
    given = {"layers": layers, "width": width, "heads": heads, "seq": seq, "vocabulary": vocabulary}
    changes = {_OVERRIDES[key]: check_positive_size(value, key) for key, value in given.items() if value is not None}
    config = size.config
    if changes:
        new_width, new_heads = changes.get("width", config.width), changes.get("heads", config.heads)
        changes.setdefault("ffn_width", config.ffn_width * new_width // config.width)
        groups = config.heads // config.kv_heads
        changes.setdefault("kv_heads", new_heads // groups if new_heads % groups == 0 else None)
        for derived in ("head_width", "max_positions"):  # they follow the new sizes
            changes.setdefault(derived, None)
        config = dataclasses.replace(config, **changes)
    batch_size = size.batch_size if batch is None else check_positive_size(batch, "batch")
    return ModelSize(size.name, config, batch_size)
