/*
 * p4pmu: classification of decoded x86 instructions with Capstone 5 into the clock model's
 * per-instruction fields (insn_classes._classify_one and _build; table generated into
 * p4_tables.h) (docs/guest-events.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "messages.h"
#include "classify.h"
#include "state.h"


static const char *const cmp_names[4] = {"cmpps", "cmppd", "cmpss", "cmpsd"};

/* per host thread (a Capstone handle is used by one thread at a time): the handle and the
 * instruction buffer of each mode (16, 32, 64 bit) */
static __thread csh tl_cs[3];
static __thread cs_insn *tl_ci[3];

static int row_cmp(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const struct p4_named_row *)elem)->name);
}

static int reg_cmp(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const struct p4_reg_bit *)elem)->name);
}

/* Capstone register ids -> the tracked registers' bits, by name (timing.reg_bit) */
static void map_registers(csh h)
{
    for (unsigned id = 1; id < X86_REG_ENDING; id++) {
        const char *nm = cs_reg_name(h, id);
        const struct p4_reg_bit *r = nm ? bsearch(nm, p4_reg_bits, P4_REG_NAMES,
                                                  sizeof(p4_reg_bits[0]), reg_cmp)
                                        : NULL;
        p4.capstone->regbit[id] = r ? (unsigned char)(r->bit + 1) : 0;
    }
}

static int sse_row_cmp(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const struct p4_sse_inputs *)elem)->name);
}

/* Capstone instruction ids -> the rows of the SSE instructions with floating-point inputs
 * (fp_assist.SSE_DENORMAL_INPUTS, generated p4_sse_inputs), by name */
static int x87_name_cmp(const void *key, const void *elem)
{
    return strcmp((const char *)key, *(const char *const *)elem);
}

static int map_sse_inputs(csh h, unsigned n_ids)
{
    p4.capstone->sse_row = calloc(n_ids, 1);
    p4.capstone->x87_load = calloc(n_ids, 1);
    p4.capstone->x87_store = calloc(n_ids, 1);
    if (!p4.capstone->sse_row || !p4.capstone->x87_load || !p4.capstone->x87_store) return -1;
    for (unsigned id = 1; id < n_ids; id++) {
        const char *nm = cs_insn_name(h, id);
        const struct p4_sse_inputs *r = nm ? bsearch(nm, p4_sse_inputs, P4_SSE_INPUTS,
                                                     sizeof(p4_sse_inputs[0]), sse_row_cmp)
                                           : NULL;
        if (r) p4.capstone->sse_row[id] = (unsigned char)(r - p4_sse_inputs + 1);
        p4.capstone->x87_load[id] = nm && bsearch(nm, p4_x87_denormal_loads, P4_X87_DENORMAL_LOADS,
                                                  sizeof(p4_x87_denormal_loads[0]), x87_name_cmp);
        p4.capstone->x87_store[id] = nm &&
                                     bsearch(nm, p4_x87_denormal_stores, P4_X87_DENORMAL_STORES,
                                             sizeof(p4_x87_denormal_stores[0]), x87_name_cmp);
    }
    return 0;
}

/* the XMM register number of operand op, -1 if it is none */
static int xmm_of(const cs_x86_op *op)
{
    if (op->type != X86_OP_REG || op->reg < X86_REG_XMM0 || op->reg > X86_REG_XMM15) return -1;
    return (int)(op->reg - X86_REG_XMM0);
}

/* o's SSE inputs (insn_info.sse_*): where an SSE instruction with floating-point inputs
 * reads them (fp_assist.py: the source operand, and the destination register when the row
 * says it is read) */
static void set_sse_inputs(const cs_insn *ci, unsigned id, struct insn_info *o)
{
    o->sse_in = 0;
    o->sse_reg[0] = o->sse_reg[1] = -1;
    o->sse_mem = 0;
    unsigned k = id < p4.capstone->n_ids ? p4.capstone->sse_row[id] : 0;
    const cs_x86 *x = &ci->detail->x86;
    /* an x87 instruction loading or storing a single or double: a 4- or 8-byte memory
     * operand (a double extended one is accessed as 8 + 2 bytes, whose 8 are no double) */
    int single_or_double = 0;
    for (int j = 0; j < x->op_count; j++) {
        if (x->operands[j].type == X86_OP_MEM)
            single_or_double = x->operands[j].size == 4 || x->operands[j].size == 8;
    }
    int known = id < p4.capstone->n_ids && single_or_double;
    o->x87_mem = known && p4.capstone->x87_load[id] && o->loads && !o->stores;
    o->x87_store = known && p4.capstone->x87_store[id] && o->stores;
    /* (the destination is an XMM register: not the string instruction CMPSD) */
    if (!k || x->op_count < 2 || xmm_of(&x->operands[0]) < 0) return;
    const cs_x86_op *src = &x->operands[1];
    if (src->type == X86_OP_MEM) {
        o->sse_mem = 1;
    } else if (xmm_of(src) >= 0) {
        o->sse_reg[1] = (int8_t)xmm_of(src);
    } else {
        return;
    }
    if (p4_sse_inputs[k - 1].dest_read) o->sse_reg[0] = (int8_t)xmm_of(&x->operands[0]);
    o->sse_in = (uint8_t)k;
}

int cs_setup(unsigned core)
{
    int major = 0, minor = 0;
    cs_version(&major, &minor);
    if (major != CS_API_MAJOR) {
        p4_message("p4pmu: Capstone %d.%d loaded, the plugin was built for %d.x\n", major, minor,
                   CS_API_MAJOR);
        return -1;
    }
    csh h;
    if (cs_open(CS_ARCH_X86, CS_MODE_32, &h) != CS_ERR_OK) {
        p4_message("p4pmu: cs_open failed\n");
        return -1;
    }
    p4.capstone = calloc(1, sizeof(*p4.capstone));
    if (!p4.capstone) return -1;
    unsigned n = 1;
    while (n < 100000 && cs_insn_name(h, n))
        n++;
    p4.capstone->n_ids = n;
    for (int s = 0; s < 2; s++) {
        p4.capstone->rows[s] = calloc(n, sizeof(struct p4_row));
    }
    p4.capstone->uops = calloc(n, sizeof(*p4.capstone->uops));
    p4.capstone->rep = calloc(n, sizeof(*p4.capstone->rep));
    p4.capstone->timing = calloc(n, sizeof(*p4.capstone->timing));
    if (core >= P4_NCORES) core = 0;
    p4.capstone->l1_load = p4_core_timing[core][1];
    p4.capstone->lock = p4_core_timing[core][5];
    map_registers(h);
    for (unsigned id = 0; id < n; id++) {
        const char *nm = id ? cs_insn_name(h, id) : NULL;
        const struct p4_named_row *r = nm ? bsearch(nm, p4_named_rows, P4_NAMED_ROWS,
                                                    sizeof(p4_named_rows[0]), row_cmp)
                                          : NULL;
        for (int k = 0; nm && k < 4; k++) {
            if (!strcmp(nm, cmp_names[k])) p4.capstone->cmp_id[k] = id;
        }
        if (r) {
            memcpy(p4.capstone->uops[id], r->u[core], sizeof(p4.capstone->uops[id]));
            memcpy(p4.capstone->rep[id], r->rep[core], sizeof(p4.capstone->rep[id]));
            memcpy(p4.capstone->timing[id], r->t[core], sizeof(p4.capstone->timing[id]));
        }
        for (int s = 0; s < 2; s++) {
            if (r) {
                p4.capstone->rows[s][id] = r->r[s];
            } else {
                struct p4_row d = {1, s ? CLS_SIMDINT : CLS_NONE, BRK_NONE, 0, 0};
                p4.capstone->rows[s][id] = d;
            }
        }
    }
    int r = map_sse_inputs(h, n);
    cs_close(&h);
    return r;
}

cs_insn *cs_get(int mi, csh *hp)
{
    if (!tl_cs[mi]) {
        static const cs_mode modes[3] = {CS_MODE_16, CS_MODE_32, CS_MODE_64};
        if (cs_open(CS_ARCH_X86, modes[mi], &tl_cs[mi]) != CS_ERR_OK) {
            return NULL;
        }
        cs_option(tl_cs[mi], CS_OPT_DETAIL, CS_OPT_ON);
        tl_ci[mi] = cs_malloc(tl_cs[mi]);
    }
    *hp = tl_cs[mi];
    return tl_ci[mi];
}

static int is_sse_group(const cs_detail *d)
{
    for (int i = 0; i < d->groups_count; i++) {
        switch (d->groups[i]) {
        case X86_GRP_MMX:
        case X86_GRP_SSE1:
        case X86_GRP_SSE2:
        case X86_GRP_SSE3:
        case X86_GRP_SSSE3:
        case X86_GRP_SSE41:
        case X86_GRP_SSE42:
        case X86_GRP_3DNOW:
            return 1;
        default:
            break;
        }
    }
    return 0;
}

/* what the operands of an instruction say (insn_classes._classify_one) */
struct operand_scan {
    unsigned loads, stores;
    int xmm;      /* an XMM register operand */
    int ctl;      /* a control or debug register operand */
    int indirect; /* a register or memory operand (an indirect branch, for branches) */
    uint64_t target;
};

static struct operand_scan scan_operands(const cs_x86 *x, const struct p4_row *row)
{
    struct operand_scan r = {0, 0, 0, 0, 0, 0};
    int have_target = 0;
    for (int i = 0; i < x->op_count; i++) {
        const cs_x86_op *op = &x->operands[i];
        if (op->type == X86_OP_MEM) {
            if (row->flags & RF_STORE) {
                r.stores++;
            } else if (row->flags & RF_LOAD) {
                r.loads++;
            } else {
                if (op->access & CS_AC_READ) r.loads++;
                if (op->access & CS_AC_WRITE) r.stores++;
            }
            r.indirect = 1;
        } else if (op->type == X86_OP_REG) {
            unsigned reg = op->reg;
            if (reg >= X86_REG_XMM0 && reg <= X86_REG_XMM31) r.xmm = 1;
            else if ((reg >= X86_REG_CR0 && reg <= X86_REG_CR15) ||
                     (reg >= X86_REG_DR0 && reg <= X86_REG_DR15))
                r.ctl = 1;
            r.indirect = 1;
        } else if (op->type == X86_OP_IMM) {
            r.target = (uint64_t)op->imm;
            have_target = 1;
        }
    }
    if ((row->br == BRK_COND || row->br == BRK_JMP || row->br == BRK_CALL) && have_target) {
        r.indirect = 0;
    }
    return r;
}

/* the floating-point / SIMD uop fields of class cls (opu uops of the operation itself) */
static void set_fp_fields(struct insn_info *o, unsigned cls, unsigned opu, unsigned loads,
                          unsigned stores, int xmm)
{
    switch (cls) {
    case CLS_X87:
        o->fp[FPI_X87] = (uint8_t)opu;
        if (loads) o->fp[FPI_MOVLD] = (uint8_t)loads;
        break;
    case CLS_X87MOVE:
    case CLS_SIMDMOVE:
        if (loads) o->fp[FPI_MOVLD] = (uint8_t)loads;
        if (stores) o->fp[FPI_MOVST] = (uint8_t)stores;
        if (!loads && !stores) o->fp[FPI_MOVST] = (uint8_t)opu;
        break;
    case CLS_PSP:
    case CLS_PDP:
    case CLS_SSP:
    case CLS_SDP:
        o->fp[FPI_PSP + (cls - CLS_PSP)] = (uint8_t)opu;
        if (loads) o->fp[FPI_MOVLD] = (uint8_t)loads;
        if (stores) o->fp[FPI_MOVST] = (uint8_t)stores;
        break;
    case CLS_SIMDINT:
        o->fp[xmm ? FPI_MMX128 : FPI_MMX64] = (uint8_t)opu;
        if (loads) o->fp[FPI_MOVLD] = (uint8_t)loads;
        break;
    default:
        break;
    }
}

/* the branch kind (direct or indirect) and target */
static void set_branch(struct insn_info *o, unsigned br, int indirect, uint64_t target)
{
    switch (br) {
    case BRK_COND:
        o->br = BRK_COND;
        o->target = target;
        break;
    case BRK_JMP:
        o->br = indirect ? BRK_JMP_IND : BRK_JMP;
        o->target = indirect ? 0 : target;
        break;
    case BRK_CALL:
        o->br = indirect ? BRK_CALL_IND : BRK_CALL;
        o->target = indirect ? 0 : target;
        break;
    case BRK_RET:
        o->br = BRK_RET;
        break;
    case BRK_FAR:
        o->br = BRK_FAR;
        break;
    default:
        break;
    }
}

/* The Capstone id to classify ci by: CMPccPS/PD/SS/SD (0F C2) by their mnemonic's suffix,
 * as Capstone 5 names them wrongly (insn_classes.sse_compare_name) */
static unsigned row_id(const cs_insn *ci)
{
    const cs_x86 *x = &ci->detail->x86;
    if (x->opcode[0] == 0x0F && x->opcode[1] == 0xC2) {
        size_t n = strlen(ci->mnemonic);
        const char *sfx = n >= 2 ? ci->mnemonic + n - 2 : "";
        for (int k = 0; k < 4; k++) {
            if (!strcmp(sfx, cmp_names[k] + 3)) return p4.capstone->cmp_id[k];
        }
    }
    return ci->id;
}

/* insn_classes.form_of: 0 r, 1 ld, 2 st, 3 rmw (uop_table.FORMS) */
static unsigned form_of(unsigned loads, unsigned stores)
{
    return loads && stores ? 3 : loads ? 1 : stores ? 2 : 0;
}

/* The tracked registers among n Capstone register ids (timing.reg_mask) */
static uint64_t reg_mask(const uint16_t *regs, unsigned n)
{
    uint64_t m = 0;
    for (unsigned i = 0; i < n; i++) {
        if (regs[i] < X86_REG_ENDING && p4.capstone->regbit[regs[i]]) {
            m |= 1ull << (p4.capstone->regbit[regs[i]] - 1);
        }
    }
    return m;
}

/* The timing fields of *o (timing.insn_timing, x87_masks; insn_classes._build) */
static void set_timing(csh h, const cs_insn *ci, unsigned id, unsigned cls, int locked,
                       struct insn_info *o)
{
    unsigned lat = id < p4.capstone->n_ids ? p4.capstone->timing[id][0] : 0;
    unsigned stall = id < p4.capstone->n_ids ? p4.capstone->timing[id][1] : 0;
    if (o->loads) lat += p4.capstone->l1_load;
    if (locked && stall < p4.capstone->lock - 1) stall = p4.capstone->lock - 1;
    cs_regs rd, wr;
    uint8_t nr = 0, nw = 0;
    if (cs_regs_access(h, ci, rd, &nr, wr, &nw) == CS_ERR_OK) {
        o->rmask = reg_mask(rd, nr);
        o->wmask = reg_mask(wr, nw);
    }
    const uint64_t x87 = 1ull << P4_REG_X87;
    int fxch = !strcmp(ci->mnemonic, "fxch");
    if (fxch) {
        o->rmask &= ~x87;
        o->wmask &= ~x87;
    } else if (cls == CLS_X87) {
        o->rmask |= x87;
        o->wmask |= x87;
    } else if (cls == CLS_X87MOVE) {
        if (o->stores) o->rmask |= x87;
        else if (o->loads) o->wmask |= x87;
        else {
            o->rmask |= x87;
            o->wmask |= x87;
        }
    }
    o->rlat = (uint16_t)lat;
    o->stall = (uint16_t)stall;
}

/* Classify one decoded instruction into *o (linear address addr): insn_classes._build. */
void classify_insn(csh h, const cs_insn *ci, uint64_t addr, struct insn_info *o)
{
    const cs_x86 *x = &ci->detail->x86;
    int sse = is_sse_group(ci->detail);
    unsigned id = row_id(ci);
    struct p4_row row = (id < p4.capstone->n_ids) ? p4.capstone->rows[sse][id]
                                                  : (struct p4_row){1, CLS_NONE, BRK_NONE, 0, 0};
    struct operand_scan ops = scan_operands(x, &row);
    unsigned loads = ops.loads, stores = ops.stores;
    int rep = x->prefix[0] == 0xF2 || x->prefix[0] == 0xF3;
    unsigned flags = row.flags;
    unsigned cls = row.cls;
    unsigned op = row.op;
    if (!strcmp(ci->mnemonic, "movsd") && ops.xmm) {
        cls = CLS_SIMDMOVE;
        flags = RF_MOVE;
    }
    if (id == p4.capstone->cmp_id[3] && ops.xmm) { /* CMPccSD, not the string CMPSD */
        cls = CLS_SDP;
        flags = 0;
    }
    if (flags & RF_NOMEM) loads = stores = 0;
    unsigned measured = id < p4.capstone->n_ids ? p4.capstone->uops[id][form_of(loads, stores)] : 0;
    if (flags & RF_ILOAD) loads++;
    if (flags & RF_ISTORE) stores++;
    if ((flags & RF_MOVE) && (loads || stores)) op = 0;
    memset(o, 0, sizeof(*o));
    o->addr = addr;
    o->len = (uint8_t)ci->size;
    if ((flags & RF_ALIGN) || ops.ctl) o->flags |= CI_ALIGN;
    if (flags & RF_HLT) o->flags |= CI_HLT;
    unsigned uops;
    if (rep && (flags & RF_STRING)) {
        o->flags |= CI_REP | CI_ALIGN;
        const unsigned short *m = id < p4.capstone->n_ids ? p4.capstone->rep[id] : NULL;
        int known = m && (m[0] || m[1]);
        o->rep_iter10 = (uint16_t)(known ? m[1] : 10 * (1 + loads + 2 * stores));
        o->addr_size = x->addr_size;
        uops = known ? m[0] : 2;
        loads = stores = 0;
    } else if (measured) {
        uops = measured;
    } else {
        uops = op + loads + 2 * stores;
        if (uops < 1) uops = 1;
    }
    if (ops.ctl && uops < 6) uops = 6;
    o->uops = uops > 65535 ? 65535 : (uint16_t)uops;
    o->loads = (uint8_t)loads;
    o->stores = (uint8_t)stores;
    int locked = x->prefix[0] == 0xF0 || (id == X86_INS_XCHG && (ops.loads || ops.stores));
    set_timing(h, ci, id, cls, locked, o);
    if (o->flags & CI_REP) o->rlat = 0; /* its registers are final at its last iteration */
    /* insn_classes.extra_retired: counted twice by instr_retired */
    o->dup = row.dup == P4_OVERCOUNT_ALWAYS || (row.dup == P4_OVERCOUNT_WITH_MEMORY && loads);
    set_fp_fields(o, cls, op ? op : 1, loads, stores, ops.xmm);
    set_branch(o, row.br, ops.indirect, ops.target);
    set_sse_inputs(ci, id, o);
}

/* Fallback for an instruction Capstone cannot decode in any mode: 1 uop, nothing else. */
void classify_unknown(uint64_t addr, unsigned len, struct insn_info *o)
{
    memset(o, 0, sizeof(*o));
    o->addr = addr;
    o->len = (uint8_t)len;
    o->uops = 1;
}
