/*
 * p4pmu: interception of the guest's accesses to the NetBurst PMU (RDMSR/WRMSR of 300h-3FFh,
 * RDMSR of IA32_MISC_ENABLE, RDPMC) in a QEMU 11.1 TCG plugin (API v7); the accesses go to
 * the register mirror (mirror.c) or to the Python emulator inside QEMU (plugin/bridge.py).
 *
 * How it works (details and the reasons in docs/bridge.md):
 *
 * - Translation time: every instruction of a new block is decoded from its bytes; only
 *   0F 30 (WRMSR), 0F 32 (RDMSR) and 0F 33 (RDPMC) with legal prefixes get execution
 *   callbacks.  Blocks without them get nothing, so they run at full speed.
 * - RDMSR: a callback before the instruction (ECX in 300h-3FFh, CPL 0) asks Python; QEMU then
 *   executes the RDMSR itself (it reads 0 for these MSRs) and a callback on the next
 *   instruction, or an "entry hook" on the next block when the RDMSR ends its block, writes
 *   EDX:EAX.  QEMU's own flag state is never disturbed.  ECX = 1A0h: QEMU's value is patched
 *   with pmu.misc_enable().
 * - WRMSR: Python validates and applies the write before the instruction; QEMU then executes
 *   it (and drops it).
 * - #GP from the model: ECX is pointed at an x2APIC MSR (800h), which QEMU rejects with #GP
 *   after restoring the exact guest state; the exception (discontinuity) callback, which QEMU
 *   calls before it delivers the exception, puts the guest's ECX back.
 * - RDPMC (QEMU always raises #UD): first instruction of its block -> EDX:EAX written and the
 *   instruction skipped with qemu_plugin_set_pc() (EFLAGS are in sync at a block start).
 *   Anywhere else -> QEMU raises #UD, which synchronises the lazy flags; the exception
 *   callback writes EDX:EAX and changes IOPL/AC so that the #UD handler's first block is
 *   translated afresh; that block gets an entry hook which undoes the exception frame
 *   (stack pointer, segments, EFLAGS, stack bytes) and resumes after the RDPMC.
 * - RDPMC #GP (bad index): CPL > 0 -> CR4.PCE is cleared for the instruction so that QEMU
 *   raises #GP itself; CPL 0 -> the instruction bytes are briefly replaced by WRMSR with ECX =
 *   800h (see fault_by_patch()).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "messages.h"
#include "intercept.h"
#include "access_times.h"
#include "control.h"
#include "counting.h"
#include "cuts.h"
#include "deadline.h"
#include "fold.h"
#include "mirror.h"
#include "python_calls.h"
#include "registers.h"
#include "siblings.h"
#include "trace.h"
#include "translate.h"
#include "state.h"


/* RDPMC #UD round trips under way on this thread's vCPU: while there are any, every block
 * translated gets the entry hook (the #UD handler, and whatever an interrupt runs first) */
static __thread int tl_ud_pending;

/*
 * Two back-to-back WRMSRs of one counter with different values: the second of a driver's two
 * counter writes (erratum N15's work-around) installs another value than the first.  Linux
 * 6.1's p4_pmu_set_period does this (the previous period; docs/linux-guest.md): Python says
 * so once.  Plain bookkeeping, per PMU access: never on the execution hot path.
 */
static void watch_counter_write(unsigned vi, struct vcpu *v, uint32_t msr, uint64_t value)
{
    if (msr < PMU_COUNTER_FIRST || msr > PMU_COUNTER_LAST) {
        v->last_counter_write = 0;
        return;
    }
    if (v->last_counter_write == msr && v->last_counter_value != value && !v->rewrite_reported) {
        v->rewrite_reported = 1;
        py_thread_ready();
        p4pmu_py_counter_rewritten(vi, msr, v->last_counter_value, value);
    }
    v->last_counter_write = msr;
    v->last_counter_value = value;
}

/* the scoreboard of pending records (at installation) */
void intercept_setup(void)
{
    p4.intercept->pending.scoreboard = qemu_plugin_scoreboard_new(sizeof(uint64_t));
    p4.intercept->pending.entry.score = p4.intercept->pending.scoreboard;
    p4.intercept->pending.entry.offset = 0;
}

void set_npending(unsigned int vi, struct vcpu *v)
{
    uint64_t *p = qemu_plugin_scoreboard_find(p4.intercept->pending.scoreboard, vi);
    *p = (uint64_t)v->nrec;
}

static void *pack_site(uint64_t linear, unsigned len, int kind, int first, int last)
{
    uint64_t x = (linear & 0xFFFFFFFFFFFFull) | ((uint64_t)(len & 15) << 48) |
                 ((uint64_t)kind << 52) | ((uint64_t)(first != 0) << 54) |
                 ((uint64_t)(last != 0) << 55);
    return (void *)(uintptr_t)x;
}

struct site {
    uint64_t linear;
    unsigned len;
    int kind, first, last;
};

static struct site unpack_site(void *ud)
{
    uint64_t x = (uint64_t)(uintptr_t)ud;
    struct site s;
    s.linear = x & 0xFFFFFFFFFFFFull;
    if (s.linear & (1ull << 47)) {
        s.linear |= 0xFFFF000000000000ull;
    }
    s.len = (unsigned)((x >> 48) & 15);
    s.kind = (int)((x >> 52) & 3);
    s.first = (int)((x >> 54) & 1);
    s.last = (int)((x >> 55) & 1);
    return s;
}


/* The interception's state, no hook and no record pending */
struct intercept_state *intercept_state_new(void)
{
    struct intercept_state *s = calloc(1, sizeof(*s));
    if (s) pthread_mutex_init(&s->hooks.lock, NULL);
    return s;
}

static int hook_has_locked(uint64_t a)
{
    uint64_t k = a + 1;
    for (unsigned i = (unsigned)((k * 0x9E3779B97F4A7C15ull) >> 51), n = 0; n < HOOK_SLOTS;
         i = (i + 1) & (HOOK_SLOTS - 1), n++) {
        if (p4.intercept->hooks.key[i] == k) {
            return 1;
        }
        if (!p4.intercept->hooks.key[i]) {
            return 0;
        }
    }
    return 0;
}

static int hook_has(uint64_t a)
{
    pthread_mutex_lock(&p4.intercept->hooks.lock);
    int r = p4.intercept->hooks.count ? hook_has_locked(a) : 0;
    pthread_mutex_unlock(&p4.intercept->hooks.lock);
    return r;
}

/* Returns 1 if the address was new. */
static int hook_add(uint64_t a)
{
    int added = 0;
    uint64_t k = a + 1;
    pthread_mutex_lock(&p4.intercept->hooks.lock);
    if (!hook_has_locked(a) && p4.intercept->hooks.count < HOOK_SLOTS * 3 / 4) {
        unsigned i = (unsigned)((k * 0x9E3779B97F4A7C15ull) >> 51);
        while (p4.intercept->hooks.key[i]) {
            i = (i + 1) & (HOOK_SLOTS - 1);
        }
        p4.intercept->hooks.key[i] = k;
        p4.intercept->hooks.count++;
        added = 1;
    }
    pthread_mutex_unlock(&p4.intercept->hooks.lock);
    return added;
}

/*
 * Make sure the block starting at `a` carries the entry hook: new addresses are added to the
 * set and any block already translated there is invalidated by writing one byte of guest
 * memory back unchanged (QEMU drops translated code on writes).
 */
static void ensure_hook(struct vcpu *v, uint64_t a)
{
    if (hook_add(a)) {
        uint8_t b;
        if (mem_read(v, a, &b, 1)) {
            mem_write(v, a, &b, 1);
        }
    }
}

static void push_rec(unsigned vi, struct vcpu *v, const struct rec *r)
{
    if (v->nrec == MAX_REC) { /* drop the oldest: its block never ran */
        py_note(vi, "bridge: dropped a stale pending EDX:EAX patch record");
        if (v->rec[0].kind == REC_RDPMC_UD && tl_ud_pending > 0) {
            tl_ud_pending--;
        }
        memmove(&v->rec[0], &v->rec[1], sizeof(struct rec) * (MAX_REC - 1));
        v->nrec--;
    }
    v->rec[v->nrec++] = *r;
    set_npending(vi, v);
}

static void drop_rec(unsigned vi, struct vcpu *v, int i)
{
    memmove(&v->rec[i], &v->rec[i + 1], sizeof(struct rec) * (size_t)(v->nrec - i - 1));
    v->nrec--;
    set_npending(vi, v);
}

/* RDMSR/WRMSR: make QEMU raise #GP(0) at this instruction (see on_exception). */
static void fault_by_redirect(struct vcpu *v, const struct site *s, uint64_t rcx)
{
    v->redirect = RD_RCX;
    v->redirect_linear = s->linear;
    v->orig_rcx = rcx;
    reg_write(v, p4.regs.rcx, MSR_GP_REDIRECT);
}

/*
 * RDPMC at CPL 0 (only reached at a block start, where the guest state is exact): replace
 * the two opcode bytes 0F 33 by 0F 30 (WRMSR), point ECX at 800h and restart the instruction;
 * QEMU translates the WRMSR (the translation callback ignores the patched address) and raises
 * #GP with the state restored; on_exception puts back ECX and the original bytes before the
 * guest sees anything.  The bytes are in guest memory for the time of one instruction.
 */

static void fault_by_patch(struct vcpu *v, const struct site *s, uint64_t rip, uint64_t rcx)
{
    uint64_t op = s->linear + s->len - 2;
    uint8_t newb[2] = {0x0F, 0x30};
    if (!mem_read(v, op, v->orig_bytes, 2)) {
        return; /* cannot happen: the instruction was just fetched */
    }
    v->redirect = RD_PATCH;
    v->redirect_linear = s->linear;
    v->orig_rcx = rcx;
    v->patch_op = op;
    __atomic_store_n(&p4.intercept->patch_linear, s->linear, __ATOMIC_SEQ_CST);
    mem_write(v, op, newb, 2);
    reg_write(v, p4.regs.rcx, MSR_GP_REDIRECT);
    counting_abandon(tl_vcpu, s->linear, 0);
    qemu_plugin_set_pc(rip);
}

/* A PMU access being served: when it began (the access-time histogram), the clocks of the rest
 * of the current block (fold_at_access), the OVF flags before it while a breakpoint is set */
struct access {
    uint64_t t0;
    int64_t rest;
    int watch;
    uint8_t ovf[P4_NCOUNTERS];
};

/* Before the access at `linear` (CPL cpl) is served: the sibling's activity and this vCPU's
 * folded, its time in the trace, the OVF flags for the breakpoints (control.c) */
static void access_begin(unsigned vi, struct vcpu_counting *c, uint64_t linear, int cpl,
                         struct access *a)
{
    a->t0 = access_time_start();
    sibling_sync(vi, c, linear);
    a->rest = p4.run->instrument ? fold_at_access(vi, c, linear) : 0;
    trace_access(vi, c, linear, cpl);
    a->watch = control_breaks();
    if (a->watch) control_snap(vi, a->ovf);
}

/* After it was served with status r (op P4_TR_*, reg the MSR or ECX, value what was written
 * or read): the breakpoints, the deadline armed again, the access's time */
static void access_end(unsigned vi, struct vcpu_counting *c, const struct access *a, uint32_t op,
                       uint32_t reg, uint64_t value, uint64_t linear, int r)
{
    if (a->watch) {
        sibling_access_done(vi, c, 1); /* (first: a breakpoint can stop this vCPU here) */
        control_after_access(vi, op, reg, value, linear, r, a->ovf);
        after_python(vi, c, a->rest);
    } else {
        after_python(vi, c, a->rest);
        sibling_access_done(vi, c, 0);
    }
    access_time_end(a->t0);
}

static void cb_wrmsr(unsigned int vi, void *ud)
{
    struct vcpu *v = bridge_vcpu(vi);
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    uint64_t rcx = reg_read(v, p4.regs.rcx);
    uint32_t msr = (uint32_t)rcx;
    if (msr < PMU_MSR_FIRST || msr > PMU_MSR_LAST) {
        return;
    }
    struct site s = unpack_site(ud);
    if (current_cpl(v) != 0) {
        trace_privileged(vi, v, c, s.linear, msr, 2);
        return; /* QEMU raises #GP */
    }
    uint64_t value = (reg_read(v, p4.regs.rdx) << 32) | (reg_read(v, p4.regs.rax) & 0xFFFFFFFFull);
    watch_counter_write(vi, v, msr, value);
    int was = p4.run->instrument || p4.run->start_requested;
    struct access a;
    access_begin(vi, c, s.linear, 0, &a);
    int r = pmu_wrmsr(vi, msr, value);
    access_end(vi, c, &a, P4_TR_WRMSR, msr, value, s.linear, r);
    if (!was && p4.run->start_requested) {
        counting_credit_wrmsr(&c->batch, s.linear, current_cpl(v) == 0);
    }
    if (r == P4_PY_FAULT) {
        fault_by_redirect(v, &s, rcx);
    }
    /* OK or not handled: QEMU executes the WRMSR, which it ignores for 300h-3FFh */
}

/* The RDMSR at s gives EDX:EAX `value` (post 1) or QEMU's value patched by the model (post 2)
 * after it has run: on its next instruction, or at the next block's entry when it ends its
 * block */
static void rdmsr_result(unsigned vi, struct vcpu *v, const struct site *s, int post,
                         uint64_t value)
{
    if (!s->last) {
        v->post = post;
        v->post_value = value;
        return; /* cb_rdmsr_post on the next instruction of this block */
    }
    /* the RDMSR ends its block: patch at the entry of the next one */
    struct rec r;
    memset(&r, 0, sizeof(r));
    r.kind = post == 2 ? REC_RDMSR_MISC : REC_RDMSR;
    r.linear = s->linear + s->len;
    r.rsp = reg_read(v, p4.regs.rsp);
    r.value = value;
    ensure_hook(v, r.linear);
    push_rec(vi, v, &r);
}

static void cb_rdmsr(unsigned int vi, void *ud)
{
    struct vcpu *v = bridge_vcpu(vi);
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    uint64_t rcx = reg_read(v, p4.regs.rcx);
    uint32_t msr = (uint32_t)rcx;
    int post = 0;
    uint64_t value = 0;

    v->post = 0;
    v->last_counter_write = 0;
    if (msr == MSR_MISC_ENABLE) {
        if (current_cpl(v) != 0) {
            return; /* QEMU raises #GP */
        }
        post = 2; /* QEMU reads its value; patched afterwards */
    } else if (msr >= PMU_MSR_FIRST && msr <= PMU_MSR_LAST) {
        uint64_t linear = unpack_site(ud).linear;
        if (current_cpl(v) != 0) {
            trace_privileged(vi, v, c, linear, msr, 1);
            return; /* QEMU raises #GP */
        }
        struct access a;
        access_begin(vi, c, linear, 0, &a);
        int r = pmu_rdmsr(vi, msr, &value);
        access_end(vi, c, &a, P4_TR_RDMSR, msr, value, linear, r);
        if (r == P4_PY_FAULT) {
            struct site s = unpack_site(ud);
            fault_by_redirect(v, &s, rcx);
            return;
        }
        if (r != P4_PY_OK) {
            return; /* not handled: the guest gets QEMU's 0 */
        }
        post = 1;
    } else {
        return;
    }

    struct site s = unpack_site(ud);
    rdmsr_result(vi, v, &s, post, value);
}

static void cb_rdmsr_post(unsigned int vi, void *ud)
{
    struct vcpu *v = bridge_vcpu(vi);
    (void)ud;
    if (!v->post) {
        return;
    }
    uint64_t value = v->post_value;
    if (v->post == 2) {
        uint64_t q = (reg_read(v, p4.regs.rdx) << 32) | (reg_read(v, p4.regs.rax) & 0xFFFFFFFFull);
        v->post = 0;
        if (py_misc_enable(vi, q, &value) != P4_PY_OK) {
            return;
        }
    }
    v->post = 0;
    write_edx_eax(v, value);
}

static int rdpmc_allowed(struct vcpu *v, int *cpl)
{
    *cpl = current_cpl(v);
    return *cpl == 0 || (reg_read(v, p4.regs.cr4) & CR4_PCE);
}

/* RDPMC that the model faults (#GP: a bad index) */
static void rdpmc_fault(struct vcpu *v, const struct site *s, int cpl, uint64_t rcx)
{
    if (cpl > 0) {
        /* QEMU's own check then raises #GP with the exact state */
        v->redirect = RD_CR4;
        v->redirect_linear = s->linear;
        v->orig_cr4 = reg_read(v, p4.regs.cr4);
        reg_write(v, p4.regs.cr4, v->orig_cr4 & ~CR4_PCE);
        return;
    }
    if (s->first) {
        fault_by_patch(v, s, reg_read(v, p4.regs.rip), rcx);
        return;
    }
    /* CPL 0, not at a block start: go through #UD and the entry hook first */
    v->ud_armed = 1;
    v->ud_fault = 1;
    v->ud_linear = s->linear;
    v->ud_len = s->len;
}

static void cb_rdpmc(unsigned int vi, void *ud)
{
    struct vcpu *v = bridge_vcpu(vi);
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    struct site s = unpack_site(ud);
    int cpl;
    uint64_t value = 0;

    if (!rdpmc_allowed(v, &cpl)) {
        trace_privileged(vi, v, c, s.linear, (uint32_t)reg_read(v, p4.regs.rcx), 3);
        return; /* QEMU raises #GP */
    }
    v->last_counter_write = 0;
    uint64_t rcx = reg_read(v, p4.regs.rcx);
    int r;
    if (v->refault_linear && v->refault_linear == s.linear && s.first) {
        r = P4_PY_FAULT; /* asked already, before the #UD round trip (cb_entry) */
    } else {
        struct access a;
        access_begin(vi, c, s.linear, cpl, &a);
        r = pmu_rdpmc(vi, (uint32_t)rcx, &value);
        access_end(vi, c, &a, P4_TR_RDPMC, (uint32_t)rcx, value, s.linear, r);
    }
    v->refault_linear = 0;
    if (r == P4_PY_FAULT) {
        rdpmc_fault(v, &s, cpl, rcx);
        return;
    }
    if (r != P4_PY_OK) {
        return; /* not handled: QEMU raises #UD */
    }
    if (s.first) {
        /* block start: QEMU's flags are in env, skipping is exact; rip is exact here */
        uint64_t rip = reg_read(v, p4.regs.rip);
        write_edx_eax(v, value);
        counting_abandon(vi, s.linear, 1);
        qemu_plugin_set_pc(rip + s.len);
    }
    v->ud_armed = 1;
    v->ud_fault = 0;
    v->ud_linear = s.linear;
    v->ud_value = value;
    v->ud_len = s.len;
}

/* entry hook: the RDMSR whose result this block's entry delivers (record i) */
static void deliver_rdmsr(unsigned vi, struct vcpu *v, int i)
{
    uint64_t value = v->rec[i].value;
    int kind = v->rec[i].kind;
    drop_rec(vi, v, i);
    if (kind == REC_RDMSR_MISC) {
        uint64_t q = (reg_read(v, p4.regs.rdx) << 32) | (reg_read(v, p4.regs.rax) & 0xFFFFFFFFull);
        if (py_misc_enable(vi, q, &value) != P4_PY_OK) {
            return;
        }
    }
    write_edx_eax(v, value);
}

/* Is the #UD frame of record r's RDPMC on top of the stack (rsp)? */
static int ud_frame_on_stack(struct vcpu *v, const struct rec *r, uint64_t rsp, uint64_t tbv)
{
    uint64_t slot[2] = {0, 0};
    if (r->frame64) {
        if (!mem_read(v, rsp, slot, 16)) {
            return 0;
        }
    } else if (r->frame16) {
        uint16_t s16[2];
        if (!mem_read(v, rsp, s16, 4)) {
            return 0;
        }
        slot[0] = s16[0];
        slot[1] = s16[1];
    } else {
        uint32_t s32[2];
        if (!mem_read(v, rsp, s32, 8)) {
            return 0;
        }
        slot[0] = s32[0];
        slot[1] = s32[1];
    }
    DBG("entry hook %#llx: frame %#llx:%#llx, want %#llx:%#llx\n", (unsigned long long)tbv,
        (unsigned long long)slot[1], (unsigned long long)slot[0], (unsigned long long)r->cs,
        (unsigned long long)r->eip);
    return slot[0] == r->eip && (slot[1] & 0xFFFF) == (r->cs & 0xFFFF);
}

/* Undo QEMU's delivery of the #UD of record c's RDPMC: segments (CPL follows SS), stack,
 * EFLAGS (IOPL/AC/IF/TF...); then resume after the RDPMC, or at it (c->fault).  Does not
 * return (qemu_plugin_set_pc). */
static void undo_ud_delivery(struct vcpu *v, const struct rec *c, uint64_t rsp)
{
    if (reg_read(v, p4.regs.ss) != c->ss) {
        reg_write(v, p4.regs.ss, c->ss);
    }
    if (reg_read(v, p4.regs.cs) != c->cs) {
        reg_write(v, p4.regs.cs, c->cs);
    }
    if (c->seg_saved) {
        struct qemu_plugin_register *sr[4] = {p4.regs.ds, p4.regs.es, p4.regs.fs, p4.regs.gs};
        for (int k = 0; k < 4; k++) {
            reg_write(v, sr[k], c->seg[k]);
        }
    }
    if (c->stack_ok && rsp >= c->rsp - sizeof(c->stack) && rsp < c->rsp) {
        mem_write(v, c->rsp - sizeof(c->stack), c->stack, sizeof(c->stack));
    }
    reg_write(v, p4.regs.rsp, c->rsp);
    /* raw write: only non-lazy bits; the arithmetic flags are still in QEMU's CC state */
    reg_write(v, p4.regs.eflags, c->eflags & ~EFL_LAZY);
    if (c->fault) {
        /* RDPMC #GP at CPL 0: back to the RDPMC, now at a block start -> patch path */
        v->refault_linear = c->linear;
        qemu_plugin_set_pc(c->eip);
    }
    qemu_plugin_set_pc(c->eip + c->len);
}

/*
 * Entry hook of a block (conditional: runs only while this vCPU has records).  The guest
 * state is exact here: nothing of the block has run yet.
 */
static void cb_entry(unsigned int vi, void *ud)
{
    struct vcpu *v = bridge_vcpu(vi);
    uint64_t tbv = (uint64_t)(uintptr_t)ud;
    if (!v->nrec) {
        return;
    }
    uint64_t rsp = reg_read(v, p4.regs.rsp);
    for (int i = v->nrec - 1; i >= 0; i--) {
        struct rec *r = &v->rec[i];
        if (r->kind == REC_RDMSR || r->kind == REC_RDMSR_MISC) {
            if (r->linear != tbv || r->rsp != rsp) {
                continue;
            }
            deliver_rdmsr(vi, v, i);
            return;
        }
        /* REC_RDPMC_UD: is the #UD frame of that RDPMC on top of the stack? */
        if (!ud_frame_on_stack(v, r, rsp, tbv)) {
            continue;
        }
        struct rec c = *r;
        drop_rec(vi, v, i);
        if (tl_ud_pending > 0) {
            tl_ud_pending--;
        }
        hook_add(tbv); /* the #UD handler: hook its blocks whatever their TB flags */
        undo_ud_delivery(v, &c, rsp);
    }
}

/* our #GP (fault_by_redirect, RD_CR4, fault_by_patch) is being raised: put back what was
 * changed to make QEMU raise it */
static void undo_redirect(struct vcpu *v, uint64_t from)
{
    int k = v->redirect;
    v->redirect = RD_NONE;
    if (from != v->redirect_linear && p4.options.verbose) {
        p4_message("p4pmu: note: #GP reported at %#llx, expected %#llx\n", (unsigned long long)from,
                   (unsigned long long)v->redirect_linear);
    }
    if (k == RD_RCX || k == RD_PATCH) {
        reg_write(v, p4.regs.rcx, v->orig_rcx);
    }
    if (k == RD_CR4) {
        reg_write(v, p4.regs.cr4, v->orig_cr4);
    }
    if (k == RD_PATCH) {
        mem_write(v, v->patch_op, v->orig_bytes, 2); /* also drops the WRMSR's block */
        __atomic_store_n(&p4.intercept->patch_linear, 0, __ATOMIC_SEQ_CST);
    }
}

/*
 * Delivering the #UD itself faulted (no usable gate 6, stack fault...): the exception is
 * raised at the RDPMC again.  Put back what the previous call changed and let it go: the
 * guest sees that fault at the RDPMC with its own registers and flags.  Returns 1 if so.
 */
static int ud_delivery_faulted(unsigned vi, struct vcpu *v, uint64_t from)
{
    if (!(tl_ud_pending && v->nrec && v->rec[v->nrec - 1].kind == REC_RDPMC_UD &&
          v->rec[v->nrec - 1].linear == from && !v->ud_armed)) {
        return 0;
    }
    struct rec c = v->rec[v->nrec - 1];
    drop_rec(vi, v, v->nrec - 1);
    tl_ud_pending--;
    reg_write(v, p4.regs.eflags, c.eflags & ~EFL_LAZY);
    reg_write(v, p4.regs.rax, c.rax);
    reg_write(v, p4.regs.rdx, c.rdx);
    py_note(vi, "bridge: delivering QEMU's #UD for an RDPMC faulted; the guest gets "
                "that fault at the RDPMC (RDPMC not at a block start needs a working "
                "#UD gate)");
    return 1;
}

/* QEMU's #UD for an RDPMC we served: the state is exact now (see cb_rdpmc); record what the
 * entry hook of the #UD handler's first block undoes, write EDX:EAX */
static void record_rdpmc_ud(unsigned vi, struct vcpu *v, uint64_t from)
{
    struct rec r;
    memset(&r, 0, sizeof(r));
    v->ud_armed = 0;
    r.kind = REC_RDPMC_UD;
    r.linear = from;
    r.rsp = reg_read(v, p4.regs.rsp);
    r.eip = reg_read(v, p4.regs.rip);
    r.len = v->ud_len;
    r.eflags = reg_read(v, p4.regs.eflags);
    r.cs = reg_read(v, p4.regs.cs);
    r.ss = reg_read(v, p4.regs.ss);
    uint64_t cr0 = reg_read(v, p4.regs.cr0);
    if (!(cr0 & CR0_PE)) {
        r.frame16 = 1;
    } else if (reg_read(v, p4.regs.efer) & EFER_LMA) {
        r.frame64 = 1;
    }
    if (r.eflags & EFL_VM) {
        struct qemu_plugin_register *sr[4] = {p4.regs.ds, p4.regs.es, p4.regs.fs, p4.regs.gs};
        for (int k = 0; k < 4; k++) {
            r.seg[k] = reg_read(v, sr[k]);
        }
        r.seg_saved = 1;
    }
    r.stack_ok = mem_read(v, r.rsp - sizeof(r.stack), r.stack, sizeof(r.stack));
    r.rax = reg_read(v, p4.regs.rax);
    r.rdx = reg_read(v, p4.regs.rdx);
    if (v->ud_fault) {
        r.fault = 1;
    } else {
        r.value = v->ud_value;
        write_edx_eax(v, v->ud_value);
    }
    push_rec(vi, v, &r);
    /* a TB key QEMU has not cached for the handler: IOPL and AC have no effect at CPL 0 */
    reg_write(v, p4.regs.eflags, (r.eflags & ~EFL_LAZY) ^ (EFL_IOPL | EFL_AC));
    tl_ud_pending++;
    DBG("#UD of RDPMC at %#llx: eflags %#llx rsp %#llx frame64 %d\n", (unsigned long long)from,
        (unsigned long long)r.eflags, (unsigned long long)r.rsp, r.frame64);
}

/*
 * Exception callback.  In QEMU 11.1 (x86) it runs when the exception is raised, before the
 * frame is pushed: for #GP from a helper QEMU then restores EIP/flags from the instruction's
 * unwind data; for RDPMC's #UD they were synchronised before the helper ran.  Registers
 * written here are what the exception frame and the handler see.
 */
void on_exception(unsigned int vi, enum p4_discon_type type, uint64_t from, uint64_t to, void *ud)
{
    struct vcpu *v = bridge_vcpu(vi);
    (void)type;
    (void)to;
    (void)ud;

    /* counting: the faulting instruction and the rest of its block do not retire; a served
     * RDPMC (its #UD is ours) does */
    counting_discon(vi, v, from, v->ud_armed && !v->ud_fault, 0);

    /*
     * A redirect or an armed RDPMC is always followed by the exception of that very
     * instruction (nothing else can run in between), so the next exception is ours; `from`
     * is checked only to report surprises.
     */
    if (v->redirect) {
        undo_redirect(v, from);
        return;
    }
    if (ud_delivery_faulted(vi, v, from)) {
        return;
    }
    if (v->ud_armed) {
        record_rdpmc_ud(vi, v, from);
    }
}

static int legal_prefix(uint8_t b)
{
    switch (b) {
    case 0x66:
    case 0x67:
    case 0xF2:
    case 0xF3:
    case 0x2E:
    case 0x36:
    case 0x3E:
    case 0x26:
    case 0x64:
    case 0x65:
        return 1;
    default:
        return b >= 0x40 && b <= 0x4F; /* REX: only inside an instruction in 64-bit mode */
    }
}

/* Kind of the instruction, from its bytes (QEMU gives the exact length). */
static int decode(const uint8_t *b, size_t n)
{
    if (n < 2 || n > 15 || b[n - 2] != 0x0F) {
        return K_NONE;
    }
    int k = b[n - 1] == 0x30   ? K_WRMSR
            : b[n - 1] == 0x32 ? K_RDMSR
            : b[n - 1] == 0x33 ? K_RDPMC
                               : K_NONE;
    if (k == K_NONE) {
        return K_NONE;
    }
    for (size_t i = 0; i + 2 < n; i++) {
        if (!legal_prefix(b[i])) {
            return K_NONE; /* includes LOCK (F0): QEMU raises #UD, as the hardware does */
        }
    }
    return k;
}

/* register reads at translation time (the vCPU index is not known there) */
static __thread struct vcpu tl_tv; /* per host thread */

void translate(struct qemu_plugin_tb *tb, void *ud)
{
    (void)ud;
    size_t n = qemu_plugin_tb_n_insns(tb);
    uint64_t tbv = qemu_plugin_tb_vaddr(tb);
    int hooked = 0;

    if (tl_ud_pending) {
        hooked = 1;
    } else if (hook_has(tbv)) {
        hooked = 1;
    }
    if (hooked) {
        DBG("entry hook on block %#llx (%s)\n", (unsigned long long)tbv,
            tl_ud_pending ? "RDPMC #UD pending" : "address");
        qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, cb_entry, P4_CB_RW_REGS_PC, P4_COND_NE,
                                                  p4.intercept->pending.entry, 0,
                                                  (void *)(uintptr_t)tbv);
    }

    if (p4.run->instrument) {
        if (!tl_tv.buf) tl_tv.buf = g_byte_array_new();
        counting_translate(tb, &tl_tv);
    }

    uint64_t patched = __atomic_load_n(&p4.intercept->patch_linear, __ATOMIC_SEQ_CST);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint8_t b[16];
        size_t len = qemu_plugin_insn_data(insn, b, sizeof(b));
        int k = decode(b, len);
        if (k == K_NONE) {
            continue;
        }
        uint64_t lin = qemu_plugin_insn_vaddr(insn);
        if (patched && lin == patched) {
            continue; /* our temporary WRMSR (fault_by_patch) */
        }
        int last = i + 1 == n;
        void *site = pack_site(lin, (unsigned)len, k, i == 0, last);
        switch (k) {
        case K_WRMSR:
            qemu_plugin_register_vcpu_insn_exec_cb(insn, cb_wrmsr, P4_CB_RW_REGS, site);
            break;
        case K_RDMSR:
            qemu_plugin_register_vcpu_insn_exec_cb(insn, cb_rdmsr, P4_CB_RW_REGS, site);
            if (!last) {
                qemu_plugin_register_vcpu_insn_exec_cb(qemu_plugin_tb_get_insn(tb, i + 1),
                                                       cb_rdmsr_post, P4_CB_RW_REGS, NULL);
            }
            break;
        case K_RDPMC:
            qemu_plugin_register_vcpu_insn_exec_cb(insn, cb_rdpmc, P4_CB_RW_REGS_PC, site);
            break;
        }
        if (p4.options.verbose) {
            char msg[128];
            snprintf(msg, sizeof(msg), "p4pmu: %s at %#llx (insn %zu of %zu)\n",
                     k == K_WRMSR   ? "WRMSR"
                     : k == K_RDMSR ? "RDMSR"
                                    : "RDPMC",
                     (unsigned long long)lin, i, n);
            qemu_plugin_outs(msg);
        }
    }
}
