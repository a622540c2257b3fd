"""benchmarks.json validation: the lists in its messages, the accepted side of the fleet bound, overrides by chip.

Written to close what mutation testing (issue 15, README "Development") found unchecked in
:mod:`accounting.bench.matrix`: a message that lists several entries (two unknown keys, two missing
floors, two sections) separates them so each one can be read back, the lookups fall back where a
chip's override table lacks the dtype, and a class-scoped node id finds its ``per_benchmark`` entry.
The truth is the document itself: what a message lists must be what the document holds or lacks.
"""

import pytest

from accounting.bench.matrix import BenchConfig, parse_benchmarks
from accounting.errors import AccountingError
from tests.cli_runs import edited
from tests.test_benchconfig import GOOD

MODEL = {
    "cpu": {"size": "small", "quick_size": "tiny", "precisions": ["fp32"], "floors": {"fp32": 0.02}},
    "cuda": {"size": "small", "quick_size": "tiny", "precisions": ["bf16"], "floors": {"bf16": 0.1}},
}


def listed(message: str, after: str) -> list[str]:
    """The comma-separated names in ``message`` after ``after`` (up to a ';' or the end)."""
    return message.split(after, 1)[1].split(";", 1)[0].split(", ")


def test_a_missing_section_names_the_sections_there_are():
    config = parse_benchmarks(GOOD)
    with pytest.raises(AccountingError, match=r"^benchmarks.json has no 'tpu' section; it has ") as caught:
        config.device("tpu")
    assert listed(str(caught.value), "it has ") == [key for key in GOOD if key != "regression"]  # the sections the document has
    empty = BenchConfig(devices={}, regression_metric="median", regression_threshold_percent=10.0)
    with pytest.raises(AccountingError, match=r"^benchmarks.json has no 'cpu' section; it has none$"):
        empty.device("cpu")


def test_a_missing_model_section_names_the_model_sections_there_are():
    config = parse_benchmarks({**GOOD, "model": MODEL})
    assert {kind: config.model_floor(kind, matrix["precisions"][0]) for kind, matrix in MODEL.items()} == {
        "cpu": 0.02, "cuda": 0.1}
    with pytest.raises(AccountingError, match=r"^benchmarks.json has no model.tpu section; it has ") as caught:
        config.model("tpu")
    assert listed(str(caught.value), "it has ") == [f"model.{kind}" for kind in MODEL]


def test_every_unknown_key_is_listed():
    data = edited(edited(GOOD, ("cpu", "round"), 5), ("cpu", "floor"), {})
    with pytest.raises(AccountingError, match=r"^benchmarks.json: cpu has unknown key\(s\) ") as caught:
        parse_benchmarks(data)
    assert listed(str(caught.value), "unknown key(s) ") == ["'floor'", "'round'"]


def test_every_dtype_without_a_floor_is_listed():
    data = edited(GOOD, ("cpu", "floors"), {})
    with pytest.raises(AccountingError, match=r"^benchmarks.json: cpu.floors has no floor for ") as caught:
        parse_benchmarks(data)
    assert listed(str(caught.value), "has no floor for ") == ["float32", "bfloat16"]  # cpu.dtypes, canonical


def test_every_precision_without_a_model_floor_is_listed():
    model = edited(MODEL, ("cpu", "precisions"), ["fp32", "bf16"])
    model["cpu"]["floors"] = {}
    with pytest.raises(AccountingError, match=r"^benchmarks.json: model.cpu.floors has no floor for ") as caught:
        parse_benchmarks({**GOOD, "model": model})
    assert listed(str(caught.value), "has no floor for ") == ["fp32", "bf16"]


@pytest.mark.parametrize("dtype, chip, expected", [
    pytest.param("bfloat16", "MI300X", 0.4, id="the-chip-overrides-its-dtype"),
    pytest.param("tf32", "MI300X", 0.5, id="the-chip-table-lacks-the-dtype"),
    pytest.param("fp8", "AMD Instinct MI300X", 0.5, id="by-device-name-lacking-the-dtype"),
])
def test_a_chip_override_applies_only_to_the_dtypes_it_lists(dtype, chip, expected):
    assert GOOD["cuda"]["chip_floors"] == {"MI300X": {"bfloat16": 0.4}}
    assert parse_benchmarks(GOOD).floor("cuda", dtype, chip=chip) == expected


@pytest.mark.parametrize("node_id, expected", [
    pytest.param("tests/t.py::TestMatmul::test_mm[bf16]", 20.0, id="class-scoped-node-id"),
    pytest.param("test_mm[bf16]", 20.0, id="bare-name"),
    pytest.param("tests/t.py::TestMatmul::test_mm[fp32]", 10.0, id="other-parameter"),
])
def test_a_per_benchmark_entry_matches_the_name_after_the_last_separator(node_id, expected):
    data = edited(GOOD, ("regression", "per_benchmark"), {"test_mm[bf16]": 20})
    assert parse_benchmarks(data).regression_threshold("cpu", node_id) == expected


@pytest.mark.parametrize("fraction, accepted", [
    pytest.param(0.99, True, id="just-below-one"),
    pytest.param(1e-3, True, id="just-above-zero"),
    pytest.param(1, False, id="one"),
    pytest.param(1.0, False, id="one-float"),
    pytest.param(0.0, False, id="zero"),
])
def test_the_straggler_fraction_lies_strictly_between_zero_and_one(fraction, accepted):
    data = {**GOOD, "fleet": {"straggler_fraction": fraction}}
    if accepted:
        assert parse_benchmarks(data).fleet.straggler_fraction == fraction
    else:
        with pytest.raises(AccountingError, match=rf"^benchmarks.json: fleet.straggler_fraction = {fraction!r}: "
                                                  r"must be a number in \(0, 1\)$"):
            parse_benchmarks(data)
