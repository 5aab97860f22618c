/*
 * deadline.h: what deadline.c offers to the other units. deadline.c: deadlines: the W
 * accumulator's arming, the exact deadline W2, the C-side deadline check (fast_check), the
 * deadline callbacks and what follows a Python (or mirror) step (docs/guest-events.md,
 * "Exact deadlines").
 */
#ifndef P4PMU_DEADLINE_H
#define P4PMU_DEADLINE_H

#include "counting_types.h"

/* per vCPU: the increments of the kinds.n_penalty clocks after a misprediction, summed, per CPL and
 * counter, for the per-kind table they were summed from (fast_check adds a penalty once
 * instead of clock by clock) */
struct pensum {
    const int32_t *winc;
    uint32_t nkext;
    int ok;
    int64_t v[2][P4_NCOUNTERS];
};

/* per vCPU: fast_check's per-execution events of the dirty blocks for the watched counters,
 * from the per-kind table they were summed from: entry i (dirty block i of the batch) holds
 * nw static sums, then 4 x nw sums of the final clock's variants (a misprediction's penalty
 * included).  Valid for the batch (`folds`) and table they were made for; entries [0, n) are
 * filled, in dirty-list order (the list only grows until the fold). */
struct dirty_sums {
    const int32_t *winc;
    uint32_t nkext;
    int nw;
    int32_t widx[P4_NCOUNTERS];
    uint64_t folds;
    uint32_t n;    /* entries filled */
    size_t cap;    /* int64_t values allocated at v */
    int64_t *v;
};

void exact_update(unsigned vi);
void exact_drop(unsigned vi);
void arm(unsigned vi, int64_t rest);
int after_python(unsigned vi, int64_t rest_clocks);
void cb_sched(unsigned int vi, void *ud);
void cb_exact_deadline(unsigned int vi, void *ud);

#endif
