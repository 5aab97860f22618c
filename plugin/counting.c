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
#include <strings.h>

#include "counting.h"
#include "batch.h"
#include "blocks.h"
#include "classify.h"
#include "deadline.h"
#include "flush.h"
#include "kinds.h"
#include "predictor.h"
#include "registers.h"

int cnt_mode = 1;        /* option count=: 0 off, 1 auto, 2 on */

int cnt_instrument;      /* translate() instruments blocks */

int cnt_start_requested; /* a reset (flush) to start instrumenting is under way */

int pmi_on = 1;          /* option pmi= */

static unsigned bp_penalty = P4P_BP_PENALTY;

int cnt_threads = 1;

qemu_plugin_id_t plugin_id;

struct qemu_plugin_scoreboard *sb_cnt;

pthread_mutex_t cnt_lock = PTHREAD_MUTEX_INITIALIZER;

struct cvcpu *cv;

/* threads=2: per core, the latest clock of its timeline (the larger LP local clock) */
uint64_t *core_clk;

FILE *br_trace; /* P4PMU_BRANCH_TRACE=PATH: every resolved branch (debugging) */

struct p4c_out *outs;

/* a boolean option's "off" spellings (bridge.py _bool validated the value already) */
static int opt_off(const char *v)
{
    return !strcasecmp(v, "off") || !strcasecmp(v, "no") || !strcasecmp(v, "false") ||
           !strcmp(v, "0");
}

int counting_setup(qemu_plugin_id_t id, int argc, char **argv, int max_vcpus)
{
    plugin_id = id;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "count=", 6)) {
            cnt_mode = !strcmp(a + 6, "off") ? 0 : !strcmp(a + 6, "on") ? 2 : 1;
        } else if (!strncmp(a, "pmi=", 4)) {
            pmi_on = !opt_off(a + 4);
        } else if (!strncmp(a, "bp_penalty=", 11)) {
            bp_penalty = (unsigned)strtoul(a + 11, NULL, 0);
            if (bp_penalty > 60) bp_penalty = 60;
        } else if (!strncmp(a, "exact=", 6)) {
            w2_mode = !opt_off(a + 6);
        } else if (!strncmp(a, "lite=", 5)) {
            lite_mode = !opt_off(a + 5);
        } else if (!strncmp(a, "threads=", 8)) {
            cnt_threads = atoi(a + 8) == 2 ? 2 : 1;
        }
    }
    if (cs_setup() < 0) return -1;
    if (getenv("P4PMU_BRANCH_TRACE")) br_trace = fopen(getenv("P4PMU_BRANCH_TRACE"), "w");
    ct.trace = br_trace != NULL;
    cv = aligned_alloc(64, (size_t)max_vcpus * sizeof(*cv));
    core_clk = calloc((size_t)max_vcpus / 2 + 1, sizeof(*core_clk));
    memset(cv, 0, (size_t)max_vcpus * sizeof(*cv));
    outs = calloc((size_t)max_vcpus, sizeof(*outs));
    for (int i = 0; outs && i < max_vcpus; i++) outs[i].tmask = (1u << P4_NCOUNTERS) - 1;
    pensums = calloc((size_t)max_vcpus, sizeof(*pensums));
    sb_cnt = qemu_plugin_scoreboard_new(sizeof(uint64_t) * SB_WORDS);
    cond_tables();
    uint8_t f[KF_N];
    memset(f, 0, sizeof(f));
    k_bubble = kind_intern(f); /* the bubble and an empty stall clock are the same kind */
    k_empty = k_bubble;
    unsigned b = P4P_BOGUS_INSNS;
    n_penalty = bp_penalty;
    for (unsigned p = 0; p < n_penalty; p++) {
        memset(f, 0, sizeof(f));
        unsigned x = b < P4P_RETIRE_WIDTH ? b : P4P_RETIRE_WIDTH;
        f[KF_BOGUS_INSTR] = (uint8_t)x;
        f[KF_BOGUS_UOPS] = (uint8_t)x;
        b -= x;
        k_penalty[p] = kind_intern(f);
    }
    ct.pen = (uint8_t)n_penalty;
    memset(f, 0, sizeof(f));
    f[KF_UOPS] = P4P_RETIRE_WIDTH;
    k_rep_full = kind_intern(f);
    cnt_instrument = cnt_mode == 2;
    return 0;
}

void counting_vcpu_init(unsigned vi)
{
    cvcpu_init(&cv[vi]);
    cv[vi].thread = pthread_self();
    for (int i = 0; i < n_vcpus_max; i++) {
        if (cv[i].init) cv[i].sbase = sbv((unsigned)i);
    }
    /* Single-threaded TCG with several vCPUs: QEMU 11.1 compiles the translating vCPU's
     * index into the plugin code of a block (gen_cpu_index() without CF_PARALLEL) and
     * multiplies that constant in place, so per-vCPU scoreboards and callbacks get wrong
     * vCPU indices (seen: callbacks called with vCPU index = scoreboard element size).
     * Counting cannot work there: turn it off and say so. */
    for (unsigned o = 0; o < vi && cnt_mode; o++) {
        if (cv[o].init && pthread_equal(cv[o].thread, cv[vi].thread)) {
            fprintf(stderr, "p4pmu: several vCPUs on one TCG thread (-accel tcg,thread=single): "
                            "event counting is off (QEMU 11.1 plugins need multi-threaded TCG "
                            "for per-vCPU counters); MSR/RDPMC access still works\n");
            cnt_mode = 0;
            cnt_instrument = 0;
        }
    }
}

/* At exit: the bookkeeping errors of the run, if any (tests fail on this line). */
void counting_report(void)
{
    if (!cv) return;
    for (int i = 0; i < n_vcpus_max; i++) {
        const struct cvcpu *c = &cv[i];
        if (!c->init || (!c->bad_folds && !c->silent_bad)) continue;
        fprintf(stderr, "p4pmu: warning: counting bookkeeping errors on vCPU %d: %llu of %llu "
                "batches repaired, %llu silent-outcome underflows (a plugin bug: counts may be "
                "off)\n", i, (unsigned long long)c->bad_folds, (unsigned long long)c->folds,
                (unsigned long long)c->silent_bad);
    }
}

struct p4c_out *p4c_out(unsigned vi)
{
    return &outs[vi];
}

const uint8_t *p4c_kinds(uint32_t *n)
{
    *n = __atomic_load_n(&n_kinds, __ATOMIC_ACQUIRE);
    return &kinds[0][0];
}



