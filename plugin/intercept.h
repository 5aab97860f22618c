/*
 * intercept.h: what intercept.c offers to the other units. intercept.c: interception of
 * RDMSR, WRMSR and RDPMC: translation-time decoding, the execution callbacks, EDX:EAX
 * write-back, #GP delivery and the exception callback (docs/bridge.md).
 */
#ifndef P4PMU_INTERCEPT_H
#define P4PMU_INTERCEPT_H

#include <pthread.h>

#include "bridge_types.h"
#include "registers.h"


#define HOOK_SLOTS 8192

/* the interception's state (state.h p4.intercept) */
struct intercept_state {
    /* per vCPU: how many records (struct rec) are pending; the entry hook's condition */
    struct {
        struct qemu_plugin_scoreboard *scoreboard; /* one uint64_t per vCPU */
        p4_plugin_u64 entry;
    } pending;
    /* block addresses that get the entry hook */
    struct {
        uint64_t key[HOOK_SLOTS]; /* stored as address + 1; 0 = empty */
        int count;
        pthread_mutex_t lock;
    } hooks;
    uint64_t patch_linear; /* address being patched, or 0; ignored by translate() */
};

struct intercept_state *intercept_state_new(void);
void intercept_setup(void);
void set_npending(unsigned int vi, struct vcpu *v);
void on_exception(unsigned int vi, enum p4_discon_type type, uint64_t from, uint64_t to, void *ud);
void translate(struct qemu_plugin_tb *tb, void *ud);

#endif
