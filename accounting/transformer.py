"""The shape of a decoder-only transformer, as the memory and FLOP formulas see it.

The architecture is GPT-2's: learned token and position embeddings, ``layers`` pre-norm
blocks (LayerNorm → multi-head attention → residual, LayerNorm → MLP of width
``ffn_width`` → residual), a final LayerNorm and a vocabulary projection (the
unembedding), tied to the token embedding by default.

>>> from accounting import TransformerConfig
>>> gpt2 = TransformerConfig(layers=12, width=768, heads=12, sequence_length=1024, vocabulary=50257)
>>> gpt2.parameter_count, gpt2.head_width, gpt2.ffn_width
(124439808, 64, 3072)
"""

from dataclasses import dataclass

from accounting._checks import check_positive_size
from accounting.errors import AccountingError, AccountingTypeError


@dataclass(frozen=True)
class TransformerConfig:
    """Sizes of a GPT-style decoder-only transformer.

    - ``layers`` (L), ``width`` (h, the residual stream), ``heads`` (a; must divide ``width``),
      ``sequence_length`` (s or T, tokens per sequence), ``vocabulary`` (V).
    - ``ffn_width``: hidden width of the MLP; ``None`` means ``4 * width``.
    - ``tied_embeddings``: the unembedding reuses the token embedding matrix (GPT-2 does).
    - ``learned_positions``: a (sequence_length, width) position-embedding table (GPT-2);
      ``False`` for position schemes without parameters (rotary, ALiBi).
    - ``bias``: linear layers and LayerNorms carry biases (GPT-2 does; the unembedding never).
    """

    layers: int
    width: int
    heads: int
    sequence_length: int
    vocabulary: int
    ffn_width: int | None = None
    tied_embeddings: bool = True
    learned_positions: bool = True
    bias: bool = True

    def __post_init__(self):
        for name in ("layers", "width", "heads", "sequence_length", "vocabulary"):
            check_positive_size(getattr(self, name), name)
        if self.ffn_width is None:
            object.__setattr__(self, "ffn_width", 4 * self.width)
        check_positive_size(self.ffn_width, "ffn_width")
        if self.width % self.heads:
            raise AccountingError(
                f"heads={self.heads} does not divide width={self.width}: each head needs width / heads features"
            )
        for name in ("tied_embeddings", "learned_positions", "bias"):
            if not isinstance(getattr(self, name), bool):
                raise AccountingTypeError(f"{name} must be True or False, got {getattr(self, name)!r}")

    @property
    def head_width(self) -> int:
        """Features per head (Q in PaLM's notation): ``width // heads``."""
        return self.width // self.heads

    @property
    def layer_matmul_parameter_count(self) -> int:
        """Weights of one block that multiply activations: Q, K, V and output projections, two MLP matrices."""
        h, f = self.width, self.ffn_width
        return 4 * h * h + 2 * h * f

    @property
    def unembedding_parameter_count(self) -> int:
        """Weights of the vocabulary projection (shared with the token embedding when tied)."""
        return self.vocabulary * self.width

    @property
    def parameter_count(self) -> int:
        """Every parameter, the tied embedding counted once."""
        h, f = self.width, self.ffn_width
        norm = 2 * h if self.bias else h
        layer_biases = (3 * h + h + f + h) if self.bias else 0
        layer = self.layer_matmul_parameter_count + layer_biases + 2 * norm
        embeddings = self.vocabulary * h + (self.sequence_length * h if self.learned_positions else 0)
        unembedding = 0 if self.tied_embeddings else self.unembedding_parameter_count
        return embeddings + self.layers * layer + norm + unembedding
