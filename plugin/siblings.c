/*
 * p4pmu: Hyper-Threading (threads=2): fold and PMI requests between sibling logical
 * processors, HLT and halted siblings (docs/guest-events.md I8; SDM Vol. 3B 18.16).  The
 * core's clock timeline is fold.c's, a PMI for a halted sibling pmi.c's.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "messages.h"
#include "siblings.h"
#include "blocks.h"
#include "counting.h"
#include "deadline.h"
#include "fold.h"
#include "pmi.h"
#include "python_calls.h"
#include "registers.h"
#include "resolve.h"
#include "trace.h"
#include "state.h"

/* vCPU sib's fold request (SB_SIBLING_REQUEST: it folds at its next block entry, cb_xpend) */
static void ask_fold(unsigned sib, struct vcpu_counting *s)
{
    __atomic_store_n(&s->ht.fold_req, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&scoreboard_of(sib)[SB_SIBLING_REQUEST], 1, __ATOMIC_SEQ_CST);
}

/* after_python for a vCPU that is not the current one (round robin): arm its deadline; its
 * PMIs are delivered by itself at its next block entry */
static void after_python_other(unsigned vi, struct vcpu_counting *c)
{
    struct p4c_out *o = &p4.run->fold_out[vi];
    c->deadline.py_left = o->budget > 0 ? o->budget : -1;
    c->deadline.pmi_level = o->pmi[vi & 1] != 0;
    exact_update(c, o);
    arm(c, 0);
    for (int t = 0; t < 2; t++) {
        if (o->pmi[t] && p4.run->pmi_on) {
            unsigned target = (vi & ~1u) | (unsigned)t;
            struct vcpu_counting *tc = vcpu_started(target);
            if (tc) {
                __atomic_store_n(&tc->ht.pmi_pending, 1, __ATOMIC_SEQ_CST);
                __atomic_store_n(&scoreboard_of(target)[SB_SIBLING_REQUEST], 1, __ATOMIC_SEQ_CST);
            }
        }
    }
}

/* round robin: the sibling sib is between two of its blocks; fold its activity and step its
 * PMU from here */
static void step_between_blocks(unsigned sib, struct vcpu_counting *s)
{
    fold_between_blocks(sib, s);
    if (py_deadline(sib) != P4_PY_OK) p4.run->fold_out[sib].budget = 0;
    after_python_other(sib, s);
}

/* vCPU vi's halted state changed: the sibling's clocks change label (ACTIVE_THREAD) */
static void sibling_relabel(unsigned vi)
{
    if (p4.run->threads != 2 || !p4.run->instrument) return;
    unsigned sib = vi ^ 1;
    struct vcpu_counting *s = vcpu_started(sib);
    if (!s || lp_halted(s)) return;
    if (lp_same_thread(sib)) {
        step_between_blocks(sib, s);
        return;
    }
    ask_fold(sib, s);
}

/* running again after its HLT (cb_hlt) */
static void running_after_hlt(unsigned vi, struct vcpu_counting *c)
{
    c->ht.hlt_halted = 0;
    c->ht.hlt_valid = 0;
    lp_resync(vi, &c->fold);
    sibling_relabel(vi);
}

/* the sibling sent our PMI while we were halted (pmi.c sibling_pmi): NetBurst's
 * mask-on-delivery */
static void mask_on_delivery(struct vcpu *v, struct vcpu_counting *c)
{
    if (!__atomic_exchange_n(&c->ht.mask_pending, 0, __ATOMIC_SEQ_CST)) return;
    uint32_t lvt;
    if (apic_rd(v, APIC_LVT_PERF, &lvt)) {
        apic_wr(v, APIC_BASE + APIC_LVT_PERF, lvt | LVT_MASKED);
    }
    c->deadline.pmi_level = 1;
    __atomic_store_n(&c->ht.pmi_pending, 0, __ATOMIC_SEQ_CST);
}

/* the sibling asked for this vCPU's activity: fold at the entry of block id and step.
 * Returns 1 if an interrupt was delivered. */
static int fold_for_sibling(unsigned vi, struct vcpu_counting *c, uint32_t id)
{
    fold_at_entry(vi, c, id);
    DBG("xpend vCPU %u: fold %lld clocks (other active %d)\n", vi,
        (long long)p4.run->fold_out[vi].clocks, p4.run->fold_out[vi].other_active);
    if (py_deadline(vi) != P4_PY_OK) p4.run->fold_out[vi].budget = 0;
    int delivered = after_python(vi, c, 0);
    __atomic_add_fetch(&c->ht.fold_seq, 1, __ATOMIC_SEQ_CST);
    return delivered;
}

/* a PMI request the sibling's step saw; delivered only if still asserted: Python writes the
 * levels of both LPs into both vCPUs' fold outputs at every step, so p4.run->fold_out[vi].pmi
 * is the latest (this LP's own handler may have cleared OVF since -- an NMI then would find
 * no overflow: Linux's "NMI received for unknown reason").  Returns 1 if an interrupt was
 * delivered, here or before (`delivered`). */
static int sibling_pmi_request(unsigned vi, struct vcpu_counting *c, int delivered)
{
    if (!__atomic_exchange_n(&c->ht.pmi_pending, 0, __ATOMIC_SEQ_CST) ||
        !__atomic_load_n(&p4.run->fold_out[vi].pmi[vi & 1], __ATOMIC_SEQ_CST))
        return delivered;
    c->deadline.pmi_level = 1;
    if (!delivered) delivered = pmi_deliver_here(vi) == 1;
    arm(c, 0);
    return delivered;
}

/* how long an LP waits for its sibling: to fold for its PMU access, or to end one */
#define SIBLING_WAIT_NS 20000000ll

static int64_t ns_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000000000ll + (t.tv_nsec - t0->tv_nsec);
}

/* A PMU access is a point where the core's two LPs meet (docs/guest-events.md I8): having
 * folded for the sibling's access, this LP waits at its block entry until the access is done
 * (at most SIBLING_WAIT_NS), so that it runs no clocks during the host time of the access,
 * then joins the core's clock. */
static void hold_for_sibling_access(unsigned vi, struct vcpu_counting *c)
{
    struct vcpu_counting *s = vcpu_started(vi ^ 1);
    if (s && __atomic_load_n(&s->ht.in_access, __ATOMIC_SEQ_CST)) {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (__atomic_load_n(&s->ht.in_access, __ATOMIC_SEQ_CST) &&
               ns_since(&t0) <= SIBLING_WAIT_NS)
            sched_yield();
    }
    lp_resync(vi, &c->fold);
}

/* threads=2: the sibling asked for something (fold, PMI) -- block entry, before the block */
void cb_xpend(unsigned int vi, void *ud)
{
    struct vcpu *v = bridge_vcpu(vi);
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    uint32_t id = (uint32_t)(uintptr_t)ud;
    __atomic_store_n(&c->sbase[SB_SIBLING_REQUEST], 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&c->ht.in_access, 0, __ATOMIC_SEQ_CST); /* (sibling_access_done) */
    if (trace_of(vi)) trace_block_entry(vi, c, p4.blocks->by_id[id]->vaddr);
    entry_settle(vi, c); /* the previous block's outcome, before a fold or a set_pc */
    if (c->ht.hlt_halted) running_after_hlt(vi, c);
    mask_on_delivery(v, c);
    int folded = __atomic_exchange_n(&c->ht.fold_req, 0, __ATOMIC_SEQ_CST) != 0;
    int delivered = folded ? fold_for_sibling(vi, c, id) : 0;
    delivered = sibling_pmi_request(vi, c, delivered);
    if (folded) hold_for_sibling_access(vi, c);
    if (delivered) {
        /* this block does not run: a batch that was to start with it (the fold above)
         * starts with the handler's first block instead */
        c->batch.entry_b = 0;
        if (folded) c->batch.next_first = 0;
        qemu_plugin_set_pc(reg_read(v, p4.regs.rip));
    }
}

static void serve_fold_request(unsigned vi, struct vcpu_counting *c, uint64_t addr)
{
    if (!__atomic_exchange_n(&c->ht.fold_req, 0, __ATOMIC_SEQ_CST)) return;
    int64_t rest = fold_at_access(vi, c, addr);
    if (py_deadline(vi) != P4_PY_OK) p4.run->fold_out[vi].budget = 0;
    after_python(vi, c, rest);
    __atomic_add_fetch(&c->ht.fold_seq, 1, __ATOMIC_SEQ_CST);
}

/* until the sibling s folded (its fold_seq moved on from seq0) or halted, at most
 * SIBLING_WAIT_NS */
static void wait_for_sibling(unsigned vi, struct vcpu_counting *c, struct vcpu_counting *s,
                             uint32_t seq0, uint64_t addr)
{
    unsigned sib = vi ^ 1;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (__atomic_load_n(&s->ht.fold_seq, __ATOMIC_SEQ_CST) != seq0 || lp_halted(s)) break;
        serve_fold_request(vi, c, addr);
        if (ns_since(&t0) > SIBLING_WAIT_NS) {
            DBG("sync vCPU %u: vCPU %u did not fold within 20 ms\n", vi, sib);
            if (!p4.run->sibling_wait_warned++) {
                p4_message("p4pmu: warning: vCPU %u did not fold its activity within 20 ms "
                           "for a PMU access of its sibling (it may be blocked); reads "
                           "may miss its latest events\n",
                           sib);
            }
            break;
        }
        sched_yield();
    }
}

/* threads=2, before a PMU access of vCPU vi at instruction `addr`: make the sibling hand its
 * activity to the shared PMU first (it folds at its next block entry and then waits for the
 * access to end: hold_for_sibling_access), waiting at most SIBLING_WAIT_NS; a halted sibling
 * folded before it halted.  While waiting, requests of the sibling for our own activity are
 * served (both may access at the same time). */
void sibling_sync(unsigned vi, struct vcpu_counting *c, uint64_t addr)
{
    if (p4.run->threads != 2 || !p4.run->instrument) return;
    unsigned sib = vi ^ 1;
    struct vcpu_counting *s = vcpu_started(sib);
    if (!s) return;
    __atomic_store_n(&c->ht.in_access, 1, __ATOMIC_SEQ_CST);
    serve_fold_request(vi, c, addr);
    if (lp_halted(s)) {
        DBG("sync vCPU %u: sibling halted\n", vi);
        return;
    }
    if (lp_same_thread(sib)) {
        step_between_blocks(sib, s);
        return;
    }
    uint32_t seq0 = __atomic_load_n(&s->ht.fold_seq, __ATOMIC_SEQ_CST);
    ask_fold(sib, s);
    wait_for_sibling(vi, c, s, seq0, addr);
    DBG("sync vCPU %u: sibling seq %u -> %u halted %d\n", vi, seq0, s->ht.fold_seq, lp_halted(s));
}

/* threads=2, the PMU access of vCPU vi is done: this LP joins the core's clock (the sibling's
 * clocks before the access are on it).  The sibling, held at its block entry, runs on from
 * this LP's next block entry (cb_xpend), so that it gains no clocks while this one finishes
 * its block or translates the next (an access's neighbours: the next WRMSR of a sequence);
 * at once when `now` (a breakpoint can stop this vCPU here). */
void sibling_access_done(unsigned vi, struct vcpu_counting *c, int now)
{
    if (p4.run->threads != 2) return;
    if (now || !__atomic_load_n(&c->ht.in_access, __ATOMIC_SEQ_CST)) {
        __atomic_store_n(&c->ht.in_access, 0, __ATOMIC_SEQ_CST);
    } else {
        __atomic_store_n(&c->sbase[SB_SIBLING_REQUEST], 1, __ATOMIC_SEQ_CST);
    }
    lp_resync(vi, &c->fold);
}

/* the HLT's address in block b (the last instruction: an HLT ends its block in QEMU) */
static uint64_t hlt_addr(const struct blk *b)
{
    for (unsigned j = 0; j < b->n; j++) {
        if (b->ins[j].flags & CI_HLT) return b->ins[j].addr;
    }
    return b->ins[b->n - 1].addr;
}

/* threads=2: HLT -- hand this LP's activity to the shared PMU before halting, and snapshot
 * the LVT entry and APIC ID for the sibling (sibling_pmi) */
void cb_hlt(unsigned int vi, void *ud)
{
    struct vcpu *v = bridge_vcpu(vi);
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    const struct blk *b = p4.blocks->by_id[(uint32_t)(uintptr_t)ud];
    int64_t rest = fold_at_access(vi, c, hlt_addr(b));
    DBG("hlt vCPU %u: fold %lld clocks\n", vi, (long long)p4.run->fold_out[vi].clocks);
    if (py_deadline(vi) != P4_PY_OK) p4.run->fold_out[vi].budget = 0;
    after_python(vi, c, rest);
    __atomic_store_n(&c->ht.fold_req, 0, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&c->ht.fold_seq, 1, __ATOMIC_SEQ_CST);
    uint32_t lvt, id;
    if (apic_rd(v, APIC_LVT_PERF, &lvt) && apic_rd(v, APIC_ID_REG, &id)) {
        c->ht.hlt_lvt = lvt;
        c->ht.hlt_apic = id;
        c->ht.hlt_valid = 1;
    }
    c->ht.hlt_halted = 1;
    /* cleared at the next entry */
    __atomic_store_n(&c->sbase[SB_SIBLING_REQUEST], 1, __ATOMIC_SEQ_CST);
    sibling_relabel(vi);
}

/* threads=2: vCPU vi halted (1) or resumed (0): the sibling's clocks change label
 * (ACTIVE_THREAD), so it folds at its next block entry.  C only (QEMU holds the BQL). */
void counting_halt_change(unsigned vi, int halted)
{
    if (!p4.run->per_vcpu || vi >= (unsigned)p4.n_vcpus_max) return;
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    c->ht.halted = halted;
    DBG("vCPU %u %s\n", vi, halted ? "idle" : "resumes");
    if (!halted) {
        c->ht.hlt_valid = 0;
        lp_resync(vi, &c->fold); /* (on this vCPU's thread, before it runs again) */
    }
    if (p4.run->threads != 2 || !p4.run->instrument) return;
    unsigned sib = vi ^ 1;
    struct vcpu_counting *s = vcpu_started(sib);
    if (!s || lp_halted(s)) return;
    /* only a request: QEMU holds the BQL here, Python must not be called */
    ask_fold(sib, s);
}
