"""Plan a model the formulas do not describe: build it from its config on the meta device and trace a step.

Where ``TransformerConfig.from_hf`` does not know a ``model_type`` and ``transformers`` is installed,
the model ``transformers`` builds from the ``config.json`` is made on the ``meta`` device (nothing
allocated, nothing downloaded) and one training step of it is measured at the plan's batch and
sequence length with the package's own machinery: parameters (``sum(p.numel())``), matmul FLOPs
(:func:`accounting.flop_count.count_flops`, ``grouped_mm`` included) and the step's memory
(:func:`accounting.model.traced_step.traced_training_step_memory`: saved activations, gradients,
optimizer state and the peak, exact storage sizes). Seconds for an 8B model on a laptop.

What a trace cannot know, and the output says: the attention kernel a real device runs (the model
runs ``attn_implementation="eager"`` here, which keeps every (s × s) score matrix: an upper bound
for a fused kernel), the allocator's rounding and caching, and autocast (which meta tensors ignore:
the model is traced in the weights' dtype of the precision, and a separate master copy is added as
bytes, not traced). A model that reads its tensors' values (a mixture of experts that asks which
tokens went to which expert) cannot run on meta: that is an error saying so.

>>> config = {"model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
...           "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 64}
>>> traced = trace_step(config, batch_size=2, sequence_length=32)  # doctest: +SKIP
>>> traced.parameters, traced.flops, traced.memory.phase           # doctest: +SKIP
(99840, 34603008, 'backward')
"""

from dataclasses import dataclass

import torch

from accounting._checks import check_positive_size
from accounting.errors import AccountingError
from accounting.flop_count import count_flops
from accounting.model.activations import precision_policy
from accounting.model.hf_config import read_config_json
from accounting.model.traced_step import TracedStepMemory, traced_training_step_memory
from accounting.memory import storage_dtype

EXTRA = "hf"
"""The extra of this package that installs ``transformers`` (``pip install 'accounting[hf]'``)."""

UNKNOWABLE = ("the attention kernel a real device runs (traced eager: every s x s score matrix kept)",
              "allocator rounding and caching", "autocast (traced in the weights' dtype)")
"""What a trace on the meta device cannot know, as the plan prints it."""


@dataclass(frozen=True)
class TracedModel:
    """One traced training step of a model built from its ``config.json``.

    ``parameters``: every parameter of the model ``transformers`` builds (shared ones once);
    ``flops``: matmul FLOPs of the step (forward and backward, 2 per multiply-add); ``memory``: the
    traced step's bytes by part; ``master_bytes``: a master copy the policy keeps beside the traced
    weights (not traced: added to the peak); ``dtype``: the weights' dtype the step was traced in.
    """

    model_type: str
    architecture: str
    batch_size: int
    sequence_length: int
    dtype: str
    parameters: int
    flops: int
    memory: TracedStepMemory
    master_bytes: int

    @property
    def tokens(self) -> int:
        return self.batch_size * self.sequence_length

    @property
    def peak(self) -> int:
        """The traced step's peak and the untraced master copy."""
        return self.memory.peak + self.master_bytes


def _transformers(model_type):
    try:
        import transformers  # deferred: an optional package (the hf extra), only a traced plan needs it
    except ImportError:
        raise AccountingError(
            f"model_type {model_type!r} is not one from_hf reads, and tracing it needs transformers, which is not "
            f"installed: pip install 'accounting[{EXTRA}]'"
        ) from None
    return transformers


def _hf_config(transformers, config_json: dict):
    model_type = config_json.get("model_type")
    fields = {key: value for key, value in config_json.items() if key != "model_type"}
    try:
        return transformers.AutoConfig.for_model(model_type, **fields)
    except (ValueError, KeyError, TypeError) as error:
        raise AccountingError(f"transformers cannot build model_type {model_type!r}: {error}") from None


def trace_step(source, *, batch_size: int = 1, sequence_length: int | None = None, precision: str = "bf16-mixed",
               optimizer: str = "adamw") -> TracedModel:
    """Build the model of ``source`` (a ``config.json`` path or dict) on meta and trace one training step of
    ``batch_size`` sequences of ``sequence_length`` tokens (default ``max_position_embeddings``) under
    ``precision``'s weights and ``optimizer`` (see the module docstring)."""
    config_json = read_config_json(source)
    model_type = config_json.get("model_type")
    transformers = _transformers(model_type)
    hf = _hf_config(transformers, config_json)
    batch = check_positive_size(batch_size, "batch_size")
    length = sequence_length or getattr(hf, "max_position_embeddings", None)
    length = check_positive_size(length, "sequence_length")
    policy = precision_policy(precision)
    dtype = storage_dtype(policy.weights)

    def build():
        with torch.device("meta"):
            return transformers.AutoModelForCausalLM.from_config(hf, attn_implementation="eager", dtype=dtype)

    try:
        model = build()
    except Exception as error:  # a config transformers refuses, a model that is not a causal LM
        raise AccountingError(f"transformers cannot build a causal LM of model_type {model_type!r}: {error}") from None
    parameters = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    ids = torch.zeros(batch, length, dtype=torch.long, device="meta")

    def step():
        model(input_ids=ids, labels=ids).loss.backward()

    try:
        flops = count_flops(step, source=f"a {model_type} training step on meta").total
        memory = traced_training_step_memory(build, {"input_ids": ids, "labels": ids}, optimizer=optimizer)
    except (AccountingError, RuntimeError, NotImplementedError) as error:
        raise AccountingError(
            f"a {model_type} step cannot be traced on the meta device ({error}); a model that reads its tensors' "
            "values (a mixture of experts routing tokens) needs a real device"
        ) from None
    master = parameters * policy.bytes_of("master_weights")
    return TracedModel(model_type, type(model).__name__, batch, length, str(dtype).removeprefix("torch."),
                       parameters, flops, memory, master)
