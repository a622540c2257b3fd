"""benchmarks.json's regression thresholds: the default, per device kind, per benchmark, and bad entries named."""

import copy

import pytest

from accounting.bench.matrix import parse_benchmarks
from accounting.errors import AccountingError

DOCUMENT = {
    "regression": {"metric": "median", "threshold_percent": 10,
                   "per_kind": {"cuda": 5, "_why": "notes are allowed"},
                   "per_benchmark": {"test_cpu_matmul[float16-1024x1024x1024]": 20,
                                     "tests/test_other.py::test_copy": 30, "_why": "notes are allowed here too"}},
    "cpu": {"dtypes": ["float32"], "shapes": [[64, 64, 64]], "floors": {"float32": 0.1}},
}


@pytest.mark.parametrize("kind, name, expected", [
    pytest.param("cpu", None, 10.0, id="default"),
    pytest.param(None, "tests/t.py::test_x", 10.0, id="unknown-kind"),
    pytest.param("cuda", "tests/t.py::test_gpu_matmul[bfloat16-8192x8192x8192]", 5.0, id="per-kind"),
    pytest.param("cpu", "tests/benchmarks/test_matmul.py::test_cpu_matmul[float16-1024x1024x1024]", 20.0, id="by-name"),
    pytest.param("cuda", "tests/test_other.py::test_copy", 30.0, id="by-fullname-beats-kind"),
    pytest.param("cpu", "tests/elsewhere.py::test_copy", 10.0, id="fullname-is-exact"),
])
def test_the_threshold_is_the_most_specific_entry(kind, name, expected):
    assert parse_benchmarks(DOCUMENT).regression_threshold(kind, name) == expected


def test_without_overrides_every_benchmark_gets_the_default():
    plain = copy.deepcopy(DOCUMENT)
    plain["regression"] = {"metric": "median", "threshold_percent": 7}
    config = parse_benchmarks(plain)
    assert config.regression_threshold("cuda", "tests/test_other.py::test_copy") == 7
    assert config.compare_fail == "median:7%"


@pytest.mark.parametrize("percent", [7, 7.0, 12])
def test_the_compare_fail_expression_is_one_pytest_benchmark_parses(percent):
    from pytest_benchmark.utils import parse_compare_fail

    plain = copy.deepcopy(DOCUMENT)
    plain["regression"] = {"metric": "min", "threshold_percent": percent}
    check = parse_compare_fail(parse_benchmarks(plain).compare_fail)
    assert (check.field, check.threshold) == ("min", percent)


def test_a_fractional_default_threshold_is_refused_but_overrides_may_be_fractional():
    plain = copy.deepcopy(DOCUMENT)
    plain["regression"] = {"metric": "median", "threshold_percent": 7.5}
    with pytest.raises(AccountingError, match=r"^benchmarks.json: regression.threshold_percent = 7.5: must be a whole number of percent"):
        parse_benchmarks(plain)
    plain["regression"] = {"metric": "median", "threshold_percent": 7, "per_kind": {"cpu": 7.5}}
    assert parse_benchmarks(plain).regression_threshold("cpu", "tests/t.py::test_x") == 7.5


@pytest.mark.parametrize("key, value, message", [
    pytest.param("per_kind", {"gpu": 5}, r"regression.per_kind.gpu is not a device kind; kinds: cpu, cuda$",
                 id="unknown-kind"),
    pytest.param("per_kind", {"cuda": 0}, r"regression.per_kind.cuda = 0: must be a percentage in \(0, 100\)$",
                 id="zero"),
    pytest.param("per_kind", [5], r"regression.per_kind must be an object, got \[5\]$", id="not-a-mapping"),
    pytest.param("per_benchmark", {"test_x": "5%"},
                 r"regression.per_benchmark.test_x = '5%': must be a percentage in \(0, 100\)$", id="text"),
    pytest.param("per_benchmark", {"test_x": True}, r"regression.per_benchmark.test_x = True: must be a percentage",
                 id="bool"),
    pytest.param("per_benchmark", ["test_x"], r"regression.per_benchmark must be an object, got \['test_x'\]$",
                 id="benchmarks-not-a-mapping"),
    pytest.param("per_benchmarks", {}, r"regression has unknown key\(s\) 'per_benchmarks'; known: metric, per_benchmark",
                 id="typo"),
])
def test_a_bad_override_is_named(key, value, message):
    document = copy.deepcopy(DOCUMENT)
    document["regression"][key] = value
    with pytest.raises(AccountingError, match=r"^benchmarks.json: " + message):
        parse_benchmarks(document)
