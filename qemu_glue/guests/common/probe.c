/* The probe guest: runs the command script given as the first multiboot module (format in
 * layout.py) and prints one answer line per record.  Without a module it runs
 * a short built-in smoke test of the runtime.  The guest knows nothing about the PMU: the
 * Python side decides what each answer should have been. */
#include "rt.h"

#define MB_BOOT_MAGIC 0x2BADB002u

struct mb_info {
    u32 flags, mem_lower, mem_upper, boot_device, cmdline, mods_count, mods_addr;
};
struct mb_module {
    u32 start, end, string, reserved;
};

struct script_header {
    u32 magic, version, count, reserved;
};
struct record {
    u8 op, mode, prefix, fsetup;
    u32 ecx;
    u64 value;
    u32 fmem, ebx, eflags, hi;
};
_Static_assert(sizeof(struct record) == 32, "record layout");

static void fmt_flags_line(u32 idx, const char *res, const char *val, ureg fl, const char *chk)
{
    rt_printf("R %u res=%s val=%s fl=%lx chk=%s\n", idx, res, val, fl, *chk ? chk : "ok");
}

static void hex64(char *buf, u64 v)
{
    for (int i = 15; i >= 0; i--) {
        buf[i] = "0123456789abcdef"[v & 15];
        v >>= 4;
    }
    buf[16] = 0;
}

static void hex32(char *buf, u32 v)
{
    for (int i = 7; i >= 0; i--) {
        buf[i] = "0123456789abcdef"[v & 15];
        v >>= 4;
    }
    buf[8] = 0;
}

static void run_probe(u32 idx, const struct record *rc)
{
    int insn = rc->op == OP_WRMSR ? INSN_WRMSR : rc->op == OP_RDPMC ? INSN_RDPMC : INSN_RDMSR;
    struct regs in;
    struct probe_result r;
    probe_default_regs(&in);
    ureg hi = 0;
#ifdef __x86_64__
    hi = (ureg)rc->hi << 32;
    in.bx |= 0xBBBB0000ull << 32;
#endif
    in.cx = rc->ecx | hi;
    in.bx = (in.bx & ~(ureg)0xFFFFFFFFu) | rc->ebx;
    in.flags = rc->eflags;
    if (insn == INSN_WRMSR) {
        in.ax = (u32)rc->value | hi;
        in.dx = (u32)(rc->value >> 32) | hi;
    } else if (hi) {
        in.ax = (in.ax & 0xFFFFFFFFu) | hi;
        in.dx = (in.dx & 0xFFFFFFFFu) | hi;
    }
    if (rc->op == OP_SELFCHECK) {
        probe_xor.bx = (u32)rc->value;
        probe_xor.flags = (u32)(rc->value >> 32);
        probe_force_stack_check = 1;
    }
    probe_exec(insn, rc->mode, rc->prefix, rc->fsetup, &in, rc->fmem, &r);
    memset(&probe_xor, 0, sizeof probe_xor);
    probe_force_stack_check = 0;
    if (r.bad_stub) {
        fmt_flags_line(idx, "skip", "-", 0, "");
        return;
    }
    char res[24], val[20];
    if (r.vec >= 0) {
        /* "f<vector>:<error code>" */
        char *p = res;
        *p++ = 'f';
        u32 v = (u32)r.vec;
        if (v >= 10)
            *p++ = (char)('0' + v / 10);
        *p++ = (char)('0' + v % 10);
        *p++ = ':';
        hex32(p, (u32)r.err);
        val[0] = '-';
        val[1] = 0;
    } else {
        res[0] = 'o';
        res[1] = 'k';
        res[2] = 0;
        if (insn == INSN_WRMSR) {
            val[0] = '-';
            val[1] = 0;
        } else {
            hex64(val, ((u64)(u32)r.out.dx << 32) | (u32)r.out.ax);
        }
    }
    fmt_flags_line(idx, res, val, r.ref.flags, r.chk);
}

static void run_record(u32 idx, const struct record *rc)
{
    switch (rc->op) {
    case OP_RDMSR:
    case OP_WRMSR:
    case OP_RDPMC:
    case OP_SELFCHECK:
        run_probe(idx, rc);
        break;
    case OP_CPUID: {
        u32 r[4];
        rt_cpuid(rc->ecx, (u32)rc->value, r);
        rt_printf("R %u res=ok val=%08x.%08x.%08x.%08x fl=0 chk=ok\n", idx, r[0], r[1], r[2],
                  r[3]);
        break;
    }
    case OP_SETPCE:
        rt_set_pce(rc->value != 0);
        rt_printf("R %u res=ok val=%016llx fl=0 chk=ok\n", idx, (u64)rt_read_cr4());
        break;
    case OP_CR4:
        rt_printf("R %u res=ok val=%016llx fl=0 chk=ok\n", idx, (u64)rt_read_cr4());
        break;
    case OP_UD2:
        rt_printf("E %u ud2\n", idx);
        __asm__ volatile("ud2");
        rt_printf("R %u res=ok val=- fl=0 chk=ud2-returned\n", idx);
        break;
    case OP_ECHO:
        rt_printf("E %u %x\n", idx, rc->ecx);
        rt_printf("R %u res=ok val=- fl=0 chk=ok\n", idx);
        break;
    default:
        rt_panic("record %u: unknown op %u", idx, rc->op);
    }
}

/* ---- built-in smoke test (no script) ---- */

static ureg user_fn_test(ureg x) { return x * 3 + 1; }

static void smoke_test(void)
{
    int fails = 0;
    u64 v = 0;
    int f = probe_rdmsr(0x1B, &v); /* IA32_APIC_BASE */
    rt_printf("SMOKE rdmsr(0x1b) fault=%d value=%016llx\n", f, v);
    if (f != -1 || (v & 0xFFFFF000ull) != 0xFEE00000ull)
        fails++;
    ureg u = rt_call_user(user_fn_test, 14);
    rt_printf("SMOKE ring3 call -> %lu\n", u);
    if (u != 43)
        fails++;
    struct regs in;
    struct probe_result r;
    probe_default_regs(&in);
    in.cx = 0x1B;
    f = probe_exec(INSN_RDMSR, MODE_RING3, PFX_NONE, 1, &in, 5, &r);
    rt_printf("SMOKE ring3 rdmsr fault=%d err=%lx chk=%s\n", f, r.err, r.chk);
    if (f != 13 || r.err != 0 || r.chk[0])
        fails++;
    rt_printf("SMOKE %s\n", fails ? "FAIL" : "ok");
}

void guest_main(u32 magic, const void *info)
{
    rt_printf("BOOT p4pmu-guest bits=%d\n", GUEST_BITS);
    if (magic != MB_BOOT_MAGIC)
        rt_panic("not started by a multiboot loader (eax=0x%x)", magic);
    const struct mb_info *mbi = info;
    if (!(mbi->flags & (1u << 3)) || mbi->mods_count == 0) {
        rt_printf("NOSCRIPT\n");
        smoke_test();
        rt_printf("DONE 0\n");
        rt_exit(0);
    }
    const struct mb_module *mod = (const struct mb_module *)(ureg)mbi->mods_addr;
    const struct script_header *h = (const struct script_header *)(ureg)mod->start;
    u32 size = mod->end - mod->start;
    if (size < sizeof *h || h->magic != SCRIPT_MAGIC || h->version != SCRIPT_VERSION)
        rt_panic("module is not a version-%d p4pmu guest script", SCRIPT_VERSION);
    if (size < sizeof *h + (u64)h->count * sizeof(struct record))
        rt_panic("script truncated: %u records need %u bytes, module has %u", h->count,
                 (u32)(sizeof *h + h->count * sizeof(struct record)), size);
    const struct record *rec = (const struct record *)(h + 1);
    rt_printf("SCRIPT n=%u\n", h->count);
    for (u32 i = 0; i < h->count; i++)
        run_record(i, &rec[i]);
    rt_printf("DONE %u\n", h->count);
    rt_exit(0);
}
