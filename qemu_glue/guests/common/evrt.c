/* Runtime additions of the events guests: see evrt.h. */
#include "evrt.h"

extern const ureg ext_isr_table[EXT_VEC_COUNT]; /* evasm.S: stubs for 0x40-0x4F */

struct pmi_config pmi_cfg;
volatile u32 pmi_count[2];
struct pmi_record pmi_log[PMI_LOG_MAX];
volatile u32 pmi_logged;
volatile u32 timer_count[2];
volatile u32 wake_count[2];
volatile u32 ap_up;
struct meas_wr meas_on[18], meas_off[18];

static volatile u32 bsp_apic_id;

/* ------------------------------------------------------------------------------------ */
/* APIC                                                                                 */

u32 apic_id(void) { return apic_read(APIC_ID) >> 24; }

int ev_cpu_index(void) { return apic_id() == bsp_apic_id ? 0 : 1; }

void apic_eoi(void) { apic_write(APIC_EOI, 0); }

void apic_enable(void)
{
    u64 base = ev_rdmsr(0x1B);
    if (!(base & (1u << 11)))
        ev_wrmsr(0x1B, base | (1u << 11)); /* global enable (it is set after reset) */
    apic_write(APIC_SVR, 0x100 | VEC_SPURIOUS);
    apic_write(APIC_TPR, 0);
    apic_write(APIC_LVT_PERF, LVT_MASK | VEC_PMI);
    apic_write(APIC_LVT_TIMER, LVT_MASK | VEC_TIMER);
}

/* ------------------------------------------------------------------------------------ */
/* interrupt handlers                                                                   */

void pmi_reset(void)
{
    pmi_count[0] = pmi_count[1] = 0;
    pmi_logged = 0;
}

static void pmi_handler(struct frame *f)
{
    int cpu = ev_cpu_index();
    u32 n = pmi_count[cpu] + 1;
    pmi_count[cpu] = n;
    u32 fl = pmi_cfg.flags;
    if (fl & PMI_MINIMAL) {
        ev_wrmsr(COUNTER(pmi_cfg.counter), pmi_cfg.reload);
        ev_wrmsr(CCCR(pmi_cfg.counter), pmi_cfg.cccr);
        apic_write(APIC_LVT_PERF, pmi_cfg.lvt & ~LVT_MASK);
        if (f->vec != VEC_NMI)
            apic_eoi();
        return;
    }
    u32 lvt = apic_read(APIC_LVT_PERF);
    u32 ovf = 0;
    u32 cccr[18];
    for (int i = 0; i < 18; i++) {
        cccr[i] = (u32)ev_rdmsr(CCCR(i));
        if (cccr[i] & CCCR_OVF)
            ovf |= 1u << i;
    }
    u64 ctr = ev_rdmsr(COUNTER(pmi_cfg.counter));
    u32 slot = __atomic_fetch_add(&pmi_logged, 1, __ATOMIC_SEQ_CST);
    if (slot < PMI_LOG_MAX) {
        struct pmi_record *r = &pmi_log[slot];
        r->cpu = cpu;
        r->vec = (u32)f->vec;
        r->lvt = lvt;
        r->ovf = ovf;
        r->ip = f->ip;
        r->cs = f->cs & 0xFFFF;
        r->ctr = ctr;
    }
    if (fl & PMI_CLEAR_OVF)
        for (int i = 0; i < 18; i++)
            if (ovf & (1u << i))
                ev_wrmsr(CCCR(i), cccr[i] & ~CCCR_OVF);
    if (fl & PMI_RELOAD)
        ev_wrmsr(COUNTER(pmi_cfg.counter), pmi_cfg.reload);
    if ((fl & PMI_UNMASK) && (!pmi_cfg.max_unmask || n < pmi_cfg.max_unmask))
        apic_write(APIC_LVT_PERF, pmi_cfg.lvt & ~LVT_MASK);
    if (f->vec != VEC_NMI)
        apic_eoi();
}

static void timer_handler(struct frame *f)
{
    timer_count[ev_cpu_index()]++;
    apic_eoi();
}

static void wake_handler(struct frame *f)
{
    wake_count[ev_cpu_index()]++;
    apic_eoi();
}

static void spurious_handler(struct frame *f) { (void)f; }

/* ------------------------------------------------------------------------------------ */
/* FPU / SSE                                                                            */

void ev_fpu_enable(void)
{
    ureg cr0, cr4;
    __asm__ volatile("mov %%cr0, %0" : "=r"(cr0));
    cr0 &= ~(ureg)((1u << 2) | (1u << 3)); /* EM, TS */
    cr0 |= (1u << 1) | (1u << 5);           /* MP, NE */
    __asm__ volatile("mov %0, %%cr0" ::"r"(cr0));
    __asm__ volatile("mov %%cr4, %0" : "=r"(cr4));
    cr4 |= (1u << 9) | (1u << 10); /* OSFXSR, OSXMMEXCPT */
    __asm__ volatile("mov %0, %%cr4" ::"r"(cr4));
    __asm__ volatile("fninit");
}

/* ------------------------------------------------------------------------------------ */
/* set-up                                                                               */

void ev_init(void)
{
    /* mask every legacy PIC line: the BIOS leaves the PIT running on IRQ 0, which the PIC
     * delivers at vector 8 (the #DF slot) once EFLAGS.IF is set; our interrupts come from
     * the local APIC only */
    rt_outb(0x21, 0xFF);
    rt_outb(0xA1, 0xFF);
    for (int i = 0; i < EXT_VEC_COUNT; i++)
        rt_set_gate(EXT_VEC_FIRST + i, ext_isr_table[i], 0);
    rt_vector_handlers[VEC_NMI] = pmi_handler;
    rt_vector_handlers[VEC_PMI] = pmi_handler;
    rt_vector_handlers[VEC_TIMER] = timer_handler;
    rt_vector_handlers[VEC_WAKE] = wake_handler;
    rt_vector_handlers[VEC_SPURIOUS] = spurious_handler;
    pmi_cfg.counter = 0;
    pmi_cfg.lvt = VEC_PMI;
    for (int i = 0; i < 18; i++) { /* harmless default: IA32_SYSENTER_CS = 0 */
        meas_on[i].msr = meas_off[i].msr = 0x174;
        meas_on[i].lo = meas_on[i].hi = meas_off[i].lo = meas_off[i].hi = 0;
    }
    apic_enable();
    bsp_apic_id = apic_id();
    ev_fpu_enable();
}

/* ------------------------------------------------------------------------------------ */
/* HLT with the APIC timer                                                              */

void ev_halt_timer(u32 ticks)
{
    int cpu = ev_cpu_index();
    u32 before = timer_count[cpu];
    apic_write(APIC_TIMER_DIV, 0xB); /* divide by 1 */
    apic_write(APIC_LVT_TIMER, VEC_TIMER); /* one-shot, unmasked */
    apic_write(APIC_TIMER_INIT, ticks);
    /* sti; hlt: an interrupt that is already pending is taken after the hlt, so the same
     * instructions run whether or not the timer fired before the hlt */
    while (timer_count[cpu] == before)
        __asm__ volatile("sti; hlt; cli" ::: "memory");
    apic_write(APIC_LVT_TIMER, LVT_MASK | VEC_TIMER);
}

/* periodic APIC timer interrupts (ticks = 0: off); taken wherever EFLAGS.IF = 1 */
void ev_timer_periodic(u32 ticks)
{
    apic_write(APIC_LVT_TIMER, LVT_MASK | VEC_TIMER);
    apic_write(APIC_TIMER_INIT, 0);
    if (!ticks)
        return;
    apic_write(APIC_TIMER_DIV, 0xB); /* divide by 1 */
    apic_write(APIC_LVT_TIMER, (1u << 17) | VEC_TIMER); /* periodic, unmasked */
    apic_write(APIC_TIMER_INIT, ticks);
}

/* ------------------------------------------------------------------------------------ */
/* the second logical processor                                                         */

#ifdef __x86_64__
int ap_start(void) { return -1; }
ureg ap_run(ureg (*fn)(ureg), ureg arg, int halt)
{
    (void)fn, (void)arg, (void)halt;
    rt_panic("ap_run: no AP support in the 64-bit guest");
}
#else

struct tss32 {
    u32 link, esp0, ss0, esp1, ss1, esp2, ss2, cr3, eip, eflags;
    u32 eax, ecx, edx, ebx, esp, ebp, esi, edi;
    u32 es, cs, ss, ds, fs, gs, ldt;
    u16 trap, iomap_base;
} __attribute__((packed));

#define AP_TRAMPOLINE 0x8000u /* SIPI vector 08h; below QEMU's multiboot info at 9000h */
#define SEL_TSS_AP 0x38

extern const char ap_tramp_start[], ap_tramp_end[]; /* evasm.S, 16-bit code */
extern char ap_intr_stack_top[];
struct __attribute__((packed)) dtr32 {
    u16 limit;
    u32 base;
};
struct dtr32 ap_gdtr, ap_idtr; /* the BSP's GDT/IDT, loaded by the AP */
static struct tss32 ap_tss __attribute__((aligned(16)));

static ureg (*volatile ap_fn)(ureg);
static volatile ureg ap_arg, ap_result;
static volatile u32 ap_seq, ap_done, ap_wake_bsp;
static volatile u32 bsp_halting; /* the BSP is about to execute HLT in ap_run */
static volatile u32 ap_halting;  /* the AP is about to execute HLT in its idle loop */
volatile u32 ap_sync_ticks;       /* see evrt.h */

static inline u64 rdtsc64(void)
{
    u32 lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((u64)hi << 32) | lo;
}

static void delay(u32 n)
{
    for (volatile u32 i = 0; i < n; i++)
        ;
}

/* called by ap_entry32 (evasm.S) on the AP's own stack, GDT/IDT loaded, segments flat */
void ap_main(void)
{
    __asm__ volatile("ltr %w0" ::"r"(SEL_TSS_AP));
    apic_enable();
    ev_fpu_enable();
    ap_up = 1;
    u32 seen = 0;
    for (;;) {
        __asm__ volatile("cli");
        while (ap_seq == seen) {
            __atomic_store_n(&ap_halting, 1, __ATOMIC_SEQ_CST);
            __asm__ volatile("sti; hlt; cli" ::: "memory");
        }
        __atomic_store_n(&ap_halting, 0, __ATOMIC_SEQ_CST);
        seen = ap_seq;
        if (ap_wake_bsp && ap_sync_ticks) {
            /* let the BSP reach its HLT first: its vCPU thread runs independently */
            while (!__atomic_load_n(&bsp_halting, __ATOMIC_SEQ_CST))
                __asm__ volatile("pause");
            u64 t0 = rdtsc64();
            while (rdtsc64() - t0 < ap_sync_ticks)
                __asm__ volatile("pause");
        }
        ap_result = ap_fn(ap_arg);
        __atomic_store_n(&ap_done, seen, __ATOMIC_SEQ_CST);
        if (ap_wake_bsp) { /* the BSP waits in HLT */
            apic_write(APIC_ICR_HI, bsp_apic_id << 24);
            apic_write(APIC_ICR_LO, VEC_WAKE); /* fixed, physical */
        }
    }
}

static void send_ipi(u32 dest, u32 lo)
{
    apic_write(APIC_ICR_HI, dest << 24);
    apic_write(APIC_ICR_LO, lo);
    for (int i = 0; i < 100000 && (apic_read(APIC_ICR_LO) & (1u << 12)); i++)
        ;
}

int ap_start(void)
{
    if (ap_up)
        return 0;
    /* the AP's TSS: GDT entry 7 (unused in the 32-bit guest) */
    __asm__ volatile("sgdt %0" : "=m"(ap_gdtr));
    __asm__ volatile("sidt %0" : "=m"(ap_idtr));
    memset(&ap_tss, 0, sizeof ap_tss);
    ap_tss.esp0 = (u32)ap_intr_stack_top;
    ap_tss.ss0 = SEL_KDATA;
    ap_tss.iomap_base = sizeof ap_tss;
    u32 base = (u32)&ap_tss, limit = sizeof ap_tss - 1;
    u64 *gdt = (u64 *)ap_gdtr.base;
    gdt[SEL_TSS_AP / 8] = (limit & 0xFFFFull) | ((u64)(base & 0xFFFFFF) << 16) |
                          (0x89ull << 40) | ((u64)((limit >> 16) & 0xF) << 48) |
                          ((u64)(base >> 24) << 56);
    memcpy((void *)AP_TRAMPOLINE, ap_tramp_start, (size_t)(ap_tramp_end - ap_tramp_start));
    u32 dest = bsp_apic_id ^ 1; /* the sibling thread */
    send_ipi(dest, 0x00004500); /* INIT, level assert */
    delay(10000);
    send_ipi(dest, 0x00004600 | (AP_TRAMPOLINE >> 12)); /* STARTUP */
    for (u32 i = 0; i < 2000000 && !ap_up; i++)
        ;
    if (!ap_up) {
        send_ipi(dest, 0x00004600 | (AP_TRAMPOLINE >> 12)); /* second SIPI */
        for (u32 i = 0; i < 20000000 && !ap_up; i++)
            ;
    }
    return ap_up ? 0 : -1;
}

ureg ap_run(ureg (*fn)(ureg), ureg arg, int halt)
{
    if (!ap_up)
        rt_panic("ap_run: the AP is not running");
    ap_fn = fn;
    ap_arg = arg;
    ap_wake_bsp = halt != 0;
    u32 seq = ap_seq + 1;
    __atomic_store_n(&ap_seq, seq, __ATOMIC_SEQ_CST);
    send_ipi(bsp_apic_id ^ 1, VEC_WAKE);
    if (halt) {
        __asm__ volatile("cli");
        while (__atomic_load_n(&ap_done, __ATOMIC_SEQ_CST) != seq) {
            __atomic_store_n(&bsp_halting, 1, __ATOMIC_SEQ_CST);
            __asm__ volatile("sti; hlt; cli" ::: "memory");
        }
        __atomic_store_n(&bsp_halting, 0, __ATOMIC_SEQ_CST);
        if (ap_sync_ticks) {
            /* and let the AP finish its way back into HLT before going on */
            while (!__atomic_load_n(&ap_halting, __ATOMIC_SEQ_CST))
                __asm__ volatile("pause");
            u64 t0 = rdtsc64();
            while (rdtsc64() - t0 < ap_sync_ticks)
                __asm__ volatile("pause");
        }
    } else {
        while (__atomic_load_n(&ap_done, __ATOMIC_SEQ_CST) != seq)
            __asm__ volatile("pause" ::: "memory");
    }
    return ap_result;
}
#endif
