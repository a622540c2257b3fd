"""Predicted vs measured training memory of Hugging Face models: ``python -m studies.training_memory_families``.

For each family (GPT-2, Llama, Qwen2, Mixtral), precision policy (fp32, bf16-autocast,
bf16-master) and recompute setting (none, full), builds the ``transformers`` model of a
small config with random weights on the CPU, runs two AdamW training steps and measures the
second with the live-tensor tracker (:func:`accounting.measure_step_memory`): the bytes the
forward pass saved and the step's peak, weights, gradients and optimizer state included. It
prints them beside :func:`accounting.transformer_training_memory`'s prediction as a Markdown
table (the one in docs/model-mfu-and-training-memory.md).

How each policy's step runs:

- ``fp32``: fp32 weights, AdamW on them;
- ``bf16-autocast``: fp32 weights, the forward under ``torch.autocast("cpu", torch.bfloat16)``;
- ``bf16-master``: bf16 weights and gradients, an fp32 master copy AdamW updates: each bf16
  gradient is copied to fp32 and freed, the step runs, the master is copied back.

Recompute ``full`` is ``model.activation_checkpointing_enable()`` (non-reentrant
``torch.utils.checkpoint`` around every block; ``gradient_checkpointing_enable`` is its
deprecated alias).
"""

import argparse
import contextlib
import sys

import torch

from accounting import TransformerConfig, transformer_training_memory
from accounting.live_memory import measure_step_memory

BATCH_SIZE = 4
FAMILIES = {
    # Small configs shaped like the real ones: the head width, MLP ratio, GQA ratio and tying of
    # each family; vocabularies a few times the width.
    "gpt2": TransformerConfig(layers=3, width=96, heads=4, sequence_length=64, vocabulary=384),
    "llama": TransformerConfig(
        layers=3, width=96, heads=4, kv_heads=2, sequence_length=64, vocabulary=384, ffn_width=256,
        mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False, learned_positions=False,
    ),
    "qwen2": TransformerConfig(
        layers=3, width=96, heads=4, kv_heads=2, sequence_length=64, vocabulary=384, ffn_width=256,
        mlp="swiglu", norm="rmsnorm", bias=False, qkv_bias=True, tied_embeddings=False, learned_positions=False,
    ),
    "mixtral": TransformerConfig(
        layers=3, width=96, heads=4, kv_heads=2, sequence_length=64, vocabulary=384, ffn_width=128,
        mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False, learned_positions=False,
        experts=4, experts_per_token=2,
    ),
}
_LARGER_LLAMA = dict(
    layers=4, width=128, heads=8, kv_heads=2, sequence_length=128, vocabulary=512, ffn_width=352,
    mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False, learned_positions=False,
)
LARGER = {
    # Another shape, to check the fitted working set is not fitted to one: 4 layers, width 128, 8 heads
    # (4 per key/value head), 128 tokens, Mixtral with 8 experts.
    "gpt2": TransformerConfig(layers=4, width=128, heads=8, sequence_length=128, vocabulary=512),
    "llama": TransformerConfig(**_LARGER_LLAMA),
    "qwen2": TransformerConfig(**_LARGER_LLAMA | {"qkv_bias": True}),
    "mixtral": TransformerConfig(**_LARGER_LLAMA | {"ffn_width": 192, "experts": 8, "experts_per_token": 2}),
}
SHAPES = {"small": (FAMILIES, BATCH_SIZE), "larger": (LARGER, 2)}
GELU = {"gpt2": "unfused"}
"""GPT-2's ``activation_function`` is ``gelu_new``: the tanh formula in elementwise ops."""
POLICIES = ("fp32", "bf16-autocast", "bf16-master")
RECOMPUTES = ("none", "full")


def hf_model(family: str, config: TransformerConfig, attention: str = "eager"):
    """The ``transformers`` model of ``config`` (random weights, dropout off, training mode)."""
    import transformers  # a large import, only for this study and its tests

    common = dict(
        vocab_size=config.vocabulary, hidden_size=config.width, num_hidden_layers=config.layers,
        num_attention_heads=config.heads, max_position_embeddings=config.max_positions,
        tie_word_embeddings=config.tied_embeddings, attn_implementation=attention,
    )
    if family == "gpt2":
        settings = transformers.GPT2Config(
            vocab_size=config.vocabulary, n_embd=config.width, n_layer=config.layers, n_head=config.heads,
            n_positions=config.max_positions, n_inner=config.ffn_width, activation_function="gelu_new",
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=config.tied_embeddings,
            attn_implementation=attention, bos_token_id=0, eos_token_id=0,
        )
        model = transformers.GPT2LMHeadModel(settings)
    else:
        llama_like = dict(
            common, num_key_value_heads=config.kv_heads, head_dim=config.head_width,
            intermediate_size=config.ffn_width,
        )
        if family == "mixtral":
            settings = transformers.MixtralConfig(
                **llama_like, num_local_experts=config.experts, num_experts_per_tok=config.experts_per_token,
            )
            model = transformers.MixtralForCausalLM(settings)
        elif family == "qwen2":
            model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**llama_like))
        else:
            model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**llama_like))
    return model.train()


def measure(family: str, config: TransformerConfig, precision: str, recompute: str, batch_size: int = BATCH_SIZE,
            attention: str = "eager", seed: int = 0):
    """The :class:`accounting.live_memory.StepMemory` of the family's model of ``config`` (:func:`measure_model`)."""
    torch.manual_seed(seed)
    return measure_model(hf_model(family, config, attention), config, precision, recompute, batch_size, seed)


def measure_model(model, config: TransformerConfig, precision: str, recompute: str, batch_size: int = BATCH_SIZE,
                  seed: int = 0):
    """The :class:`accounting.live_memory.StepMemory` of the second of two AdamW steps of ``model``
    (a ``transformers`` causal LM in fp32, changed in place: cast to bf16, checkpointed) on random
    tokens of ``config``'s vocabulary and sequence length, under ``precision`` (the module docstring)."""
    if precision == "bf16-master":
        model = model.to(torch.bfloat16)
    if recompute == "full":
        model.activation_checkpointing_enable()
    master = [p.detach().float().requires_grad_() for p in model.parameters()] if precision == "bf16-master" else None
    optimizer = torch.optim.AdamW(master or model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, config.vocabulary, (batch_size, config.sequence_length), generator=generator)
    autocast = precision == "bf16-autocast"

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
            return model(input_ids=tokens, labels=tokens).loss

    def update(loss):
        loss.backward()
        if master:
            for copy, weight in zip(master, model.parameters()):
                copy.grad = weight.grad.float()
                weight.grad = None  # the bf16 gradient is consumed: freed before the update
        optimizer.step()
        if master:
            with torch.no_grad():
                for copy, weight in zip(master, model.parameters()):
                    weight.copy_(copy)

    optimizer.zero_grad(set_to_none=True)
    update(forward())  # the first step creates the optimizer state; the second is measured
    optimizer.zero_grad(set_to_none=True)
    state = [value for entry in optimizer.state.values() for value in entry.values() if isinstance(value, torch.Tensor)]
    return measure_step_memory([*model.parameters(), *(master or []), *state], forward, update)


def compare(family: str, precision: str, recompute: str, batch_size: int = BATCH_SIZE, attention: str = "eager",
            configs: dict = FAMILIES):
    """(measured, predicted) for one case: a StepMemory and a TrainingMemory."""
    config = configs[family]
    measured = measure(family, config, precision, recompute, batch_size, attention)
    predicted = transformer_training_memory(
        config, batch_size, "adamw", precision, attention=attention, recompute=recompute,
        gelu=GELU.get(family, "fused"),
    )
    return measured, predicted


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--attention", default="eager", choices=("eager", "sdpa"))
    parser.add_argument("--shape", default="small", choices=list(SHAPES),
                        help="small: 3 layers, width 96, 4 x 64 tokens; larger: 4 layers, width 128, 2 x 128 tokens")
    args = parser.parse_args(argv)
    configs, batch_size = SHAPES[args.shape]
    rows = []
    for family in args.families:
        for precision in POLICIES:
            for recompute in RECOMPUTES:
                measured, predicted = compare(family, precision, recompute, batch_size, args.attention, configs)
                rows.append([
                    family, precision, recompute,
                    f"{measured.activations / 2**20:.3f}", f"{predicted.activations / 2**20:.3f}",
                    f"{measured.activations / predicted.activations:.3f}",
                    f"{measured.peak / 2**20:.3f}", f"{predicted.peak / 2**20:.3f}",
                    f"{measured.peak / predicted.peak:.3f}",
                ])
    header = ["family", "precision", "recompute", "saved MiB", "predicted", "measured/predicted", "peak MiB",
              "predicted", "measured/predicted"]
    for cells in (header, ["---"] * len(header), *rows):
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
