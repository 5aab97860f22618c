/*
 * blocks.h: what blocks.c offers to the other units. blocks.c: translated blocks as the
 * counting model sees them: their static schedule, histogram and adjacent pairs, their
 * dynamic end, and the conditional predictor entry groups (docs/guest-events.md).
 */
#ifndef P4PMU_BLOCKS_H
#define P4PMU_BLOCKS_H

#include "counting_types.h"
#include "state.h"

/* The translated blocks of the run (id 0 = none) and the conditional predictor entry groups;
 * appended under p4.run->lock, read lock-free (an entry is published before its id is). */
struct block_table {
    struct blk *by_id[MAX_BLOCKS];
    volatile uint32_t n;
    struct pred_group *groups[MAX_GROUPS];
    uint32_t n_groups;
    uint32_t n_gates;
    int full_warned;
    struct u64_map group_of_key; /* predictor key -> group id */
};


struct block_table *block_table_new(void);
uint32_t block_new(uint64_t vaddr, unsigned n, struct insn_info *ins, int os, int mode,
                   int lite_lvl);
int find_insn(const struct blk *b, uint64_t addr);
int abandoned_insn(const struct blk *b, uint64_t a);
int find_insn_in(const struct blk *b, uint64_t addr);

#include "counting.h"

/* the executions of block id in the current batch */
static inline uint64_t en_total(const struct vcpu_counting *c, uint32_t id)
{
    const struct blk *b = p4.blocks->by_id[id];
    return c->sbase[SB_HDR + id] + (b->gate ? c->sbase[SB_BANK0 + b->gate - 1] : 0);
}

/* gate (its next entry fires cb_first) / ungate a member */
static inline void gate_close(struct vcpu_counting *c, uint32_t id)
{
    uint64_t *sb = c->sbase;
    *bank_w(c, p4.blocks->by_id[id]) += sb[SB_HDR + id];
    sb[SB_HDR + id] = 0;
}

static inline void gate_open(struct vcpu_counting *c, uint32_t id)
{
    uint64_t *sb = c->sbase, *bk = bank_w(c, p4.blocks->by_id[id]);
    sb[SB_HDR + id] += *bk;
    *bk = 0;
}

#endif
