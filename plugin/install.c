/*
 * p4pmu: the plugin's entry point: qemu_plugin_install (option parsing, refusing a second
 * copy), callback registration, vCPU set-up, idle/resume/interrupt callbacks and the exit
 * report (docs/bridge.md).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <dlfcn.h>

#include "install.h"
#include "blocks.h"
#include "counting.h"
#include "cuts.h"
#include "flush.h"
#include "intercept.h"
#include "kinds.h"
#include "mirror.h"
#include "registers.h"
#include "siblings.h"

P4PMU_EXPORT int qemu_plugin_version = P4PMU_QEMU_PLUGIN_VERSION;

int verbose;

int debug; /* P4PMU_DEBUG=1 in the environment: trace the bridge's decisions */

static void vcpu_init(unsigned int vi, void *ud)
{
    (void)ud;
    struct vcpu *v = V(vi);
    v->buf = g_byte_array_new();
    if (!R.rax) {
        p4_GArray *a = qemu_plugin_get_registers();
        p4_reg_descriptor *d = (p4_reg_descriptor *)a->data;
        for (unsigned i = 0; i < a->len; i++) {
            const char *nm = d[i].name;
#define GRAB(field) if (!strcmp(nm, #field)) R.field = d[i].handle;
            GRAB(rax) GRAB(rcx) GRAB(rdx) GRAB(rsp) GRAB(rip) GRAB(eflags) GRAB(cs) GRAB(ss)
            GRAB(ds) GRAB(es) GRAB(fs) GRAB(gs) GRAB(cr0) GRAB(cr4) GRAB(efer)
#undef GRAB
        }
        g_array_free(a, 1);
        if (!R.rax || !R.rcx || !R.rdx || !R.rsp || !R.rip || !R.eflags || !R.cs || !R.ss ||
            !R.ds || !R.es || !R.fs || !R.gs || !R.cr0 || !R.cr4 || !R.efer) {
            fprintf(stderr, "p4pmu: this QEMU does not expose the x86 registers the bridge "
                            "needs (rax..efer)\n");
            exit(1);
        }
    }
    set_npending(vi, v);
    counting_vcpu_init(vi);
    v->ready = 1;
}

static void on_interrupt(unsigned int vi, enum p4_discon_type type, uint64_t from, uint64_t to,
                         void *ud)
{
    (void)type;
    (void)to;
    (void)ud;
    V(vi);
    counting_discon(vi, from, 0, 1); /* C only: QEMU holds the BQL here */
}

static void on_idle(unsigned int vi, void *ud)
{
    (void)ud;
    counting_halt_change(vi, 1);
}

static void on_resume(unsigned int vi, void *ud)
{
    (void)ud;
    counting_halt_change(vi, 0); /* running again: its LVT may change */
}

static void at_exit(void *ud)
{
    (void)ud;
    if (debug && cv) {
        for (int i = 0; i < n_vcpus_max; i++) {
            if (cv[i].init)
                fprintf(stderr, "p4pmu-debug: vCPU %d: %llu folds, %llu deadline callbacks "
                        "(%llu re-armed by the C check), %llu resolutions, %llu silent outcomes "
                        "replayed, %llu gate callbacks, %llu bookkeeping errors; %u blocks, %u kinds; "
                        "%llu exact-deadline callbacks\n", i,
                        (unsigned long long)cv[i].folds, (unsigned long long)cv[i].deadlines,
                        (unsigned long long)cv[i].fast_deadlines,
                        (unsigned long long)cv[i].resolutions, (unsigned long long)cv[i].silent,
                        (unsigned long long)cv[i].gates, (unsigned long long)cv[i].silent_bad,
                        n_blocks - 1, n_kinds, (unsigned long long)cv[i].w2_checks);
            if (cv[i].init)
                fprintf(stderr, "p4pmu-debug: vCPU %d: %llu of %llu batches without adjacent "
                        "clock pairs (no EDGE detector)\n", i,
                        (unsigned long long)cv[i].pairless_folds,
                        (unsigned long long)cv[i].folds);
            if (cv[i].init)
                fprintf(stderr, "p4pmu-debug: vCPU %d: outcome-free level %s, installed %u "
                        "time(s), removed %u; %llu executions cut at MMIO re-executions\n", i,
                        lite.active ? "on" : "off", lite.installs, lite.removals,
                        (unsigned long long)cv[i].memi_cuts);
            if (i == 0)
                fprintf(stderr, "p4pmu-debug: exact deadlines: %s, %u signature(s) installed, "
                        "counter %d\n", w2_mode ? "on" : "off", w2.flushes,
                        w2.flushes ? w2.sig.ctr : -1);
            if (mirrors)
                fprintf(stderr, "p4pmu-debug: vCPU %d mirror: %llu RDMSR, %llu WRMSR, %llu "
                        "RDPMC, %llu deadlines served in C (%llu overflow walks), %llu "
                        "declined\n", i, (unsigned long long)mirrors[i].n_rdmsr,
                        (unsigned long long)mirrors[i].n_wrmsr,
                        (unsigned long long)mirrors[i].n_rdpmc,
                        (unsigned long long)mirrors[i].n_deadline,
                        (unsigned long long)mirrors[i].n_walks,
                        (unsigned long long)mirrors[i].n_declined);
        }
    }
    counting_report();
    p4pmu_py_exit();
}

P4PMU_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const p4_qemu_info_t *info, int argc,
                                     char **argv)
{
    if (strcmp(info->target_name, "x86_64") && strcmp(info->target_name, "i386")) {
        fprintf(stderr, "p4pmu: the plugin is for x86 guests, not %s\n", info->target_name);
        return -1;
    }
    if (!info->system_emulation) {
        fprintf(stderr, "p4pmu: the plugin needs system emulation (qemu-system-*)\n");
        return -1;
    }
    debug = getenv("P4PMU_DEBUG") && strcmp(getenv("P4PMU_DEBUG"), "0");
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "verbose=on")) {
            verbose = 1;
        }
    }
    /* QEMU opened us with RTLD_LOCAL: make libpython's symbols global before Python starts,
     * or extension modules (numpy, _cffi_backend) cannot resolve them. */
    if (!dlopen(P4PMU_LIBPYTHON, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD)) {
        fprintf(stderr, "p4pmu: cannot re-open %s globally: %s\n", P4PMU_LIBPYTHON, dlerror());
        return -1;
    }
    n_vcpus_max = info->system.max_vcpus > 0 ? info->system.max_vcpus : 1;
    vcpus = calloc((size_t)n_vcpus_max, sizeof(struct vcpu));
    if (!vcpus) {
        return -1;
    }
    if (p4pmu_py_init(argc, argv, info->system.smp_vcpus, n_vcpus_max) != 1) {
        fprintf(stderr, "p4pmu: plugin initialisation failed (reason above); not loading\n");
        return -1;
    }
    if (counting_setup(id, argc, argv, n_vcpus_max) < 0) {
        return -1;
    }
    mirror_setup(n_vcpus_max);
    sb_pending = qemu_plugin_scoreboard_new(sizeof(uint64_t));
    pending_entry.score = sb_pending;
    pending_entry.offset = 0;
    register_callbacks();
    return 0;
}

/* All our registrations (again after qemu_plugin_reset, which drops them: flush.c) */
void register_callbacks(void)
{
    qemu_plugin_id_t id = plugin_id;
    qemu_plugin_register_vcpu_init_cb(id, vcpu_init, NULL);
    qemu_plugin_register_vcpu_tb_trans_cb(id, translate, NULL);
    qemu_plugin_register_vcpu_discon_cb(id, P4_DISCON_EXCEPTION, on_exception, NULL);
    if (cnt_instrument) {
        /* only while counting: QEMU's interrupt discontinuity callback has a cost for
         * every block once registered (measured: about 10 % of plain QEMU with nothing
         * enabled) */
        qemu_plugin_register_vcpu_discon_cb(id, P4_DISCON_INTERRUPT, on_interrupt, NULL);
        qemu_plugin_register_vcpu_idle_cb(id, on_idle, NULL);
        qemu_plugin_register_vcpu_resume_cb(id, on_resume, NULL);
    }
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
}
