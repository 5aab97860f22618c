/* The events guest's fuzzer (script command `fuzz`): a seeded stream of random RDMSR, WRMSR
 * and RDPMC over 300h-3FFh, IA32_MISC_ENABLE (1A0h) and the RDPMC index space, random values
 * with reserved bits, at CPL 0 and CPL 3, with CR4.PCE switched on and off, each run through
 * probe_exec (the instruction and a reference stub, registers and flags checked).  The guest
 * decides nothing: it prints a digest of the results every `every` operations, and the host
 * (tests/guests/fuzz.py) replays the same stream on the emulator alone and compares.
 *
 * What a digest covers (what does not depend on how far the counters have counted): every
 * fault and its vector, every value read except counter values (RDMSR 300h-311h, RDPMC) and
 * the CCCRs' OVF bit, and of IA32_MISC_ENABLE the bits the PMU owns (7, 11, 12; QEMU owns
 * the rest).
 *
 * Performance interrupts: the handler (pmicfg) clears OVF and leaves the LVT entry masked, as
 * NetBurst leaves it after a delivery; the fuzzer unmasks it (with pmicfg's LVT value) every
 * FUZZ_UNMASK_EVERY operations, so a counter the stream programs to overflow on every event
 * (FORCE_OVF) interrupts once per period instead of taking the guest over.  A probe the PMI
 * interrupted has the handler's frame below its stack pointer: its stack check is waived.
 *
 * The stream (fuzz_next) must stay the same as tests/guests/fuzz.py `ops`.
 */
#include "evrt.h"
#include "fuzz.h"

enum { FZ_WRMSR, FZ_RDMSR, FZ_RDPMC, FZ_SETPCE };
#define FUZZ_UNMASK_EVERY 1000

struct fuzz_op {
    int kind, ring3;
    u32 ecx;
    u64 value;
};

/* xorshift64* (Vigna): a stream both sides compute the same way */
static u64 rng_next(u64 *s)
{
    u64 x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void fuzz_next(u64 *s, struct fuzz_op *op)
{
    u64 r = rng_next(s), c = rng_next(s), v = rng_next(s);
    u32 a = (u32)(r >> 32), cl = (u32)c, ch = (u32)(c >> 32);
    u32 k = a % 100;
    op->kind = k < 45 ? FZ_WRMSR : k < 85 ? FZ_RDMSR : k < 98 ? FZ_RDPMC : FZ_SETPCE;
    op->ring3 = (a >> 8) % 10 == 0;
    op->ecx = cl % 20 == 0 ? 0x1A0u : 0x300u + (ch & 0xFF);
    u32 style = (cl >> 8) % 64;
    if (style < 24)
        op->value = v;                                /* any bits */
    else if (style < 44)
        op->value = v & 0xFFFFFFFFull;                /* the low half */
    else if (style < 63)
        op->value = v & 0x7FFFFFFFull;                /* no OVF, no high half */
    else
        op->value = 0xFFFFFFFFFFull - (v & 0xFFFF);   /* a counter near overflow */
    if (op->kind == FZ_RDPMC)
        op->ecx = (cl >> 16) % 10 < 7 ? ((ch >> 8) % 18) | ((ch >> 16) & 1) << 31 : (u32)v;
    if (op->kind == FZ_SETPCE)
        op->value = v & 1;
}

/* the part of a result the digest covers (see the header) */
static u64 covered(const struct fuzz_op *op, int vec, u64 val)
{
    if (vec >= 0 || op->kind == FZ_WRMSR || op->kind == FZ_SETPCE || op->kind == FZ_RDPMC)
        return 0;
    if (op->ecx >= 0x300 && op->ecx <= 0x311)
        return 0;
    if (op->ecx >= 0x360 && op->ecx <= 0x371)
        return val & ~(u64)CCCR_OVF;
    if (op->ecx == 0x1A0)
        return val & ((1u << 7) | (1u << 11) | (1u << 12));
    return val;
}

/* FNV-1a, 64-bit, over the low `n` bytes of v */
static u64 fnv(u64 h, u64 v, int n)
{
    for (int i = 0; i < n; i++) {
        h ^= (u8)(v >> (8 * i));
        h *= 0x100000001B3ull;
    }
    return h;
}

/* the probe's only failed check is the stack's */
static int streq_stack(const char *chk)
{
    const char *w = "stack";
    while (*w && *chk == *w)
        w++, chk++;
    return !*w && !*chk;
}

static int run_op(const struct fuzz_op *op, u64 *val, struct probe_result *res)
{
    static const int insn[] = {INSN_WRMSR, INSN_RDMSR, INSN_RDPMC};
    struct regs in;
    probe_default_regs(&in);
    in.cx = op->ecx;
    in.ax = (u32)op->value;
    in.dx = (u32)(op->value >> 32);
    int vec = probe_exec(insn[op->kind], op->ring3 ? MODE_RING3 : MODE_RING0, PFX_NONE, 0,
                         &in, 0, res);
    *val = ((u64)(u32)res->out.dx << 32) | (u32)res->out.ax;
    return vec;
}

void fuzz_run(u64 seed, u32 n, u32 every, u32 dump_from, u32 dump_n)
{
    static const char *const names[] = {"wrmsr", "rdmsr", "rdpmc", "setpce"};
    u64 s = seed ? seed : 1, h = 0xCBF29CE484222325ull;
    u32 gp = 0;
    int pce = 0;
    struct probe_result res;
    rt_set_pce(0);
    for (u32 i = 0; i < n; i++) {
        struct fuzz_op op;
        fuzz_next(&s, &op);
        int vec = -1;
        u64 val = 0;
        if (i % FUZZ_UNMASK_EVERY == 0 && pmi_cfg.lvt)
            apic_write(APIC_LVT_PERF, pmi_cfg.lvt & ~LVT_MASK);
        if (op.kind == FZ_SETPCE) {
            pce = (int)op.value;
            rt_set_pce(pce);
        } else {
            u32 pmis = pmi_count[0];
            vec = run_op(&op, &val, &res);
            int waived = pmi_count[0] != pmis && streq_stack(res.chk);
            if (res.chk[0] && !waived)
                rt_printf("FZC %u %s\n", i, res.chk);
        }
        if (vec == 13)
            gp++;
        else if (vec >= 0)
            rt_printf("FZX %u %d\n", i, vec);
        h = fnv(fnv(fnv(h, i, 4), (u64)(u32)vec, 4), covered(&op, vec, val), 8);
        if (i >= dump_from && i - dump_from < dump_n)
            rt_printf("FZD %u %s %d 0x%x 0x%llx %d 0x%llx\n", i, names[op.kind], op.ring3,
                      op.ecx, op.value, vec, val);
        if ((i + 1) % every == 0 || i + 1 == n)
            rt_printf("FZ %u %llx %u %u\n", i + 1, h, gp, pmi_count[0]);
    }
    rt_set_pce(0);
}
