/*
 * p4pmu bridge: the functions the C plugin calls in Python.
 *
 * They are declared to cffi with ffi.embedding_api() (plugin/build.py reads this block between
 * the BEGIN/END markers, so there is one list) and defined by cffi in the generated C file;
 * the Python side is in plugin/build.py (BOOTSTRAP), plugin/entry_points.py and plugin/bridge.py.
 *
 * Return values: cffi returns 0 from an embedded function when the Python code raised (the
 * exception is reported by bridge.py's error handler) or when Python could not start, so 0
 * always means "not handled: let QEMU do what it does".
 *   P4_PY_OK    (1): served; *out holds the value for reads
 *   P4_PY_FAULT (2): the PMU model says #GP(0) (the reason was logged)
 */
#ifndef P4PMU_PLUGIN_H
#define P4PMU_PLUGIN_H

#include <stdint.h>

#define P4_PY_NOT_HANDLED 0
#define P4_PY_OK 1
#define P4_PY_FAULT 2

/* BEGIN EMBEDDING API */
int p4pmu_py_init(int argc, char **argv, int smp_vcpus, int max_vcpus);
int p4pmu_py_rdmsr(unsigned int vcpu, uint32_t msr, uint64_t *out);
int p4pmu_py_wrmsr(unsigned int vcpu, uint32_t msr, uint64_t value);
int p4pmu_py_rdpmc(unsigned int vcpu, uint32_t ecx, uint64_t *out);
int p4pmu_py_misc_enable(unsigned int vcpu, uint64_t qemu_value, uint64_t *out);
int p4pmu_py_note(unsigned int vcpu, const char *message);
int p4pmu_py_counter_rewritten(unsigned int vcpu, uint32_t msr, uint64_t first, uint64_t second);
int p4pmu_py_deadline(unsigned int vcpu);
void p4pmu_py_exit(void);
/* END EMBEDDING API */

#endif
