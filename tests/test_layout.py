"""The product does not depend on the tests: nothing under emulator/, plugin/ or qemu_glue/
imports or loads anything under tests/.

What the product runs (the bare-metal guests of `p4pmu setup`, `p4pmu bench` and `p4pmu demo
--replay`) lives in the product (p4pmu.qemu_glue.guests); tests/ only holds what the tests
need.  Checked on the source: every import statement (the ``tests`` package, the test-helper
package ``guests`` that tests/conftest.py puts on sys.path, ``conftest``, ``test_*`` modules),
and every string literal that is not a docstring and names a ``tests`` folder (path
construction such as ``root / "tests" / "guests"``, ``"tests/..."``, or an import by name).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PRODUCT_DIRS = ("emulator", "plugin", "qemu_glue")
TEST_MODULES = re.compile(r"^(tests|guests|conftest|test_\w+)(\.|$)")
TESTS_PATH = re.compile(r"(^|[/\\.])tests([/\\.]|$)")


def _product_files() -> list[Path]:
    return sorted(f for d in PRODUCT_DIRS for f in (REPO_ROOT / d).rglob("*.py")
                  if "__pycache__" not in f.parts)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (module, class, function)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def test_scan_catches_each_form():
    """The scan itself sees the import forms it is meant to catch."""
    src = ("import tests.guests\nfrom guests import build\nfrom . import x\n"
           "p = root / 'tests' / 'guests'\nq = 'tests/guests/build.py'\n"
           "r = 'p4pmu.tests'\ns = 'contests'\n")
    assert [what for _, what in _problems(ast.parse(src))] == [
        "imports tests.guests", "imports guests", "names 'tests'",
        "names 'tests/guests/build.py'", "names 'p4pmu.tests'"]


def _problems(tree: ast.AST) -> list[tuple[int, str]]:
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"imports {a.name}") for a in node.names
                      if TEST_MODULES.match(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if TEST_MODULES.match(node.module):
                found.append((node.lineno, f"imports {node.module}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs and TESTS_PATH.search(node.value):
            found.append((node.lineno, f"names {node.value!r}"))
    return sorted(found)


@pytest.mark.parametrize("path", _product_files(),
                         ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_product_does_not_load_tests(path):
    problems = _problems(ast.parse(path.read_text(), str(path)))
    rel = path.relative_to(REPO_ROOT)
    assert not problems, (f"{rel} reaches into tests/ (the product must not depend on the "
                          "tests; move what it needs into the product):\n"
                          + "\n".join(f"  {rel}:{line}: {what}" for line, what in problems))
