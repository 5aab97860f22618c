"""The Python packages are layers: emulator (the pure model) below plugin (the bridge) below
qemu_glue (the host side), and no package has an import circle.

Every import counts, also one inside a function: a lazy import hides a circle from Python,
not from a reader who must understand both modules to change either.  qemu_glue/cli.py is the
top of qemu_glue: it reaches the command modules by name (importlib) and no module imports it.
Checked on the source with ast; docs/architecture.md describes the layers.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# package folder -> the packages it may import, lowest layer first
LAYERS = {
    "emulator": (),
    "plugin": ("emulator",),
    "qemu_glue": ("emulator", "plugin"),
}
TOP_OF_QEMU_GLUE = "qemu_glue.cli"


def _modules(folder: str) -> dict[str, Path]:
    """'folder.sub.module' -> its file, for every module of a package folder."""
    out = {}
    for f in sorted((REPO_ROOT / folder).rglob("*.py")):
        if "__pycache__" in f.parts:
            continue
        parts = f.relative_to(REPO_ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


ALL_MODULES = {name: path for folder in LAYERS for name, path in _modules(folder).items()}


def _imported_names(tree: ast.AST) -> set[str]:
    """The p4pmu.* names a module imports, anywhere in it, without the p4pmu. prefix."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        names |= {n[len("p4pmu."):] for n in found if n.startswith("p4pmu.")}
    return names


def _module_of(name: str) -> str | None:
    """The module a dotted name lives in ('qemu_glue.cli.main' -> 'qemu_glue.cli')."""
    while name and name not in ALL_MODULES:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(sources: dict[str, str] | None = None) -> dict[str, set[str]]:
    """module -> the modules it imports (the repository's, or `sources`' for tests)."""
    sources = sources or {m: p.read_text() for m, p in ALL_MODULES.items()}
    graph = {}
    for mod, text in sources.items():
        targets = {_module_of(n) for n in _imported_names(ast.parse(text))}
        graph[mod] = {t for t in targets if t and t != mod}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_circle_finder_finds_a_lazy_circle_and_passes_a_chain():
    lazy = {"qemu_glue.cli": "from p4pmu.qemu_glue import linux\n",
            "qemu_glue.linux": "def f():\n    from p4pmu.qemu_glue.cli import main\n"}
    assert circles(import_graph(lazy)) == [["qemu_glue.cli", "qemu_glue.linux"]]
    chain = {"qemu_glue.cli": "import p4pmu.qemu_glue.linux\n",
             "qemu_glue.linux": "from p4pmu.emulator import pmu\n"}
    assert circles(import_graph(chain)) == []


@pytest.mark.parametrize("folder", sorted(LAYERS))
def test_no_import_circle_in_a_package(folder):
    graph = {m: t for m, t in import_graph().items() if m.split(".")[0] == folder}
    found = circles(graph)
    assert not found, "import circles (each module reaches the others): " + "; ".join(
        " <-> ".join(c) for c in found)


def test_a_package_imports_only_the_layers_below_it():
    wrong = [f"{mod} imports {t}" for mod, targets in import_graph().items()
             for t in targets
             if t.split(".")[0] != mod.split(".")[0]
             and t.split(".")[0] not in LAYERS[mod.split(".")[0]]]
    assert not wrong, wrong


def test_nothing_imports_the_command_line():
    users = [mod for mod, targets in import_graph().items() if TOP_OF_QEMU_GLUE in targets]
    assert not users, f"{TOP_OF_QEMU_GLUE} is the top layer, yet imported by {users}: move " \
                      "what they need into a lower module (qemu_glue/run_options.py)"
