/*
 * cuts.h: what cuts.c offers to the other units. cuts.c: block executions that stop early:
 * exceptions, interrupts, executions QEMU abandons at MMIO accesses, the bridge's
 * qemu_plugin_set_pc (docs/guest-events.md).
 */
#ifndef P4PMU_CUTS_H
#define P4PMU_CUTS_H

#include "counting_types.h"

/* a vCPU's cut executions: the exception seen last, until its delivery (counting_discon) */
struct cuts_vcpu {
    uint64_t exc_from;
    int exc_seen;
    uint64_t memi_cuts; /* executions cut by cb_memi (outcome-free level) */
};

unsigned open_start(const struct vcpu_counting *c, uint32_t id);
void cut_abandoned(unsigned vi, struct vcpu_counting *c, uint32_t id, unsigned j);
void counting_discon(unsigned vi, struct vcpu *v, uint64_t from, int retires, int interrupt);
void counting_abandon(int vi, uint64_t addr, int retired);
void cb_memi(unsigned int vi, uint32_t info, uint64_t vaddr, void *ud);

#endif
