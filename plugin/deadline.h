/*
 * deadline.h: what deadline.c offers to the other units. deadline.c: deadlines: the W
 * accumulator's arming, the exact deadline W2, the C-side deadline check (fast_check), the
 * deadline callbacks and what follows a Python (or mirror) step (docs/guest-events.md,
 * "Exact deadlines").
 */
#ifndef P4PMU_DEADLINE_H
#define P4PMU_DEADLINE_H

#include "counting_types.h"

/* per vCPU: the increments of the p4.kinds->n_penalty clocks after a misprediction, summed,
 * per CPL and counter, for the per-kind table they were summed from (fast_check adds a penalty
 * once instead of clock by clock) */
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
    uint32_t n; /* entries filled */
    size_t cap; /* int64_t values allocated at v */
    int64_t *v;
};

/* A vCPU's exact deadline (W2, "Exact deadlines"): on for this vCPU, the counter's watch
 * slot, its events left before it may overflow (fresh: computed since W2 was last armed), the
 * verdict's cache key (the increment table it was made for), and the candidate for the next
 * signature with how many steps in a row it was the same */
struct exact_vcpu {
    int on, slot, fresh;
    int64_t left;
    const int32_t *key_winc;
    uint32_t key_nk;
    uint32_t key_match; /* counters whose column is the signature's */
    int cand;
    const int32_t *cand_winc;
    uint32_t cand_nk, streak;
    uint32_t votes[P4_NCOUNTERS], steps; /* deadline checks per counter (exact_vote) */
    uint32_t pen[2];                     /* W2 events of a misprediction penalty at CPL 1-3 / 0 (the
                            * signature's pen[]) while on, else 0 */
    uint64_t checks;
};

/* A vCPU's deadline scheduling: W was armed at w_base (W >= SB_FIRES_AT fires); py_left =
 * clocks until Python must fold (-1: no Python deadline); pmi_level: this LP's interrupt
 * request is asserted (look at the LVT every PMI_RECHECK clocks until it is cleared) */
struct deadline_vcpu {
    uint64_t w_base;
    int64_t py_left;
    int pmi_level;
    int force_fold; /* a fold is wanted at the next block entry (SB_FORCE_FIRE) */
    int w_driver;   /* the counter that set W's clock budget, -1: none */
    uint64_t deadlines, fast_deadlines;
    uint64_t fast_checks, fast_scanned; /* C deadline checks, dirty blocks they looked at */
};

void exact_update(struct vcpu_counting *c, const struct p4c_out *o);
void exact_drop(struct vcpu_counting *c);
void arm(struct vcpu_counting *c, int64_t rest);
int after_python(unsigned vi, struct vcpu_counting *c, int64_t rest_clocks);
void cb_sched(unsigned int vi, void *ud);
void cb_exact_deadline(unsigned int vi, void *ud);

#endif
