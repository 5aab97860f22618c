/*
 * p4pmu: the per-vCPU bridge state and access to the guest's registers, memory and local
 * APIC through the QEMU plugin API (docs/bridge.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "messages.h"
#include "registers.h"
#include "state.h"

/* The vCPU whose thread this is (set in every callback that names its vCPU).  Global and
 * per host thread: QEMU's translation callback (translate) names no vCPU. */
__thread int tl_vcpu = -1;

struct vcpu *bridge_vcpu(unsigned int vi)
{
    if ((int)vi >= p4.n_vcpus_max) {
        p4_message("p4pmu: vCPU %u beyond max_vcpus %d\n", vi, p4.n_vcpus_max);
        abort();
    }
    tl_vcpu = (int)vi;
    return &p4.vcpus[vi];
}

uint64_t reg_read(struct vcpu *v, struct qemu_plugin_register *r)
{
    uint64_t x = 0;
    g_byte_array_set_size(v->buf, 0);
    if (!qemu_plugin_read_register(r, v->buf)) {
        p4_message("p4pmu: register read failed\n");
        abort();
    }
    memcpy(&x, v->buf->data, v->buf->len < 8 ? v->buf->len : 8);
    return x;
}

void reg_read_bytes(struct vcpu *v, struct qemu_plugin_register *r, void *dst, size_t n)
{
    g_byte_array_set_size(v->buf, 0);
    if (!qemu_plugin_read_register(r, v->buf)) {
        p4_message("p4pmu: register read failed\n");
        abort();
    }
    memset(dst, 0, n);
    memcpy(dst, v->buf->data, v->buf->len < n ? v->buf->len : n);
}

void reg_write(struct vcpu *v, struct qemu_plugin_register *r, uint64_t x)
{
    g_byte_array_set_size(v->buf, 0);
    g_byte_array_append(v->buf, (const uint8_t *)&x, 8);
    if (!qemu_plugin_write_register(r, v->buf)) {
        p4_message("p4pmu: register write failed\n");
        abort();
    }
}

int mem_read(struct vcpu *v, uint64_t addr, void *dst, size_t n)
{
    g_byte_array_set_size(v->buf, 0);
    if (!qemu_plugin_read_memory_vaddr(addr, v->buf, n) || v->buf->len < n) {
        return 0;
    }
    memcpy(dst, v->buf->data, n);
    return 1;
}

int mem_write(struct vcpu *v, uint64_t addr, const void *src, size_t n)
{
    g_byte_array_set_size(v->buf, 0);
    g_byte_array_append(v->buf, src, (unsigned)n);
    return qemu_plugin_write_memory_vaddr(addr, v->buf);
}

/* EDX:EAX <- value; 8-byte writes also clear the upper halves of RAX/RDX (long mode). */
void write_edx_eax(struct vcpu *v, uint64_t value)
{
    reg_write(v, p4.regs.rax, value & 0xFFFFFFFFull);
    reg_write(v, p4.regs.rdx, value >> 32);
}

/* CPL as the hardware defines it: real mode 0, virtual-8086 mode 3, else CS.RPL. */
int current_cpl(struct vcpu *v)
{
    if (!(reg_read(v, p4.regs.cr0) & CR0_PE)) {
        return 0;
    }
    if (reg_read(v, p4.regs.eflags) & EFL_VM) {
        return 3;
    }
    return (int)(reg_read(v, p4.regs.cs) & 3);
}

uint64_t reg_read_rcx(struct vcpu *v)
{
    return reg_read(v, p4.regs.rcx);
}

/* The guest's local APIC, through physical memory (qemu_plugin_read/write_memory_hwaddr,
 * which take QEMU's BQL for the MMIO access): read register `off`, write `val` at `addr` */
int apic_rd(struct vcpu *v, uint64_t off, uint32_t *out)
{
    g_byte_array_set_size(v->buf, 0);
    if ((int)qemu_plugin_read_memory_hwaddr(APIC_BASE + off, v->buf, 4) != 0 || v->buf->len < 4) {
        return 0;
    }
    memcpy(out, v->buf->data, 4);
    return 1;
}

int apic_wr(struct vcpu *v, uint64_t addr, uint32_t val)
{
    g_byte_array_set_size(v->buf, 0);
    g_byte_array_append(v->buf, (const uint8_t *)&val, 4);
    return (int)qemu_plugin_write_memory_hwaddr(addr, v->buf) == 0;
}
