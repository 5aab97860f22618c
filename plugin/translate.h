/*
 * translate.h: what translate.c offers to the other units. translate.c: block
 * instrumentation at translation time: classification of a block's instructions and
 * registration of its counting operations and callbacks (docs/guest-events.md).
 */
#ifndef P4PMU_TRANSLATE_H
#define P4PMU_TRANSLATE_H

#include "counting_types.h"

struct batch_vcpu; /* batch.h */

uint32_t counting_translate(struct qemu_plugin_tb *tb, struct vcpu *v);
void counting_credit_wrmsr(struct batch_vcpu *bt, uint64_t addr, int os);

#endif
