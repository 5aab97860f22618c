/*
 * siblings.h: what siblings.c offers to the other units. siblings.c: Hyper-Threading
 * (threads=2): fold and PMI requests between sibling logical processors, HLT and halted
 * siblings (docs/guest-events.md I8; SDM Vol. 3B 18.16).
 */
#ifndef P4PMU_SIBLINGS_H
#define P4PMU_SIBLINGS_H

#include "counting_types.h"

/* threads=2: what the sibling sees of a vCPU and asks of it.  fold_req: the sibling asks it
 * to fold (then SB_SIBLING_REQUEST); fold_seq counts the folds it handed to Python; at HLT it
 * snapshots its LVT entry and APIC ID so that the sibling can interrupt it while it is halted
 * (mask_pending: set the LVT mask bit at the next block entry, the interrupt was sent from the
 * sibling) */
struct sibling_vcpu {
    volatile int halted;
    /* halted by its own HLT (set just before the HLT, cleared at its next block entry):
     * covers single-threaded TCG, where no idle callback runs while another vCPU runs */
    volatile int hlt_halted;
    volatile int pmi_pending; /* PMI requests for this vCPU raised by the sibling */
    volatile int fold_req;
    volatile uint32_t fold_seq;
    volatile int hlt_valid;
    volatile uint32_t hlt_lvt, hlt_apic;
    volatile int mask_pending;
    /* in a PMU access (sibling_sync .. its next block entry, sibling_access_done): the sibling,
     * once it folded for it, waits at its block entry until then */
    volatile int in_access;
};

void cb_xpend(unsigned int vi, void *ud);
void sibling_sync(unsigned vi, struct vcpu_counting *c, uint64_t addr);
void sibling_access_done(unsigned vi, struct vcpu_counting *c, int now);
void cb_hlt(unsigned int vi, void *ud);
void counting_halt_change(unsigned vi, int halted);

#endif
