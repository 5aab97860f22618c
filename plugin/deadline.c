/*
 * p4pmu: deadlines: the W accumulator's arming, the exact deadline W2, the C-side deadline
 * check (fast_check), the deadline callbacks and what follows a Python (or mirror) step
 * (docs/guest-events.md, "Exact deadlines").
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "deadline.h"
#include "control.h"
#include "blocks.h"
#include "counting.h"
#include "flush.h"
#include "fold.h"
#include "kinds.h"
#include "mirror.h"
#include "pmi.h"
#include "python_calls.h"
#include "registers.h"
#include "resolve.h"
#include "trace.h"
#include "state.h"

/* the clocks before watched counter w may have received `events` more: at its largest
 * per-clock increment (the clock budget of W) */
static inline int64_t watch_clocks(const struct p4c_out *o, int w, int64_t events)
{
    int64_t rate = o->wrate[w] > 0 ? o->wrate[w] : 1;
    return (events + rate - 1) / rate;
}

/* does the increment table of fold output `o` give counter `ctr` the signature's increments?
 * Any counter may: W2 adds the signature's events per kind, which are ctr's when the columns
 * are equal (the two logical processors of a core count the same events on different
 * counters: Linux's P4 driver gives thread 1 counter 14 where thread 0 has 12). */
static int exact_matches(const struct p4c_out *o, int ctr)
{
    const struct exact_signature *g = &p4.exact->sig;
    if (!o->winc) return 0;
    uint32_t nk = o->nkext < g->nk ? o->nkext : g->nk;
    for (uint32_t e = 0; e < nk; e++) {
        if (o->winc[(size_t)e * P4_NCOUNTERS + ctr] != g->col[e]) return 0;
    }
    /* kinds the signature does not know are weighted at its rate: no new kind may exceed it */
    for (uint32_t e = nk; e < o->nkext; e++) {
        if (o->winc[(size_t)e * P4_NCOUNTERS + ctr] > g->rate) return 0;
    }
    return 1;
}

/* a deadline check caused by counter n (W's budget or W2's): a vote for exact_vote */
static inline void exact_note(struct exact_vcpu *x, int n)
{
    if (n >= 0 && n < P4_NCOUNTERS) {
        x->votes[n]++;
        x->steps++;
    }
}

/* The first signature: the same candidate W2_STREAK steps in a row (with the same table). */
static void exact_first(struct exact_vcpu *x, const struct p4c_out *o, int cand)
{
    if (x->cand == o->widx[cand] && x->cand_winc == o->winc && x->cand_nk == o->nkext) {
        x->streak++;
    } else {
        x->cand = o->widx[cand];
        x->cand_winc = o->winc;
        x->cand_nk = o->nkext;
        x->streak = 1;
    }
    if (x->streak >= W2_STREAK) {
        x->streak = 0;
        exact_request(o, cand);
    }
}

/* P4PMU_DEBUG: a vCPU replaces the signature with counter `top`: where its column differs */
static void exact_move_note(const struct exact_vcpu *x, const struct p4c_out *o, int top)
{
    const struct exact_signature *g = &p4.exact->sig;
    uint32_t e = 0, nk = o->nkext < g->nk ? o->nkext : g->nk;
    while (e < nk && o->winc[(size_t)e * P4_NCOUNTERS + top] == g->col[e])
        e++;
    DBG("exact: a vCPU replaces the signature (counter %d) with counter %d (counters with the "
        "signature's column %#x; kinds %u and %u, first difference at %u: %d and %d)\n",
        g->ctr, top, x->key_match, o->nkext, g->nk, e,
        e < nk ? o->winc[(size_t)e * P4_NCOUNTERS + top] : -1, e < nk ? g->col[e] : -1);
}

/* Replacing a signature: which counter caused most of the last W2_WINDOW deadline checks
 * (W's by the counter that set its clock budget, W2's by the signature's: exact_note).  By
 * checks, not steps in a row or accesses: a sampling counter is not watched between its
 * overflow and its handler's reload and a profiler's counter is off while other tasks run,
 * so another counter (a watchdog's) drives the steps in between, but it costs no checks. */
static void exact_vote(struct exact_vcpu *x, const struct p4c_out *o)
{
    if (x->steps < W2_WINDOW) return;
    int top = 0;
    for (int n = 1; n < P4_NCOUNTERS; n++) {
        if (x->votes[n] > x->votes[top]) top = n;
    }
    int slot = -1;
    for (int w = 0; w < o->nwatch; w++) {
        if (o->widx[w] == top && !(o->wmem >> top & 1)) slot = w;
    }
    /* (a counter with the signature's column is watched by W2 already: exact_take_up) */
    int move = !(x->key_match >> top & 1) && slot >= 0 && x->votes[top] * 3 >= 2 * x->steps;
    memset(x->votes, 0, sizeof(x->votes));
    x->steps = 0;
    if (move && p4.debug) exact_move_note(x, o, top);
    if (move) exact_request(o, slot);
}

/* Take up the installed signature if one of this vCPU's watched counters has its increments
 * (W2 watches that counter; of several, the nearest to its limit); returns its watched slot
 * or -1.  Which counters match is cached per increment table (a flush clears the cache). */
static int exact_take_up(struct exact_vcpu *x, const struct p4c_out *o)
{
    if (x->key_winc != o->winc || x->key_nk != o->nkext) {
        x->key_winc = o->winc;
        x->key_nk = o->nkext;
        x->key_match = 0;
        for (int n = 0; n < P4_NCOUNTERS; n++) {
            if (exact_matches(o, n)) x->key_match |= 1u << n;
        }
    }
    int slot = -1;
    for (int w = 0; w < o->nwatch; w++) {
        /* (a counter whose increments memory outcomes change gets no W2) */
        int n = o->widx[w];
        int usable = (x->key_match >> n & 1) && !(o->wmem >> n & 1);
        if (usable && (slot < 0 || o->whead[w] < o->whead[slot])) slot = w;
    }
    if (slot < 0) return -1;
    x->on = 1;
    for (int os = 0; os < 2; os++) {
        x->pen[os] = (uint32_t)(p4.exact->sig.pen[os] > 0 ? p4.exact->sig.pen[os] : 0);
    }
    x->slot = slot;
    x->left = o->whead[slot];
    x->fresh = 1;
    return slot;
}

/* A new signature was installed (flush.c flush_installed; all vCPUs stopped): W2 stops for
 * every vCPU until its next step takes the new one up.  A vCPU whose W left W2's counter out
 * (exact_budget) must not run on that budget: its next block entry checks every watched
 * counter (cb_sched, fast_check). */
void exact_drop(struct vcpu_counting *c)
{
    uint64_t *sb = c->sbase;
    if (c->exact.on && c->deadline.py_left > 0) {
        c->deadline.py_left = 1;
        if (sb[SB_DEADLINE_CLOCKS] < SB_FIRES_AT) sb[SB_DEADLINE_CLOCKS] = SB_FIRES_AT;
    }
    c->exact.on = 0;
    c->exact.pen[0] = c->exact.pen[1] = 0;
    c->exact.key_winc = NULL;
    sb[SB_EXACT_EVENTS] = 0;
}

/* After a step (Python or the mirror wrote the vCPU's fold output `o`; the batch was just
 * folded): is this vCPU's deadline counter the signature's?  Then W2 watches it, with its
 * headroom.  Else count how long the same counter has driven the deadline, and install it as
 * the signature when it has for long enough. */
void exact_update(struct vcpu_counting *c, const struct p4c_out *o)
{
    c->exact.on = 0;
    c->exact.pen[0] = c->exact.pen[1] = 0;
    c->deadline.w_driver = -1;
    if (!p4.run->exact_on || !p4.run->instrument || o->nwatch <= 0 || !o->winc || o->budget <= 0)
        return;
    /* the counter that drives the clock deadline (one whose increments memory outcomes
     * change is no W2 candidate: W2's weights are fixed at translation) */
    int cand = -1;
    int64_t best = INT64_MAX;
    for (int w = 0; w < o->nwatch; w++) {
        if (o->wmem >> o->widx[w] & 1) continue;
        int64_t clk = watch_clocks(o, w, o->whead[w]);
        if (clk < best) {
            best = clk;
            cand = w;
        }
    }
    int slot = p4.exact->active ? exact_take_up(&c->exact, o) : -1;
    /* the counter that sets W's clock budget (W2's is left out: exact_budget) */
    int drv = -1;
    best = INT64_MAX;
    for (int w = 0; w < o->nwatch; w++) {
        int64_t clk = watch_clocks(o, w, o->whead[w]);
        if (w != slot && clk < best) {
            best = clk;
            drv = w;
        }
    }
    c->deadline.w_driver = drv >= 0 ? o->widx[drv] : -1;
    if (cand < 0 || p4.run->flush_pending || p4.exact->flushes >= W2_MAX_FLUSHES) return;
    if (p4.exact->active) {
        exact_vote(&c->exact, o);
    } else {
        exact_first(&c->exact, o, cand);
    }
}

/* W2 watches its counter exactly: W's clock deadline covers only the other watched
 * counters (what fast_check leaves in py_left), not W2's at its most events per clock */
static void exact_budget(struct vcpu_counting *c, const struct p4c_out *o)
{
    if (!c->exact.on || c->deadline.py_left <= 0) return;
    int64_t best = INT64_MAX;
    for (int w = 0; w < o->nwatch; w++) {
        if (w == c->exact.slot) continue;
        int64_t clk = watch_clocks(o, w, o->whead[w]);
        if (clk < best) best = clk;
    }
    c->deadline.py_left = best > 0 ? best : 1;
}

/* Arm W: fire after min(py_left, PMI_RECHECK if a request is asserted) clocks from now;
 * `rest` clocks already added to W belong after this point. */
void arm(struct vcpu_counting *c, int64_t rest)
{
    uint64_t *sb = c->sbase;
    int64_t h = c->deadline.py_left > 0 ? c->deadline.py_left : (int64_t)(SB_FIRES_AT >> 2);
    if (c->deadline.pmi_level && p4.run->pmi_on && h > PMI_RECHECK) h = PMI_RECHECK;
    if (h > (int64_t)(SB_FIRES_AT >> 2)) h = (int64_t)(SB_FIRES_AT >> 2);
    c->deadline.w_base = SB_FIRES_AT - (uint64_t)h;
    /* + the penalties reserved for silent branch outcomes not yet replayed; + SB_FORCE_FIRE while
     * cb_first's fold request is pending (cb_sched takes it off again) */
    sb[SB_DEADLINE_CLOCKS] = c->deadline.w_base + (uint64_t)rest +
                             c->res.w_resv * p4.kinds->n_penalty +
                             (c->deadline.force_fold ? SB_FORCE_FIRE : 0);
    if (!c->exact.on) {
        sb[SB_EXACT_EVENTS] = 0; /* idle: 2^62 events away */
    } else if (c->exact.fresh) {
        /* c->exact.left counts from the fold or check just made; after an access inside a block
         * (rest > 0), the rest of that block runs in the next batch but its W2 increment
         * is in already: add the whole increment again (it may only fire early) */
        uint32_t cur = (uint32_t)sb[SB_CURRENT_BLOCK];
        int64_t h = c->exact.left > 0 ? c->exact.left : 0;
        if (h > (int64_t)(SB_FIRES_AT >> 2)) h = (int64_t)(SB_FIRES_AT >> 2);
        sb[SB_EXACT_EVENTS] = SB_FIRES_AT - (uint64_t)h +
                              (rest > 0 && cur ? p4.blocks->by_id[cur]->exact_add : 0);
        c->exact.fresh = 0;
    }
    /* else: W2 keeps counting from its last arming */
}

/* The interrupt requests a step left in o->pmi: this LP's (lp) delivered here, the sibling's
 * (threads=2) handed to it.  Returns 1 if an interrupt was delivered to this vCPU. */
static int deliver_requests(unsigned vi, const struct p4c_out *o, int lp)
{
    int delivered = 0;
    if (!p4.run->pmi_on) return 0;
    for (int t = 0; t < p4.run->threads; t++) {
        if (!o->pmi[t]) continue;
        if (t == lp) {
            delivered |= pmi_deliver_here(vi) == 1;
        } else if (vcpu_started(vi ^ 1)) {
            sibling_pmi(vi, vi ^ 1);
        }
    }
    return delivered;
}

/* After a step of vCPU vi's PMU (Python or the mirror wrote its fold output): its deadlines,
 * the translation levels, W armed (`rest_clocks` already added to W belong after this point),
 * the interrupts raised.  Returns 1 if an interrupt was delivered to this vCPU. */
int after_python(unsigned vi, struct vcpu_counting *c, int64_t rest_clocks)
{
    struct p4c_out *o = &p4.run->fold_out[vi];
    if (o->start) {
        o->start = 0;
        if (p4.run->count_mode && !p4.run->instrument && !p4.run->start_requested) counting_start();
    }
    c->deadline.py_left = o->budget > 0 ? o->budget : -1;
    int lp = p4.run->threads == 2 ? (int)(vi & 1) : 0;
    c->deadline.pmi_level = o->pmi[lp] != 0;
    exact_update(c, o);
    exact_budget(c, o);
    lite_update();
    mem_update();
    arm(c, rest_clocks);
    return deliver_requests(vi, o, lp);
}


static const struct pensum *pen_sum(unsigned vi, const struct p4c_out *o)
{
    struct pensum *p = &p4.run->penalty_sums[vi];
    if (p->winc != o->winc || p->nkext != o->nkext) {
        p->winc = o->winc;
        p->nkext = o->nkext;
        p->ok = 1;
        memset(p->v, 0, sizeof(p->v));
        for (int os = 0; os < 2; os++) {
            for (unsigned q = 0; q < p4.kinds->n_penalty; q++) {
                uint32_t pe = ext(p4.kinds->penalty[q], os);
                if (pe >= o->nkext) {
                    p->ok = 0;
                    break;
                }
                const int32_t *row = o->winc + (size_t)pe * P4_NCOUNTERS;
                for (int k = 0; k < P4_NCOUNTERS; k++)
                    p->v[os][k] += row[k];
            }
        }
    }
    return p;
}

/* The dirty-block sums of vCPU vi for the table and watched counters of `o`, emptied when
 * they were made for another table, watch list or batch. */
static struct dirty_sums *dirty_sums_for(unsigned vi, const struct vcpu_counting *c,
                                         const struct p4c_out *o)
{
    struct dirty_sums *d = &p4.run->dirty_sums[vi];
    int same = d->winc == o->winc && d->nkext == o->nkext && d->nw == o->nwatch &&
               d->folds == c->fold.folds &&
               !memcmp(d->widx, o->widx, sizeof(int32_t) * (size_t)o->nwatch);
    if (!same) {
        d->winc = o->winc;
        d->nkext = o->nkext;
        d->nw = o->nwatch;
        memcpy(d->widx, o->widx, sizeof(int32_t) * (size_t)o->nwatch);
        d->folds = c->fold.folds;
        d->n = 0;
    }
    return d;
}

/* Entry `i` of d: the events block b adds to each watched counter per execution (static part)
 * and per final-clock variant, then a mask of the parts whose kinds are beyond the table
 * (bit 4: the static part, bit v: variant v).  Returns 0 when out of memory. */
#define DS_STRIDE(nw) (5 * (size_t)(nw) + 1)
static int dirty_sums_fill(struct dirty_sums *d, uint32_t i, const struct blk *b,
                           const struct p4c_out *o, const struct pensum *pen)
{
    const int nw = d->nw;
    const size_t stride = DS_STRIDE(nw);
    size_t need = stride * ((size_t)i + 1);
    if (need > d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 4096;
        while (cap < need)
            cap *= 2;
        int64_t *v = realloc(d->v, sizeof(int64_t) * cap);
        if (!v) return 0;
        d->v = v;
        d->cap = cap;
    }
    int64_t *e = d->v + stride * i;
    memset(e, 0, sizeof(int64_t) * stride);
    const int32_t *inc = o->winc;
    for (uint32_t k = 0; k < b->nk; k++) {
        uint32_t x = ext(b->hk[k], b->os);
        if (x >= o->nkext) {
            e[stride - 1] |= 16;
            break;
        }
        const int32_t *row = inc + (size_t)x * P4_NCOUNTERS;
        for (int w = 0; w < nw; w++)
            e[w] += (int64_t)b->hc[k] * row[d->widx[w]];
    }
    for (unsigned v = 0; v < 4 && b->res; v++) {
        uint32_t x = ext(b->var[v], b->os);
        if (x >= o->nkext) {
            e[stride - 1] |= 1 << v;
            continue;
        }
        const int32_t *row = inc + (size_t)x * P4_NCOUNTERS;
        for (int w = 0; w < nw; w++) {
            e[nw * (1 + v) + w] = row[d->widx[w]] +
                                  ((v & 1) ? pen->v[b->os ? 1 : 0][d->widx[w]] : 0);
        }
    }
    return 1;
}

/* U[w]: the events of watched counter w in the activity not yet folded (dirty blocks,
 * their counted outcomes, the accumulators), from the per-kind table.  Each dirty block's
 * per-execution events are summed once per batch (dirty_sums): a long batch of many blocks,
 * checked often (a sampling counter with a short period), is not re-summed kind by kind at
 * every check.  Returns 0 when a kind is beyond the table. */
static int unfolded_events(unsigned vi, const struct vcpu_counting *c, const struct p4c_out *o,
                           const struct pensum *pen, int64_t *U)
{
    const int32_t *inc = o->winc;
    const int nw = o->nwatch;
    const uint32_t nk = o->nkext;
    struct dirty_sums *d = dirty_sums_for(vi, c, o);
    for (uint32_t i = 0; i < c->batch.ndirty; i++) {
        uint32_t id = c->batch.dirty[i];
        const struct blk *b = p4.blocks->by_id[id];
        if (i >= d->n) {
            if (!dirty_sums_fill(d, i, b, o, pen)) return 0;
            d->n = i + 1;
        }
        const int64_t *e = d->v + DS_STRIDE(nw) * i;
        const int64_t beyond = e[DS_STRIDE(nw) - 1];
        int64_t n = (int64_t)en_total(c, id);
        if (n) {
            if (beyond & 16) return 0;
            for (int w = 0; w < nw; w++)
                U[w] += n * e[w];
        }
        if (!b->res) continue;
        const struct block_outcomes *r = &b->res[vi];
        for (unsigned v = 0; v < 4; v++) {
            int64_t m = (int64_t)r->n[v];
            if (!m) continue;
            if (beyond & (1 << v)) return 0;
            for (int w = 0; w < nw; w++)
                U[w] += m * e[nw * (1 + v) + w];
        }
    }
    for (uint32_t i = 0; i < c->batch.ntouched; i++) {
        uint32_t e = c->batch.touched[i];
        if (!c->batch.acc[e]) continue;
        if (e >= nk) return 0;
        for (int w = 0; w < nw; w++)
            U[w] += c->batch.acc[e] * inc[(size_t)e * P4_NCOUNTERS + o->widx[w]];
    }
    return 1;
}

/* N[w]: the most events of watched counter w one execution of block `next` can add.
 * Returns 0 when that is unbounded (REP) or a kind is beyond the table. */
static int next_block_events(const struct blk *next, const struct p4c_out *o,
                             const struct pensum *pen, int64_t *N)
{
    const int32_t *inc = o->winc;
    const int nw = o->nwatch;
    const uint32_t nk = o->nkext;
    if (next->end == END_REP) return 0;
    for (uint32_t k = 0; k < next->nk; k++) {
        uint32_t e = ext(next->hk[k], next->os);
        if (e >= nk) return 0;
        for (int w = 0; w < nw; w++)
            N[w] += (int64_t)next->hc[k] * inc[(size_t)e * P4_NCOUNTERS + o->widx[w]];
    }
    for (int w = 0; w < nw; w++) {
        /* memory outcomes may change any clock of it: the most per clock, every clock */
        if (o->wmem >> o->widx[w] & 1) N[w] = (int64_t)o->wrate[w] * (int64_t)maxclk(next);
    }
    for (int w = 0; w < nw && next->res; w++) {
        if (o->wmem >> o->widx[w] & 1) continue;
        int64_t m = 0;
        for (unsigned v = 0; v < 4; v++) {
            uint32_t e = ext(next->var[v], next->os);
            if (e >= nk) return 0;
            int64_t x = inc[(size_t)e * P4_NCOUNTERS + o->widx[w]];
            if (v & 1) x += pen->v[next->os ? 1 : 0][o->widx[w]];
            if (x > m) m = x;
        }
        N[w] += m;
    }
    return 1;
}

/* Deadline check without Python: the increments of the activity not yet folded, computed
 * from the per-kind tables Python left in p4.run->fold_out[vi].  Returns the clocks that may
 * safely pass from here (> 0), or 0 when Python must look (an overflow may have happened,
 * unknown kinds, or the next block may overflow). */
static int64_t fast_check(unsigned vi, struct vcpu_counting *c, const struct blk *next)
{
    struct p4c_out *o = &p4.run->fold_out[vi];
    int nw = o->nwatch;
    if (nw <= 0 || !o->winc) return 0;
    c->deadline.fast_checks++;
    c->deadline.fast_scanned += c->batch.ndirty;
    silent_catch_up_all(vi, c); /* the silent branch outcomes so far */
    const struct pensum *pen = pen_sum(vi, o);
    if (!pen->ok) return 0;
    int64_t U[P4_NCOUNTERS], N[P4_NCOUNTERS];
    memset(U, 0, sizeof(U));
    memset(N, 0, sizeof(N));
    if (!unfolded_events(vi, c, o, pen, U) || !next_block_events(next, o, pen, N)) return 0;
    int64_t best = INT64_MAX;
    for (int w = 0; w < nw; w++) {
        int64_t r = o->whead[w] - U[w];
        /* the next block may take it over the edge: Python steps that block alone.  An
         * order-free change (p4c_out.wfree) needs no such step: Python only once it may
         * have happened.  Its head is one event, so the clock budget below is one clock
         * and the next block's entry is checked again */
        if (o->wfree >> o->widx[w] & 1 ? r <= 0 : r <= N[w]) return 0;
        if (c->exact.on && w == c->exact.slot) {
            /* W2 watches it exactly: events left before `next` runs */
            c->exact.left = r;
            c->exact.fresh = 1;
            continue;
        }
        int64_t clk = watch_clocks(o, w, r);
        if (clk < best) best = clk;
    }
    c->deadline.fast_deadlines++;
    return best > 0 ? best : 1;
}

static void deadline_step(unsigned vi, struct vcpu_counting *c, uint32_t id);

/* W fired at the entry of block b (mx: the most clocks it can add): the clocks since the last
 * arming leave Python's budget (py_left); when b may take the rest of it, the C check looks
 * (unless a step is `need`ed anyway).  Returns 1 if the PMU must step before b runs. */
static int budget_check(unsigned vi, struct vcpu_counting *c, const struct blk *b, uint64_t mx,
                        int need)
{
    uint64_t *sb = c->sbase;
    /* clocks since the last arm; this block might take the deadline */
    int64_t elapsed = (int64_t)(sb[SB_DEADLINE_CLOCKS] - c->deadline.w_base);
    c->deadline.w_base = sb[SB_DEADLINE_CLOCKS];
    if (c->deadline.py_left <= 0) return need;
    c->deadline.py_left -= elapsed;
    if (c->deadline.py_left > (int64_t)mx || need) return need;
    exact_note(&c->exact, c->deadline.w_driver);
    int64_t ok = fast_check(vi, c, b);
    if (ok <= 0) return 1;
    c->deadline.py_left = ok;
    return 0;
}

/* no step due: only a look at the LVT (the request is still asserted), W armed again */
static void pmi_recheck(unsigned vi, struct vcpu_counting *c)
{
    int got = c->deadline.pmi_level && p4.run->pmi_on ? pmi_deliver_here(vi) : 0;
    arm(c, 0);
    if (got == 1) {
        c->batch.entry_b = 0;
        qemu_plugin_set_pc(reg_read(bridge_vcpu(vi), p4.regs.rip));
    }
}

/* block entry, conditional on W >= 2^62: a pending block end to resolve, a deadline, or a
 * fold request */
void cb_sched(unsigned int vi, void *ud)
{
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    uint64_t *sb = c->sbase;
    uint32_t id = (uint32_t)(uintptr_t)ud;
    const struct blk *b = p4.blocks->by_id[id];
    if (__builtin_expect(c->deadline.force_fold, 0)) control_hold(vi); /* a stop on its way */
    c->cpl_os = b->os;
    if (trace_of(vi)) trace_block_entry(vi, c, b->vaddr);
    int need = 0;
    if (c->deadline.force_fold) {
        c->deadline.force_fold = 0;
        sb[SB_DEADLINE_CLOCKS] -= SB_FORCE_FIRE;
        need = 1;
    }
    uint64_t mx = maxclk(b);
    if (sb[SB_DEADLINE_CLOCKS] + mx < SB_FIRES_AT && !need) return;
    entry_settle(vi, c); /* the previous block's outcome, before a fold or a set_pc */
    if (budget_check(vi, c, b, mx, need)) deadline_step(vi, c, id);
    else pmi_recheck(vi, c);
}

/* block entry, conditional on W2 >= 2^62 - exact_max: the exact-deadline counter may reach its
 * limit in this block (W2's increments are upper bounds): decide exactly */
void cb_exact_deadline(unsigned int vi, void *ud)
{
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    uint32_t id = (uint32_t)(uintptr_t)ud;
    const struct blk *b = p4.blocks->by_id[id];
    if (!c->exact.on) {
        c->sbase[SB_EXACT_EVENTS] = 0;
        return;
    }
    c->cpl_os = b->os;
    c->exact.checks++;
    exact_note(&c->exact, p4.run->fold_out[vi].widx[c->exact.slot]);
    entry_settle(vi, c);
    int64_t ok = fast_check(vi, c, b);
    if (ok > 0) {
        /* not yet: fast_check re-computed the events left (and the clock budget of the
         * other watched counters) */
        c->deadline.py_left = ok;
        arm(c, 0);
        return;
    }
    deadline_step(vi, c, id);
}

/* a deadline at the entry of block `id`, before it runs: fold, the mirror or Python steps
 * the PMU, and an interrupt it raises is taken before the block */
static void deadline_step(unsigned vi, struct vcpu_counting *c, uint32_t id)
{
    c->deadline.deadlines++;
    fold_at_entry(vi, c, id);
    uint8_t ovf[P4_NCOUNTERS];
    int watch = control_breaks();
    if (watch) control_snap(vi, ovf);
    if (!mirror_deadline(vi) && py_deadline(vi) != P4_PY_OK) {
        /* (reported by the bridge) tried again later: a passing failure loses no interrupt
         * for longer, a lasting one costs a call per retry */
        p4.run->fold_out[vi].budget = P4_DEADLINE_RETRY;
    }
    if (watch) control_overflows(vi, ovf, -1, p4.blocks->by_id[id]->vaddr);
    if (after_python(vi, c, 0)) {
        /* take the interrupt before this block runs (its counting ops have not run yet);
         * the next batch starts with the handler's first block, not this one */
        c->batch.next_first = 0;
        c->batch.entry_b = 0;
        qemu_plugin_set_pc(reg_read(bridge_vcpu(vi), p4.regs.rip));
    }
}
