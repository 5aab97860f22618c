/*
 * counting.h: what counting.c offers to the other units. counting.c: the run state of event
 * counting and its set-up: options in effect, the scoreboard, per-vCPU counting state and
 * fold outputs; what Python calls to read the fold output and the clock kinds
 * (docs/guest-events.md).
 */
#ifndef P4PMU_COUNTING_H
#define P4PMU_COUNTING_H

#include "counting_types.h"
#include "batch.h"
#include "cuts.h"
#include "deadline.h"
#include "directions.h"
#include "fold.h"
#include "install.h"
#include "memory.h"
#include "predictor.h"
#include "resolve.h"
#include "siblings.h"
#include "state.h"

/* A vCPU's counting state: what every counting unit reads (its scoreboard element, CPL,
 * set-up), then each unit's part, declared in its header.  The first cache line holds what
 * an explicit resolution touches first. */
struct vcpu_counting {
    uint64_t *sbase;     /* this vCPU's scoreboard element (refreshed at every vCPU init) */
    volatile int cpl_os; /* CPL 0 (seen by the sibling: its clocks' label) */
    int init;
    struct directions_vcpu dir;
    struct resolve_vcpu res;
    struct exact_vcpu exact;
    struct predictor_vcpu pred;
    struct batch_vcpu batch;
    struct fold_vcpu fold;
    struct deadline_vcpu deadline;
    struct sibling_vcpu ht;
    struct cuts_vcpu cut;
    struct memory_vcpu mem;
    pthread_t thread; /* the host thread running this vCPU */
} __attribute__((aligned(64)));

static inline int lp_halted(const struct vcpu_counting *c)
{
    return c->ht.halted || c->ht.hlt_halted;
}

/* a silent-capable block's bank word */
static inline uint64_t *bank_w(struct vcpu_counting *c, const struct blk *b)
{
    return &c->sbase[SB_BANK0 + b->gate - 1];
}

/* Is the outcome of the last execution of the current block still to come?  (Callers at a
 * block entry settle the previous block first: entry_settle.) */
static inline int cur_pending(struct vcpu_counting *c, uint32_t id)
{
    return id && c->sbase[SB_CURRENT_BLOCK] == id && c->sbase[SB_SILENT_NEXT] != X_ACCOUNTED;
}

/* The counting state of the run, shared by the counting units: the options in effect, the
 * scoreboard and the per-vCPU state.  One per QEMU process (install.c refuses a second copy
 * of the plugin). */
struct counting_run {
    int count_mode;          /* option count=: 0 off, 1 auto, 2 on (off also when per-vCPU
                               * counting cannot work: counting_vcpu_init) */
    int instrument;          /* translate() instruments blocks */
    int start_requested;     /* a reset (flush) to start instrumenting is under way */
    int pmi_on;              /* option pmi= */
    int threads;             /* option threads=: logical processors per core, 1 or 2 */
    int exact_on;            /* option exact=: exact deadlines may be installed (flush.c) */
    int lite_on;             /* option lite=: the outcome-free level may be installed */
    uint64_t dir_first_look; /* option directions=: 2^N resolutions, 0 = static directions */
    int dir_rewrite;         /* option dir_rewrite= (directions.c) */
    int mm_model;            /* the CPU model's row of p4_mm_geometry (memory.c) */
    int memory_timing;       /* option timing=memory: loads' misses and page walks cost
                               * clocks (memory.c, docs/timing.md) */
    unsigned
        queue_update; /* the bus queues' counts update every so many clocks (timing.CoreTiming) */
    unsigned stall_l2, stall_mem, stall_walk; /* those clocks: an L1 miss that hits L2, an L2
                                               * miss, a DTLB walk (timing.CoreTiming) */
    qemu_plugin_id_t plugin_id;
    struct qemu_plugin_scoreboard *scoreboard; /* per vCPU: SB_WORDS words (counting_types.h) */
    pthread_mutex_t lock;                      /* appends to the kind and block tables */
    struct vcpu_counting *per_vcpu;            /* [max_vcpus] */
    uint64_t *core_clock;          /* threads=2: per core, the latest clock of its timeline (the
                               * larger LP local clock) */
    FILE *branch_trace;            /* P4PMU_BRANCH_TRACE=PATH: every resolved branch (debugging) */
    struct p4c_out *fold_out;      /* [max_vcpus]: what Python reads (p4c_api.h) */
    struct pensum *penalty_sums;   /* [max_vcpus] (deadline.c) */
    struct dirty_sums *dirty_sums; /* [max_vcpus] (deadline.c) */
    /* one translation-cache flush at a time (qemu_plugin_reset drops a second request while
     * one is under way): it installs what is wanted when it runs (flush.c) */
    volatile int flush_pending;
    int sibling_wait_warned; /* a sibling did not fold in time for an access: said once
                               * (siblings.c sibling_sync) */
};


struct counting_run *counting_run_new(void);
int counting_setup(qemu_plugin_id_t id, const struct p4_options *opt, int max_vcpus);
void counting_vcpu_init(unsigned vi);
void counting_report(void);

/* vCPU vi's counting state once its vCPU init has run, else NULL (a sibling not started yet) */
static inline struct vcpu_counting *vcpu_started(unsigned vi)
{
    if ((int)vi >= p4.n_vcpus_max || !p4.run->per_vcpu[vi].init) return NULL;
    return &p4.run->per_vcpu[vi];
}

/* single-threaded TCG (round robin): both siblings run on this thread, so the sibling is
 * between two of its blocks now and its state may be touched from here */
static inline int lp_same_thread(unsigned sib)
{
    return pthread_equal(p4.run->per_vcpu[sib].thread, pthread_self());
}

static inline uint64_t *scoreboard_of(unsigned vi)
{
    return (uint64_t *)qemu_plugin_scoreboard_find(p4.run->scoreboard, vi);
}

#endif
