"""The tables of docs/transformer-families.md: parameter counts, and FLOPs measured against predicted.

``python -m tests.support.family_tables`` (from the repository root) prints them in Markdown:

- the published full-size configs: ``sum(p.numel())`` of the model ``transformers`` builds on the
  meta device, ``TransformerConfig.parameter_count``, and the count published with the checkpoint;
- small models of each family (``hf_models.SMALL``), random weights on the CPU, one training step
  (forward, loss, backward) counted by ``FlopCounterMode``, beside ``transformer_flops``;
- the published full-size configs (``published_configs``) on the meta device, where
  ``transformers`` can run them there: every dense family (Mixtral's eager experts ask which
  experts a token went to, which meta tensors cannot answer, so its row is the prediction only);
- the families described as data (``hf_models.NEWER_FAMILIES``): saved activations and the AdamW
  step's peak, measured by the live-tensor tracker around the small model's step, over the prediction,
  in three precisions with and without recomputation (``--memory``: a minute of CPU).
"""
import sys

import torch
from torch.utils.flop_counter import FlopCounterMode

from accounting import TransformerConfig
from accounting.model.flops import transformer_flops
from tests.support.hf_models import (
    FAMILIES, MOE_FAMILIES, NEWER_FAMILIES, build_hf_model, hf_config, model_from_config_json, random_token_ids,
)
from tests.support.published_configs import PUBLISHED

SMALL_BATCH, SMALL_LENGTH = 2, 32
FULL_BATCH, FULL_LENGTH = 1, 2048


def counted(model, token_ids) -> tuple[int, int]:
    """FlopCounterMode's (forward, backward) totals of one training step."""
    forward, backward = FlopCounterMode(display=False), FlopCounterMode(display=False)
    with forward:
        loss = model(input_ids=token_ids, labels=token_ids).loss
    with backward:
        loss.backward()
    return forward.get_total_flops(), backward.get_total_flops()


def row(name: str, config: TransformerConfig, batch: int, measured: tuple[int, int] | None) -> str:
    full, half = transformer_flops(config, batch), transformer_flops(config, batch, causal="half")
    forward, backward = measured if measured else ("—", "—")
    agree = "—" if measured is None else ("yes" if (full.forward, full.backward) == measured else "**no**")
    cells = [name, f"{batch} × {config.sequence_length}", f"{forward:,}" if measured else forward, f"{full.forward:,}",
             f"{backward:,}" if measured else backward, f"{full.backward:,}", agree, f"{half.training:,}"]
    return "| " + " | ".join(cells) + " |"


HEADER = ("| model | batch × T | measured forward | predicted forward | measured backward | predicted backward | equal "
          "| predicted training, `causal=\"half\"` |\n|---|---|---:|---:|---:|---:|---|---:|")


def small_rows() -> list[str]:
    rows = []
    cases = [(family, family, {}) for family in FAMILIES] + [("mixtral", "mixtral, 8 experts top-2", dict(experts=8))]
    cases += [(family, family, {}) for family in NEWER_FAMILIES]
    for family, name, sizes in cases:
        model, config = build_hf_model(family, sequence_length=SMALL_LENGTH, **sizes)
        measured = counted(model, random_token_ids(config, SMALL_BATCH))
        rows.append(row(name, config, SMALL_BATCH, measured))
    return rows


def full_size_rows() -> list[str]:
    rows = []
    for name, (config_json, _) in PUBLISHED.items():
        longest = TransformerConfig.from_hf(config_json).sequence_length  # GPT-2: 1024
        config = TransformerConfig.from_hf(config_json, sequence_length=min(FULL_LENGTH, longest))
        measured = None
        if config.experts == 1:
            model = model_from_config_json(config_json)
            token_ids = torch.zeros(FULL_BATCH, config.sequence_length, dtype=torch.long, device="meta")
            measured = counted(model, token_ids)
        rows.append(row(name, config, FULL_BATCH, measured))
    return rows


def parameter_rows() -> list[str]:
    rows = ["| model | transformers' model | TransformerConfig | published | active per token |",
            "|---|---:|---:|---:|---:|"]
    for name, (config_json, published) in PUBLISHED.items():
        config = TransformerConfig.from_hf(config_json)
        real = sum(p.numel() for p in model_from_config_json(config_json).parameters())
        cells = [name, f"{real:,}", f"{config.parameter_count:,}", f"{published:,}" if published else "—",
                 f"{config.active_parameter_count:,}"]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


MEMORY_SIZES = dict(layers=2, width=64, heads=4, kv_heads=2, head_width=16, ffn_width=160, vocabulary=256, positions=32)
POLICIES = ("fp32", "bf16-autocast", "bf16-master")


def memory_rows() -> list[str]:
    """Measured over predicted saved activations and step peak of each newer family's small model."""
    import transformers

    from accounting import transformer_training_memory
    from studies.training_memory_families import measure_model

    header = " | ".join(f"{p}, {r}" for p in POLICIES for r in ("none", "full"))
    rows = [f"| family | {header} |", "|---|" + "---|" * (2 * len(POLICIES))]
    for family in NEWER_FAMILIES:
        cells = []
        for precision in POLICIES:
            for recompute in ("none", "full"):
                settings = hf_config(family, **MEMORY_SIZES | (dict(ffn_width=96) if family in MOE_FAMILIES else {}))
                model = transformers.AutoModelForCausalLM.from_config(settings, attn_implementation="eager").train()
                config = TransformerConfig.from_hf(settings.to_dict())
                measured = measure_model(model, config, precision, recompute, batch_size=2)
                predicted = transformer_training_memory(config, 2, "adamw", precision, recompute=recompute)
                cells.append(f"{measured.activations / predicted.activations:.3f} / "
                             f"{measured.peak / predicted.peak:.3f}")
        rows.append(f"| {family} | " + " | ".join(cells) + " |")
    return rows


def main() -> None:
    print("Parameters of the published configs:\n")
    print("\n".join(parameter_rows()))
    print(f"\nSmall models, CPU:\n\n{HEADER}")
    print("\n".join(small_rows()))
    print(f"\nPublished full sizes, meta device:\n\n{HEADER}")
    print("\n".join(full_size_rows()))
    if "--memory" in sys.argv[1:]:
        print("\nSaved activations / step peak, measured over predicted (eager attention, AdamW, batch 2):\n")
        print("\n".join(memory_rows()))


if __name__ == "__main__":
    main()
