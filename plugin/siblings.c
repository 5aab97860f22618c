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

/* after_python for a vCPU that is not the current one (round robin): arm its deadline; its
 * PMIs are delivered by itself at its next block entry */
static void after_python_other(unsigned vi)
{
    struct p4c_out *o = &p4.run->fold_out[vi];
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    c->deadline.py_left = o->budget > 0 ? o->budget : -1;
    int lp = (int)(vi & 1);
    c->deadline.pmi_level = o->pmi[lp] != 0;
    exact_update(vi);
    arm(vi, 0);
    for (int t = 0; t < 2; t++) {
        if (o->pmi[t] && p4.run->pmi_on) {
            unsigned target = (vi & ~1u) | (unsigned)t;
            if ((int)target < p4.n_vcpus_max && p4.run->per_vcpu[target].init) {
                __atomic_store_n(&p4.run->per_vcpu[target].ht.pmi_pending, 1, __ATOMIC_SEQ_CST);
                __atomic_store_n(&scoreboard_of(target)[SB_SIBLING_REQUEST], 1, __ATOMIC_SEQ_CST);
            }
        }
    }
}

/* vCPU vi's halted state changed: the sibling's clocks change label (ACTIVE_THREAD) */
static void sibling_relabel(unsigned vi)
{
    if (p4.run->threads != 2 || !p4.run->instrument) return;
    unsigned sib = vi ^ 1;
    if ((int)sib >= p4.n_vcpus_max || !p4.run->per_vcpu[sib].init ||
        lp_halted(&p4.run->per_vcpu[sib]))
        return;
    if (lp_same_thread(sib)) {
        fold_between_blocks(sib, &p4.run->per_vcpu[sib]);
        if (py_deadline(sib) != P4_PY_OK) p4.run->fold_out[sib].budget = 0;
        after_python_other(sib);
        return;
    }
    __atomic_store_n(&p4.run->per_vcpu[sib].ht.fold_req, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&scoreboard_of(sib)[SB_SIBLING_REQUEST], 1, __ATOMIC_SEQ_CST);
}

/* threads=2: the sibling asked for something (fold, PMI) -- block entry, before the block */
void cb_xpend(unsigned int vi, void *ud)
{
    struct vcpu *v = bridge_vcpu(vi);
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    uint32_t id = (uint32_t)(uintptr_t)ud;
    uint64_t *sb = scoreboard_of(vi);
    __atomic_store_n(&sb[SB_SIBLING_REQUEST], 0, __ATOMIC_SEQ_CST);
    if (trace_of(vi)) trace_block_entry(vi, p4.blocks->by_id[id]->vaddr);
    entry_settle(vi, c); /* the previous block's outcome, before a fold or a set_pc */
    int delivered = 0, folded = 0;
    if (c->ht.hlt_halted) {
        c->ht.hlt_halted = 0; /* running again after the HLT */
        c->ht.hlt_valid = 0;
        lp_resync(vi, &c->fold);
        sibling_relabel(vi);
    }
    if (__atomic_exchange_n(&c->ht.mask_pending, 0, __ATOMIC_SEQ_CST)) {
        /* the sibling sent our PMI while we were halted: NetBurst's mask-on-delivery */
        uint32_t lvt;
        if (apic_rd(v, APIC_LVT_PERF, &lvt)) {
            apic_wr(v, APIC_BASE + APIC_LVT_PERF, lvt | LVT_MASKED);
        }
        c->deadline.pmi_level = 1;
        __atomic_store_n(&c->ht.pmi_pending, 0, __ATOMIC_SEQ_CST);
    }
    if (__atomic_exchange_n(&c->ht.fold_req, 0, __ATOMIC_SEQ_CST)) {
        fold_at_entry(vi, c, id);
        folded = 1;
        DBG("xpend vCPU %u: fold %lld clocks (other active %d)\n", vi,
            (long long)p4.run->fold_out[vi].clocks, p4.run->fold_out[vi].other_active);
        if (py_deadline(vi) != P4_PY_OK) p4.run->fold_out[vi].budget = 0;
        delivered = after_python(vi, 0);
        __atomic_add_fetch(&c->ht.fold_seq, 1, __ATOMIC_SEQ_CST);
    }
    /* a request the sibling's step saw; delivered only if still asserted: Python writes the
     * levels of both LPs into both vCPUs' fold outputs at every step, so run.fold_out[vi].pmi is
     * the latest (this LP's own handler may have cleared OVF since -- an NMI then would find no
     * overflow: Linux's "NMI received for unknown reason") */
    if (__atomic_exchange_n(&c->ht.pmi_pending, 0, __ATOMIC_SEQ_CST) &&
        __atomic_load_n(&p4.run->fold_out[vi].pmi[vi & 1], __ATOMIC_SEQ_CST)) {
        c->deadline.pmi_level = 1;
        if (!delivered) delivered = pmi_deliver_here(vi) == 1;
        arm(vi, 0);
    }
    if (delivered) {
        /* this block does not run: a batch that was to start with it (the fold above)
         * starts with the handler's first block instead */
        c->batch.entry_b = 0;
        if (folded) c->batch.next_first = 0;
        qemu_plugin_set_pc(reg_read(v, p4.regs.rip));
    }
}

/* threads=2, before a PMU access of vCPU vi at instruction `addr`: make the sibling hand its
 * activity to the shared PMU first (it folds at its next block entry), waiting at most
 * SIBLING_WAIT_NS; a halted sibling folded before it halted.  While waiting, requests of the
 * sibling for our own activity are served (both may access at the same time). */
#define SIBLING_WAIT_NS 20000000ll

static void serve_fold_request(unsigned vi, uint64_t addr)
{
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    if (!__atomic_exchange_n(&c->ht.fold_req, 0, __ATOMIC_SEQ_CST)) return;
    int64_t rest = fold_at_access(vi, c, addr);
    if (py_deadline(vi) != P4_PY_OK) p4.run->fold_out[vi].budget = 0;
    after_python(vi, rest);
    __atomic_add_fetch(&c->ht.fold_seq, 1, __ATOMIC_SEQ_CST);
}

void sibling_sync(unsigned vi, uint64_t addr)
{
    if (p4.run->threads != 2 || !p4.run->instrument) return;
    unsigned sib = vi ^ 1;
    if ((int)sib >= p4.n_vcpus_max || !p4.run->per_vcpu[sib].init) return;
    struct vcpu_counting *s = &p4.run->per_vcpu[sib];
    serve_fold_request(vi, addr);
    if (lp_halted(s)) {
        DBG("sync vCPU %u: sibling halted\n", vi);
        return;
    }
    if (lp_same_thread(sib)) {
        /* round robin: the sibling is between blocks; fold it from here */
        fold_between_blocks(sib, s);
        if (py_deadline(sib) != P4_PY_OK) p4.run->fold_out[sib].budget = 0;
        after_python_other(sib);
        return;
    }
    uint32_t seq0 = __atomic_load_n(&s->ht.fold_seq, __ATOMIC_SEQ_CST);
    __atomic_store_n(&s->ht.fold_req, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&scoreboard_of(sib)[SB_SIBLING_REQUEST], 1, __ATOMIC_SEQ_CST);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (__atomic_load_n(&s->ht.fold_seq, __ATOMIC_SEQ_CST) != seq0 || lp_halted(s)) break;
        serve_fold_request(vi, addr);
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000000ll + (t.tv_nsec - t0.tv_nsec) > SIBLING_WAIT_NS) {
            DBG("sync vCPU %u: vCPU %u did not fold within 20 ms\n", vi, sib);
            if (!p4.run->sibling_wait_warned++) {
                p4_message("p4pmu: note: vCPU %u did not fold its activity within 20 ms "
                           "for a PMU access of its sibling (it may be blocked); reads "
                           "may miss its latest events\n",
                           sib);
            }
            break;
        }
        sched_yield();
    }
    DBG("sync vCPU %u: sibling seq %u -> %u halted %d\n", vi, seq0, s->ht.fold_seq, lp_halted(s));
}

/* threads=2: HLT -- hand this LP's activity to the shared PMU before halting, and snapshot
 * the LVT entry and APIC ID for the sibling (sibling_pmi) */
void cb_hlt(unsigned int vi, void *ud)
{
    struct vcpu *v = bridge_vcpu(vi);
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    const struct blk *b = p4.blocks->by_id[(uint32_t)(uintptr_t)ud];
    (void)b;
    uint64_t addr = (uint64_t)0;
    /* the HLT is the last instruction of its block (it ends the block in QEMU) */
    addr = b->ins[b->n - 1].addr;
    for (unsigned j = 0; j < b->n; j++) {
        if (b->ins[j].flags & CI_HLT) {
            addr = b->ins[j].addr;
            break;
        }
    }
    int64_t rest = fold_at_access(vi, c, addr);
    DBG("hlt vCPU %u: fold %lld clocks\n", vi, (long long)p4.run->fold_out[vi].clocks);
    if (py_deadline(vi) != P4_PY_OK) p4.run->fold_out[vi].budget = 0;
    after_python(vi, rest);
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
    __atomic_store_n(&scoreboard_of(vi)[SB_SIBLING_REQUEST], 1, __ATOMIC_SEQ_CST);
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
    if ((int)sib >= p4.n_vcpus_max || !p4.run->per_vcpu[sib].init ||
        lp_halted(&p4.run->per_vcpu[sib]))
        return;
    /* only a request: QEMU holds the BQL here, Python must not be called */
    __atomic_store_n(&p4.run->per_vcpu[sib].ht.fold_req, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&scoreboard_of(sib)[SB_SIBLING_REQUEST], 1, __ATOMIC_SEQ_CST);
}
