/*
 * p4pmu: delivering a performance-monitoring interrupt through the guest's local APIC
 * (docs/guest-events.md, "PMI delivery"), also to a halted sibling logical processor
 * (threads=2, sibling_pmi).
 *
 * Only ever called on the vCPU's own thread, from plugin callbacks, with no Python lock held:
 * the APIC is reached through physical memory (qemu_plugin_read/write_memory_hwaddr), which
 * takes QEMU's BQL for the MMIO access.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "pmi.h"
#include "counting.h"
#include "control.h"
#include "registers.h"
#include "trace.h"
#include "state.h"

/* Deliver this vCPU's PMI per its LVT performance-counter entry.  Returns 1 delivered,
 * 0 masked (nothing sent), -1 the APIC could not be read. */
int pmi_deliver_here(unsigned vi)
{
    struct vcpu *v = bridge_vcpu(vi);
    uint32_t lvt, id;
    if (!apic_rd(v, APIC_LVT_PERF, &lvt)) return -1;
    unsigned mode = (lvt >> 8) & 7, vec = lvt & 0xFF;
    struct p4c_trace *t = trace_of(vi);
    if (t && !t->lvt_noted && ((lvt & LVT_MASKED) ? !t->pmis : mode == 0 && vec < 16)) {
        t->lvt_noted = 1; /* for the checker (docs/checker.md, pmi-lvt) */
        trace_record(vi, P4_TR_LVT, t->pmis, lvt, 0, 0);
    }
    if (lvt & LVT_MASKED) {
        /* (the usual case of the look every PMI_RECHECK clocks while a request is
         * asserted: one APIC read) */
        return 0;
    }
    if (!apic_rd(v, APIC_ID_REG, &id)) return -1;
    if (t) t->pmis++;
    /* NetBurst sets the mask bit when it delivers (SDM 10.5.1) */
    apic_wr(v, APIC_BASE + APIC_LVT_PERF, lvt | LVT_MASKED);
    /* an MSI to ourselves: address FEE00000h | APIC ID << 12, data vector | mode << 8 */
    apic_wr(v, APIC_BASE | ((uint64_t)(id >> 24) << 12), vec | (mode << 8));
    DBG("PMI for vCPU %u: LVT %#x -> vector %#x mode %u at %#llx\n", vi, lvt, vec, mode,
        (unsigned long long)reg_read(v, p4.regs.rip));
    trace_record(vi, P4_TR_PMI, vec | mode << 8, 0, 0, 0); /* at the access or block entry */
    if (control_breaks()) control_pmi(vi, vec | mode << 8, reg_read(v, p4.regs.rip));
    return 1;
}

/* threads=2: this vCPU's step raised the request of the sibling's LP.  A running sibling
 * delivers it itself at its next block entry (it reads its own LVT).  A halted sibling
 * cannot run anything: if its LVT entry (snapshot taken at its HLT, exact while it is
 * halted) is unmasked, the MSI is sent from here, which wakes it, and the sibling sets its
 * mask bit at its first block entry (the handler's), before the handler runs. */
void sibling_pmi(unsigned vi, unsigned sib)
{
    struct vcpu_counting *s = &p4.run->per_vcpu[sib];
    if (lp_halted(s) && s->ht.hlt_valid && !lp_same_thread(sib)) {
        uint32_t lvt = s->ht.hlt_lvt;
        if (!(lvt & LVT_MASKED)) {
            unsigned mode = (lvt >> 8) & 7, vec = lvt & 0xFF;
            s->ht.hlt_lvt = lvt | LVT_MASKED;
            __atomic_store_n(&s->ht.mask_pending, 1, __ATOMIC_SEQ_CST);
            __atomic_store_n(&scoreboard_of(sib)[SB_SIBLING_REQUEST], 1, __ATOMIC_SEQ_CST);
            uint64_t msi = APIC_BASE | ((uint64_t)(s->ht.hlt_apic >> 24) << 12);
            apic_wr(bridge_vcpu(vi), msi, vec | (mode << 8));
            DBG("PMI for halted vCPU %u sent from vCPU %u: LVT %#x\n", sib, vi, lvt);
            return;
        }
    }
    __atomic_store_n(&s->ht.pmi_pending, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&scoreboard_of(sib)[SB_SIBLING_REQUEST], 1, __ATOMIC_SEQ_CST);
}
