/*
 * pmi.h: what pmi.c offers to the other units. pmi.c: delivery of a performance-monitoring
 * interrupt through the guest's local APIC (docs/guest-events.md, "PMI delivery"; SDM Vol.
 * 3A 10.5.1).
 */
#ifndef P4PMU_PMI_H
#define P4PMU_PMI_H

#include "bridge_types.h"
#include "registers.h"


#define APIC_BASE 0xFEE00000ull
#define APIC_ID_REG 0x020
#define APIC_LVT_PERF 0x340
#define LVT_MASKED (1u << 16)

int apic_rd(struct vcpu *v, uint64_t off, uint32_t *out);
int apic_wr(struct vcpu *v, uint64_t addr, uint32_t val);
int pmi_deliver_here(unsigned vi);

#endif
