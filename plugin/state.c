/*
 * p4pmu: the storage of the root object (state.h); install.c fills it.
 */
#include "state.h"

struct p4pmu_state p4;
