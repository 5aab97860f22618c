/* rt [-c CPU] COMMAND [ARG]...: run COMMAND under SCHED_FIFO priority 99, optionally pinned
 * to one CPU (busybox has no chrt).
 *
 * Why: Linux 6.1's P4 driver reprograms a counter wrongly every time the measured task is
 * switched back in (p4_pmu_set_period, docs/linux-guest.md), so exact counts need a task that
 * is never preempted.  A SCHED_FIFO 99 task is not preempted by ordinary tasks; with
 * kernel.sched_rt_runtime_us = -1 it is not throttled either.  Children (perf's workload)
 * inherit the policy and the affinity.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int i = 1;
    if (i + 1 < argc && strcmp(argv[i], "-c") == 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(atoi(argv[i + 1]), &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) {
            fprintf(stderr, "rt: sched_setaffinity(%s): %s\n", argv[i + 1], strerror(errno));
            return 126;
        }
        i += 2;
    }
    if (i >= argc) {
        fprintf(stderr, "usage: rt [-c CPU] COMMAND [ARG]...\n");
        return 2;
    }
    struct sched_param sp = { .sched_priority = 99 };
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
        fprintf(stderr, "rt: sched_setscheduler(SCHED_FIFO, 99): %s\n", strerror(errno));
        return 126;
    }
    execvp(argv[i], argv + i);
    fprintf(stderr, "rt: %s: %s\n", argv[i], strerror(errno));
    return 127;
}
