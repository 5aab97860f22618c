/*
 * p4pmu: block instrumentation at translation time: classification of a block's
 * instructions and registration of its counting operations and callbacks
 * (docs/guest-events.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "translate.h"
#include "batch.h"
#include "blocks.h"
#include "classify.h"
#include "counting.h"
#include "directions.h"
#include "cuts.h"
#include "deadline.h"
#include "flush.h"
#include "fp_assist.h"
#include "kinds.h"
#include "memory.h"
#include "registers.h"
#include "resolve.h"
#include "siblings.h"
#include "state.h"

/* per host thread: the Capstone mode that decoded the previous block (tried first) */
static __thread int tl_mode_pref = -1;

static uint32_t clamp_u32(int64_t n)
{
    if (n < 0) return 0;
    return n > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* The events of the exact-deadline counter one execution of b may add (kinds the signature
 * does not know at its rate): b->exact_add, W2's inline increment, and b->exact_max, the
 * margin of the check at b's entry, with b's own possible misprediction penalty.  The
 * increment has the penalty only for a silent-capable block, whose silent outcomes no
 * callback sees; every other dynamic end is resolved at the next block's entry, before that
 * block's check, and the resolution adds its CPL's penalty (c->exact.pen) when it mispredicted.
 * (W reserves the silent penalties of every group instead: W2's periods are events of one
 * counter, often shorter than those reservations.)  REP iterations are added when the REP
 * resolves (rep_resolve). */
static void exact_weight(struct blk *b)
{
    const struct exact_signature *g = &p4.exact->sig;
    int64_t n = 0;
    for (uint32_t k = 0; k < b->nk; k++)
        n += exact_increment(g, ext(b->hk[k], b->os), b->hc[k]);
    int64_t fin = 0, pen = 0;
    for (unsigned v = 0; v < 4 && b->res; v++) {
        int64_t x = exact_increment(g, ext(b->var[v], b->os), 1);
        if (x > fin) fin = x;
        if (v & 1) pen = g->pen[b->os ? 1 : 0];
    }
    b->exact_add = clamp_u32(n + fin + (b->gate ? pen : 0));
    b->exact_max = clamp_u32(n + fin + pen);
}

/* Classify the n instructions of a block in Capstone mode mi (16, 32 or 64 bit); returns how
 * many decoded to QEMU's instruction length (the others are classified as unknown). */
static size_t classify_all(int mi, size_t n, const uint8_t (*bytes)[16], const uint8_t *lens,
                           const uint64_t *addrs, struct insn_info *ins)
{
    csh h;
    cs_insn *x = cs_get(mi, &h);
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = bytes[i];
        size_t sz = lens[i];
        uint64_t ad = addrs[i];
        if (x && cs_disasm_iter(h, &p, &sz, &ad, x) && x->size == lens[i]) {
            classify_insn(h, x, addrs[i], &ins[i]);
            ok++;
        } else {
            classify_unknown(addrs[i], lens[i], &ins[i]);
        }
    }
    return ok;
}

/* Classify the block's instructions and register its counting operations.  Called by
 * translate() (intercept.c) after the bridge's entry hook, before anything else. */
/* The block's CPL class (os: CPL 0) and the Capstone modes (0: 16, 1: 32, 2: 64 bit) to try,
 * most likely first (the mode that decoded the previous block first).  Returns how many. */
static int mode_candidates(struct vcpu *v, int *os, int cands[3])
{
    uint64_t cr0 = reg_read(v, p4.regs.cr0), efl = reg_read(v, p4.regs.eflags);
    uint64_t efer = reg_read(v, p4.regs.efer);
    int nc = 0;
    if (!(cr0 & CR0_PE)) {
        *os = 1;
        cands[nc++] = 0;
        cands[nc++] = 1;
    } else if (efl & EFL_VM) {
        *os = 0;
        cands[nc++] = 0;
    } else {
        *os = (reg_read(v, p4.regs.cs) & 3) == 0;
        if (efer & EFER_LMA) {
            cands[nc++] = 2;
            cands[nc++] = 1;
            cands[nc++] = 0;
        } else {
            cands[nc++] = 1;
            cands[nc++] = 0;
        }
    }
    for (int i = 1; i < nc && tl_mode_pref >= 0; i++) {
        if (cands[i] == tl_mode_pref) {
            int t = cands[0];
            cands[0] = cands[i];
            cands[i] = t;
        }
    }
    return nc;
}

/* Classify the n instructions of tb into ins[] in the first candidate mode that decodes all
 * of them to QEMU's lengths (else the first candidate).  Returns the mode. */
static int classify_block(struct qemu_plugin_tb *tb, size_t n, const int *cands, int nc,
                          struct insn_info *ins)
{
    uint8_t(*bytes)[16] = malloc(16 * n);
    uint8_t *lens = malloc(n);
    uint64_t *addrs = malloc(8 * n);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        lens[i] = (uint8_t)qemu_plugin_insn_data(insn, bytes[i], 16);
        addrs[i] = qemu_plugin_insn_vaddr(insn);
    }
    const uint8_t(*cbytes)[16] = (const uint8_t(*)[16])bytes;
    int best = -1;
    for (int ci = 0; ci < nc && best < 0; ci++) {
        if (classify_all(cands[ci], n, cbytes, lens, addrs, ins) == n) best = cands[ci];
    }
    if (best < 0) {
        /* no mode decodes every instruction to QEMU's length: use the first candidate */
        best = cands[0];
        classify_all(best, n, cbytes, lens, addrs, ins);
    }
    free(bytes);
    free(lens);
    free(addrs);
    return best;
}

/* Register the counting operations and callbacks of block `id` (translated as tb, n
 * instructions, at the outcome-free level if lt), in this order: TB entry operations run in
 * registration order. */
static void register_block_ops(struct qemu_plugin_tb *tb, size_t n, uint32_t id, int lt)
{
    const struct blk *b = p4.blocks->by_id[id];
    void *ud = (void *)(uintptr_t)id;
    struct qemu_plugin_scoreboard *sb = p4.run->scoreboard;
    p4_plugin_u64 clocks = {sb, SB_DEADLINE_CLOCKS * 8}, current = {sb, SB_CURRENT_BLOCK * 8},
                  sibling = {sb, SB_SIBLING_REQUEST * 8}, silent_next = {sb, SB_SILENT_NEXT * 8},
                  execs = {sb, (SB_HDR + id) * 8}, exact_events = {sb, SB_EXACT_EVENTS * 8};
    /* the previous block's outcome unless it is the silent one (or none is needed) */
    qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, cb_xcheck, P4_CB_R_REGS, P4_COND_NE, silent_next,
                                              lt ? X_OUTCOME_FREE : b->vaddr, (void *)b);
    /* fires when this block might cross the deadline */
    qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, cb_sched, P4_CB_RW_REGS_PC, P4_COND_GE, clocks,
                                              SB_FIRES_AT - maxclk(b), ud);
    if (p4.run->threads == 2) {
        qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, cb_xpend, P4_CB_RW_REGS_PC, P4_COND_NE,
                                                  sibling, 0, ud);
    }
    if (__atomic_load_n(&p4.exact->active, __ATOMIC_ACQUIRE)) {
        /* fires when this block might take the exact-deadline counter to its limit; on a
         * block of weight 0 (OS code for a USR-only counter, say) when an earlier block may
         * have taken it there: the block after an overflow is checked whatever its weight
         * (W's budget leaves W2's counter out) */
        qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, cb_exact_deadline, P4_CB_RW_REGS_PC,
                                                  P4_COND_GE, exact_events,
                                                  SB_FIRES_AT - b->exact_max, ud);
    }
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, P4_INLINE_ADD_U64, clocks, b->clocks_add);
    if (b->exact_add) {
        qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, P4_INLINE_ADD_U64, exact_events,
                                                          b->exact_add);
    }
    /* the first execution in the batch (dirty list), or a gated silent-capable block */
    qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, cb_first, P4_CB_NO_REGS, P4_COND_EQ, execs, 0,
                                              ud);
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, P4_INLINE_ADD_U64, execs, 1);
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, P4_INLINE_STORE_U64, current, id);
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, P4_INLINE_STORE_U64, silent_next,
                                                      b->xval);
    if (b->end == END_REP) {
        qemu_plugin_register_vcpu_insn_exec_cb(qemu_plugin_tb_get_insn(tb, n - 1), cb_rep,
                                               P4_CB_R_REGS, ud);
    }
    if (memory_level_active()) mem_register(tb, n, id);
    if (memory_level_active() & P4_MEM_FP) fp_assist_register(tb, n, id);
    if (lt && n == 1) {
        /* may be the re-execution of an MMIO access QEMU left a block at (cb_memi) */
        qemu_plugin_register_vcpu_mem_cb(qemu_plugin_tb_get_insn(tb, 0), cb_memi, P4_CB_NO_REGS,
                                         P4_MEM_RW, ud);
    }
    for (size_t i = 0; i < n && p4.run->threads == 2; i++) {
        if (b->ins[i].flags & CI_HLT) {
            DBG("HLT hook at %#llx (block %#llx, %zu insns)\n", (unsigned long long)b->ins[i].addr,
                (unsigned long long)b->vaddr, n);
            qemu_plugin_register_vcpu_insn_exec_cb(qemu_plugin_tb_get_insn(tb, i), cb_hlt,
                                                   P4_CB_RW_REGS, ud);
        }
    }
}

uint32_t counting_translate(struct qemu_plugin_tb *tb, struct vcpu *v)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    if (!n) return 0;
    int os, cands[3];
    int nc = mode_candidates(v, &os, cands);
    struct insn_info *ins = calloc(n, sizeof(*ins));
    int mode = classify_block(tb, n, cands, nc, ins);
    tl_mode_pref = mode;
    int lt = __atomic_load_n(&p4.lite->active, __ATOMIC_ACQUIRE);
    uint32_t id = block_new(qemu_plugin_tb_vaddr(tb), (unsigned)n, ins, os, mode, lt);
    if (!id) return 0;
    if (__atomic_load_n(&p4.exact->active, __ATOMIC_ACQUIRE)) {
        exact_weight(p4.blocks->by_id[id]);
    }
    directions_note_block(p4.blocks->by_id[id]);
    register_block_ops(tb, n, id, lt);
    return id;
}

/* count=auto: counting starts with the WRMSR that first enables a counter, which ran in a
 * block translated without instrumentation: credit that WRMSR's own clocks (it retires after
 * the access, docs/guest-events.md I3) to the first batch. */
void counting_credit_wrmsr(struct batch_vcpu *bt, uint64_t addr, int os)
{
    static const uint8_t code[2] = {0x0F, 0x30};
    csh h;
    cs_insn *x = cs_get(1, &h);
    const uint8_t *p = code;
    size_t sz = 2;
    uint64_t ad = addr;
    struct insn_info in;
    if (!x || !cs_disasm_iter(h, &p, &sz, &ad, x)) return;
    classify_insn(h, x, addr, &in);
    struct clock_fields c[64];
    unsigned m = schedule(&in, 0, 1, c, 64, NULL);
    uint32_t prev = 0;
    for (unsigned i = 0; i < m; i++) {
        uint32_t k = kind_intern(c[i].f);
        acc_add(bt, ext(k, os), 1);
        if (i) pair_hash_add(&bt->pairs, prev, ext(k, os), 1);
        else {
            bt->next_first = ext(k, os) + 1;
            bt->next_first_bubble = 0;
        }
        prev = ext(k, os);
    }
    if (m) {
        acc_last_add(bt, prev, 1);
        bt->cut_last = prev + 1; /* the batch's last clock until a block runs */
    }
}
