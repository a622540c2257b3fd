"""Terms of the training-memory formulas a few bytes wide in a multi-MB peak, each held to an exact truth.

A whole-step comparison within a few percent cannot see a term off by one element; these compare the term itself:

- the parameters whose gradients appear only at the very end of backward, against the autograd graph of a real
  Hugging Face step (the parameters only an embedding lookup feeds: their gradients are made last);
- the optimizer update's temporaries beside Adam's, against the live-tensor tracker around real SGD, Adagrad and
  RMSprop steps;
- what dropout adds to a block whose attention runs in a fused kernel, against the tensors torch's kernels save
  with and without dropout (their shape functions, on meta tensors) and those a real dropout saves.
"""

import dataclasses

import pytest
import torch

from accounting import TransformerConfig, transformer_training_memory
from accounting.live_memory import LiveTensorBytes
from accounting.model.activations import activation_formats, late_gradient_parameters, transformer_activations

GPT2 = TransformerConfig(layers=2, width=32, heads=2, sequence_length=16, vocabulary=64, max_positions=48)
LLAMA = TransformerConfig(layers=2, width=32, heads=2, kv_heads=1, sequence_length=16, vocabulary=64, ffn_width=64,
                          mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False, learned_positions=False)


def _embedding_only_parameters(model, tokens) -> int:
    """Elements of the parameters whose every gradient comes from an embedding lookup (the autograd graph's)."""
    loss = model(input_ids=tokens, labels=tokens).loss
    producers, seen, stack = {}, set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for child, _ in node.next_functions:
            if child is not None and hasattr(child, "variable"):
                producers.setdefault(child.variable, set()).add(type(node).__name__)
            stack.append(child)
    return sum(p.numel() for p, kinds in producers.items() if kinds == {"EmbeddingBackward0"})


@pytest.mark.parametrize("family, config", [
    pytest.param("gpt2", GPT2, id="gpt2-tied-learned-positions"),
    pytest.param("llama", LLAMA, id="llama-untied-rotary"),
    pytest.param("gpt2", dataclasses.replace(GPT2, tied_embeddings=False), id="gpt2-untied"),
])
def test_the_late_gradients_are_those_only_an_embedding_lookup_makes(family, config):
    pytest.importorskip("transformers")  # the truth (a test extra)
    from studies.training_memory_families import hf_model

    torch.manual_seed(0)
    tokens = torch.randint(0, config.vocabulary, (2, config.sequence_length))
    assert late_gradient_parameters(config) == _embedding_only_parameters(hf_model(family, config), tokens)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_an_sgd_update_makes_no_temporaries(momentum):
    """An fp32 SGD step's update makes no tensors beside the gradients and state (measured: none)."""
    from accounting.model_mfu.gpt import GPT

    torch.manual_seed(0)
    model = GPT(GPT2, attention="eager")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=momentum, foreach=False)
    tokens = torch.randint(0, GPT2.vocabulary, (2, GPT2.sequence_length))
    for _ in range(2):  # the first step creates the momentum buffers; the second is measured
        optimizer.zero_grad(set_to_none=True)
        logits = model(tokens)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
        with LiveTensorBytes() as live:
            optimizer.step()
    predicted = transformer_training_memory(GPT2, 2, "sgd", "fp32", momentum=momentum)
    assert predicted.update == live.peak


@pytest.mark.parametrize("optimizer", ["adagrad", "rmsprop"])
def test_a_root_dividing_update_makes_one_temporary_of_the_largest_parameter(optimizer):
    """Adagrad and RMSprop divide by the state's square root, a new tensor per parameter: measured, the largest
    parameter's (and the one before it, still referenced when the next is made: at most as large again)."""
    from accounting.model_mfu.gpt import GPT

    torch.manual_seed(0)
    model = GPT(GPT2, attention="eager")
    optimizer_class = {"adagrad": torch.optim.Adagrad, "rmsprop": torch.optim.RMSprop}[optimizer]
    step = optimizer_class(model.parameters(), lr=0.01, foreach=False)
    tokens = torch.randint(0, GPT2.vocabulary, (2, GPT2.sequence_length))
    for _ in range(2):
        step.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten()).backward()
        with LiveTensorBytes() as live:
            step.step()
    predicted = transformer_training_memory(GPT2, 2, optimizer, "fp32").update
    assert 0 < predicted <= live.peak <= 2 * predicted


def _saved_on_meta(fn, *shapes) -> int:
    """Bytes of the tensors ``fn`` saves for backward, called on bf16 meta tensors of ``shapes``."""
    inputs = [torch.empty(shape, dtype=torch.bfloat16, device="meta", requires_grad=True) for shape in shapes]
    saved = {}
    with torch.autograd.graph.saved_tensors_hooks(
            lambda t: saved.setdefault(id(t), t.numel() * t.element_size()) and t, lambda t: t):
        fn(*inputs)
    return sum(saved.values())


def _dropout_saved_bytes(shape) -> int:
    """CUDA's fused dropout (``native_dropout``; the CPU's keeps a mask of the input's dtype instead)."""
    return _saved_on_meta(lambda x: torch.ops.aten.native_dropout(x, 0.1, True), shape)


_FUSED = {  # torch's CUDA kernels on meta tensors: the tensors their backward keeps
    "sdpa-flash": lambda q, k, v, p: torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, p, True),
    "sdpa-efficient": lambda q, k, v, p: torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True,
                                                                                                p, True),
    "sdpa-cudnn": lambda q, k, v, p: torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, p, True),
}


def _kernel_saved_bytes(attention: str, dropout: float) -> int:
    shape = (2, GPT2.heads, GPT2.sequence_length, GPT2.head_width)
    return _saved_on_meta(lambda q, k, v: _FUSED[attention](q, k, v, dropout), shape, shape, shape)


@pytest.mark.parametrize("attention", list(_FUSED))
def test_dropout_adds_to_a_fused_attention_block_only_its_two_residual_masks(attention):
    """A fused kernel keeps the same tensors with dropout as without (its random state, not a mask of the scores);
    the block's two residual dropouts each keep a mask."""
    formats = activation_formats("bf16")
    with_dropout, without = (transformer_activations(GPT2, 2, formats, attention=attention, dropout=d).layer
                             for d in (True, False))
    masks = 2 * _dropout_saved_bytes((2, GPT2.sequence_length, GPT2.width))
    assert with_dropout - without == masks + _kernel_saved_bytes(attention, 0.1) - _kernel_saved_bytes(attention, 0.0)
