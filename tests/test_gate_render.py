"""The table and the CI summary, rendered from verdicts alone (no files)."""

import numpy as np
import pytest

from accounting.gate.decide import GateResult, Verdict
from accounting.gate.power import minimum_detectable_effect, percent, pooled_spread
from accounting.gate.render import MARKS, headline, render_markdown, render_text, rows
from accounting.gate.stats import Decision, compare_runs

BASE = (0.0150, 0.0152, 0.0148, 0.0151, 0.0149, 0.0150)


def _verdict(name, current, threshold=0.1):
    comparison = compare_runs(BASE, current, threshold=threshold)
    return Verdict(name, "cpu", threshold, comparison.decision, comparison.reason, BASE, tuple(current),
                   comparison=comparison)


REGRESSION = _verdict("tests/a.py::test_slow", [0.0190, 0.0188, 0.0191, 0.0189])
UNCHANGED = _verdict("tests/a.py::test_same", [0.0150])
SUSPECT = _verdict("tests/a.py::test_maybe", [0.0200])
MISSING = Verdict("tests/b.py::test_gone", "cpu", 0.1, None, "not in the current run(s): deselected, skipped or failed",
                  BASE)


def test_each_decision_has_its_mark_and_the_figures_it_was_made_from():
    result = GateResult((REGRESSION, UNCHANGED, SUSPECT, MISSING), (), ("b",) * 6, ("c",) * 4)
    table = {cells[1]: cells for cells in rows(result)}
    assert [table[name][0] for name in ("test_slow", "test_same", "test_maybe", "test_gone")] == ["+", " ", "?", "x"]
    slow = table["test_slow"]
    assert slow[2] == "15.00 ms (6 runs)" and slow[3] == "18.95 ms (4 runs)"  # median of 18.8, 18.9, 19.0, 19.1
    assert slow[4] == f"{REGRESSION.comparison.ratio:.3f}× [{REGRESSION.comparison.ci_low:.3f}, " \
                      f"{REGRESSION.comparison.ci_high:.3f}]"
    assert slow[5] == f"{REGRESSION.comparison.p_slower:.2g}" and slow[7] == "regression"
    assert table["test_maybe"][4].startswith("~1.333×")  # beyond the threshold, not significant
    assert table["test_gone"][3:] == ["—", "—", "—", "—", "not compared", "—"]


def test_the_headline_fails_only_on_a_regression():
    assert headline(GateResult((REGRESSION, UNCHANGED), (), (), ())) == "Gate: FAIL: 1 regression, 1 no change"
    assert headline(GateResult((SUSPECT, MISSING), (), (), ())) == "Gate: pass: 1 inconclusive, 1 not compared"


def test_text_lists_reasons_for_what_is_not_unchanged_and_the_notes():
    text = render_text(GateResult((REGRESSION, UNCHANGED, SUSPECT), ("2 baseline runs skipped",), (), ()))
    assert f"test_slow: {REGRESSION.reason}" in text and f"test_maybe: {SUSPECT.reason}" in text
    assert "test_same: " not in text
    assert text.splitlines()[-1] == "Note: 2 baseline runs skipped"


def test_markdown_is_a_github_table_with_pipes_escaped():
    odd = Verdict("tests/a.py::test_x[a|b]", "cpu", 0.1, None, "no baseline: a new benchmark", ())
    markdown = render_markdown(GateResult((REGRESSION, odd), (), ("b",), ("c",)))
    lines = markdown.splitlines()
    assert lines[2] == "**Gate: FAIL: 1 regression, 1 not compared** (1 baseline run, 1 current run)"
    table = [line for line in lines if line.startswith("|")]
    assert len(table) == 4 and all(line.count(" | ") == 8 for line in table[2:])
    assert r"test_x[a\|b]" in markdown


@pytest.mark.parametrize("decision", list(Decision) + [None])
def test_every_decision_has_a_distinct_mark(decision):
    assert list(MARKS.values()).count(MARKS[decision]) == 1


def _noisy(name, spread, current_runs, threshold=0.1):
    generator = np.random.default_rng(2)
    base = tuple(0.015 * np.exp(generator.normal(0, spread, 10)))
    current = tuple(0.015 * np.exp(generator.normal(0, spread, current_runs)))
    comparison = compare_runs(base, current, threshold=threshold)
    return Verdict(name, "cpu", threshold, comparison.decision, comparison.reason, base, current,
                   comparison=comparison)


def test_the_detectable_column_is_the_mde_of_the_runs_compared_and_too_noisy_ones_are_named():
    quiet, loud, few = _noisy("t.py::test_quiet", 0.01, 5), _noisy("t.py::test_loud", 0.08, 5), _noisy(
        "t.py::test_few", 0.01, 1)
    result = GateResult((quiet, loud, few), (), ("b",) * 10, ("c",) * 5)
    table = {cells[1]: cells for cells in rows(result)}
    expected = minimum_detectable_effect(pooled_spread(quiet.baseline_values, quiet.current_values), 10, 5, alpha=0.01)
    assert table["test_quiet"][6] == percent(expected) and expected < 1.1 and not quiet.too_noisy
    assert loud.too_noisy and table["test_loud"][6] == f"{percent(loud.detectable)} > 10 %"
    assert table["test_few"][6] == "too few runs" and not few.too_noisy
    text = render_text(result)
    assert f"test_loud: too noisy for its 10 % threshold: these runs would have shown only a slowdown of " \
           f"{percent(loud.detectable)} or more (95 % power)" in text
    assert "test_quiet: too noisy" not in text and "test_few: too noisy" not in text
