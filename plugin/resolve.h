/*
 * resolve.h: what resolve.c offers to the other units. resolve.c: dynamic block ends: the
 * resolution of a block's outcome at the next block entry (cb_xcheck), silent branch
 * outcomes and their replay, and the dirty-list callback (cb_first) (docs/guest-events.md,
 * "Silent branch outcomes").
 */
#ifndef P4PMU_RESOLVE_H
#define P4PMU_RESOLVE_H

#include "counting_types.h"

void res_fill(struct vcpu_counting *c);
void expand_outcomes(struct vcpu_counting *c, const struct blk *b, unsigned v, int64_t n);
void resolve(unsigned vi, struct vcpu_counting *c, uint32_t pid, uint64_t a_new, int regs_ok);
void entry_settle(unsigned vi, struct vcpu_counting *c);
void silent_catch_up_all(unsigned vi);
void silent_before_fold(unsigned vi);
void group_release(unsigned vi, uint32_t gid);
void group_retire(unsigned vi, uint32_t gid);
void group_counts_reset(unsigned vi);
const struct group_state *group_state_peek(unsigned vi, uint32_t gid);
void cb_first(unsigned int vi, void *ud);
void cb_xcheck(unsigned int vi, void *ud);
void cb_rep(unsigned int vi, void *ud);

#endif
