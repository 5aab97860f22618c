/*
 * kinds.h: what kinds.c offers to the other units. kinds.c: clock kinds (one kind = one
 * clock's fields, clockmodel.FIELDS) interned in a global table; the clock schedule of
 * instructions (clockmodel.schedule) and the kind sequences of portions of a block
 * execution (docs/guest-events.md).
 */
#ifndef P4PMU_KINDS_H
#define P4PMU_KINDS_H

#include "counting_types.h"

extern uint32_t k_bubble, k_empty; /* bubble clock kind, empty stall clock kind */

extern uint8_t kinds[MAX_KINDS][KF_N];
extern volatile uint32_t n_kinds;
extern uint32_t k_penalty[64];
extern unsigned n_penalty;
extern uint32_t k_rep_full;

uint32_t kind_intern(const uint8_t *f);
unsigned schedule(const struct cinsn *ins, unsigned a, unsigned e, struct clk *out,
                         unsigned cap);
unsigned sched_cap(const struct blk *b);
unsigned portion_seq(const struct blk *b, unsigned a, unsigned e, uint32_t **seq);
unsigned portion_seq_calc(const struct blk *b, unsigned a, unsigned e, uint32_t **seq);

#endif
