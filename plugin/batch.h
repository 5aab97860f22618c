/*
 * batch.h: what batch.c offers to the other units. batch.c: the accumulators of the current
 * batch of a vCPU: adjacent-pair hash, kind sequences and block portions added or removed,
 * per-vCPU counting state allocation (docs/guest-events.md).
 */
#ifndef P4PMU_BATCH_H
#define P4PMU_BATCH_H

#include "counting_types.h"

/* A vCPU's current batch: the blocks it ran, its signed accumulators (dynamic parts and
 * corrections), an execution split by an access, its boundaries */
struct batch_vcpu {
    uint32_t *dirty; /* blocks run since the last fold */
    uint32_t ndirty;
    int64_t *acc;      /* [NEXT] clocks per ext kind */
    int64_t *acc_last; /* [NEXT] execution ends per ext kind */
    uint32_t *touched; /* ext kinds with acc or acc_last possibly non-zero */
    uint8_t *tmark;
    uint32_t ntouched;
    int64_t firsts[2]; /* execution starts (bubbles) per os, from dynamic parts */
    struct pair_hash pairs;
    /* the open block execution split by an access (its rest is credited to the batch) */
    uint32_t open_b, open_a;
    uint64_t open_stamp;
    uint32_t next_first; /* ext kind of the first clock of the current batch (+1; 0 none) */
    int next_first_bubble;
    uint32_t cut_last; /* ext kind +1 of the last clock of an execution that is no whole
                            * block execution: cut (exception, abandoned block), or the
                            * enabling WRMSR's credited clocks (counting_credit_wrmsr) */
    uint32_t entry_b;  /* the current batch started at the entry of this block (0: no) */
};

/* ext kind e's accumulators may be non-zero now (the fold looks at these only) */
static inline void touch(struct batch_vcpu *bt, uint32_t e)
{
    if (!bt->tmark[e]) {
        bt->tmark[e] = 1;
        bt->touched[bt->ntouched++] = e;
    }
}

static inline void acc_add(struct batch_vcpu *bt, uint32_t e, int64_t n)
{
    touch(bt, e);
    bt->acc[e] += n;
}

static inline void acc_last_add(struct batch_vcpu *bt, uint32_t e, int64_t n)
{
    touch(bt, e);
    bt->acc_last[e] += n;
}

void pair_hash_add(struct pair_hash *h, uint32_t a, uint32_t b, int64_t n);
void pair_hash_clear(struct pair_hash *h);
void acc_portion(struct batch_vcpu *bt, const struct blk *b, unsigned a, unsigned e, int ends,
                 int sign);
void vcpu_counting_init(struct vcpu_counting *c);

#endif
