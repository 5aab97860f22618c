/*
 * p4pmu: the programmings a vCPU's register mirror may switch between without Python
 * (docs/bridge.md, "Programming writes in C").
 *
 * A driver that multiplexes the PMU between tasks (Linux perf at every context switch) keeps
 * writing the same few sets of CCCR and ESCR values: disable these counters, program and
 * enable those.  Python derives what the mirror needs of a programming (the running set,
 * the per-kind increment table, the budget rates, the outcome-free flag) and registers it
 * here when it hands the fast path over (Feeder.enable_fast_path).  A later CCCR or ESCR
 * write whose result is a registered programming is then served in C: the pending fold is
 * consumed under the old programming (mirror.c), the register takes its value, and the
 * mirror switches to the registered programming's derived state.  Python decodes the
 * registers that changed at its next call (Feeder.disable_fast_path), so the Python model
 * stays the authority for everything else.
 *
 * Only programmings Python registered are reached, and Python registers only simple ones
 * (Feeder.mirror_rule) that raise no notice; a write the hardware faults is never served
 * (a fault is a function of the register and the value: the fault masks).
 */
#include <string.h>

#include "programs.h"
#include "counting.h"
#include "flush.h"
#include "kinds.h"
#include "state.h"

/* FNV-1a over the 64-bit words of a programming (CCCRs without OVF, then the ESCRs); never
 * 0, which marks an empty slot */
static uint64_t prog_hash(const uint64_t *cccr, const uint64_t *escr, uint32_t nescr)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int n = 0; n < P4_NCOUNTERS; n++)
        h = (h ^ cccr[n]) * 0x100000001b3ull;
    for (uint32_t s = 0; s < nescr; s++)
        h = (h ^ escr[s]) * 0x100000001b3ull;
    return h ? h : 1;
}

void p4c_prog_commit(unsigned vi, int slot)
{
    struct p4c_mirror *m = &p4.mirrors[vi];
    struct p4c_prog *p = &m->progs[slot];
    p->hash = prog_hash(p->cccr, p->escr, m->nescr);
}

/* The registered programming that is the current one with CCCR k (k >= 0) or ESCR slot s
 * (s >= 0) set to `value`, or -1.  Its table must cover the kinds known now when counters
 * run (the mirror serves only what Python would compute the same way). */
int prog_find(const struct p4c_mirror *m, int k, int s, uint64_t value)
{
    uint64_t cccr[P4_NCOUNTERS], escr[P4_NESCRS];
    for (int n = 0; n < P4_NCOUNTERS; n++)
        cccr[n] = m->cccr[n] & ~m->ovf_mask;
    memcpy(escr, m->escr, sizeof(escr));
    if (k >= 0) cccr[k] = value & ~m->ovf_mask;
    if (s >= 0) escr[s] = value;
    uint64_t h = prog_hash(cccr, escr, m->nescr);
    uint32_t nk = 2 * __atomic_load_n(&p4.kinds->n, __ATOMIC_ACQUIRE);
    for (int i = 0; i < P4_PROGS; i++) {
        const struct p4c_prog *p = &m->progs[i];
        if (p->hash != h || memcmp(p->cccr, cccr, sizeof(cccr)) ||
            memcmp(p->escr, escr, m->nescr * sizeof(uint64_t))) {
            continue;
        }
        if (p->any_run && (!p->winc || p->nkext != nk)) return -1;
        return i;
    }
    return -1;
}

/* Would the write raise one of Python's notices (emulator/notices.py)?  A CCCR write that
 * changes the configuration of a counter enabled before and after it; an ESCR write that
 * changes the event or mask under an enabled counter.  Those writes go to Python. */
int prog_write_noticed(const struct p4c_mirror *m, int k, int s, uint64_t value)
{
    const struct p4c_prog *cur = &m->progs[m->cur];
    if (k >= 0) {
        return (m->cccr[k] & m->cccr_enable_bit) && (value & m->cccr_enable_bit) &&
               ((m->cccr[k] ^ value) & ~m->ovf_mask & 0xFFFFFFFFull);
    }
    if (!((m->escr[s] ^ value) & m->escr_event_bits)) return 0;
    for (int n = 0; n < P4_NCOUNTERS; n++) {
        if (cur->escr_of[n] == s && (m->cccr[n] & m->cccr_enable_bit)) return 1;
    }
    return 0;
}

/* Make registered programming i the one in force: the mirror's derived state and what the
 * next fold and deadline read (the per-kind table, the outcome-free flag). */
void prog_switch(unsigned vi, struct p4c_mirror *m, int i)
{
    const struct p4c_prog *p = &m->progs[i];
    struct p4c_out *o = &p4.run->fold_out[vi];
    memcpy(m->run, p->run, sizeof(m->run));
    memcpy(m->pmi, p->pmi, sizeof(m->pmi));
    memcpy(m->rate_b, p->rate_b, sizeof(m->rate_b));
    memcpy(m->tmax, p->tmax, sizeof(m->tmax));
    m->any_run = p->any_run;
    if (p->any_run) {
        o->winc = p->winc;
        o->nkext = p->nkext;
        m->nkext = p->nkext;
    }
    o->lite = p->lite;
    o->mem = p->mem;
    o->wmem = p->wmem;
    mem_update(); /* (a programming that counts memory-side events: the level at once) */
    m->cur = i;
    m->prog_changes++;
    m->n_switches++;
}
