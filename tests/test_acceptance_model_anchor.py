"""The acceptance run's anchor: the package's step beside Hugging Face's, on the CPU with tiny models.

- Hugging Face's model is built from the package's config with the same parameters (its own count), and trains
  without its key/value cache.
- Like for like: both steps call SDPA alike (grouped heads through enable_gqa where SDPA takes it, also where the
  package's FLOP-counted step would repeat them), the kernel each ran is recorded (read off the operators torch
  dispatched, held to FlopCounterMode's reading) and kernels that differ void the comparison.
- The steps take turns, the order alternating round by round, the allocator's cache released and refilled by an
  untimed step before each turn, its retries counted inside the timed step (a fake clock and fake counters).
- "Slower" is decided from the rounds' paired ratios: held against scipy's paired t-test on the same logs.
- Both peaks against the prediction; the summary's headline and figures; the file written where transformers
  or memory is missing.
"""

import json
import math

import pytest
import torch

from accounting import AccountingError
from accounting.acceptance import model_anchor
from accounting.model.attention_kernels import AttentionDevice
from accounting.flop_count import count_flops
from accounting.model_mfu import PEAK_MEMORY_BAND, attention_kernel, build_training_step, model_size
from accounting.model_mfu import layers

transformers = pytest.importorskip("transformers")


class TurnClock:
    """A clock whose every timed call lasts what ``durations`` says for the step that ran (by call order)."""

    def __init__(self, durations):
        self.durations = list(durations)
        self.now = 0.0
        self.calls = 0

    def occupy(self):
        pass

    def mark(self):
        self.calls += 1
        if self.calls % 2 == 0:  # an end mark: the step just timed took its turn's duration
            self.now += self.durations[(self.calls // 2 - 1) % len(self.durations)]
        return self.now

    def elapsed(self, start, end):
        return end - start


@pytest.mark.parametrize("name", ["tiny-llama", "tiny"])
def test_both_steps_are_measured_against_one_prediction(name):
    size = model_size(name, layers=1, seq=16, batch=2)
    document = model_anchor.anchor(size, "cpu", transformers=transformers, peak_flops=1e12, warmup=1, rounds=2,
                                   clock=TurnClock([1.0, 1.0]))
    ours, theirs = document["steps"]["package"], document["steps"]["hugging_face"]
    counted = attention_kernel(count_flops(build_training_step(size, precision="bf16")), "sdpa")
    assert document["attention_kernels"] == {"package": counted, "hugging_face": counted}
    assert ours["parameters"] == theirs["parameters"] == size.config.parameter_count
    assert ours["mfu"] == pytest.approx(document["model_flops"] / 1.0 / 1e12)
    low, high = PEAK_MEMORY_BAND
    for step in (ours, theirs):
        assert low <= step["memory_ratio"] <= high
        assert step["measured_peak_bytes"] == pytest.approx(step["memory_ratio"] * document["predicted_peak_bytes"])
    assert document["held"] and document["attention_kernel"] != "eager"


class NamedClock:
    """A clock whose timed call lasts what ``durations[name]`` says for the step that ran last (round by round)."""

    def __init__(self, durations: dict, events: list):
        self.durations = {name: list(values) for name, values in durations.items()}
        self.events = events
        self.now = 0.0
        self.turns = {name: 0 for name in durations}

    def occupy(self):
        pass

    def mark(self):
        self.events.append("mark")
        marks = self.events.count("mark")
        if marks % 2 == 0:  # an end mark: the step just timed took its own duration for this round
            name = next(event for event in reversed(self.events) if event in self.durations)
            values = self.durations[name]
            self.now += values[self.turns[name] % len(values)]
            self.turns[name] += 1
        return self.now

    def elapsed(self, start, end):
        return end - start


class AlternatingClock:
    """A clock for steps that do not say their name: the timed turns go package, Hugging Face, then Hugging Face,
    package, and so on (the order the test above holds), each lasting its model's duration for that round."""

    def __init__(self, durations: dict):
        self.durations = durations
        self.now = 0.0
        self.marks = 0

    def occupy(self):
        pass

    def mark(self):
        self.marks += 1
        if self.marks % 2 == 0:
            turn = self.marks // 2 - 1
            round_index, position = divmod(turn, 2)
            names = ("package", "hugging_face") if round_index % 2 == 0 else ("hugging_face", "package")
            values = self.durations[names[position]]
            self.now += values[round_index % len(values)]
        return self.now

    def elapsed(self, start, end):
        return end - start


def _recording_steps(events, retries=None):
    def step(name):
        def run():
            events.append(name)
            if retries is not None and name == "hugging_face":
                retries[0] += 1  # this model's every step makes the allocator free its cache and retry once
        return run
    return {"package": step("package"), "hugging_face": step("hugging_face")}


def test_the_steps_take_turns_in_alternating_order_with_the_cache_released_between_them():
    """Each round both steps run, the first of one round last in the next; before each timed step the cache is
    released and the model runs once untimed (its blocks back in the cache), so a timed step never refills it."""
    events = []
    turns = model_anchor.alternating_times(_recording_steps(events), "cpu", warmup=1, rounds=4,
                                           clock=NamedClock({"package": [1.1], "hugging_face": [1.0]}, events),
                                           release=lambda device: events.append("release"))
    assert events[:2] == ["package", "hugging_face"]  # the warm-up
    timed = events[2:]
    turn = lambda name: ["release", name, "mark", name, "mark"]  # noqa: E731
    order = [("package", "hugging_face"), ("hugging_face", "package")] * 2
    assert timed == [event for first, second in order for event in turn(first) + turn(second)]
    assert turns.order == order
    assert turns.seconds == {"package": [pytest.approx(1.1)] * 4, "hugging_face": [1.0] * 4}
    assert turns.alloc_retries == {"package": [None] * 4, "hugging_face": [None] * 4}


def test_allocator_retries_inside_the_timed_steps_are_counted_per_step():
    events, retries = [], [0]
    turns = model_anchor.alternating_times(
        _recording_steps(events, retries), "cpu", warmup=0, rounds=3,
        clock=NamedClock({"package": [1.0], "hugging_face": [1.0]}, events), release=lambda device: None,
        alloc_retries=lambda device: retries[0])
    assert turns.alloc_retries == {"package": [0, 0, 0], "hugging_face": [1, 1, 1]}  # the untimed step's not counted


@pytest.mark.parametrize("ours, theirs", [
    pytest.param([1.01, 1.012, 1.009, 1.011, 1.01, 1.008], [1.0] * 6, id="one-percent-slower-every-round"),
    pytest.param([1.3, 0.95, 1.25, 0.97, 1.2, 1.0], [1.0] * 6, id="noisy-ten-percent"),
    pytest.param([0.99, 1.0, 1.01, 1.0, 0.995, 1.005], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0], id="even"),
    pytest.param([2.0, 2.2, 1.9, 2.1], [1.98, 2.15, 1.85, 2.06], id="drifting-two-percent-slower"),
])
def test_slower_is_decided_from_the_rounds_paired_ratios(ours, theirs):
    """Slower exactly when scipy's one-sided paired t-test on the rounds' log times rejects "not slower" at 5 %; the
    ratio is the geometric mean of the rounds' ratios and the bounds are its 90 % two-sided interval."""
    from scipy import stats

    interval = model_anchor.paired_ratio_interval(ours, theirs)
    logs = [math.log(a / b) for a, b in zip(ours, theirs)]
    assert interval.ratio == pytest.approx(math.exp(sum(logs) / len(logs)))
    test = stats.ttest_rel([math.log(a) for a in ours], [math.log(b) for b in theirs], alternative="greater")
    assert model_anchor.slower_than_reference(interval) is bool(test.pvalue < 0.05)
    assert interval.low <= interval.ratio <= interval.high and interval.confidence == 0.9


def test_a_package_slower_in_every_round_does_not_hold():
    size = model_size("tiny-llama", layers=1, seq=8, batch=1)
    clock = AlternatingClock({"package": [1.02, 1.025, 1.018], "hugging_face": [1.0, 1.004, 0.998]})
    document = model_anchor.anchor(size, "cpu", transformers=transformers, peak_flops=1e12, warmup=1, rounds=3,
                                   clock=clock)
    assert not document["held"] and document["package_over_hugging_face"] == pytest.approx(1.02, abs=0.003)
    interval = model_anchor.paired_ratio_interval(document["steps"]["package"]["seconds"],
                                                  document["steps"]["hugging_face"]["seconds"])
    assert document["ratio_interval"] == [interval.low, interval.high] and interval.low > 1
    assert document["reason"] == (f"the package's step took 1.020 x Hugging Face's (90% interval {interval.low:.3f}-"
                                  f"{interval.high:.3f} over 3 rounds), above 1")
    figures = {figure.name: figure for figure in model_anchor.anchor_figures(document, step="model-anchor")}
    assert figures["package step time / Hugging Face's, lower bound"].verdict != "in range"
    assert "Hugging Face MFU" in model_anchor.anchor_headline(document)
    assert "allocator retries" not in model_anchor.anchor_headline(document)  # none counted off CUDA
    document["steps"]["hugging_face"]["alloc_retries_total"] = 3
    assert "Hugging Face MFU" in model_anchor.anchor_headline(document).split("3 allocator retries timed")[0]


def test_hugging_face_trains_without_its_key_value_cache():
    """Training keeps no cache: the forward's output carries none (a cache would keep copies of K and V)."""
    for name in ("tiny-llama", "tiny"):
        size = model_size(name, layers=1, seq=8, batch=1)
        model = model_anchor.hugging_face_model(size.config, transformers)
        step = build_training_step(size, precision="bf16")
        outputs = []
        model.register_forward_hook(lambda module, args, output: outputs.append(output))
        model_anchor.HuggingFaceStep(model.to(torch.bfloat16).train(), step.tokens, step.targets)()
        assert outputs and outputs[0].past_key_values is None, name


def test_both_steps_call_sdpa_alike_where_the_counted_step_would_repeat_the_heads(monkeypatch):
    """Where the package's FLOP-counted step repeats K and V (a torch whose SDPA takes no enable_gqa), the
    anchor's step still passes them as Hugging Face does: enable_gqa, key/value heads as the config has them."""
    size = model_size("tiny-llama", layers=1, seq=8, batch=1)
    assert size.config.kv_heads < size.config.heads
    monkeypatch.setattr(layers, "SDPA_TAKES_GQA", False)
    seen = set()
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, *args, **options):
        seen.add((query.shape[1], key.shape[1], bool(options.get("enable_gqa"))))
        return real(query, key, value, *args, **options)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    document = model_anchor.anchor(size, "cpu", transformers=transformers, peak_flops=1e12, warmup=1, rounds=2,
                                   clock=AlternatingClock({"package": [1.0], "hugging_face": [1.0]}))
    assert seen == {(size.config.heads, size.config.kv_heads, True)}
    assert document["attention_kernels"]["package"] == document["attention_kernels"]["hugging_face"]


def test_the_kernel_each_step_ran_is_recorded_and_kernels_that_differ_void_the_comparison(monkeypatch):
    """Hugging Face's step made to run its eager attention: the kernels differ, and the anchor says so instead of
    comparing times; the package's kernel is the one FlopCounterMode's count of its step reads."""
    size = model_size("tiny-llama", layers=1, seq=8, batch=1)
    counted = attention_kernel(count_flops(build_training_step(size, precision="bf16")), "sdpa")
    build = model_anchor.hugging_face_model

    def eager(config, transformers):
        model = build(config, transformers)
        model.set_attn_implementation("eager")
        return model

    monkeypatch.setattr(model_anchor, "hugging_face_model", eager)
    document = model_anchor.anchor(size, "cpu", transformers=transformers, peak_flops=1e12, warmup=1, rounds=2,
                                   clock=AlternatingClock({"package": [1.0], "hugging_face": [1.0]}))
    assert document["attention_kernels"] == {"package": counted, "hugging_face": "math"}
    assert not document["held"]
    assert document["reason"] == f"not like for like: the package's step ran {counted} attention, Hugging Face's math"
    assert f"attention {counted} (Hugging Face's math)" in model_anchor.anchor_headline(document)


def test_hugging_face_has_no_model_for_a_mixed_config():
    odd = model_size("tiny", layers=1).config.__class__(layers=1, width=8, heads=2, sequence_length=4, vocabulary=8,
                                                        mlp="swiglu")
    with pytest.raises(AccountingError, match=r"GPT2LMHeadModel; this config has mlp='swiglu' \(not 'gelu'\)$"):
        model_anchor.hugging_face_model(odd, transformers)
    llama = odd.__class__(layers=1, width=8, heads=2, sequence_length=4, vocabulary=8, norm="rmsnorm", mlp="swiglu",
                          experts=2, experts_per_token=1)
    with pytest.raises(AccountingError, match=r"LlamaForCausalLM; this config has learned_positions=True \(not "
                                              r"rotary positions\), experts=2 \(not 1\)$"):
        model_anchor.hugging_face_model(llama, transformers)


def test_two_models_that_do_not_fit_together_are_named():
    size = model_size("tinyllama-1.1b")
    hopper = AttentionDevice("cuda", (9, 0))
    why = model_anchor.both_fit(size, "cuda", free_bytes=35 * 2**30, attention_device=hopper)  # one alone: 23.8 GiB
    assert why.startswith("tinyllama-1.1b: 22 layers") and "over 80% of 35.00 GiB free" in why
    assert model_anchor.both_fit(size, "cuda", free_bytes=140 * 2**30, attention_device=hopper) is None
    with pytest.raises(AccountingError, match=r"^free_bytes must be a non-negative integer, got -1$"):
        model_anchor.both_fit(size, "cuda", free_bytes=-1, attention_device=hopper)


@pytest.mark.parametrize("rounds", [1, 0, 2.5])
def test_fewer_than_two_rounds_are_refused_before_anything_runs(rounds):
    with pytest.raises(AccountingError, match=rf"^rounds must be an integer of at least 2 .*got {rounds}$"):
        model_anchor.anchor(model_size("tiny", layers=1, seq=8, batch=1), "cpu", transformers=transformers,
                            rounds=rounds)
    with pytest.raises(AccountingError, match=r"two or more rounds of both steps, got 1 and 1"):
        model_anchor.paired_ratio_interval([1.0], [1.0])


def test_without_transformers_the_file_says_why(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(model_anchor, "transformers_missing", lambda: model_anchor.MISSING)
    out = tmp_path / "anchor.json"
    assert model_anchor.main([str(out), "--size", "tiny", "--device", "cpu"]) == 0
    document = json.loads(out.read_text())
    assert document == {"size": "tiny", "skipped": model_anchor.MISSING}
    assert model_anchor.anchor_figures(document, step="model-anchor") == []
    assert model_anchor.anchor_headline(document) == f"not measured: {model_anchor.MISSING}"


def test_the_command_line_measures_and_writes(tmp_path, capsys):
    out = tmp_path / "anchor.json"
    torch.manual_seed(0)
    assert model_anchor.main([str(out), "--size", "tiny-llama", "--batch", "1", "--layers", "1", "--seq", "8",
                              "--device", "cpu", "--rounds", "2", "--warmup", "1"]) == 0
    document = json.loads(out.read_text())
    assert document["batch_size"] == 1 and set(document["steps"]) == {"package", "hugging_face"}
    assert len(document["steps"]["package"]["seconds"]) == 2 and "tiny-llama: 1 layers" in capsys.readouterr().out
