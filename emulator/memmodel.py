"""The memory side of the timing model: split accesses, the DTLB and ITLB, the L1 data cache
and the unified L2, as pure functions of one logical processor's sequence of accesses
(docs/memory-model.md).

Pure Python, no QEMU import.  This is the reference: the plugin's C implementation
(plugin/memmodel.c) follows it line by line and tests/emulator/test_memmodel.py proves the two
equal on generated sequences, for every CPU model's geometry (models.MemoryGeometry).

Model:

* An access is (linear address, size in bytes, load or store).  It touches the 64-byte lines
  from its first to its last byte; it is *split* when that is two lines (SDM Vol. 3B
  Table 19-28, memory_complete, load_port_replay, store_port_replay).
* Translations: every page is a 4 KB page.  The DTLB is looked up once per page an access
  touches, the ITLB once per page of code fetched; a miss is a page walk and fills the entry.
  Both are fully associative with true LRU replacement.  A CR3 write flushes both; INVLPG
  drops one page from both.
* The L1 data cache (size and ways of the part, 64-byte lines, true LRU per set) is
  write-through without write-allocate (the NetBurst L1 data cache): a load that misses fills
  the line; a store updates a line it hits and never fills one.
* The L2 is unified, 8-way, true LRU per set of 128-byte *sectors*; each sector holds two
  64-byte lines with their own valid and modified bits (MESI without sharing: one processor,
  so a valid line is Exclusive or Modified).  A load that misses L1 is an L2 read: a hit on
  an Exclusive line (HITE) or a Modified one (HITM), or a miss that fills the line Exclusive.
  A store is a read for ownership only when its line is not in L2 (a miss, filled Modified);
  a store to a valid line marks it Modified without a bus-side reference.  Replacing a sector
  writes back its modified lines.  Nothing is prefetched; instruction fetches do not use the
  data caches.
* The trace cache and self-modifying code (SDM Vol. 3A 8.1.3; machine_clear SMCLEAR;
  BPU_fetch_request TCMISS): the processor looks up and records the 64-byte lines of the code
  it fetches (each block of code fetched: its lines, at most CODE_FETCH_LINES) in a
  code-line record standing for the trace cache (the geometry's code_lines and code_ways,
  true LRU); a line not in the record is a trace-cache miss, and is filled.  A store into a
  recorded line is one machine clear (however many recorded lines it touches) and drops
  those lines: the code must be fetched (and missed) again, and a store after that clears
  again.
* Store buffers (memory_cancel 64K_CONF, MOB_load_replay PARTIAL_DATA / UNALGN_ADDR): the
  last `store_buffers` stores (address, size) in program order; the model has no time, so a
  store leaves the buffer when that many younger stores follow it.  A load looks for the
  youngest buffered store that overlaps its bytes: one that starts at the load's address and
  is at least as wide forwards its data (no replay, the forwarding rule of the NetBurst
  store-to-load path); one that holds all of the load's bytes from another start is an
  UNALGN_ADDR replay; one that holds only some is a PARTIAL_DATA replay.  A load that
  overlaps no buffered store but has the address of one modulo 64 KB (64 K aliasing) is a
  64K_CONF cancel.
* Each logical processor has its own TLBs and caches, so that counts are a function of its
  own accesses, whatever the host's thread interleaving (determinism over sharing).
"""
from __future__ import annotations

from dataclasses import dataclass

from .models import MemoryGeometry

LINE_SHIFT = 6  # 64-byte lines
PAGE_SHIFT = 12  # 4 KB pages
LINE_MASK = (1 << LINE_SHIFT) - 1
PAGE_MASK = (1 << PAGE_SHIFT) - 1
ADDR_MASK = (1 << 64) - 1
LINES = ADDR_MASK >> LINE_SHIFT  # line numbers and page numbers wrap like addresses
PAGES = ADDR_MASK >> PAGE_SHIFT

# What one access yields, in this order (the C struct mm_outcome has the same fields)
OUTCOME_FIELDS = ("split", "dtlb_miss", "l1_miss", "l2_hite", "l2_hitm", "l2_miss",
                  "writeback", "smc", "partial", "unaligned", "alias64k")
CODE_FETCH_LINES = 16  # a block of code fetched records at most this many lines


@dataclass
class Outcome:
    """What one access did: `split` (0/1), `dtlb_miss` pages that missed the DTLB (0-2),
    `l1_miss` lines a load missed in L1, `l2_hite` / `l2_hitm` / `l2_miss` L2 reads by
    result (loads that missed L1, and stores' reads for ownership), `writeback` modified
    lines written back by the sectors it replaced, `smc` 1 if a store hit the code-line
    record (a self-modifying-code machine clear); for a load, `partial` / `unaligned` 1 if
    a buffered store it overlaps cannot forward (MOB replays), `alias64k` 1 if it aliases
    one modulo 64 KB."""
    split: int = 0
    dtlb_miss: int = 0
    l1_miss: int = 0
    l2_hite: int = 0
    l2_hitm: int = 0
    l2_miss: int = 0
    writeback: int = 0
    smc: int = 0
    partial: int = 0
    unaligned: int = 0
    alias64k: int = 0

    def as_tuple(self) -> tuple:
        return tuple(getattr(self, n) for n in OUTCOME_FIELDS)


class LruSets:
    """`sets` sets of `ways` entries, true LRU: each set is a list of [tag, state] with the
    most recently used entry last.  `state` is the caller's (0 for TLBs and L1)."""

    def __init__(self, sets: int, ways: int):
        if sets < 1 or ways < 1 or sets & (sets - 1):
            raise ValueError(f"bad geometry: {sets} sets x {ways} ways (sets: a power of 2)")
        self.nsets, self.ways = sets, ways
        self.sets: list[list[list[int]]] = [[] for _ in range(sets)]

    def lookup(self, key: int) -> list[int] | None:
        """The entry for `key` (made most recently used), or None."""
        s = self.sets[key & (self.nsets - 1)]
        for i, e in enumerate(s):
            if e[0] == key:
                if i != len(s) - 1:
                    s.append(s.pop(i))
                return e
        return None

    def insert(self, key: int, state: int = 0) -> list[int] | None:
        """Put `key` in as the most recently used entry (it must be absent); returns the
        entry it replaced (the least recently used of a full set), or None."""
        s = self.sets[key & (self.nsets - 1)]
        victim = s.pop(0) if len(s) == self.ways else None
        s.append([key, state])
        return victim

    def drop(self, key: int) -> None:
        s = self.sets[key & (self.nsets - 1)]
        s[:] = [e for e in s if e[0] != key]

    def clear(self) -> None:
        for s in self.sets:
            s.clear()


# L2 sector state: bit 2*i = line i valid, bit 2*i + 1 = line i modified
def _valid(state: int, i: int) -> bool:
    return bool(state >> (2 * i) & 1)


def _modified(state: int, i: int) -> bool:
    return bool(state >> (2 * i + 1) & 1)


def _dirty_lines(state: int, lines: int) -> int:
    return sum(_modified(state, i) for i in range(lines))


class MemorySystem:
    """One logical processor's TLBs and data caches (the reference model)."""

    def __init__(self, geometry: MemoryGeometry):
        g = geometry
        self.g = g
        self.dtlb = LruSets(1, g.dtlb_entries)
        self.itlb = LruSets(1, g.itlb_entries)
        self.l1 = LruSets(g.l1d_kb * 1024 // (g.l1d_ways * g.line), g.l1d_ways)
        self.sector_lines = g.sector_lines
        self.l2 = LruSets(g.l2_kb * 1024 // (g.l2_ways * g.line * g.sector_lines), g.l2_ways)
        self.code = LruSets(g.code_lines // g.code_ways, g.code_ways)
        self.stores: list[tuple[int, int]] = []  # (address, size), oldest first
        self.store_buffers = g.store_buffers

    # -- translations ---------------------------------------------------------------------

    def _translate(self, tlb: LruSets, page: int) -> int:
        """1 if `page` missed (a page walk, the entry filled), else 0."""
        if tlb.lookup(page) is not None:
            return 0
        tlb.insert(page)
        return 1

    def fetch(self, addr: int) -> int:
        """An instruction fetch from the page of linear address `addr`: 1 = ITLB miss."""
        return self._translate(self.itlb, addr >> PAGE_SHIFT)

    def fetch_code(self, addr: int, end: int) -> int:
        """A block of code [addr, end) is fetched: its lines (the first CODE_FETCH_LINES)
        are looked up in the code-line record (the trace cache) and become the most recently
        used; returns how many missed (trace-cache misses: each is built, and filled)."""
        first = (addr & ADDR_MASK) >> LINE_SHIFT
        last = ((end - 1) & ADDR_MASK) >> LINE_SHIFT
        n = min(((last - first) & LINES) + 1, CODE_FETCH_LINES)
        misses = 0
        for k in range(n):
            line = (first + k) & LINES
            if self.code.lookup(line) is None:
                self.code.insert(line)
                misses += 1
        return misses

    def flush_tlbs(self) -> None:
        """A CR3 write."""
        self.dtlb.clear()
        self.itlb.clear()

    def reset(self) -> None:
        """Every TLB and cache empty (as at the start)."""
        for s in (self.dtlb, self.itlb, self.l1, self.l2, self.code):
            s.clear()
        self.stores.clear()

    def invlpg(self, addr: int) -> None:
        """INVLPG of the page of `addr`."""
        self.dtlb.drop(addr >> PAGE_SHIFT)
        self.itlb.drop(addr >> PAGE_SHIFT)

    # -- data accesses --------------------------------------------------------------------

    def _store_buffer(self, addr: int, size: int, store: bool, out: Outcome) -> None:
        """A store enters the buffer; a load is checked against it."""
        if store:
            self.stores.append((addr, size))
            if len(self.stores) > self.store_buffers:
                self.stores.pop(0)
            return
        for s_addr, s_size in reversed(self.stores):
            into = (addr - s_addr) & ADDR_MASK  # the load's start, from the store's
            if into < s_size or (s_addr - addr) & ADDR_MASK < size:  # the bytes overlap
                if into == 0 and size <= s_size:
                    return  # forwarded
                if into < s_size and into + size <= s_size:
                    out.unaligned = 1
                else:
                    out.partial = 1
                return
        if any((addr - s_addr) & 0xFFFF == 0 for s_addr, _ in self.stores):
            out.alias64k = 1

    def _l2(self, line: int, store: bool, out: Outcome) -> None:
        """An L2 reference to 64-byte line `line`: a load's read, or a store's."""
        n = self.sector_lines
        i = line % n
        e = self.l2.lookup(line // n)
        if e is not None and _valid(e[1], i):
            if store:
                e[1] |= 2 << (2 * i)
            elif _modified(e[1], i):
                out.l2_hitm += 1
            else:
                out.l2_hite += 1
            return
        out.l2_miss += 1
        fill = (3 if store else 1) << (2 * i)
        if e is not None:
            e[1] |= fill
            return
        victim = self.l2.insert(line // n, fill)
        if victim is not None:
            out.writeback += _dirty_lines(victim[1], n)

    def access(self, addr: int, size: int, store: bool) -> Outcome:
        """A load or store of `size` bytes at linear address `addr`."""
        if not 1 <= size <= 1 << LINE_SHIFT:
            raise ValueError(f"access size must be 1-64 bytes, got {size}")
        out = Outcome()
        addr &= ADDR_MASK
        self._store_buffer(addr, size, store, out)
        first = addr >> LINE_SHIFT
        nlines = ((addr & LINE_MASK) + size + LINE_MASK) >> LINE_SHIFT
        out.split = int(nlines > 1)
        npages = ((addr & PAGE_MASK) + size + PAGE_MASK) >> PAGE_SHIFT
        for k in range(npages):  # (the last page of the address space wraps to the first)
            out.dtlb_miss += self._translate(self.dtlb, ((addr >> PAGE_SHIFT) + k) & PAGES)
        for k in range(nlines):
            line = (first + k) & LINES
            if store:
                self.l1.lookup(line)  # write-through: a hit is a use, a miss fills nothing
                self._l2(line, True, out)
                if self.code.lookup(line) is not None:  # self-modifying code
                    self.code.drop(line)
                    out.smc = 1
            elif self.l1.lookup(line) is None:
                out.l1_miss += 1
                self.l1.insert(line)
                self._l2(line, False, out)
        return out


__all__ = ["MemorySystem", "Outcome", "OUTCOME_FIELDS", "LruSets", "LINE_SHIFT",
           "PAGE_SHIFT", "CODE_FETCH_LINES"]
