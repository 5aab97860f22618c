/*
 * batch.h: what batch.c offers to the other units. batch.c: the accumulators of the current
 * batch of a vCPU: adjacent-pair hash, kind sequences and block portions added or removed,
 * per-vCPU counting state allocation (docs/guest-events.md).
 */
#ifndef P4PMU_BATCH_H
#define P4PMU_BATCH_H

#include "counting_types.h"

void pair_hash_add(struct pair_hash *h, uint32_t a, uint32_t b, int64_t n);
void pair_hash_clear(struct pair_hash *h);
void acc_portion(struct vcpu_counting *c, const struct blk *b, unsigned a, unsigned e, int ends,
                 int sign);
void vcpu_counting_init(struct vcpu_counting *c);

#endif
