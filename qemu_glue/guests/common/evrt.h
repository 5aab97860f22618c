/* Runtime additions of the guest-activity ("events") guests: local APIC and the LVT
 * performance-counter entry, the PMI/NMI handler that records the CCCR state, the APIC timer
 * as a wake-up source for HLT, the FPU/SSE/MMX enable, and (32-bit guest) starting the second
 * logical processor with INIT-SIPI-SIPI.  See README.md, "Events guests". */
#pragma once

#include "rt.h"

/* ---- vectors ---- */
#define VEC_NMI 2
#define VEC_PMI 0x40     /* fixed-mode PMI vector used by the tests */
#define VEC_TIMER 0x41   /* APIC timer (wake-up from HLT) */
#define VEC_WAKE 0x42    /* IPI: "the other CPU finished its command" */
#define VEC_SPURIOUS 0x4F
#define EXT_VEC_FIRST 0x40
#define EXT_VEC_COUNT 16 /* stubs for 0x40-0x4F (evasm.S) */

/* ---- local APIC (xAPIC MMIO at FEE00000h) ---- */
#define APIC_BASE 0xFEE00000ul
#define APIC_ID 0x020
#define APIC_TPR 0x080
#define APIC_EOI 0x0B0
#define APIC_SVR 0x0F0
#define APIC_ICR_LO 0x300
#define APIC_ICR_HI 0x310
#define APIC_LVT_TIMER 0x320
#define APIC_LVT_PERF 0x340
#define APIC_TIMER_INIT 0x380
#define APIC_TIMER_CUR 0x390
#define APIC_TIMER_DIV 0x3E0
#define LVT_MASK (1u << 16)
#define LVT_NMI (4u << 8)

static inline u32 apic_read(u32 reg) { return *(volatile u32 *)(APIC_BASE + reg); }
static inline void apic_write(u32 reg, u32 v) { *(volatile u32 *)(APIC_BASE + reg) = v; }
u32 apic_id(void);          /* this CPU's local APIC ID */
void apic_enable(void);     /* software-enable (SVR), TPR 0, LVT perf masked */
void apic_eoi(void);

/* ---- MSRs and counters (plain instructions, ring 0) ---- */
static inline u64 ev_rdmsr(u32 msr)
{
    u32 lo, hi;
    __asm__ volatile("rdmsr" : "=a"(lo), "=d"(hi) : "c"(msr));
    return ((u64)hi << 32) | lo;
}
static inline void ev_wrmsr(u32 msr, u64 v)
{
    __asm__ volatile("wrmsr" ::"c"(msr), "a"((u32)v), "d"((u32)(v >> 32)) : "memory");
}
static inline u64 ev_rdpmc(u32 idx)
{
    u32 lo, hi;
    __asm__ volatile("rdpmc" : "=a"(lo), "=d"(hi) : "c"(idx));
    return ((u64)hi << 32) | lo;
}

#define CCCR(n) (0x360u + (n))
#define COUNTER(n) (0x300u + (n))
#define CCCR_OVF (1u << 31)

/* ---- the PMI/NMI handler ----
 * Every performance interrupt (fixed vector VEC_PMI or NMI) is counted per CPU and, up to
 * PMI_LOG_MAX, recorded: the CPU (APIC ID), vector, the LVT perf entry as the handler found
 * it, which CCCRs had OVF set (one RDMSR per CCCR), the interrupted IP/CS and the value of the
 * counter pmi_cfg.counter.  What it then does is pmi_cfg.flags: */
#define PMI_CLEAR_OVF 1u  /* write OVF = 0 into every CCCR that had it set */
#define PMI_RELOAD 2u     /* write pmi_cfg.reload into counter pmi_cfg.counter */
#define PMI_UNMASK 4u     /* write the LVT entry with the mask bit clear (last) */
#define PMI_MINIMAL 8u    /* benchmark handler: no reads, no record; reload counter,
                           * rewrite CCCR pmi_cfg.counter with pmi_cfg.cccr (OVF clear), unmask */
#define PMI_LOG_MAX 64

struct pmi_record {
    u32 cpu, vec, lvt, ovf; /* ovf: bit n = CCCR n had OVF set */
    ureg ip, cs;
    u64 ctr;
};
struct pmi_config {
    volatile u32 flags;
    volatile u32 counter;       /* counter read (and reloaded) by the handler */
    volatile u64 reload;
    volatile u32 cccr;          /* PMI_MINIMAL: CCCR value written back */
    volatile u32 max_unmask;    /* stop unmasking after this many interrupts (0: no limit) */
    volatile u32 lvt;           /* LVT value written on unmask (its mask bit is cleared) */
};
extern struct pmi_config pmi_cfg;
extern volatile u32 pmi_count[2];        /* per CPU (0 = BSP, 1 = AP) */
extern struct pmi_record pmi_log[PMI_LOG_MAX];
extern volatile u32 pmi_logged;
void pmi_reset(void);

/* ---- measured calls (evasm.S) ----
 * meas_r0/meas_r3(fn, n): the 18 WRMSRs of meas_on[], fn(n) at CPL 0 / CPL 3, the 18 WRMSRs
 * of meas_off[] -- no conditional branch outside the loop between the two sets. */
struct meas_wr {
    u32 msr, lo, hi;
};
extern struct meas_wr meas_on[18], meas_off[18];
ureg meas_r0(ureg (*fn)(ureg), ureg n);
ureg meas_r3(ureg (*fn)(ureg), ureg n);

/* ---- set-up ---- */
void ev_init(void);         /* gates 0x40-0x4F and NMI, handlers, APIC, FPU/SSE */
void ev_fpu_enable(void);   /* CR0.EM=0 MP=1 NE=1, CR4.OSFXSR/OSXMMEXCPT, fninit */
int ev_cpu_index(void);     /* 0 on the BSP, 1 on the AP */

/* ---- HLT with the APIC timer as wake-up source ----
 * arm the timer (one-shot, VEC_TIMER, `ticks` at divide-by-1), then sti; hlt; cli. */
void ev_halt_timer(u32 ticks);
void ev_timer_periodic(u32 ticks);
extern volatile u32 timer_count[2];

/* ---- second logical processor (32-bit guest) ----
 * ap_start() sends INIT-SIPI-SIPI to APIC ID 1 and waits until the AP is up (returns 0) or a
 * timeout (-1).  ap_run(fn, arg, halt) makes the AP call fn(arg) and waits for the result;
 * with halt != 0 the BSP waits in HLT (woken by an IPI from the AP) instead of spinning. */
int ap_start(void);
ureg ap_run(ureg (*fn)(ureg), ureg arg, int halt);
extern volatile u32 ap_up;
/* ap_sync_ticks != 0: before each command run with halt, the AP waits until the BSP is about
 * to execute its HLT and then this many TSC ticks more, so that the command runs while the
 * BSP is halted; and the BSP, woken at the end, waits until the AP is back at its HLT (plus
 * as many ticks) before it goes on (the two vCPU threads are not synchronised by QEMU) */
extern volatile u32 ap_sync_ticks;
