/*
 * p4pmu: the host time each PMU access takes to serve -- from the fold before it to the
 * deadline and PMI decisions after it, whether the register mirror or Python served it --
 * kept as a histogram of 1-microsecond buckets (atomic counts, any vCPU thread) and reported
 * at exit with P4PMU_DEBUG=1 or P4PMU_ACCESS_TIMES=1 in the environment: count, median, 90th
 * percentile, largest bucket.  `p4pmu bench` reads the line to check the per-access target
 * (docs/performance.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "messages.h"
#include "access_times.h"
#include "state.h"

#define ACCESS_BUCKETS 4096 /* 1 us each; the last one holds everything from 4.095 ms on */

/* the histogram (state.h p4.access_hist) */
uint64_t *access_times_new(void)
{
    return calloc(ACCESS_BUCKETS, sizeof(uint64_t));
}

uint64_t access_time_start(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void access_time_end(uint64_t start)
{
    uint64_t us = (access_time_start() - start) / 1000;
    if (us >= ACCESS_BUCKETS) us = ACCESS_BUCKETS - 1;
    __atomic_fetch_add(&p4.access_hist[us], 1, __ATOMIC_RELAXED);
}

/* the bucket (us) at which `frac` of the n accesses are reached */
static unsigned access_quantile(uint64_t n, double frac)
{
    uint64_t want = (uint64_t)(frac * (double)n), seen = 0;
    for (unsigned b = 0; b < ACCESS_BUCKETS; b++) {
        seen += p4.access_hist[b];
        if (seen > want) return b;
    }
    return ACCESS_BUCKETS - 1;
}

void access_times_report(void)
{
    const char *want = getenv("P4PMU_ACCESS_TIMES");
    if (!p4.debug && !(want && strcmp(want, "0"))) return;
    uint64_t n = 0;
    unsigned top = 0;
    for (unsigned b = 0; b < ACCESS_BUCKETS; b++) {
        n += p4.access_hist[b];
        if (p4.access_hist[b]) top = b;
    }
    if (!n) return;
    p4_message("p4pmu-debug: access times: %llu PMU accesses, median < %u us, 90%% < %u "
               "us, largest < %u us%s\n",
               (unsigned long long)n, access_quantile(n, 0.5) + 1, access_quantile(n, 0.9) + 1,
               top + 1, top == ACCESS_BUCKETS - 1 ? " (or more)" : "");
}
