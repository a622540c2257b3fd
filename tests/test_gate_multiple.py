"""The matrix's adjustment (``accounting.gate.multiple``, also exported by ``accounting.gate.stats``): Holm's
adjusted p-values reject exactly what the step-down procedure, written from its definition, rejects."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting.gate.stats import holm


def _holm_step_down(pvalues, alpha):
    """Holm (1979) as written: reject in increasing order while p_(j) <= alpha / (m - j + 1)."""
    rejected = set()
    for rank, (position, p) in enumerate(sorted(enumerate(pvalues), key=lambda pair: pair[1])):
        if p > alpha / (len(pvalues) - rank):
            break
        rejected.add(position)
    return rejected


@settings(max_examples=60)
@given(pvalues=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8), alpha=st.sampled_from([0.01, 0.05, 0.1]))
def test_holm_adjusted_p_values_reject_what_the_step_down_procedure_rejects(pvalues, alpha):
    adjusted = holm(pvalues)
    assert {position for position, p in enumerate(adjusted) if p <= alpha} == _holm_step_down(pvalues, alpha)
    assert all(p <= q <= 1 for p, q in zip(pvalues, adjusted))


def test_holm_adjusts_by_the_number_still_in_play_and_keeps_the_order():
    """Holm (1979): the j-th smallest p is multiplied by m − j + 1, capped at 1, never below an earlier one."""
    assert holm([0.04, 0.001, 0.03]) == pytest.approx([0.06, 0.003, 0.06])
    assert holm([0.02]) == [0.02]
    assert holm([0.5, 0.6]) == [1.0, 1.0]
    assert holm([]) == []
