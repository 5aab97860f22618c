/*
 * p4pmu: the C half of the access trace (docs/trace.md).  The time of an access is the
 * vCPU's instructions of the block executions so far (folded ones, c->fold.insn_total, and
 * the executions counted since the last fold) less the rest of the current block, and its
 * clocks folded so far (c->fold.clk_total); the records of what C did without Python
 * wait in struct p4c_trace until Python's trace writer (plugin/trace_writer.py) reads them at
 * its next call.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "messages.h"
#include "trace.h"
#include "blocks.h"
#include "counting.h"
#include "registers.h"
#include "state.h"


int trace_setup(int max_vcpus)
{
    p4.trace->per_vcpu = calloc((size_t)max_vcpus, sizeof(*p4.trace->per_vcpu));
    if (!p4.trace->per_vcpu) {
        p4_message("p4pmu: out of memory for %d vCPUs' trace records\n", max_vcpus);
        return -1;
    }
    return 0;
}

/* instructions of the vCPU's block executions so far: folded, and counted since the fold */
static uint64_t insns_now(const struct vcpu_counting *c)
{
    uint64_t n = c->fold.insn_total;
    for (uint32_t i = 0; i < c->batch.ndirty; i++) {
        const struct blk *b = p4.blocks->by_id[c->batch.dirty[i]];
        n += en_total(c, c->batch.dirty[i]) * b->n;
    }
    return n;
}

/* ... less those of the current block from the one at `linear` on (its execution was counted
 * at its entry) */
static uint64_t insns_before(const struct vcpu_counting *c, uint64_t linear)
{
    uint64_t n = insns_now(c);
    uint32_t id = (uint32_t)c->sbase[SB_CURRENT_BLOCK];
    const struct blk *b = id ? p4.blocks->by_id[id] : NULL;
    int i = b ? find_insn(b, linear) : -1;
    if (i >= 0 && n >= b->n - (unsigned)i) n -= b->n - (unsigned)i;
    return n;
}

void trace_access(unsigned vi, const struct vcpu_counting *c, uint64_t linear, int cpl)
{
    struct p4c_trace *t = trace_of(vi);
    if (!t) return;
    t->pc = linear;
    t->cpl = (uint32_t)cpl;
    t->timed = p4.run->instrument;
    t->insns = t->timed ? insns_before(c, linear) : 0;
    t->clk = p4.run->instrument ? c->fold.clk_total : 0;
}

void trace_record(unsigned vi, uint32_t op, uint32_t reg, uint64_t value, uint64_t old,
                  uint32_t flags)
{
    struct p4c_trace *t = trace_of(vi);
    if (!t) return;
    if (t->n >= P4_TRACE_RECS) {
        t->dropped++;
        return;
    }
    struct p4c_trec *r = &t->rec[t->n++];
    r->op = op;
    r->reg = reg;
    r->value = value;
    r->old = old;
    r->flags = flags;
    r->pc = t->pc;
    r->cpl = t->cpl;
    r->insns = t->insns;
    r->clk = t->clk;
}

void trace_block_entry(unsigned vi, const struct vcpu_counting *c, uint64_t pc)
{
    struct p4c_trace *t = trace_of(vi);
    if (!t) return;
    t->pc = pc;
    t->cpl = (uint32_t)current_cpl(bridge_vcpu(vi));
    t->timed = p4.run->instrument;
    /* the block's execution counter has not counted it yet (callbacks run in registration
     * order: cb_sched before the inline add) */
    t->insns = t->timed ? insns_now(c) : 0;
    t->clk = p4.run->instrument ? c->fold.clk_total : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Functions Python calls (declared with ffi.cdef in build.py)                               */
/* ---------------------------------------------------------------------------------------- */

struct p4c_trace *p4c_trace(unsigned vi)
{
    return &p4.trace->per_vcpu[vi];
}
