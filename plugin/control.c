/*
 * p4pmu: the C half of the control channel (docs/gdb.md): breakpoints on PMU events checked on
 * the vCPU threads, the hold that keeps a vCPU at a block entry until QEMU stops it, and
 * which vCPUs are parked, so that the channel (plugin/control.py, on its own thread) may read
 * and write their PMU state.
 *
 * Parking.  With one thread per vCPU (multi-threaded TCG), QEMU calls the idle callback on a
 * vCPU's thread when it stops running guest code (the VM stopped by gdb or QMP, or the vCPU
 * halted) and the resume callback before it runs again, both with QEMU's BQL held.  A parked
 * vCPU runs no guest code and no plugin code; the resume callback takes the channel's lock,
 * so a request served under that lock (p4c_control_enter .. p4c_control_leave) sees every
 * parked vCPU stand still until it is done.  The lock is never taken with Python's lock held
 * by a vCPU thread, and the channel takes no QEMU lock while it holds it.  With one TCG
 * thread for all vCPUs (-icount: the Linux guest's virtual clock), QEMU calls neither
 * callback: the channel then asks QMP whether the VM is stopped (vm_stop returns only once
 * every vCPU left translated code) and passes p4c_control_enter(1); a resume from elsewhere
 * (another QMP client) during a request is not held back then (docs/gdb.md).
 *
 * Stops.  A breakpoint's event (an OVF flag 0 -> 1 found while the counting is brought up to
 * date, a PMI sent, a PMU access served) is recorded in `stop` and a byte written to the
 * channel's pipe; the channel asks QEMU's monitor to stop the VM (QMP "stop").  The vCPU does
 * not wait for that in its callback (the stop waits for the vCPU to leave translated code):
 * it forces a callback at the entry of the next block and holds there -- a short sleep, then
 * qemu_plugin_set_pc to the block's own start, before any of the block's operations run --
 * until QEMU stops it between two of those entries, at most HOLD_TIMEOUT_NS.  The hold ends
 * at the resume callback or when QMP reports the stop (p4c_control_stopped).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>

#include "messages.h"
#include "control.h"
#include "counting.h"
#include "fold.h"
#include "registers.h"
#include "state.h"

#define HOLD_SLEEP_NS 200000ull       /* between two entries of the held block */
#define HOLD_TIMEOUT_NS 3000000000ull /* no stop came: the vCPU goes on (a warning) */

/* The control channel's state, no vCPU parked or held, no breakpoint */
struct control_state *control_state_new(void)
{
    struct control_state *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->ctl.wake_fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    return s;
}

int control_setup(int max_vcpus)
{
    p4.control->cv = calloc((size_t)max_vcpus, sizeof(*p4.control->cv));
    if (!p4.control->cv) {
        p4_message("p4pmu: out of memory for the control channel\n");
        return -1;
    }
    return 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int control_breaks(void)
{
    return __atomic_load_n(&p4.control->ctl.nbreaks, __ATOMIC_ACQUIRE) > 0 && p4.control->ctl.on;
}

/* make the next block entry call cb_sched (deadline.c arm keeps SB_FORCE_FIRE while
 * force_fold is set) */
static void force_entry(struct vcpu_counting *c)
{
    if (!c->init || !c->sbase || c->deadline.force_fold) return;
    c->deadline.force_fold = 1;
    c->sbase[SB_DEADLINE_CLOCKS] += SB_FORCE_FIRE;
}

/* vCPU vi's LVT performance-counter entry, read on vi's own thread (the APIC at APIC_BASE is
 * the calling vCPU's); a read that fails keeps the last value */
static void read_lvt(unsigned vi)
{
    uint32_t lvt;
    if (!apic_rd(bridge_vcpu(vi), APIC_LVT_PERF, &lvt)) return;
    p4.control->cv[vi].lvt = lvt;
    __atomic_store_n(&p4.control->cv[vi].lvt_valid, 1, __ATOMIC_RELEASE);
}

/* a breakpoint matched on vCPU vi (on vi's own thread): record the first stop, ask the channel
 * to stop the VM.  The LVT entry is read now, before the lock (apic_rd takes the BQL, which
 * the resume callback holds while it takes the lock): QEMU may stop the vCPU before its next
 * block entry, so the hold may never run. */
static void control_stop(unsigned vi, const struct p4c_break *b, const struct p4c_stop *what)
{
    read_lvt(vi);
    pthread_mutex_lock(&p4.control->lock);
    __atomic_add_fetch(&((struct p4c_break *)b)->hits, 1, __ATOMIC_RELAXED);
    if (p4.control->cv[vi].hold || __atomic_load_n(&p4.control->ctl.holding, __ATOMIC_ACQUIRE)) {
        p4.control->ctl.stop.later++; /* a stop is on its way already */
        pthread_mutex_unlock(&p4.control->lock);
        return;
    }
    uint64_t seq = p4.control->ctl.stop.seq + 1;
    p4.control->ctl.stop = *what;
    p4.control->ctl.stop.seq = seq;
    p4.control->ctl.stop.vcpu = (int32_t)vi;
    p4.control->ctl.stop.number = (int32_t)b->number;
    p4.control->ctl.stop.later = 0;
    p4.control->cv[vi].hold = 1;
    p4.control->cv[vi].hold_since = now_ns();
    __atomic_add_fetch(&p4.control->ctl.holding, 1, __ATOMIC_ACQ_REL);
    force_entry(&p4.run->per_vcpu[vi]);
    pthread_mutex_unlock(&p4.control->lock);
    char one = 's';
    if (p4.control->ctl.wake_fd >= 0 && write(p4.control->ctl.wake_fd, &one, 1) != 1 &&
        errno != EAGAIN) {
        p4_message("p4pmu: control channel: cannot ask for a stop: %s\n", strerror(errno));
    }
}

/* the first breakpoint of `kind` that `match` accepts */
static const struct p4c_break *find_break(int kind, int counter, uint32_t msr)
{
    for (int i = 0; i < P4_BREAKS; i++) {
        const struct p4c_break *b = &p4.control->ctl.brk[i];
        if (__atomic_load_n(&b->kind, __ATOMIC_ACQUIRE) != kind) continue;
        if (kind == P4_BRK_OVERFLOW && b->counter >= 0 && b->counter != counter) continue;
        if (kind == P4_BRK_ACCESS && b->msr && b->msr != msr) continue;
        return b;
    }
    return NULL;
}

/* the OVF flags of vCPU vi's PMU (its core's first vCPU's register file: Feeder.storage) */
static const uint8_t *ovf_flags(unsigned vi)
{
    unsigned first = vi - vi % (unsigned)p4.run->threads;
    return p4.mirrors ? p4.mirrors[first].ovf : NULL;
}

void control_snap(unsigned vi, uint8_t snap[P4_NCOUNTERS])
{
    const uint8_t *o = ovf_flags(vi);
    if (o) memcpy(snap, o, P4_NCOUNTERS);
}

/* after the counting was brought up to date (an access or a deadline at `pc`): every OVF
 * 0 -> 1 since `snap`, except counter `skip`'s (a write to its CCCR sets OVF itself) */
void control_overflows(unsigned vi, const uint8_t snap[P4_NCOUNTERS], int skip, uint64_t pc)
{
    const uint8_t *o = ovf_flags(vi);
    if (!o) return;
    for (int n = 0; n < P4_NCOUNTERS; n++) {
        if (n == skip || snap[n] || !o[n]) continue;
        const struct p4c_break *b = find_break(P4_BRK_OVERFLOW, n, 0);
        if (!b) continue;
        struct p4c_stop s = {.kind = P4_BRK_OVERFLOW, .counter = n, .pc = pc};
        control_stop(vi, b, &s);
    }
}

void control_after_access(unsigned vi, uint32_t op, uint32_t reg, uint64_t value, uint64_t pc,
                          int r, const uint8_t snap[P4_NCOUNTERS])
{
    /* the MSRs of the counters and CCCRs, from the tables (written once by Python) */
    const struct p4c_mirror *m = &p4.mirrors[vi - vi % (unsigned)p4.run->threads];
    int skip = -1; /* a write to a CCCR may set its own OVF: not an overflow */
    for (int n = 0; n < P4_NCOUNTERS && op == P4_TR_WRMSR; n++) {
        if (m->cccr_msr[n] == reg) skip = n;
    }
    control_overflows(vi, snap, skip, pc);
    if (r != P4_PY_OK && r != P4_PY_FAULT) return; /* not the PMU's (left to QEMU) */
    uint32_t index = reg & 0x7FFFFFFFu;            /* RDPMC: ECX[30:0] (SDM Vol. 2B, RDPMC) */
    uint32_t msr = op != P4_TR_RDPMC ? reg : index < P4_NCOUNTERS ? m->ctr_msr[index] : 0;
    const struct p4c_break *b = find_break(P4_BRK_ACCESS, -1, msr);
    if (!b) return;
    struct p4c_stop s = {.kind = P4_BRK_ACCESS,
                         .op = op,
                         .msr = reg,
                         .value = r == P4_PY_FAULT ? 0 : value,
                         .pc = pc,
                         .fault = r == P4_PY_FAULT};
    control_stop(vi, b, &s);
}

void control_pmi(unsigned vi, uint32_t vector, uint64_t pc)
{
    const struct p4c_break *b = find_break(P4_BRK_PMI, -1, 0);
    if (!b) return;
    struct p4c_stop s = {.kind = P4_BRK_PMI, .vector = vector, .pc = pc};
    control_stop(vi, b, &s);
}

/* cb_sched, at a block entry before anything else: hold while a stop is on its way.  Does not
 * return while holding (qemu_plugin_set_pc re-enters the block from its start). */
void control_hold(unsigned vi)
{
    struct control_vcpu *h = &p4.control->cv[vi];
    if (!h->hold) return;
    if (now_ns() - h->hold_since > HOLD_TIMEOUT_NS) {
        p4_message("p4pmu: control channel: QEMU did not stop vCPU %u within %llu s of "
                   "its breakpoint; it goes on\n",
                   vi, (unsigned long long)(HOLD_TIMEOUT_NS / 1000000000ull));
        control_release(vi);
        return;
    }
    read_lvt(vi); /* (with one TCG thread there is no idle callback to read it) */
    struct timespec ts = {0, (long)HOLD_SLEEP_NS};
    nanosleep(&ts, NULL);
    /* (force_fold stays set, so W keeps firing at this entry) */
    qemu_plugin_set_pc(reg_read(bridge_vcpu(vi), p4.regs.rip));
}

void control_release(unsigned vi)
{
    if (!p4.control->cv[vi].hold) return;
    p4.control->cv[vi].hold = 0;
    __atomic_sub_fetch(&p4.control->ctl.holding, 1, __ATOMIC_ACQ_REL);
}

/* QEMU's idle callback (BQL held): the vCPU is parked; its LVT entry read now */
void control_idle(unsigned vi)
{
    if (!p4.control->ctl.on || !p4.control->cv) return;
    read_lvt(vi);
    __atomic_store_n(&p4.control->cv[vi].parked, 1, __ATOMIC_RELEASE);
}

/* QEMU's resume callback (BQL held): wait for a request being served, then run; the hold
 * ends (QEMU stopped the vCPU, gdb continues it) */
void control_resume(unsigned vi)
{
    if (!p4.control->ctl.on || !p4.control->cv) return;
    pthread_mutex_lock(&p4.control->lock);
    __atomic_store_n(&p4.control->cv[vi].parked, 0, __ATOMIC_RELEASE);
    control_release(vi);
    pthread_mutex_unlock(&p4.control->lock);
}

/* ---------------------------------------------------------------------------------------- */
/* Functions Python calls (declared with ffi.cdef in build.py)                               */
/* ---------------------------------------------------------------------------------------- */

struct p4c_control *p4c_control(void)
{
    return &p4.control->ctl;
}

int p4c_control_enter(int vm_stopped)
{
    pthread_mutex_lock(&p4.control->lock);
    if (vm_stopped) return 1; /* QMP says so: every vCPU is out of translated code */
    for (int i = 0; i < p4.n_vcpus_max; i++) {
        if (p4.run->per_vcpu && p4.run->per_vcpu[i].init &&
            !__atomic_load_n(&p4.control->cv[i].parked, __ATOMIC_ACQUIRE)) {
            pthread_mutex_unlock(&p4.control->lock);
            return 0;
        }
    }
    return 1;
}

void p4c_control_leave(void)
{
    pthread_mutex_unlock(&p4.control->lock);
}

/* between two blocks, as a sibling's request folds (fold.c fold_between_blocks); Python then
 * consumes the batch (Bridge.deadline) */
int p4c_control_fold(unsigned vi)
{
    struct vcpu_counting *c = vcpu_started(vi);
    if (!c || !p4.run->instrument) return 0;
    fold_between_blocks(vi, c);
    force_entry(c);
    return 1;
}

void p4c_control_changed(unsigned vi)
{
    force_entry(&p4.run->per_vcpu[vi]);
}

/* QEMU reported the VM stopped (QMP event STOP): every hold has done its job */
void p4c_control_stopped(void)
{
    pthread_mutex_lock(&p4.control->lock);
    for (int i = 0; i < p4.n_vcpus_max; i++)
        control_release((unsigned)i);
    pthread_mutex_unlock(&p4.control->lock);
}

int p4c_control_lvt(unsigned vi, uint32_t *lvt)
{
    if (!__atomic_load_n(&p4.control->cv[vi].lvt_valid, __ATOMIC_ACQUIRE)) return 0;
    *lvt = p4.control->cv[vi].lvt;
    return 1;
}
