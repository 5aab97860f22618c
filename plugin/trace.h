/*
 * trace.h: what trace.c offers to the other units. trace.c: the C half of the access trace
 * (docs/trace.md) -- the time and place of the PMU access being served, and the records of
 * what C did without Python (accesses the mirror served, overflows it found, interrupts sent,
 * privileged accesses QEMU faults), kept per vCPU until Python's trace writer reads them.
 */
#ifndef P4PMU_TRACE_H
#define P4PMU_TRACE_H

#include <stdint.h>

#include "p4c_api.h"
#include "registers.h"
#include "state.h"

struct vcpu_counting; /* counting.h */

/* per run: set once at install */
struct trace_run {
    struct p4c_trace *per_vcpu; /* [max_vcpus] */
};

int trace_setup(int max_vcpus);

/* vCPU vi's trace state while a trace or log is written, else NULL */
static inline struct p4c_trace *trace_of(unsigned vi)
{
    struct p4c_trace *t = p4.trace->per_vcpu ? &p4.trace->per_vcpu[vi] : 0;
    return t && t->on ? t : 0;
}

/* The access at guest address `linear` (CPL `cpl`) is about to be served: note its time (c:
 * the vCPU's counting state). */
void trace_access(unsigned vi, const struct vcpu_counting *c, uint64_t linear, int cpl);
/* A record at the current access's time and place (ops: P4_TR_* in p4c_api.h). */
void trace_record(unsigned vi, uint32_t op, uint32_t reg, uint64_t value, uint64_t old,
                  uint32_t flags);
/* A PMU access QEMU faults for its privilege level (op 1 RDMSR, 2 WRMSR, 3 RDPMC without
 * CR4.PCE): recorded with its place; its clk is the last fold's. */
static inline void trace_privileged(unsigned vi, struct vcpu *v, const struct vcpu_counting *c,
                                    uint64_t linear, uint32_t reg, int op)
{
    if (!trace_of(vi)) return;
    trace_access(vi, c, linear, current_cpl(v));
    trace_record(vi, P4_TR_PRIV, reg, (uint64_t)op, 0, 0);
}

/* At the entry of the block at `pc`, before its inline operations (a deadline, a sibling's
 * request): what C or Python records now happened here. */
void trace_block_entry(unsigned vi, const struct vcpu_counting *c, uint64_t pc);

/* the mirror must let Python write the records first */
static inline int trace_full(unsigned vi)
{
    struct p4c_trace *t = trace_of(vi);
    return t && t->n >= P4_TRACE_RECS;
}

#endif
