/*
 * access_times.h: what access_times.c offers to the other units. access_times.c: the host
 * time each PMU access takes to serve (fold, mirror or Python, deadline and PMI), as a
 * histogram reported at exit with P4PMU_DEBUG=1 or P4PMU_ACCESS_TIMES=1
 * (docs/performance.md).
 */
#ifndef P4PMU_ACCESS_TIMES_H
#define P4PMU_ACCESS_TIMES_H

#include <stdint.h>

uint64_t *access_times_new(void);
uint64_t access_time_start(void);
void access_time_end(uint64_t start);
void access_times_report(void);

#endif
