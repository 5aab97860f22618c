/*
 * resolve.h: what resolve.c offers to the other units. resolve.c: dynamic block ends: the
 * resolution of a block's outcome at the next block entry (cb_xcheck), silent branch
 * outcomes and their replay, and the dirty-list callback (cb_first) (docs/guest-events.md,
 * "Silent branch outcomes").
 */
#ifndef P4PMU_RESOLVE_H
#define P4PMU_RESOLVE_H

#include "counting_types.h"

/* A vCPU's resolutions of dynamic block ends and silent branch outcomes */
struct resolve_vcpu {
    uint64_t w_resv; /* penalties reserved in W for silent outcomes (silent_reserve) */
    uint64_t resolutions, silent;
    uint32_t b;           /* the block resolved last ... */
    uint32_t last;        /* ... ext kind +1 of the last clock of that execution */
    int n;                /* seq's length, -1: too many to list (long REP), RES_LAZY */
    int v;                /* n == RES_LAZY: the variant of b's last outcome */
    uint32_t seq[64];     /* the clocks the last resolution added (ext kinds), in order */
    struct rep_state rep; /* the REP string instruction in flight */
    /* silent branch outcomes: per-group state, the block whose outcome was pending at the
     * last fold (carried into this batch) */
    struct group_state *group_chunks[MAX_GROUPS / GCHUNK];
    uint32_t carry_b;
    uint64_t gates, silent_bad;
};

void res_fill(struct vcpu_counting *c);
void expand_outcomes(struct vcpu_counting *c, const struct blk *b, unsigned v, int64_t n);
void resolve(unsigned vi, struct vcpu_counting *c, uint32_t pid, uint64_t a_new, int regs_ok);
void entry_settle(unsigned vi, struct vcpu_counting *c);
void silent_catch_up_all(unsigned vi, struct vcpu_counting *c);
void silent_before_fold(unsigned vi, struct vcpu_counting *c);
void group_release(struct vcpu_counting *c, uint32_t gid);
void group_retire(unsigned vi, struct vcpu_counting *c, uint32_t gid);
void group_counts_reset(struct resolve_vcpu *rv);
const struct group_state *group_state_peek(const struct resolve_vcpu *rv, uint32_t gid);
void cb_first(unsigned int vi, void *ud);
void cb_xcheck(unsigned int vi, void *ud);
void cb_rep(unsigned int vi, void *ud);

#endif
