/*
 * kinds.h: what kinds.c offers to the other units. kinds.c: clock kinds (one kind = one
 * clock's fields, clockmodel.FIELDS) interned in a global table; the clock schedule of
 * instructions (clockmodel.schedule) and the kind sequences of portions of a block
 * execution (docs/guest-events.md).
 */
#ifndef P4PMU_KINDS_H
#define P4PMU_KINDS_H

#include "counting_types.h"

/* The clock kinds of the run: one kind = one clock's fields (clockmodel.FIELDS), interned
 * under p4.run->lock and read lock-free (a kind is published before n counts it). */
struct kind_table {
    uint8_t fields[MAX_KINDS][KF_N];
    volatile uint32_t n;
    uint32_t hash[2 * MAX_KINDS]; /* kind id + 1, 0 empty */
    uint32_t bubble, empty;       /* bubble clock kind, empty stall clock kind */
    uint32_t active;      /* a stall clock with a bus read active (clockmodel.active_clock) */
    uint32_t penalty[64]; /* penalty clocks (bogus retirement then empty) */
    unsigned n_penalty;
    int full_warned;   /* the table is full: said once */
    uint32_t rep_full; /* REP: a clock retiring 3 uops and nothing else */
};


uint32_t kind_intern(const uint8_t *f);
uint32_t kind_with_return_tail(uint32_t k);
unsigned schedule(const struct insn_info *ins, unsigned a, unsigned e, struct clock_fields *out,
                  unsigned cap, uint16_t *at);
unsigned sched_cap(const struct blk *b);
/* the kind sequence of [a, e) of b from this thread's cache: valid until this thread's next
 * portion_seq call (do not free it) */
unsigned portion_seq(const struct blk *b, unsigned a, unsigned e, const uint32_t **seq);
unsigned portion_seq_calc(const struct blk *b, unsigned a, unsigned e, uint32_t **seq);

#endif
