"""The mutation sample's mutants: each one change, valid Python, and never in a docstring, f-string or annotation."""

import ast
from pathlib import Path

from studies.mutation_sample import mutants_of

ROOT = Path(__file__).resolve().parents[2]


def test_docstrings_fstrings_and_annotations_are_left_alone():
    source = ('"""Module."""\n'
              'X: int = 3\n'
              '"""X\'s docstring."""\n'
              'def f(a: "int" = 1) -> "str":\n'
              '    """Doc."""\n'
              '    return f"{a} items"\n')
    found = {mutant.describe() for mutant in mutants_of(source)}
    assert found == {"line 2: 3 → 4", "line 4: 1 → 2", "line 6: return f\"{a} items\" → return None"}


def test_every_mutant_of_a_package_module_is_one_valid_change_and_the_named_survivor_is_among_them():
    path = ROOT / "accounting" / "health" / "accumulation.py"
    original = path.read_bytes()
    mutants = mutants_of(original.decode())
    assert len(mutants) > 30
    for mutant in mutants:
        changed = mutant.apply(original)
        assert changed != original
        assert changed[:mutant.start] == original[:mutant.start]
        assert changed[mutant.start + len(mutant.text.encode()):] == original[mutant.end:]
        ast.parse(changed)
    # the coefficient of fast accumulation's bound, 1 + growth(...) made 2 + growth(...)
    assert any(mutant.text == "2" and original[mutant.end:mutant.end + 9] == b" + growth" for mutant in mutants)
