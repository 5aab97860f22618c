/*
 * p4pmu: the input assists (emulator/fp_assist.py; docs/events.md, "Assists").  While a
 * counter may count SSE_input_assist or x87_assist PREA (the memory level's P4_MEM_FP part),
 * every SSE instruction with floating-point inputs (the generated table p4_sse_inputs) reads
 * MXCSR and its register inputs before it runs, and the value its memory input loads; every
 * x87 instruction that loads a single or double (p4_x87_denormal_loads) reads the value, and
 * every x87 store of one (p4_x87_denormal_stores) the value stored.  An execution with a
 * denormal input (for SSE, while MXCSR.DAZ is clear) requests one input assist, one that
 * stores a denormal an output assist, in the clock it retires in (a memory-side fix,
 * memory.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "messages.h"
#include "fp_assist.h"
#include "blocks.h"
#include "counting.h"
#include "memory.h"
#include "registers.h"
#include "state.h"

#define UD_INSN_BITS 10u /* an instruction index in a block (as memory.c) */

/* an execution whose memory input is still to load, per vCPU */
struct sse_pending {
    uint32_t id;
    unsigned i;
    int armed;
    int based;     /* base is the address of its first load */
    uint64_t base; /* (a 16-byte input may come as two loads) */
};

struct sse_assist_state {
    struct sse_pending *pending; /* per vCPU */
    int no_regs_warned;
};

struct sse_assist_state *sse_assist_state_new(int max_vcpus)
{
    struct sse_assist_state *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->pending = calloc((size_t)max_vcpus, sizeof(*s->pending));
    if (!s->pending) {
        free(s);
        return NULL;
    }
    return s;
}

/* fp_assist.is_denormal: exponent 0, fraction not 0 */
static int is_denormal(uint64_t raw, unsigned bits)
{
    unsigned frac = bits == 32 ? 23 : 52;
    uint64_t exp_mask = bits == 32 ? 0xFFull : 0x7FFull;
    return ((raw >> frac) & exp_mask) == 0 && (raw & ((1ull << frac) - 1)) != 0;
}

/* Does the operand data[0, n) (bytes from byte `off` of the input on) hold a denormal
 * among the row's first `count` elements? */
static int has_denormal(const struct p4_sse_inputs *r, const uint8_t *data, unsigned off,
                        unsigned n)
{
    unsigned size = r->bits / 8u;
    for (unsigned e = 0; e < r->count; e++) {
        unsigned at = e * size;
        if (at < off || at + size > off + n) continue;
        uint64_t raw = 0;
        memcpy(&raw, data + (at - off), size);
        if (is_denormal(raw, r->bits)) return 1;
    }
    return 0;
}

/* the execution of block id under way requests an assist (clock field `field`) in
 * instruction i's clock */
static void request(unsigned vi, uint32_t id, unsigned i, unsigned field)
{
    uint8_t d[KF_N];
    memset(d, 0, KF_N);
    d[field] = 1;
    mem_fields_at(vi, id, i, d);
}

static void cb_sse_regs(unsigned int vi, void *ud)
{
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    uint32_t id = (uint32_t)((uintptr_t)ud >> UD_INSN_BITS);
    unsigned i = (unsigned)((uintptr_t)ud & ((1u << UD_INSN_BITS) - 1));
    struct sse_pending *p = &p4.sse_assist->pending[vi];
    p->armed = 0;
    if (!c->init || c->sbase[SB_CURRENT_BLOCK] != id) return;
    if (!p4.regs.mxcsr) {
        if (!p4.sse_assist->no_regs_warned++) {
            p4_message("p4pmu: warning: this QEMU does not expose MXCSR and the XMM registers "
                       "to plugins: SSE_input_assist counts nothing\n");
        }
        return;
    }
    const struct insn_info *in = &p4.blocks->by_id[id]->ins[i];
    const struct p4_sse_inputs *r = &p4_sse_inputs[in->sse_in - 1];
    struct vcpu *v = &p4.vcpus[vi];
    if (reg_read(v, p4.regs.mxcsr) & P4_MXCSR_DAZ) return;
    for (int k = 0; k < 2; k++) {
        int x = in->sse_reg[k];
        if (x < 0 || !p4.regs.xmm[x]) continue;
        uint8_t data[16];
        reg_read_bytes(v, p4.regs.xmm[x], data, sizeof(data));
        if (has_denormal(r, data, 0, sizeof(data))) {
            request(vi, id, i, KF_SSE_ASSIST);
            return;
        }
    }
    if (in->sse_mem) {
        p->id = id;
        p->i = i;
        p->armed = 1;
        p->based = 0;
    }
}

static void cb_sse_mem(unsigned int vi, p4_meminfo_t info, uint64_t vaddr, void *ud)
{
    uint32_t id = (uint32_t)((uintptr_t)ud >> UD_INSN_BITS);
    unsigned i = (unsigned)((uintptr_t)ud & ((1u << UD_INSN_BITS) - 1));
    struct sse_pending *p = &p4.sse_assist->pending[vi];
    if (!p->armed || p->id != id || p->i != i || qemu_plugin_mem_is_store(info)) return;
    if (!p->based) {
        p->base = vaddr;
        p->based = 1;
    }
    p4_mem_value val = qemu_plugin_mem_get_value(info);
    unsigned n = 1u << qemu_plugin_mem_size_shift(info);
    uint8_t data[16];
    memset(data, 0, sizeof(data));
    if (val.type == P4_MEM_VALUE_U128) {
        memcpy(data, &val.data.u128.low, 8);
        memcpy(data + 8, &val.data.u128.high, 8);
    } else {
        memcpy(data, &val.data.u64, n < 8 ? n : 8);
    }
    const struct p4_sse_inputs *r = &p4_sse_inputs[p4.blocks->by_id[id]->ins[i].sse_in - 1];
    uint64_t off = vaddr - p->base;
    if (off < 16 && has_denormal(r, data, (unsigned)off, n > 16 ? 16 : n)) {
        p->armed = 0;
        request(vi, id, i, KF_SSE_ASSIST);
    }
}

/* An x87 load (store: 0) or store (1) of a single (4 bytes) or double (8) by instruction
 * i of block id: a denormal value requests the assist of clock field `field`
 * (fp_assist.x87_requests_assist, x87_output_assist). */
static void x87_value(unsigned vi, p4_meminfo_t info, void *ud, int store, unsigned field)
{
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    uint32_t id = (uint32_t)((uintptr_t)ud >> UD_INSN_BITS);
    unsigned i = (unsigned)((uintptr_t)ud & ((1u << UD_INSN_BITS) - 1));
    unsigned shift = qemu_plugin_mem_size_shift(info);
    if (!c->init || c->sbase[SB_CURRENT_BLOCK] != id ||
        (int)qemu_plugin_mem_is_store(info) != store || (shift != 2 && shift != 3))
        return;
    p4_mem_value val = qemu_plugin_mem_get_value(info);
    uint64_t raw = shift == 2 ? val.data.u32 : val.data.u64;
    if (is_denormal(raw, shift == 2 ? 32 : 64)) request(vi, id, i, field);
}

static void cb_x87_load(unsigned int vi, p4_meminfo_t info, uint64_t vaddr, void *ud)
{
    (void)vaddr;
    x87_value(vi, info, ud, 0, KF_X87_PREA);
}

static void cb_x87_store(unsigned int vi, p4_meminfo_t info, uint64_t vaddr, void *ud)
{
    (void)vaddr;
    x87_value(vi, info, ud, 1, KF_X87_POAU);
}

void fp_assist_register(struct qemu_plugin_tb *tb, size_t n, uint32_t id)
{
    const struct blk *b = p4.blocks->by_id[id];
    for (size_t i = 0; i < n && i < (1u << UD_INSN_BITS); i++) {
        const struct insn_info *in = &b->ins[i];
        if (!in->sse_in && !in->x87_mem && !in->x87_store) continue;
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        void *ud = (void *)(((uintptr_t)id << UD_INSN_BITS) | i);
        if (in->x87_store) {
            qemu_plugin_register_vcpu_mem_cb(insn, cb_x87_store, P4_CB_NO_REGS, P4_MEM_W, ud);
            continue;
        }
        if (in->x87_mem) {
            qemu_plugin_register_vcpu_mem_cb(insn, cb_x87_load, P4_CB_NO_REGS, P4_MEM_R, ud);
            continue;
        }
        qemu_plugin_register_vcpu_insn_exec_cb(insn, cb_sse_regs, P4_CB_R_REGS, ud);
        if (in->sse_mem) {
            qemu_plugin_register_vcpu_mem_cb(insn, cb_sse_mem, P4_CB_NO_REGS, P4_MEM_R, ud);
        }
    }
}
