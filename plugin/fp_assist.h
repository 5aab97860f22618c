/*
 * fp_assist.h: what fp_assist.c offers to the other units. fp_assist.c: the input assists
 * (emulator/fp_assist.py; docs/events.md, "Assists"): whether an execution of an SSE or x87
 * instruction with floating-point inputs requests an assist (classify.c says which
 * instructions those are).
 */
#ifndef P4PMU_FP_ASSIST_H
#define P4PMU_FP_ASSIST_H

#include "counting_types.h"
#include "qemu_plugin_api.h"

struct sse_assist_state;

struct sse_assist_state *sse_assist_state_new(int max_vcpus);
/* translation, while the memory level's P4_MEM_FP part is on: the callbacks of block id's
 * n instructions with floating-point inputs or x87 single/double stores (insn_info.sse_in,
 * x87_mem, x87_store) */
void fp_assist_register(struct qemu_plugin_tb *tb, size_t n, uint32_t id);

#endif
