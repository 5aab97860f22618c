/*
 * mirror.h: what mirror.c offers to the other units. mirror.c: the C-side register mirror:
 * PMU accesses and deadlines of simple configurations served without Python
 * (docs/bridge.md, "The register mirror").
 */
#ifndef P4PMU_MIRROR_H
#define P4PMU_MIRROR_H

#include "bridge_types.h"
#include "registers.h"


int mirror_setup(int max_vcpus);
int mirror_deadline(unsigned vi);
int pmu_rdmsr(unsigned vi, uint32_t msr, uint64_t *out);
int pmu_wrmsr(unsigned vi, uint32_t msr, uint64_t value);
int pmu_rdpmc(unsigned vi, uint32_t ecx, uint64_t *out);

#endif
