/*
 * memmodel.h: what memmodel.c offers.  memmodel.c: the memory side of the timing model in C
 * (emulator/memmodel.py is the reference it follows line by line; docs/memory-model.md):
 * split accesses, a DTLB and an ITLB, the L1 data cache and the sectored L2 of one logical
 * processor, the code-line record of self-modifying-code detection and the store buffers.
 * Self-contained (no QEMU, no other unit), so that tests/emulator/test_memmodel.py can
 * compile it alone and prove it equal to the reference on generated sequences.
 */
#ifndef P4PMU_MEMMODEL_H
#define P4PMU_MEMMODEL_H

#include <stdint.h>

/* one part's geometry (emulator/models.py MemoryGeometry; 64-byte lines, 2 lines per L2
 * sector, 4 KB pages on every part) */
struct mm_params {
    unsigned l1d_kb, l1d_ways, l2_kb, l2_ways, dtlb_entries, itlb_entries, code_lines, code_ways,
        store_buffers;
};

#define MM_CODE_FETCH_LINES 16 /* memmodel.CODE_FETCH_LINES */
#define MM_STORE_BUFFERS_MAX 64

/* what one access did (memmodel.OUTCOME_FIELDS, same names) */
struct mm_outcome {
    uint8_t split, dtlb_miss, l1_miss, l2_hite, l2_hitm, l2_miss, writeback, smc, partial,
        unaligned, alias64k;
};

/* sets x ways entries with true LRU: stamp 0 = invalid, else the time of the last use;
 * per set the most recently used entry (mru: its tag + 1, 0 none; mru_at: its index), which
 * a use leaves the most recent: found without a search and without a new stamp (the order
 * within the set, all LRU decides on, does not change) */
struct mm_sets {
    uint32_t nsets, ways;
    uint64_t *tag, *stamp;
    uint8_t *state;
    uint64_t now;
    uint64_t *mru;
    uint32_t *mru_at;
    /* one set of many ways (the fully associative TLBs): an index key -> entry + 1, open
     * addressing over idx_cap slots (a power of 2, at least 4 x ways), tombstones UINT32_MAX */
    uint64_t *idx_key;
    uint32_t *idx_val;
    uint32_t idx_cap, idx_puts;
};

struct mm_state {
    struct mm_sets dtlb, itlb, l1, l2, code;
    /* stores look up the code-line record (0: the plugin does not feed it, it stays as it
     * is and no store costs a look-up) */
    uint8_t code_on;
    /* the store buffers: the last sb_cap stores, a ring (sb_next: the next slot, sb_n: how
     * many); used only while sb_on (0: stores are not recorded, loads not checked) */
    uint64_t sb_addr[MM_STORE_BUFFERS_MAX];
    uint8_t sb_size[MM_STORE_BUFFERS_MAX];
    unsigned sb_cap, sb_next, sb_n;
    uint8_t sb_on;
    /* the line the last access touched (+ 1; 0: none since a flush), and what it left:
     * the line in L1 (the most recent of its set, its page the DTLB's most recent), and
     * valid and modified in L2 (its sector the most recent of its set) -- so that the next
     * access to the same line, which finds everything as it is, takes no look-up */
    uint64_t last_line;
    uint8_t last_in_l1, last_l2m;
};

/* 0, or -1 when the geometry is not one of power-of-2 sets (nothing allocated then) */
int mm_init(struct mm_state *m, const struct mm_params *p);
void mm_free(struct mm_state *m);
void mm_access(struct mm_state *m, uint64_t addr, unsigned size, int store, struct mm_outcome *out);
int mm_fetch(struct mm_state *m, uint64_t addr); /* 1: ITLB miss */
/* code [addr, end) fetched: its lines looked up in the code-line record (the trace cache)
 * and filled; returns how many missed */
unsigned mm_fetch_code(struct mm_state *m, uint64_t addr, uint64_t end);
void mm_flush_tlbs(struct mm_state *m);            /* a CR3 write */
void mm_invlpg(struct mm_state *m, uint64_t addr); /* INVLPG */
void mm_reset(struct mm_state *m);                 /* everything empty (MemorySystem.reset) */
void mm_reset_data(struct mm_state *m);            /* the DTLB and the caches empty */
void mm_reset_itlb(struct mm_state *m);            /* the ITLB empty */
void mm_reset_code(struct mm_state *m);            /* the code-line record empty */
void mm_reset_stores(struct mm_state *m);          /* the store buffers empty */

#endif
