"""The tables of docs/transformer-families.md: parameter counts, and FLOPs measured against predicted.

``python -m tests.support.family_tables`` (from the repository root) prints them in Markdown:

- the published full-size configs: ``sum(p.numel())`` of the model ``transformers`` builds on the
  meta device, ``TransformerConfig.parameter_count``, and the count published with the checkpoint;
- small models of each family (``hf_models.SMALL``), random weights on the CPU, one training step
  (forward, loss, backward) counted by ``FlopCounterMode``, beside ``transformer_flops``;
- the published full-size configs (``published_configs``) on the meta device, where
  ``transformers`` can run them there: every dense family (Mixtral's eager experts ask which
  experts a token went to, which meta tensors cannot answer, so its row is the prediction only).
"""

import torch
from torch.utils.flop_counter import FlopCounterMode

from accounting import TransformerConfig
from accounting.model.flops import transformer_flops
from tests.support.hf_models import FAMILIES, build_hf_model, model_from_config_json, random_token_ids
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


def main() -> None:
    print("Parameters of the published configs:\n")
    print("\n".join(parameter_rows()))
    print(f"\nSmall models, CPU:\n\n{HEADER}")
    print("\n".join(small_rows()))
    print(f"\nPublished full sizes, meta device:\n\n{HEADER}")
    print("\n".join(full_size_rows()))


if __name__ == "__main__":
    main()
