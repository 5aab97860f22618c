/*
 * p4pmu: clock kinds (one kind = one clock's fields, clockmodel.FIELDS) interned in a
 * global table; the clock schedule of instructions (clockmodel.schedule) and the kind
 * sequences of portions of a block execution (docs/guest-events.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "messages.h"
#include "kinds.h"
#include "counting.h"
#include "state.h"


static uint32_t khash_of(const uint8_t *f)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < KF_N; i++) {
        h = (h ^ f[i]) * 1099511628211ull;
    }
    return (uint32_t)(h >> 20);
}

/* Intern a clock's fields; returns the kind id.  Lock-free lookup of published kinds is not
 * attempted: callers hold p4.run->lock (translation) or call at init. */
static uint32_t kind_intern_locked(const uint8_t *f)
{
    uint32_t i = khash_of(f) & (2 * MAX_KINDS - 1);
    for (;;) {
        uint32_t e = p4.kinds->hash[i];
        if (!e) {
            break;
        }
        if (!memcmp(p4.kinds->fields[e - 1], f, KF_N)) {
            return e - 1;
        }
        i = (i + 1) & (2 * MAX_KINDS - 1);
    }
    if (p4.kinds->n >= MAX_KINDS) {
        if (!p4.kinds->full_warned++) {
            p4_message("p4pmu: warning: more than %u distinct clock kinds; further ones are "
                       "counted as empty clocks\n",
                       MAX_KINDS);
        }
        return p4.kinds->empty;
    }
    uint32_t id = p4.kinds->n;
    memcpy(p4.kinds->fields[id], f, KF_N);
    __atomic_store_n(&p4.kinds->n, id + 1, __ATOMIC_RELEASE);
    p4.kinds->hash[i] = id + 1;
    return id;
}

uint32_t kind_intern(const uint8_t *f)
{
    pthread_mutex_lock(&p4.run->lock);
    uint32_t k = kind_intern_locked(f);
    pthread_mutex_unlock(&p4.run->lock);
    return k;
}

/* kind k with the counts of a return to user code after an exception added
 * (clockmodel.RETURN_TAIL; with k = p4.kinds->empty: clockmodel.return_tail_clock) */
uint32_t kind_with_return_tail(uint32_t k)
{
    uint8_t f[KF_N];
    memcpy(f, p4.kinds->fields[k], KF_N);
    static const int tail[] = {KF_INSTR_X, KF_INSTR_CX, KF_BR_X};
    for (unsigned i = 0; i < sizeof(tail) / sizeof(tail[0]); i++) {
        if (f[tail[i]] < 255) f[tail[i]]++;
    }
    return kind_intern(f);
}

/* clockmodel.microcoded: the microcode ROM delivers this instruction's uops */
static inline int microcoded(const struct insn_info *in)
{
    return (in->flags & CI_REP) || in->uops > P4P_MS_ROM_ABOVE;
}

static void attrs(struct clock_fields *c, const struct insn_info *in, int ms)
{
    int ld = in->loads > 0, st = in->stores > 0;
#define ADDF(k, v)                             \
    do {                                       \
        unsigned t_ = c->f[k] + (unsigned)(v); \
        c->f[k] = t_ > 255 ? 255 : t_;         \
    } while (0)
    ADDF(KF_INSTR, 1);
    ADDF(KF_INSTR_X, in->dup);
    ADDF(KF_MS, ms);
    ADDF(KF_INSTR_LD, ld);
    ADDF(KF_INSTR_ST, st);
    ADDF(KF_INSTR_LDST, ld && st);
    ADDF(KF_LD, in->loads);
    ADDF(KF_ST, in->stores);
    for (int i = 0; i < FPI_N; i++) {
        ADDF(KF_X87 + i, in->fp[i]);
    }
}

/* One pass of the schedule (clockmodel._schedule): ready[r] is the clock index from which
 * tracked register r may be read (0: any), updated. */
static unsigned schedule_pass(const struct insn_info *ins, unsigned a, unsigned e,
                              struct clock_fields *out, unsigned cap, uint16_t *at, uint32_t *ready)
{
    unsigned n = 0;
    int open = 0;
    struct clock_fields cur;
    for (unsigned j = a; j < e; j++) {
        const struct insn_info *in = &ins[j];
        unsigned need = 0;
        for (uint64_t m = in->rmask; m; m &= m - 1) {
            unsigned r = (unsigned)__builtin_ctzll(m);
            if (ready[r] > need) need = ready[r];
        }
        if (((in->flags & CI_ALIGN) || in->stall || need > n) && open) {
            if (n < cap) out[n++] = cur;
            open = 0;
        }
        unsigned issue = need > n ? need : n; /* its inputs are ready (its stall runs meanwhile) */
        unsigned delay = issue - n;
        if (in->stall > delay) delay = in->stall;
        for (unsigned l = 0; l < delay; l++) {
            if (n < cap) {
                memset(&out[n], 0, sizeof(out[n]));
                n++;
            }
        }
        unsigned u = in->uops;
        int ms = microcoded(in);
        for (;;) {
            if (!open) {
                memset(&cur, 0, sizeof(cur));
                open = 1;
            }
            unsigned take = P4P_RETIRE_WIDTH - cur.f[KF_UOPS];
            if (take > u) take = u;
            cur.f[KF_UOPS] += take;
            if (ms) cur.f[KF_MS_UOPS] += take;
            u -= take;
            if (!u) break;
            if (n < cap) out[n++] = cur;
            open = 0;
        }
        attrs(&cur, in, ms);
        if (at) at[j - a] = (uint16_t)n;
        for (uint64_t m = in->wmask; m; m &= m - 1) {
            unsigned r = (unsigned)__builtin_ctzll(m);
            ready[r] = in->rlat >= 2 ? issue + in->rlat : 0;
        }
        if (cur.f[KF_UOPS] == P4P_RETIRE_WIDTH || (in->flags & CI_ALIGN)) {
            if (n < cap) out[n++] = cur;
            open = 0;
        }
    }
    if (open && n < cap) out[n++] = cur;
    return n;
}

/* Schedule instructions [a, e) of b into clocks (no bubble, no outcome).  Returns the number
 * of clocks written to out (at most cap; the caller sizes it generously).  at (if not NULL):
 * at[j - a] = the index of the clock instruction j retires in (clockmodel.schedule_retiring).
 * A whole block that jumps back to its first instruction is scheduled again with what its
 * previous iteration left outstanding (clockmodel.self_loop; docs/timing.md). */
unsigned schedule(const struct insn_info *ins, unsigned a, unsigned e, struct clock_fields *out,
                  unsigned cap, uint16_t *at)
{
    uint32_t ready[P4_NREGS];
    memset(ready, 0, sizeof(ready));
    unsigned n = schedule_pass(ins, a, e, out, cap, at, ready);
    const struct insn_info *last = e > a ? &ins[e - 1] : NULL;
    if (a != 0 || !last || (last->br != BRK_COND && last->br != BRK_JMP) ||
        last->target != ins[0].addr) {
        return n;
    }
    unsigned shift = n + P4P_BUBBLE;
    uint32_t carried[P4_NREGS];
    int any = 0;
    for (unsigned r = 0; r < P4_NREGS; r++) {
        carried[r] = ready[r] > shift ? ready[r] - shift : 0;
        any |= carried[r] != 0;
    }
    if (!any) return n;
    return schedule_pass(ins, a, e, out, cap, at, carried);
}

unsigned sched_cap(const struct blk *b)
{
    unsigned c = 4 + P4P_BUBBLE;
    for (unsigned j = 0; j < b->n; j++) {
        c += b->ins[j].uops + b->ins[j].stall + b->ins[j].rlat + 1;
    }
    return c;
}

/* The kind sequences of the portions split by PMU accesses recur at every access (a block
 * and its instructions never change, interning is idempotent): a small direct-mapped cache
 * per thread keeps the last ones, so an access does not schedule and intern again. */
#define PSEQ_CACHE 256

struct pseq_entry {
    const struct blk *b;
    unsigned a, e, n;
    uint32_t *s;
};

static __thread struct pseq_entry tl_pseq[PSEQ_CACHE];

unsigned portion_seq(const struct blk *b, unsigned a, unsigned e, const uint32_t **seq)
{
    uintptr_t h = ((uintptr_t)b >> 4) * 31u + a * 7u + e;
    struct pseq_entry *x = &tl_pseq[h % PSEQ_CACHE];
    if (x->b != b || x->a != a || x->e != e) {
        free(x->s);
        x->n = portion_seq_calc(b, a, e, &x->s);
        x->b = b;
        x->a = a;
        x->e = e;
    }
    *seq = x->s;
    return x->n;
}

unsigned portion_seq_calc(const struct blk *b, unsigned a, unsigned e, uint32_t **seq)
{
    unsigned cap = sched_cap(b);
    struct clock_fields *c = malloc(sizeof(*c) * cap);
    uint32_t *s = malloc(sizeof(*s) * (cap + P4P_BUBBLE));
    unsigned n = 0;
    if (a == 0) {
        for (int i = 0; i < P4P_BUBBLE; i++) {
            s[n++] = p4.kinds->bubble;
        }
    }
    unsigned a0 = pos_insn(a);
    if (e == b->n && b->end == END_REP) e = b->n - 1;
    unsigned m = e > a0 ? schedule(b->ins, a0, e, c, cap, NULL) : 0;
    if (e == b->n && (b->end == BRK_JMP || b->end == BRK_FAR) && m) {
        c[m - 1].f[KF_BR] = b->end;
        c[m - 1].f[KF_TAKEN] = 1;
    }
    if (e == b->n && b->lite_cond && m) {
        c[m - 1].f[KF_BR] = BRK_COND; /* not taken, predicted (the outcome-free level) */
    }
    if (e == b->n && dyn_end(b) && b->end != END_REP && m) {
        m--; /* the final clock is dynamic */
    }
    pthread_mutex_lock(&p4.run->lock);
    for (unsigned i = 0; i < m; i++) {
        s[n++] = kind_intern_locked(c[i].f);
    }
    pthread_mutex_unlock(&p4.run->lock);
    free(c);
    *seq = s;
    return n;
}
