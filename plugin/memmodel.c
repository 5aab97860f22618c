/*
 * p4pmu: the memory side of the timing model (emulator/memmodel.py, the reference this
 * follows line by line; docs/memory-model.md): split accesses, DTLB and ITLB, the
 * write-through L1 data cache and the L2 of 128-byte sectors holding two 64-byte lines, and
 * the code-line record that detects self-modifying code, and the store buffers.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memmodel.h"

#define LINE_SHIFT 6
#define PAGE_SHIFT 12
#define LINE_MASK ((1u << LINE_SHIFT) - 1)
#define PAGE_MASK ((1u << PAGE_SHIFT) - 1)
#define SECTOR_LINES 2u

#define IDX_MIN_WAYS 16 /* sets of at least this many ways get an index */
#define IDX_DEAD UINT32_MAX

static size_t idx_slot(const struct mm_sets *s, uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (s->idx_cap - 1);
}

/* the entry of key in the index, -1 if absent */
static long idx_find(const struct mm_sets *s, uint64_t key)
{
    for (size_t i = idx_slot(s, key);; i = (i + 1) & (s->idx_cap - 1)) {
        uint32_t v = s->idx_val[i];
        if (!v) return -1;
        if (v != IDX_DEAD && s->idx_key[i] == key) return (long)v - 1;
    }
}

static void idx_del(struct mm_sets *s, uint64_t key)
{
    for (size_t i = idx_slot(s, key);; i = (i + 1) & (s->idx_cap - 1)) {
        uint32_t v = s->idx_val[i];
        if (!v) return;
        if (v != IDX_DEAD && s->idx_key[i] == key) {
            s->idx_val[i] = IDX_DEAD;
            return;
        }
    }
}

static void idx_rebuild(struct mm_sets *s)
{
    memset(s->idx_val, 0, s->idx_cap * sizeof(uint32_t));
    for (uint32_t w = 0; w < s->ways; w++) {
        if (!s->stamp[w]) continue;
        size_t i = idx_slot(s, s->tag[w]);
        while (s->idx_val[i])
            i = (i + 1) & (s->idx_cap - 1);
        s->idx_key[i] = s->tag[w];
        s->idx_val[i] = w + 1;
    }
}

static void idx_put(struct mm_sets *s, uint64_t key, uint32_t entry)
{
    size_t i = idx_slot(s, key);
    while (s->idx_val[i] && s->idx_val[i] != IDX_DEAD)
        i = (i + 1) & (s->idx_cap - 1);
    s->idx_key[i] = key;
    s->idx_val[i] = entry + 1;
    if (++s->idx_puts >= s->idx_cap / 2) { /* tombstones pile up: start over */
        idx_rebuild(s);
        s->idx_puts = s->ways;
    }
}

static int sets_init(struct mm_sets *s, uint32_t nsets, uint32_t ways)
{
    memset(s, 0, sizeof(*s));
    if (!nsets || !ways || (nsets & (nsets - 1))) return -1;
    s->nsets = nsets;
    s->ways = ways;
    s->tag = calloc((size_t)nsets * ways, sizeof(uint64_t));
    s->stamp = calloc((size_t)nsets * ways, sizeof(uint64_t));
    s->state = calloc((size_t)nsets * ways, 1);
    s->mru = calloc(nsets, sizeof(uint64_t));
    s->mru_at = calloc(nsets, sizeof(uint32_t));
    if (nsets == 1 && ways >= IDX_MIN_WAYS) {
        s->idx_cap = 4;
        while (s->idx_cap < 4 * ways)
            s->idx_cap *= 2;
        s->idx_key = calloc(s->idx_cap, sizeof(uint64_t));
        s->idx_val = calloc(s->idx_cap, sizeof(uint32_t));
        if (!s->idx_key || !s->idx_val) return -1;
    }
    return s->tag && s->stamp && s->state && s->mru && s->mru_at ? 0 : -1;
}

static void sets_free(struct mm_sets *s)
{
    free(s->tag);
    free(s->stamp);
    free(s->state);
    free(s->mru);
    free(s->mru_at);
    free(s->idx_key);
    free(s->idx_val);
    memset(s, 0, sizeof(*s));
}

/* The entry of `key` made most recently used, or -1 (LruSets.lookup) */
static inline long sets_lookup(struct mm_sets *s, uint64_t key)
{
    size_t set = (size_t)(key & (s->nsets - 1));
    if (s->mru[set] == key + 1) return (long)s->mru_at[set];
    if (s->idx_cap) {
        long e = idx_find(s, key);
        if (e >= 0) {
            s->stamp[e] = ++s->now;
            s->mru[set] = key + 1;
            s->mru_at[set] = (uint32_t)e;
        }
        return e;
    }
    size_t base = set * s->ways;
    for (size_t i = base; i < base + s->ways; i++) {
        if (s->stamp[i] && s->tag[i] == key) {
            s->stamp[i] = ++s->now;
            s->mru[set] = key + 1;
            s->mru_at[set] = (uint32_t)i;
            return (long)i;
        }
    }
    return -1;
}

/* Put the absent `key` in (LruSets.insert): the first invalid way, else the least recently
 * used one, whose state goes to *victim (-1: none replaced).  Returns the entry. */
static size_t sets_insert(struct mm_sets *s, uint64_t key, uint8_t state, int *victim)
{
    size_t base = (size_t)(key & (s->nsets - 1)) * s->ways, v = base;
    for (size_t i = base; i < base + s->ways; i++) {
        if (!s->stamp[i]) {
            v = i;
            break;
        }
        if (s->stamp[i] < s->stamp[v]) v = i;
    }
    *victim = s->stamp[v] ? s->state[v] : -1;
    if (s->idx_cap && s->stamp[v]) idx_del(s, s->tag[v]);
    s->tag[v] = key;
    s->state[v] = state;
    s->stamp[v] = ++s->now;
    if (s->idx_cap) idx_put(s, key, (uint32_t)v);
    s->mru[(size_t)(key & (s->nsets - 1))] = key + 1;
    s->mru_at[(size_t)(key & (s->nsets - 1))] = (uint32_t)v;
    return v;
}

static void sets_drop(struct mm_sets *s, uint64_t key)
{
    size_t base = (size_t)(key & (s->nsets - 1)) * s->ways;
    for (size_t i = base; i < base + s->ways; i++) {
        if (s->stamp[i] && s->tag[i] == key) {
            s->stamp[i] = 0;
            if (s->idx_cap) idx_del(s, key);
        }
    }
    if (s->mru[(size_t)(key & (s->nsets - 1))] == key + 1)
        s->mru[(size_t)(key & (s->nsets - 1))] = 0;
}

static void sets_clear(struct mm_sets *s)
{
    memset(s->stamp, 0, (size_t)s->nsets * s->ways * sizeof(uint64_t));
    memset(s->mru, 0, s->nsets * sizeof(uint64_t));
    if (s->idx_cap) {
        memset(s->idx_val, 0, s->idx_cap * sizeof(uint32_t));
        s->idx_puts = 0;
    }
}

int mm_init(struct mm_state *m, const struct mm_params *p)
{
    memset(m, 0, sizeof(*m));
    if (!p->store_buffers || p->store_buffers > MM_STORE_BUFFERS_MAX) return -1;
    m->sb_cap = p->store_buffers;
    unsigned l1_sets = p->l1d_ways ? p->l1d_kb * 1024u / (p->l1d_ways << LINE_SHIFT) : 0;
    unsigned l2_sets = p->l2_ways ? p->l2_kb * 1024u / (p->l2_ways * (SECTOR_LINES << LINE_SHIFT))
                                  : 0;
    if (sets_init(&m->dtlb, 1, p->dtlb_entries) || sets_init(&m->itlb, 1, p->itlb_entries) ||
        sets_init(&m->l1, l1_sets, p->l1d_ways) || sets_init(&m->l2, l2_sets, p->l2_ways) ||
        sets_init(&m->code, p->code_ways ? p->code_lines / p->code_ways : 0, p->code_ways)) {
        mm_free(m);
        return -1;
    }
    return 0;
}

void mm_free(struct mm_state *m)
{
    sets_free(&m->dtlb);
    sets_free(&m->itlb);
    sets_free(&m->l1);
    sets_free(&m->l2);
    sets_free(&m->code);
}

/* 1 if `page` missed the TLB (a walk; the entry filled) */
static int translate(struct mm_sets *tlb, uint64_t page)
{
    if (sets_lookup(tlb, page) >= 0) return 0;
    int victim;
    sets_insert(tlb, page, 0, &victim);
    return 1;
}

int mm_fetch(struct mm_state *m, uint64_t addr)
{
    return translate(&m->itlb, addr >> PAGE_SHIFT);
}

unsigned mm_fetch_code(struct mm_state *m, uint64_t addr, uint64_t end)
{
    const uint64_t lines = UINT64_MAX >> LINE_SHIFT;
    uint64_t first = addr >> LINE_SHIFT, last = (end - 1) >> LINE_SHIFT;
    uint64_t n = ((last - first) & lines) + 1;
    unsigned misses = 0;
    if (n > MM_CODE_FETCH_LINES) n = MM_CODE_FETCH_LINES;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t line = (first + k) & lines;
        if (sets_lookup(&m->code, line) < 0) {
            int victim;
            sets_insert(&m->code, line, 0, &victim);
            misses++;
        }
        /* the next store to the last access's line must look the record up again */
        if (m->last_line == line + 1) m->last_line = 0;
    }
    return misses;
}

void mm_flush_tlbs(struct mm_state *m)
{
    m->last_line = 0;
    sets_clear(&m->dtlb);
    sets_clear(&m->itlb);
}

void mm_reset_data(struct mm_state *m)
{
    m->last_line = 0;
    sets_clear(&m->dtlb);
    sets_clear(&m->l1);
    sets_clear(&m->l2);
}

void mm_reset_itlb(struct mm_state *m)
{
    sets_clear(&m->itlb);
}

void mm_reset_code(struct mm_state *m)
{
    sets_clear(&m->code);
}

void mm_reset_stores(struct mm_state *m)
{
    m->sb_next = m->sb_n = 0;
}

void mm_reset(struct mm_state *m)
{
    mm_reset_data(m);
    mm_reset_itlb(m);
    mm_reset_code(m);
    mm_reset_stores(m);
}

void mm_invlpg(struct mm_state *m, uint64_t addr)
{
    m->last_line = 0;
    sets_drop(&m->dtlb, addr >> PAGE_SHIFT);
    sets_drop(&m->itlb, addr >> PAGE_SHIFT);
}

/* L2 sector state: bit 2i = line i valid, bit 2i+1 = line i modified */
static unsigned dirty_lines(unsigned state)
{
    unsigned n = 0;
    for (unsigned i = 0; i < SECTOR_LINES; i++)
        n += state >> (2 * i + 1) & 1;
    return n;
}

/* An L2 reference to line `line` (MemorySystem._l2) */
static void l2_ref(struct mm_state *m, uint64_t line, int store, struct mm_outcome *o)
{
    unsigned i = (unsigned)(line % SECTOR_LINES);
    uint64_t sector = line / SECTOR_LINES;
    long e = sets_lookup(&m->l2, sector);
    if (e >= 0 && (m->l2.state[e] >> (2 * i) & 1)) {
        if (store) m->l2.state[e] |= (uint8_t)(2u << (2 * i));
        else if (m->l2.state[e] >> (2 * i + 1) & 1) o->l2_hitm++;
        else o->l2_hite++;
        return;
    }
    o->l2_miss++;
    uint8_t fill = (uint8_t)((store ? 3u : 1u) << (2 * i));
    if (e >= 0) {
        m->l2.state[e] |= fill;
        return;
    }
    int victim;
    sets_insert(&m->l2, sector, fill, &victim);
    if (victim >= 0) o->writeback += (uint8_t)dirty_lines((unsigned)victim);
}

/* A store enters the buffers; a load is checked against them (MemorySystem._store_buffer) */
static void store_buffer(struct mm_state *m, uint64_t addr, unsigned size, int store,
                         struct mm_outcome *o)
{
    if (store) {
        m->sb_addr[m->sb_next] = addr;
        m->sb_size[m->sb_next] = (uint8_t)size;
        m->sb_next = (m->sb_next + 1) % m->sb_cap;
        if (m->sb_n < m->sb_cap) m->sb_n++;
        return;
    }
    for (unsigned k = 1; k <= m->sb_n; k++) { /* the youngest first */
        unsigned i = (m->sb_next + m->sb_cap - k) % m->sb_cap;
        uint64_t into = addr - m->sb_addr[i];
        unsigned ss = m->sb_size[i];
        if (into < ss || m->sb_addr[i] - addr < size) {
            if (into == 0 && size <= ss) return; /* forwarded */
            if (into < ss && into + size <= ss) o->unaligned = 1;
            else o->partial = 1;
            return;
        }
    }
    for (unsigned k = 0; k < m->sb_n; k++) {
        if (((addr - m->sb_addr[k]) & 0xFFFF) == 0) {
            o->alias64k = 1;
            return;
        }
    }
}

void mm_access(struct mm_state *m, uint64_t addr, unsigned size, int store, struct mm_outcome *o)
{
    memset(o, 0, sizeof(*o));
    if (m->sb_on) store_buffer(m, addr, size, store, o);
    uint64_t first = addr >> LINE_SHIFT;
    unsigned nlines = ((unsigned)(addr & LINE_MASK) + size + LINE_MASK) >> LINE_SHIFT;
    if (nlines == 1 && m->last_line == first + 1 && (store ? m->last_l2m : m->last_in_l1))
        return; /* nothing to count, nothing changes (LRU order within each set) */
    unsigned npages = ((unsigned)(addr & PAGE_MASK) + size + PAGE_MASK) >> PAGE_SHIFT;
    o->split = nlines > 1;
    for (unsigned k = 0; k < npages; k++)
        o->dtlb_miss += (uint8_t)translate(&m->dtlb,
                                           ((addr >> PAGE_SHIFT) + k) & (UINT64_MAX >> PAGE_SHIFT));
    for (unsigned k = 0; k < nlines; k++) {
        uint64_t line = (first + k) & (UINT64_MAX >> LINE_SHIFT);
        if (store) {
            /* write-through: a hit is a use, a miss fills nothing */
            m->last_in_l1 = sets_lookup(&m->l1, line) >= 0;
            l2_ref(m, line, 1, o);
            m->last_l2m = 1;
            if (m->code_on && sets_lookup(&m->code, line) >= 0) { /* self-modifying code */
                sets_drop(&m->code, line);
                o->smc = 1;
            }
        } else {
            if (sets_lookup(&m->l1, line) < 0) {
                int victim;
                o->l1_miss++;
                sets_insert(&m->l1, line, 0, &victim);
                l2_ref(m, line, 0, o);
            }
            m->last_in_l1 = 1;
            m->last_l2m = 0;
        }
        m->last_line = line + 1;
    }
}
