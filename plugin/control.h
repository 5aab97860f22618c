/*
 * control.h: what control.c offers to the other units. control.c: the C half of the control
 * channel (docs/gdb.md) -- breakpoints on PMU events, the hold of a vCPU until QEMU stops it,
 * and the parking of vCPUs that lets the channel use their PMU state.
 */
#ifndef P4PMU_CONTROL_H
#define P4PMU_CONTROL_H

#include <stdint.h>

#include <pthread.h>

#include "p4c_api.h"

struct control_vcpu {
    int parked;          /* between the idle and the resume callback */
    int hold;            /* hold at the next block entry (a stop was asked for) */
    uint64_t hold_since; /* CLOCK_MONOTONIC ns */
    int lvt_valid;       /* lvt was read (a read that fails keeps the last one) */
    uint32_t lvt;        /* the LVT performance-counter entry at the last stop, hold or idle */
};

/* the control channel's C half (state.h p4.control) */
struct control_state {
    struct p4c_control ctl;  /* what Python reads and writes (p4c_api.h) */
    struct control_vcpu *cv; /* [max_vcpus] */
    pthread_mutex_t lock;    /* requests of the channel against resumed vCPUs */
};

struct control_state *control_state_new(void);

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
