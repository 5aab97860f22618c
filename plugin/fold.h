/*
 * fold.h: what fold.c offers to the other units. fold.c: folds: the activity since the last
 * fold closed into a vCPU's p4c_out (joint histogram over (kind, CPL), adjacent pairs,
 * totals) at a block entry, a PMU access or between blocks (docs/guest-events.md); the core's
 * clock timeline (threads=2).
 */
#ifndef P4PMU_FOLD_H
#define P4PMU_FOLD_H

#include "counting_types.h"

/* A vCPU's folds: the output Python reads (bridge.py Feeder), the labels of the sibling's
 * state, the core's clock timeline, totals */
struct fold_vcpu {
    uint32_t *seq; /* output: a one-execution batch in clock order */
    uint32_t seq_cap;
    uint32_t *o_ext;
    int64_t *o_cnt;
    uint32_t o_n, o_cap;
    uint32_t *o_pa, *o_pb;
    int64_t *o_pn;
    uint32_t o_np, o_pcap;
    uint32_t o_first, o_last; /* ext kinds */
    int64_t o_clocks;
    int o_bad; /* bookkeeping repaired (should not happen) */
    /* the sibling's state when the current batch started (its clocks are labelled with it;
     * a change of the sibling's halted state asks this vCPU to fold) */
    int oth_active, oth_os;
    /* threads=2, the core's clock timeline (lp_timeline): this LP's local clock, valid once
     * lclk_on is set */
    uint64_t lclk;
    int lclk_on;
    uint64_t folds;
    uint64_t clk_total;      /* clocks folded since counting began (the trace's time) */
    uint64_t insn_total;     /* instructions of the block executions folded (the same) */
    uint64_t pairless_folds; /* batches folded without adjacent pairs (no EDGE detector) */
    uint64_t bad_folds;      /* folds whose bookkeeping was inconsistent (o_bad): a bug */
    /* batches of the rest of an execution an access split, given in clock order
     * (one_execution_seq), and those refused because their order did not match the batch
     * (seq_is_batch) */
    uint64_t rest_seqs;
    uint64_t rest_seq_refused;
};

void lp_resync(unsigned vi, struct fold_vcpu *f);
int64_t lp_timeline(unsigned vi, struct fold_vcpu *f, int64_t clocks);
void fold_at_entry(unsigned vi, struct vcpu_counting *c, uint32_t id);
int64_t fold_at_access(unsigned vi, struct vcpu_counting *c, uint64_t addr);
void fold_between_blocks(unsigned vi, struct vcpu_counting *c);

#endif
