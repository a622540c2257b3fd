"""benchmarks.json: the shipped file loads; every kind of bad entry is named in the error.

The truth is the document itself: a message that lists several entries (two unknown keys, two missing
floors, two sections) lists each one, and what it lists is what the document holds or lacks. Also: where
a chip's override table lacks a dtype the lookup falls back, a class-scoped node id finds its
``per_benchmark`` entry, and the fleet section is read, optional and bounded.
"""

import json
from pathlib import Path

import pytest
from pytest_benchmark.utils import parse_compare_fail

import accounting.bench.matrix
from accounting.bench.matrix import (
    BENCHMARKS_ENV,
    DEFAULT_STRAGGLER_FRACTION,
    BenchConfig,
    default_benchmarks_path,
    load_benchmarks,
    parse_benchmarks,
)
from accounting.errors import AccountingError
from accounting.hardware.devices import DeviceInfo
from accounting.hardware.peaks import _CHIPS, chip_row, find_chip
from tests.support.cli_runs import edited

SHIPPED = Path(__file__).resolve().parent.parent / "benchmarks.json"

GOOD = {
    "regression": {"metric": "median", "threshold_percent": 10},
    "cpu": {
        "dtypes": ["float32", "bf16"],
        "shapes": [[512, 256, 128], [1024, 1024, 1024]],
        "floors": {"float32": 0.3, "bf16": 0.05},
        "rounds": 5,
    },
    "cuda": {
        "dtypes": ["tf32", "bfloat16", "fp8"],
        "shapes": [[8192, 8192, 8192]],
        "quick_shapes": [[4096, 4096, 4096]],
        "floors": {"tf32": 0.5, "bfloat16": 0.6, "fp8": 0.5, "_why": "notes are kept out of the floors"},
        "chip_floors": {"MI300X": {"bfloat16": 0.4}},
    },
}


def test_the_shipped_file_is_valid_and_complete():
    config = load_benchmarks(SHIPPED)
    assert set(config.devices) == {"cpu", "cuda"}
    check = parse_compare_fail(config.compare_fail)  # what pytest-benchmark would do with it
    assert (check.field, check.threshold) == (config.regression_metric, config.regression_threshold_percent)
    for kind, matrix in config.devices.items():
        assert matrix.shapes and matrix.quick_shapes
        for dtype in matrix.dtypes:
            assert 0 < config.floor(kind, dtype) <= 1
        for chip in matrix.chip_floors:
            assert find_chip_row_exists(chip), f"chip_floors names {chip!r}, which is not a peak-table row"


def find_chip_row_exists(row: str) -> bool:
    return any(chip.row == row for chip in _CHIPS.values())


def test_a_good_document_parses_with_canonical_names_and_defaults():
    config = parse_benchmarks(GOOD)
    cpu, cuda = config.device("cpu"), config.device("cuda")
    assert cpu.dtypes == ("float32", "bfloat16") and cpu.rounds == 5 and (cpu.kind, cuda.kind) == ("cpu", "cuda")
    assert cpu.quick_shapes == ((512, 256, 128),)  # default: the first shape
    assert cuda.dtypes == ("tf32", "bfloat16", "float8_e4m3fn") and cuda.rounds == 10
    assert cuda.quick_shapes == ((4096, 4096, 4096),)
    assert config.floor("cuda", "fp8") == 0.5


@pytest.mark.parametrize("chip, floor", [
    pytest.param("MI300X", 0.4, id="row-name"),
    pytest.param("AMD Instinct MI300X", 0.4, id="device-name"),
    pytest.param("NVIDIA H100 80GB HBM3", 0.6, id="no-override"),
    pytest.param("Some Future GPU", 0.6, id="unknown-chip"),
])
def test_chip_floors_override_by_row_or_device_name(chip, floor):
    assert find_chip("AMD Instinct MI300X").row == "MI300X"
    assert parse_benchmarks(GOOD).floor("cuda", "bfloat16", chip=chip) == floor


def test_a_chip_floor_keyed_by_any_table_row_applies_to_that_row():
    """Rows such as "GB200 (per GPU)" are what chip_row answers for a device, though no device is named so."""
    gb200 = find_chip("NVIDIA GB200").row
    config = parse_benchmarks(edited(GOOD, ("cuda", "chip_floors", gb200), {"bfloat16": 0.5}))
    assert config.floor("cuda", "bfloat16", chip=gb200) == 0.5


def test_a_dtype_without_a_floor_is_named_with_the_file():
    with pytest.raises(AccountingError, match=r"^benchmarks.json: cpu.floors has no floor for float16$"):
        parse_benchmarks(GOOD).floor("cpu", "fp16")


def test_chip_floors_follow_the_rocm_arch_through_chip_row():
    radeon = DeviceInfo("cuda", "AMD Radeon Graphics", 0, 2**30, arch="gfx942:sramecc+:xnack-")
    assert parse_benchmarks(GOOD).floor("cuda", "bfloat16", chip=chip_row(radeon)) == 0.4
    assert parse_benchmarks(GOOD).floor("cuda", "bfloat16", chip=radeon.name) == 0.6  # the name alone cannot tell


def test_every_gfx942_row_has_a_chip_floor_like_mi300x():
    """A healthy MI300A/MI325X (best bf16 about half of spec, as MI300X) must not read "below floor"."""
    config = load_benchmarks()
    for row in ("MI300A", "MI325X"):
        assert config.floor("cuda", "bfloat16", chip=row) == config.floor("cuda", "bfloat16", chip="MI300X") < 0.6


@pytest.mark.parametrize("path, value, message", [
    pytest.param(("cpu", "dtypes", 1), "bfloat17", r"cpu.dtypes\[1\] has unknown dtype 'bfloat17'$", id="unknown-dtype"),
    pytest.param(("cpu", "dtypes", 0), "tf32", r"cpu.dtypes\[0\] has dtype 'tf32', which a CPU cannot run", id="tf32-on-cpu"),
    pytest.param(("cpu", "dtypes"), [], r"cpu.dtypes must be a non-empty list of dtype names, got \[\]", id="no-dtypes"),
    pytest.param(("cpu", "shapes", 1), [1024, 0, 1024],
                 r"cpu.shapes\[1\] = \[1024, 0, 1024\]: sizes must be positive integers, got 0$", id="zero-size"),
    pytest.param(("cpu", "shapes", 0), [512, -256, 128],
                 r"cpu.shapes\[0\] = \[512, -256, 128\]: sizes must be positive integers, got -256$", id="negative-size"),
    pytest.param(("cpu", "shapes", 0), [512, 256.5, 128],
                 r"cpu.shapes\[0\] = \[512, 256.5, 128\]: sizes must be positive integers, got 256.5$", id="float-size"),
    pytest.param(("cpu", "shapes", 0), [512, 256], r"cpu.shapes\[0\] must be \[m, k, n\], got \[512, 256\]$", id="two-dims"),
    pytest.param(("cuda", "quick_shapes"), "big", r"cuda.quick_shapes must be a non-empty list", id="quick-not-list"),
    pytest.param(("cpu", "floors", "float32"), 0, r"cpu.floors.float32 = 0: an MFU floor must be a number in \(0, 1\]$", id="floor-zero"),
    pytest.param(("cpu", "floors", "float32"), 1.5, r"cpu.floors.float32 = 1.5: an MFU floor must be", id="floor-above-one"),
    pytest.param(("cpu", "floors", "float32"), -0.2, r"cpu.floors.float32 = -0.2: an MFU floor must be", id="floor-negative"),
    pytest.param(("cpu", "floors", "float32"), "high", r"cpu.floors.float32 = 'high': an MFU floor must be", id="floor-string"),
    pytest.param(("cpu", "floors", "float32"), ..., r"cpu.floors has no floor for float32$", id="floor-missing"),
    pytest.param(("cpu", "floors"), ..., r"cpu.floors has no floor for float32, bfloat16$", id="no-floors"),
    pytest.param(("cpu", "floors", "float128"), 0.1, r"cpu.floors.float128 has unknown dtype 'float128'$",
                 id="floor-of-an-unknown-dtype"),
    pytest.param(("cpu", "floors", "float16"), 0.1, r"cpu.floors.float16 is a floor for float16, which cpu.dtypes does not list",
                 id="floor-for-unlisted-dtype"),
    pytest.param(("cuda", "chip_floors", "MI300X", "bfloat16"), 2,
                 r"cuda.chip_floors.MI300X.bfloat16 = 2: an MFU floor must be", id="chip-floor-above-one"),
    pytest.param(("cuda", "chip_floors", "H100-SXM"), {"bfloat16": 0.5},
                 r"cuda.chip_floors.H100-SXM is not a row of the peak table \(did you mean 'H100 SXM'\?\); "
                 r"rows: H100 SXM, H100 PCIe, ", id="chip-floor-row-typo"),
    pytest.param(("cuda", "chip_floors", "Some GPU"), {"bfloat16": 0.5},
                 r"cuda.chip_floors.Some GPU is not a row of the peak table; rows: H100 SXM, .*MI300X", id="chip-floor-unknown"),
    pytest.param(("cuda", "shapes", 0), [8192, 8200, 8192],
                 r"cuda.shapes\[0\] = \[8192, 8200, 8192\]: float8_e4m3fn \(torch._scaled_mm\) needs k and n "
                 r"divisible by 16$", id="fp8-k-misaligned"),
    pytest.param(("cuda", "quick_shapes", 0), [4096, 4096, 4100],
                 r"cuda.quick_shapes\[0\] = \[4096, 4096, 4100\]: float8_e4m3fn \(torch._scaled_mm\) needs k and n",
                 id="fp8-quick-n-misaligned"),
    pytest.param(("cpu", "rounds"), 0, r"cpu.rounds = 0: must be a positive integer$", id="rounds-zero"),
    pytest.param(("cpu", "round"), 5, r"cpu has unknown key\(s\) 'round'; known: ", id="typo-key"),
    pytest.param(("regression", "threshold_percent"), 0, r"regression.threshold_percent = 0: must be a percentage", id="threshold-zero"),
    pytest.param(("regression", "metric"), "p99", r"regression.metric = 'p99': must be one of min, max, mean, median", id="bad-metric"),
    pytest.param(("regression",), ..., r"regression must be an object, got None$", id="no-regression"),
    pytest.param(("gpu",), {}, r"the top level has unknown key\(s\) 'gpu'; known: cpu, cuda, fleet, model, regression$", id="gpu-is-not-a-kind"),
])
def test_a_bad_entry_is_named(path, value, message):
    with pytest.raises(AccountingError, match=r"^benchmarks.json: " + message):
        parse_benchmarks(edited(GOOD, path, value))


def test_fp8_alignment_binds_only_k_and_n_and_only_with_a_float8_dtype():
    assert parse_benchmarks(edited(GOOD, ("cuda", "shapes", 0), [8200, 8192, 8192])).device("cuda").shapes[0][0] == 8200
    without_fp8 = edited(GOOD, ("cuda", "dtypes"), ["tf32", "bfloat16"])
    del without_fp8["cuda"]["floors"]["fp8"]
    without_fp8["cuda"]["shapes"] = [[8192, 8200, 8200]]
    assert parse_benchmarks(without_fp8).device("cuda").shapes == ((8192, 8200, 8200),)


def test_no_device_section_is_an_error():
    with pytest.raises(AccountingError, match=r"^benchmarks.json: the top level needs at least one of cpu, cuda$"):
        parse_benchmarks({"regression": GOOD["regression"]})


def test_asking_for_a_missing_kind_names_what_there_is():
    config = parse_benchmarks({"regression": GOOD["regression"], "cpu": GOOD["cpu"]})
    with pytest.raises(AccountingError, match=r"^benchmarks.json has no 'cuda' section; it has cpu$"):
        config.device("cuda")


def test_load_reports_bad_json_and_missing_files_with_the_path(tmp_path):
    bad = tmp_path / "benchmarks.json"
    bad.write_text('{"regression": ')
    with pytest.raises(AccountingError, match=rf"^{bad}: not valid JSON: "):
        load_benchmarks(bad)
    with pytest.raises(AccountingError, match=r"^cannot read benchmarks file '.*nope.json': No such file"):
        load_benchmarks(tmp_path / "nope.json")
    bad.write_text(json.dumps(edited(GOOD, ("cpu", "floors", "bf16"), 3)))
    with pytest.raises(AccountingError, match=rf"^{bad}: cpu.floors.bf16 = 3: an MFU floor must be"):
        load_benchmarks(bad)


def test_default_path_honours_the_environment(tmp_path, monkeypatch):
    target = tmp_path / "mine.json"
    target.write_text(json.dumps(GOOD))
    monkeypatch.setenv(BENCHMARKS_ENV, str(target))
    assert default_benchmarks_path() == target
    assert load_benchmarks().device("cpu").rounds == 5


def test_default_path_falls_back_from_cwd_to_source_tree_to_installed_copy(tmp_path, monkeypatch):
    monkeypatch.delenv(BENCHMARKS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    source_tree = Path(accounting.bench.matrix.__file__).resolve().parents[2] / "benchmarks.json"
    assert default_benchmarks_path() == source_tree  # a checkout or an editable install
    (tmp_path / "benchmarks.json").write_text("{}")
    assert default_benchmarks_path() == tmp_path / "benchmarks.json"  # the project you run in wins
    (tmp_path / "benchmarks.json").unlink()
    monkeypatch.setattr(accounting.bench.matrix, "__file__",
                        str(tmp_path / "site-packages" / "accounting" / "bench" / "matrix.py"))
    assert default_benchmarks_path() == accounting.bench.matrix.INSTALLED_BENCHMARKS  # a wheel install's data file


# ---- the accepted side of each bound, and wrong types ----------------------------------------


@pytest.mark.parametrize("path, value, read, expected", [
    pytest.param(("cpu", "floors", "float32"), 1.0, lambda c: c.floor("cpu", "float32"), 1.0, id="floor-one"),
    pytest.param(("cpu", "floors", "float32"), 1, lambda c: c.floor("cpu", "float32"), 1.0, id="floor-int-one"),
    pytest.param(("cpu", "floors", "float32"), 1e-6, lambda c: c.floor("cpu", "float32"), 1e-6, id="floor-tiny"),
    pytest.param(("cpu", "rounds"), 1, lambda c: c.device("cpu").rounds, 1, id="rounds-one"),
    pytest.param(("cpu", "shapes", 0), [1, 1, 1], lambda c: c.device("cpu").shapes[0], (1, 1, 1), id="size-one"),
    pytest.param(("cpu", "quick_shapes"), [[1, 2, 3]], lambda c: c.device("cpu").quick_shapes, ((1, 2, 3),), id="quick-given"),
    pytest.param(("regression", "threshold_percent"), 99, lambda c: c.regression_threshold_percent, 99,
                 id="threshold-whole-below-100"),
    pytest.param(("regression", "threshold_percent"), 1, lambda c: c.regression_threshold_percent, 1,
                 id="threshold-whole-above-0"),
    pytest.param(("regression", "per_kind"), {"cpu": 99.9}, lambda c: c.regression_threshold("cpu", "t.py::t"), 99.9,
                 id="override-just-below-100"),
    pytest.param(("regression", "per_kind"), {"cpu": 0.1}, lambda c: c.regression_threshold("cpu", "t.py::t"), 0.1,
                 id="override-just-above-0"),
    pytest.param(("regression", "metric"), "iqr", lambda c: c.compare_fail, "iqr:10%", id="metric-iqr"),
    pytest.param(("cuda", "shapes", 0), [7, 16, 32], lambda c: c.device("cuda").shapes[0], (7, 16, 32),
                 id="fp8-aligned-k-and-n-odd-m"),
])
def test_the_accepted_side_of_each_bound(path, value, read, expected):
    assert read(parse_benchmarks(edited(GOOD, path, value))) == expected


@pytest.mark.parametrize("path, value, message", [
    pytest.param(("regression", "threshold_percent"), 100, r"regression.threshold_percent = 100: must be a percentage in \(0, 100\)$",
                 id="threshold-100"),
    pytest.param(("regression", "threshold_percent"), True, r"regression.threshold_percent = True: must be a percentage", id="threshold-bool"),
    pytest.param(("regression", "threshold_percent"), "10", r"regression.threshold_percent = '10': must be a percentage", id="threshold-string"),
    pytest.param(("cpu", "rounds"), True, r"cpu.rounds = True: must be a positive integer$", id="rounds-bool"),
    pytest.param(("cpu", "rounds"), 2.0, r"cpu.rounds = 2.0: must be a positive integer$", id="rounds-float"),
    pytest.param(("cpu", "floors", "float32"), True, r"cpu.floors.float32 = True: an MFU floor must be a number in \(0, 1\]$",
                 id="floor-bool"),
    pytest.param(("cpu", "shapes", 0), [512, True, 128], r"cpu.shapes\[0\] = \[512, True, 128\]: sizes must be positive integers, got True$",
                 id="size-bool"),
    pytest.param(("cpu", "shapes"), [], r"cpu.shapes must be a non-empty list of \[m, k, n\] shapes, got \[\]$", id="shapes-empty"),
    pytest.param(("cpu", "shapes", 0), (512, 256, 128), r"cpu.shapes\[0\] must be \[m, k, n\], got \(512, 256, 128\)$", id="shape-tuple"),
    pytest.param(("cpu", "dtypes"), "float32", r"cpu.dtypes must be a non-empty list of dtype names, got 'float32'$", id="dtypes-string"),
    pytest.param(("cpu", "dtypes", 0), 32, r"cpu.dtypes\[0\] has unknown dtype 32$", id="dtype-int"),
    pytest.param(("cpu",), ["float32"], r"cpu must be an object, got \['float32'\]$", id="section-list"),
    pytest.param(("cpu", "floors"), [0.3], r"cpu.floors must be an object, got \[0.3\]$", id="floors-list"),
    pytest.param(("cuda", "chip_floors"), ["MI300X"], r"cuda.chip_floors must be an object, got \['MI300X'\]$", id="chip-floors-list"),
    pytest.param(("regression", "metric"), None, r"regression.metric = None: must be one of", id="metric-none"),
])
def test_the_rejected_side_and_wrong_types_are_named(path, value, message):
    with pytest.raises(AccountingError, match=r"^benchmarks.json: " + message):
        parse_benchmarks(edited(GOOD, path, value))


def test_a_document_that_is_not_an_object_is_named():
    with pytest.raises(AccountingError, match=r"^benchmarks.json: the top level must be an object, got \[\]$"):
        parse_benchmarks([])


def test_notes_are_kept_out_of_every_check():
    data = edited(GOOD, ("cpu", "_why"), "notes anywhere")
    data["_about"] = "a note at the top level"
    data["regression"]["_why"] = "a note in the regression section"
    data["cuda"]["chip_floors"]["_why"] = "a note among the chips"
    assert parse_benchmarks(data) == parse_benchmarks(GOOD)


# ---- every entry a message lists, chip overrides by dtype, node ids, the fleet bound -----------------------

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


# ---- benchmarks.json's fleet section ------------------------------------------------------------------------

BASE = {"regression": {"metric": "median", "threshold_percent": 10},
        "cpu": {"dtypes": ["float32"], "shapes": [[8, 8, 8]], "floors": {"float32": 0.1}}}


@pytest.mark.parametrize("fleet, message", [
    pytest.param({"straggler_fraction": 0}, r"fleet.straggler_fraction = 0: must be a number in \(0, 1\)$", id="zero"),
    pytest.param({"straggler_fraction": True}, r"fleet.straggler_fraction = True: must be", id="bool"),
    pytest.param({"straggler_fraction": "0.9"}, r"fleet.straggler_fraction = '0.9': must be a number", id="text"),
    pytest.param({"median": 0.9}, r"fleet has unknown key\(s\) 'median'; known: [a-z_, ]*straggler_fraction", id="unknown-key"),
    pytest.param([0.9], r"fleet must be an object, got \[0.9\]$", id="not-an-object"),
])
def test_a_bad_fleet_section_is_named(fleet, message):
    with pytest.raises(AccountingError, match=r"^benchmarks.json: " + message):
        parse_benchmarks({**BASE, "fleet": fleet})


def test_the_fleet_section_is_read_and_optional():
    assert parse_benchmarks({**BASE, "fleet": {"straggler_fraction": 0.8}}).fleet.straggler_fraction == 0.8
    assert parse_benchmarks(BASE).fleet.straggler_fraction == DEFAULT_STRAGGLER_FRACTION
    assert parse_benchmarks({**BASE, "fleet": {}}).fleet.straggler_fraction == DEFAULT_STRAGGLER_FRACTION
