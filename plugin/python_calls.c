/*
 * p4pmu: calls into the Python half (cffi embedding API) from vCPU threads, with a Python
 * thread state kept per thread (docs/bridge.md).
 */
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "python_calls.h"

int py_deadline(unsigned vi)
{
    py_thread_ready();
    return p4pmu_py_deadline(vi);
}
/*
 * cffi takes the GIL with PyGILState_Ensure/Release around every call.  On a thread Python
 * does not know (a vCPU thread), that creates and destroys a thread state each time, which
 * costs more than the PMU model itself.  Before the first call on a thread we take a thread
 * state once and keep it (releasing only the GIL), so later calls just switch the GIL.
 */
static __thread int tl_py_ready;

void py_thread_ready(void)
{
    if (!tl_py_ready) {
        tl_py_ready = 1;
        PyGILState_Ensure(); /* never released: keeps this thread's state alive */
        PyEval_SaveThread(); /* ...but not the GIL */
    }
}

int py_rdmsr(unsigned vi, uint32_t msr, uint64_t *out)
{
    py_thread_ready();
    return p4pmu_py_rdmsr(vi, msr, out);
}

int py_wrmsr(unsigned vi, uint32_t msr, uint64_t value)
{
    py_thread_ready();
    return p4pmu_py_wrmsr(vi, msr, value);
}

int py_rdpmc(unsigned vi, uint32_t ecx, uint64_t *out)
{
    py_thread_ready();
    return p4pmu_py_rdpmc(vi, ecx, out);
}

int py_misc_enable(unsigned vi, uint64_t q, uint64_t *out)
{
    py_thread_ready();
    return p4pmu_py_misc_enable(vi, q, out);
}

void py_note(unsigned vi, const char *msg)
{
    py_thread_ready();
    p4pmu_py_note(vi, msg);
}
