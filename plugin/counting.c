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

struct counting_run run = {.count_mode = 1, .pmi_on = 1, .threads = 1, .exact_on = 1,
                           .lite_on = 1, .lock = PTHREAD_MUTEX_INITIALIZER};

int counting_setup(qemu_plugin_id_t id, const struct p4_options *opt, int max_vcpus)
{
    run.plugin_id = id;
    run.count_mode = opt->count == P4_OPT_COUNT_OFF ? 0 : opt->count == P4_OPT_COUNT_ON ? 2 : 1;
    if (opt->trace && run.count_mode == 1) run.count_mode = 2; /* a time for every record */
    if (opt->control && run.count_mode == 1) run.count_mode = 2; /* stops at block entries */
    run.pmi_on = opt->pmi;
    run.exact_on = opt->exact;
    run.lite_on = opt->lite;
    run.dir_first_look = opt->directions ? 1ull << opt->directions : 0;
    run.dir_rewrite = opt->dir_rewrite;
    run.threads = opt->threads;
    /* (the model option's values are in the order of p4_mm_geometry's rows) */
    run.mm_model = opt->model >= 0 &&
                   opt->model < (int)(sizeof(p4_mm_geometry) / sizeof(p4_mm_geometry[0])) ?
                   opt->model : P4_MM_DEFAULT_MODEL;
    if (cs_setup(p4_model_core[run.mm_model]) < 0) return -1;
    const unsigned short *ct = p4_core_timing[p4_model_core[run.mm_model]];
    run.memory_timing = opt->timing == P4_OPT_TIMING_MEMORY;
    run.stall_l2 = (unsigned)(ct[2] - ct[1]);
    run.stall_mem = (unsigned)(ct[3] - ct[1]);
    run.stall_walk = ct[4];
    if (getenv("P4PMU_BRANCH_TRACE")) run.branch_trace = fopen(getenv("P4PMU_BRANCH_TRACE"), "w");
    cond_tab.trace = run.branch_trace != NULL;
    run.per_vcpu = aligned_alloc(64, (size_t)max_vcpus * sizeof(*run.per_vcpu));
    run.core_clock = calloc((size_t)max_vcpus / 2 + 1, sizeof(*run.core_clock));
    if (run.per_vcpu) memset(run.per_vcpu, 0, (size_t)max_vcpus * sizeof(*run.per_vcpu));
    run.fold_out = calloc((size_t)max_vcpus, sizeof(*run.fold_out));
    for (int i = 0; run.fold_out && i < max_vcpus; i++) {
        run.fold_out[i].tmask = (1u << P4_NCOUNTERS) - 1;
    }
    run.penalty_sums = calloc((size_t)max_vcpus, sizeof(*run.penalty_sums));
    run.dirty_sums = calloc((size_t)max_vcpus, sizeof(*run.dirty_sums));
    if (!run.per_vcpu || !run.fold_out || !run.penalty_sums || !run.dirty_sums) {
        p4_message("p4pmu: out of memory for %d vCPUs' counting state\n", max_vcpus);
        return -1;
    }
    run.scoreboard = qemu_plugin_scoreboard_new(sizeof(uint64_t) * SB_WORDS);
    cond_tables_fill();
    uint8_t f[KF_N];
    memset(f, 0, sizeof(f));
    kinds.bubble = kind_intern(f); /* the bubble and an empty stall clock are the same kind */
    kinds.empty = kinds.bubble;
    unsigned b = P4P_BOGUS_INSNS;
    /* the misprediction penalty of the model's core (timing.CoreTiming), or the option's */
    kinds.n_penalty = opt->bp_penalty >= 0 ? (unsigned)opt->bp_penalty : ct[0];
    for (unsigned p = 0; p < kinds.n_penalty; p++) {
        memset(f, 0, sizeof(f));
        unsigned x = b < P4P_RETIRE_WIDTH ? b : P4P_RETIRE_WIDTH;
        f[KF_BOGUS_INSTR] = (uint8_t)x;
        f[KF_BOGUS_UOPS] = (uint8_t)x;
        b -= x;
        kinds.penalty[p] = kind_intern(f);
    }
    cond_tab.pen = (uint8_t)kinds.n_penalty;
    memset(f, 0, sizeof(f));
    f[KF_UOPS] = P4P_RETIRE_WIDTH;
    f[KF_MS_UOPS] = P4P_RETIRE_WIDTH; /* REP iterations come from the microcode ROM */
    kinds.rep_full = kind_intern(f);
    run.instrument = run.count_mode == 2;
    return 0;
}

void counting_vcpu_init(unsigned vi)
{
    vcpu_counting_init(&run.per_vcpu[vi]);
    run.per_vcpu[vi].thread = pthread_self();
    for (int i = 0; i < n_vcpus_max; i++) {
        if (run.per_vcpu[i].init) run.per_vcpu[i].sbase = scoreboard_of((unsigned)i);
    }
    /* Single-threaded TCG with several vCPUs: QEMU 11.1 compiles the translating vCPU's
     * index into the plugin code of a block (gen_cpu_index() without CF_PARALLEL) and
     * multiplies that constant in place, so per-vCPU scoreboards and callbacks get wrong
     * vCPU indices (seen: callbacks called with vCPU index = scoreboard element size).
     * Counting cannot work there: turn it off and say so. */
    for (unsigned o = 0; o < vi && run.count_mode; o++) {
        const struct vcpu_counting *other = &run.per_vcpu[o];
        if (other->init && pthread_equal(other->thread, run.per_vcpu[vi].thread)) {
            p4_message("p4pmu: several vCPUs on one TCG thread (-accel tcg,thread=single): "
                            "event counting is off (QEMU 11.1 plugins need multi-threaded TCG "
                            "for per-vCPU counters); MSR/RDPMC access still works\n");
            run.count_mode = 0;
            run.instrument = 0;
        }
    }
}

/* At exit: the bookkeeping errors of the run, if any (tests fail on this line). */
void counting_report(void)
{
    if (!run.per_vcpu) return;
    for (int i = 0; i < n_vcpus_max; i++) {
        const struct vcpu_counting *c = &run.per_vcpu[i];
        if (!c->init || (!c->bad_folds && !c->silent_bad)) continue;
        p4_message("p4pmu: warning: counting bookkeeping errors on vCPU %d: %llu of %llu "
                "batches repaired, %llu silent-outcome underflows (a plugin bug: counts may be "
                "off)\n", i, (unsigned long long)c->bad_folds, (unsigned long long)c->folds,
                (unsigned long long)c->silent_bad);
    }
}

struct p4c_out *p4c_out(unsigned vi)
{
    return &run.fold_out[vi];
}

const uint8_t *p4c_kinds(uint32_t *n)
{
    *n = __atomic_load_n(&kinds.n, __ATOMIC_ACQUIRE);
    return &kinds.fields[0][0];
}



