/*
 * siblings.h: what siblings.c offers to the other units. siblings.c: Hyper-Threading
 * (threads=2): fold and PMI requests between sibling logical processors, HLT and halted
 * siblings (docs/guest-events.md I8; SDM Vol. 3B 18.16).
 */
#ifndef P4PMU_SIBLINGS_H
#define P4PMU_SIBLINGS_H

#include "counting_types.h"

void cb_xpend(unsigned int vi, void *ud);
void sibling_sync(unsigned vi, uint64_t addr);
void cb_hlt(unsigned int vi, void *ud);
void counting_halt_change(unsigned vi, int halted);

#endif
