/*
 * control.h: what control.c offers to the other units. control.c: the C half of the control
 * channel (docs/gdb.md) -- breakpoints on PMU events, the hold of a vCPU until QEMU stops it,
 * and the parking of vCPUs that lets the channel use their PMU state.
 */
#ifndef P4PMU_CONTROL_H
#define P4PMU_CONTROL_H

#include <stdint.h>

#include "p4c_api.h"

int control_setup(int max_vcpus);
/* 1 while some breakpoint is set: the vCPU threads check their events */
int control_breaks(void);
void control_snap(unsigned vi, uint8_t snap[P4_NCOUNTERS]);
void control_overflows(unsigned vi, const uint8_t snap[P4_NCOUNTERS], int skip, uint64_t pc);
/* after a PMU access (op P4_TR_RDMSR/WRMSR/RDPMC, reg the MSR or ECX) served with status r,
 * `snap` the OVF flags before it: the access and overflow breakpoints */
void control_after_access(unsigned vi, uint32_t op, uint32_t reg, uint64_t value, uint64_t pc,
                          int r, const uint8_t snap[P4_NCOUNTERS]);
void control_pmi(unsigned vi, uint32_t vector, uint64_t pc);
void control_hold(unsigned vi);
void control_release(unsigned vi);
void control_idle(unsigned vi);
void control_resume(unsigned vi);

#endif
