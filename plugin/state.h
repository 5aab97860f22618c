/*
 * state.h: the plugin's root object.  state.c defines it; install.c fills it at installation
 * (every part allocated before Python starts) and every unit reaches the process-wide state
 * through it: the options, the vCPU count, the guest-register handles and each unit's own
 * state struct, declared in that unit's header (docs/plugin.md, "The root object").
 */
#ifndef P4PMU_STATE_H
#define P4PMU_STATE_H

#include "options.h"
#include "registers.h"

struct blk;                  /* counting_types.h */
struct block_table;          /* blocks.h */
struct cond_table_set;       /* predictor.h */
struct control_state;        /* control.h */
struct counting_run;         /* counting.h */
struct direction_state;      /* counting_types.h, directions.c */
struct exact_deadline_state; /* counting_types.h, flush.c */
struct insn_table;           /* classify.h */
struct intercept_state;      /* intercept.h */
struct kind_table;           /* kinds.h */
struct lite_level_state;     /* counting_types.h, flush.c */
struct memory_level_state;   /* memory.h */
struct p4c_mirror;           /* p4c_api.h, mirror.c */
struct sse_assist_state;     /* fp_assist.h */
struct trace_run;            /* trace.h */
struct vcpu_counting;        /* counting.h */

/* The calls a unit makes to a unit above it (docs/plugin.md, "Layers"), through pointers
 * install.c sets (connect_upcalls) */
struct p4pmu_upcalls {
    void (*register_callbacks)(void);            /* flush.c -> install.c, after every flush */
    void (*groups_after_flush)(void);            /* flush.c -> directions.c, at every flush */
    void (*exact_drop)(struct vcpu_counting *c); /* flush.c -> deadline.c, at a new signature */
    /* resolve.c -> cuts.c: block id was abandoned before its instruction j (cb_xcheck) */
    void (*cut_abandoned)(unsigned vi, struct vcpu_counting *c, uint32_t id, unsigned j);
    /* resolve.c -> directions.c: a look at the directions is due (cb_xcheck), a stale
     * block ran (stale_entry) */
    void (*directions_update)(unsigned vi, struct vcpu_counting *c, const struct blk *cur,
                              uint32_t prev);
    void (*directions_stale_ran)(uint32_t id);
};

struct p4pmu_state {
    struct p4pmu_upcalls up;           /* calls up the layers */
    struct p4_options options;         /* parsed once at installation (options.c) */
    int debug;                         /* P4PMU_DEBUG=1 in the environment: the DBG trace */
    int n_vcpus_max;                   /* QEMU's max_vcpus: the size of every per-vCPU array */
    struct x86_registers regs;         /* the guest-register handles (install.c, first vCPU init) */
    struct vcpu *vcpus;                /* the bridge's per-vCPU state (registers.c) */
    struct p4c_mirror *mirrors;        /* the register files (mirror.c) */
    struct trace_run *trace;           /* the access trace's C half (trace.c) */
    struct control_state *control;     /* the control channel's C half (control.c) */
    uint64_t *access_hist;             /* the access-time histogram (access_times.c) */
    struct intercept_state *intercept; /* entry hooks and pending records (intercept.c) */
    /* event counting */
    struct counting_run *run;    /* options in effect, scoreboard, per-vCPU state (counting.c) */
    struct insn_table *capstone; /* Capstone instruction id -> clock-model row (classify.c) */
    struct kind_table *kinds;    /* clock kinds (kinds.c) */
    struct block_table *blocks;  /* translated blocks and predictor groups (blocks.c) */
    struct cond_table_set *cond_tab;     /* the predictor's tables (predictor.c) */
    struct memory_level_state *memlvl;   /* the memory level (memory.c, flush.c) */
    struct exact_deadline_state *exact;  /* exact deadlines (flush.c, deadline.c) */
    struct lite_level_state *lite;       /* the outcome-free level (flush.c) */
    struct direction_state *directions;  /* changes of silent direction (directions.c) */
    struct sse_assist_state *sse_assist; /* SSE input assists (fp_assist.c) */
};

/* The one root object.  Global because QEMU calls most of the plugin's callbacks (vCPU init,
 * translation, idle, resume, exit, discontinuities) and Python calls its p4c_* functions
 * with no pointer of the plugin's own. */
extern struct p4pmu_state p4;

#endif
