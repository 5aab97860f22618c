/*
 * pmi.h: what pmi.c offers to the other units. pmi.c: delivery of a performance-monitoring
 * interrupt through the guest's local APIC (docs/guest-events.md, "PMI delivery"; SDM Vol.
 * 3A 10.5.1), also to a halted sibling logical processor.
 */
#ifndef P4PMU_PMI_H
#define P4PMU_PMI_H

#include "bridge_types.h"
#include "registers.h"

int pmi_deliver_here(unsigned vi);
void sibling_pmi(unsigned vi, unsigned sib);

#endif
