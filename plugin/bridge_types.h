/*
 * p4pmu: the types and constants of the bridge side -- MSR numbers and guest-state bits the
 * interception needs, the per-vCPU bridge state (struct vcpu) with its pending EDX:EAX
 * records, and the debug trace macro (docs/bridge.md).
 */
#ifndef P4PMU_BRIDGE_TYPES_H
#define P4PMU_BRIDGE_TYPES_H

#include <stdint.h>
#include <stdio.h>

#include "messages.h"
#include "qemu_plugin_api.h"
#include "p4pmu_plugin.h"
#include "p4c_api.h"

#define PMU_MSR_FIRST 0x300u
#define PMU_MSR_LAST 0x3FFu
#define PMU_COUNTER_FIRST 0x300u /* MSR_BPU_COUNTER0 .. MSR_IQ_COUNTER5 (SDM Vol. 3B 18.15.2) */
#define PMU_COUNTER_LAST 0x311u
#define MSR_MISC_ENABLE 0x1A0u
#define MSR_GP_REDIRECT 0x800u /* x2APIC range: #GP in QEMU while x2APIC is off */
#define CR0_PE (1ull << 0)
#define CR4_PCE (1ull << 8)
#define EFER_LMA (1ull << 10)
#define EFL_IOPL (3ull << 12)
#define EFL_VM (1ull << 17)
#define EFL_AC (1ull << 18)

/* flags QEMU keeps lazily (CC_*) or in env->df during execution; never written raw */
#define EFL_LAZY 0xCD5ull

enum kind { K_NONE = 0, K_WRMSR = 1, K_RDMSR = 2, K_RDPMC = 3 };

enum rec_kind { REC_RDMSR = 1, REC_RDMSR_MISC, REC_RDPMC_UD };

/* Work left for the entry hook of a later block. */
struct rec {
    int kind;
    uint64_t linear; /* RDMSR: linear address of the block to patch in; RDPMC: the RDPMC */
    uint64_t rsp;    /* stack pointer when the record was made */
    uint64_t value;  /* EDX:EAX for RDMSR */
    /* REC_RDPMC_UD: the state before QEMU delivered #UD */
    uint64_t eip, len, eflags, cs, ss, seg[4];
    int frame64, frame16, seg_saved;
    int fault;         /* RDPMC with #GP at CPL 0: restart it at a block start (fault_by_patch) */
    uint64_t rax, rdx; /* as they were before the exception callback wrote EDX:EAX */
    uint8_t stack[64];
    int stack_ok;
};

#define MAX_REC 8

enum redirect_kind { RD_NONE = 0, RD_RCX, RD_CR4, RD_PATCH };

struct vcpu {
    int ready;
    p4_GByteArray *buf;
    /* RDMSR result to write on the next instruction */
    int post; /* 0 none, 1 value, 2 misc_enable */
    uint64_t post_value;
    /* #GP on the way: what to put back in the exception callback */
    int redirect;
    uint64_t redirect_linear, orig_rcx, orig_cr4, patch_op;
    uint8_t orig_bytes[2];
    /* RDPMC known to fault, restarted at a block start by the entry hook */
    uint64_t refault_linear;
    /* RDPMC not at a block start, Python already asked; QEMU's #UD comes next */
    int ud_armed, ud_fault;
    uint64_t ud_linear, ud_value, ud_len;
    /* the last PMU access was a WRMSR of this counter MSR (0: it was not), with this value */
    uint32_t last_counter_write;
    uint64_t last_counter_value;
    int rewrite_reported;
    struct rec rec[MAX_REC];
    int nrec;
};

/* P4PMU_DEBUG=1 in the environment: trace the plugin's decisions (install.c), printed like
 * every message (messages.c) */
#define DBG(...)                                               \
    do {                                                       \
        if (p4.debug) p4_message("p4pmu-debug: " __VA_ARGS__); \
    } while (0)

#endif
