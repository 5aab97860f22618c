/*
 * counting.h: what counting.c offers to the other units. counting.c: the run state of event
 * counting and its set-up: options in effect, the scoreboard, per-vCPU counting state and
 * fold outputs; what Python calls to read the fold output and the clock kinds (docs/guest-
 * events.md).
 */
#ifndef P4PMU_COUNTING_H
#define P4PMU_COUNTING_H

#include "counting_types.h"

extern int cnt_mode;
extern int cnt_instrument;
extern int cnt_start_requested;
extern int pmi_on;
extern int cnt_threads;
extern qemu_plugin_id_t plugin_id;
extern struct qemu_plugin_scoreboard *sb_cnt;
extern pthread_mutex_t cnt_lock;
extern struct cvcpu *cv;
extern uint64_t *core_clk;
extern FILE *br_trace;
extern struct p4c_out *outs;

int counting_setup(qemu_plugin_id_t id, int argc, char **argv, int max_vcpus);
void counting_vcpu_init(unsigned vi);
void counting_report(void);

static inline uint64_t *sbv(unsigned vi)
{
    return (uint64_t *)qemu_plugin_scoreboard_find(sb_cnt, vi);
}

#endif
