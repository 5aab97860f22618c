/* Runtime of the p4pmu test guests: see rt.h. */
#include "rt.h"

#include <stdarg.h>

#define COM1 0x3F8
#define DEBUG_EXIT_PORT 0xF4

_Static_assert(__builtin_offsetof(struct regs, flags) == R_FLAGS, "regs.h out of sync");
_Static_assert(__builtin_offsetof(struct regs, di) == R_DI, "regs.h out of sync");

/* ------------------------------------------------------------------------------------ */
/* memory                                                                               */

void *memset(void *d, int c, size_t n)
{
    u8 *p = d;
    while (n--)
        *p++ = (u8)c;
    return d;
}

void *memcpy(void *d, const void *s, size_t n)
{
    u8 *p = d;
    const u8 *q = s;
    while (n--)
        *p++ = *q++;
    return d;
}

void *memmove(void *d, const void *s, size_t n)
{
    u8 *p = d;
    const u8 *q = s;
    if (p < q) {
        while (n--)
            *p++ = *q++;
    } else {
        while (n--)
            p[n] = q[n];
    }
    return d;
}

int memcmp(const void *a, const void *b, size_t n)
{
    const u8 *p = a, *q = b;
    for (; n; n--, p++, q++)
        if (*p != *q)
            return *p < *q ? -1 : 1;
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* serial and formatted output                                                          */

static void serial_init(void)
{
    rt_outb(COM1 + 1, 0x00); /* no interrupts */
    rt_outb(COM1 + 3, 0x80); /* DLAB */
    rt_outb(COM1 + 0, 0x01); /* 115200 baud */
    rt_outb(COM1 + 1, 0x00);
    rt_outb(COM1 + 3, 0x03); /* 8N1 */
    rt_outb(COM1 + 2, 0xC7); /* FIFO */
}

void rt_putc(char c)
{
    /* QEMU's UART is always ready; a bounded wait keeps this correct on a slow one */
    for (int i = 0; i < 100000 && !(rt_inb(COM1 + 5) & 0x20); i++)
        ;
    rt_outb(COM1, (u8)c);
}

void rt_puts(const char *s)
{
    while (*s)
        rt_putc(*s++);
}

static void put_num(u64 v, unsigned base, int width, char pad, int neg)
{
    char buf[24];
    int n = 0;
    if (base == 16) {
        do {
            buf[n++] = "0123456789abcdef"[v & 15];
            v >>= 4;
        } while (v);
    } else {
        u32 w = (u32)v; /* decimal: 32-bit only (no libgcc division in the 32-bit guest) */
        do {
            buf[n++] = (char)('0' + w % 10);
            w /= 10;
        } while (w);
    }
    if (neg)
        buf[n++] = '-';
    while (n < width)
        buf[n++] = pad;
    while (n)
        rt_putc(buf[--n]);
}

static void vprintf_(const char *fmt, va_list ap)
{
    for (; *fmt; fmt++) {
        if (*fmt != '%') {
            rt_putc(*fmt);
            continue;
        }
        fmt++;
        char pad = ' ';
        int width = 0, lng = 0;
        if (*fmt == '0') {
            pad = '0';
            fmt++;
        }
        while (*fmt >= '0' && *fmt <= '9')
            width = width * 10 + (*fmt++ - '0');
        while (*fmt == 'l') {
            lng++;
            fmt++;
        }
        u64 v;
        switch (*fmt) {
        case 'd': {
            long long s = lng >= 2 ? va_arg(ap, long long) : lng ? va_arg(ap, long) : va_arg(ap, int);
            put_num(s < 0 ? (u64)-s : (u64)s, 10, width, pad, s < 0);
            break;
        }
        case 'u':
        case 'x':
            v = lng >= 2 ? va_arg(ap, u64) : lng ? va_arg(ap, unsigned long) : va_arg(ap, unsigned);
            put_num(v, *fmt == 'x' ? 16 : 10, width, pad, 0);
            break;
        case 'p':
            put_num((ureg)va_arg(ap, void *), 16, 0, '0', 0);
            break;
        case 's': {
            const char *s = va_arg(ap, const char *);
            rt_puts(s ? s : "(null)");
            break;
        }
        case 'c':
            rt_putc((char)va_arg(ap, int));
            break;
        case '%':
            rt_putc('%');
            break;
        default:
            rt_putc('%');
            rt_putc(*fmt);
            break;
        }
    }
}

void rt_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf_(fmt, ap);
    va_end(ap);
}

void rt_exit(int code)
{
    __asm__ volatile("outl %0, %1" ::"a"((u32)code), "Nd"((u16)DEBUG_EXIT_PORT));
    for (;;)
        __asm__ volatile("cli; hlt");
}

void rt_panic(const char *fmt, ...)
{
    va_list ap;
    rt_puts("\nPANIC ");
    va_start(ap, fmt);
    vprintf_(fmt, ap);
    va_end(ap);
    rt_puts("\n");
    rt_exit(1);
}

/* ------------------------------------------------------------------------------------ */
/* GDT, TSS, IDT                                                                        */

#ifdef __x86_64__
struct tss {
    u32 rsvd0;
    u64 rsp0, rsp1, rsp2;
    u64 rsvd1;
    u64 ist[7];
    u64 rsvd2;
    u16 rsvd3, iomap_base;
} __attribute__((packed));
struct idt_gate {
    u16 off_lo, sel;
    u8 ist, type;
    u16 off_mid;
    u32 off_hi, zero;
} __attribute__((packed));
#else
struct tss {
    u32 link, esp0, ss0, esp1, ss1, esp2, ss2, cr3, eip, eflags;
    u32 eax, ecx, edx, ebx, esp, ebp, esi, edi;
    u32 es, cs, ss, ds, fs, gs, ldt;
    u16 trap, iomap_base;
} __attribute__((packed));
struct idt_gate {
    u16 off_lo, sel;
    u8 zero, type;
    u16 off_hi;
} __attribute__((packed));
#endif

static u64 gdt[8] __attribute__((aligned(16)));
static struct tss tss __attribute__((aligned(16)));
static struct idt_gate idt[256] __attribute__((aligned(16)));
extern char intr_stack_top[];
extern const ureg isr_table[32];
extern char rt_int80[];

static u64 seg_desc(u32 base, u32 limit, u8 access, u8 flags)
{
    return (limit & 0xFFFFull) | ((u64)(base & 0xFFFFFF) << 16) | ((u64)access << 40) |
           ((u64)((limit >> 16) & 0xF) << 48) | ((u64)(flags & 0xF) << 52) |
           ((u64)(base >> 24) << 56);
}

void rt_set_gate(int n, ureg handler, int dpl)
{
    struct idt_gate *g = &idt[n];
    memset(g, 0, sizeof *g);
    g->off_lo = (u16)handler;
    g->sel = SEL_KCODE;
    g->type = (u8)(0x8E | (dpl << 5)); /* present interrupt gate */
#ifdef __x86_64__
    g->off_mid = (u16)(handler >> 16);
    g->off_hi = (u32)(handler >> 32);
#else
    g->off_hi = (u16)(handler >> 16);
#endif
}

struct __attribute__((packed)) dtr {
    u16 limit;
    ureg base;
};

void rt_init_cpu(void)
{
    serial_init();
    memset(&tss, 0, sizeof tss);
    tss.iomap_base = sizeof tss; /* no I/O bitmap: ring-3 port access faults */
    gdt[0] = 0;
#ifdef __x86_64__
    tss.rsp0 = (ureg)intr_stack_top;
    gdt[1] = seg_desc(0, 0xFFFFF, 0x9A, 0xA); /* kernel code, 64-bit */
    gdt[2] = seg_desc(0, 0xFFFFF, 0x92, 0xC); /* kernel data */
    gdt[3] = seg_desc(0, 0xFFFFF, 0xFA, 0xA); /* user code, 64-bit, DPL 3 */
    gdt[4] = seg_desc(0, 0xFFFFF, 0xF2, 0xC); /* user data, DPL 3 */
    gdt[5] = seg_desc(0, 0xFFFFF, 0x9A, 0xC); /* kernel code, 32-bit (boot) */
    gdt[6] = seg_desc((u32)(ureg)&tss, sizeof tss - 1, 0x89, 0); /* 64-bit TSS, 16 bytes */
    gdt[7] = (ureg)&tss >> 32;
#else
    tss.esp0 = (ureg)intr_stack_top;
    tss.ss0 = SEL_KDATA;
    gdt[1] = seg_desc(0, 0xFFFFF, 0x9A, 0xC);       /* kernel code */
    gdt[2] = seg_desc(0, 0xFFFFF, 0x92, 0xC);       /* kernel data */
    gdt[3] = seg_desc(0, 0xFFFFF, 0xFA, 0xC);       /* user code, DPL 3 */
    gdt[4] = seg_desc(0, 0xFFFFF, 0xF2, 0xC);       /* user data, DPL 3 */
    gdt[5] = seg_desc(CS_BASE, 0xFFFFF, 0x9A, 0xC); /* kernel code with a non-zero base */
    gdt[6] = seg_desc((u32)&tss, sizeof tss - 1, 0x89, 0);
    gdt[7] = 0;
#endif
    struct dtr g = {sizeof gdt - 1, (ureg)gdt};
    __asm__ volatile("lgdt %0" ::"m"(g));
#ifdef __x86_64__
    __asm__ volatile("pushq %0\n\t"
                     "leaq 1f(%%rip), %%rax\n\t"
                     "pushq %%rax\n\t"
                     "lretq\n"
                     "1:\tmovl %1, %%eax\n\t"
                     "movw %%ax, %%ds\n\tmovw %%ax, %%es\n\tmovw %%ax, %%ss\n\t"
                     "movw %%ax, %%fs\n\tmovw %%ax, %%gs"
                     ::"i"(SEL_KCODE), "i"(SEL_KDATA) : "rax", "memory");
#else
    __asm__ volatile("ljmp %0, $1f\n"
                     "1:\tmovl %1, %%eax\n\t"
                     "movw %%ax, %%ds\n\tmovw %%ax, %%es\n\tmovw %%ax, %%ss\n\t"
                     "movw %%ax, %%fs\n\tmovw %%ax, %%gs"
                     ::"i"(SEL_KCODE), "i"(SEL_KDATA) : "eax", "memory");
#endif
    __asm__ volatile("ltr %w0" ::"r"(SEL_TSS));
    for (int i = 0; i < 32; i++)
        rt_set_gate(i, isr_table[i], 0);
    rt_set_gate(0x80, (ureg)rt_int80, 3);
    struct dtr d = {sizeof idt - 1, (ureg)idt};
    __asm__ volatile("lidt %0" ::"m"(d));
}

ureg rt_read_cr4(void)
{
    ureg v;
    __asm__ volatile("mov %%cr4, %0" : "=r"(v));
    return v;
}

void rt_set_pce(int on)
{
    ureg v = rt_read_cr4();
    v = on ? (v | (1u << 8)) : (v & ~(ureg)(1u << 8));
    __asm__ volatile("mov %0, %%cr4" ::"r"(v) : "memory");
}

/* ------------------------------------------------------------------------------------ */
/* exceptions and probes                                                                */

struct stub {
    ureg start, insn;
};
extern const struct stub stub_table[N_INSNS][N_PREFIXES][N_FSETUPS];
extern char probe_after[];
extern void probe_enter(int mode);

/* shared with the assembly */
struct regs probe_in, probe_out, probe_xor;
int probe_force_stack_check;
u32 probe_fmem;
ureg rt_kernel_sp;
#ifdef __x86_64__
ureg probe_target;
#else
struct __attribute__((packed)) {
    u32 off;
    u16 sel;
} probe_farptr;
#endif

#define STACK_CHECK_BYTES 256 /* checked below the stub's stack pointer */
#define STUB_CHECK_BYTES 24   /* checked from the stub's first byte */

static volatile int probe_active;
static volatile int probe_fault_vec;
static volatile ureg probe_fault_err, probe_fault_ip, probe_fault_cs;
static struct regs probe_fault_regs;

static ureg seg_base(ureg cs)
{
#ifndef __x86_64__
    if ((cs & ~3ul) == SEL_KCODE_BASED)
        return CS_BASE;
#endif
    (void)cs;
    return 0;
}

/* EFLAGS rt_call_user enters ring 3 with (IOPL 0; set IF to take interrupts in ring 3) */
ureg rt_user_flags = 0x2;
/* per-vector handlers installed by a guest program (interrupts, NMI); they take precedence
 * over the probe recovery below */
rt_vector_handler rt_vector_handlers[256];

void isr_dispatch(struct frame *f)
{
    if (f->vec < 256 && rt_vector_handlers[f->vec]) {
        rt_vector_handlers[f->vec](f);
        return;
    }
    if (probe_active) {
        probe_active = 0;
        probe_fault_vec = (int)f->vec;
        probe_fault_err = f->err;
        probe_fault_ip = f->ip;
        probe_fault_cs = f->cs & 0xFFFF;
        struct regs *r = &probe_fault_regs;
        r->ax = f->ax;
        r->cx = f->cx;
        r->dx = f->dx;
        r->bx = f->bx;
        r->bp = f->bp;
        r->si = f->si;
        r->di = f->di;
#ifdef __x86_64__
        r->r8 = f->r8;
        r->r9 = f->r9;
        r->r10 = f->r10;
        r->r11 = f->r11;
        r->r12 = f->r12;
        r->r13 = f->r13;
        r->r14 = f->r14;
        r->r15 = f->r15;
        r->sp = f->sp;
#else
        /* same privilege: no SS:ESP pushed, the interrupted ESP is just above EFLAGS */
        r->sp = (f->cs & 3) ? f->sp : (ureg)&f->sp;
#endif
        r->flags = f->flags;
        /* resume at probe_after, in the same code segment and privilege level */
        f->ip = (ureg)probe_after - seg_base(f->cs);
        return;
    }
    rt_panic("unexpected exception vector=%lu error=0x%lx ip=0x%lx cs=0x%lx flags=0x%lx",
             f->vec, f->err, f->ip, f->cs, f->flags);
}

/* noinline: both runs of probe_exec must start their stubs with the same stack pointer */
static __attribute__((noinline)) void run_stub(const struct stub *st, int mode, const struct regs *in, u32 fmem)
{
    probe_fmem = fmem;
    probe_in = *in;
#ifdef __x86_64__
    (void)mode;
    probe_target = st->start;
#else
    probe_farptr.off = (u32)(st->start - (mode == MODE_CS_BASE ? CS_BASE : 0));
    probe_farptr.sel = mode == MODE_RING3 ? SEL_UCODE
                       : mode == MODE_CS_BASE ? SEL_KCODE_BASED : SEL_KCODE;
#endif
    probe_fault_vec = -1;
    probe_active = 1;
    probe_enter(mode);
    probe_active = 0;
}

#ifdef __x86_64__
#define NREGS 16
static const char *const reg_names[NREGS] = {"ax", "cx", "dx", "bx", "sp", "bp", "si", "di",
                                              "r8", "r9", "r10", "r11", "r12", "r13", "r14",
                                              "r15"};
#else
#define NREGS 8
static const char *const reg_names[NREGS] = {"ax", "cx", "dx", "bx", "sp", "bp", "si", "di"};
#endif

static void chk_add(char *chk, const char *prefix, const char *what)
{
    size_t n = 0;
    while (chk[n])
        n++;
    if (n + 12 >= 160)
        return;
    if (n)
        chk[n++] = ',';
    while (*prefix)
        chk[n++] = *prefix++;
    while (*what)
        chk[n++] = *what++;
    chk[n] = 0;
}

int probe_exec(int insn, int mode, int pfx, int fs, const struct regs *in, u32 fmem,
               struct probe_result *r)
{
    memset(r, 0, sizeof *r);
    r->vec = -1;
    if (insn < 1 || insn >= N_INSNS || pfx < 0 || pfx >= N_PREFIXES || fs < 0 ||
        fs >= N_FSETUPS || mode < 0 || mode > MODE_CS_BASE) {
        r->bad_stub = 1;
        return -1;
    }
    const struct stub *st = &stub_table[insn][pfx][fs];
    const struct stub *ref = &stub_table[0][0][fs];
#ifdef __x86_64__
    if (mode == MODE_CS_BASE)
        st = 0;
#endif
    if (!st || !st->start) {
        r->bad_stub = 1;
        return -1;
    }
    struct regs rin = *in;
    rin.flags = (in->flags & 0x8D5) | 2; /* arithmetic flags only; IF=0, DF=0, IOPL=0 */

    run_stub(ref, mode, &rin, fmem);
    r->ref = probe_out;
    if (probe_fault_vec != -1)
        chk_add(r->chk, "", "reffault");

    /* Fill the memory below the stub's stack pointer (the reference run told us where it is)
     * and remember the stub's code bytes: a real RDMSR/WRMSR/RDPMC changes neither.  No call
     * may happen between here and the stub (that memory is below every live frame). */
    volatile u8 *below = (volatile u8 *)(r->ref.sp - STACK_CHECK_BYTES);
    for (int i = 0; i < STACK_CHECK_BYTES - (int)sizeof(ureg); i++)
        below[i] = (u8)(0xC3 ^ i);
    u8 code[STUB_CHECK_BYTES];
    for (int i = 0; i < STUB_CHECK_BYTES; i++)
        code[i] = ((volatile const u8 *)st->start)[i];
    {
        ureg *p = (ureg *)&rin;
        const ureg *x = (const ureg *)&probe_xor;
        for (size_t i = 0; i < sizeof rin / sizeof(ureg); i++)
            p[i] ^= x[i];
        rin.flags = (rin.flags & 0x8D5) | 2;
    }
    run_stub(st, mode, &rin, fmem);
    r->out = probe_out;
    r->vec = probe_fault_vec;
    r->err = probe_fault_err;
    r->fault = probe_fault_regs;
    r->fault_ip = probe_fault_ip;
    r->fault_cs = probe_fault_cs;

    /* a fault in ring 0 legitimately pushes its frame below the stack pointer */
    if (r->vec < 0 || mode == MODE_RING3 || probe_force_stack_check) {
        for (int i = 0; i < STACK_CHECK_BYTES - (int)sizeof(ureg); i++)
            if (below[i] != (u8)(0xC3 ^ i)) {
                chk_add(r->chk, "", "stack");
                break;
            }
    }
    for (int i = 0; i < STUB_CHECK_BYTES; i++)
        if (((volatile const u8 *)st->start)[i] != code[i]) {
            chk_add(r->chk, "", "code");
            break;
        }

    int is_read = insn == INSN_RDMSR || insn == INSN_RDPMC;
    const ureg *o = (const ureg *)&r->out, *f = (const ureg *)&r->ref;
    for (int i = 0; i < NREGS; i++) {
        if (r->vec < 0 && is_read && (i == 0 || i == 2)) {
#ifdef __x86_64__
            if (o[i] >> 32)
                chk_add(r->chk, reg_names[i], "hi");
#endif
            continue;
        }
        if (o[i] != f[i])
            chk_add(r->chk, "", reg_names[i]);
    }
    if ((r->out.flags ^ r->ref.flags) & FLAGS_CHECKED)
        chk_add(r->chk, "", "flags");
    if (r->vec >= 0) {
        const ureg *h = (const ureg *)&r->fault;
        for (int i = 0; i < NREGS; i++)
            if (h[i] != f[i])
                chk_add(r->chk, "f.", reg_names[i]);
        if ((r->fault.flags ^ r->ref.flags) & FLAGS_CHECKED)
            chk_add(r->chk, "f.", "flags");
        if (r->fault_ip + seg_base(r->fault_cs) != st->insn)
            chk_add(r->chk, "f.", "ip");
        ureg want_cs = mode == MODE_RING3 ? SEL_UCODE
                       : mode == MODE_CS_BASE ? SEL_KCODE_BASED : SEL_KCODE;
        if (r->fault_cs != want_cs)
            chk_add(r->chk, "f.", "cs");
    }
    return r->vec;
}

void probe_default_regs(struct regs *r)
{
    memset(r, 0, sizeof *r);
    r->ax = 0xA0A0A0A0u;
    r->dx = 0xD0D0D0D0u;
    r->bx = 0xB0B0B0B0u;
    r->bp = 0xB9B9B9B9u;
    r->si = 0x51515151u;
    r->di = 0xD1D1D1D1u;
    r->flags = 0x2;
#ifdef __x86_64__
    r->ax |= 0x7EADBEEFull << 32;
    r->dx |= 0x7EADBEEFull << 32;
    r->bx |= 0x0B0B0B0Bull << 32;
    r->bp |= 0x09090909ull << 32;
    r->si |= 0x15151515ull << 32;
    r->di |= 0x1D1D1D1Dull << 32;
    r->r8 = 0x0808080808080808ull;
    r->r9 = 0x0909090909090909ull;
    r->r10 = 0x1010101010101010ull;
    r->r11 = 0x1111111111111111ull;
    r->r12 = 0x1212121212121212ull;
    r->r13 = 0x1313131313131313ull;
    r->r14 = 0x1414141414141414ull;
    r->r15 = 0x1515151515151515ull;
#endif
}

static int simple(int insn, u32 ecx, u64 value, u64 *out)
{
    struct regs in;
    struct probe_result r;
    probe_default_regs(&in);
    in.cx = ecx;
    if (insn == INSN_WRMSR) {
        in.ax = (u32)value;
        in.dx = (u32)(value >> 32);
    }
    int v = probe_exec(insn, MODE_RING0, PFX_NONE, 0, &in, 0, &r);
    if (out)
        *out = ((u64)(u32)r.out.dx << 32) | (u32)r.out.ax;
    return v;
}

int probe_rdmsr(u32 msr, u64 *value) { return simple(INSN_RDMSR, msr, 0, value); }
int probe_wrmsr(u32 msr, u64 value) { return simple(INSN_WRMSR, msr, value, 0); }
int probe_rdpmc(u32 ecx, u64 *value) { return simple(INSN_RDPMC, ecx, 0, value); }
