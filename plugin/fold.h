/*
 * fold.h: what fold.c offers to the other units. fold.c: folds: the activity since the last
 * fold closed into a vCPU's p4c_out (joint histogram over (kind, CPL), adjacent pairs,
 * totals) at a block entry, a PMU access or between blocks (docs/guest-events.md); the core's
 * clock timeline (threads=2).
 */
#ifndef P4PMU_FOLD_H
#define P4PMU_FOLD_H

#include "counting_types.h"

void lp_resync(unsigned vi);
int64_t lp_timeline(unsigned vi, int64_t clocks);
void fold_at_entry(unsigned vi, uint32_t id);
int64_t fold_at_access(unsigned vi, uint64_t addr);
void fold_between_blocks(unsigned vi);

#endif
