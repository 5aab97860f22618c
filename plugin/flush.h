/*
 * flush.h: what flush.c offers to the other units. flush.c: translation-cache flushes
 * (qemu_plugin_reset): starting to count (count=auto), installing an exact-deadline
 * signature, switching the outcome-free ("lite") level (docs/guest-events.md, "The
 * outcome-free level").
 */
#ifndef P4PMU_FLUSH_H
#define P4PMU_FLUSH_H

#include "counting_types.h"


void lite_update(void);
/* After a step or a switch of programming: install the memory level at once when a counter
 * that may count reads a memory-side event, remove it after MEM_STREAK steps in a row that do
 * not want it (at most MEM_MAX_REMOVALS times per run: then it stays) */
void mem_update(void);
void flush_for_stale_block(void);
void exact_request(const struct p4c_out *o, int slot);
void counting_start(void);

#endif
