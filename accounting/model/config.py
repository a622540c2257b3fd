"""The shape of a decoder-only transformer, as the memory and FLOP formulas see it.

``layers`` pre-norm blocks (norm → attention → residual, norm → MLP → residual), a final
norm and a vocabulary projection (the unembedding). The defaults are GPT-2: learned
position embeddings, LayerNorm with biases, a 4h GELU MLP, as many key/value heads as
query heads, the unembedding tied to the token embedding. The other fields describe
today's families: grouped-query attention (``kv_heads``), a head width that is not
width / heads, three-matrix SwiGLU MLPs, RMSNorm, rotary positions (no position
parameters), biases on Q, K and V only (Qwen2), and mixture-of-experts MLPs with top-k
routing (Mixtral). :meth:`TransformerConfig.from_hf` reads a Hugging Face ``config.json``.

>>> from accounting import TransformerConfig
>>> gpt2 = TransformerConfig(layers=12, width=768, heads=12, sequence_length=1024, vocabulary=50257)
>>> gpt2.parameter_count, gpt2.head_width, gpt2.ffn_width
(124439808, 64, 3072)
>>> llama3_8b = TransformerConfig(layers=32, width=4096, heads=32, kv_heads=8, sequence_length=8192,
...     vocabulary=128256, ffn_width=14336, mlp="swiglu", norm="rmsnorm", bias=False,
...     tied_embeddings=False, learned_positions=False)
>>> llama3_8b.parameter_count, llama3_8b.kv_width
(8030261248, 1024)
"""

from dataclasses import dataclass

from accounting.model import hf_config
from accounting._checks import check_choice, check_positive_size
from accounting.errors import AccountingError, AccountingTypeError

MLP_KINDS = ("gelu", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")
GELUS = ("fused", "unfused")
"""How a GELU MLP's activation is computed, which decides what it saves for backward (not what it counts):
``fused``, one op (``F.gelu``, exact or tanh; Hugging Face ``"gelu"``, ``"gelu_pytorch_tanh"``) saving its
input; ``unfused``, the tanh formula in elementwise ops (Hugging Face ``"gelu_new"``, GPT-2's own setting),
saving five tensors of the MLP's width."""
# Weight matrices of one MLP (or of one expert): GELU up and down; SwiGLU gate, up and down.
_MLP_MATRICES = {"gelu": 2, "swiglu": 3}


@dataclass(frozen=True)
class TransformerConfig:
    """Sizes of a decoder-only transformer (h = ``width``, H = ``heads``, K = ``kv_heads``,
    d = ``head_width``, f = ``ffn_width``, E = ``experts``, V = ``vocabulary``).

    - ``layers`` (L), ``width`` (h, the residual stream), ``heads`` (H, query heads),
      ``sequence_length`` (s or T, tokens per sequence), ``vocabulary`` (V).
    - ``ffn_width``: hidden width f of the MLP (of each expert); ``None`` means ``4 * width``.
    - ``tied_embeddings``: the unembedding reuses the token embedding matrix (GPT-2 does).
    - ``learned_positions``: a (``max_positions``, width) position-embedding table (GPT-2);
      ``False`` for position schemes without parameters (rotary, ALiBi).
    - ``bias``: the attention output projection, the MLP matrices and LayerNorms carry biases
      (GPT-2 does; the unembedding and the router never do).
    - ``kv_heads`` (K): key/value heads; ``None`` means ``heads`` (multi-head attention), fewer
      is grouped-query attention (K = 1: multi-query). Must divide ``heads``.
    - ``head_width`` (d): features per head; ``None`` means ``width // heads`` (then ``heads``
      must divide ``width``). Q projects h → H·d, K and V h → K·d, the output H·d → h.
    - ``mlp``: ``"gelu"``, two matrices h → f → h (GPT-2); ``"swiglu"``, three: gate and up
      (h → f) and down (f → h) (Llama, Mistral, Qwen2, Mixtral's experts). The counts do not
      depend on the elementwise function: a ReLU MLP is ``"gelu"``, a GeGLU one ``"swiglu"``.
    - ``norm``: ``"layernorm"`` (a weight, and a bias when ``bias``) or ``"rmsnorm"`` (a weight only).
    - ``qkv_bias``: the Q, K and V projections carry biases; ``None`` means the same as ``bias``
      (Qwen2: ``bias=False, qkv_bias=True``).
    - ``experts`` (E): with more than one, each layer's MLP is ``experts`` copies of the MLP
      plus a router (an h → E matrix without bias); each token goes through
      ``experts_per_token`` (top-k) of them (Mixtral-8x7B: 8 and 2).
    - ``max_positions``: rows of the learned position table; ``None`` means
      ``sequence_length``. A model built for 1024 positions (GPT-2) keeps its 1024 rows when
      it runs shorter sequences. Only counted with ``learned_positions``.
    - ``gelu``: how a ``"gelu"`` MLP's activation is computed, ``"fused"`` or ``"unfused"``
      (:data:`GELUS`): it changes the activations saved for backward, never the counts.

    Every ``None`` is replaced by its value when the config is made, so ``config.head_width``
    is always a number.

    >>> qwen = TransformerConfig(layers=1, width=8, heads=2, kv_heads=1, sequence_length=4,
    ...     vocabulary=10, bias=False, qkv_bias=True, norm="rmsnorm", learned_positions=False)
    >>> qwen.head_width, qwen.kv_width, qwen.attention_parameter_count  # 8·8 + 2·8·4 + 8·8, biases 8 + 2·4
    (4, 4, 208)
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
    kv_heads: int | None = None
    head_width: int | None = None
    mlp: str = "gelu"
    norm: str = "layernorm"
    qkv_bias: bool | None = None
    experts: int = 1
    experts_per_token: int = 1
    max_positions: int | None = None
    gelu: str = "fused"

    def __post_init__(self):
        for name in ("layers", "width", "heads", "sequence_length", "vocabulary", "experts", "experts_per_token"):
            check_positive_size(getattr(self, name), name)
        for name in ("tied_embeddings", "learned_positions", "bias"):
            if not isinstance(getattr(self, name), bool):
                raise AccountingTypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.qkv_bias is not None and not isinstance(self.qkv_bias, bool):
            raise AccountingTypeError(f"qkv_bias must be True, False or None, got {self.qkv_bias!r}")
        check_choice(self.mlp, MLP_KINDS, "mlp")
        check_choice(self.norm, NORM_KINDS, "norm")
        check_choice(self.gelu, GELUS, "gelu")
        defaults = {
            "ffn_width": 4 * self.width,
            "kv_heads": self.heads,
            "head_width": self.width // self.heads,
            "qkv_bias": self.bias,
            "max_positions": self.sequence_length,
        }
        if self.head_width is None and self.width % self.heads:
            raise AccountingError(
                f"heads={self.heads} does not divide width={self.width}: each head needs width / heads features"
                " (or give head_width)"
            )
        for name, default in defaults.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, default)
        for name in ("ffn_width", "kv_heads", "head_width", "max_positions"):
            check_positive_size(getattr(self, name), name)
        if self.heads % self.kv_heads:
            raise AccountingError(
                f"kv_heads={self.kv_heads} does not divide heads={self.heads}: each key/value head serves a whole"
                " group of query heads"
            )
        if self.experts_per_token > self.experts:
            raise AccountingError(
                f"experts_per_token={self.experts_per_token} is more than experts={self.experts}"
            )
        if self.learned_positions and self.max_positions < self.sequence_length:
            raise AccountingError(
                f"max_positions={self.max_positions} is less than sequence_length={self.sequence_length}:"
                " the learned position table has no row for the later tokens"
            )

    @classmethod
    def from_hf(cls, config, sequence_length: int | None = None) -> "TransformerConfig":
        """The config of a Hugging Face ``config.json`` (a dict, or the path of the file).

        Reads model types ``gpt2``, ``llama``, ``mistral``, ``qwen2`` and ``mixtral`` without
        importing ``transformers``; a key it does not know, or a setting it cannot model, is
        an error naming it (see :mod:`accounting.model.hf_config`). ``sequence_length`` defaults to
        the model's ``max_position_embeddings`` (``n_positions`` for GPT-2).

        >>> config = TransformerConfig.from_hf({"model_type": "gpt2", "n_layer": 12, "n_embd": 768,
        ...     "n_head": 12, "n_positions": 1024, "vocab_size": 50257}, sequence_length=256)
        >>> config.parameter_count, config.sequence_length, config.max_positions
        (124439808, 256, 1024)
        """
        return cls(**hf_config.config_fields(config, sequence_length))

    # ---- widths ----------------------------------------------------------------------

    @property
    def attention_width(self) -> int:
        """H·d: width of the queries (and of the attention output before its projection)."""
        return self.heads * self.head_width

    @property
    def kv_width(self) -> int:
        """K·d: width of the keys, and of the values, per token (what a KV cache stores, each)."""
        return self.kv_heads * self.head_width

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of one MLP, or of one expert: 2 (GELU) or 3 (SwiGLU)."""
        return _MLP_MATRICES[self.mlp]

    # ---- parameters of one part --------------------------------------------------------

    @property
    def norm_parameter_count(self) -> int:
        """One norm: a weight of h, and a bias of h for a LayerNorm with ``bias``."""
        return 2 * self.width if self.norm == "layernorm" and self.bias else self.width

    @property
    def attention_matmul_parameter_count(self) -> int:
        """Q (h·H·d), K and V (h·K·d each) and output (H·d·h) weights of one layer."""
        return 2 * self.width * self.attention_width + 2 * self.width * self.kv_width

    @property
    def attention_parameter_count(self) -> int:
        """One layer's attention: its matrices, Q/K/V biases (``qkv_bias``), output bias (``bias``)."""
        qkv = self.attention_width + 2 * self.kv_width if self.qkv_bias else 0
        output = self.width if self.bias else 0
        return self.attention_matmul_parameter_count + qkv + output

    @property
    def expert_matmul_parameter_count(self) -> int:
        """Weights of one MLP (one expert): 2hf (GELU) or 3hf (SwiGLU)."""
        return self.mlp_matrices * self.width * self.ffn_width

    @property
    def expert_parameter_count(self) -> int:
        """One MLP (one expert) with its biases: f per h → f matrix and h for the down matrix."""
        biases = (self.mlp_matrices - 1) * self.ffn_width + self.width if self.bias else 0
        return self.expert_matmul_parameter_count + biases

    @property
    def router_parameter_count(self) -> int:
        """The router's h·E weights (no bias); 0 without experts."""
        return self.width * self.experts if self.experts > 1 else 0

    @property
    def mlp_parameter_count(self) -> int:
        """One layer's MLP: every expert and the router."""
        return self.experts * self.expert_parameter_count + self.router_parameter_count

    @property
    def layer_parameter_count(self) -> int:
        """One block: attention, MLP and its two norms."""
        return self.attention_parameter_count + self.mlp_parameter_count + 2 * self.norm_parameter_count

    @property
    def layer_matmul_parameter_count(self) -> int:
        """Weights of one block that multiply activations: attention, every expert's MLP, the router."""
        return (
            self.attention_matmul_parameter_count
            + self.experts * self.expert_matmul_parameter_count
            + self.router_parameter_count
        )

    @property
    def layer_active_matmul_parameter_count(self) -> int:
        """Weights of one block that one token multiplies: attention, ``experts_per_token`` experts
        and the router (equal to :attr:`layer_matmul_parameter_count` without experts)."""
        return (
            self.attention_matmul_parameter_count
            + self.experts_per_token * self.expert_matmul_parameter_count
            + self.router_parameter_count
        )

    @property
    def embedding_parameter_count(self) -> int:
        """The token embedding (V·h), and the learned position table (``max_positions``·h)."""
        positions = self.max_positions * self.width if self.learned_positions else 0
        return self.vocabulary * self.width + positions

    @property
    def unembedding_parameter_count(self) -> int:
        """Weights of the vocabulary projection (shared with the token embedding when tied)."""
        return self.vocabulary * self.width

    @property
    def active_parameter_count(self) -> int:
        """Parameters one token uses: every parameter but the ``experts - experts_per_token``
        experts of each layer it is not routed to (equal to :attr:`parameter_count` without experts)."""
        idle = self.layers * (self.experts - self.experts_per_token) * self.expert_parameter_count
        return self.parameter_count - idle

    @property
    def parameter_count(self) -> int:
        """Every parameter, the tied embedding counted once."""
        unembedding = 0 if self.tied_embeddings else self.unembedding_parameter_count
        return (
            self.embedding_parameter_count
            + self.layers * self.layer_parameter_count
            + self.norm_parameter_count
            + unembedding
        )
