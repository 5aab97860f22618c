"""The memory model (docs/memory-model.md): the reference (emulator/memmodel.py) gives what
its rules fix on the access patterns whose outcome is known, and the plugin's C
implementation (plugin/memmodel.c, compiled here on its own) equals it access by access on
generated sequences, for every CPU model's geometry."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from p4pmu.emulator.memmodel import CODE_FETCH_LINES, OUTCOME_FIELDS, MemorySystem
from p4pmu.emulator.models import MODELS, get_model

PLUGIN_DIR = Path(__file__).resolve().parents[2] / "plugin"
GEOMETRIES = sorted({m.memory for m in MODELS.values()}, key=lambda g: (g.l1d_kb, g.l2_kb))


def _sum(outcomes, name):
    return sum(getattr(o, name) for o in outcomes)


# --------------------------------------------------------------------------------------------
# the reference on patterns whose outcome the rules fix


def test_buffer_in_l1_reread_misses_only_on_the_first_pass():
    g = get_model("0F_04").memory
    m = MemorySystem(g)
    size = g.l1d_kb * 1024 // 2
    passes = [[m.access(0x10000 + a, 8, False) for a in range(0, size, 8)] for _ in range(5)]
    assert _sum(passes[0], "l1_miss") == size // 64
    assert _sum(passes[0], "l2_miss") == size // 64
    assert _sum(passes[0], "dtlb_miss") == size // 4096
    for p in passes[1:]:
        assert _sum(p, "l1_miss") == _sum(p, "l2_miss") == _sum(p, "dtlb_miss") == 0


@pytest.mark.slow
@pytest.mark.parametrize("key", ["0F_00", "0F_04"])
def test_streaming_beyond_l2_misses_once_per_line(key):
    g = get_model(key).memory
    m = MemorySystem(g)
    size = 2 * g.l2_kb * 1024
    for _ in range(2):  # the second pass finds nothing either: LRU evicted every line
        out = [m.access(0x100000 + a, 16, False) for a in range(0, size, 16)]
        assert _sum(out, "l1_miss") == _sum(out, "l2_miss") == size // 64
        assert _sum(out, "l2_hite") == _sum(out, "l2_hitm") == 0


def test_fresh_pages_walk_once_each_and_a_cr3_write_flushes():
    m = MemorySystem(get_model().memory)
    pages = [0x400000 + 4096 * i for i in range(40)]
    assert sum(m.access(p, 4, False).dtlb_miss for p in pages) == 40
    assert sum(m.access(p + 8, 4, True).dtlb_miss for p in pages) == 0
    m.flush_tlbs()
    assert sum(m.access(p, 4, False).dtlb_miss for p in pages) == 40
    m.invlpg(pages[3])
    assert [m.access(p, 4, False).dtlb_miss for p in pages[:5]] == [0, 0, 0, 1, 0]


def test_the_dtlb_holds_its_entries_and_no_more():
    g = get_model().memory
    m = MemorySystem(g)
    n = g.dtlb_entries
    for rounds in range(3):
        misses = sum(m.access(4096 * i, 1, False).dtlb_miss for i in range(n))
        assert misses == (n if rounds == 0 else 0)
    # one page more than the entries, cyclically: once the new page has replaced the least
    # recently used one, LRU misses every time
    assert sum(m.access(4096 * i, 1, False).dtlb_miss for i in range(n + 1)) == 1
    for _round in range(2):
        assert sum(m.access(4096 * i, 1, False).dtlb_miss for i in range(n + 1)) == n + 1


def test_split_accesses_are_line_crossings():
    m = MemorySystem(get_model().memory)
    for off, size, split in ((0, 8, 0), (56, 8, 0), (57, 8, 1), (63, 2, 1), (63, 1, 0),
                             (48, 16, 0), (49, 16, 1), (4095, 4, 1)):
        assert m.access(0x20000 + off, size, False).split == split, (off, size)
        assert m.access(0x30000 + off, size, True).split == split, (off, size)
    out = m.access(0x40FFE, 4, False)  # across a page: two walks, two lines
    assert (out.split, out.dtlb_miss, out.l1_miss) == (1, 2, 2)


def test_stores_write_through_and_make_l2_lines_modified():
    m = MemorySystem(get_model().memory)
    assert m.access(0x5000, 4, True).l2_miss == 1  # a read for ownership, no L1 fill
    out = m.access(0x5000, 4, False)
    assert (out.l1_miss, out.l2_hitm, out.l2_hite) == (1, 1, 0)
    assert m.access(0x5040, 4, False).l2_hite == 0  # the other line of the sector: a miss
    out = m.access(0x5080, 4, False)
    assert (out.l1_miss, out.l2_miss) == (1, 1)
    assert m.access(0x5080, 4, True).l2_miss == 0  # a store to an L2 line: no reference


def test_replacing_a_modified_sector_writes_it_back():
    g = get_model("0F_00").memory
    m = MemorySystem(g)
    stride = g.l2_kb * 1024 // g.l2_ways  # same set
    for w in range(g.l2_ways):
        m.access(w * stride, 4, True)
        m.access(w * stride + 64, 4, True)
    out = m.access(g.l2_ways * stride, 4, False)
    assert (out.l2_miss, out.writeback) == (1, 2)


# --------------------------------------------------------------------------------------------
# C equals the reference


@pytest.fixture(scope="module")
def c_model(tmp_path_factory):
    cffi = pytest.importorskip("cffi")
    ffi = cffi.FFI()
    header = (PLUGIN_DIR / "memmodel.h").read_text()
    decl = header[header.index("struct mm_params {"):header.rindex("#endif")]
    ffi.cdef(decl)
    ffi.set_source("_memmodel_test", '#include "memmodel.h"',
                   sources=[str(PLUGIN_DIR / "memmodel.c")], include_dirs=[str(PLUGIN_DIR)],
                   extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror"])
    out = tmp_path_factory.mktemp("memmodel")
    lib_path = ffi.compile(tmpdir=str(out))
    import importlib.util
    spec = importlib.util.spec_from_file_location("_memmodel_test", lib_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ffi, mod.lib


def test_stores_into_fetched_code_are_machine_clears_until_fetched_again():
    g = get_model().memory
    m = MemorySystem(g)
    assert m.fetch_code(0x1000, 0x1000 + 100) == 2  # two lines, both trace-cache misses
    assert m.fetch_code(0x1010, 0x1010 + 10) == 0  # in the record: delivered
    assert m.access(0x2000, 4, True).smc == 0  # not code
    assert m.access(0x1000, 4, False).smc == 0  # a load is no modification
    assert [m.access(0x1000 + 70, 1, True).smc for _ in range(2)] == [1, 0]  # dropped
    assert m.access(0x103E, 4, True).smc == 1  # split over the two lines: one clear
    assert m.fetch_code(0x1000, 0x1001) == 1  # dropped by the store: missed again
    assert m.access(0x1010, 1, True).smc == 1  # fetched again: clears again
    # the record's capacity: the least recently fetched line leaves first
    m.reset()
    lines = g.code_lines
    assert sum(m.fetch_code(0x100000 + 64 * k, 0x100000 + 64 * k + 1)
               for k in range(lines + 1)) == lines + 1
    assert sum(m.access(0x100000 + 64 * k, 1, True).smc for k in range(lines + 1)) == lines
    # a long block records its first CODE_FETCH_LINES lines only
    m.fetch_code(0x400000, 0x400000 + 64 * 40)
    assert sum(m.access(0x400000 + 64 * k, 1, True).smc for k in range(40)) == \
        CODE_FETCH_LINES


def test_store_buffers_forward_replay_and_alias():
    g = get_model().memory
    m = MemorySystem(g)
    m.access(0x3000, 8, True)
    out = [m.access(a, n, False) for a, n in ((0x3000, 8), (0x3000, 4), (0x3002, 4),
                                              (0x3004, 8), (0x2FFC, 8), (0x3008, 4),
                                              (0x13000, 4), (0x13008, 4))]
    assert [(o.partial, o.unaligned, o.alias64k) for o in out] == [
        (0, 0, 0), (0, 0, 0),  # same start, as wide or narrower: forwarded
        (0, 1, 0),  # inside the store, another start: UNALGN_ADDR
        (1, 0, 0), (1, 0, 0),  # partly: PARTIAL_DATA
        (0, 0, 0),  # next to it
        (0, 0, 1),  # 64 KB away: aliases
        (0, 0, 0)]
    # the youngest overlapping store decides; a store leaves after store_buffers younger ones
    m.access(0x3000, 2, True)
    assert m.access(0x3000, 4, False).partial == 1
    for k in range(g.store_buffers - 1):
        m.access(0x9000 + 16 * k, 4, True)
    assert m.access(0x3000, 4, False).partial == 1
    m.access(0x9000 + 16 * g.store_buffers, 4, True)
    assert m.access(0x3000, 4, False).as_tuple()[8:] == (0, 0, 0)


def _ops(rng: random.Random, n: int, g):
    """A mixed sequence: a hot buffer, a buffer near L2's size, streams, conflicting strides,
    unaligned sizes (splits), stores, code fetches, CR3 writes and INVLPGs, resets, addresses
    near the top of the address space."""
    hot = g.l1d_kb * 1024 // 2
    warm = g.l2_kb * 1024 + g.l2_kb * 256
    stride = g.l2_kb * 1024 // g.l2_ways
    stream = 0x4000000
    for _ in range(n):
        r = rng.random()
        size = rng.choice((1, 2, 4, 8, 16))
        store = rng.random() < 0.3
        if r < 0.0002:
            yield ("reset",)
            continue
        if r < 0.004:
            yield ("flush",)
            continue
        if r < 0.01:
            yield ("invlpg", rng.randrange(0, 1 << 24))
            continue
        if r < 0.06:
            yield ("fetch", 0x100000 + rng.randrange(0, 300 * 4096))
            continue
        if r < 0.1:  # a load near a recent store's address, or 64 KB away
            a = 0x200000 + rng.randrange(0, 64)
            yield ("access", a, rng.choice((1, 2, 4, 8)), True)
            yield ("access", a + rng.choice((-6, -2, 0, 0, 1, 3, 4, 65536, 131072 + 2)),
                   rng.choice((1, 2, 4, 8)), False)
            continue
        if r < 0.12:  # a block of code, in the hot buffer's range too (self-modifying code)
            a = (0x200000 + rng.randrange(0, hot)) if rng.random() < 0.5 else \
                (1 << 64) - rng.randrange(1, 3 * 4096)
            if rng.random() < 0.3:  # a store, its line fetched, the same store again
                yield ("access", a, 1, True)
                yield ("code", a, a + 1)
                yield ("access", a, 1, True)
            else:
                yield ("code", a, a + rng.randrange(1, 80 * 64))
            continue
        if r < 0.35:
            addr = 0x200000 + rng.randrange(0, hot)
        elif r < 0.6:
            addr = 0x800000 + rng.randrange(0, warm)
        elif r < 0.75:
            addr = stream
            stream += rng.choice((4, 8, 64))
        elif r < 0.9:
            addr = rng.randrange(0, g.l2_ways + 3) * stride + rng.randrange(0, 256)
        elif r < 0.95:
            addr = (1 << 64) - rng.randrange(1, 3 * 4096)
        else:
            addr = rng.randrange(0, 1 << 64)
        yield ("access", addr, size, store)


@pytest.mark.slow
@pytest.mark.parametrize("g", GEOMETRIES, ids=lambda g: f"L1-{g.l1d_kb}K-L2-{g.l2_kb}K")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_c_equals_the_reference(c_model, g, seed):
    ffi, lib = c_model
    st = ffi.new("struct mm_state *")
    p = ffi.new("struct mm_params *", (g.l1d_kb, g.l1d_ways, g.l2_kb, g.l2_ways,
                                       g.dtlb_entries, g.itlb_entries, g.code_lines,
                                       g.code_ways, g.store_buffers))
    assert lib.mm_init(st, p) == 0
    st.code_on = st.sb_on = 1
    out = ffi.new("struct mm_outcome *")
    ref = MemorySystem(g)
    totals = dict.fromkeys(OUTCOME_FIELDS, 0)
    tc_misses = tc_hits = 0  # trace-cache look-ups: lines missed, fetches with a line hit
    try:
        for i, op in enumerate(_ops(random.Random(seed), 40_000, g)):
            if op[0] == "reset":
                ref.reset()
                lib.mm_reset(st)
            elif op[0] == "flush":
                ref.flush_tlbs()
                lib.mm_flush_tlbs(st)
            elif op[0] == "invlpg":
                ref.invlpg(op[1])
                lib.mm_invlpg(st, op[1])
            elif op[0] == "fetch":
                assert lib.mm_fetch(st, op[1]) == ref.fetch(op[1]), (i, op)
            elif op[0] == "code":
                want = ref.fetch_code(op[1], op[2])
                assert lib.mm_fetch_code(st, op[1], op[2] & ((1 << 64) - 1)) == want, (i, op)
                tc_misses += want
                tc_hits += want < min(CODE_FETCH_LINES, (op[2] - 1 >> 6) - (op[1] >> 6) + 1)
            else:
                want = ref.access(*op[1:])
                lib.mm_access(st, op[1], op[2], op[3], out)
                got = tuple(getattr(out, n) for n in OUTCOME_FIELDS)
                assert got == want.as_tuple(), (i, op)
                for n in OUTCOME_FIELDS:
                    totals[n] += getattr(want, n)
    finally:
        lib.mm_free(st)
    # the sequence exercised every outcome, and both trace-cache outcomes
    assert all(totals[n] > 100 for n in OUTCOME_FIELDS), totals
    assert tc_misses > 100 and tc_hits > 100, (tc_misses, tc_hits)


def test_c_rejects_a_bad_geometry(c_model):
    ffi, lib = c_model
    st = ffi.new("struct mm_state *")
    p = ffi.new("struct mm_params *", (12, 4, 256, 8, 64, 64, 512, 8, 24))  # 48 sets: not 2^n
    assert lib.mm_init(st, p) == -1


def test_the_docs_geometry_table_is_the_model_table():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "memory-model.md").read_text()
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells and cells[0] in MODELS:
            rows[cells[0]] = cells[1:]
    assert set(rows) == set(MODELS)
    for key, m in MODELS.items():
        g = m.memory
        assert rows[key] == [f"{g.l1d_kb} KB, {g.l1d_ways}-way", f"{g.l2_kb} KB, {g.l2_ways}-way",
                             str(g.dtlb_entries), str(g.itlb_entries)], key
