/* Bare-metal runtime of the p4pmu test guests (32-bit protected mode and 64-bit long mode).
 *
 * Serial output on COM1, exit through isa-debug-exit (port 0xf4), exceptions that are
 * recorded and survived while a probe runs, ring 3, CR4.PCE, and probe_exec(): run one
 * RDMSR/WRMSR/RDPMC stub in a chosen mode and report fault, registers and flags.
 */
#pragma once

#include "layout.h" /* generated from layout.py */

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned long ureg; /* a general register: 32 or 64 bits */
typedef unsigned long size_t;

#ifdef __x86_64__
#define GUEST_BITS 64
#else
#define GUEST_BITS 32
#endif

/* ---- register snapshot (offsets used by the assembly: keep in sync with regs.h) ---- */
#include "regs.h"

struct regs {
    ureg ax, cx, dx, bx, sp, bp, si, di;
#ifdef __x86_64__
    ureg r8, r9, r10, r11, r12, r13, r14, r15;
#endif
    ureg flags;
};

/* exception frame built by the ISR stubs (see boot.S) */
#ifdef __x86_64__
struct frame {
    ureg r15, r14, r13, r12, r11, r10, r9, r8;
    ureg di, si, bp, bx, dx, cx, ax;
    ureg vec, err;
    ureg ip, cs, flags, sp, ss;
};
#else
struct frame {
    ureg di, si, bp, sp_dummy, bx, dx, cx, ax; /* pushal */
    ureg vec, err;
    ureg ip, cs, flags;
    ureg sp, ss; /* only when coming from ring 3 */
};
#endif

/* ---- serial / exit ---- */
void rt_putc(char c);
void rt_puts(const char *s);
void rt_printf(const char *fmt, ...);
__attribute__((noreturn)) void rt_exit(int code); /* QEMU status = code*2+1 */
__attribute__((noreturn)) void rt_panic(const char *fmt, ...);

/* ---- memory ---- */
void *memset(void *d, int c, size_t n);
void *memcpy(void *d, const void *s, size_t n);
void *memmove(void *d, const void *s, size_t n);
int memcmp(const void *a, const void *b, size_t n);

/* ---- CPU ---- */
void rt_init_cpu(void); /* GDT (+TSS, based CS), IDT; called by the boot code */
void rt_set_pce(int on);
ureg rt_read_cr4(void);
static inline void rt_outb(u16 port, u8 v) { __asm__ volatile("outb %0, %1" ::"a"(v), "Nd"(port)); }
static inline u8 rt_inb(u16 port) { u8 v; __asm__ volatile("inb %1, %0" : "=a"(v) : "Nd"(port)); return v; }
static inline void rt_cpuid(u32 leaf, u32 sub, u32 r[4])
{
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

/* ---- probes ----
 * probe_exec runs stub_table[insn][pfx][fs] in `mode` with the registers of `in`, after running
 * the reference stub (same flag setup, no instruction) with the same inputs.  Result in *res.
 */
struct probe_result {
    int vec;          /* -1: no fault, else exception vector */
    ureg err;         /* error code of the fault */
    struct regs out;  /* registers after the instruction (or after recovery from the fault) */
    struct regs ref;  /* registers after the reference stub */
    struct regs fault;/* registers at the fault, as the handler saw them */
    ureg fault_ip, fault_cs;
    int bad_stub;     /* the (insn, prefix, fsetup) combination does not exist in this guest */
    char chk[160];    /* "" when every check passed, else names of what differed */
};
int probe_exec(int insn, int mode, int pfx, int fs, const struct regs *in, u32 fmem,
               struct probe_result *res);

/* harness self-test: XORed into the inputs of the real run only (never the reference run) */
extern struct regs probe_xor;
extern int probe_force_stack_check; /* check the stack even after a ring-0 fault */

/* simple helpers (ring 0, no prefix): return the fault vector or -1 */
int probe_rdmsr(u32 msr, u64 *value);
int probe_wrmsr(u32 msr, u64 value);
int probe_rdpmc(u32 ecx, u64 *value);
void probe_default_regs(struct regs *r); /* sentinel values in every register */

/* run fn(arg) at CPL 3 on the ring-3 stack; returns its result (back through int 0x80).
 * Ring 3 starts with EFLAGS = rt_user_flags (default 2h: IF clear). */
ureg rt_call_user(ureg (*fn)(ureg), ureg arg);
extern ureg rt_user_flags;

/* ---- interrupts ----
 * rt_set_gate installs an interrupt gate (ring-0 code, DPL dpl) for vector n.  A vector whose
 * stub goes through isr_common (vectors 0-31, and the extra stubs of a guest program) calls
 * rt_vector_handlers[vector](frame) when one is installed, before anything else. */
typedef void (*rt_vector_handler)(struct frame *f);
extern rt_vector_handler rt_vector_handlers[256];
void rt_set_gate(int n, ureg handler, int dpl);

/* ---- provided by the guest program ---- */
void guest_main(u32 mb_magic, const void *mb_info);
