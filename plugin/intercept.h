/*
 * intercept.h: what intercept.c offers to the other units. intercept.c: interception of
 * RDMSR, WRMSR and RDPMC: translation-time decoding, the execution callbacks, EDX:EAX
 * write-back, #GP delivery and the exception callback (docs/bridge.md).
 */
#ifndef P4PMU_INTERCEPT_H
#define P4PMU_INTERCEPT_H

#include "bridge_types.h"
#include "registers.h"


void intercept_setup(void);
void set_npending(unsigned int vi, struct vcpu *v);
void on_exception(unsigned int vi, enum p4_discon_type type, uint64_t from, uint64_t to,
                  void *ud);
void translate(struct qemu_plugin_tb *tb, void *ud);

#endif
