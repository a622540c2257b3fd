"""Named model sizes for the training-step benchmark: a config and a batch, overridable.

- ``tiny``: the quick suite's size; a step takes milliseconds on one CPU core.
- ``small``: the ``-m cpu`` size; big enough that matmuls dominate the step on a CPU.
- ``gpt2-small``: GPT-2 small (124M parameters) at nanoGPT's micro-batch of 12 × 1024
  tokens (karpathy/nanoGPT ``train.py``: ``batch_size = 12``, ``block_size = 1024``),
  the GPU size.

>>> size = model_size("tiny", layers=3)
>>> size.config.layers, size.batch_size, size.tokens
(3, 4, 256)
"""

import dataclasses
from dataclasses import dataclass

from accounting._checks import check_choice, check_positive_size
from accounting.errors import AccountingTypeError
from accounting.transformer import TransformerConfig


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
    )
}

_OVERRIDES = {"layers": "layers", "width": "width", "heads": "heads", "seq": "sequence_length",
              "vocabulary": "vocabulary"}


def model_size(name, *, layers=None, width=None, heads=None, seq=None, vocabulary=None, batch=None) -> ModelSize:
    """The named size, with any of its numbers replaced (the MLP stays 4 × width; key/value heads, head width and
    position table follow the new sizes, as GPT-2's do).

    >>> model_size("huge")
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: model size must be one of 'tiny', 'small', 'gpt2-small', got 'huge'
    """
    if not isinstance(name, str):
        raise AccountingTypeError(f"model size must be a name such as 'tiny', got {name!r}")
    size = MODEL_SIZES[check_choice(name.strip().lower(), tuple(MODEL_SIZES), "model size")]
    given = {"layers": layers, "width": width, "heads": heads, "seq": seq, "vocabulary": vocabulary}
    changes = {_OVERRIDES[key]: check_positive_size(value, key) for key, value in given.items() if value is not None}
    config = size.config
    if changes:
        changes.setdefault("ffn_width", 4 * changes.get("width", config.width))
        for derived in ("kv_heads", "head_width", "max_positions"):  # GPT-2's: they follow the new sizes
            changes.setdefault(derived, None)
        config = dataclasses.replace(config, **changes)
    batch_size = size.batch_size if batch is None else check_positive_size(batch, "batch")
    return ModelSize(size.name, config, batch_size)
