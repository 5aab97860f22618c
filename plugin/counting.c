/*
 * p4pmu: the run state of event counting and its set-up: options in effect, the scoreboard,
 * per-vCPU counting state and fold outputs; what Python calls to read the fold output and
 * the clock kinds (docs/guest-events.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "messages.h"
#include "counting.h"
#include "batch.h"
#include "blocks.h"
#include "classify.h"
#include "deadline.h"
#include "flush.h"
#include "install.h"
#include "kinds.h"
#include "predictor.h"
#include "registers.h"
#include "state.h"

/* The counting run with its defaults (counting_setup applies the options) */
struct counting_run *counting_run_new(void)
{
    struct counting_run *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->count_mode = 1;
    r->pmi_on = 1;
    r->threads = 1;
    r->exact_on = 1;
    r->lite_on = 1;
    pthread_mutex_init(&r->lock, NULL);
    return r;
}

int counting_setup(qemu_plugin_id_t id, const struct p4_options *opt, int max_vcpus)
{
    p4.run->plugin_id = id;
    p4.run->count_mode = opt->count == P4_OPT_COUNT_OFF ? 0 : opt->count == P4_OPT_COUNT_ON ? 2 : 1;
    if (opt->trace && p4.run->count_mode == 1) p4.run->count_mode = 2; /* a time for every record */
    if (opt->control && p4.run->count_mode == 1)
        p4.run->count_mode = 2; /* stops at block entries */
    p4.run->pmi_on = opt->pmi;
    p4.run->exact_on = opt->exact;
    p4.run->lite_on = opt->lite;
    p4.run->dir_first_look = opt->directions ? 1ull << opt->directions : 0;
    p4.run->dir_rewrite = opt->dir_rewrite;
    p4.run->threads = opt->threads;
    /* (the model option's values are in the order of p4_mm_geometry's rows) */
    p4.run->mm_model = opt->model >= 0 && opt->model < (int)(sizeof(p4_mm_geometry) /
                                                             sizeof(p4_mm_geometry[0]))
                           ? opt->model
                           : P4_MM_DEFAULT_MODEL;
    if (cs_setup(p4_model_core[p4.run->mm_model]) < 0) return -1;
    const unsigned short *ct = p4_core_timing[p4_model_core[p4.run->mm_model]];
    p4.run->memory_timing = opt->timing == P4_OPT_TIMING_MEMORY;
    p4.run->stall_l2 = (unsigned)(ct[2] - ct[1]);
    p4.run->stall_mem = (unsigned)(ct[3] - ct[1]);
    p4.run->stall_walk = ct[4];
    p4.run->queue_update = ct[6] ? ct[6] : 1;
    if (getenv("P4PMU_BRANCH_TRACE"))
        p4.run->branch_trace = fopen(getenv("P4PMU_BRANCH_TRACE"), "w");
    p4.cond_tab->trace = p4.run->branch_trace != NULL;
    p4.run->per_vcpu = aligned_alloc(64, (size_t)max_vcpus * sizeof(*p4.run->per_vcpu));
    p4.run->core_clock = calloc((size_t)max_vcpus / 2 + 1, sizeof(*p4.run->core_clock));
    if (p4.run->per_vcpu)
        memset(p4.run->per_vcpu, 0, (size_t)max_vcpus * sizeof(*p4.run->per_vcpu));
    p4.run->fold_out = calloc((size_t)max_vcpus, sizeof(*p4.run->fold_out));
    for (int i = 0; p4.run->fold_out && i < max_vcpus; i++) {
        p4.run->fold_out[i].tmask = (1u << P4_NCOUNTERS) - 1;
    }
    p4.run->penalty_sums = calloc((size_t)max_vcpus, sizeof(*p4.run->penalty_sums));
    p4.run->dirty_sums = calloc((size_t)max_vcpus, sizeof(*p4.run->dirty_sums));
    if (!p4.run->per_vcpu || !p4.run->fold_out || !p4.run->penalty_sums || !p4.run->dirty_sums) {
        p4_message("p4pmu: out of memory for %d vCPUs' counting state\n", max_vcpus);
        return -1;
    }
    p4.run->scoreboard = qemu_plugin_scoreboard_new(sizeof(uint64_t) * SB_WORDS);
    uint8_t f[KF_N];
    memset(f, 0, sizeof(f));
    p4.kinds->bubble = kind_intern(f); /* the bubble and an empty stall clock are the same kind */
    p4.kinds->empty = p4.kinds->bubble;
    f[KF_RD_ACTIVE] = 1;
    p4.kinds->active = kind_intern(f);
    unsigned b = P4P_BOGUS_INSNS;
    /* the misprediction penalty of the model's core (timing.CoreTiming), or the option's */
    p4.kinds->n_penalty = opt->bp_penalty >= 0 ? (unsigned)opt->bp_penalty : ct[0];
    for (unsigned p = 0; p < p4.kinds->n_penalty; p++) {
        memset(f, 0, sizeof(f));
        unsigned x = b < P4P_RETIRE_WIDTH ? b : P4P_RETIRE_WIDTH;
        f[KF_BOGUS_INSTR] = (uint8_t)x;
        f[KF_BOGUS_UOPS] = (uint8_t)x;
        b -= x;
        p4.kinds->penalty[p] = kind_intern(f);
    }
    p4.cond_tab->pen = (uint8_t)p4.kinds->n_penalty;
    memset(f, 0, sizeof(f));
    f[KF_UOPS] = P4P_RETIRE_WIDTH;
    f[KF_MS_UOPS] = P4P_RETIRE_WIDTH; /* REP iterations come from the microcode ROM */
    p4.kinds->rep_full = kind_intern(f);
    p4.run->instrument = p4.run->count_mode == 2;
    return 0;
}

void counting_vcpu_init(unsigned vi)
{
    struct vcpu_counting *c = &p4.run->per_vcpu[vi];
    vcpu_counting_init(c);
    c->thread = pthread_self();
    for (int i = 0; i < p4.n_vcpus_max; i++) {
        if (p4.run->per_vcpu[i].init) p4.run->per_vcpu[i].sbase = scoreboard_of((unsigned)i);
    }
    /* Single-threaded TCG with several vCPUs: QEMU 11.1 compiles the translating vCPU's
     * index into the plugin code of a block (gen_cpu_index() without CF_PARALLEL) and
     * multiplies that constant in place, so per-vCPU scoreboards and callbacks get wrong
     * vCPU indices (seen: callbacks called with vCPU index = scoreboard element size).
     * Counting cannot work there: turn it off and say so. */
    for (unsigned o = 0; o < vi && p4.run->count_mode; o++) {
        const struct vcpu_counting *other = &p4.run->per_vcpu[o];
        if (other->init && pthread_equal(other->thread, c->thread)) {
            p4_message(
                "p4pmu: warning: several vCPUs on one TCG thread (-accel tcg,thread=single): "
                "event counting is off (QEMU 11.1 plugins need multi-threaded TCG "
                "for per-vCPU counters); MSR/RDPMC access still works\n");
            p4.run->count_mode = 0;
            p4.run->instrument = 0;
        }
    }
}

/* At exit: the bookkeeping errors of the run, if any (tests fail on this line). */
void counting_report(void)
{
    if (!p4.run->per_vcpu) return;
    for (int i = 0; i < p4.n_vcpus_max; i++) {
        const struct vcpu_counting *c = &p4.run->per_vcpu[i];
        if (!c->init || (!c->fold.bad_folds && !c->res.silent_bad)) continue;
        p4_message("p4pmu: warning: counting bookkeeping errors on vCPU %d: %llu of %llu "
                   "batches repaired, %llu silent-outcome underflows (a plugin bug: counts may be "
                   "off)\n",
                   i, (unsigned long long)c->fold.bad_folds, (unsigned long long)c->fold.folds,
                   (unsigned long long)c->res.silent_bad);
    }
}

struct p4c_out *p4c_out(unsigned vi)
{
    return &p4.run->fold_out[vi];
}

const uint8_t *p4c_kinds(uint32_t *n)
{
    *n = __atomic_load_n(&p4.kinds->n, __ATOMIC_ACQUIRE);
    return &p4.kinds->fields[0][0];
}
