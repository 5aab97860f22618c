"""The plugin's C units keep to their layers (docs/plugin.md, "Layers"): every unit of
plugin/build.py's C_UNITS is compiled on its own, as the build compiles it (without -flto, so
that the object has a symbol table), and `nm` tells what each defines and what it takes from
the others.  No cycle between units; no call against the documented layer order; no mutable
data outside the root object and the few globals ALLOWED below.  And the C files are in the
format of the repository's .clang-format."""
from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from p4pmu.plugin import build

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "plugin.md"

# Mutable data the plugin may keep outside its root object (state.h), (unit, symbol): why.
ALLOWED = {
    # the root object: QEMU's vCPU-init, translation, idle, resume, exit and discontinuity
    # callbacks and Python's calls of p4c_* carry no pointer of the plugin's own
    ("state.c", "p4"): "the root object",
    # per host thread: QEMU's translation callback names no vCPU (bridge_vcpu records it)
    ("registers.c", "tl_vcpu"): "the vCPU this host thread runs",
    # Capstone handles and their instruction buffers are not shared between threads
    ("classify.c", "tl_cs"): "this thread's Capstone handles",
    ("classify.c", "tl_ci"): "this thread's Capstone instruction buffers",
    # a translation-time cache of kind sequences, per thread so that it needs no lock
    ("kinds.c", "tl_pseq"): "this thread's cache of portion kind sequences",
    # the memory side's per-thread cache of kinds with their memory fields (no lock)
    ("memory.c", "tl_kpc"): "this thread's cache of kinds with memory fields",
    # a Python thread state is per host thread (python_calls.c)
    ("python_calls.c", "tl_py_ready"): "this thread holds a Python thread state",
    # the Capstone mode that decoded this thread's last block (tried first next time)
    ("translate.c", "tl_mode_pref"): "this thread's preferred Capstone mode",
    # a #UD of RDPMC on its way on this thread, and the bridge state of a thread that runs
    # no vCPU yet (translation before the first vCPU callback): intercept.c
    ("intercept.c", "tl_ud_pending"): "this thread's RDPMC #UD on its way",
    ("intercept.c", "tl_tv"): "the bridge state of a thread without a vCPU",
}

# nm's letters for data: B/b .bss, D/d .data, C common, V/v weak objects; TLS symbols are
# listed with these too (R/r is read-only, left out).  Lower case: file-local (static).  A
# table of pointers that is const itself is D/d too in position-independent code (its
# section .data.rel.ro is read-only once relocated): objdump names the section.
DATA_TYPES = set("BbDdCVv")


def _units() -> tuple[str, ...]:
    return build.C_UNITS


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> dict[str, Path]:
    """Every unit compiled alone, with the build's include paths, macros and flags."""
    tmp = tmp_path_factory.mktemp("units")
    info = build.python_build_info()
    gen = tmp / "gen"
    build.write_generated_headers(gen)
    opts = build.unit_compile_options(info, gen)
    flags = [f"-I{d}" for d in [*opts["include_dirs"], info["include"]]]
    flags += [f"-D{k}={v}" for k, v in opts["define_macros"]]
    flags += [*opts["extra_compile_args"], "-fno-lto", "-fPIC", "-Werror"]

    def compile_unit(unit: str) -> tuple[str, Path, subprocess.CompletedProcess]:
        obj = tmp / (unit + ".o")
        return unit, obj, subprocess.run(
            ["gcc", "-c", str(build.PLUGIN_DIR / unit), "-o", str(obj), *flags],
            capture_output=True, text=True)

    out = {}
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        for unit, obj, r in pool.map(compile_unit, _units()):
            assert r.returncode == 0, f"{unit} does not compile on its own:\n{r.stderr}"
            out[unit] = obj
    return out


def _symbols(obj: Path) -> list[tuple[str, str]]:
    r = subprocess.run(["nm", "-P", str(obj)], capture_output=True, text=True, check=True)
    return [(ln.split()[0], ln.split()[1]) for ln in r.stdout.splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def graph(objects) -> dict[str, dict[str, set[str]]]:
    """unit -> {unit it takes symbols from: those symbols}"""
    defined, undefined = {}, {}
    for unit, obj in objects.items():
        syms = _symbols(obj)
        defined[unit] = {n for n, t in syms if t.isupper() and t != "U"}
        undefined[unit] = {n for n, t in syms if t == "U"}
    owner = {}
    for unit, names in defined.items():
        for n in names:
            assert n not in owner, f"{n} is defined by {owner[n]} and {unit}"
            owner[n] = unit
    return {unit: _group({n: owner[n] for n in undefined[unit] if n in owner})
            for unit in objects}


def _group(sym_owner: dict[str, str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for sym, unit in sym_owner.items():
        out.setdefault(unit, set()).add(sym)
    return out


def layer_order() -> list[str]:
    """The units from the bottom up, as docs/plugin.md's "Layers" lists them."""
    text = DOCS.read_text()
    m = re.search(r"^## Layers\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "docs/plugin.md has no '## Layers' section"
    return re.findall(r"^\d+\. \*\*`(\w+\.c)`\*\*", m.group(1), re.M)


def _cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(1000, sys.getrecursionlimit()))
    for v in graph:
        if v not in index:
            visit(v)
    return out


def _a_cycle(graph, comp: list[str]) -> list[str]:
    """One cycle through the component's first unit, as a path a -> b -> ... -> a."""
    start, inside = comp[0], set(comp)
    paths = {start: [start]}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph[v]):
            if w == start:
                return paths[v] + [start]
            if w in inside and w not in paths:
                paths[w] = paths[v] + [w]
                todo.append(w)
    return comp


def test_docs_list_every_unit_once():
    order = layer_order()
    assert len(order) == len(set(order)), f"a unit listed twice: {order}"
    assert set(order) == set(_units()), (
        f"docs/plugin.md's layers and build.py's C_UNITS differ: missing "
        f"{sorted(set(_units()) - set(order))}, unknown {sorted(set(order) - set(_units()))}")


@pytest.mark.slow
def test_no_cycle_between_units(graph):
    cycles = _cycles(graph)
    text = "\n".join(
        " -> ".join(_a_cycle(graph, c)) + "\n    (strongly connected: " + ", ".join(c) + ")"
        for c in cycles)
    assert not cycles, f"units that reach each other:\n{text}"


@pytest.mark.slow
def test_calls_go_down_the_layers(graph):
    rank = {u: i for i, u in enumerate(layer_order())}
    wrong = [f"{u} (layer {rank[u] + 1}) -> {v} (layer {rank[v] + 1}): {', '.join(sorted(s))}"
             for u, deps in sorted(graph.items()) for v, s in sorted(deps.items())
             if rank[v] > rank[u]]
    assert not wrong, ("calls up the layers of docs/plugin.md (use a pointer set by the upper "
                       "unit, state.h struct p4pmu_upcalls, or move the function):\n" +
                       "\n".join(wrong))


def _relro(obj: Path) -> set[str]:
    """The symbols of `obj` in a .data.rel.ro section (read-only after relocation)."""
    r = subprocess.run(["objdump", "-t", str(obj)], capture_output=True, text=True, check=True)
    return {ln.split()[-1] for ln in r.stdout.splitlines()
            if re.search(r"\s\.data\.rel\.ro(\.\S*)?\s", ln)}


@pytest.mark.slow
def test_no_mutable_globals(objects):
    found = set()
    for unit, obj in objects.items():
        relro = _relro(obj)
        found |= {(unit, name.split(".")[0]) for name, t in _symbols(obj)
                  if t in DATA_TYPES and name not in relro}
    extra = sorted(found - set(ALLOWED))
    assert not extra, ("mutable data outside the root object (state.h) and ALLOWED:\n" +
                       "\n".join(f"{u}: {n}" for u, n in extra))
    stale = sorted(set(ALLOWED) - found)
    assert not stale, f"ALLOWED lists globals that are gone: {stale}"


def _c_files() -> list[Path]:
    """The plugin's own C sources (the generated headers live elsewhere: build.py)."""
    return [build.PLUGIN_DIR / n for n in build.C_SOURCES]


def test_clang_format_clean():
    tool = shutil.which("clang-format")
    if not tool:
        pytest.skip("clang-format is not installed (Debian: apt-get install clang-format)")
    assert (ROOT / ".clang-format").is_file()
    r = subprocess.run([tool, "--dry-run", "--Werror", *map(str, _c_files())],
                       capture_output=True, text=True)
    assert r.returncode == 0, "not in .clang-format's style (clang-format -i):\n" + \
        r.stderr[:4000]
