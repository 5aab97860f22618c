/* The events guest: runs a text script (the first multiboot module) that programs the PMU,
 * runs hand-written loops (loops.S) in ring 0 or ring 3, on the BSP or on the second logical
 * processor, takes performance interrupts and prints what it read.  The guest computes
 * nothing about the PMU: the host (the tests, `p4pmu bench`) writes the scripts and reads
 * the output, and decides what the numbers should be.
 *
 * The whole script is parsed before the first command runs, so the code executed between
 * two commands does not depend on the numbers in them: two runs that differ only in a loop's
 * iteration count execute the same instructions outside that loop.
 *
 * Script: one command per line, `#` starts a comment, numbers are decimal or 0x-hex.  A line
 * may start with `@1` to run the command on the AP (the BSP waits in HLT meanwhile).
 *
 *   w MSR VALUE            WRMSR
 *   r MSR TAG              RDMSR            -> "V TAG <hex>"
 *   pmc IDX TAG            RDPMC (ring 0)   -> "V TAG <hex>"
 *   loop NAME N [u] [i] [a] call loop_NAME(N); u: at CPL 3; i: with EFLAGS.IF = 1; a: at the 1 GiB alias (64-bit)
 *   mtab ON SLOT MSR VALUE set entry SLOT (0-17) of the measured call's enabling (ON=1) or
 *                          disabling (ON=0) WRMSR table
 *   meas NAME N [u] [i]    measured call: the 18 enabling WRMSRs, loop_NAME(N) (u: at CPL 3),
 *                          the 18 disabling WRMSRs, with no branch outside the loop (evasm.S);
 *                          i: with EFLAGS.IF = 1 (interrupts anywhere in it)
 *   lvt VALUE              write the LVT performance-counter entry (FEE00340h)
 *   lvtr TAG               read it          -> "V TAG <hex>"
 *   pmicfg FLAGS COUNTER RELOAD CCCR MAXUNMASK LVT   configure the PMI handler (evrt.h)
 *   pmireset               clear the PMI counts and log
 *   pmilog                 -> "P <i> cpu= vec= lvt= ovf= ip= cs= ctr=" per record, then
 *                             "I <count on BSP> <count on AP> <records>"
 *   halt N TICKS           N times: APIC timer one-shot of TICKS, sti; hlt (wake-up), cli
 *   timer TICKS            APIC timer periodic every TICKS (divide by 1) from now on; 0: off
 *                          -> "V timer_count <hex>" (interrupts taken so far).  Interrupts are
 *                          taken where EFLAGS.IF = 1: loop/meas with i
 *   sti / cli              EFLAGS.IF of this CPU
 *   apstart                start the AP     -> "V apstart 0" (or "V apstart -1")
 *   apsync TICKS           from now on an @1 command starts only once the BSP is about to
 *                          halt, plus TICKS TSC ticks (0: off); see evrt.h ap_sync_ticks
 *   apspin ON              1: from now on the BSP busy-waits (pause loop) while an @1
 *                          command runs, so both logical processors run; 0: it waits in HLT
 *   mark TAG               -> "M TAG"
 *   ticks TAG              RDTSC            -> "V TAG <hex>"
 *   fuzz SEED N EVERY FROM COUNT   N random PMU accesses (fuzz.c): "FZ <done> <digest> <#GPs>
 *                          <PMIs>" every EVERY of them; "FZD ..." for accesses FROM..+COUNT-1
 *   reset KIND             0: a reset through the keyboard controller (port 64h, FEh);
 *                          1: a triple fault (an empty IDT, then INT3).  Does not return.
 */
#include "evrt.h"
#include "fuzz.h"

#define MB_BOOT_MAGIC 0x2BADB002u
#define MAX_CMDS 16384
#define MAX_ARGS 6

struct mb_info {
    u32 flags, mem_lower, mem_upper, boot_device, cmdline, mods_count, mods_addr;
};
struct mb_module {
    u32 start, end, string, reserved;
};

/* ---- the loops (loops.S) ---- */
typedef ureg (*loop_fn)(ureg);
#define LOOPS(X) X(nop4) X(alu) X(alt) X(pat3) X(callret) X(indirect) X(swing) X(ucode) X(repmov) X(split) X(hotbuf) X(pages) X(smc) X(sbuf) X(thrash) X(tcsweep) X(denorm) X(x87) X(sse) X(mmx) X(overcount) \
    X(mem) X(phases) X(members) X(bench) X(rdmsr) X(wrmsr) X(rdmsr_other) X(rdpmc) X(empty) \
    X(selfnmi) X(selfnmi_ram)
#define DECL(n) ureg loop_##n(ureg);
LOOPS(DECL)
#define ENTRY(n) {#n, loop_##n},
static const struct {
    const char *name;
    loop_fn fn;
} loops[] = {LOOPS(ENTRY)};
#define N_LOOPS (sizeof loops / sizeof loops[0])

enum op { C_W, C_R, C_PMC, C_LOOP, C_LVT, C_LVTR, C_PMICFG, C_PMIRESET, C_PMILOG, C_HALT,
          C_STI, C_CLI, C_APSTART, C_MARK, C_TICKS, C_MTAB, C_MEAS, C_APSYNC, C_TIMER,
          C_APSPIN, C_FUZZ, C_RESET };
static const char *const op_names[] = {"w", "r", "pmc", "loop", "lvt", "lvtr", "pmicfg",
                                       "pmireset", "pmilog", "halt", "sti", "cli", "apstart",
                                       "mark", "ticks", "mtab", "meas", "apsync", "timer",
                                       "apspin", "fuzz", "reset"};
static const int op_nargs[] = {2, 1, 1, 2, 1, 0, 6, 0, 0, 2, 0, 0, 0, 0, 0, 4, 2, 1, 1, 1, 5,
                               1};
static const int op_has_tag[] = {0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0,
                                 0, 0};
static int ap_spin; /* apspin: the BSP busy-waits for @1 commands */

struct cmd {
    int op, cpu, line;
    u64 a[MAX_ARGS];
    loop_fn fn;
    int user, intr;
    const char *tag;
};
static struct cmd cmds[MAX_CMDS];
static char script_text[1 << 20];
static int n_cmds;

/* ---- reset ---- */
__attribute__((noreturn)) static void guest_reset(int kind)
{
    rt_printf("M reset%d\n", kind);
    if (kind == 0) {
        rt_outb(0x64, 0xFE);
    } else {
        struct {
            u16 limit;
            ureg base;
        } __attribute__((packed)) none = {0, 0};
        __asm__ volatile("lidt %0\n\tint3" ::"m"(none) : "memory");
    }
    for (;;)
        __asm__ volatile("cli; hlt");
}

/* ---- parsing ---- */
static int streq(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

static int parse_num(const char *s, u64 *out)
{
    u64 v = 0;
    int neg = 0;
    if (*s == '-')
        neg = 1, s++;
    if (!*s)
        return -1;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        s += 2;
        if (!*s)
            return -1;
        for (; *s; s++) {
            int d = *s >= '0' && *s <= '9' ? *s - '0'
                    : *s >= 'a' && *s <= 'f' ? *s - 'a' + 10
                    : *s >= 'A' && *s <= 'F' ? *s - 'A' + 10 : -1;
            if (d < 0)
                return -1;
            v = (v << 4) | (u64)d;
        }
    } else {
        for (; *s; s++) {
            if (*s < '0' || *s > '9')
                return -1;
            v = v * 10 + (u64)(*s - '0'); /* u64 multiply: no libgcc needed for * */
        }
    }
    *out = neg ? (u64)0 - v : v;
    return 0;
}

static void parse(char *text, char *end)
{
    int line = 0;
    char *p = text;
    while (p < end && *p) {
        line++;
        char *eol = p;
        while (eol < end && *eol && *eol != '\n')
            eol++;
        char *next = eol < end && *eol ? eol + 1 : eol;
        *eol = 0;
        for (char *c = p; *c; c++)
            if (*c == '#') {
                *c = 0;
                break;
            }
        char *tok[12];
        int nt = 0;
        for (char *c = p; *c && nt < 12;) {
            while (*c == ' ' || *c == '\t' || *c == '\r')
                *c++ = 0;
            if (!*c)
                break;
            tok[nt++] = c;
            while (*c && *c != ' ' && *c != '\t' && *c != '\r')
                c++;
        }
        p = next;
        if (!nt)
            continue;
        if (n_cmds == MAX_CMDS)
            rt_panic("script line %d: more than %d commands", line, MAX_CMDS);
        struct cmd *c = &cmds[n_cmds];
        memset(c, 0, sizeof *c);
        c->line = line;
        int t = 0;
        if (streq(tok[0], "@1")) {
            c->cpu = 1;
            t = 1;
        }
        if (t >= nt)
            rt_panic("script line %d: no command after @1", line);
        c->op = -1;
        for (int k = 0; k < (int)(sizeof op_names / sizeof op_names[0]); k++)
            if (streq(tok[t], op_names[k]))
                c->op = k;
        if (c->op < 0)
            rt_panic("script line %d: unknown command '%s'", line, tok[t]);
        t++;
        if (c->op == C_LOOP || c->op == C_MEAS) {
            if (t + 2 > nt)
                rt_panic("script line %d: %s NAME N [u] [i]", line, op_names[c->op]);
            for (u32 k = 0; k < N_LOOPS; k++)
                if (streq(tok[t], loops[k].name))
                    c->fn = loops[k].fn;
            if (!c->fn)
                rt_panic("script line %d: unknown loop '%s'", line, tok[t]);
            if (parse_num(tok[t + 1], &c->a[0]) || !c->a[0])
                rt_panic("script line %d: bad iteration count '%s'", line, tok[t + 1]);
            for (int k = t + 2; k < nt; k++) {
                if (streq(tok[k], "u"))
                    c->user = 1;
                else if (streq(tok[k], "i"))
                    c->intr = 1;
#ifdef __x86_64__
                else if (streq(tok[k], "a")) /* at the 1 GiB alias (arch64/boot.S) */
                    c->fn = (loop_fn)((ureg)c->fn + 0x40000000u);
#endif
                else
                    rt_panic("script line %d: bad loop flag '%s'", line, tok[k]);
            }
        } else {
            int na = op_nargs[c->op];
            if (nt - t != na + op_has_tag[c->op])
                rt_panic("script line %d: '%s' takes %d argument(s)%s", line, op_names[c->op],
                         na, op_has_tag[c->op] ? " and a tag" : "");
            for (int k = 0; k < na; k++)
                if (parse_num(tok[t + k], &c->a[k]))
                    rt_panic("script line %d: bad number '%s'", line, tok[t + k]);
            if (op_has_tag[c->op])
                c->tag = tok[t + na];
        }
        n_cmds++;
    }
}

/* ---- execution ---- */
static ureg exec_cmd(ureg arg)
{
    const struct cmd *c = (const struct cmd *)arg;
    switch (c->op) {
    case C_W:
        ev_wrmsr((u32)c->a[0], c->a[1]);
        break;
    case C_R:
        rt_printf("V %s %llx\n", c->tag, ev_rdmsr((u32)c->a[0]));
        break;
    case C_PMC:
        rt_printf("V %s %llx\n", c->tag, ev_rdpmc((u32)c->a[0]));
        break;
    case C_LOOP:
        if (c->user) {
            rt_user_flags = c->intr ? 0x202 : 0x2;
            rt_call_user(c->fn, (ureg)c->a[0]);
            rt_user_flags = 0x2;
        } else if (c->intr) {
            __asm__ volatile("sti" ::: "memory");
            c->fn((ureg)c->a[0]);
            __asm__ volatile("cli" ::: "memory");
        } else {
            c->fn((ureg)c->a[0]);
        }
        break;
    case C_MTAB: {
        if (c->a[1] >= 18)
            rt_panic("script line %d: mtab slot %u out of range", c->line, (u32)c->a[1]);
        struct meas_wr *w = c->a[0] ? &meas_on[c->a[1]] : &meas_off[c->a[1]];
        w->msr = (u32)c->a[2];
        w->lo = (u32)c->a[3];
        w->hi = (u32)(c->a[3] >> 32);
        break;
    }
    case C_MEAS:
        if (c->user) {
            rt_user_flags = c->intr ? 0x202 : 0x2;
            meas_r3(c->fn, (ureg)c->a[0]);
            rt_user_flags = 0x2;
        } else if (c->intr) {
            __asm__ volatile("sti" ::: "memory");
            meas_r0(c->fn, (ureg)c->a[0]);
            __asm__ volatile("cli" ::: "memory");
        } else {
            meas_r0(c->fn, (ureg)c->a[0]);
        }
        break;
    case C_TIMER:
        ev_timer_periodic((u32)c->a[0]);
        if (!c->a[0])
            rt_printf("V timer_count %x\n", timer_count[ev_cpu_index()]);
        break;
    case C_APSPIN:
        ap_spin = c->a[0] != 0;
        break;
    case C_APSYNC:
#ifndef __x86_64__
        ap_sync_ticks = (u32)c->a[0];
#endif
        break;
    case C_LVT:
        apic_write(APIC_LVT_PERF, (u32)c->a[0]);
        break;
    case C_LVTR:
        rt_printf("V %s %x\n", c->tag, apic_read(APIC_LVT_PERF));
        break;
    case C_PMICFG:
        pmi_cfg.flags = (u32)c->a[0];
        pmi_cfg.counter = (u32)c->a[1];
        pmi_cfg.reload = c->a[2];
        pmi_cfg.cccr = (u32)c->a[3];
        pmi_cfg.max_unmask = (u32)c->a[4];
        pmi_cfg.lvt = (u32)c->a[5];
        break;
    case C_PMIRESET:
        pmi_reset();
        break;
    case C_PMILOG: {
        u32 n = pmi_logged < PMI_LOG_MAX ? pmi_logged : PMI_LOG_MAX;
        for (u32 i = 0; i < n; i++) {
            const struct pmi_record *r = &pmi_log[i];
            rt_printf("P %u cpu=%u vec=%u lvt=%x ovf=%x ip=%lx cs=%lx ctr=%llx\n", i, r->cpu,
                      r->vec, r->lvt, r->ovf, r->ip, r->cs, r->ctr);
        }
        rt_printf("I %u %u %u\n", pmi_count[0], pmi_count[1], pmi_logged);
        break;
    }
    case C_HALT:
        for (u64 i = 0; i < c->a[0]; i++)
            ev_halt_timer((u32)c->a[1]);
        break;
    case C_STI:
        __asm__ volatile("sti" ::: "memory");
        break;
    case C_CLI:
        __asm__ volatile("cli" ::: "memory");
        break;
    case C_APSTART:
        rt_printf("V apstart %d\n", ap_start());
        break;
    case C_MARK:
        rt_printf("M %s\n", c->tag);
        break;
    case C_FUZZ:
        fuzz_run(c->a[0], (u32)c->a[1], c->a[2] ? (u32)c->a[2] : 1, (u32)c->a[3],
                 (u32)c->a[4]);
        break;
    case C_RESET:
        guest_reset((int)c->a[0]);
        break;
    case C_TICKS: {
        u32 lo, hi;
        __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
        rt_printf("V %s %llx\n", c->tag, ((u64)hi << 32) | lo);
        break;
    }
    }
    return 0;
}

void guest_main(u32 magic, const void *info)
{
    const struct mb_info *mbi = info;
    rt_printf("BOOT p4pmu-events bits=%d\n", GUEST_BITS);
    if (magic != MB_BOOT_MAGIC)
        rt_panic("not started by a multiboot loader (magic %x)", magic);
    if (!(mbi->flags & (1u << 3)) || mbi->mods_count == 0) {
        rt_printf("NOSCRIPT\n");
        rt_printf("DONE 0\n");
        return;
    }
    const struct mb_module *mod = (const struct mb_module *)(ureg)mbi->mods_addr;
    u32 len = mod->end - mod->start;
    if (len >= sizeof script_text)
        rt_panic("script too long (%u bytes)", len);
    memcpy(script_text, (const void *)(ureg)mod->start, len);
    script_text[len] = 0;
    parse(script_text, script_text + len);
    ev_init();
    rt_printf("SCRIPT n=%d\n", n_cmds);
    rt_printf("APIC %u\n", apic_id());
    for (int i = 0; i < n_cmds; i++) {
        if (cmds[i].cpu)
            ap_run(exec_cmd, (ureg)&cmds[i], !ap_spin);
        else
            exec_cmd((ureg)&cmds[i]);
    }
    rt_printf("DONE %d\n", n_cmds);
}
