/*
 * p4pmu: dynamic block ends: the resolution of a block's outcome at the next block entry
 * (cb_xcheck), silent branch outcomes and their replay, and the dirty-list callback
 * (cb_first) (docs/guest-events.md, "Silent branch outcomes").
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "resolve.h"
#include "batch.h"
#include "blocks.h"
#include "counting.h"
#include "kinds.h"
#include "memory.h"
#include "predictor.h"
#include "registers.h"
#include "state.h"

/* The clock kind of a REP execution's final clock f (no memory fields): the last one
 * again when block, uops and end are the same (a REP run one iteration per execution),
 * else interned */
static uint32_t rep_kind(struct rep_state *rs, const struct blk *pb, uint64_t iters, uint64_t uops,
                         int done, const uint8_t *f)
{
    if (rs->memo_b == pb && rs->memo_iters == iters && rs->memo_uops == uops &&
        rs->memo_done == done) {
        return rs->memo_fk;
    }
    rs->memo_b = pb;
    rs->memo_iters = iters;
    rs->memo_uops = uops;
    rs->memo_done = (uint8_t)done;
    rs->memo_fk = kind_intern(f);
    return rs->memo_fk;
}

/* The uops of one execution of REP r that ran `iters` iterations: the instruction's uops
 * are its base and its iterations' (Insn.rep_uops: base + round(iterations x per-iteration
 * tenths / 10)) whether QEMU runs them in one execution of the block or in several (one
 * per iteration under icount): the base when the instruction ends (`done`, as the
 * instruction itself), the iterations' tenths carried from execution to execution */
static uint64_t rep_exec_uops(struct rep_state *rs, const struct insn_info *r, uint64_t iters,
                              int done)
{
    uint64_t t10 = rs->carry10 + (uint64_t)r->rep_iter10 * iters;
    uint64_t uops = t10 / 10;
    rs->carry10 = t10 % 10;
    if (done) {
        uops += r->uops + (rs->carry10 >= 5);
        rs->carry10 = 0;
    }
    return uops;
}

/* The fields of the final clock of a REP execution of `iters` iterations in which `uops` of
 * its uops retire (`done`: the instruction ends with it) */
static void rep_final_fields(const struct insn_info *r, uint64_t iters, uint64_t uops, int done,
                             struct clock_fields *f)
{
    memset(f, 0, sizeof(*f));
    f->f[KF_UOPS] = (uint8_t)uops;
    /* a REP string instruction is microcoded (clockmodel.microcoded): every uop comes from
     * the microcode ROM (p4.kinds->rep_full too), and its transfer to the ROM is counted once,
     * in the clock where it retires (QEMU may run its iterations in several executions of
     * the block; one interrupted and resumed counts one transfer too) */
    f->f[KF_MS_UOPS] = f->f[KF_UOPS];
    if (done) {
        f->f[KF_INSTR] = 1;
        f->f[KF_MS] = 1;
        f->f[KF_INSTR_LD] = r->loads > 0;
        f->f[KF_INSTR_ST] = r->stores > 0;
        f->f[KF_INSTR_LDST] = r->loads > 0 && r->stores > 0;
    }
    uint64_t ld = r->loads * iters, st = r->stores * iters;
    f->f[KF_LD] = ld > 255 ? 255 : (uint8_t)ld;
    f->f[KF_ST] = st > 255 ? 255 : (uint8_t)st;
}

/* A REP execution's clocks into the batch after the clock `prev` (ext kind): nfull full clocks
 * (p4.kinds->rep_full), then its final clock of kind fk; what the resolution added (c->res.seq,
 * c->res.last), W and W2 */
static void rep_account(struct vcpu_counting *c, int os, uint32_t prev, uint64_t nfull, uint32_t fk)
{
    const uint32_t full = ext(p4.kinds->rep_full, os);
    if (nfull) {
        acc_add(&c->batch, full, (int64_t)nfull);
        pair_hash_add(&c->batch.pairs, prev, full, 1);
        pair_hash_add(&c->batch.pairs, full, full, (int64_t)nfull - 1);
        prev = full;
    }
    acc_add(&c->batch, ext(fk, os), 1);
    pair_hash_add(&c->batch.pairs, prev, ext(fk, os), 1);
    acc_last_add(&c->batch, ext(fk, os), 1);
    c->res.last = ext(fk, os) + 1;
    if (nfull + 1 <= 64) {
        c->res.n = 0;
        for (uint64_t i = 0; i < nfull; i++)
            c->res.seq[c->res.n++] = full;
        c->res.seq[c->res.n++] = ext(fk, os);
    } else {
        c->res.n = -1;
    }
    c->sbase[SB_DEADLINE_CLOCKS] += nfull + 1;
    if (c->exact.on) {
        int64_t events = exact_increment(&p4.exact->sig, full, (int64_t)nfull) +
                         exact_increment(&p4.exact->sig, ext(fk, os), 1);
        c->sbase[SB_EXACT_EVENTS] += (uint64_t)events;
    }
}

static void rep_resolve(unsigned vi, struct vcpu_counting *c, uint32_t pid, const struct blk *pb,
                        uint64_t a_new, int regs_ok)
{
    const struct insn_info *r = &pb->ins[pb->n - 1];
    uint64_t mask = r->addr_size >= 8 ? ~0ull : r->addr_size == 4 ? 0xFFFFFFFFull : 0xFFFFull;
    uint64_t after = regs_ok ? (reg_read_rcx(&p4.vcpus[vi]) & mask) : 0;
    uint64_t iters = (c->res.rep.rcx - after) & mask;
    int done = a_new != r->addr;
    /* not done: the block entered now starts with this REP, and its cb_rep comes next */
    c->res.rep.known_addr = done || !regs_ok ? 0 : r->addr;
    c->res.rep.known_rcx = after;
    uint64_t uops = rep_exec_uops(&c->res.rep, r, iters, done);
    uint64_t nfull = uops ? (uops - 1) / P4P_RETIRE_WIDTH : 0;
    struct clock_fields f;
    rep_final_fields(r, iters, uops - P4P_RETIRE_WIDTH * nfull, done, &f);
    uint32_t prev = ext(pb->last_k, pb->os);
    c->mem.res_fin = 0;
    uint32_t fk;
    if (__builtin_expect(c->mem.mx.b != 0, 0)) {
        mem_rep_final(c, pid, pb, f.f, &prev);
        fk = kind_intern(f.f);
    } else {
        fk = rep_kind(&c->res.rep, pb, iters, uops, done, f.f);
    }
    rep_account(c, pb->os, prev, nfull, fk);
}

/* The outcome variant v (taken * 2 + mispredicted) of an execution of b as the last
 * resolved one; c->res.seq is filled only when a fold needs it (res_fill). */
static inline void res_set(struct vcpu_counting *c, uint32_t pid, const struct blk *b, unsigned v)
{
    (void)b; /* (res_fill looks it up) */
    c->res.b = pid;
    c->res.v = (int)v;
    c->res.n = RES_LAZY;
    c->mem.res_fin = 0;
}

/* c->res.seq and c->res.last of a lazily recorded resolution */
void res_fill(struct vcpu_counting *c)
{
    if (c->res.n != RES_LAZY) return;
    const struct blk *b = p4.blocks->by_id[c->res.b];
    unsigned v = (unsigned)c->res.v;
    c->res.n = 0;
    c->res.seq[c->res.n++] = ext(b->var[v], b->os);
    if (v & 1) {
        for (unsigned p = 0; p < p4.kinds->n_penalty && c->res.n < 64; p++)
            c->res.seq[c->res.n++] = ext(p4.kinds->penalty[p], b->os);
    }
    uint32_t e = ext(b->var[v], b->os);
    if (c->mem.res_fin) {
        c->res.seq[0] = c->mem.res_fin - 1; /* its memory fields (memory.c) */
        e = c->mem.res_fin - 1;
    }
    if ((v & 1) && p4.kinds->n_penalty) e = ext(p4.kinds->penalty[p4.kinds->n_penalty - 1], b->os);
    c->res.last = e + 1;
}

/* n outcomes of variant v of block b straight into the batch's accumulators (final clock,
 * its pair with the block's last static clock, penalty clocks, the execution end) */
void expand_outcomes(struct vcpu_counting *c, const struct blk *b, unsigned v, int64_t n)
{
    uint32_t e = ext(b->var[v], b->os);
    acc_add(&c->batch, e, n);
    pair_hash_add(&c->batch.pairs, ext(b->last_k, b->os), e, n);
    if (v & 1) {
        for (unsigned p = 0; p < p4.kinds->n_penalty; p++) {
            uint32_t pe = ext(p4.kinds->penalty[p], b->os);
            acc_add(&c->batch, pe, n);
            pair_hash_add(&c->batch.pairs, e, pe, n);
            e = pe;
        }
    }
    acc_last_add(&c->batch, e, n);
}

static void trace_line(const struct blk *b, uint64_t a_new, int taken, int pred, uint64_t n)
{
    const struct insn_info *last = &b->ins[b->n - 1];
    fprintf(p4.run->branch_trace, "%u %#llx %#llx %#llx %#llx %d %d %#llx %llu\n", b->end,
            (unsigned long long)last->addr, (unsigned long long)last->target,
            (unsigned long long)(last->addr + last->len), (unsigned long long)a_new, taken, pred,
            (unsigned long long)b->vaddr, (unsigned long long)n);
}

/*
 * A conditional-end block B that is silent-capable stores at its entry SB_SILENT_NEXT = the
 * address its branch reaches in the group's silent direction; every block S checks at its entry
 * "SB_SILENT_NEXT != S.vaddr" (cb_xcheck) before anything else. So an outcome in the silent
 * direction costs no callback; any other outcome, and every call, return, indirect branch and
 * REP end (SB_SILENT_NEXT = X_RESOLVE_AT_ENTRY), is resolved by the next block's cb_xcheck as
 * before. The silent outcomes of B are k = (B's executions in the batch) - (those accounted:
 * resolved, replayed, cut) - (the last one, if still pending), all in the same direction.
 *
 * Conditional predictor entries are independent (I5), so only the order of one entry's outcomes
 * matters. The silent outcomes of an entry are replayed before anything else touches it (an
 * explicit outcome, a fold, a deadline check). When several blocks end in branches using the
 * same entry, their silent outcomes interleave in an unknown order; that is harmless only while
 * the entry is saturated in the silent direction (all predicted, no change). Hence gates: every
 * member may run silently while the entry is saturated in the silent direction ("open" group),
 * else only one member, the owner. A member is gated by zeroing its execution counter (its
 * count moves to its bank word, SB_BANK0 + gate - 1): its next entry then fires cb_first (the
 * dirty-list callback, "counter == 0"), which makes it the owner after the previous owner's
 * silent outcomes were replayed (and banks that one). No extra operation per block. Silent
 * outcomes are therefore replayed exactly, in order, per entry. A block's executions in the
 * batch = counter + bank (en_total); only a gated member has a bank.
 *
 * W must not fall behind the clocks: an owner's silent outcomes can be mispredicted (at most
 * p4.cond_tab->mmax in a row from the entry's state); their penalty clocks are reserved in W
 * (group_state.resv, c->res.w_resv, also re-added by arm()) until the replay knows them.
 */
static inline struct group_state *group_state_of(struct resolve_vcpu *rv, uint32_t gid)
{
    struct group_state **ch = &rv->group_chunks[gid / GCHUNK];
    if (__builtin_expect(!*ch, 0)) *ch = calloc(GCHUNK, sizeof(struct group_state));
    return &(*ch)[gid % GCHUNK];
}

/* this vCPU's state of b's group (the pointer is kept in b's per-vCPU record) */
static inline struct group_state *block_group_state(struct resolve_vcpu *rv, const struct blk *b,
                                                    struct block_outcomes *r)
{
    if (__builtin_expect(!r->g, 0)) r->g = group_state_of(rv, b->gid);
    return r->g;
}

/* reserve in W the penalties the owner's coming silent outcomes (in the owner's own
 * direction) may have (branch-free: this runs at every explicit outcome) */
static inline void silent_reserve(struct vcpu_counting *c, struct group_state *g)
{
    unsigned want = p4.cond_tab->mmax[g->ot][g->oback][g->e];
    want = g->owner && !g->open ? want : 0;
    int64_t d = (int64_t)want - (int64_t)g->resv;
    c->sbase[SB_DEADLINE_CLOCKS] += (uint64_t)(d * (int64_t)p4.cond_tab->pen);
    c->res.w_resv += (uint64_t)d;
    g->resv = (uint8_t)want;
}

static inline void set_owner(struct group_state *g, uint32_t id)
{
    g->owner = id;
    g->oback = id ? p4.blocks->by_id[id]->back : 0;
    g->ot = id ? p4.blocks->by_id[id]->silent_t : 0;
}

/* the group may open (every member silent) when its entry is saturated in its direction,
 * unless a block of a previous direction may still run (directions.c) */
static inline int group_saturated(const struct pred_group *gr, const struct group_state *g)
{
    return g->e == (gr->silent_t ? 4u : 1u) && !gr->stale;
}

/* the trace of k silent outcomes as counted: the first m mispredicted (a run of identical
 * outcomes is mispredicted at its start only), then predicted ones */
static void trace_silent(const struct blk *b, unsigned m, int64_t k)
{
    int t = b->silent_t;
    uint64_t to = t ? b->btarget : b->bnext;
    if (m) trace_line(b, to, t, 0, m);
    if (k > (int64_t)m) trace_line(b, to, t, 1, (uint64_t)k - m);
}

/* Replay the silent outcomes of member b (block `id`) not yet accounted (`pending`: its
 * last execution has no outcome yet).  Returns the variant of the last one replayed, or -1.
 * Branch-free in the usual case (k is as often 0 as not). */
static inline __attribute__((always_inline)) int
catch_up_b(unsigned vi, struct vcpu_counting *c, uint32_t id, const struct blk *b, int pending)
{
    struct block_outcomes *r = &b->res[vi];
    uint64_t *sb = c->sbase;
    uint64_t nb = sb[SB_HDR + id] + sb[SB_BANK0 + b->gate - 1];
    int64_t k = (int64_t)nb - r->acc - pending;
    if (__builtin_expect(k < 0, 0)) {
        c->res.silent_bad++;
        return -1;
    }
    struct group_state *g = block_group_state(&c->res, b, r);
    int t = b->silent_t;
    unsigned x = (unsigned)g->e;
    unsigned kk = k < 3 ? (unsigned)k : 3;
    unsigned rp = p4.cond_tab->replay[t][b->back][x][kk];
    r->acc += k;
    g->dir[t] += (uint64_t)k;
    g->e = REPLAY_ENTRY(rp);
    unsigned m = REPLAY_MISPREDICTED(rp);
    if (__builtin_expect(p4.cond_tab->trace, 0) && k) trace_silent(b, m, k);
    if (__builtin_expect(nb != 0, 1)) {
        r->n[t * 2 + 1] += m;
        r->n[t * 2] += (uint64_t)k - m;
    } else {
        if (m) expand_outcomes(c, b, (unsigned)t * 2 + 1, m);
        if (k > (int64_t)m) expand_outcomes(c, b, (unsigned)t * 2, k - m);
    }
    sb[SB_DEADLINE_CLOCKS] += (uint64_t)m * p4.cond_tab->pen;
    c->res.silent += (uint64_t)k;
    /* the replay takes the direction b's outcomes took (a block translated before its
     * group's direction changed keeps the old one: directions.c); the reservation is the
     * owner's */
    silent_reserve(c, g);
    return k ? t * 2 + !REPLAY_LAST_PREDICTED(rp) : -1;
}

static int catch_up(unsigned vi, struct vcpu_counting *c, uint32_t id, int pending)
{
    return catch_up_b(vi, c, id, p4.blocks->by_id[id], pending);
}

/* open: every member's gate; close: every member's but `keep`'s (their silent outcomes
 * must have been replayed: they happened while the entry was saturated) */
static void group_gates(struct vcpu_counting *c, const struct pred_group *gr, int open,
                        uint32_t keep)
{
    uint32_t nm = __atomic_load_n(&gr->nmem, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < nm; i++) {
        uint32_t m = gr->mem[i];
        if (open || m == keep) gate_open(c, m);
        else gate_close(c, m);
    }
}

/* an open group: every member's silent outcomes (before an explicit outcome of block
 * `cur`, whose last execution is the one being resolved) */
static void catch_up_open(unsigned vi, struct vcpu_counting *c, const struct pred_group *gr,
                          uint32_t cur)
{
    uint32_t nm = __atomic_load_n(&gr->nmem, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < nm; i++) {
        uint32_t m = gr->mem[i];
        catch_up(vi, c, m, m == cur);
    }
}

/* the entry changed by an explicit outcome of block `cur` and is not saturated in the
 * silent direction any more, or is now: reorganise the gates (rare) */
static void group_change(struct vcpu_counting *c, const struct blk *pb, struct group_state *g,
                         uint32_t cur, int sat)
{
    const struct pred_group *gr = p4.blocks->groups[pb->gid];
    if (sat) {
        g->open = 1;
        set_owner(g, 0);
        group_gates(c, gr, 1, 0);
        return;
    }
    uint32_t own = pb->gate ? cur : g->owner;
    if (g->open) {
        g->open = 0;
        set_owner(g, own);
        group_gates(c, gr, 0, own);
    } else {
        if (g->owner) gate_close(c, g->owner);
        if (own) gate_open(c, own);
        set_owner(g, own);
    }
}

static __attribute__((noinline, cold)) void trace_fast(const struct blk *pb, uint64_t a_new,
                                                       int64_t k, unsigned u, int taken)
{
    if (k) trace_silent(pb, REPLAY_MISPREDICTED(u), k);
    trace_line(pb, a_new, taken, (int)REPLAY_LAST_PREDICTED(u), 1);
}

static void resolve_cond(unsigned vi, struct vcpu_counting *c, uint32_t pid, const struct blk *pb,
                         uint64_t a_new);

/* The usual case of resolve_cond in a few instructions: the group is closed, this block is
 * its owner, the entry does not become saturated, on the dirty list, no trace.  The same
 * arithmetic as catch_up_b + cond_step + silent_reserve, from one table (p4.cond_tab->fast).  Reads
 * the block's constants from the xcache entry (xc). */
static inline __attribute__((always_inline)) void
resolve_cond_fast(unsigned vi, struct vcpu_counting *c, uint32_t pid, const struct xcache *xc,
                  uint64_t a_new)
{
    struct block_outcomes *r = xc->r;
    struct group_state *g = xc->g;
    uint64_t *sb = c->sbase;
    uint64_t nb = sb[SB_HDR + pid];
    int64_t k = (int64_t)nb - r->acc - 1;
    if (__builtin_expect(g->open || g->owner != pid || !nb || k < 0, 0)) {
        resolve_cond(vi, c, pid, p4.blocks->by_id[pid], a_new);
        return;
    }
    uint64_t taken = a_new == xc->btarget || xc->btarget == xc->bnext;
    uint64_t t = xc->t;
    /* (all 64-bit: a narrower spill and a wider reload of the table entry stalled here) */
    uint64_t u = p4.cond_tab->fast[t][xc->back][g->e][k < 3 ? k : 3][taken];
    if (__builtin_expect(u >> 8, 0)) { /* saturated: the group opens */
        resolve_cond(vi, c, pid, p4.blocks->by_id[pid], a_new);
        return;
    }
    if (__builtin_expect(p4.cond_tab->trace, 0)) {
        trace_fast(p4.blocks->by_id[pid], a_new, k, (unsigned)u, (int)taken);
    }
    uint64_t m = (u >> 3) & 3u, mis = !((u >> 5) & 1u), want = (u >> 6) & 3u;
    g->e = u & 7u;
    r->n[t * 2 + 1] += m;
    r->n[t * 2] += (uint64_t)k - m;
    uint64_t v = taken * 2 + mis;
    r->n[v]++;
    g->dir[t] += (uint64_t)k;
    g->dir[taken]++;
    r->acc = (int64_t)nb;
    int64_t d = (int64_t)want - (int64_t)g->resv;
    sb[SB_DEADLINE_CLOCKS] += (uint64_t)(((int64_t)(m + mis) + d) * (int64_t)p4.cond_tab->pen);
    c->res.w_resv += (uint64_t)d;
    g->resv = (uint8_t)want;
    c->res.b = pid;
    c->res.v = (int)v;
    c->res.n = RES_LAZY;
    c->mem.res_fin = 0;
    c->res.resolutions++;
    c->res.silent += (uint64_t)k;
}

static void resolve_cond(unsigned vi, struct vcpu_counting *c, uint32_t pid, const struct blk *pb,
                         uint64_t a_new)
{
    int taken = a_new == pb->btarget || pb->btarget == pb->bnext;
    c->res.resolutions++;
    struct block_outcomes *r = &pb->res[vi];
    struct group_state *g = block_group_state(&c->res, pb, r);
    if (__builtin_expect(g->open, 0)) {
        catch_up_open(vi, c, p4.blocks->groups[pb->gid], pid);
    } else {
        if (__builtin_expect(g->owner != pid && g->owner, 0)) catch_up(vi, c, g->owner, 0);
        if (pb->gate) catch_up_b(vi, c, pid, pb, 1);
    }
    int pred = cond_step(&g->e, pb->back, taken);
    g->dir[taken]++;
    unsigned v = (unsigned)(taken * 2 + !pred);
    if (__builtin_expect(p4.cond_tab->trace, 0)) trace_line(pb, a_new, taken, pred, 1);
    r->acc++;
    uint64_t *sb = c->sbase;
    if (__builtin_expect(en_total(c, pid) != 0, 1)) r->n[v]++;
    else expand_outcomes(c, pb, v, 1);
    sb[SB_DEADLINE_CLOCKS] += (uint64_t)!pred * p4.cond_tab->pen;
    if (!pb->gate) sb[SB_EXACT_EVENTS] += (uint64_t)!pred * c->exact.pen[pb->os ? 1 : 0];
    res_set(c, pid, pb, v);
    if (__builtin_expect(c->mem.mx.b != 0, 0)) mem_resolved(vi, c, pid, pb, v);
    /* (the group's direction: a block translated before it changed may have the other
     * one, directions.c) */
    int sat = group_saturated(p4.blocks->groups[pb->gid], g);
    if (__builtin_expect(sat != g->open || (!sat && pb->gate && g->owner != pid), 0)) {
        group_change(c, pb, g, pid, sat);
    }
    silent_reserve(c, g);
}

/* Before the group's silent direction changes (a flush, every vCPU stopped, every silent
 * outcome replayed): no member runs silently any more, no reservation is held for one */
void group_release(struct vcpu_counting *c, uint32_t gid)
{
    struct group_state *g = group_state_of(&c->res, gid);
    group_gates(c, p4.blocks->groups[gid], 0, 0);
    g->open = 0;
    set_owner(g, 0);
    silent_reserve(c, g); /* (no owner: releases what is held) */
    g->dir[0] = g->dir[1] = 0;
}

/* Before group gid's direction changes on vCPU vi (directions.c; none of its members runs
 * or has an outcome pending): every member's silent outcomes replayed, then released */
void group_retire(unsigned vi, struct vcpu_counting *c, uint32_t gid)
{
    const struct pred_group *gr = p4.blocks->groups[gid];
    uint32_t nm = __atomic_load_n(&gr->nmem, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < nm; i++) {
        uint32_t m = gr->mem[i];
        catch_up(vi, c, m, cur_pending(c, m));
    }
    group_release(c, gid);
}

/* the outcome counts of every group of this vCPU start again */
void group_counts_reset(struct resolve_vcpu *rv)
{
    for (uint32_t k = 0; k < MAX_GROUPS / GCHUNK; k++) {
        struct group_state *ch = rv->group_chunks[k];
        if (!ch) continue;
        for (uint32_t i = 0; i < GCHUNK; i++)
            ch[i].dir[0] = ch[i].dir[1] = 0;
    }
}

/* this vCPU's state of group gid, if it has one */
const struct group_state *group_state_peek(const struct resolve_vcpu *rv, uint32_t gid)
{
    struct group_state *ch = rv->group_chunks[gid / GCHUNK];
    return ch ? &ch[gid % GCHUNK] : NULL;
}

/* The outcome of a call, return or indirect branch end of block pid, which is on the dirty
 * list: counted per variant in its outcome record (expanded at the fold). */
static void resolve_listed(unsigned vi, struct vcpu_counting *c, uint32_t pid, const struct blk *pb,
                           uint64_t a_new)
{
    const struct insn_info *last = &pb->ins[pb->n - 1];
    struct block_outcomes *r = &pb->res[vi];
    uint64_t nxt = last->addr + last->len;
    int taken = 1, pred = 1;
    switch (pb->end) {
    case BRK_CALL:
        pred_call(&c->pred, nxt);
        break;
    case BRK_CALL_IND:
    case BRK_JMP_IND:
        if (!r->pidx) {
            uint64_t k = P4P_BTB_ENTRIES ? last->addr % (P4P_BTB_ENTRIES ? P4P_BTB_ENTRIES : 1)
                                         : last->addr;
            r->pidx = pred_entry_of(&c->pred, &c->pred.btb, k);
        }
        pred = pred_ind_e(pred_entry(&c->pred, r->pidx), a_new);
        if (pb->end == BRK_CALL_IND) pred_call(&c->pred, nxt);
        break;
    case BRK_RET:
        pred = pred_ret(&c->pred, a_new);
        break;
    default:
        return;
    }
    if (p4.run->branch_trace) trace_line(pb, a_new, taken, pred, 1);
    unsigned v = (unsigned)(taken * 2 + !pred);
    r->n[v]++;
    res_set(c, pid, pb, v);
    if (__builtin_expect(c->mem.mx.b != 0, 0)) mem_resolved(vi, c, pid, pb, v);
    if (!pred) {
        c->sbase[SB_DEADLINE_CLOCKS] += p4.kinds->n_penalty;
        c->sbase[SB_EXACT_EVENTS] += c->exact.pen[pb->os ? 1 : 0]; /* exact_weight */
    }
}

/* One taken outcome (predicted or not) of block pb's end straight into the accumulators:
 * the final clock, its penalty clocks, the execution end (c->res.seq, c->res.last: the clocks
 * it added). */
static void account_taken(struct vcpu_counting *c, const struct blk *pb, int pred)
{
    const int os = pb->os, taken = 1;
    uint32_t fin = pb->var[taken * 2 + !pred];
    acc_add(&c->batch, ext(fin, os), 1);
    pair_hash_add(&c->batch.pairs, ext(pb->last_k, os), ext(fin, os), 1);
    uint32_t lastk = fin;
    c->res.n = 0;
    c->res.seq[c->res.n++] = ext(fin, os);
    if (!pred) {
        for (unsigned p = 0; p < p4.kinds->n_penalty; p++) {
            acc_add(&c->batch, ext(p4.kinds->penalty[p], os), 1);
            pair_hash_add(&c->batch.pairs, ext(lastk, os), ext(p4.kinds->penalty[p], os), 1);
            lastk = p4.kinds->penalty[p];
            if (c->res.n < 64) c->res.seq[c->res.n++] = ext(lastk, os);
        }
        c->sbase[SB_DEADLINE_CLOCKS] += p4.kinds->n_penalty;
        c->sbase[SB_EXACT_EVENTS] += c->exact.pen[os ? 1 : 0];
    }
    acc_last_add(&c->batch, ext(lastk, os), 1);
    c->res.last = ext(lastk, os) + 1;
}

/* The outcome of block pid's dynamic end: the next instruction is at a_new (regs_ok: the
 * registers are the ones right after it, for REP's RCX). */
void resolve(unsigned vi, struct vcpu_counting *c, uint32_t pid, uint64_t a_new, int regs_ok)
{
    const struct blk *pb = p4.blocks->by_id[pid];
    const struct insn_info *last = &pb->ins[pb->n - 1];
    int pred = 1;
    if (pb->end == BRK_COND) {
        resolve_cond(vi, c, pid, pb, a_new);
        return;
    }
    c->res.resolutions++;
    c->res.b = pid;
    if (pb->res && c->sbase[SB_HDR + pid]) {
        resolve_listed(vi, c, pid, pb, a_new);
        return;
    }
    switch (pb->end) {
    case BRK_CALL:
        pred_call(&c->pred, last->addr + last->len);
        break;
    case BRK_CALL_IND:
        pred = pred_ind(&c->pred, last->addr, a_new);
        pred_call(&c->pred, last->addr + last->len);
        break;
    case BRK_JMP_IND:
        pred = pred_ind(&c->pred, last->addr, a_new);
        break;
    case BRK_RET:
        pred = pred_ret(&c->pred, a_new);
        break;
    case END_REP:
        rep_resolve(vi, c, pid, pb, a_new, regs_ok);
        return;
    default:
        return;
    }
    if (p4.run->branch_trace) trace_line(pb, a_new, 1, pred, 1);
    account_taken(c, pb, pred);
    c->mem.res_fin = 0;
    if (__builtin_expect(c->mem.mx.b != 0, 0)) {
        mem_resolved(vi, c, pid, pb, 2u + !pred);
        if (c->mem.res_fin) {
            c->res.seq[0] = c->mem.res_fin - 1;
            if (pred || !p4.kinds->n_penalty) c->res.last = c->mem.res_fin;
        }
    }
}

/* At the entry of block S, after cb_xcheck's place: the previous block's outcome is decided
 * (resolved, or silent when SB_SILENT_NEXT == S.vaddr); account a silent one now, so that a fold
 * or a set_pc here sees it.  SB_SILENT_NEXT = X_ACCOUNTED afterwards (S stores its own value if
 * it runs). */
void entry_settle(unsigned vi, struct vcpu_counting *c)
{
    uint64_t *sb = c->sbase;
    if (sb[SB_SILENT_NEXT] == X_ACCOUNTED) return;
    sb[SB_SILENT_NEXT] = X_ACCOUNTED;
    uint32_t prev = (uint32_t)sb[SB_CURRENT_BLOCK];
    if (!prev || !p4.blocks->by_id[prev]->gate) return;
    int v = catch_up(vi, c, prev, 0);
    if (v >= 0) res_set(c, prev, p4.blocks->by_id[prev], (unsigned)v);
}

/* every dirty (and the carried) silent-capable block: replay what is not yet accounted;
 * the current block's last execution stays pending if its outcome is */
void silent_catch_up_all(unsigned vi, struct vcpu_counting *c)
{
    for (uint32_t i = 0; i < c->batch.ndirty; i++) {
        uint32_t id = c->batch.dirty[i];
        if (p4.blocks->by_id[id]->gate) catch_up(vi, c, id, cur_pending(c, id));
    }
    uint32_t cb = c->res.carry_b;
    if (cb && !en_total(c, cb)) catch_up(vi, c, cb, cur_pending(c, cb));
}

/* before a batch is closed (fold_close): all silent outcomes in, and the per-batch
 * bookkeeping restarted where the block counters restart (an execution whose outcome is
 * still pending is carried into the next batch) */
void silent_before_fold(unsigned vi, struct vcpu_counting *c)
{
    uint64_t *sb = c->sbase;
    silent_catch_up_all(vi, c);
    for (uint32_t i = 0; i < c->batch.ndirty; i++) {
        const struct blk *b = p4.blocks->by_id[c->batch.dirty[i]];
        if (b->end == BRK_COND) b->res[vi].acc = -cur_pending(c, c->batch.dirty[i]);
    }
    uint32_t cur = (uint32_t)sb[SB_CURRENT_BLOCK];
    if (c->res.carry_b && c->res.carry_b != cur && !en_total(c, c->res.carry_b)) {
        p4.blocks->by_id[c->res.carry_b]->res[vi].acc = 0;
    }
    c->res.carry_b = cur && p4.blocks->by_id[cur]->gate && cur_pending(c, cur) ? cur : 0;
}

static void member_entry(unsigned vi, struct vcpu_counting *c, uint32_t id, const struct blk *b);
static void stale_entry(unsigned vi, struct vcpu_counting *c, uint32_t id, const struct blk *b);

void cb_first(unsigned int vi, void *ud)
{
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    const struct blk *b = p4.blocks->by_id[(uint32_t)(uintptr_t)ud];
    if (b->gate) {
        /* a gated member: executions banked in this batch mean it is listed already */
        int listed = *bank_w(c, b) != 0;
        if (__builtin_expect(b->gen != p4.blocks->groups[b->gid]->flips, 0))
            stale_entry(vi, c, (uint32_t)(uintptr_t)ud, b);
        else member_entry(vi, c, (uint32_t)(uintptr_t)ud, b);
        if (listed) return;
    }
    if (c->batch.ndirty == MAX_DIRTY) {
        /* cannot happen: the fold request below empties the list first */
        return;
    }
    c->batch.dirty[c->batch.ndirty++] = (uint32_t)(uintptr_t)ud;
    if (c->batch.ndirty == MAX_DIRTY - 1 && !c->deadline.force_fold) {
        c->deadline.force_fold = 1;
        c->sbase[SB_DEADLINE_CLOCKS] += SB_FORCE_FIRE;
    }
}

/* block entry, conditional on SB_SILENT_NEXT != this block's address: the previous block's outcome
 * was not silent (or it was a call, return, indirect branch, REP, far transfer, or followed
 * by a discontinuity): resolve it with this block as its successor */
static struct xcache *xcache_of(unsigned vi, struct blk *b)
{
    if (!vi) return &b->xc0;
    struct xcache *v = __atomic_load_n(&b->xcv, __ATOMIC_ACQUIRE);
    if (!v) {
        struct xcache *n = calloc((size_t)p4.n_vcpus_max, sizeof(*n));
        if (!__atomic_compare_exchange_n(&b->xcv, &v, n, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            free(n); /* another vCPU was first: v holds its array */
        } else {
            v = n;
        }
    }
    return &v[vi - 1];
}

void cb_xcheck(unsigned int vi, void *ud)
{
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    uint64_t *sb = c->sbase;
    struct blk *b = ud; /* this block */
    uint64_t vaddr = b->vaddr;
    uint64_t x = sb[SB_SILENT_NEXT];
    sb[SB_SILENT_NEXT] = X_ACCOUNTED;
    c->cpl_os = b->os; /* every CPL change passes here (far transfers, interrupts, faults) */
    if (x == X_ACCOUNTED) return;
    uint32_t prev = (uint32_t)sb[SB_CURRENT_BLOCK];
    if (__builtin_expect(c->res.resolutions >= c->dir.look_at, 0))
        p4.up.directions_update(vi, c, b, prev);
    if (!prev) return;
    const struct xcache *xc = vi ? (b->xcv ? &b->xcv[vi - 1] : NULL) : &b->xc0;
    if (__builtin_expect(xc && xc->prev == prev, 1)) {
        /* the silent-capable block resolved here last time, going the same way */
        resolve_cond_fast(vi, c, prev, xc, vaddr);
        return;
    }
    const struct blk *pb = p4.blocks->by_id[prev];
    if (pb->end == BRK_COND && (vaddr == pb->btarget || vaddr == pb->bnext)) {
        if (pb->gate && vaddr != (pb->silent_t ? pb->btarget : pb->bnext)) {
            struct xcache *w = xcache_of(vi, b);
            struct block_outcomes *r = &pb->res[vi];
            *w = (struct xcache){
                prev,        pb->silent_t, pb->back, {0, 0},
                pb->btarget, pb->bnext,    r,        block_group_state(&c->res, pb, r)};
            resolve_cond_fast(vi, c, prev, w, vaddr);
        } else {
            resolve_cond(vi, c, prev, pb, vaddr);
        }
        return;
    }
    int j = abandoned_insn(pb, vaddr);
    if (__builtin_expect(j != 0, 0)) {
        p4.up.cut_abandoned(vi, c, prev, (unsigned)j);
        return;
    }
    if (pb->end == BRK_COND) resolve_cond(vi, c, prev, pb, vaddr);
    else if (dyn_end(pb)) resolve(vi, c, prev, vaddr, 1);
}

/* Entry of a silent-capable block whose counter is 0 (cb_first): the first execution in
 * the batch, or the block is gated (its group is not open and it is not the owner).  Replay
 * the owner's silent outcomes, then open the group (entry saturated) or take over as the
 * owner (the previous owner is gated). */
static void member_entry(unsigned vi, struct vcpu_counting *c, uint32_t id, const struct blk *b)
{
    entry_settle(vi, c);
    struct group_state *g = block_group_state(&c->res, b, &b->res[vi]);
    if (g->open) {
        gate_open(c, id); /* (a member that joined the group while it was open) */
        return;
    }
    uint32_t o = g->owner;
    if (o == id) return;
    c->res.gates++;
    const struct pred_group *gr = p4.blocks->groups[b->gid];
    if (o) catch_up(vi, c, o, 0);
    if (group_saturated(gr, g)) {
        g->open = 1;
        set_owner(g, 0);
        group_gates(c, gr, 1, 0);
    } else {
        if (o) gate_close(c, o);
        set_owner(g, id);
        gate_open(c, id);
    }
    silent_reserve(c, g);
}

/* Entry of a block whose group changed direction after it joined (its translation should
 * have been dropped: directions.c), at its first execution since it was gated: it runs
 * silently in its own direction, and is not a member that an open group's replays see.  The
 * group closes (every member's silent outcomes replayed first) and stays closed until the
 * next flush, which this asks for; this block becomes the owner, as a member would. */
static void stale_entry(unsigned vi, struct vcpu_counting *c, uint32_t id, const struct blk *b)
{
    entry_settle(vi, c);
    struct pred_group *gr = p4.blocks->groups[b->gid];
    struct group_state *g = block_group_state(&c->res, b, &b->res[vi]);
    gr->stale = 1;
    p4.up.directions_stale_ran(id);
    if (g->open) {
        catch_up_open(vi, c, gr, 0);
        g->open = 0;
        set_owner(g, 0);
        group_gates(c, gr, 0, 0);
    }
    uint32_t o = g->owner;
    if (o != id) {
        c->res.gates++;
        if (o) {
            catch_up(vi, c, o, 0);
            gate_close(c, o);
        }
        set_owner(g, id);
        gate_open(c, id);
    }
    silent_reserve(c, g);
}

/* REP string instruction about to run: remember RCX */
void cb_rep(unsigned int vi, void *ud)
{
    const struct blk *b = p4.blocks->by_id[(uint32_t)(uintptr_t)ud];
    const struct insn_info *r = &b->ins[b->n - 1];
    uint64_t mask = r->addr_size >= 8 ? ~0ull : r->addr_size == 4 ? 0xFFFFFFFFull : 0xFFFFull;
    struct rep_state *rs = &p4.run->per_vcpu[vi].res.rep;
    if (rs->known_addr == r->addr) {
        rs->known_addr = 0;
        rs->rcx = rs->known_rcx;
        return;
    }
    rs->rcx = reg_read_rcx(bridge_vcpu(vi)) & mask;
}
