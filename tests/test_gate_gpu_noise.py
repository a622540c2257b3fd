"""What a GPU gate can detect, modelled from the recorded H200 runs (``accounting.gate.gpu_noise``).

The truths: the spreads the recorded page states (tests/data/hosts/nvidia-h200.md: sd / mean of the rounds), the
recorded runs' raw rounds, the power model's own monotony (more noise detects less, more runs detect more), and
the docs, whose tables must be what the module computes from the recorded files.
"""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from accounting.errors import AccountingError
from accounting.gate.gpu_noise import detectable, round_spreads, run_spreads, runs_needed_for, table
from tests.support.gate_runs import H200, h200_baseline_files

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks-and-gate.md"
PAGE_SPREADS = {"float16-8192x8192x8192": 0.2, "bfloat16-8192x8192x8192": 1.0, "bfloat16-16384x16384x16384": 1.4,
                "float32-16384x16384x16384": 3.3, "float8_e4m3fn-8192x8192x8192": 3.8,
                "float8_e4m3fn-16384x16384x16384": 6.2, "tf32-8192x8192x8192": 7.6}
"""Round-to-round spreads as the recorded page gives them: sd / mean, in %, one decimal."""


def _documents():
    paths = [H200 / "pytest-gpu.json", *h200_baseline_files()]
    return [(str(path), json.loads(path.read_text(encoding="utf8"))) for path in paths]


def test_round_spreads_are_the_recorded_pages_within_the_log_approximation():
    spreads = round_spreads(_documents()[0][1])
    for name, page in PAGE_SPREADS.items():
        (spread,) = [value for full, value in spreads.items() if f"[{name}-" in full]
        assert spread * 100 == pytest.approx(page, abs=0.15)  # sd of logs vs sd / mean, and the page's rounding


def test_run_spreads_are_those_of_the_runs_fastest_rounds():
    spreads = run_spreads(_documents())
    assert sorted(name.split("[")[1].split("-")[0] for name in spreads) == ["bfloat16", "float16"]  # in all three
    for name, (spread, runs) in spreads.items():
        fastest = [min(bench["stats"]["data"]) for _, document in _documents() for bench in document["benchmarks"]
                   if bench["fullname"] == name]
        assert runs == 3 and spread == pytest.approx(np.std(np.log(fastest), ddof=1))


def test_more_noise_detects_less_and_more_runs_detect_more():
    spreads = [0.0025, 0.01, 0.03, 0.075]
    found = [detectable(spread, baseline=5, current=5, family=2) for spread in spreads]
    assert found == sorted(found) and len(set(found)) == len(found)
    assert detectable(0.03, baseline=10, current=5, family=2) < detectable(0.03, baseline=5, current=5, family=2)
    assert detectable(0.03, baseline=10, current=5, family=10) > detectable(0.03, baseline=10, current=5, family=2)
    assert detectable(0.03, baseline=5, current=5, family=10) is None  # 1/252 never reaches 0.01 / 10


@pytest.mark.parametrize("spread", [0.005, 0.01, 0.015])
def test_runs_needed_is_the_first_count_under_the_threshold(spread):
    assert runs_needed_for(0.03, threshold=0.05, baseline=10, family=2) is None  # fp16 8192³'s runs: not within 20
    needed = runs_needed_for(spread, threshold=0.05, baseline=10, family=2)
    assert needed is not None
    assert detectable(spread, baseline=10, current=needed, family=2) <= 1.05
    before = detectable(spread, baseline=10, current=needed - 1, family=2) if needed > 1 else None
    assert before is None or before > 1.05


def test_the_docs_tables_are_what_the_model_gives_on_the_recorded_runs():
    text = DOCS.read_text(encoding="utf8")
    documents = _documents()
    for line in table(round_spreads(documents[0][1])) + table({n: s for n, (s, _) in run_spreads(documents).items()}):
        assert line in text, line


def test_a_run_without_raw_rounds_is_refused_by_name():
    with pytest.raises(AccountingError, match=re.escape("benchmark 't::mm' has no raw rounds")):
        round_spreads({"benchmarks": [{"fullname": "t::mm", "stats": {"min": 0.1}}]}, "now.json")
