/*
 * p4pmu: folds: the activity since the last fold closed into a vCPU's p4c_out (joint
 * histogram over (kind, CPL), adjacent pairs, totals) at a block entry, a PMU access or
 * between blocks (docs/guest-events.md); with threads=2, the core's clock timeline the folded
 * clocks join (SDM Vol. 3B 18.16).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "messages.h"
#include "fold.h"
#include "batch.h"
#include "blocks.h"
#include "counting.h"
#include "cuts.h"
#include "kinds.h"
#include "memory.h"
#include "resolve.h"
#include "state.h"

/* threads=2: one clock timeline per core (docs/guest-events.md I8).  Each LP has a local
 * clock that its own clocks advance; the core's clock is the larger of the two.  A clock of
 * an LP at or before the core's clock coincides with a clock the sibling already put on the
 * timeline (both LPs ran in it: one core clock, SDM 18.16 -- the LPs share the core's clock);
 * only the clocks beyond it are new core clocks.  A halted LP's local clock stands still;
 * when it runs again it joins the core's clock (lp_resync).  Returns the batch's shared
 * clocks (its first ones, in time). */
void lp_resync(unsigned vi, struct fold_vcpu *f)
{
    if (p4.run->threads != 2 || !p4.run->core_clock) return;
    uint64_t core = __atomic_load_n(&p4.run->core_clock[vi >> 1], __ATOMIC_SEQ_CST);
    if (!f->lclk_on || f->lclk < core) f->lclk = core;
    f->lclk_on = 1;
}

int64_t lp_timeline(unsigned vi, struct fold_vcpu *f, int64_t clocks)
{
    if (p4.run->threads != 2 || !p4.run->core_clock || clocks <= 0) return 0;
    if (!f->lclk_on) lp_resync(vi, f); /* the LP's first clocks start at the core's clock */
    uint64_t *cc = &p4.run->core_clock[vi >> 1];
    f->lclk += (uint64_t)clocks;
    uint64_t cur = __atomic_load_n(cc, __ATOMIC_SEQ_CST);
    while (cur < f->lclk &&
           !__atomic_compare_exchange_n(cc, &cur, f->lclk, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    int64_t fresh = cur < f->lclk ? (int64_t)(f->lclk - cur) : 0;
    return fresh >= clocks ? 0 : clocks - fresh;
}

static void out_push(struct fold_vcpu *f, uint32_t e, int64_t n)
{
    if (f->o_n == f->o_cap) {
        f->o_cap *= 2;
        f->o_ext = realloc(f->o_ext, sizeof(uint32_t) * f->o_cap);
        f->o_cnt = realloc(f->o_cnt, sizeof(int64_t) * f->o_cap);
    }
    f->o_ext[f->o_n] = e;
    f->o_cnt[f->o_n++] = n;
}

static void out_pair(struct fold_vcpu *f, uint32_t a, uint32_t b, int64_t n)
{
    if (f->o_np == f->o_pcap) {
        f->o_pcap *= 2;
        f->o_pa = realloc(f->o_pa, sizeof(uint32_t) * f->o_pcap);
        f->o_pb = realloc(f->o_pb, sizeof(uint32_t) * f->o_pcap);
        f->o_pn = realloc(f->o_pn, sizeof(int64_t) * f->o_pcap);
    }
    f->o_pa[f->o_np] = a;
    f->o_pb[f->o_np] = b;
    f->o_pn[f->o_np++] = n;
}

/* The dirty blocks' executions and the outcomes the fast resolution path counted per block,
 * into the batch's accumulators; the block counters restart.  `pairs`: with the blocks'
 * internal adjacent pairs. */
static void fold_blocks(unsigned vi, struct vcpu_counting *c, int pairs)
{
    uint64_t *sb = c->sbase;
    for (uint32_t i = 0; i < c->batch.ndirty; i++) {
        uint32_t id = c->batch.dirty[i];
        uint64_t n = en_total(c, id);
        if (!n) continue;
        sb[SB_HDR + id] = 0;
        const struct blk *b = p4.blocks->by_id[id];
        if (b->gate) *bank_w(c, b) = 0;
        for (uint32_t k = 0; k < b->nk; k++)
            acc_add(&c->batch, ext(b->hk[k], b->os), (int64_t)(n * b->hc[k]));
        for (uint32_t k = 0; k < b->np && pairs; k++)
            pair_hash_add(&c->batch.pairs, ext(b->pa[k], b->os), ext(b->pb[k], b->os),
                          (int64_t)(n * b->pc[k]));
        c->batch.firsts[b->os ? 1 : 0] += (int64_t)n;
        c->fold.insn_total += n * b->n;
        if (!dyn_end(b)) acc_last_add(&c->batch, ext(b->last_k, b->os), (int64_t)n);
    }
    for (uint32_t i = 0; i < c->batch.ndirty; i++) {
        const struct blk *b = p4.blocks->by_id[c->batch.dirty[i]];
        if (!b->res) continue;
        struct block_outcomes *r = &b->res[vi];
        for (unsigned v = 0; v < 4; v++) {
            int64_t n = (int64_t)r->n[v];
            if (!n) continue;
            r->n[v] = 0;
            expand_outcomes(c, b, v, n);
        }
    }
    c->batch.ndirty = 0;
    if (c->batch.open_b) c->batch.open_stamp = en_total(c, c->batch.open_b);
}

/* The batch's clocks per ext kind into the output; the per-counter totals of the columns
 * Python asked for (tmask) from its per-kind table into tot[] (*tot_ok = 0 when a kind is
 * beyond the table).  Returns the batch's clocks. */
static int64_t fold_kinds(struct vcpu_counting *c, const struct p4c_out *o, int64_t *tot,
                          int *tot_ok)
{
    int64_t clocks = 0;
    int tcol[P4_NCOUNTERS], ntcol = 0;
    for (int k = 0; k < P4_NCOUNTERS; k++) {
        if (o->tmask & (1u << k)) tcol[ntcol++] = k;
    }
    for (uint32_t i = 0; i < c->batch.ntouched; i++) {
        uint32_t e = c->batch.touched[i];
        if (c->batch.acc[e] < 0) {
            c->fold.o_bad++;
            c->batch.acc[e] = 0;
        }
        if (!c->batch.acc[e]) continue;
        out_push(&c->fold, e, c->batch.acc[e]);
        clocks += c->batch.acc[e];
        if (!*tot_ok) continue;
        if (e >= o->nkext) {
            *tot_ok = 0;
            continue;
        }
        const int32_t *row = o->winc + (size_t)e * P4_NCOUNTERS;
        for (int j = 0; j < ntcol; j++)
            tot[tcol[j]] += c->batch.acc[e] * row[tcol[j]];
    }
    return clocks;
}

/* The pairs across execution boundaries (an execution's last clock -> the next one's
 * bubble, same CPL first) and the batch's first clock; counts what does not add up in
 * o_bad.  `last` and `last_is_end` as for fold_close; cols[]: the execution starts left
 * unpaired per CPL (0 when all is well). */
static void fold_boundaries(struct vcpu_counting *c, uint32_t last, int last_is_end, int64_t clocks,
                            int pairs, int64_t cols[2])
{
    if (!c->batch.next_first) {
        /* first batch (or after an access outside any known block): it starts with the
         * first block execution in it */
        if (c->batch.firsts[1] > 0) c->batch.next_first = ext(p4.kinds->bubble, 1) + 1;
        else if (c->batch.firsts[0] > 0) c->batch.next_first = ext(p4.kinds->bubble, 0) + 1;
        c->batch.next_first_bubble = 1;
    }
    if (c->batch.next_first && c->batch.next_first_bubble) {
        c->batch.firsts[(c->batch.next_first - 1) & 1]--;
    }
    /* (not after an empty batch -- two folds with nothing in between: its last clock was the
     * previous batch's; through acc_last_add, so that the entry is reset below) */
    if (last && last_is_end && clocks) acc_last_add(&c->batch, last - 1, -1);
    cols[0] = c->batch.firsts[0];
    cols[1] = c->batch.firsts[1];
    uint32_t bub[2] = {ext(p4.kinds->bubble, 0), ext(p4.kinds->bubble, 1)};
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < c->batch.ntouched; i++) {
            uint32_t e = c->batch.touched[i];
            int64_t r = c->batch.acc_last[e];
            if (r <= 0) continue;
            int os = (int)(e & 1);
            int col = pass == 0 ? os : !os;
            int64_t t = r < cols[col] ? r : cols[col];
            if (t > 0) {
                if (pairs) pair_hash_add(&c->batch.pairs, e, bub[col], t);
                cols[col] -= t;
                c->batch.acc_last[e] -= t;
            }
        }
    }
    for (uint32_t i = 0; i < c->batch.ntouched; i++) {
        if (c->batch.acc_last[c->batch.touched[i]] > 0) c->fold.o_bad++;
    }
    if (cols[0] > 0 || cols[1] > 0) c->fold.o_bad++;
}

/* The adjacent pairs into the output; counts negative ones in o_bad.  Returns how many. */
static int64_t fold_pairs(struct vcpu_counting *c, int pairs)
{
    int64_t npairs = 0;
    for (uint32_t i = 0; i < c->batch.pairs.n && pairs; i++) {
        uint32_t s = c->batch.pairs.used[i];
        int64_t v = c->batch.pairs.val[s];
        if (v < 0) {
            c->fold.o_bad++;
            continue;
        }
        if (!v) continue;
        uint64_t k = c->batch.pairs.key[s] - 1;
        out_pair(&c->fold, (uint32_t)(k >> 32), (uint32_t)k, v);
        npairs += v;
    }
    return npairs;
}

/* Inconsistent bookkeeping (never expected): say so at once (and at exit, counting_report),
 * not only in the access log's "# feeder: ... repaired"; with P4PMU_DEBUG, the details. */
static void fold_report_bad(unsigned vi, struct vcpu_counting *c, uint32_t last, int last_is_end,
                            int64_t clocks, int64_t npairs, const int64_t cols[2])
{
    if (!c->fold.bad_folds++) {
        p4_message("p4pmu: warning: counting bookkeeping error on vCPU %u at fold %llu "
                   "(a plugin bug; the batch is repaired: totals kept, adjacent clock pairs and "
                   "so EDGE counts may be off)\n",
                   vi, (unsigned long long)c->fold.folds);
    }
    if (!p4.debug) return;
    p4_message("p4pmu-debug: fold vCPU %u: bad=%d clocks=%lld pairs=%lld cols=%lld/%lld "
               "first=%u(b%d) last=%u end=%d\n",
               vi, c->fold.o_bad, (long long)clocks, (long long)npairs, (long long)cols[0],
               (long long)cols[1], c->batch.next_first, c->batch.next_first_bubble, last,
               last_is_end);
    for (uint32_t i = 0; i < c->batch.ntouched; i++) {
        uint32_t e = c->batch.touched[i];
        if (c->batch.acc[e] || c->batch.acc_last[e])
            p4_message("p4pmu-debug:   ext %u acc %lld last-left %lld\n", e,
                       (long long)c->batch.acc[e], (long long)c->batch.acc_last[e]);
    }
}

/* the accumulators restart empty */
static void fold_reset(struct batch_vcpu *bt)
{
    for (uint32_t i = 0; i < bt->ntouched; i++) {
        uint32_t e = bt->touched[i];
        bt->acc[e] = bt->acc_last[e] = 0;
        bt->tmark[e] = 0;
    }
    bt->ntouched = 0;
    bt->firsts[0] = bt->firsts[1] = 0;
    pair_hash_clear(&bt->pairs);
}

/* The output arrays, boundaries and totals into the vCPU's p4c_out for Python; the
 * sibling's state for the next batch's label. */
static void fold_publish(unsigned vi, struct vcpu_counting *c, uint32_t last, int64_t clocks)
{
    struct p4c_out *o = &p4.run->fold_out[vi];
    o->ext = c->fold.o_ext;
    o->cnt = c->fold.o_cnt;
    o->n = c->fold.o_n;
    o->pa = c->fold.o_pa;
    o->pb = c->fold.o_pb;
    o->pn = c->fold.o_pn;
    o->np = c->fold.o_np;
    o->first = c->batch.next_first ? c->batch.next_first - 1 : (c->fold.o_n ? c->fold.o_ext[0] : 0);
    o->last = last ? last - 1 : o->first;
    o->clocks = clocks;
    c->fold.clk_total += (uint64_t)clocks;
    o->bad = c->fold.o_bad;
    int sib = p4.run->threads == 2 ? (int)(vi ^ 1) : -1;
    o->other_active = c->fold.oth_active;
    o->other_os = c->fold.oth_os;
    o->shared = lp_timeline(vi, &c->fold, clocks);
    const struct vcpu_counting *s = sib >= 0 && sib < p4.n_vcpus_max ? &p4.run->per_vcpu[sib]
                                                                     : NULL;
    c->fold.oth_active = s && s->init && !lp_halted(s);
    c->fold.oth_os = s ? s->cpl_os : 0;
    /* budget, pmi[] and start keep what Python wrote last (it rewrites them whenever they
     * may change) */
    o->seq = NULL;
    o->nseq = 0;
}

/*
 * Close the current batch of vCPU vi into its p4c_out (for Python).  `last` = ext kind + 1 of
 * the batch's last clock, `last_is_end` = that clock ends an execution (it is then not paired
 * with a following bubble inside this batch).
 */
static void fold_close(unsigned vi, struct vcpu_counting *c, uint32_t last, int last_is_end)
{
    struct p4c_out *o = &p4.run->fold_out[vi];
    c->fold.folds++;
    /* the batch's adjacent clock pairs only when a counter needs them (an EDGE detector:
     * Python says so for the programming of this batch, threads=1); else only the few
     * collected during execution, dropped below, and no pair check */
    const int pairs = !(o->nopairs && p4.run->threads == 1);
    c->fold.pairless_folds += !pairs;
    int mem_keep = mem_fold_begin(c);
    silent_before_fold(vi, c);
    fold_blocks(vi, c, pairs);
    c->fold.o_n = c->fold.o_np = 0;
    c->fold.o_bad = 0;
    int tot_ok = o->winc != NULL && o->tot_ok >= 0;
    int64_t tot[P4_NCOUNTERS];
    memset(tot, 0, sizeof(tot));
    int64_t clocks = fold_kinds(c, o, tot, &tot_ok);
    int64_t cols[2];
    fold_boundaries(c, last, last_is_end, clocks, pairs, cols);
    int64_t npairs = fold_pairs(c, pairs);
    if (clocks && npairs != clocks - 1 && pairs) c->fold.o_bad++;
    if (c->fold.o_bad) fold_report_bad(vi, c, last, last_is_end, clocks, npairs, cols);
    fold_reset(&c->batch);
    mem_fold_end(c, mem_keep);
    o->tot_ok = tot_ok ? 1 : 0;
    memcpy(o->tot, tot, sizeof(tot));
    fold_publish(vi, c, last, clocks);
}

/* ext kind + 1 of the last clock of the execution of block id that ran last, a block with a
 * static end (as the memory side corrected it) */
static uint32_t static_end_last(const struct vcpu_counting *c, uint32_t id)
{
    const struct blk *b = p4.blocks->by_id[id];
    return ext(mem_last_kind(c, id, b), b->os) + 1;
}

/* Room for n clocks in c->fold.seq. */
static void seq_reserve(struct vcpu_counting *c, unsigned n)
{
    if (n > c->fold.seq_cap) {
        c->fold.seq_cap = n * 2;
        c->fold.seq = realloc(c->fold.seq, sizeof(uint32_t) * c->fold.seq_cap);
    }
}

/* The clocks of block prev's execution under way from instruction a on (a = 0: from its
 * bubble), as the memory side corrected them, with its resolved dynamic end: into
 * c->fold.seq in order.  Returns how many (0: its end is not resolved yet). */
static uint32_t execution_seq_from(struct vcpu_counting *c, uint32_t prev, unsigned a)
{
    const struct blk *b = p4.blocks->by_id[prev];
    if (dyn_end(b) && !(c->res.b == prev && c->res.n > 0)) return 0;
    unsigned j0 = 0; /* the block clock (b->seq index) of the first one */
    if (a) {
        uint16_t at = b->iclk[a - 1];
        if (at == ICLK_FINAL) return 0;
        j0 = (unsigned)at + 1;
    }
    const uint32_t *s;
    unsigned n = portion_seq(b, a, b->n, &s);
    seq_reserve(c, n + (dyn_end(b) ? (unsigned)c->res.n : 0));
    uint32_t nseq = 0;
    for (unsigned i = 0; i < n; i++)
        c->fold.seq[nseq++] = ext(s[i], b->os);
    mem_patch_seq(c, prev, b, c->fold.seq, n, j0);
    if (dyn_end(b)) {
        for (int i = 0; i < c->res.n; i++)
            c->fold.seq[nseq++] = c->res.seq[i];
    }
    return nseq;
}

/* A batch of exactly one block execution, prev's, or of the rest of one that a PMU access
 * split (fold_at_access): its clocks in order into c->fold.seq, so that an overflow inside it
 * can be placed exactly (an NMI handler's reload of a short period overflows there).
 * Returns how many (0: the batch is no such execution). */
static uint32_t one_execution_seq(struct vcpu_counting *c, uint32_t prev)
{
    if (!prev) return 0;
    if (c->batch.entry_b == prev && c->batch.ndirty == 1 && c->batch.dirty[0] == prev &&
        en_total(c, prev) == 1)
        return execution_seq_from(c, prev, 0);
    if (!c->batch.entry_b && !c->batch.ndirty && c->batch.open_b == prev && c->batch.open_a &&
        c->batch.open_stamp == en_total(c, prev) && !c->batch.cut_last)
        return execution_seq_from(c, prev, c->batch.open_a);
    return 0;
}

/* Is seq[0..nseq) the batch just closed into o, clock for clock (the same ext kinds, as
 * many times)?  A rest-of-execution sequence is checked so: anything else the batch holds
 * (a bookkeeping path not foreseen here) leaves the batch to the apportioning step. */
static int seq_is_batch(const struct p4c_out *o, const uint32_t *seq, uint32_t nseq)
{
    if (o->bad || (int64_t)nseq != o->clocks) return 0;
    for (uint32_t k = 0; k < o->n; k++) {
        int64_t m = 0;
        for (uint32_t i = 0; i < nseq; i++)
            m += seq[i] == o->ext[k];
        if (m != o->cnt[k]) return 0;
    }
    return 1;
}

/* Fold at the entry of block `id` (before it runs): the batch ends with the previous
 * execution. */
void fold_at_entry(unsigned vi, struct vcpu_counting *c, uint32_t id)
{
    uint32_t prev = (uint32_t)c->sbase[SB_CURRENT_BLOCK];
    uint32_t last = 0;
    res_fill(c);
    uint32_t nseq = one_execution_seq(c, prev);
    if (!prev) {
        last = c->batch.cut_last;
    } else if (dyn_end(p4.blocks->by_id[prev])) {
        last = c->res.b == prev ? c->res.last : 0;
    } else {
        last = static_end_last(c, prev);
    }
    int rest = nseq && c->batch.entry_b != prev;
    fold_close(vi, c, last, last != 0); /* (cut_last, too, ends an execution) */
    struct p4c_out *o = &p4.run->fold_out[vi];
    if (rest && !seq_is_batch(o, c->fold.seq, nseq)) {
        c->fold.rest_seq_refused++;
        nseq = 0;
    }
    c->fold.rest_seqs += rest && nseq;
    o->seq = nseq ? c->fold.seq : NULL;
    o->nseq = nseq;
    c->batch.next_first = ext(p4.kinds->bubble, p4.blocks->by_id[id]->os) + 1;
    c->batch.next_first_bubble = 1;
    c->batch.cut_last = 0;
    c->batch.entry_b = id;
}

/* Fold at a PMU access at instruction address `addr` of the current block (before it):
 * returns the clocks of the rest of the block (already in W). */
int64_t fold_at_access(unsigned vi, struct vcpu_counting *c, uint64_t addr)
{
    uint32_t id = (uint32_t)c->sbase[SB_CURRENT_BLOCK];
    const struct blk *b = id ? p4.blocks->by_id[id] : NULL;
    int i = b ? find_insn(b, addr) : -1;
    if (i < 0) {
        /* (nothing ran since a cut: its last clock ends the batch and an execution) */
        fold_close(vi, c, c->batch.cut_last, !id && c->batch.cut_last);
        c->batch.next_first = 0;
        c->batch.entry_b = 0;
        return 0;
    }
    unsigned a = open_start(c, id);
    if ((unsigned)i < pos_insn(a)) i = (int)pos_insn(a);
    /* an access by the block's first instruction: the fetch's memory fields went to that
     * instruction's clock, which is in neither portion (not counted, like a cut's); an
     * execution built into the trace cache had all its clocks corrected at its entry, the
     * rest's too: cut as well */
    if (i == 0 || mem_built(c, id)) mem_cut(c, id);
    acc_portion(&c->batch, b, a, b->n, !dyn_end(b), -1);
    acc_portion(&c->batch, b, a, (unsigned)i, 0, +1);
    const uint32_t *s;
    unsigned n = portion_seq(b, a, (unsigned)i, &s);
    uint32_t last = n ? ext(s[n - 1], b->os) + 1 : 0;
    if (n && i > 0 && b->iclk[i - 1] != ICLK_FINAL) { /* (its memory fields: memory.c) */
        last = ext(mem_kind_at(c, id, b, b->iclk[i - 1]), b->os) + 1;
        mem_split_before(c, id, b, b->iclk[i - 1]);
    }
    fold_close(vi, c, last, 0);
    /* the rest of this execution is credited to the next batch */
    acc_portion(&c->batch, b, (unsigned)i + 1, b->n, !dyn_end(b), +1);
    n = portion_seq(b, (unsigned)i + 1, b->n, &s);
    c->batch.next_first = n ? ext(s[0], b->os) + 1 : 0;
    c->batch.next_first_bubble = 0;
    c->batch.open_b = id;
    c->batch.open_a = (unsigned)i + 1;
    c->batch.open_stamp = en_total(c, id);
    c->batch.cut_last = 0;
    c->batch.entry_b = 0;
    /* W holds the final clock of a dynamic end from the block's entry on (not REP's) */
    return n + (dyn_end(b) && b->end != END_REP ? 1 : 0);
}

/* Fold the activity of vCPU vi while it is between two blocks (round-robin TCG: called on
 * its sibling's turn).  Its pending block end, if any, stays pending. */
void fold_between_blocks(unsigned vi, struct vcpu_counting *c)
{
    uint32_t prev = (uint32_t)c->sbase[SB_CURRENT_BLOCK];
    uint32_t last = 0;
    if (!prev) {
        last = c->batch.cut_last;
    } else if (!dyn_end(p4.blocks->by_id[prev])) {
        last = static_end_last(c, prev);
    }
    fold_close(vi, c, last, last != 0); /* (cut_last, too, ends an execution) */
    c->batch.next_first = 0;
    c->batch.entry_b = 0;
    c->batch.cut_last = 0;
}
