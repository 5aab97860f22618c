/*
 * classify.h: what classify.c offers to the other units. classify.c: classification of
 * decoded x86 instructions with Capstone 5 into the clock model's per-instruction fields
 * (insn_classes._classify_one and _build; table generated into p4_tables.h)
 * (docs/guest-events.md).
 */
#ifndef P4PMU_CLASSIFY_H
#define P4PMU_CLASSIFY_H

#include <capstone/capstone.h>

#include "counting_types.h"

/* the rows of core `core` (insn_classes.CORES index; CpuModel.core) */
/* Capstone instruction id -> the table row (by name), per SSE-ness; the measured uops of
 * the run's core per form, and its REP uops (base, per iteration in tenths) */
struct insn_table {
    struct p4_row *rows[2];
    unsigned short (*uops)[P4_NFORMS];
    unsigned short (*rep)[2];
    unsigned short (*timing)[2]; /* result latency, stall (timing.table_timing) */
    unsigned n_ids;
    unsigned char regbit[X86_REG_ENDING]; /* Capstone register id -> tracked bit + 1, 0 */
    unsigned l1_load, lock;               /* the core's (timing.CoreTiming) */
    unsigned cmp_id[4];       /* cmpps cmppd cmpss cmpsd (insn_classes.sse_compare_name) */
    unsigned char *sse_row;   /* id -> p4_sse_inputs row + 1, 0 (fp_assist.SSE_DENORMAL_INPUTS) */
    unsigned char *x87_load;  /* id -> 1: in p4_x87_denormal_loads (fp_assist.X87_DENORMAL_LOADS) */
    unsigned char *x87_store; /* id -> 1: in p4_x87_denormal_stores (X87_DENORMAL_STORES) */
};

int cs_setup(unsigned core);
cs_insn *cs_get(int mi, csh *hp);
void classify_insn(csh h, const cs_insn *ci, uint64_t addr, struct insn_info *o);
void classify_unknown(uint64_t addr, unsigned len, struct insn_info *o);

#endif
