/*
 * registers.h: what registers.c offers to the other units. registers.c: the per-vCPU bridge
 * state and access to the guest's registers, memory and local APIC through the QEMU plugin
 * API (docs/bridge.md).
 */
#ifndef P4PMU_REGISTERS_H
#define P4PMU_REGISTERS_H

#include "bridge_types.h"

/* handles of the x86 registers the plugin reads and writes (QEMU's names) */
struct x86_registers {
    struct qemu_plugin_register *rax, *rcx, *rdx, *rsp, *rip, *eflags, *cs, *ss, *ds, *es, *fs, *gs,
        *cr0, *cr4, *efer;
    /* the SSE state (fp_assist.c; NULL if this QEMU does not expose it) */
    struct qemu_plugin_register *xmm[16], *mxcsr;
};


extern __thread int tl_vcpu;

struct vcpu *bridge_vcpu(unsigned int vi);
uint64_t reg_read(struct vcpu *v, struct qemu_plugin_register *r);
/* the first n bytes of register r into dst (zeros past its size) */
void reg_read_bytes(struct vcpu *v, struct qemu_plugin_register *r, void *dst, size_t n);
void reg_write(struct vcpu *v, struct qemu_plugin_register *r, uint64_t x);
int mem_read(struct vcpu *v, uint64_t addr, void *dst, size_t n);
int mem_write(struct vcpu *v, uint64_t addr, const void *src, size_t n);
void write_edx_eax(struct vcpu *v, uint64_t value);
int current_cpl(struct vcpu *v);
uint64_t reg_read_rcx(struct vcpu *v);

/* the local APIC (SDM Vol. 3A 10.4.1, 10.5.1) */
#define APIC_BASE 0xFEE00000ull
#define APIC_ID_REG 0x020
#define APIC_LVT_PERF 0x340
#define LVT_MASKED (1u << 16)

int apic_rd(struct vcpu *v, uint64_t off, uint32_t *out);
int apic_wr(struct vcpu *v, uint64_t addr, uint32_t val);

#endif
