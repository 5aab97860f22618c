/*
 * classify.h: what classify.c offers to the other units. classify.c: classification of
 * decoded x86 instructions with Capstone 5 into the clock model's per-instruction fields
 * (insn_classes._classify_one and _build; table generated into p4_tables.h)
 * (docs/guest-events.md).
 */
#ifndef P4PMU_CLASSIFY_H
#define P4PMU_CLASSIFY_H

#include <capstone/capstone.h>

#include "counting_types.h"

/* the rows of core `core` (insn_classes.CORES index; CpuModel.core) */
int cs_setup(unsigned core);
cs_insn *cs_get(int mi, csh *hp);
void classify_insn(csh h, const cs_insn *ci, uint64_t addr, struct insn_info *o);
void classify_unknown(uint64_t addr, unsigned len, struct insn_info *o);

#endif
