"""The acceptance run's anchor: the package's step beside Hugging Face's, on the CPU with tiny models.

- Hugging Face's model is built from the package's config with the same parameters (its own count).
- The steps take turns round by round on one clock (a recording fake clock), and "slower" is decided from the
  medians (a fake clock makes the package's step 10 % slower).
- Both peaks against the prediction; the summary's headline and figures; the file written where transformers
  or memory is missing.
"""

import json

import pytest
import torch

from accounting import AccountingError
from accounting.acceptance import model_anchor
from accounting.model.attention_kernels import AttentionDevice
from accounting.model_mfu import PEAK_MEMORY_BAND, model_size

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
    assert ours["parameters"] == theirs["parameters"] == size.config.parameter_count
    assert ours["mfu"] == pytest.approx(document["model_flops"] / 1.0 / 1e12)
    low, high = PEAK_MEMORY_BAND
    for step in (ours, theirs):
        assert low <= step["memory_ratio"] <= high
        assert step["measured_peak_bytes"] == pytest.approx(step["memory_ratio"] * document["predicted_peak_bytes"])
    assert document["held"] and document["attention_kernel"] != "eager"


def test_the_steps_take_turns_and_a_slower_package_does_not_hold(monkeypatch):
    order = []
    steps = {"package": lambda: order.append("package"), "hugging_face": lambda: order.append("hugging_face")}
    times = model_anchor.interleaved_times(steps, "cpu", warmup=1, rounds=3, clock=TurnClock([1.1, 1.0]))
    assert order == ["package", "hugging_face"] + ["package", "hugging_face"] * 3
    assert times == {"package": [pytest.approx(1.1)] * 3, "hugging_face": [1.0] * 3}
    size = model_size("tiny-llama", layers=1, seq=8, batch=1)
    document = model_anchor.anchor(size, "cpu", transformers=transformers, peak_flops=1e12, warmup=1, rounds=3,
                                   clock=TurnClock([1.1, 1.0]))
    assert not document["held"] and document["package_over_hugging_face"] == pytest.approx(1.1)
    assert document["reason"] == "the package's step took 1.100 x Hugging Face's, more than 1 + 0.03"
    figures = {figure.name: figure for figure in model_anchor.anchor_figures(document, step="model-anchor")}
    assert figures["package step time / Hugging Face's"].verdict != "in range"
    assert "Hugging Face MFU" in model_anchor.anchor_headline(document)


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
