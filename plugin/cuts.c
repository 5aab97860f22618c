/*
 * p4pmu: block executions that stop early: exceptions, interrupts, executions QEMU abandons
 * at MMIO accesses, the bridge's qemu_plugin_set_pc (docs/guest-events.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "cuts.h"
#include "batch.h"
#include "blocks.h"
#include "counting.h"
#include "kinds.h"
#include "memory.h"
#include "registers.h"
#include "resolve.h"
#include "state.h"

/* start index of the open execution of block id in the current batch, and whether it is
 * represented by the block's counter (else by a credited portion) */
unsigned open_start(const struct vcpu_counting *c, uint32_t id)
{
    if (c->batch.open_b == id && c->batch.open_stamp == en_total(c, id)) {
        return c->batch.open_a;
    }
    return 0;
}

/* The return to user code after an exception taken from it (clockmodel.RETURN_TAIL): one
 * user-level clock right after the clock `last` (ext + 1: the end of the execution the
 * exception stopped or followed), which it replaces as that execution's end.  Without such a
 * clock in the batch (0) it is not counted. */
static void append_return_tail(struct vcpu_counting *c, uint32_t last)
{
    if (!last) return;
    uint32_t t = ext(kind_with_return_tail(p4.kinds->empty), 0);
    acc_add(&c->batch, t, 1);
    pair_hash_add(&c->batch.pairs, last - 1, t, 1);
    acc_last_add(&c->batch, last - 1, -1);
    acc_last_add(&c->batch, t, 1);
    c->batch.cut_last = t + 1;
    c->sbase[SB_DEADLINE_CLOCKS] += 1;
    if (c->exact.on) c->sbase[SB_EXACT_EVENTS] += (uint64_t)exact_increment(&p4.exact->sig, t, 1);
}

/* The execution of block `id` stops after instruction e-1 (instructions e.. do not retire in
 * it); `pending`: its outcome was still to come (so it has none now, not even a silent one);
 * `tail`: an exception taken from user code, whose return silicon counts after its last
 * clock (clockmodel.RETURN_TAIL).  Called on the vCPU's thread (exception callback,
 * abandoned blocks). */
static void cut_exec(unsigned vi, struct vcpu_counting *c, uint32_t id, unsigned e, int pending,
                     int tail)
{
    uint64_t *sb = c->sbase;
    const struct blk *b = p4.blocks->by_id[id];
    if (e >= b->n) return;
    mem_cut(c, id); /* (before the portions: the fixes are of whole-execution clocks) */
    unsigned a = open_start(c, id);
    if (e < pos_insn(a)) e = pos_insn(a);
    acc_portion(&c->batch, b, a, b->n, !dyn_end(b), -1);
    acc_portion(&c->batch, b, a, e, 1, +1);
    const uint32_t *s;
    unsigned n = portion_seq(b, a, e, &s);
    c->batch.cut_last = n ? ext(s[n - 1], b->os) + 1 : 0;
    if (a) {
        /* the rest of an execution split by an access began this batch: it now begins with
         * what retired of it, or (nothing did: the access instruction faulted) with the
         * next block execution, found at the fold */
        c->batch.next_first = n ? ext(s[0], b->os) + 1 : 0;
        c->batch.next_first_bubble = 0;
    }
    if (pending && b->end == BRK_COND) {
        b->res[vi].acc++; /* this execution has no outcome (not a silent one either) */
    }
    sb[SB_SILENT_NEXT] = X_ACCOUNTED;
    sb[SB_CURRENT_BLOCK] = 0;
    c->batch.open_b = 0;
    c->batch.entry_b = 0;
    if (tail) append_return_tail(c, c->batch.cut_last);
}

static void counting_cut(unsigned vi, struct vcpu_counting *c, uint32_t id, unsigned e, int tail)
{
    cut_exec(vi, c, id, e, c->sbase[SB_SILENT_NEXT] != X_ACCOUNTED, tail);
}

/* Block `id`, whose outcome was pending, was abandoned before its instruction j
 * (blocks.c abandoned_insn): its execution is cut there. */
void cut_abandoned(unsigned vi, struct vcpu_counting *c, uint32_t id, unsigned j)
{
    cut_exec(vi, c, id, j, 1, 0);
}

/* Was block `id`, whose outcome was pending, abandoned before `a`?  Cut it there if so. */
static int abandoned_at(unsigned vi, struct vcpu_counting *c, uint32_t id, uint64_t a)
{
    int j = abandoned_insn(p4.blocks->by_id[id], a);
    if (j) cut_abandoned(vi, c, id, (unsigned)j);
    return j != 0;
}

/* The end (ext + 1) of the execution of block id (0: none) that ran last and completed, as a
 * fold takes it (0: not known) */
static uint32_t last_end(struct vcpu_counting *c, uint32_t id)
{
    if (!id) return c->batch.cut_last;
    const struct blk *b = p4.blocks->by_id[id];
    if (!dyn_end(b)) return ext(mem_last_kind(c, id, b), b->os) + 1;
    if (c->res.b != id) return 0;
    res_fill(c);
    return c->res.last;
}

/* A discontinuity at `from`: an exception (`interrupt` = 0) is noted; a hardware interrupt (1)
 * with the address of the exception seen last is its delivery.  QEMU 11.1 calls the exception
 * callback when an exception is raised and then the interrupt callback when it delivers it,
 * with the same address: that exception was accounted when it was raised (its block cut, or
 * complete when its last instruction traps: INT n, a served RDPMC); this is no interrupt
 * between blocks.  (Taken as one, a trapping last instruction was cut as if QEMU had left its
 * block there.)  Returns 1 for such a delivery. */
static int exception_delivered(struct cuts_vcpu *cut, uint64_t from, int interrupt)
{
    if (!interrupt) {
        cut->exc_from = from;
        cut->exc_seen = 1;
        return 0;
    }
    if (!cut->exc_seen) return 0;
    cut->exc_seen = 0;
    return from == cut->exc_from;
}

/* An exception raised in user code before any instruction of its block ran (an instruction
 * fetch's page fault): its return follows the execution that ran last (block id's, or a cut
 * one's) */
static void fault_before_block(struct vcpu_counting *c, uint32_t id)
{
    append_return_tail(c, last_end(c, id));
    c->sbase[SB_CURRENT_BLOCK] = 0;
    c->sbase[SB_SILENT_NEXT] = X_ACCOUNTED;
    c->batch.open_b = 0;
    c->batch.entry_b = 0;
}

/* An exception (`interrupt` = 0) or a hardware interrupt (1) at linear address `from`;
 * `retires`: the instruction there completes (INT n, our emulated RDPMC).  A hardware
 * interrupt is taken between blocks: the block that ran last completed, and its pending end
 * goes to `from`.  An exception is raised inside the current block (whose entry operations
 * ran): its execution stops there. */
void counting_discon(unsigned vi, struct vcpu *v, uint64_t from, int retires, int interrupt)
{
    if (!p4.run->instrument || !p4.run->per_vcpu || !p4.run->per_vcpu[vi].init) return;
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    uint64_t *sb = c->sbase;
    uint32_t id = (uint32_t)sb[SB_CURRENT_BLOCK];
    const struct blk *b = id ? p4.blocks->by_id[id] : NULL;
    if (exception_delivered(&c->cut, from, interrupt)) return;
    /* an exception at an instruction of the current block: it is inside it (the block's
     * entry operations ran); a hardware interrupt is taken between blocks.  A block whose
     * outcome is still to come has not finished, so the exception is inside it even when it
     * runs at another virtual address than the one it was translated at (QEMU shares x86
     * blocks across mappings of the same code, CF_PCREL): find_insn_in */
    int j = b && !interrupt ? find_insn(b, from) : -1;
    if (j < 0 && b && !interrupt && dyn_end(b) && cur_pending(c, id)) j = find_insn_in(b, from);
    if (j >= 0) {
        if (!retires && b->ins[j].br == BRK_FAR) {
            retires = 1; /* INT n, INT3, INTO, SYSCALL: trap-like, they complete */
        }
        /* a fault in user code: its return is counted there (clockmodel.RETURN_TAIL) */
        int tail = !retires && !b->os;
        counting_cut(vi, c, id, (unsigned)j + (retires ? 1 : 0), tail);
        return;
    }
    /* not inside the current block: the block that ended before completed; its outcome,
     * if still pending (even a silent one: the next block has not started), goes to
     * `from` -- unless QEMU left it in the middle (abandoned_at) */
    if (b && sb[SB_SILENT_NEXT] != X_ACCOUNTED && interrupt && abandoned_at(vi, c, id, from))
        return;
    if (b && dyn_end(b) && sb[SB_SILENT_NEXT] != X_ACCOUNTED) {
        sb[SB_SILENT_NEXT] = X_ACCOUNTED;
        resolve(vi, c, id, from, 1);
    }
    if (!interrupt && !retires && current_cpl(v) != 0) fault_before_block(c, id);
}

/* The bridge leaves the current block at instruction address `addr` (qemu_plugin_set_pc):
 * that instruction retired (`retired`) or not, the rest of the block does not run. */
void counting_abandon(int vi, uint64_t addr, int retired)
{
    if (vi < 0 || !p4.run->instrument || !p4.run->per_vcpu || !p4.run->per_vcpu[vi].init) return;
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    uint32_t id = (uint32_t)c->sbase[SB_CURRENT_BLOCK];
    if (!id) return;
    int j = find_insn(p4.blocks->by_id[id], addr);
    if (j < 0) return;
    counting_cut((unsigned)vi, c, id, (unsigned)j + (retired ? 1 : 0), 0);
}

/* A memory access of the one instruction of block `ud` (outcome-free level).  A block's entry
 * operations run before its instruction, so SB_CURRENT_BLOCK is the block itself -- unless this
 * is the CF_MEMI_ONLY block QEMU runs to re-execute an MMIO access it left another block at (the
 * plugin sees its translation and its memory callbacks, not its entry operations): then the
 * block in SB_CURRENT_BLOCK stopped at this instruction, which retires here
 * (docs/guest-events.md, "Execution abandoned by QEMU"; at the full level the successor's X
 * check finds it). */
void cb_memi(unsigned int vi, uint32_t info, uint64_t vaddr, void *ud)
{
    (void)info;
    (void)vaddr;
    uint32_t self = (uint32_t)(uintptr_t)ud;
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    uint64_t *sb = c->sbase;
    uint32_t cur = (uint32_t)sb[SB_CURRENT_BLOCK];
    if (!cur || cur == self) return;
    int j = find_insn(p4.blocks->by_id[cur], p4.blocks->by_id[self]->vaddr);
    if (j < 0) return;
    c->cut.memi_cuts++;
    cut_exec(vi, c, cur, (unsigned)j + 1, sb[SB_SILENT_NEXT] != X_ACCOUNTED, 0);
}
