"""A sampled mutation run: single-point mutants of one module, each run against the given test files.

mutmut (``pyproject.toml``, ``[tool.mutmut]``) mutates every function of the package and maps every test to
what it calls before it starts: minutes of a shared 2-core machine before the first mutant. This study asks a
narrower question quickly: of ``--count`` mutants drawn at random (``--seed``) from one module, how many do the
named tests kill? It copies the repository into a temporary directory once, and for each mutant rewrites the
module there (one operator, constant, string or return value changed, the rest of the file byte for byte) and
runs pytest on the test files and the module's own doctests in a process forked from one that has already
imported torch (about a second a mutant instead of three). Module-level constants are mutated too (mutmut keeps
their original: its trampolines switch functions, not constants).

The mutations, as mutmut's: ``+``↔``-``, ``*``↔``/``, ``//``→``/``, ``**``→``*``, ``%``→``/``;
``<``↔``<=``, ``>``↔``>=``, ``==``↔``!=``, ``in``↔``not in``, ``is``↔``is not``; ``and``↔``or``; ``not x``→``x``;
``-x``→``x``; a number ``n``→``n + 1``; ``True``↔``False``; a string ``s``→``"XX" s "XX"`` (not docstrings nor
f-string parts); ``return x``→``return None``.

Usage (from the repository root; one thread: the machine is shared)::

    OMP_NUM_THREADS=1 python studies/mutation_sample.py accounting/health/accumulation.py \\
        tests/test_health_fp8_accumulation.py --count 40 --seed 1

It prints each mutant killed or survived (with its line and change) and the kill rate; ``--all`` runs every
mutant instead of a sample; ``--list`` only lists them; ``--head`` mutates the module as committed, in a copy of
the last commit (with the named test files from the working tree), while others edit the working tree.

>>> source = "def f(x):\\n    return x + 1 < 3\\n"
>>> for mutant in mutants_of(source):
...     print(mutant.describe())
line 2: return x + 1 < 3 → return None
line 2: x + 1 < 3 → (x + 1 <= 3)
line 2: x + 1 → (x - 1)
line 2: 1 → 2
line 2: 3 → 4
"""

import argparse
import ast
import copy
import io
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("accounting", "tests", "studies", "conftest.py", "pytest.ini", "pyproject.toml", "benchmarks.json")

_BINOPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
           ast.Pow: ast.Mult, ast.Mod: ast.Div, ast.BitOr: ast.BitAnd, ast.BitAnd: ast.BitOr,
           ast.LShift: ast.RShift, ast.RShift: ast.LShift}
_CMPOPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
           ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BOOLOPS = {ast.And: ast.Or, ast.Or: ast.And}


@dataclass(frozen=True)
class Mutant:
    """One change: the bytes ``start:end`` of the module (a node's source) replaced by ``text``."""

    line: int
    start: int
    end: int
    before: str
    text: str

    def describe(self) -> str:
        return f"line {self.line}: {' '.join(self.before.split())} → {' '.join(self.text.split())}"

    def apply(self, source: bytes) -> bytes:
        return source[:self.start] + self.text.encode() + source[self.end:]


def _skipped(tree) -> set[int]:
    """ids of nodes not to mutate: docstrings, f-strings' parts, annotations."""
    skip = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            skip.add(id(body[0].value))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            skip.add(id(node.value))  # attribute docstrings
        if isinstance(node, ast.JoinedStr):
            skip.update(id(part) for part in ast.walk(node) if part is not node and isinstance(part, ast.Constant))
        for annotation in (getattr(node, "annotation", None), getattr(node, "returns", None)):
            if annotation is not None:
                skip.update(id(part) for part in ast.walk(annotation))
    return skip


def _variants(node):
    """The mutated copies of ``node`` (an expression) or ``None``-returning form of a return."""
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        yield ast.BinOp(node.left, _BINOPS[type(node.op)](), node.right)
    elif isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            if type(op) in _CMPOPS:
                ops = list(node.ops)
                ops[index] = _CMPOPS[type(op)]()
                yield ast.Compare(node.left, ops, node.comparators)
    elif isinstance(node, ast.BoolOp):
        yield ast.BoolOp(_BOOLOPS[type(node.op)](), node.values)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        yield node.operand
    elif isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            yield ast.Constant(not value)
        elif isinstance(value, (int, float)):
            yield ast.Constant(value + 1)
        elif isinstance(value, str) and value:
            yield ast.Constant("XX" + value + "XX")


def _offsets(source: bytes) -> list[int]:
    starts, position = [0], 0
    for line in source.splitlines(keepends=True):
        position += len(line)
        starts.append(position)
    return starts


def mutants_of(text: str) -> list[Mutant]:
    """Every single-point mutant of the module ``text``, in source order."""
    source = text.encode()
    tree = ast.parse(source)
    skip, lines = _skipped(tree), _offsets(source)
    found = []
    for node in ast.walk(tree):
        if id(node) in skip or not hasattr(node, "end_col_offset"):
            continue
        start = lines[node.lineno - 1] + node.col_offset
        end = lines[node.end_lineno - 1] + node.end_col_offset
        before = source[start:end].decode()
        if isinstance(node, ast.Return):
            if node.value is not None and not (isinstance(node.value, ast.Constant) and node.value.value is None):
                found.append(Mutant(node.lineno, start, end, before, "return None"))
            continue
        for variant in _variants(node):
            replacement = ast.unparse(copy.deepcopy(variant))
            if not isinstance(variant, ast.Constant):
                replacement = f"({replacement})"
            found.append(Mutant(node.lineno, start, end, before, replacement))
    return sorted(found, key=lambda mutant: (mutant.start, -mutant.end))


def _copy_repository(into: Path, head: bool, overlay=()):
    """The repository's working tree into ``into``; with ``head``, its last commit instead, and the ``overlay``
    files (the tests under study, which may be new) from the working tree on top."""
    if head:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD", *COPIED], check=True,
                                 capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(into, filter="data")
        for name in overlay:
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)
        return
    for name in COPIED:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, into / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif path.exists():
            shutil.copy2(path, into / name)


def _run(arguments: list[str], timeout: float) -> str:
    """pytest ``arguments`` in a forked child: ``"killed"``, ``"survived"`` or ``"timeout"``."""
    child = os.fork()
    if child == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        import pytest

        code = 1
        try:
            code = int(pytest.main(arguments))
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            return "survived" if os.waitstatus_to_exitcode(status) == 0 else "killed"
        if time.monotonic() > deadline:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            return "timeout"
        time.sleep(0.02)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", help="the module to mutate, relative to the repository root")
    parser.add_argument("tests", nargs="+", help="test files to run against each mutant")
    parser.add_argument("--new-tests", nargs="+", default=[], metavar="TEST",
                        help="test files under study: run on each mutant the existing tests let survive, so one pass "
                             "gives the kill rate before them and after")
    parser.add_argument("--count", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--all", action="store_true", help="every mutant, not a sample")
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    parser.add_argument("--head", action="store_true",
                        help="mutate the module as committed, with the last commit's tree (others may be editing the "
                             "working tree) and the named test files from the working tree")
    parser.add_argument("--no-doctests", action="store_true", help="leave the module's own doctests out")
    options = parser.parse_args(argv)
    original = (subprocess.run(["git", "-C", str(ROOT), "show", f"HEAD:{options.module}"], check=True,
                               capture_output=True).stdout if options.head else (ROOT / options.module).read_bytes())
    every = mutants_of(original.decode())
    chosen = every if options.all or options.count >= len(every) else sorted(
        random.Random(options.seed).sample(every, options.count), key=lambda mutant: mutant.start)
    print(f"{options.module}: {len(every)} mutants, running {len(chosen)}", flush=True)
    if options.list:
        for mutant in chosen:
            print(" ", mutant.describe())
        return 0
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["HYPOTHESIS_PROFILE"] = "mutmut"
    os.environ.pop("CI", None)
    with tempfile.TemporaryDirectory(prefix="mutation-sample-") as scratch:
        workdir = Path(scratch)
        _copy_repository(workdir, options.head, [*options.tests, *options.new_tests])
        os.chdir(workdir)
        sys.path.insert(0, str(workdir))
        import torch  # noqa: F401  (imported once, before the forks: each child starts warm)

        target = workdir / options.module
        flags = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
        arguments = [*options.tests, *([] if options.no_doctests else [options.module]), *flags]
        new_arguments = [*options.new_tests, *flags] if options.new_tests else None
        started = time.monotonic()
        clean = [_run(arguments, timeout=600), "survived" if new_arguments is None else _run(new_arguments, 600)]
        took = time.monotonic() - started
        if clean != ["survived", "survived"]:
            print(f"the tests fail on the unmutated module ({clean}): nothing to measure", flush=True)
            return 2
        print(f"clean run: {took:.1f} s", flush=True)
        outcomes = {"killed": 0, "killed by new": 0, "survived": 0, "timeout": 0}
        survivors, caught = [], []
        try:
            for number, mutant in enumerate(chosen, 1):
                target.write_bytes(mutant.apply(original))
                outcome = _run(arguments, timeout=max(30.0, 5 * took))
                if outcome == "survived" and new_arguments is not None:
                    outcome = {"survived": "survived"}.get(_run(new_arguments, max(30.0, 5 * took)), "killed by new")
                    if outcome == "killed by new":
                        caught.append(mutant)
                outcomes[outcome] += 1
                if outcome == "survived":
                    survivors.append(mutant)
                print(f"[{number}/{len(chosen)}] {outcome:13} {mutant.describe()}", flush=True)
        finally:
            target.write_bytes(original)
    before = outcomes["killed"] + outcomes["timeout"]
    print(f"{options.module}: the tests killed {before} of {len(chosen)} ({before / len(chosen):.0%}); "
          f"{outcomes['timeout']} by timeout", flush=True)
    if new_arguments is not None:
        after = before + outcomes["killed by new"]
        print(f"{options.module}: with the new tests {after} of {len(chosen)} ({after / len(chosen):.0%})", flush=True)
        for mutant in caught:
            print("  killed by new:", mutant.describe())
    for mutant in survivors:
        print("  survived:", mutant.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
