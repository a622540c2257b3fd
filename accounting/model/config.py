"""The shape of a decoder-only transformer, as the memory and FLOP formulas see it.

``layers`` pre-norm blocks (norm → attention → residual, norm → MLP → residual), a final
norm and a vocabulary projection (the unembedding). The defaults are GPT-2: learned
position embeddings, LayerNorm with biases, a 4h GELU MLP, as many key/value heads as
query heads, the unembedding tied to the token embedding. The other fields describe
today's families: grouped-query attention (``kv_heads``), a head width that is not
width / heads, three-matrix SwiGLU MLPs, RMSNorm, rotary positions (no position
parameters), biases on Q, K and V only (Qwen2), and mixture-of-experts MLPs with top-k
routing (Mixtral). Newer families are the same blocks with a few described differences: where
the norms sit (``norm_placement``: after the sublayer, OLMo 2; around it, Gemma), norms on the
queries and keys (``qk_norm``: Qwen3, Gemma 3, OLMo 2), per-head attention sinks (gpt-oss),
multi-head latent attention (``kv_lora_rank``…: DeepSeek), shared experts and dense first layers
(DeepSeek), local attention layers (``sliding_window``: Gemma, gpt-oss) and soft-capped scores
and logits (Gemma 2). :meth:`TransformerConfig.from_hf` reads a Hugging Face ``config.json``
(the families it knows are described in :mod:`accounting.model.hf_config`).

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
from accounting._checks import check_choice, check_positive_size, check_size
from accounting.errors import AccountingError, AccountingTypeError

MLP_KINDS = ("gelu", "swiglu", "clamped-swiglu")
NORM_KINDS = ("layernorm", "rmsnorm", "fp32-rmsnorm")
"""``layernorm`` (GPT-2); ``rmsnorm`` (Llama: normalised in fp32, cast back, times w); ``fp32-rmsnorm``
(OLMo 2's and gpt-oss's w·x̂, Gemma's (1 + w)·x̂: normalised and weighted in fp32, cast at the end).
The two RMSNorms count the same (a weight of h); they save different tensors for backward."""
NORM_PLACEMENTS = ("pre", "post", "sandwich")
"""Where a block's norms sit: ``pre``, before attention and before the MLP (GPT-2, Llama); ``post``,
after each, on the sublayer's output before the residual add (OLMo 2); ``sandwich``, before and after
each, four a block (Gemma 2 and 3)."""
QK_NORMS = ("none", "head", "projection")
"""Norms on the queries and keys before the scores: ``head``, one RMSNorm of the head width shared by
every head (Qwen3, Gemma 3: 2·d weights); ``projection``, one over the whole Q and one over the whole K
projection (OLMo 2: H·d + K·d weights)."""
ACTIVE_EMBEDDINGS = ("both", "unembedding")
"""Which embedding matrices a published active-parameter count includes: ``both`` (Qwen's), or the
unembedding only, the lookup being no multiply (DeepSeek's and OpenAI's)."""
GELUS = ("fused", "unfused")
"""How a GELU MLP's activation is computed, which decides what it saves for backward (not what it counts):
``fused``, one op (``F.gelu``, exact or tanh; Hugging Face ``"gelu"``, ``"gelu_pytorch_tanh"``) saving its
input; ``unfused``, the tanh formula in elementwise ops (Hugging Face ``"gelu_new"``, GPT-2's own setting),
saving five tensors of the MLP's width."""
# Weight matrices of one MLP (or of one expert): GELU up and down; SwiGLU gate, up and down.
_MLP_MATRICES = {"gelu": 2, "swiglu": 3, "clamped-swiglu": 3}


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
      depend on the elementwise function: a ReLU MLP is ``"gelu"``, a GeGLU one ``"swiglu"``;
      ``"clamped-swiglu"`` is gpt-oss's (gate and up clamped, (up + 1)·gate·σ(α·gate)): SwiGLU's counts,
      more saved for backward.
    - ``norm``: ``"layernorm"`` (a weight, and a bias when ``bias``), ``"rmsnorm"`` or ``"fp32-rmsnorm"``
      (a weight only; :data:`NORM_KINDS`).
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
    - ``norm_placement`` (:data:`NORM_PLACEMENTS`): ``"pre"``, ``"post"`` (2 norms a block) or
      ``"sandwich"`` (4).
    - ``qk_norm`` (:data:`QK_NORMS`): ``"none"``, ``"head"`` (2·d weights) or ``"projection"`` (H·d + K·d).
    - ``fused_projections``: Q, K and V are one matrix, and so are gate and up (Phi-3): the same counts
      and FLOPs; one matmul reads the norm's output (what autocast copies), and a tensor-parallel plan
      must split the fused matrices by component.
    - ``attention_sinks``: a learned logit per query head joins every softmax (gpt-oss: H weights a block).
    - Multi-head latent attention (DeepSeek V2/V3), when ``kv_lora_rank`` is given: keys and values
      come from a shared latent of ``kv_lora_rank`` (h → ``kv_lora_rank`` + ``rope_head_width``, a norm,
      then ``kv_lora_rank`` → H·(d − ``rope_head_width`` + ``value_head_width``)); queries from h directly
      (h → H·d) or, with ``q_lora_rank``, through a normed latent of that rank. ``head_width`` d is the
      width scores are taken over (nope + rope: 192), ``value_head_width`` the values' (128).
    - ``value_head_width``: features per head of the values and the attention output; ``None``
      means ``head_width``.
    - ``shared_experts``: with experts, an MLP of ``shared_experts`` · ``ffn_width`` that every token
      goes through besides its routed experts (DeepSeek).
    - ``dense_layers``: with experts, blocks whose MLP is one dense MLP of ``dense_ffn_width``
      (``None``: ``ffn_width``) instead of experts (DeepSeek's first layers, Qwen3-MoE's ``mlp_only_layers``).
    - ``sliding_window``, ``sliding_layers``: that many blocks attend only to the last ``sliding_window``
      tokens (Gemma, gpt-oss, Mistral); the counts do not change, what a kernel keeps may.
    - ``attention_softcap``, ``logit_softcap``: scores, and the final logits, pass through
      c·tanh(x / c) (Gemma 2): elementwise work that saves tensors for backward.
    - ``active_embeddings`` (:data:`ACTIVE_EMBEDDINGS`): the convention :attr:`active_parameter_count`
      follows for the embeddings.
    - ``mtp_modules``: multi-token-prediction modules trained beside the model (DeepSeek-V3's
      ``num_nextn_predict_layers``), each a projection 2h → h of the normed embedding and normed hidden
      state, their two norms and one block of the last block's kind; the embedding and the output head
      are the model's own, shared (:attr:`mtp_parameter_count`).

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
    norm_placement: str = "pre"
    qk_norm: str = "none"
    attention_sinks: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    rope_head_width: int | None = None
    value_head_width: int | None = None
    shared_experts: int = 0
    dense_layers: int = 0
    dense_ffn_width: int | None = None
    sliding_window: int | None = None
    sliding_layers: int = 0
    attention_softcap: bool = False
    logit_softcap: bool = False
    active_embeddings: str = "both"
    fused_projections: bool = False
    mtp_modules: int = 0

    def __post_init__(self):
        for name in ("layers", "width", "heads", "sequence_length", "vocabulary", "experts", "experts_per_token"):
            check_positive_size(getattr(self, name), name)
        for name in ("tied_embeddings", "learned_positions", "bias", "attention_sinks", "attention_softcap",
                     "logit_softcap", "fused_projections"):
            if not isinstance(getattr(self, name), bool):
                raise AccountingTypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.qkv_bias is not None and not isinstance(self.qkv_bias, bool):
            raise AccountingTypeError(f"qkv_bias must be True, False or None, got {self.qkv_bias!r}")
        check_choice(self.mlp, MLP_KINDS, "mlp")
        check_choice(self.norm, NORM_KINDS, "norm")
        check_choice(self.gelu, GELUS, "gelu")
        check_choice(self.norm_placement, NORM_PLACEMENTS, "norm_placement")
        check_choice(self.qk_norm, QK_NORMS, "qk_norm")
        check_choice(self.active_embeddings, ACTIVE_EMBEDDINGS, "active_embeddings")
        for name in ("shared_experts", "dense_layers", "sliding_layers", "mtp_modules"):
            check_size(getattr(self, name), name)
        for name in ("q_lora_rank", "kv_lora_rank", "rope_head_width", "value_head_width", "dense_ffn_width",
                     "sliding_window"):
            if getattr(self, name) is not None:
                check_positive_size(getattr(self, name), name)
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
        if self.value_head_width is None:
            object.__setattr__(self, "value_head_width", self.head_width)
        if self.dense_ffn_width is None:
            object.__setattr__(self, "dense_ffn_width", self.ffn_width)
        self._check_latent_attention()
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
        if self.experts == 1 and (self.shared_experts or self.dense_layers):
            raise AccountingError(
                f"shared_experts={self.shared_experts} and dense_layers={self.dense_layers} describe a mixture of"
                " experts, but experts=1"
            )
        if self.dense_layers > self.layers or self.sliding_layers > self.layers:
            raise AccountingError(
                f"dense_layers={self.dense_layers} or sliding_layers={self.sliding_layers} is more than"
                f" layers={self.layers}"
            )
        if (self.sliding_window is None) != (self.sliding_layers == 0):
            raise AccountingError(
                f"sliding_window={self.sliding_window} with sliding_layers={self.sliding_layers}: give both"
                " (a window and the blocks that use it) or neither"
            )
        if self.learned_positions and self.max_positions < self.sequence_length:
            raise AccountingError(
                f"max_positions={self.max_positions} is less than sequence_length={self.sequence_length}:"
                " the learned position table has no row for the later tokens"
            )

    def _check_latent_attention(self) -> None:
        latent = self.kv_lora_rank is not None
        if not latent and (self.q_lora_rank is not None or self.rope_head_width is not None):
            raise AccountingError(
                f"q_lora_rank={self.q_lora_rank} and rope_head_width={self.rope_head_width} describe latent"
                " attention, which needs kv_lora_rank"
            )
        if latent:
            if self.rope_head_width is None:
                raise AccountingError(
                    f"latent attention (kv_lora_rank={self.kv_lora_rank}) needs rope_head_width, the rotated part"
                    " of each head"
                )
            if self.rope_head_width >= self.head_width:
                raise AccountingError(
                    f"rope_head_width={self.rope_head_width} must be less than head_width={self.head_width}"
                    " (the rest of each head's query and key is not rotated)"
                )
            if self.qkv_bias or self.kv_heads != self.heads:
                raise AccountingError(
                    f"latent attention with qkv_bias={self.qkv_bias} or kv_heads={self.kv_heads} ≠ heads cannot be"
                    " described (DeepSeek's has neither)"
                )

    @property
    def latent_attention(self) -> bool:
        """Multi-head latent attention (DeepSeek): keys and values from a shared low-rank latent."""
        return self.kv_lora_rank is not None

    @property
    def norms_per_layer(self) -> int:
        """Norms of one block besides Q/K norms: 4 with ``norm_placement="sandwich"``, else 2."""
        return 4 if self.norm_placement == "sandwich" else 2

    @property
    def sparse_layers(self) -> int:
        """Blocks whose MLP is the experts (all of them without ``dense_layers``; 0 without experts)."""
        return self.layers - self.dense_layers if self.experts > 1 else 0

    @classmethod
    def from_hf(cls, config, sequence_length: int | None = None, *, mtp: bool = False) -> "TransformerConfig":
        """The config of a Hugging Face ``config.json`` (a dict, or the path of the file).

        Reads model types ``gpt2``, ``llama``, ``mistral``, ``qwen2`` and ``mixtral`` without
        importing ``transformers``; a key it does not know, or a setting it cannot model, is
        an error naming it (see :mod:`accounting.model.hf_config`). ``sequence_length`` defaults to
        the model's ``max_position_embeddings`` (``n_positions`` for GPT-2). ``mtp``: count the
        multi-token-prediction modules a DeepSeek config names (``num_nextn_predict_layers``), which
        ``transformers`` does not build but a training run with them carries (``mtp_modules``).

        >>> config = TransformerConfig.from_hf({"model_type": "gpt2", "n_layer": 12, "n_embd": 768,
        ...     "n_head": 12, "n_positions": 1024, "vocab_size": 50257}, sequence_length=256)
        >>> config.parameter_count, config.sequence_length, config.max_positions
        (124439808, 256, 1024)
        """
        return cls(**hf_config.config_fields(config, sequence_length, mtp=mtp))

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
    def value_width(self) -> int:
        """H·d_v: width of the attention output before its projection (H·d unless ``value_head_width``)."""
        return self.heads * self.value_head_width

    def attention_projections(self) -> list[tuple[int, int]]:
        """(inputs, outputs) of every matrix of one block's attention, in the order the block applies them.

        >>> TransformerConfig(layers=1, width=8, heads=2, kv_heads=1, sequence_length=4, vocabulary=10,
        ...     ).attention_projections()
        [(8, 8), (8, 4), (8, 4), (8, 8)]
        """
        h, heads, d = self.width, self.heads, self.head_width
        if not self.latent_attention:
            return [(h, self.attention_width), (h, self.kv_width), (h, self.kv_width), (self.attention_width, h)]
        query = [(h, heads * d)] if self.q_lora_rank is None else [(h, self.q_lora_rank), (self.q_lora_rank, heads * d)]
        nope = d - self.rope_head_width
        latent = [(h, self.kv_lora_rank + self.rope_head_width),
                  (self.kv_lora_rank, heads * (nope + self.value_head_width))]
        return query + latent + [(self.value_width, h)]

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
        """Q (h·H·d), K and V (h·K·d each) and output (H·d·h) weights of one layer (latent attention:
        its :meth:`attention_projections`)."""
        return sum(inputs * outputs for inputs, outputs in self.attention_projections())

    @property
    def attention_parameter_count(self) -> int:
        """One layer's attention: its matrices, Q/K/V biases (``qkv_bias``), output bias (``bias``),
        Q/K norms (``qk_norm``), the latents' norms and the sinks."""
        qkv = self.attention_width + 2 * self.kv_width if self.qkv_bias else 0
        output = self.width if self.bias else 0
        qk_norm = {"none": 0, "head": 2 * self.head_width,
                   "projection": self.attention_width + self.kv_width}[self.qk_norm]
        latent_norms = (self.q_lora_rank or 0) + (self.kv_lora_rank or 0)
        sinks = self.heads if self.attention_sinks else 0
        return self.attention_matmul_parameter_count + qkv + output + qk_norm + latent_norms + sinks

    @property
    def expert_matmul_parameter_count(self) -> int:
        """Weights of one MLP (one expert): 2hf (GELU) or 3hf (SwiGLU)."""
        return self.mlp_matrices * self.width * self.ffn_width

    def _mlp_parameters(self, ffn_width: int) -> int:
        """One MLP of hidden width ``ffn_width`` with its biases: ``ffn_width`` per h → f matrix, h for the
        down one."""
        biases = (self.mlp_matrices - 1) * ffn_width + self.width if self.bias else 0
        return self.mlp_matrices * self.width * ffn_width + biases

    @property
    def expert_parameter_count(self) -> int:
        """One MLP (one expert) with its biases: f per h → f matrix and h for the down matrix."""
        return self._mlp_parameters(self.ffn_width)

    @property
    def router_parameter_count(self) -> int:
        """The router's h·E weights, and E biases with ``bias`` (gpt-oss); 0 without experts."""
        if self.experts == 1:
            return 0
        return (self.width + 1) * self.experts if self.bias else self.width * self.experts

    @property
    def shared_expert_parameter_count(self) -> int:
        """The shared MLP of ``shared_experts`` · f every token goes through (0 without)."""
        return self._mlp_parameters(self.shared_experts * self.ffn_width) if self.shared_experts else 0

    @property
    def mlp_parameter_count(self) -> int:
        """One layer's MLP: every expert, the shared experts and the router (without experts, the MLP)."""
        return self.experts * self.expert_parameter_count + self.router_parameter_count \
            + self.shared_expert_parameter_count

    @property
    def dense_mlp_parameter_count(self) -> int:
        """The MLP of one of the ``dense_layers``: one MLP of ``dense_ffn_width``."""
        return self._mlp_parameters(self.dense_ffn_width)

    @property
    def layer_parameter_count(self) -> int:
        """One block (with experts, one whose MLP is the experts): attention, MLP and its norms."""
        norms = self.norms_per_layer * self.norm_parameter_count
        return self.attention_parameter_count + self.mlp_parameter_count + norms

    @property
    def dense_layer_parameter_count(self) -> int:
        """One of the ``dense_layers``: attention, a dense MLP and its norms."""
        return self.layer_parameter_count - self.mlp_parameter_count + self.dense_mlp_parameter_count

    @property
    def blocks_parameter_count(self) -> int:
        """Every block's parameters: the expert blocks and the ``dense_layers``."""
        return (self.layers - self.dense_layers) * self.layer_parameter_count \
            + self.dense_layers * self.dense_layer_parameter_count

    @property
    def _shared_matmul_parameter_count(self) -> int:
        return self.mlp_matrices * self.width * self.shared_experts * self.ffn_width

    @property
    def _router_matmul_parameter_count(self) -> int:
        return self.width * self.experts if self.experts > 1 else 0

    @property
    def layer_matmul_parameter_count(self) -> int:
        """Weights of one block that multiply activations: attention, every expert's MLP, the shared
        experts, the router."""
        return (
            self.attention_matmul_parameter_count
            + self.experts * self.expert_matmul_parameter_count
            + self._shared_matmul_parameter_count
            + self._router_matmul_parameter_count
        )

    @property
    def layer_active_matmul_parameter_count(self) -> int:
        """Weights of one block that one token multiplies: attention, ``experts_per_token`` experts,
        the shared experts and the router (equal to :attr:`layer_matmul_parameter_count` without experts)."""
        return (
            self.attention_matmul_parameter_count
            + self.experts_per_token * self.expert_matmul_parameter_count
            + self._shared_matmul_parameter_count
            + self._router_matmul_parameter_count
        )

    @property
    def dense_layer_matmul_parameter_count(self) -> int:
        """Weights of one of the ``dense_layers`` that multiply activations: attention and its MLP."""
        return self.attention_matmul_parameter_count + self.mlp_matrices * self.width * self.dense_ffn_width

    @property
    def blocks_active_matmul_parameter_count(self) -> int:
        """Weights of every block that one token multiplies (the multi-token-prediction modules' too)."""
        return (self.layers - self.dense_layers) * self.layer_active_matmul_parameter_count \
            + self.dense_layers * self.dense_layer_matmul_parameter_count \
            + self.mtp_modules * (self.layer_active_matmul_parameter_count + self._mtp_projection)

    @property
    def _mtp_projection(self) -> int:
        return 2 * self.width * self.width

    @property
    def mtp_parameter_count(self) -> int:
        """The multi-token-prediction modules' parameters (``mtp_modules``; DeepSeek-V3 report, section 2.2):
        each a projection 2h → h without bias, an RMSNorm of the embedding and one of the hidden state,
        and one block (an expert block with experts: DeepSeek-V3's follows its 58 expert blocks); the
        embedding and the output head are shared with the model, not counted again.

        >>> config = TransformerConfig(layers=2, width=8, heads=2, sequence_length=4, vocabulary=10, bias=False,
        ...     norm="rmsnorm", mlp="swiglu", learned_positions=False, mtp_modules=1)
        >>> config.mtp_parameter_count == 2 * 8 * 8 + 2 * 8 + config.layer_parameter_count
        True
        """
        return self.mtp_modules * (self._mtp_projection + 2 * self.norm_parameter_count + self.layer_parameter_count)

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
        """Parameters one token uses, by the family's convention (``active_embeddings``): every
        parameter but the ``experts - experts_per_token`` experts of each expert block it is not routed
        to, and with ``"unembedding"`` not the embedding lookup (a tied matrix is the unembedding, kept).
        Equal to :attr:`parameter_count` without experts and with ``"both"``.

        >>> moe = TransformerConfig(layers=2, width=8, heads=2, sequence_length=4, vocabulary=10, mlp="swiglu",
        ...     bias=False, norm="rmsnorm", tied_embeddings=False, learned_positions=False, ffn_width=4,
        ...     experts=4, experts_per_token=1)
        >>> moe.parameter_count - moe.active_parameter_count  # 2 layers × 3 idle experts × 3·8·4
        576
        """
        return self.active_parameters(self.active_embeddings)

    def active_parameters(self, embeddings: str = "both") -> int:
        """:attr:`active_parameter_count` under either convention of :data:`ACTIVE_EMBEDDINGS`."""
        check_choice(embeddings, ACTIVE_EMBEDDINGS, "embeddings")
        expert_blocks = self.sparse_layers + (self.mtp_modules if self.experts > 1 else 0)
        idle = expert_blocks * (self.experts - self.experts_per_token) * self.expert_parameter_count
        lookup = self.embedding_parameter_count if embeddings == "unembedding" and not self.tied_embeddings else 0
        return self.parameter_count - idle - lookup

    @property
    def parameter_count(self) -> int:
        """Every parameter, the tied embedding counted once."""
        unembedding = 0 if self.tied_embeddings else self.unembedding_parameter_count
        return (
            self.embedding_parameter_count
            + self.blocks_parameter_count
            + self.norm_parameter_count
            + unembedding
            + self.mtp_parameter_count
        )
