/*
 * p4pmu: what the plugin's C code and its Python half (plugin/feeder.py, through cffi) both
 * see -- the counter count, the fold output of a vCPU (struct p4c_out), its register mirror
 * (struct p4c_mirror) and the functions Python calls to reach them.
 *
 * Declared once: plugin/build.py hands the block between the BEGIN/END PYTHON API markers
 * (after the generated counter count) to cffi's cdef (which accepts the integer #defines and
 * uses them as array lengths), and the C units include this header.  Keep the block to what
 * cdef parses: integer #defines, structs, prototypes, no other preprocessor lines.
 */
#ifndef P4C_API_H
#define P4C_API_H

#include <stdint.h>

/* P4_NCOUNTERS, the performance counters of a NetBurst core (SDM Vol. 3B 18.15.2), and
 * P4_NESCRS, the most ESCRs a model has: from the emulator's register table
 * (p4pmu.emulator.tables), generated into p4_tables.h; build.py puts the same #defines in
 * front of the block below for cffi's cdef. */
#include "p4_tables.h"

/* BEGIN PYTHON API */
#define P4_TRACE_RECS 4096 /* trace and log records C keeps between Python calls */
#define P4_LITE_EITHER 2   /* p4c_out.lite: either level counts the same (nothing counts) */
#define P4_MEM_DATA 1      /* p4c_out.mem: the memory level feeds data accesses ... */
#define P4_MEM_FETCH 4     /* ... and instruction fetches (P4_LITE_EITHER: keep the level) */
#define P4_MEM_CODE 8      /* ... and the code fetched: trace cache, stores into it (+DATA) */
#define P4_MEM_SB 16       /* ... and the stores, for loads (the store buffers; with DATA) */
#define P4_MEM_FP 32       /* ... and the SSE instructions' input values (fp_assist.c) */
#define P4_MEM_ALL 61      /* DATA | FETCH | CODE | SB | FP */
/* clocks after which a deadline whose Python step failed is tried again (deadline.c) */
#define P4_DEADLINE_RETRY 4096

/* One fold of a vCPU's activity (fold.c), and what Python leaves for the C side's deadline
 * checks (deadline.c) and counter totals. */
struct p4c_out {
    uint32_t *ext;
    int64_t *cnt;
    uint32_t n;
    uint32_t *pa, *pb;
    int64_t *pn;
    uint32_t np;
    uint32_t first, last;
    int64_t clocks;
    int bad;
    int other_active, other_os;
    int64_t shared; /* threads=2: the batch's first `shared` clocks coincide with clocks of
                       * the sibling already on the core's timeline (lp_timeline) */
    /* written by Python */
    int64_t budget; /* clocks until the next deadline (<= 0: none) */
    int pmi[2];     /* deliver a PMI to LP 0 / LP 1 of this core now */
    int start;      /* count=auto: start instrumenting */
    uint32_t *seq; /* a batch of one block execution or its rest: its clocks in order (else NULL) */
    uint32_t nseq;
    /* written by Python: the counters that could overflow (or arm a PMI) and their exact
     * per-clock increments per ext kind, so that deadlines can be checked in C
     * (fast_check): nwatch counters, whead[w] = events that may still be counted before the
     * next OVF 0 -> 1 or arming, wrate[w] = most events per clock,
     * winc[ext * P4_NCOUNTERS + w] for ext < nkext; nwatch < 0: no C check possible (always
     * ask Python) */
    int nwatch;
    uint32_t nkext;
    int64_t whead[P4_NCOUNTERS];
    int32_t wrate[P4_NCOUNTERS];
    int32_t *winc;              /* [ext * P4_NCOUNTERS + counter] for all counters */
    int32_t widx[P4_NCOUNTERS]; /* watched w -> counter */
    /* written by C at a fold: the batch's increment of every counter, from winc (exact when
     * Python marked the table exact, i.e. no EDGE counter); tot_ok = 0: not available */
    int tot_ok;
    int64_t tot[P4_NCOUNTERS];
    /* written by Python or the mirror: the columns of tot[] wanted (bit n: counter n; the
     * others are left 0), and 1 when no counter needs the adjacent pairs (pa/pb/pn then
     * stay empty, threads=1 only) */
    uint32_t tmask;
    int nopairs;
    int lite;       /* written by Python: 1 the counters that may count need no branch
                        * outcome (the outcome-free level may be installed: lite_update),
                        * 0 some need them, P4_LITE_EITHER no counter may count */
    int mem;        /* written by Python: what the memory level must feed (P4_MEM_DATA |
                        * P4_MEM_FETCH | P4_MEM_CODE | P4_MEM_SB: a counter that may count
                        * reads such an event;
                        * mem_update), 0 nothing, P4_LITE_EITHER no counter may count */
    uint32_t wmem;  /* written by Python: the counters (bit n: counter n) whose increments
                        * memory outcomes change: their wrate is a bound per clock whatever
                        * the kinds, and they are not watched by W2 */
    uint32_t wfree; /* written by Python or the mirror: the watched counters (bit n:
                        * counter n) whose next state change any batch steps exactly, in
                        * whatever clock of it it happens (docs/emulator.md, "Exactness"): a
                        * PMI arming, or the overflow of a FORCE_OVF counter that starts no
                        * other counter.  The deadline check then only needs to see it once
                        * it may have happened, not before the block that may do it */
};

#define P4_PROGS 128 /* programmings a vCPU's mirror may switch between (programs.c) */

/* A programming the mirror may switch to without Python (programs.c; docs/bridge.md, "The
 * register mirror"): the CCCRs and ESCRs that make it, and what Python derived from them
 * (Feeder.enable_fast_path) -- the running set, the per-kind table and its rates, the
 * outcome-free flag. */
struct p4c_prog {
    uint64_t hash;               /* programs.c's hash of cccr[] and escr[]; 0: empty slot */
    uint64_t cccr[P4_NCOUNTERS]; /* without OVF */
    uint64_t escr[P4_NESCRS];    /* this model's ESCR slots, the rest 0 */
    int32_t *winc;               /* its per-kind table (p4c_out.winc) and rows */
    uint32_t nkext;
    int any_run;
    int lite;      /* p4c_out.lite */
    int mem;       /* p4c_out.mem */
    uint32_t wmem; /* p4c_out.wmem */
    uint8_t run[P4_NCOUNTERS], pmi[P4_NCOUNTERS];
    int8_t escr_of[P4_NCOUNTERS]; /* the ESCR slot counter n counts through, -1: none */
    int32_t rate_b[P4_NCOUNTERS], tmax[P4_NCOUNTERS];
};

/* One record of the C half of the access trace (trace.c; docs/trace.md): Python's trace writer
 * (plugin/trace_writer.py) and the log turn them into lines at its next call. */
#define P4_TR_RDMSR 1    /* served by the mirror: reg = MSR, value read */
#define P4_TR_WRMSR 2    /* served by the mirror: reg = MSR, value written, old = before */
#define P4_TR_RDPMC 3    /* served by the mirror: reg = ECX, value read */
#define P4_TR_OVERFLOW 4 /* the mirror set OVF: reg = counter */
#define P4_TR_PMI 5      /* an interrupt sent: reg = vector | delivery mode << 8 */
/* #GP by QEMU for CPL > 0: reg = MSR or ECX, value = 1 RDMSR, 2 WRMSR, 3 RDPMC (without
 * CR4.PCE) */
#define P4_TR_PRIV 6
/* a PMI requested, the LVT entry `value` masked or invalid; reg: PMIs delivered on this vCPU
 * before (the checker: docs/checker.md) */
#define P4_TR_LVT 7
#define P4_TR_COUNTING 1 /* flags of a P4_TR_WRMSR of a counter: it was counting */
struct p4c_trec {
    uint32_t op, reg;
    uint64_t value, old;
    uint64_t pc, insns, clk; /* guest address; time (struct p4c_trace) */
    uint32_t cpl, flags;
};

/* A vCPU's trace state (trace.c): the time and place of the access being served, and the
 * records C made since Python last looked. */
struct p4c_trace {
    int on;                  /* written by Python: 1 while a trace or a log is written */
    int timed;               /* insns and clk are known (counting instruments blocks) */
    uint64_t pc, insns, clk; /* the current access: guest address, instructions of the
                               * blocks entered before it, clocks folded before it */
    uint32_t cpl;
    uint32_t n;               /* records in rec[] */
    uint32_t pmis, lvt_noted; /* PMIs delivered; a P4_TR_LVT was recorded */
    uint64_t dropped;         /* records that found rec[] full (PMIs, faults) */
    struct p4c_trec rec[P4_TRACE_RECS];
};

/* A vCPU's register mirror (mirror.c; docs/bridge.md, "The register mirror").  ctr, cccr,
 * ovf and armed ARE the PMU's counter state: the Python model's arrays (PMU.counter,
 * cccr_raw, ovf, pmi_armed) are numpy views of the core's first vCPU's mirror
 * (Feeder.storage), so there is one copy; `active` says which side may change it now. */
struct p4c_mirror {
    /* written by Python once (constants from p4pmu.emulator.tables) */
    uint64_t ctr_limit; /* 2^40: counters are 40 bits (SDM 18.15.5.4) */
    uint64_t ovf_mask;  /* the CCCR's OVF bit (bit 31) */
    uint32_t ctr_msr[P4_NCOUNTERS], cccr_msr[P4_NCOUNTERS];
    /* written by Python when it enables the fast path (Feeder.enable_fast_path) */
    int active;                  /* 1: C serves this vCPU's accesses and deadlines */
    int any_run;                 /* some counter runs */
    uint32_t nkext;              /* rows of the per-kind table handed over (p4c_out.nkext) */
    uint64_t ctr[P4_NCOUNTERS];  /* 40-bit values */
    uint64_t cccr[P4_NCOUNTERS]; /* as written (OVF is in ovf[]) */
    /* bits whose setting faults (reserved policy) */
    uint64_t ctr_fault[P4_NCOUNTERS], cccr_fault[P4_NCOUNTERS];
    /* pmi: OVF_PMI for this LP */
    uint8_t ovf[P4_NCOUNTERS], armed[P4_NCOUNTERS], run[P4_NCOUNTERS], pmi[P4_NCOUNTERS];
    int32_t rate_b[P4_NCOUNTERS]; /* Feeder.after's budget rate of a counter not arming */
    int32_t tmax[P4_NCOUNTERS];   /* max(1, the table's largest per-clock increment) */
    /* the ESCRs and the programmings the mirror may switch to (programs.c): written by Python
     * (escr[] when it enables the fast path, progs[] and cur when it registers one); C
     * changes escr[], cccr[] and cur when it serves a programming write, and bumps
     * prog_changes (Python then decodes the registers that changed: Feeder.disable_fast_path) */
    uint32_t nescr; /* this model's ESCR slots */
    uint32_t escr_msr[P4_NESCRS];
    uint64_t escr_fault[P4_NESCRS];
    uint64_t escr_event_bits; /* EVENT_SELECT | EVENT_MASK */
    uint64_t cccr_enable_bit; /* ENABLE */
    uint64_t escr[P4_NESCRS];
    int cur; /* progs[] slot in force, -1: none (no switching) */
    uint64_t prog_changes;
    struct p4c_prog progs[P4_PROGS];
    /* written by C: bumped whenever it changes ovf[] or armed[] (the engine's derived
     * vectors key on OVF and arming: Python compares it at its next call) */
    uint64_t state_changes;
    /* statistics (C) */
    uint64_t n_rdmsr, n_wrmsr, n_rdpmc, n_deadline, n_declined, n_walks, n_switches;
    uint64_t n_unordered; /* declined: an overflow in a batch not in clock order */
    /* overflows whose PMI a CCCR write served here discarded before it was raised (OVF
     * cleared before the next counted event: PMU.discarded_pmis, SDM 18.15.5.8) */
    uint64_t discarded[P4_NCOUNTERS];
};


/* The control channel's C half (control.c; docs/gdb.md): the breakpoints on PMU events that
 * vCPU threads check, and the last stop they asked for.  Python (plugin/control.py) fills
 * brk[] (kind last) and reads stop under p4c_control_enter. */
#define P4_BREAKS 32
#define P4_BRK_OVERFLOW 1
#define P4_BRK_PMI 2
#define P4_BRK_ACCESS 3
struct p4c_break {
    int32_t kind;    /* 0: free slot, else P4_BRK_* */
    int32_t counter; /* overflow: the counter 0-17, -1 any */
    uint32_t msr;    /* access: the MSR (an RDPMC matches its counter's MSR), 0 any */
    uint32_t number; /* the user's number */
    uint64_t hits;
};
struct p4c_stop {
    uint64_t seq;                        /* 0: none yet; bumped by every stop asked for */
    int32_t vcpu, kind, number, counter; /* counter: overflow */
    uint32_t op, msr;   /* access: P4_TR_RDMSR/WRMSR/RDPMC and the MSR (RDPMC: ECX) */
    uint32_t fault;     /* access: 1 it faulted (#GP) */
    uint32_t vector;    /* pmi: vector | delivery mode << 8 */
    uint64_t value, pc; /* access: the value; every kind: the guest address of the access or
                          * of the block entry where the event was found */
    uint64_t later;     /* events that matched while this stop was pending */
};
struct p4c_control {
    int on;      /* Python: the channel is served */
    int wake_fd; /* Python: a pipe's write end; a byte asks the channel for a stop */
    int nbreaks; /* Python: breakpoints in use (0: vCPUs check nothing) */
    int holding; /* vCPUs holding at a block entry until QEMU stops them */
    struct p4c_break brk[P4_BREAKS];
    struct p4c_stop stop;
};

struct p4c_out *p4c_out(unsigned vi);        /* vCPU vi's fold output */
const uint8_t *p4c_kinds(uint32_t *n);       /* the clock kinds' fields, *n of them */
struct p4c_mirror *p4c_mirror(unsigned vi);  /* vCPU vi's register mirror */
struct p4c_trace *p4c_trace(unsigned vi);    /* vCPU vi's trace records */
void p4c_prog_commit(unsigned vi, int slot); /* progs[slot] filled in: hash it */
struct p4c_control *p4c_control(void);       /* the control channel's C half */
int p4c_control_enter(int vm_stopped);       /* lock; 1: every vCPU parked or the VM stopped
                                        * (state may be used), else 0 (unlocked) */
void p4c_control_leave(void);                /* unlock */
int p4c_control_fold(unsigned vi);           /* (entered) fold vCPU vi's activity up to its stop;
                                     * 0: vi has not started (nothing to fold) */
void p4c_control_changed(unsigned vi);       /* (entered) vi steps at its next block entry */
int p4c_control_lvt(unsigned vi, uint32_t *lvt); /* the LVT entry read at vi's last stop */
void p4c_control_stopped(void);                  /* QMP reported the VM stopped: the holds end */
/* END PYTHON API */

#endif
