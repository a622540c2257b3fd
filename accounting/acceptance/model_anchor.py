"""The acceptance run's side-by-side anchor: the package's training step and Hugging Face's, same shape, one call.

A model MFU means little without a real implementation beside it on the same GPU. This step builds the package's
step (:func:`accounting.model_mfu.build_training_step`, policy ``bf16``) and Hugging Face's model of the same
config (``LlamaForCausalLM`` for the Llama family, ``GPT2LMHeadModel`` for GPT-2, built from a config: random
weights, nothing downloaded, ``attn_implementation="sdpa"``), trained on the same batch with the same loss
(:func:`~accounting.model_mfu.language_model_loss`) and AdamW, in bf16, and keeps the two like for like:

- **the same attention call**: grouped key/value heads go to SDPA as they are, with ``enable_gqa``, in both steps
  wherever SDPA takes it (Hugging Face passes it without a mask; the package's step does too from torch 2.5, and
  its FLOPs are counted on every torch, :mod:`accounting.flop_count` counting the fused kernels' grouped heads where
  torch 2.5–2.11's ``FlopCounterMode`` cannot). The kernel each
  step ran is read off the operators one untimed step of each dispatched
  (:func:`~accounting.model_mfu.kernels.kernel_that_ran`) and recorded; kernels that differ void the comparison.
- **no key/value cache**: Hugging Face's models build one in training too unless told ``use_cache=False``: copies
  of K and V the package's model does not make.
- **turns in alternating order**: each round times one step of each model on the device's clock, the model that
  went first going second in the next round, so neither always runs in the other's wake.
- **memory released between the models**: before each turn the allocator's cached blocks are returned
  (:func:`release`) and the model runs one untimed step, which takes its own blocks back, so a timed step neither
  allocates fresh blocks nor frees the other model's. The allocator's ``num_alloc_retries`` (a failed cudaMalloc,
  every cached block freed, the allocation retried: a synchronizing stall) is recorded for every timed step: 0 is
  expected, and anything else says the two models crowd the device.
- **a decision from the steps' own spread**: round i gives the paired ratio ``r_i`` = package's step time / Hugging
  Face's (the two steps of a round are adjacent, so a drift of clock or power cancels within the pair). The ratio
  reported is the geometric mean of the ``r_i``, with the two-sided 90 % Student-t interval of the mean of
  ``log r_i`` from their own spread: ``exp(m ± t(0.95, n − 1) · s / √n)`` (``m``, ``s``: mean and sample standard
  deviation of the n logs). The package's step is **slower** when the interval's low end is above 1: a one-sided
  paired t-test rejecting "not slower" at 5 %. No margin is assumed: a slowdown the rounds resolve counts, whatever
  its size; one inside their spread is not called.

Each step's peak memory is measured over one more step (the cache released first), and both are set against
``transformer_training_memory``'s prediction for the attention kernel the steps ran.

Run as ``python -m accounting.acceptance.model_anchor OUT.json --size NAME --batch N``; it writes what it measured,
or why it could not, to ``OUT.json`` and exits 0 either way (the run's check reads the file).

>>> interval = paired_ratio_interval([1.02, 1.03, 1.01], [1.0, 1.0, 1.0])
>>> round(interval.ratio, 3), round(interval.low, 3), slower_than_reference(interval)
(1.02, 1.003, True)
"""

import argparse
import gc
import importlib.util
import json
import math
import statistics
import sys
from dataclasses import dataclass

import torch

from accounting._checks import check_positive_size, check_size
from accounting.acceptance.expected import Expected, expected_model_mfu
from accounting.acceptance.figures import Figure
from accounting.errors import AccountingError
from accounting.gate.stats import RatioInterval
from accounting.hardware.clocks import clock_for, synchronize
from accounting.hardware.devices import detect_device, free_memory_bytes
from accounting.hardware.peaks import device_peak_flops
from accounting.model.attention_kernels import SDPA_TAKES_ENABLE_GQA
from accounting.model_mfu import PEAK_DTYPES, PEAK_MEMORY_BAND, build_training_step, model_size
from accounting.model_mfu._peak_memory import step_peak_bytes
from accounting.model_mfu.gpt import language_model_loss
from accounting.model_mfu.kernels import formula_attention, kernel_that_ran
from accounting.model_mfu.layers import RMS_NORM_EPS, ROTARY_BASE
from accounting.model_mfu.step import LEARNING_RATE, predicted_peak_bytes
from accounting.timing import MEMORY_FRACTION
from accounting.model.flops import transformer_flops

PRECISION = "bf16"
"""The policy both steps run: bf16 weights, gradients and AdamW state (Hugging Face's ``model.to(torch.bfloat16)``)."""
WARMUP_STEPS = 2
ROUNDS = 6
"""Timed rounds, each one step of each model (in turns, the order alternating)."""
CONFIDENCE = 0.90
"""Two-sided confidence of the paired ratio's interval: its low end above 1 is a one-sided test at 5 %."""
SDPA_GQA_HEAD_WIDTH = 256
"""Hugging Face passes ``enable_gqa`` for head widths up to this (transformers' ``use_gqa_in_sdpa``); the
package's step in the anchor does the same, so both make the same call."""
MISSING = "needs transformers (Hugging Face's models, the reference step), not installed here"


def transformers_missing() -> str | None:
    """Why the anchor cannot run in this interpreter (``transformers`` absent), or ``None``."""
    return None if importlib.util.find_spec("transformers") is not None else MISSING


def paired_ratio_interval(ours_s, theirs_s, confidence: float = CONFIDENCE) -> RatioInterval:
    """The geometric mean of the rounds' paired ratios ``ours_s[i] / theirs_s[i]`` and its two-sided Student-t
    interval at ``confidence``, from the spread of their logs (n − 1 degrees of freedom; see the module docstring).
    """
    from scipy import stats  # deferred: start-up cost; only the decision needs scipy

    ours, theirs = list(ours_s), list(theirs_s)
    if len(ours) != len(theirs) or len(ours) < 2:
        raise AccountingError(f"a paired comparison needs two or more rounds of both steps, got {len(ours)} and "
                              f"{len(theirs)}")
    if not all(isinstance(value, (int, float)) and value > 0 for value in ours + theirs):
        raise AccountingError(f"step times must be positive seconds, got {ours} and {theirs}")
    logs = [math.log(a / b) for a, b in zip(ours, theirs)]
    mean, spread = statistics.fmean(logs), statistics.stdev(logs)
    half = float(stats.t.ppf(1 - (1 - confidence) / 2, len(logs) - 1)) * spread / math.sqrt(len(logs))
    return RatioInterval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), confidence, len(logs) - 1)


def slower_than_reference(interval: RatioInterval) -> bool:
    """True when the paired ratio's interval lies above 1: the package's step slower than Hugging Face's beyond
    the rounds' own spread."""
    return interval.low > 1


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
            use_cache=False,
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
        use_cache=False, n_layer=config.layers, n_embd=config.width, n_head=config.heads, n_positions=config.max_positions,
        vocab_size=config.vocabulary, activation_function="gelu", attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_implementation="sdpa")
    return transformers.GPT2LMHeadModel(hf_config)


class HuggingFaceStep:
    """One training step of a Hugging Face causal LM, laid out as the package's ``bf16`` step (no key/value
    cache: ``use_cache=False``, as training needs none)."""

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
        loss = language_model_loss(self.model(input_ids=self.tokens, use_cache=False).logits, self.targets)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()


def release(device) -> None:
    """Return what the allocator caches on ``device`` (after the device's queued work), so the next model starts
    from an empty cache; on the CPU only Python's garbage is collected."""
    gc.collect()
    if torch.device(device).type == "cuda":
        synchronize(device)
        torch.cuda.empty_cache()


def alloc_retries(device) -> int | None:
    """The CUDA caching allocator's ``num_alloc_retries`` on ``device`` so far (``None`` off CUDA)."""
    if torch.device(device).type != "cuda":
        return None
    return int(torch.cuda.memory_stats(device).get("num_alloc_retries", 0))


@dataclass(frozen=True)
class Turns:
    """Each round's timed step of each model: ``seconds`` and allocator ``alloc_retries`` inside it (name -> one
    per round), and the ``order`` the models took in each round."""

    seconds: dict
    alloc_retries: dict
    order: list


def alternating_times(steps: dict, device, *, warmup: int = WARMUP_STEPS, rounds: int = ROUNDS, clock=None,
                      release=release, alloc_retries=alloc_retries) -> Turns:
    """Time one step of each of ``steps`` (name -> callable) per round, in turns, the order reversed every other
    round; before each turn the cache is released and the model runs once untimed (see the module docstring)."""
    clock = clock_for(device) if clock is None else clock
    rounds = check_positive_size(rounds, "rounds")
    for step in steps.values():
        for _ in range(warmup):
            step()
    names = list(steps)
    seconds, retries, order = {name: [] for name in names}, {name: [] for name in names}, []
    for round_index in range(rounds):
        turn = tuple(names if round_index % 2 == 0 else reversed(names))
        order.append(turn)
        for name in turn:
            release(device)
            steps[name]()  # untimed: the model's blocks back in the cache
            before = alloc_retries(device)
            clock.occupy()
            start = clock.mark()
            steps[name]()
            end = clock.mark()
            seconds[name].append(clock.elapsed(start, end))
            after = alloc_retries(device)
            retries[name].append(None if before is None else after - before)
    return Turns(seconds, retries, order)


def _reason(kernels: dict, interval: RatioInterval) -> str:
    if kernels["package"] != kernels["hugging_face"]:
        return (f"not like for like: the package's step ran {kernels['package']} attention, Hugging Face's "
                f"{kernels['hugging_face']}")
    if slower_than_reference(interval):
        return (f"the package's step took {interval.ratio:.3f} x Hugging Face's ({interval.confidence:.0%} interval "
                f"{interval.low:.3f}-{interval.high:.3f} over {interval.degrees_of_freedom + 1} rounds), above 1")
    return ""


def anchor(size, device, *, transformers, peak_flops=None, info=None, warmup: int = WARMUP_STEPS,
           rounds: int = ROUNDS, clock=None) -> dict:
    """Time and measure both steps of ``size`` on ``device``; the JSON-ready document."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 2:
        raise AccountingError(f"rounds must be an integer of at least 2 (the paired ratios' spread), got {rounds!r}")
    info = detect_device(device) if info is None else info
    if peak_flops is None:
        peak_flops = device_peak_flops(info, PEAK_DTYPES[PRECISION])
    enable_gqa = SDPA_TAKES_ENABLE_GQA and size.config.head_width <= SDPA_GQA_HEAD_WIDTH
    ours = build_training_step(size, precision=PRECISION, device=device, enable_gqa=enable_gqa)
    torch.manual_seed(0)
    with torch.device(device):
        model = hugging_face_model(size.config, transformers)
    theirs = HuggingFaceStep(model.to(torch.bfloat16).train(), ours.tokens, ours.targets)
    # One untimed step of each, the operators it dispatched read: the attention kernel each ran.
    kernels = {"package": kernel_that_ran(ours, ours.attention), "hugging_face": kernel_that_ran(theirs, "sdpa")}
    turns = alternating_times({"package": ours, "hugging_face": theirs}, device, warmup=warmup, rounds=rounds,
                              clock=clock)
    predicted = predicted_peak_bytes(size, PRECISION, attention=formula_attention(kernels["package"]), device=device)
    model_flops = transformer_flops(size.config, size.batch_size).training
    steps = {}
    for name, step, run in (("package", ours, ours.eager_step), ("hugging_face", theirs, theirs)):
        median = statistics.median(turns.seconds[name])
        release(device)
        measured = step_peak_bytes(step, run, device)
        retries = turns.alloc_retries[name]
        steps[name] = {"median_s": median, "seconds": turns.seconds[name], "tokens_per_s": size.tokens / median,
                       "mfu": None if not peak_flops else model_flops / median / peak_flops,
                       "parameters": sum(p.numel() for p in step.model.parameters()),
                       "measured_peak_bytes": measured, "memory_ratio": measured / predicted,
                       "attention_kernel": kernels[name], "alloc_retries": retries,
                       "alloc_retries_total": None if None in retries else sum(retries)}
    interval = paired_ratio_interval(turns.seconds["package"], turns.seconds["hugging_face"])
    reason = _reason(kernels, interval)
    return {"size": size.name, "describe": size.describe(), "batch_size": size.batch_size, "precision": PRECISION,
            "device": info.name, "torch": torch.__version__, "transformers": transformers.__version__,
            "attention_kernel": kernels["package"], "attention_kernels": kernels, "enable_gqa": enable_gqa,
            "model_flops": model_flops, "peak_flops": peak_flops, "predicted_peak_bytes": predicted,
            "memory_band": list(PEAK_MEMORY_BAND), "rounds": rounds, "order": [list(turn) for turn in turns.order],
            "steps": steps, "package_over_hugging_face": interval.ratio,
            "ratio_interval": [interval.low, interval.high], "confidence": interval.confidence,
            "held": not reason, "reason": reason}


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
    """Both MFUs and peaks against the prediction (and, on CUDA, the allocator's retries inside the timed steps), the
    attention kernel (each step's where they differ) and the time ratio, in one line (or why it was not measured).

    >>> anchor_headline({"skipped": "needs transformers"})
    'not measured: needs transformers'
    """
    if document.get("skipped"):
        return f"not measured: {document['skipped']}"
    parts = []
    for name, label in (("package", "package"), ("hugging_face", "Hugging Face")):
        step = document["steps"][name]
        mfu = "-" if step["mfu"] is None else f"{step['mfu']:.3f}"
        retries = step.get("alloc_retries_total")
        parts.append(f"{label} MFU {mfu}, peak {step['measured_peak_bytes'] / 1e9:.2f} GB "
                     f"({step['memory_ratio']:.3f} x predicted)"
                     + ("" if retries is None else f", {retries} allocator retries timed"))
    kernels = document.get("attention_kernels") or {}
    attention = document["attention_kernel"] if len(set(kernels.values())) <= 1 else \
        f"{kernels['package']} (Hugging Face's {kernels['hugging_face']})"
    low, high = document["ratio_interval"]
    return (f"{document['describe']}, {document['precision']}, attention {attention}: "
            f"{'; '.join(parts)}; package step {document['package_over_hugging_face']:.3f} x Hugging Face's "
            f"({document['confidence']:.0%} interval {low:.3f}-{high:.3f})")


def anchor_figures(document: dict, *, step: str, floor=None) -> list:
    """The anchor's figures for the summary: both MFUs against the size's floor (``floor(precision, size, device)``),
    both peaks against the prediction's band, the low end of the interval of the package's step time over Hugging
    Face's against 1 (see the module docstring)."""
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
    low, high = document["ratio_interval"]
    interval = f"{document['confidence']:.0%} interval"
    figures.append(Figure(step, "package step time / Hugging Face's, lower bound", low, "×",
                          Expected(None, 1.0, "×", f"not slower than Hugging Face's step: the {interval} of the "
                                   "rounds' paired ratios reaches 1"),
                          f"{document['package_over_hugging_face']:.3f} x, {interval} {low:.3f}-{high:.3f}",
                          digits=3))
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
