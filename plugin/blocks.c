/*
 * p4pmu: translated blocks as the counting model sees them: their static schedule,
 * histogram and adjacent pairs, their dynamic end, and the conditional predictor entry
 * groups (docs/guest-events.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "messages.h"
#include "blocks.h"
#include "counting.h"
#include "kinds.h"
#include "memory.h"
#include "predictor.h"
#include "state.h"

/* An empty block table (id 0 and group 0 mean "none") */
struct block_table *block_table_new(void)
{
    struct block_table *t = calloc(1, sizeof(*t));
    if (t) t->n = t->n_groups = 1;
    return t;
}

/* most clocks one execution of b can add (W): static clocks, the dynamic final clock and a
 * misprediction penalty; REP: unbounded (its iterations), taken as 2^20 */
static uint64_t maxclk_calc(const struct blk *b)
{
    uint64_t m = b->nclocks;
    if (b->end == END_REP) m += 1u << 20;
    else if (dyn_end(b)) m += 1 + p4.kinds->n_penalty;
    return m;
}

static int end_of(const struct insn_info *last)
{
    if (last->flags & CI_REP) return END_REP;
    return last->br;
}

/* the final (dynamic) clock of a dynamic-end block, as fields */
static void final_fields(const struct blk *b, struct clock_fields *out)
{
    unsigned cap = sched_cap(b);
    struct clock_fields *c = malloc(sizeof(*c) * cap);
    unsigned m = schedule(b->ins, 0, b->n, c, cap, NULL);
    if (m) *out = c[m - 1];
    else memset(out, 0, sizeof(*out));
    free(c);
}


static void group_join_locked(struct blk *b, uint32_t id, uint64_t nxt)
{
    const struct insn_info *last = &b->ins[b->n - 1];
    uint64_t key = P4P_COND_ENTRIES ? last->addr % (P4P_COND_ENTRIES ? P4P_COND_ENTRIES : 1)
                                    : last->addr;
    uint64_t *gv = u64_map_get(&p4.blocks->group_of_key, key, 1);
    if (!*gv) {
        /* cannot run out: every group is created by a new block (MAX_GROUPS = MAX_BLOCKS) */
        struct pred_group *g = calloc(1, sizeof(*g));
        g->key = key;
        g->silent_t = b->back;
        p4.blocks->groups[p4.blocks->n_groups] = g;
        *gv = p4.blocks->n_groups++;
    }
    b->gid = (uint32_t)*gv;
    struct pred_group *g = p4.blocks->groups[b->gid];
    b->silent_t = g->silent_t;
    b->gen = g->flips;
    if (last->target == nxt || g->nmem >= GMAX || p4.blocks->n_gates >= MAX_GATES) return;
    int level = memory_level_active(); /* (memory.c) */
    if ((b->mem_final && (level & P4_MEM_DATA)) ||
        (b->fetch_final && (level & (P4_MEM_FETCH | P4_MEM_CODE))))
        return;
    b->gate = ++p4.blocks->n_gates;
    b->xval = g->silent_t ? last->target : nxt;
    (void)id; /* listed in the group once published (block_new) */
}

/* Per instruction of b, the index in b->seq of the clock it retires in (ICLK_FINAL: the
 * dynamic final clock, or REP's clocks); whether an instruction retiring in the final clock
 * or the last static clock of a dynamic end accesses memory (b->mem_final). */
static void retire_clocks(struct blk *b)
{
    unsigned cap = sched_cap(b);
    struct clock_fields *c = malloc(sizeof(*c) * cap);
    b->iclk = malloc(sizeof(uint16_t) * b->n);
    unsigned m = schedule(b->ins, 0, b->n, c, cap, b->iclk);
    free(c);
    int rep = b->end == END_REP, dyn = dyn_end(b);
    /* the fetch's ITLB look-ups go to instruction 0's clock */
    b->fetch_final = dyn && ((rep && b->n == 1) || (!rep && (unsigned)b->iclk[0] + 2u >= m));
    for (unsigned j = 0; j < b->n; j++) {
        int fin = (rep && j == b->n - 1) || (dyn && !rep && b->iclk[j] == m - 1);
        int mem = b->ins[j].loads || b->ins[j].stores;
        if (fin) {
            b->iclk[j] = ICLK_FINAL;
            b->mem_final |= mem;
        } else {
            b->iclk[j] = (uint16_t)(b->iclk[j] + P4P_BUBBLE);
            /* the last static clock of a conditional end: its pair with the final clock
             * is corrected at the resolution, which a silent outcome does not have */
            b->mem_final |= mem && dyn && b->iclk[j] == b->nclocks - 1;
        }
    }
}

/* b's static schedule: the full portion of one execution, as a histogram of kinds and of
 * adjacent pairs (small blocks: quadratic is fine) */
static void static_schedule(struct blk *b)
{
    uint32_t *s;
    unsigned m = portion_seq_calc(b, 0, b->n, &s);
    b->seq = s;
    b->nclocks = m;
    b->first_k = s[0];
    b->last_k = s[m - 1];
    b->hk = malloc(sizeof(uint32_t) * m * 2);
    b->hc = b->hk + m;
    b->pa = malloc(sizeof(uint32_t) * (m ? m : 1) * 3);
    b->pb = b->pa + m;
    b->pc = b->pb + m;
    for (unsigned i = 0; i < m; i++) {
        unsigned j;
        for (j = 0; j < b->nk && b->hk[j] != s[i]; j++) {
        }
        if (j == b->nk) {
            b->hk[b->nk] = s[i];
            b->hc[b->nk++] = 0;
        }
        b->hc[j]++;
        if (i) {
            for (j = 0; j < b->np && !(b->pa[j] == s[i - 1] && b->pb[j] == s[i]); j++) {
            }
            if (j == b->np) {
                b->pa[b->np] = s[i - 1];
                b->pb[b->np] = s[i];
                b->pc[b->np++] = 0;
            }
            b->pc[j]++;
        }
    }
    retire_clocks(b);
}

/* a dynamic end (not REP): the per-vCPU outcome records and the final clock's kind per
 * outcome variant (taken * 2 + mispredicted) */
static void dynamic_end_variants(struct blk *b)
{
    size_t rsz = (size_t)p4.n_vcpus_max * sizeof(struct block_outcomes);
    b->res = aligned_alloc(64, rsz);
    memset(b->res, 0, rsz);
    struct clock_fields f;
    final_fields(b, &f);
    f.f[KF_BR] = b->end;
    b->final_k = kind_intern(f.f);
    for (int t = 0; t < 2; t++) {
        for (int mp = 0; mp < 2; mp++) {
            struct clock_fields g = f;
            g.f[KF_TAKEN] = (uint8_t)t;
            g.f[KF_MISP] = (uint8_t)mp;
            b->var[t * 2 + mp] = kind_intern(g.f);
        }
    }
}

uint32_t block_new(uint64_t vaddr, unsigned n, struct insn_info *ins, int os, int mode,
                   int lite_lvl)
{
    struct blk *b = aligned_alloc(64, (sizeof(*b) + 63) & ~(size_t)63);
    memset(b, 0, sizeof(*b));
    b->br_hw = NO_HW; /* (counting_translate looks it up) */
    b->vaddr = vaddr;
    b->n = n;
    b->ins = ins;
    b->os = (uint8_t)os;
    b->mode = (uint8_t)mode;
    b->end = (uint8_t)end_of(&ins[n - 1]);
    if (lite_lvl && b->end == BRK_COND) {
        b->end = BRK_NONE; /* outcome-free level: a static end (variant 0) */
        b->lite_cond = 1;
    }
    static_schedule(b);
    if (dyn_end(b) && b->end != END_REP) {
        dynamic_end_variants(b);
    }
    b->maxclk = (uint32_t)maxclk_calc(b);
    /* W per execution: the static clocks and the final clock (a misprediction's penalty is
     * added when it is known, or reserved: silent_reserve); REP: added at its resolution */
    b->clocks_add = b->nclocks + (dyn_end(b) && b->end != END_REP ? 1 : 0);
    const struct insn_info *last = &ins[n - 1];
    uint64_t nxt = last->addr + last->len;
    /* SB_SILENT_NEXT at entry: where the next block starts when no resolution is needed (static
     * ends) or when the outcome is silent; X_RESOLVE_AT_ENTRY: the next block entry resolves it */
    b->xval = b->end == BRK_NONE ? nxt : b->end == BRK_JMP ? last->target : X_RESOLVE_AT_ENTRY;
    if (lite_lvl && (b->end == BRK_NONE || b->end == BRK_JMP)) b->xval = X_OUTCOME_FREE;
    b->back = last->target < last->addr;
    b->btarget = last->target;
    b->bnext = nxt;
    pthread_mutex_lock(&p4.run->lock);
    uint32_t id = p4.blocks->n;
    if (id >= MAX_BLOCKS) {
        pthread_mutex_unlock(&p4.run->lock);
        if (!p4.blocks->full_warned++) {
            p4_message("p4pmu: warning: more than %u translated blocks: later blocks are not "
                       "counted (see docs/guest-events.md, limits)\n",
                       MAX_BLOCKS);
        }
        free(b->hk);
        free(b->pa);
        free(b->seq);
        free(b->iclk);
        free(ins);
        free(b);
        return 0;
    }
    if (b->end == BRK_COND) group_join_locked(b, id, nxt);
    p4.blocks->by_id[id] = b;
    if (b->gate) {
        struct pred_group *g = p4.blocks->groups[b->gid];
        g->mem[g->nmem] = id;
        __atomic_store_n(&g->nmem, g->nmem + 1, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&p4.blocks->n, id + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&p4.run->lock);
    return id;
}

int find_insn(const struct blk *b, uint64_t addr)
{
    for (unsigned j = 0; j < b->n; j++) {
        if (b->ins[j].addr == addr) return (int)j;
    }
    return -1;
}

/* find_insn for an address known to be inside an execution of b: QEMU's x86 blocks are
 * position-independent (CF_PCREL) and shared by every virtual address that maps the same
 * physical code, e.g. a shared library in two processes, so the execution may run at another
 * virtual address than b->vaddr, at the same page offset.  -1 if no instruction matches. */
int find_insn_in(const struct blk *b, uint64_t addr)
{
    int j = find_insn(b, addr), hit = -1;
    if (j >= 0) return j;
    for (unsigned k = 0; k < b->n; k++) {
        if (((b->ins[k].addr ^ addr) & 0xFFF) == 0) {
            if (hit >= 0) return -1; /* ambiguous (a block longer than a page) */
            hit = (int)k;
        }
    }
    return hit;
}

/* The next instruction is at `a`, an instruction of block b (which ran last) other than
 * its first, and not where that block's last instruction goes: QEMU left the block there
 * without a discontinuity callback and went on at that instruction in a new block.  That
 * happens when an instruction in the middle of a block accesses MMIO (e.g. the local APIC):
 * QEMU stops, runs the instructions up to the access in a block built for that alone
 * (CF_MEMI_ONLY, which plugins see no block callbacks of) and continues after it.  The
 * block's execution is then cut there (the instructions before `a` retired, the rest did
 * not: it runs again as the new block).  Returns the index of `a` in b if so (>= 1), else 0. */
int abandoned_insn(const struct blk *b, uint64_t a)
{
    if (a <= b->vaddr || a > b->ins[b->n - 1].addr) return 0;
    if (b->lite_cond && (a == b->btarget || a == b->bnext)) return 0; /* its branch went there */
    const struct insn_info *last = &b->ins[b->n - 1];
    switch (b->end) {
    case BRK_COND:
        if (a == b->btarget || a == b->bnext) return 0;
        break;
    case BRK_JMP:
    case BRK_CALL:
        if (a == last->target) return 0;
        break;
    case BRK_JMP_IND:
    case BRK_CALL_IND:
        return 0; /* may go anywhere, also into its own block: taken as its outcome */
    case END_REP:
        if (a == last->addr) return 0; /* the REP itself again (left for an interrupt) */
        break;
    default:
        break;
    }
    int j = find_insn(b, a);
    return j < 1 ? 0 : j;
}
