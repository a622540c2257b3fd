"""The package's layers hold: no module imports from a layer above its own, no import cycle, no hidden import.

Read from the source with :mod:`ast`, as a newcomer reads the imports; nothing is imported to
find out. Each failure lists every offending import (file, line, what it imports and why it is
not allowed), so a new module that breaks the layering is named with the line to change.

Layers, bottom to top (a module may import from its own layer and the ones below):

1. foundation — ``errors``, ``_checks``, ``_units``;
2. library — the accounting formulas: ``memory``, ``strides``, ``flops``, ``flop_count``,
   ``live_memory``, and ``model/`` (a model's config and Hugging Face reader, FLOPs, activations, training
   memory, sharding, SDPA kernel choice, traced step);
3. hardware — ``hardware/``, the device seam;
4. measurement — ``telemetry/``, ``timing`` and ``health/`` (siblings: none imports another);
5. model step — ``model_mfu/``;
6. bench — ``bench/``, the pytest plugin and the benchmark matrix;
7. console — what the commands share;
8. commands — ``report/`` and ``gate/`` (siblings);
9. fleet — ``fleet/``, which runs the report on every device;
10. top — ``accounting/__init__`` (the public names) and ``__main__``.
"""

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "accounting"

LAYERS = (
    ("foundation", ("accounting.errors", "accounting._checks", "accounting._units"), False),
    ("library", ("accounting.memory", "accounting.strides", "accounting.flops", "accounting.flop_count",
                 "accounting.live_memory", "accounting.model"), False),
    ("hardware", ("accounting.hardware",), False),
    ("measurement", ("accounting.telemetry", "accounting.timing", "accounting.health"), True),
    ("model step", ("accounting.model_mfu",), False),
    ("bench", ("accounting.bench",), False),
    ("console", ("accounting.console",), False),
    ("commands", ("accounting.report", "accounting.gate", "accounting.plan"), True),
    ("fleet", ("accounting.fleet",), False),
    ("acceptance", ("accounting.acceptance",), False),
    ("top", ("accounting", "accounting.__main__"), False),
)
"""``(name, units, siblings)``: a unit is a module or a package (its modules with it); the units of a
layer marked ``siblings`` must not import one another."""


@dataclass(frozen=True)
class Import:
    """One import of a module of the package: who imports what, where, and whether inside a function."""

    source: str
    target: str
    line: int
    in_function: bool

    def where(self) -> str:
        return f"{self.source.replace('.', '/')}.py:{self.line} imports {self.target}"


def module_names(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted name -> file, for every module of the package (a package by its ``__init__``)."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _resolve(name: str, modules) -> str | None:
    """The module ``name`` is, or lies in (``accounting.x.y`` where ``y`` is a name defined in ``accounting.x``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _function_lines(tree) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    lines.add(inner.lineno)
    return lines


def imports(modules=None) -> list[Import]:
    """Every import of a package module by a package module, with its line."""
    modules = module_names() if modules is None else modules
    found = []
    for source, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        in_function = _function_lines(tree)
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    stem = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*stem, base] if base else stem)
                # `from accounting.x import y`: the module y where it is one, else the module x
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            else:
                continue
            for target in dict.fromkeys(targets):
                resolved = _resolve(target, modules) if target.split(".")[0] == "accounting" else None
                if resolved is not None and resolved != source:
                    found.append(Import(source, resolved, node.lineno, node.lineno in in_function))
    return found


def unit_of(module: str) -> tuple[int, str]:
    """``(layer index, unit)`` of a module: the most specific unit that contains it."""
    best = None
    for index, (_name, units, _siblings) in enumerate(LAYERS):
        for unit in units:
            inside = module == unit or (unit != "accounting" and module.startswith(unit + "."))
            if inside and (best is None or len(unit) > len(best[1])):
                best = (index, unit)
    if best is None:
        raise LookupError(f"{module} is in no layer: add it to LAYERS in {Path(__file__).name}")
    return best


def violations(found: list[Import]) -> list[str]:
    """Each import that reaches a layer above its module's, or a sibling unit, said in one line."""
    problems = []
    for item in found:
        if item.source in ("accounting", "accounting.__main__"):
            continue
        (source_layer, source_unit), (target_layer, target_unit) = unit_of(item.source), unit_of(item.target)
        if target_layer > source_layer:
            problems.append(f"{item.where()}: layer {LAYERS[target_layer][0]} is above {LAYERS[source_layer][0]}")
        elif target_layer == source_layer and LAYERS[source_layer][2] and source_unit != target_unit:
            problems.append(f"{item.where()}: {source_unit} and {target_unit} are siblings in layer "
                            f"{LAYERS[source_layer][0]}")
    return problems


def cycles(found: list[Import]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    graph = {}
    for item in found:
        graph.setdefault(item.source, set()).add(item.target)
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_every_module_of_the_package_has_a_layer():
    unplaced = []
    for module in module_names():
        try:
            unit_of(module)
        except LookupError as error:
            unplaced.append(str(error))
    assert unplaced == []


def test_no_module_imports_from_a_layer_above_or_a_sibling():
    assert violations(imports()) == []


def test_the_package_has_no_import_cycle():
    assert cycles(imports()) == []


def test_no_module_of_the_package_is_imported_inside_a_function():
    """An import inside a function is how a cycle hides; the package's own modules are imported at the top."""
    hidden = [item.where() for item in imports() if item.in_function]
    assert hidden == []


def test_a_deferred_import_of_another_package_says_why():
    """matplotlib, scipy or pytest imported inside a function: allowed for start-up cost, with a comment saying so."""
    silent = []
    for module, path in module_names().items():
        text = path.read_text()
        tree = ast.parse(text)
        lines = text.splitlines()
        for line in sorted(_function_lines(tree)):
            here, before = lines[line - 1], lines[line - 2].strip() if line > 1 else ""
            if "accounting" not in here and "#" not in here and not before.startswith("#"):
                silent.append(f"{module}:{line}: {here.strip()}")
    assert silent == []


# ---- the checks themselves, on small trees written for them ---------------------------------------


def _tree(tmp_path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = tmp_path / "accounting" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module_names(tmp_path / "accounting")


def test_an_upward_import_is_named_with_its_line(tmp_path):
    modules = _tree(tmp_path, {"__init__.py": "", "memory.py": "import os\nfrom accounting.timing import x\n",
                               "timing.py": "x = 1\n"})
    assert violations(imports(modules)) == [
        "accounting/memory.py:2 imports accounting.timing: layer measurement is above library"]


def test_siblings_may_not_import_each_other_but_a_unit_may_import_itself(tmp_path):
    modules = _tree(tmp_path, {"__init__.py": "", "gate/__init__.py": "", "report/__init__.py": "",
                               "gate/cli.py": "from accounting.report import run\nfrom accounting.gate import stats\n",
                               "gate/stats.py": "", "report/run.py": ""})
    assert violations(imports(modules)) == [
        "accounting/gate/cli.py:1 imports accounting.report.run: accounting.gate and accounting.report are "
        "siblings in layer commands"]


def test_a_cycle_is_found_even_through_a_function_level_import(tmp_path):
    modules = _tree(tmp_path, {"__init__.py": "", "memory.py": "from accounting import strides\n",
                               "strides.py": "def f():\n    from accounting.memory import g  # hidden\n"})
    found = imports(modules)
    assert cycles(found) == [["accounting.memory", "accounting.strides"]]
    assert [item.where() for item in found if item.in_function] == ["accounting/strides.py:2 imports accounting.memory"]


def test_a_module_in_no_layer_is_named():
    with pytest.raises(LookupError, match=r"^accounting\.extra is in no layer"):
        unit_of("accounting.extra")
