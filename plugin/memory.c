/*
 * p4pmu: the memory side of counting (docs/memory-model.md).  While a counter may count a
 * memory-side event, every instruction carries a memory callback (the memory level); each
 * access goes through the vCPU's memory model (memmodel.c), and an access with something to
 * count changes the kind of the clock its instruction retires in, for this execution only:
 * the batch's accumulators lose the clock's kind and gain the new one, with its adjacent
 * pairs (a "fix").  A static clock is fixed at once; the dynamic final clock of a block (a
 * branch's, REP's) gets its memory fields when its outcome is resolved.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "messages.h"
#include "memory.h"
#include "batch.h"
#include "blocks.h"
#include "counting.h"
#include "flush.h"
#include "kinds.h"
#include "memmodel.h"
#include "state.h"

#define UD_INSN_BITS 10u /* an instruction index in a block (TCG: at most 512) */

/* What an instruction does to the TLBs (SDM Vol. 3A 4.10.4): 1 a MOV to CR3 (all entries:
 * the model has no global pages and no PCIDs), 2 INVLPG (its page: the model drops them
 * all, the plugin does not compute INVLPG's address), else 0.  Legacy and REX prefixes
 * skipped; MOV CR3 is 0F 22 /3 (register form), INVLPG 0F 01 /7 (memory form). */
static int tlb_effect(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n && (p[i] == 0x66 || p[i] == 0x67 || p[i] == 0xF2 || p[i] == 0xF3 || p[i] == 0x2E ||
                     p[i] == 0x3E || p[i] == 0x26 || p[i] == 0x36 || p[i] == 0x64 || p[i] == 0x65 ||
                     (p[i] >= 0x40 && p[i] <= 0x4F))) {
        i++;
    }
    if (i + 2 >= n || p[i] != 0x0F) return 0;
    uint8_t op = p[i + 1], modrm = p[i + 2], reg = (modrm >> 3) & 7, mod = modrm >> 6;
    if (op == 0x22 && reg == 3) return 1;
    if (op == 0x01 && reg == 7 && mod != 3) return 2;
    return 0;
}

/* a MOV to CR3 or an INVLPG is about to run: this vCPU's TLBs lose their entries */
static void cb_tlb_flush(unsigned int vi, void *ud)
{
    (void)ud;
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    if (c->mem.mm) mm_flush_tlbs(c->mem.mm);
    c->mem.tlb_flushes++;
}

void mem_register(struct qemu_plugin_tb *tb, size_t n, uint32_t id)
{
    int level = memory_level_active();
    if (level & (P4_MEM_FETCH | P4_MEM_CODE)) {
        qemu_plugin_register_vcpu_insn_exec_cb(qemu_plugin_tb_get_insn(tb, 0), cb_fetch,
                                               P4_CB_NO_REGS, (void *)(uintptr_t)id);
    }
    for (size_t i = 0; i < n && i < (1u << UD_INSN_BITS); i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        void *ud = (void *)(((uintptr_t)id << UD_INSN_BITS) | i);
        if (level & P4_MEM_DATA)
            qemu_plugin_register_vcpu_mem_cb(insn, cb_mem, P4_CB_NO_REGS, P4_MEM_RW, ud);
        uint8_t bytes[16];
        size_t len = qemu_plugin_insn_data(insn, bytes, sizeof(bytes));
        if (tlb_effect(bytes, len))
            qemu_plugin_register_vcpu_insn_exec_cb(insn, cb_tlb_flush, P4_CB_NO_REGS, NULL);
    }
}

/* clockmodel.memory_fields: the clock fields one access adds; 0 if none */
static int access_fields(const struct mm_outcome *o, int store, uint8_t *d)
{
    _Static_assert(KF_X87_POAU == KF_N - 1 && KF_SPLIT_LD == KF_N - 26,
                   "the memory fields are the last 26 clock fields");
    memset(d, 0, KF_N);
    if (store) {
        d[KF_SPLIT_ST] = o->split;
        d[KF_DTLB_ST] = o->dtlb_miss;
        d[KF_L2_RFO] = o->l2_miss;
        d[KF_ST_DTLB] = o->dtlb_miss > 0;
        d[KF_SMC] = o->smc;
        d[KF_WB] = o->writeback;
        return o->split | o->dtlb_miss | o->l2_miss | o->smc | o->writeback;
    }
    d[KF_SPLIT_LD] = o->split;
    d[KF_DTLB_LD] = o->dtlb_miss;
    d[KF_L1_LD] = o->l1_miss;
    d[KF_L2_HITE] = o->l2_hite;
    d[KF_L2_HITM] = o->l2_hitm;
    d[KF_L2_LD] = o->l2_miss;
    d[KF_LD_L1MISS] = o->l1_miss > 0;
    d[KF_LD_L2MISS] = o->l2_miss > 0;
    d[KF_LD_DTLB] = o->dtlb_miss > 0;
    d[KF_LD_PARTIAL] = o->partial;
    d[KF_LD_UNALGN] = o->unaligned;
    d[KF_LD_64K] = o->alias64k;
    d[KF_WB] = o->writeback;
    return o->split | o->dtlb_miss | o->l1_miss | o->l2_hite | o->l2_hitm | o->l2_miss |
           o->partial | o->unaligned | o->alias64k | o->writeback;
}

/* the memory fields are the last ones of a clock (clockmodel.MEMORY_FIELDS): only they differ */
#define KF_MEM_FIRST KF_SPLIT_LD
#define KF_MEM_N (KF_N - KF_MEM_FIRST)

/* f += d, the memory fields (the last ones, KF_MEM_FIRST on) saturating at KF_MEM_MAX
 * (clockmodel.MEMORY_FIELD_MAX: what a line reads of them caps at 15 per clock anyway) */
static void fields_add(uint8_t *f, const uint8_t *d)
{
    for (int i = 0; i < KF_N; i++) {
        unsigned t = (unsigned)f[i] + d[i], cap = i >= KF_MEM_FIRST ? KF_MEM_MAX : 255;
        f[i] = t > cap ? (uint8_t)cap : (uint8_t)t;
    }
}

/* kind k with the memory fields d added: from this thread's direct-mapped cache, else
 * interned (which takes the lock) */
#define KPC_SIZE 1024
struct kpc_entry {
    uint32_t k, nw; /* k + 1 (0: empty), the result */
    uint8_t d[KF_N];
};
static __thread struct kpc_entry *tl_kpc;


static uint32_t kind_plus(uint32_t k, const uint8_t *d)
{
    uint64_t h = 0xcbf29ce484222325ull ^ k;
    for (int i = KF_MEM_FIRST; i < KF_N; i++)
        h = (h ^ d[i]) * 0x100000001b3ull;
    if (!tl_kpc) tl_kpc = calloc(KPC_SIZE, sizeof(struct kpc_entry));
    struct kpc_entry *e = tl_kpc ? &tl_kpc[(h >> 20) % KPC_SIZE] : NULL;
    if (e && e->k == k + 1 && !memcmp(e->d + KF_MEM_FIRST, d + KF_MEM_FIRST, KF_MEM_N))
        return e->nw;
    uint8_t f[KF_N];
    memcpy(f, p4.kinds->fields[k], KF_N);
    fields_add(f, d);
    uint32_t nw = kind_intern(f);
    if (e) {
        e->k = k + 1;
        e->nw = nw;
        memcpy(e->d, d, KF_N);
    }
    return nw;
}

/* Is c->mem.mx the record of the latest execution of block id in this batch (resolved or not)? */
static int mx_listed(const struct vcpu_counting *c, uint32_t id)
{
    const struct mem_exec *x = &c->mem.mx;
    return x->b == id && id && x->stamp == en_total(c, id) && x->folds == c->fold.folds;
}

/* Is c->mem.mx the record of the execution of block id under way (or whose end is pending)? */
static int mx_is(const struct vcpu_counting *c, uint32_t id)
{
    return mx_listed(c, id) && !c->mem.mx.resolved;
}

/* The record's fixes are gone (a new execution, or folded): its index forgets them. */
static void fixes_forget(struct mem_exec *x)
{
    if (++x->gen == 0) { /* (wrapped: no entry may look current) */
        if (x->idx_gen) memset(x->idx_gen, 0, sizeof(uint32_t) * x->idx_cap);
        x->gen = 1;
    }
}

/* fix i (of clock j) is the latest of its clock: fixed_kind finds it in O(1) (a built
 * execution fixes each of its clocks: a scan of the fixes would cost O(n) per clock) */
static void fixes_index(struct mem_exec *x, unsigned j, unsigned i)
{
    if (j >= x->idx_cap) {
        uint32_t cap = x->idx_cap ? x->idx_cap : 64;
        while (cap <= j)
            cap *= 2;
        uint32_t *g = realloc(x->idx_gen, sizeof(uint32_t) * cap);
        uint16_t *f = g ? realloc(x->idx_fix, sizeof(uint16_t) * cap) : NULL;
        if (!g || !f) {
            p4_message("p4pmu: error: no memory for the clock fixes' index\n");
            exit(1);
        }
        memset(g + x->idx_cap, 0, sizeof(uint32_t) * (cap - x->idx_cap));
        x->idx_gen = g;
        x->idx_fix = f;
        x->idx_cap = cap;
    }
    x->idx_gen[j] = x->gen;
    x->idx_fix[j] = (uint16_t)i;
}

static void mx_start(struct vcpu_counting *c, uint32_t id)
{
    struct mem_exec *x = &c->mem.mx;
    x->b = id;
    x->stamp = en_total(c, id);
    x->folds = c->fold.folds;
    x->n = 0;
    fixes_forget(x);
    x->last_now = 0;
    x->has_fin = 0;
    x->resolved = 0;
    x->built = 0;
    x->active = 0;
}

static uint32_t fixed_kind(const struct mem_exec *x, const struct blk *b, unsigned j)
{
    if (j < x->idx_cap && x->idx_gen[j] == x->gen) return x->fix[x->idx_fix[j]].nw;
    if (j == b->nclocks - 1 && x->last_now) return x->last_now - 1;
    return b->seq[j];
}

/* the kind of the left neighbour of static clock j >= 1 of the execution under way: its clock
 * j - 1, or for clock 1 the last of its stall clocks with a bus read active if it has any */
static uint32_t left_kind(const struct mem_exec *x, const struct blk *b, unsigned j)
{
    return j == 1 && x->active ? p4.kinds->active : fixed_kind(x, b, j - 1);
}

uint32_t mem_kind_at(const struct vcpu_counting *c, uint32_t id, const struct blk *b, unsigned j)
{
    return mx_is(c, id) ? fixed_kind(&c->mem.mx, b, j) : b->seq[j];
}

uint32_t mem_last_kind(const struct vcpu_counting *c, uint32_t id, const struct blk *b)
{
    return mx_is(c, id) && c->mem.mx.last_now ? c->mem.mx.last_now - 1 : b->last_k;
}

void mem_patch_seq(const struct vcpu_counting *c, uint32_t id, const struct blk *b, uint32_t *seq,
                   unsigned n, unsigned j0)
{
    if (!mx_listed(c, id)) return; /* (also once its end is resolved: the fold comes after) */
    for (unsigned p = 0; p < n && j0 + p < b->nclocks; p++) {
        seq[p] = ext(fixed_kind(&c->mem.mx, b, j0 + p), b->os);
    }
}

/* the first clock of the rest of an execution split by a PMU access, if this execution of
 * block id is one (fold_at_access): its left neighbour is in an earlier batch */
static int open_rest_first(const struct vcpu_counting *c, uint32_t id, const struct blk *b,
                           unsigned j)
{
    if (c->batch.open_b != id || c->batch.open_stamp != en_total(c, id) || !c->batch.open_a)
        return 0;
    uint16_t at = b->iclk[c->batch.open_a - 1];
    return at != ICLK_FINAL && j == (unsigned)at + 1;
}

/* Does the batch collect adjacent clock pairs?  Not while no counter has an EDGE detector
 * (Python's p4c_out.nopairs, threads=1: the fold drops them, fold.c); the flag changes only
 * at a Python step, after the fold that closes the batch. */
static inline int pairs_wanted(unsigned vi)
{
    return !(p4.run->fold_out[vi].nopairs && p4.run->threads == 1);
}

/* Static clock j of the execution of block id under way gets the memory fields d. */
static void fix_static(unsigned vi, struct vcpu_counting *c, uint32_t id, const struct blk *b,
                       unsigned j, const uint8_t *d)
{
    struct mem_exec *x = &c->mem.mx;
    if (x->n == MX_MAX || j == 0 || j >= b->nclocks) {
        c->mem.dropped++;
        return;
    }
    const int os = b->os;
    struct mem_fix *f = &x->fix[x->n];
    f->j = (uint16_t)j;
    f->old = fixed_kind(x, b, j);
    f->nw = kind_plus(f->old, d);
    uint32_t eo = ext(f->old, os), en = ext(f->nw, os);
    acc_add(&c->batch, eo, -1);
    acc_add(&c->batch, en, 1);
    const int pairs = pairs_wanted(vi);
    if (open_rest_first(c, id, b, j)) {
        f->left = MX_L_NONE;
        if (c->batch.next_first == eo + 1) {
            c->batch.next_first = en + 1;
            f->left = MX_L_FIRST;
        }
    } else if (pairs) {
        f->left = MX_L_PAIR;
        f->lk = left_kind(x, b, j);
        pair_hash_add(&c->batch.pairs, ext(f->lk, os), eo, -1);
        pair_hash_add(&c->batch.pairs, ext(f->lk, os), en, 1);
    } else {
        f->left = MX_L_NONE;
    }
    if (j + 1 < b->nclocks) {
        f->right = pairs ? MX_R_PAIR : MX_R_NONE;
        f->rk = fixed_kind(x, b, j + 1);
        if (pairs) {
            pair_hash_add(&c->batch.pairs, eo, ext(f->rk, os), -1);
            pair_hash_add(&c->batch.pairs, en, ext(f->rk, os), 1);
        }
    } else {
        x->last_now = f->nw + 1;
        if (!dyn_end(b)) {
            f->right = MX_R_LAST;
            acc_last_add(&c->batch, eo, -1);
            acc_last_add(&c->batch, en, 1);
        } else {
            f->right = MX_R_JUNCTION;
        }
    }
    fixes_index(x, j, x->n);
    x->n++;
    c->mem.fixes++;
}

/* this vCPU's model (made at its first use) */
static struct mm_state *model_of(unsigned vi, struct memory_vcpu *mv)
{
    if (!mv->mm) {
        mv->mm = calloc(1, sizeof(struct mm_state));
        const unsigned *g = p4_mm_geometry[p4.run->mm_model];
        struct mm_params p = {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8]};
        if (!mv->mm || mm_init(mv->mm, &p)) {
            p4_message("p4pmu: error: no memory for vCPU %u's memory model\n", vi);
            exit(1);
        }
        int level = memory_level_active();
        mv->mm->code_on = (level & P4_MEM_CODE) != 0;
        mv->mm->sb_on = (level & P4_MEM_SB) != 0;
    }
    return mv->mm;
}

/* instruction i of block id (the execution under way) gets the memory fields d */
static void fields_at(unsigned vi, struct vcpu_counting *c, uint32_t id, unsigned i,
                      const uint8_t *d)
{
    if (!mx_is(c, id)) mx_start(c, id);
    const struct blk *b = p4.blocks->by_id[id];
    uint16_t j = b->iclk[i];
    if (j == ICLK_FINAL) {
        fields_add(c->mem.mx.fin, d);
        c->mem.mx.has_fin = 1;
        return;
    }
    fix_static(vi, c, id, b, j, d);
}

/* timing=memory: the clocks a load's outcome adds (clockmodel.memory_stall): an L1 miss that
 * hits L2 or misses it, and a DTLB walk; stores retire into the store buffer and add none */
static unsigned stall_of(const struct mm_outcome *o)
{
    return (unsigned)(o->l2_hite + o->l2_hitm) * p4.run->stall_l2 +
           (unsigned)o->l2_miss * p4.run->stall_mem + (unsigned)o->dtlb_miss * p4.run->stall_walk;
}

/* ... and how many of them see the line read active in the bus queues
 * (clockmodel.queue_active): the memory latency, one per update of the queues' counts */
static unsigned active_of(const struct mm_outcome *o)
{
    return (unsigned)o->l2_miss * p4.run->stall_mem / p4.run->queue_update;
}

/* The first stall clocks with a bus read active of the execution of block id under way:
 * they come last of its stalls, so they replace the pair (empty, clock 1) by (empty, active),
 * (active, clock 1) and n - 1 active-active pairs; a fix of clock 1 has them on its left from
 * now on.  A dynamic final clock 1 gets its left neighbour at its resolution (mem_resolved,
 * mem_rep_final).  The rest of an execution a PMU access split (fold_at_access) is in
 * another batch than its clock 1: only active-active pairs there. */
static void active_pairs(struct vcpu_counting *c, uint32_t id, const struct blk *b, unsigned n)
{
    struct mem_exec *x = &c->mem.mx;
    uint32_t e = ext(p4.kinds->empty, b->os), a = ext(p4.kinds->active, b->os);
    int split = c->batch.open_b == id && c->batch.open_stamp == en_total(c, id);
    if (x->active || split) {
        pair_hash_add(&c->batch.pairs, a, a, n);
        return;
    }
    x->active = 1;
    pair_hash_add(&c->batch.pairs, e, a, 1);
    pair_hash_add(&c->batch.pairs, a, a, n - 1);
    if (b->nclocks == 1) return; /* (a dynamic end right after the bubble) */
    uint32_t k1 = ext(fixed_kind(x, b, 1), b->os);
    pair_hash_add(&c->batch.pairs, e, k1, -1);
    pair_hash_add(&c->batch.pairs, a, k1, 1);
    for (unsigned i = 0; i < x->n; i++) {
        if (x->fix[i].j == 1 && x->fix[i].left == MX_L_PAIR) x->fix[i].lk = p4.kinds->active;
    }
}

/* n stall clocks in the execution of block id under way, right after its bubble, the last
 * `active` of them with a bus read active (clockmodel.block_clocks).  The empty ones add only
 * empty-empty pairs (the bubble is an empty clock too). */
static void add_stall(unsigned vi, struct vcpu_counting *c, uint32_t id, const struct blk *b,
                      unsigned n, unsigned active)
{
    uint32_t e = ext(p4.kinds->empty, b->os), a = ext(p4.kinds->active, b->os);
    unsigned idle = n - active;
    if (idle) acc_add(&c->batch, e, idle);
    if (active) {
        if (!mx_is(c, id)) mx_start(c, id);
        acc_add(&c->batch, a, active);
    }
    if (pairs_wanted(vi)) {
        if (idle) pair_hash_add(&c->batch.pairs, e, e, idle);
        if (active) active_pairs(c, id, b, active);
    }
    c->sbase[SB_DEADLINE_CLOCKS] += n;
    if (c->exact.on) {
        c->sbase[SB_EXACT_EVENTS] += (uint64_t)(exact_increment(&p4.exact->sig, e, idle) +
                                                exact_increment(&p4.exact->sig, a, active));
    }
    c->mem.stall_clocks += n;
}

void mem_fields_at(unsigned vi, uint32_t id, unsigned i, const uint8_t *d)
{
    fields_at(vi, &p4.run->per_vcpu[vi], id, i, d);
}

void cb_mem(unsigned int vi, p4_meminfo_t info, uint64_t vaddr, void *ud)
{
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    uint32_t id = (uint32_t)((uintptr_t)ud >> UD_INSN_BITS);
    unsigned i = (unsigned)((uintptr_t)ud & ((1u << UD_INSN_BITS) - 1));
    if (!c->init || c->sbase[SB_CURRENT_BLOCK] != id) {
        /* QEMU re-executing an MMIO access in a block of its own (cuts.c cb_memi) */
        c->mem.elsewhere++;
        return;
    }
    struct mm_state *m = model_of(vi, &c->mem);
    c->mem.accesses++;
    struct mm_outcome o;
    int store = qemu_plugin_mem_is_store(info);
    mm_access(m, vaddr, 1u << qemu_plugin_mem_size_shift(info), store, &o);
    if (!(o.split | o.dtlb_miss | o.l1_miss | o.l2_hite | o.l2_hitm | o.l2_miss | o.smc |
          o.partial | o.unaligned | o.alias64k | o.writeback))
        return;
    if (p4.run->memory_timing && !store) {
        unsigned n = stall_of(&o);
        if (n) add_stall(vi, c, id, p4.blocks->by_id[id], n, active_of(&o));
    }
    uint8_t d[KF_N];
    if (!access_fields(&o, store, d)) return;
    fields_at(vi, c, id, i, d);
}

/* A block execution whose fetch missed the trace cache is built, not delivered
 * (clockmodel.block_clocks): every clock of it after the bubble gets tc_build, the final one
 * (a dynamic end's, REP's) when it is resolved.  One fix per clock, on misses only. */
static void build_clocks(unsigned vi, struct vcpu_counting *c, uint32_t id, const struct blk *b)
{
    uint8_t d[KF_N];
    memset(d, 0, KF_N);
    d[KF_TC_BUILD] = 1;
    if (!mx_is(c, id)) mx_start(c, id);
    c->mem.mx.built = 1;
    for (unsigned j = 1; j < b->nclocks; j++)
        fix_static(vi, c, id, b, j, d);
    if (dyn_end(b)) {
        fields_add(c->mem.mx.fin, d);
        c->mem.mx.has_fin = 1;
    }
}

/* A block execution begins (before its first instruction): its instruction fetch looks up
 * the ITLB once per page its instructions span, and its code lines in the code-line record
 * (the trace cache, which also serves self-modifying code): clockmodel.fetch_fields, in the
 * clock of its first instruction.  The addresses are those of the block's translation (a
 * block QEMU shares between two mappings of the same code is looked up at the first one's
 * addresses). */
void cb_fetch(unsigned int vi, void *ud)
{
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    uint32_t id = (uint32_t)(uintptr_t)ud;
    if (!c->init || c->sbase[SB_CURRENT_BLOCK] != id) return;
    const struct blk *b = p4.blocks->by_id[id];
    struct mm_state *m = model_of(vi, &c->mem);
    const struct insn_info *last = &b->ins[b->n - 1];
    int level = memory_level_active();
    unsigned tc_misses = 0, lookups = 0, misses = 0;
    if (level & P4_MEM_CODE) tc_misses = mm_fetch_code(m, b->vaddr, last->addr + last->len);
    if (level & P4_MEM_FETCH) {
        uint64_t p0 = b->vaddr >> 12, p1 = (last->addr + last->len - 1) >> 12;
        for (uint64_t p = p0; p <= p1 && lookups < 4; p++, lookups++)
            misses += mm_fetch(m, p << 12);
    }
    if (!lookups && !tc_misses) return;
    uint8_t d[KF_N];
    memset(d, 0, KF_N);
    d[KF_ITLB_HIT] = (uint8_t)(lookups - misses);
    d[KF_ITLB_MISS] = (uint8_t)misses;
    d[KF_TC_MISS] = (uint8_t)tc_misses; /* at most MM_CODE_FETCH_LINES */
    fields_at(vi, c, id, 0, d);
    if (tc_misses) build_clocks(vi, c, id, b);
}

void mem_resolved(unsigned vi, struct vcpu_counting *c, uint32_t pid, const struct blk *pb,
                  unsigned v)
{
    c->mem.res_fin = 0;
    if (!mx_is(c, pid)) return;
    struct mem_exec *x = &c->mem.mx;
    const int os = pb->os;
    uint32_t fin = pb->var[v], fin_now = fin;
    if (x->has_fin) {
        fin_now = kind_plus(fin, x->fin);
        x->has_fin = 0;
        memset(x->fin, 0, KF_N);
    }
    uint32_t last = x->last_now ? x->last_now - 1 : pb->last_k;
    if (pb->nclocks == 1 && x->active) last = p4.kinds->active; /* (active_pairs) */
    if (fin_now != fin) {
        acc_add(&c->batch, ext(fin, os), -1);
        acc_add(&c->batch, ext(fin_now, os), 1);
        if ((v & 1) && p4.kinds->n_penalty) {
            uint32_t p0 = ext(p4.kinds->penalty[0], os);
            if (pairs_wanted(vi)) {
                pair_hash_add(&c->batch.pairs, ext(fin, os), p0, -1);
                pair_hash_add(&c->batch.pairs, ext(fin_now, os), p0, 1);
            }
        } else {
            acc_last_add(&c->batch, ext(fin, os), -1);
            acc_last_add(&c->batch, ext(fin_now, os), 1);
        }
        c->mem.res_fin = ext(fin_now, os) + 1;
        c->mem.fixes++;
    }
    if ((fin_now != fin || last != pb->last_k) && pairs_wanted(vi)) {
        pair_hash_add(&c->batch.pairs, ext(pb->last_k, os), ext(fin, os), -1);
        pair_hash_add(&c->batch.pairs, ext(last, os), ext(fin_now, os), 1);
    }
    x->resolved = 1; /* nothing of it is left to fix; its fixes stay listed for mem_patch_seq */
}

void mem_rep_final(struct vcpu_counting *c, uint32_t pid, const struct blk *pb, uint8_t *f,
                   uint32_t *prev)
{
    if (!mx_is(c, pid)) return;
    struct mem_exec *x = &c->mem.mx;
    if (x->has_fin) fields_add(f, x->fin);
    if (x->last_now) *prev = ext(x->last_now - 1, pb->os);
    if (pb->nclocks == 1 && x->active) *prev = ext(p4.kinds->active, pb->os); /* (active_pairs) */
    x->resolved = 1;
}

void mem_cut(struct vcpu_counting *c, uint32_t id)
{
    if (!mx_is(c, id)) return;
    struct mem_exec *x = &c->mem.mx;
    const struct blk *b = p4.blocks->by_id[id];
    const int os = b->os;
    for (unsigned i = x->n; i-- > 0;) {
        const struct mem_fix *f = &x->fix[i];
        uint32_t eo = ext(f->old, os), en = ext(f->nw, os);
        acc_add(&c->batch, en, -1);
        acc_add(&c->batch, eo, 1);
        if (f->left == MX_L_PAIR) {
            pair_hash_add(&c->batch.pairs, ext(f->lk, os), en, -1);
            pair_hash_add(&c->batch.pairs, ext(f->lk, os), eo, 1);
        } else if (f->left == MX_L_FIRST && c->batch.next_first == en + 1) {
            c->batch.next_first = eo + 1;
        }
        if (f->right == MX_R_PAIR) {
            pair_hash_add(&c->batch.pairs, en, ext(f->rk, os), -1);
            pair_hash_add(&c->batch.pairs, eo, ext(f->rk, os), 1);
        } else if (f->right == MX_R_LAST) {
            acc_last_add(&c->batch, en, -1);
            acc_last_add(&c->batch, eo, 1);
        }
        c->mem.dropped++;
    }
    if (x->has_fin) c->mem.dropped++;
    if (x->active && b->nclocks > 1) {
        /* undo active_pairs' correction: the static pair (empty, clock 1) is back, which the
         * cut's portions take away or keep; the active clocks stay, paired among themselves */
        uint32_t e = ext(p4.kinds->empty, os), a = ext(p4.kinds->active, os);
        uint32_t k1 = ext(b->seq[1], os);
        pair_hash_add(&c->batch.pairs, a, k1, -1);
        pair_hash_add(&c->batch.pairs, e, k1, 1);
        pair_hash_add(&c->batch.pairs, e, a, -1);
        pair_hash_add(&c->batch.pairs, a, a, 1);
    }
    x->active = 0;
    x->b = 0;
}

int mem_built(const struct vcpu_counting *c, uint32_t id)
{
    return mx_is(c, id) && c->mem.mx.built;
}

void mem_split_before(struct vcpu_counting *c, uint32_t id, const struct blk *b, unsigned j)
{
    if (!mx_is(c, id)) return;
    struct mem_exec *x = &c->mem.mx;
    for (unsigned i = 0; i < x->n; i++) {
        struct mem_fix *f = &x->fix[i];
        if (f->j != j || f->right != MX_R_PAIR) continue;
        uint32_t eo = ext(f->old, b->os), en = ext(f->nw, b->os), er = ext(f->rk, b->os);
        pair_hash_add(&c->batch.pairs, eo, er, 1);
        pair_hash_add(&c->batch.pairs, en, er, -1);
        f->right = MX_R_NONE;
    }
}

int mem_fold_begin(const struct vcpu_counting *c)
{
    return mx_is(c, (uint32_t)c->sbase[SB_CURRENT_BLOCK]);
}

void mem_fold_end(struct vcpu_counting *c, int keep)
{
    struct mem_exec *x = &c->mem.mx;
    if (!keep) {
        x->b = 0;
        return;
    }
    /* the fixes are in the folded batch; the last static clock's kind and the final
     * clock's fields stay for the resolution */
    x->n = 0;
    fixes_forget(x);
    x->active = 0; /* (its pairs are in the folded batch, as its clock 1) */
    x->stamp = en_total(c, x->b);
    x->folds = c->fold.folds;
}

void mem_models_reset(int added, int on)
{
    for (int i = 0; p4.run->per_vcpu && i < p4.n_vcpus_max; i++) {
        struct memory_vcpu *mv = &p4.run->per_vcpu[i].mem;
        struct mm_state *m = mv->mm;
        if (m && (added & P4_MEM_DATA)) mm_reset_data(m);
        if (m && (added & P4_MEM_FETCH)) mm_reset_itlb(m);
        if (m && (added & P4_MEM_CODE)) mm_reset_code(m);
        if (m && (added & P4_MEM_SB)) mm_reset_stores(m);
        if (m) { /* what stores and loads look up from now on (not per access) */
            m->code_on = (on & P4_MEM_CODE) != 0;
            m->sb_on = (on & P4_MEM_SB) != 0;
        }
        if (added) mv->mx.b = 0;
    }
}

void mem_report(unsigned vi, const struct memory_vcpu *mv)
{
    if (!mv->accesses) return;
    p4_message("p4pmu-debug: vCPU %u memory: %llu accesses, %llu clock fixes, %llu "
               "outcomes not counted (cut executions, long blocks), %llu MMIO re-executions, "
               "%llu TLB flushes, %llu stall clocks\n",
               vi, (unsigned long long)mv->accesses, (unsigned long long)mv->fixes,
               (unsigned long long)mv->dropped, (unsigned long long)mv->elsewhere,
               (unsigned long long)mv->tlb_flushes, (unsigned long long)mv->stall_clocks);
}
