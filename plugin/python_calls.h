/*
 * python_calls.h: what python_calls.c offers to the other units. python_calls.c: calls into
 * the Python half (cffi embedding API) from vCPU threads, with a Python thread state kept
 * per thread (docs/bridge.md).
 */
#ifndef P4PMU_PYTHON_CALLS_H
#define P4PMU_PYTHON_CALLS_H

#include "bridge_types.h"
#include "registers.h"

int py_deadline(unsigned vi);
void py_thread_ready(void);
int py_rdmsr(unsigned vi, uint32_t msr, uint64_t *out);
int py_wrmsr(unsigned vi, uint32_t msr, uint64_t value);
int py_rdpmc(unsigned vi, uint32_t ecx, uint64_t *out);
int py_misc_enable(unsigned vi, uint64_t q, uint64_t *out);
void py_note(unsigned vi, const char *msg);

#endif
