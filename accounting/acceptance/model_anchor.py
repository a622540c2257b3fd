"""The acceptance run's side-by-side anchor: the package's training step and Hugging Face's, same shape, one call.

A model MFU means little without a real implementation beside it on the same GPU. This step builds the package's
step (:func:`accounting.model_mfu.build_training_step`, policy ``bf16``) and Hugging Face's model of the same
config (``LlamaForCausalLM`` for the Llama family, ``GPT2LMHeadModel`` for GPT-2, built from a config: random
weights, nothing downloaded, ``attn_implementation="sdpa"``), trained on the same batch with the same loss
(:func:`~accounting.model_mfu.language_model_loss`) and AdamW, in bf16. The two steps are timed in interleaved
rounds on the device's clock (so a clock or power drift hits both), each one's peak memory is measured over one
more step, and both are set against ``transformer_training_memory``'s prediction for the attention kernel the
package's step ran. It holds when the package's step is not slower than Hugging Face's (median over median, within
:data:`SLOWER_TOLERANCE`).

Run as ``python -m accounting.acceptance.model_anchor OUT.json --size NAME --batch N``; it writes what it measured,
or why it could not, to ``OUT.json`` and exits 0 either way (the run's check reads the file).

>>> slower_than_reference(1.02, 1.0), slower_than_reference(1.04, 1.0)
(False, True)
"""

import argparse
import importlib.util
import json
import statistics
import sys

import torch

from accounting._checks import check_size
from accounting.acceptance.expected import Expected, expected_model_mfu
from accounting.acceptance.figures import Figure
from accounting.errors import AccountingError
from accounting.flop_count import count_flops
from accounting.hardware.clocks import clock_for
from accounting.hardware.devices import detect_device, free_memory_bytes
from accounting.hardware.peaks import device_peak_flops
from accounting.model_mfu import PEAK_DTYPES, PEAK_MEMORY_BAND, attention_kernel, build_training_step, model_size
from accounting.model_mfu._peak_memory import step_peak_bytes
from accounting.model_mfu.gpt import language_model_loss
from accounting.model_mfu.kernels import formula_attention
from accounting.model_mfu.layers import RMS_NORM_EPS, ROTARY_BASE
from accounting.model_mfu.step import LEARNING_RATE, predicted_peak_bytes
from accounting.timing import MEMORY_FRACTION
from accounting.model.flops import transformer_flops

PRECISION = "bf16"
"""The policy both steps run: bf16 weights, gradients and AdamW state (Hugging Face's ``model.to(torch.bfloat16)``)."""
WARMUP_STEPS = 2
ROUNDS = 6
"""Timed rounds, each one step of each model (interleaved)."""
SLOWER_TOLERANCE = 0.03
"""The package's median step may be at most this fraction above Hugging Face's and still count as not slower:
round-to-round spread of a bf16 step on the recorded H200 was 0.2-1.4 % (pytest-gpu.json)."""
MISSING = "needs transformers (Hugging Face's models, the reference step), not installed here"


def transformers_missing() -> str | None:
    """Why the anchor cannot run in this interpreter (``transformers`` absent), or ``None``."""
    return None if importlib.util.find_spec("transformers") is not None else MISSING


def slower_than_reference(ours_s: float, theirs_s: float, tolerance: float = SLOWER_TOLERANCE) -> bool:
    """True when the package's step time is more than ``tolerance`` above Hugging Face's."""
    return ours_s > theirs_s * (1 + tolerance)


def _differences(checks) -> str:
    """``name=value (not expected)`` for each ``(name, value, expected, same)`` that is not the same."""
    return ", ".join(f"{name}={value!r} (not {expected})" for name, value, expected, same in checks if not same)


def hugging_face_model(config, transformers):
    """Hugging Face's model of ``config`` (random weights, SDPA); an error naming what it has no model for."""
    if config.norm == "rmsnorm":
        differs = _differences((("mlp", config.mlp, "'swiglu'", config.mlp == "swiglu"),
                                ("learned_positions", config.learned_positions, "rotary positions",
                                 not config.learned_positions),
                                ("experts", config.experts, "1", config.experts == 1)))
        if differs:
            raise AccountingError("a Llama-family config needs mlp='swiglu', rotary positions and no experts for "
                                  f"Hugging Face's LlamaForCausalLM; this config has {differs}")
        hf_config = transformers.LlamaConfig(
            hidden_size=config.width, intermediate_size=config.ffn_width, num_hidden_layers=config.layers,
            num_attention_heads=config.heads, num_key_value_heads=config.kv_heads, head_dim=config.head_width,
            vocab_size=config.vocabulary, max_position_embeddings=config.sequence_length, rms_norm_eps=RMS_NORM_EPS,
            rope_theta=ROTARY_BASE, tie_word_embeddings=config.tied_embeddings, attention_bias=config.qkv_bias,
            mlp_bias=config.bias, attn_implementation="sdpa")
        return transformers.LlamaForCausalLM(hf_config)
    differs = _differences((
        ("kv_heads", config.kv_heads, f"heads={config.heads}", config.kv_heads == config.heads),
        ("ffn_width", config.ffn_width, f"4 x width = {4 * config.width}", config.ffn_width == 4 * config.width),
        ("bias", config.bias, "True", config.bias), ("qkv_bias", config.qkv_bias, "True", config.qkv_bias),
        ("tied_embeddings", config.tied_embeddings, "True", config.tied_embeddings),
        ("learned_positions", config.learned_positions, "True", config.learned_positions),
        ("mlp", config.mlp, "'gelu'", config.mlp == "gelu")))
    if differs:
        raise AccountingError("a GPT-2-family config must be GPT-2's own (heads = kv heads, MLP 4 x width, biases, "
                              f"tied, learned positions) for Hugging Face's GPT2LMHeadModel; this config has {differs}")
    hf_config = transformers.GPT2Config(
        n_layer=config.layers, n_embd=config.width, n_head=config.heads, n_positions=config.max_positions,
        vocab_size=config.vocabulary, activation_function="gelu", attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_implementation="sdpa")
    return transformers.GPT2LMHeadModel(hf_config)


class HuggingFaceStep:
    """One training step of a Hugging Face causal LM, laid out as the package's ``bf16`` step."""

    def __init__(self, model, tokens, targets):
        self.model = model
        self.tokens = tokens
        self.targets = targets
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)

    def persistent_tensors(self) -> list:
        state = [value for entry in self.optimizer.state.values() for value in entry.values()
                 if isinstance(value, torch.Tensor)]
        return [*self.model.parameters(), *state]

    def __call__(self) -> torch.Tensor:
        loss = language_model_loss(self.model(input_ids=self.tokens).logits, self.targets)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()


def interleaved_times(steps: dict, device, *, warmup: int = WARMUP_STEPS, rounds: int = ROUNDS, clock=None) -> dict:
    """Seconds of each round of each step, the steps taking turns within every round (name -> list)."""
    clock = clock_for(device) if clock is None else clock
    for step in steps.values():
        for _ in range(warmup):
            step()
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            clock.occupy()
            start = clock.mark()
            step()
            end = clock.mark()
            times[name].append(clock.elapsed(start, end))
    return times


def anchor(size, device, *, transformers, peak_flops=None, info=None, warmup: int = WARMUP_STEPS,
           rounds: int = ROUNDS, clock=None) -> dict:
    """Time and measure both steps of ``size`` on ``device``; the JSON-ready document."""
    info = detect_device(device) if info is None else info
    if peak_flops is None:
        peak_flops = device_peak_flops(info, PEAK_DTYPES[PRECISION])
    ours = build_training_step(size, precision=PRECISION, device=device)
    count = count_flops(ours)  # a first step of ours, untimed: the kernel its attention ran
    kernel = attention_kernel(count, ours.attention)
    torch.manual_seed(0)
    with torch.device(device):
        model = hugging_face_model(size.config, transformers)
    theirs = HuggingFaceStep(model.to(torch.bfloat16).train(), ours.tokens, ours.targets)
    times = interleaved_times({"package": ours, "hugging_face": theirs}, device, warmup=warmup, rounds=rounds,
                              clock=clock)
    predicted = predicted_peak_bytes(size, PRECISION, attention=formula_attention(kernel), device=device)
    model_flops = transformer_flops(size.config, size.batch_size).training
    steps = {}
    for name, step, run in (("package", ours, ours.eager_step), ("hugging_face", theirs, theirs)):
        median = statistics.median(times[name])
        measured = step_peak_bytes(step, run, device)
        steps[name] = {"median_s": median, "seconds": times[name], "tokens_per_s": size.tokens / median,
                       "mfu": None if not peak_flops else model_flops / median / peak_flops,
                       "parameters": sum(p.numel() for p in step.model.parameters()),
                       "measured_peak_bytes": measured, "memory_ratio": measured / predicted}
    ratio = steps["package"]["median_s"] / steps["hugging_face"]["median_s"]
    slower = slower_than_reference(steps["package"]["median_s"], steps["hugging_face"]["median_s"])
    return {"size": size.name, "describe": size.describe(), "batch_size": size.batch_size, "precision": PRECISION,
            "device": info.name, "torch": torch.__version__, "transformers": transformers.__version__,
            "attention_kernel": kernel, "model_flops": model_flops, "peak_flops": peak_flops,
            "predicted_peak_bytes": predicted, "memory_band": list(PEAK_MEMORY_BAND), "rounds": rounds,
            "steps": steps, "package_over_hugging_face": ratio, "tolerance": SLOWER_TOLERANCE, "held": not slower,
            "reason": (f"the package's step took {ratio:.3f} x Hugging Face's, more than 1 + {SLOWER_TOLERANCE:g}"
                       if slower else "")}


def both_fit(size, device, free_bytes: int | None = None, attention_device=None) -> str | None:
    """Why the two steps do not fit the device together (both models' weights and state, one step's peak), or
    ``None``: the prediction of one step plus the persistent bytes of the other (``attention_device``: where SDPA's
    kernel is chosen, default ``device``)."""
    free = free_memory_bytes(device) if free_bytes is None else check_size(free_bytes, "free_bytes")
    one = predicted_peak_bytes(size, PRECISION, device=device if attention_device is None else attention_device)
    other = 3 * 2 * size.config.parameter_count  # bf16 weights and AdamW's two bf16 moments
    if one + other > MEMORY_FRACTION * free:
        return (f"{size.describe()}: both steps need {(one + other) / 2**30:.2f} GiB, over {MEMORY_FRACTION:.0%} "
                f"of {free / 2**30:.2f} GiB free")
    return None


def anchor_headline(document: dict) -> str:
    """Both MFUs and peaks against the prediction, and the time ratio, in one line (or why it was not measured).

    >>> anchor_headline({"skipped": "needs transformers"})
    'not measured: needs transformers'
    """
    if document.get("skipped"):
        return f"not measured: {document['skipped']}"
    parts = []
    for name, label in (("package", "package"), ("hugging_face", "Hugging Face")):
        step = document["steps"][name]
        mfu = "-" if step["mfu"] is None else f"{step['mfu']:.3f}"
        parts.append(f"{label} MFU {mfu}, peak {step['measured_peak_bytes'] / 1e9:.2f} GB "
                     f"({step['memory_ratio']:.3f} x predicted)")
    return (f"{document['describe']}, {document['precision']}, attention {document['attention_kernel']}: "
            f"{'; '.join(parts)}; package step {document['package_over_hugging_face']:.3f} x Hugging Face's")


def anchor_figures(document: dict, *, step: str, floor=None) -> list:
    """The anchor's figures for the summary: both MFUs against the size's floor (``floor(precision, size, device)``),
    both peaks against the prediction's band, the package's step time over Hugging Face's against 1 + tolerance."""
    if document.get("skipped") or "steps" not in document:
        return []
    low, high = document["memory_band"]
    size, precision = document["size"], document["precision"]
    mfu_floor = None if floor is None else floor(precision, size, document.get("device"))
    memory = Expected(low, high, "×", f"transformer_training_memory, {document['attention_kernel']} attention")
    figures = []
    for name, label in (("package", "package"), ("hugging_face", "Hugging Face")):
        entry = document["steps"][name]
        note = f"{entry['tokens_per_s']:,.0f} tokens/s"
        figures.append(Figure(step, f"{label} model MFU {size} {precision}", entry["mfu"], "",
                              expected_model_mfu(mfu_floor), note, digits=3))
        figures.append(Figure(step, f"{label} peak memory / predicted", entry["memory_ratio"], "×", memory,
                              f"{entry['measured_peak_bytes'] / 1e9:.2f} GB", digits=3))
    figures.append(Figure(step, "package step time / Hugging Face's", document["package_over_hugging_face"], "×",
                          Expected(None, 1 + document["tolerance"], "×", "not slower than Hugging Face's step, "
                                   "within the run-to-run spread"), digits=3))
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m accounting.acceptance.model_anchor",
                                     description="the package's training step beside Hugging Face's, same shape")
    parser.add_argument("out", help="the JSON file to write")
    parser.add_argument("--size", required=True)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--seq", type=int, default=None)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--warmup", type=int, default=WARMUP_STEPS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args(argv)
    size = model_size(args.size, batch=args.batch, layers=args.layers, seq=args.seq)
    why = transformers_missing() or both_fit(size, args.device)
    if why is None:
        import transformers  # deferred: an optional package, only this step needs it

        document = anchor(size, args.device, transformers=transformers, warmup=args.warmup, rounds=args.rounds)
    else:
        document = {"size": size.name, "skipped": why}
    with open(args.out, "w") as handle:
        json.dump(document, handle, indent=1)
    print(json.dumps({key: value for key, value in document.items() if key != "steps"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
