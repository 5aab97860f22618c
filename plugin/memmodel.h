/*
 * memmodel.h: what memmodel.c offers.  memmodel.c: the memory side of the timing model in C
 * (emulator/memmodel.py is the reference it follows line by line; docs/memory-model.md):
 * split accesses, a DTLB and an ITLB, the L1 data cache and the sectored L2 of one logical
 * processor.  Self-contained (no QEMU, no other unit), so that tests/emulator/test_memmodel.py
 * can compile it alone and prove it equal to the reference on generated sequences.
 */
#ifndef P4PMU_MEMMODEL_H
#define P4PMU_MEMMODEL_H

#include <stdint.h>

/* one part's geometry (emulator/models.py MemoryGeometry; 64-byte lines, 2 lines per L2
 * sector, 4 KB pages on every part) */
struct mm_params {
    unsigned l1d_kb, l1d_ways, l2_kb, l2_ways, dtlb_entries, itlb_entries;
};

/* what one access did (memmodel.OUTCOME_FIELDS, same names) */
struct mm_outcome {
    uint8_t split, dtlb_miss, l1_miss, l2_hite, l2_hitm, l2_miss, writeback;
};

/* sets x ways entries with true LRU: stamp 0 = invalid, else the time of the last use */
struct mm_sets {
    uint32_t nsets, ways;
    uint64_t *tag, *stamp;
    uint8_t *state;
    uint64_t now;
    uint32_t hint; /* the entry hit last (looked at first) */
};

struct mm_state {
    struct mm_sets dtlb, itlb, l1, l2;
};

/* 0, or -1 when the geometry is not one of power-of-2 sets (nothing allocated then) */
int mm_init(struct mm_state *m, const struct mm_params *p);
void mm_free(struct mm_state *m);
void mm_access(struct mm_state *m, uint64_t addr, unsigned size, int store,
               struct mm_outcome *out);
int mm_fetch(struct mm_state *m, uint64_t addr);   /* 1: ITLB miss */
void mm_flush_tlbs(struct mm_state *m);            /* a CR3 write */
void mm_invlpg(struct mm_state *m, uint64_t addr); /* INVLPG */

#endif
