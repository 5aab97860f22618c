/*
 * p4pmu: the C-side register mirror (docs/bridge.md, "The register mirror").
 *
 * While the PMU of a vCPU is programmed "simply" (rule decided and checked in Python:
 * plugin/feeder.py Feeder.mirror_rule -- one LP per core, no CASCADE / extended cascade, no
 * FORCE_OVF, no EDGE), every counter's per-clock increment is a function of the clock kind
 * alone, given exactly by the per-kind table Python already hands C (p4c_out.winc).  The
 * counters, CCCRs, OVF flags and PMI arming live here for every vCPU (the Python model's
 * arrays are views of them: Feeder.storage).  After each of its calls Python enables this
 * fast path (Feeder.enable_fast_path), and until Python is called again C serves:
 *
 *  - the folds of PMU accesses and deadlines are consumed here instead of by Feeder.consume:
 *    a batch's totals from the table (fold_close's tot[]); a batch of one block execution
 *    (or of its rest after an access split it) whose totals take a counter over 2^40 is
 *    walked clock by clock (overflow clock, OVF,
 *    arming of the PMI on the next counted event: SDM 18.15.5.8; docs/emulator.md) -- the
 *    same result as the engine's one-clock sub-batches (Feeder.consume, "seq");
 *  - RDMSR of a counter or CCCR, RDPMC of counter 0-17, WRMSR of a counter value and WRMSR of
 *    a CCCR that changes nothing but OVF are served here; so are RDMSR of an ESCR and a CCCR
 *    or ESCR write that leads to a programming Python registered (programs.c);
 *  - Feeder.after's work (the next deadline, the watched counters and their headroom, the
 *    PMI request level) is done here, line by line, so that after_python() arms the same
 *    deadlines and delivers the same PMIs as with Python.
 *
 * Anything else -- an access the mirror does not serve (other registers, a write that leads
 * to a programming not registered or faults, an RDPMC index that faults), a batch with an
 * OVF 0 -> 1 transition that is not one block execution, a batch with bookkeeping repairs,
 * a per-kind table older than the kinds now known (Python would rebuild it) -- is declined:
 * the C side calls Python, which first disables the fast path (Feeder.disable_fast_path) and
 * then works on the same state, so the Python engine stays the authority for the semantics.
 * Declining is all-or-nothing: nothing of the mirror changes before it is known that the
 * whole access or deadline can be served.
 *
 * Threading: threads=1 only (Python never enables the fast path with threads=2), so a vCPU's
 * mirror is touched only by its own vCPU thread and by Python called from that thread.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "messages.h"
#include "mirror.h"
#include "counting.h"
#include "kinds.h"
#include "programs.h"
#include "python_calls.h"
#include "trace.h"
#include "state.h"


int mirror_setup(int max_vcpus)
{
    p4.mirrors = calloc((size_t)max_vcpus, sizeof(*p4.mirrors));
    if (!p4.mirrors) {
        p4_message("p4pmu: out of memory for %d vCPUs' register files\n", max_vcpus);
        return -1;
    }
    return 0;
}

/* the mirror of vCPU vi if it is the authority now */
static inline struct p4c_mirror *mirror_of(unsigned vi)
{
    if (!p4.mirrors || !p4.mirrors[vi].active) return NULL;
    return &p4.mirrors[vi];
}

/* The per-kind table is what Python would use at this call: it rebuilds it whenever kinds
 * were interned since (Feeder._table_key), so an older one means "ask Python". */
static inline int mirror_table_ok(unsigned vi, const struct p4c_mirror *m)
{
    const struct p4c_out *o = &p4.run->fold_out[vi];
    return o->winc && o->nkext == m->nkext &&
           o->nkext == 2 * __atomic_load_n(&p4.kinds->n, __ATOMIC_ACQUIRE);
}

/*
 * Consume the pending fold (p4.run->fold_out[vi], left by fold_at_access / fold_at_entry) into the
 * counters, as Feeder.consume + PMU.advance would.  Returns 0 (nothing changed) when Python
 * must do it.
 */
static int mirror_consume(unsigned vi, struct p4c_mirror *m)
{
    struct p4c_out *o = &p4.run->fold_out[vi];
    if (!o->n) return 1;
    if (!o->clocks || !m->any_run) {
        o->n = 0; /* no clock, or nothing counts (no EDGE detector to keep in simple mode) */
        return 1;
    }
    if (o->bad || o->tot_ok != 1 || !mirror_table_ok(vi, m)) return 0;
    const uint64_t lim = m->ctr_limit;
    int64_t add[P4_NCOUNTERS];
    int cross = 0;
    for (int n = 0; n < P4_NCOUNTERS; n++) {
        if (m->run[n] && !(o->tmask & (1u << n))) return 0; /* its total was not computed */
        add[n] = m->run[n] ? o->tot[n] : 0;
        if (add[n] < 0) return 0;
        if (add[n] && !m->ovf[n] && m->ctr[n] + (uint64_t)add[n] >= lim) cross = 1;
    }
    if (!cross) {
        /* no OVF 0 -> 1: the engine's plain step (counters wrap mod 2^40 with OVF already set; a
         * counted event with OVF set and OVF_PMI arms the request: docs/emulator.md,
         * pmu.pmi_request) */
        for (int n = 0; n < P4_NCOUNTERS; n++) {
            if (!add[n]) continue;
            m->ctr[n] = (m->ctr[n] + (uint64_t)add[n]) % lim;
            if (m->ovf[n] && m->pmi[n] && !m->armed[n]) {
                m->armed[n] = 1;
                m->state_changes++;
            }
        }
        o->n = 0;
        return 1;
    }
    /* an OVF 0 -> 1 transition: exact only for a batch of one block execution (or its
     * rest) in clock order (o->seq), as in Feeder.consume; otherwise Python (PMU.advance
     * apportions) */
    if (!o->seq || !o->nseq) {
        m->n_unordered++;
        return 0;
    }
    const int32_t *inc = o->winc;
    for (uint32_t i = 0; i < o->nseq; i++) {
        if (o->seq[i] >= o->nkext) return 0;
    }
    uint64_t v[P4_NCOUNTERS];
    uint8_t ovf[P4_NCOUNTERS], armed[P4_NCOUNTERS];
    for (int n = 0; n < P4_NCOUNTERS; n++) {
        v[n] = m->ctr[n];
        ovf[n] = m->ovf[n];
        armed[n] = m->armed[n];
    }
    for (uint32_t i = 0; i < o->nseq; i++) {
        const int32_t *row = inc + (size_t)o->seq[i] * P4_NCOUNTERS;
        for (int n = 0; n < P4_NCOUNTERS; n++) {
            int32_t x = row[n];
            if (x <= 0 || !m->run[n]) {
                if (x < 0 && m->run[n]) return 0;
                continue;
            }
            if (ovf[n]) {
                if (m->pmi[n]) armed[n] = 1; /* an event after the overflow clock */
                v[n] = (v[n] + (uint64_t)x) % lim;
            } else {
                v[n] += (uint64_t)x;
                if (v[n] >= lim) { /* the overflow clock: OVF set, not yet armed */
                    v[n] -= lim;
                    ovf[n] = 1;
                }
            }
        }
    }
    for (int n = 0; n < P4_NCOUNTERS; n++) {
        m->ctr[n] = v[n];
        if (!m->ovf[n] && ovf[n]) trace_record(vi, P4_TR_OVERFLOW, (uint32_t)n, 0, 0, 0);
        if (m->ovf[n] != ovf[n] || m->armed[n] != armed[n]) m->state_changes++;
        m->ovf[n] = ovf[n];
        m->armed[n] = armed[n];
    }
    m->n_walks++;
    o->n = 0;
    return 1;
}

/* Feeder.after, line by line: the PMI request level, the next deadline (budget), the watched
 * counters with their headroom and rates for fast_check.  In simple mode a counter runs iff
 * ENABLE, the table is exact, and nothing has FORCE_OVF. */
static void mirror_after(unsigned vi, struct p4c_mirror *m)
{
    struct p4c_out *o = &p4.run->fold_out[vi];
    int level = 0;
    for (int n = 0; n < P4_NCOUNTERS; n++) {
        if (m->ovf[n] && m->armed[n] && m->pmi[n]) level = 1;
    }
    o->pmi[0] = level;
    if (!m->any_run) {
        o->budget = 0;
        o->nwatch = 0;
        o->tot_ok = -1;
        return;
    }
    int nw = 0;
    int64_t best = INT64_MAX;
    uint32_t wfree = 0;
    for (int n = 0; n < P4_NCOUNTERS; n++) {
        if (!m->run[n]) continue;
        int arming = m->ovf[n] && m->pmi[n] && !m->armed[n];
        wfree |= arming ? 1u << n : 0u;
        if (m->ovf[n] && !arming) continue; /* neither an overflow nor an arming ahead */
        int64_t head = arming ? 1 : (int64_t)(m->ctr_limit - m->ctr[n]);
        int64_t rate = arming ? 1 : m->rate_b[n];
        int64_t need = (head + rate - 1) / rate;
        if (need < best) best = need;
        o->whead[nw] = head;
        o->wrate[nw] = arming ? 1 : m->tmax[n];
        o->widx[nw] = n;
        nw++;
    }
    int64_t b = nw ? (best > 1 ? best : 1) : 0;
    uint32_t tm = 0;
    for (int n = 0; n < P4_NCOUNTERS; n++)
        tm |= m->run[n] ? 1u << n : 0u;
    o->tmask = tm; /* the next batch's totals: of the running counters */
    o->budget = b;
    o->tot_ok = 0;
    o->nwatch = b ? nw : 0;
    o->wfree = wfree;
}

/* can an access be served at all (before anything changes) */
static inline struct p4c_mirror *mirror_for_access(unsigned vi)
{
    struct p4c_mirror *m = mirror_of(vi);
    if (!m) return NULL;
    if (trace_full(vi) || /* Python writes the trace and log first */
        (m->any_run && !mirror_table_ok(vi, m))) {
        m->n_declined++;
        return NULL;
    }
    return m;
}

static int mirror_counter_index(const uint32_t *msrs, uint32_t msr)
{
    for (int n = 0; n < P4_NCOUNTERS; n++) {
        if (msrs[n] == msr) return n;
    }
    return -1;
}

static int mirror_escr_index(const struct p4c_mirror *m, uint32_t msr)
{
    if (m->cur < 0) return -1; /* ESCRs are served only while a programming is registered */
    for (uint32_t s = 0; s < m->nescr; s++) {
        if (m->escr_msr[s] == msr) return (int)s;
    }
    return -1;
}

static inline void mirror_declined(unsigned vi)
{
    if (p4.mirrors && p4.mirrors[vi].active) p4.mirrors[vi].n_declined++;
}

/* RDMSR of a counter, CCCR or ESCR (PMU.rdmsr).  Returns P4_PY_OK with *out, or 0: ask
 * Python. */
static int mirror_rdmsr(unsigned vi, uint32_t msr, uint64_t *out)
{
    struct p4c_mirror *m = mirror_for_access(vi);
    if (!m) return 0;
    int c = mirror_counter_index(m->ctr_msr, msr);
    int k = c < 0 ? mirror_counter_index(m->cccr_msr, msr) : -1;
    int s = c < 0 && k < 0 ? mirror_escr_index(m, msr) : -1;
    if ((c < 0 && k < 0 && s < 0) || !mirror_consume(vi, m)) {
        mirror_declined(vi);
        return 0;
    }
    if (c >= 0) {
        *out = m->ctr[c];
    } else if (k >= 0) {
        *out = (m->cccr[k] & ~m->ovf_mask) | (m->ovf[k] ? m->ovf_mask : 0);
    } else {
        *out = m->escr[s];
    }
    mirror_after(vi, m);
    m->n_rdmsr++;
    trace_record(vi, P4_TR_RDMSR, msr, *out, 0, 0);
    return P4_PY_OK;
}

/* A CCCR or ESCR write that changes the programming: the registered programming it leads
 * to (programs.c), or -1: ask Python (none registered, a notice to give, or no programming
 * known now). */
static int mirror_prog_target(const struct p4c_mirror *m, int k, int s, uint64_t value)
{
    if (m->cur < 0 || prog_write_noticed(m, k, s, value)) return -1;
    return prog_find(m, k, s, value);
}

/* WRMSR of a counter value (all 40 bits, OVF unchanged: SDM 18.15.5.4), of a CCCR, or of an
 * ESCR.  A CCCR write that changes only OVF is served in place (clearing OVF ends the
 * request: docs/emulator.md, pmu.pmi_request); one that changes the configuration, and an
 * ESCR write, only when the result is a registered programming (programs.c).  Returns
 * P4_PY_OK or 0: ask Python (reserved bits: #GP; an unknown programming). */
static int mirror_wrmsr(unsigned vi, uint32_t msr, uint64_t value)
{
    struct p4c_mirror *m = mirror_for_access(vi);
    if (!m) return 0;
    int c = mirror_counter_index(m->ctr_msr, msr);
    int k = c < 0 ? mirror_counter_index(m->cccr_msr, msr) : -1;
    int s = c < 0 && k < 0 ? mirror_escr_index(m, msr) : -1;
    int ok = 0, target = -1;
    if (c >= 0) {
        ok = !(value & m->ctr_fault[c]);
    } else if (k >= 0) {
        ok = !(value & m->cccr_fault[k]);
        if (ok && ((value ^ m->cccr[k]) & ~m->ovf_mask)) {
            target = mirror_prog_target(m, k, -1, value);
            ok = target >= 0;
        }
    } else if (s >= 0) {
        ok = !(value & m->escr_fault[s]);
        if (ok && value != m->escr[s]) {
            target = mirror_prog_target(m, -1, s, value);
            ok = target >= 0;
        }
    }
    if (!ok || !mirror_consume(vi, m)) {
        mirror_declined(vi);
        return 0;
    }
    uint32_t counting = c >= 0 && m->run[c] ? P4_TR_COUNTING : 0;
    uint64_t old = c >= 0   ? m->ctr[c]
                   : k >= 0 ? (m->cccr[k] & ~m->ovf_mask) | (m->ovf[k] ? m->ovf_mask : 0)
                            : m->escr[s];
    if (c >= 0) {
        m->ctr[c] = value;
    } else if (k >= 0) {
        m->cccr[k] = value;
        uint8_t ovf = (value & m->ovf_mask) != 0;
        uint8_t armed = ovf ? m->armed[k] : 0;
        if (m->ovf[k] && !ovf && !m->armed[k] && m->pmi[k]) m->discarded[k]++;
        if (ovf != m->ovf[k] || armed != m->armed[k]) m->state_changes++;
        m->ovf[k] = ovf;
        m->armed[k] = armed;
    } else {
        m->escr[s] = value;
    }
    if (target >= 0) prog_switch(vi, m, target);
    mirror_after(vi, m);
    m->n_wrmsr++;
    trace_record(vi, P4_TR_WRMSR, msr, value, old, counting);
    return P4_PY_OK;
}

/* RDPMC (PMU.rdpmc): ECX[30:0] = counter 0-17, ECX[31] = fast read (EAX = bits 31:0, EDX =
 * 0).  A bad index is Python's (#GP with its reason). */
static int mirror_rdpmc(unsigned vi, uint32_t ecx, uint64_t *out)
{
    struct p4c_mirror *m = mirror_for_access(vi);
    if (!m) return 0;
    uint32_t index = ecx & 0x7FFFFFFFu;
    if (index >= P4_NCOUNTERS || !mirror_consume(vi, m)) {
        mirror_declined(vi);
        return 0;
    }
    uint64_t v = m->ctr[index];
    *out = (ecx >> 31) ? (v & 0xFFFFFFFFull) : v;
    mirror_after(vi, m);
    m->n_rdpmc++;
    trace_record(vi, P4_TR_RDPMC, ecx, *out, 0, 0);
    return P4_PY_OK;
}

/* A counting deadline (cb_sched, after fold_at_entry): Bridge.deadline's work.  Returns 1
 * when done here, 0: ask Python. */
int mirror_deadline(unsigned vi)
{
    struct p4c_mirror *m = mirror_of(vi);
    if (!m) return 0;
    if ((m->any_run && !mirror_table_ok(vi, m)) || !mirror_consume(vi, m)) {
        m->n_declined++;
        return 0;
    }
    mirror_after(vi, m);
    m->n_deadline++;
    return 1;
}

/* the bridge's PMU calls: the mirror first, Python when it declines */
int pmu_rdmsr(unsigned vi, uint32_t msr, uint64_t *out)
{
    int r = mirror_rdmsr(vi, msr, out);
    return r ? r : py_rdmsr(vi, msr, out);
}

int pmu_wrmsr(unsigned vi, uint32_t msr, uint64_t value)
{
    int r = mirror_wrmsr(vi, msr, value);
    return r ? r : py_wrmsr(vi, msr, value);
}

int pmu_rdpmc(unsigned vi, uint32_t ecx, uint64_t *out)
{
    int r = mirror_rdpmc(vi, ecx, out);
    return r ? r : py_rdpmc(vi, ecx, out);
}

/* ---------------------------------------------------------------------------------------- */
/* Functions Python calls (declared with ffi.cdef in build.py)                               */
/* ---------------------------------------------------------------------------------------- */

struct p4c_mirror *p4c_mirror(unsigned vi)
{
    return &p4.mirrors[vi];
}
