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
#include <unistd.h>
#include <strings.h>

#include "messages.h"
#include "install.h"
#include "access_times.h"
#include "blocks.h"
#include "counting.h"
#include "cuts.h"
#include "deadline.h"
#include "directions.h"
#include "fp_assist.h"
#include "intercept.h"
#include "kinds.h"
#include "memory.h"
#include "mirror.h"
#include "predictor.h"
#include "registers.h"
#include "siblings.h"
#include "trace.h"
#include "control.h"
#include "state.h"

/* read by QEMU when it loads the plugin */
P4PMU_EXPORT const int qemu_plugin_version = P4PMU_QEMU_PLUGIN_VERSION;


static void vcpu_init(unsigned int vi, void *ud)
{
    (void)ud;
    struct vcpu *v = bridge_vcpu(vi);
    v->buf = g_byte_array_new();
    if (!p4.regs.rax) {
        p4_GArray *a = qemu_plugin_get_registers();
        p4_reg_descriptor *d = (p4_reg_descriptor *)a->data;
        for (unsigned i = 0; i < a->len; i++) {
            const char *nm = d[i].name;
#define GRAB(field)                                           \
    do {                                                      \
        if (!strcmp(nm, #field)) p4.regs.field = d[i].handle; \
    } while (0)
            GRAB(rax);
            GRAB(rcx);
            GRAB(rdx);
            GRAB(rsp);
            GRAB(rip);
            GRAB(eflags);
            GRAB(cs);
            GRAB(ss);
            GRAB(ds);
            GRAB(es);
            GRAB(fs);
            GRAB(gs);
            GRAB(cr0);
            GRAB(cr4);
            GRAB(efer);
            GRAB(mxcsr);
#undef GRAB
            if (!strncmp(nm, "xmm", 3) && nm[3] >= '0' && nm[3] <= '9') {
                int k = atoi(nm + 3);
                if (k >= 0 && k < 16) p4.regs.xmm[k] = d[i].handle;
            }
        }
        g_array_free(a, 1);
        if (!p4.regs.rax || !p4.regs.rcx || !p4.regs.rdx || !p4.regs.rsp || !p4.regs.rip ||
            !p4.regs.eflags || !p4.regs.cs || !p4.regs.ss || !p4.regs.ds || !p4.regs.es ||
            !p4.regs.fs || !p4.regs.gs || !p4.regs.cr0 || !p4.regs.cr4 || !p4.regs.efer) {
            p4_message("p4pmu: this QEMU does not expose the x86 registers the bridge "
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
    struct vcpu *v = bridge_vcpu(vi);
    counting_discon(vi, v, from, 0, 1); /* C only: QEMU holds the BQL here */
}

static void on_idle(unsigned int vi, void *ud)
{
    (void)ud;
    counting_halt_change(vi, 1);
    control_idle(vi); /* parked: the control channel may use its PMU state */
}

static void on_resume(unsigned int vi, void *ud)
{
    (void)ud;
    control_resume(vi);          /* (waits for a control request being served) */
    counting_halt_change(vi, 0); /* running again: its LVT may change */
}

/* P4PMU_DEBUG: the counting and mirror statistics of vCPU i at exit */
static void debug_report(int i)
{
    const struct vcpu_counting *c = &p4.run->per_vcpu[i];
    typedef unsigned long long ull;
    if (c->init) {
        p4_message("p4pmu-debug: vCPU %d: %llu folds, %llu deadline callbacks "
                   "(%llu re-armed by the C check), %llu resolutions, %llu silent outcomes "
                   "replayed, %llu gate callbacks, %llu bookkeeping errors; %u blocks, %u kinds; "
                   "%llu exact-deadline callbacks\n",
                   i, (ull)c->fold.folds, (ull)c->deadline.deadlines,
                   (ull)c->deadline.fast_deadlines, (ull)c->res.resolutions, (ull)c->res.silent,
                   (ull)c->res.gates, (ull)c->res.silent_bad, p4.blocks->n - 1, p4.kinds->n,
                   (ull)c->exact.checks);
        p4_message("p4pmu-debug: vCPU %d: %llu of %llu batches without adjacent "
                   "clock pairs (no EDGE detector); %llu rests of an execution split by an "
                   "access given in clock order, %llu refused\n",
                   i, (ull)c->fold.pairless_folds, (ull)c->fold.folds, (ull)c->fold.rest_seqs,
                   (ull)c->fold.rest_seq_refused);
        p4_message("p4pmu-debug: vCPU %d: outcome-free level %s, installed %u "
                   "time(s), removed %u; %llu executions cut at MMIO re-executions\n",
                   i, p4.lite->active ? "on" : "off", p4.lite->installs, p4.lite->removals,
                   (ull)c->cut.memi_cuts);
        p4_message("p4pmu-debug: vCPU %d: %llu C deadline checks looked at %llu dirty "
                   "blocks\n",
                   i, (ull)c->deadline.fast_checks, (ull)c->deadline.fast_scanned);
        p4_message("p4pmu-debug: vCPU %d: memory level %s, installed %u time(s), "
                   "removed %u\n",
                   i, p4.memlvl->active ? "on" : "off", p4.memlvl->installs, p4.memlvl->removals);
        mem_report((unsigned)i, &c->mem);
    }
    if (i == 0) {
        unsigned long long members = 0, largest = 0, full = 0;
        for (uint32_t g = 1; g < p4.blocks->n_groups; g++) {
            uint32_t nm = p4.blocks->groups[g]->nmem;
            members += nm;
            if (nm > largest) largest = nm;
            full += nm >= GMAX;
        }
        p4_message(
            "p4pmu-debug: %u predictor entry groups, %llu silent-capable members "
            "(largest %llu, %llu full); directions: %llu looks, %llu changes, %llu branch "
            "bytes rewritten, %llu not made (address unknown or firmware), %llu stale blocks ran\n",
            p4.blocks->n_groups - 1, members, largest, full, (ull)p4.directions->looks,
            (ull)p4.directions->groups_flipped, (ull)p4.directions->rewrites,
            (ull)p4.directions->unflippable, (ull)p4.directions->stale_runs);
    }
    if (i == 0)
        p4_message("p4pmu-debug: exact deadlines: %s, %u signature(s) installed, "
                   "counter %d\n",
                   p4.run->exact_on ? "on" : "off", p4.exact->flushes,
                   p4.exact->flushes ? p4.exact->sig.ctr : -1);
    if (p4.mirrors) {
        const struct p4c_mirror *m = &p4.mirrors[i];
        p4_message("p4pmu-debug: vCPU %d mirror: %llu RDMSR, %llu WRMSR, %llu "
                   "RDPMC, %llu deadlines served in C (%llu overflow walks, %llu "
                   "programming switches), %llu declined (%llu for an overflow in a batch "
                   "not in clock order)\n",
                   i, (ull)m->n_rdmsr, (ull)m->n_wrmsr, (ull)m->n_rdpmc, (ull)m->n_deadline,
                   (ull)m->n_walks, (ull)m->n_switches, (ull)m->n_declined, (ull)m->n_unordered);
    }
}

static void at_exit(void *ud)
{
    (void)ud;
    for (int i = 0; p4.debug && p4.run->per_vcpu && i < p4.n_vcpus_max; i++) {
        debug_report(i);
    }
    counting_report();
    access_times_report();
    p4pmu_py_exit();
}

/*
 * One copy of the plugin per QEMU process: two (QEMU's -plugin given twice) would both
 * intercept every PMU access and count every block, and share one Python interpreter,
 * silently corrupting the counts.  QEMU merges -plugin options naming the same file into one
 * plugin; a copy at another path is a second library with its own statics, so the mark is
 * process-wide: an environment variable holding the process ID (a child process started
 * with our environment is not taken for a second copy).
 */
#define LOADED_MARK "P4PMU_PLUGIN_LOADED_IN_PID"

static int claim_process(void)
{
    char pid[32];
    snprintf(pid, sizeof(pid), "%ld", (long)getpid());
    const char *mark = getenv(LOADED_MARK);
    if (mark && !strcmp(mark, pid)) {
        p4_message("p4pmu: the plugin is loaded twice in this QEMU (-plugin given twice "
                   "with libp4pmu_plugin.so or a copy of it): load it once; not loading "
                   "the second copy\n");
        return -1;
    }
    setenv(LOADED_MARK, pid, 1);
    return 0;
}

/* Every part of the root object (state.h), before Python starts (it reads some of them) */
static int state_setup(int max_vcpus)
{
    p4.n_vcpus_max = max_vcpus;
    p4.vcpus = calloc((size_t)max_vcpus, sizeof(struct vcpu));
    p4.trace = calloc(1, sizeof(*p4.trace));
    p4.control = control_state_new();
    p4.access_hist = access_times_new();
    p4.intercept = intercept_state_new();
    p4.run = counting_run_new();
    p4.kinds = calloc(1, sizeof(*p4.kinds));
    p4.blocks = block_table_new();
    p4.memlvl = calloc(1, sizeof(*p4.memlvl));
    p4.exact = calloc(1, sizeof(*p4.exact));
    p4.lite = calloc(1, sizeof(*p4.lite));
    p4.directions = calloc(1, sizeof(*p4.directions));
    p4.sse_assist = sse_assist_state_new(p4.n_vcpus_max);
    p4.cond_tab = cond_tables_new();
    if (!p4.vcpus || !p4.trace || !p4.control || !p4.access_hist || !p4.intercept || !p4.run ||
        !p4.kinds || !p4.blocks || !p4.memlvl || !p4.exact || !p4.lite || !p4.directions ||
        !p4.sse_assist || !p4.cond_tab) {
        p4_message("p4pmu: out of memory for the plugin's state\n");
        return -1;
    }
    return 0;
}

/* The calls of lower units to upper ones (state.h struct p4pmu_upcalls) */
static void connect_upcalls(void)
{
    p4.up.register_callbacks = register_callbacks;
    p4.up.groups_after_flush = groups_after_flush;
    p4.up.exact_drop = exact_drop;
    p4.up.cut_abandoned = cut_abandoned;
    p4.up.directions_update = directions_update;
    p4.up.directions_stale_ran = directions_stale_ran;
}

P4PMU_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const p4_qemu_info_t *info, int argc,
                                     char **argv)
{
    if (strcmp(info->target_name, "x86_64") && strcmp(info->target_name, "i386")) {
        p4_message("p4pmu: the plugin is for x86 guests, not %s\n", info->target_name);
        return -1;
    }
    if (!info->system_emulation) {
        p4_message("p4pmu: the plugin needs system emulation (qemu-system-*)\n");
        return -1;
    }
    if (claim_process() < 0) {
        return -1;
    }
    p4.debug = getenv("P4PMU_DEBUG") && strcmp(getenv("P4PMU_DEBUG"), "0");
    char option_error[1024];
    if (p4_options_parse(argc, argv, &p4.options, option_error, sizeof(option_error)) < 0) {
        p4_message("p4pmu: %s\n", option_error);
        return -1;
    }
    /* QEMU opened us with RTLD_LOCAL: make libpython's symbols global before Python starts,
     * or extension modules (numpy, _cffi_backend) cannot resolve them. */
    if (!dlopen(P4PMU_LIBPYTHON, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD)) {
        p4_message("p4pmu: cannot re-open %s globally: %s\n", P4PMU_LIBPYTHON, dlerror());
        return -1;
    }
    if (state_setup(info->system.max_vcpus > 0 ? info->system.max_vcpus : 1) < 0) {
        return -1;
    }
    connect_upcalls();
    /* before Python starts: the PMU model's counter state lives in the mirrors */
    if (mirror_setup(p4.n_vcpus_max) < 0 || trace_setup(p4.n_vcpus_max) < 0 ||
        control_setup(p4.n_vcpus_max) < 0) {
        return -1;
    }
    if (p4pmu_py_init(argc, argv, info->system.smp_vcpus, p4.n_vcpus_max) != 1) {
        p4_message("p4pmu: plugin initialisation failed (reason above); not loading\n");
        return -1;
    }
    if (counting_setup(id, &p4.options, p4.n_vcpus_max) < 0) {
        return -1;
    }
    intercept_setup();
    register_callbacks();
    return 0;
}

/* All our registrations (again after qemu_plugin_reset, which drops them: flush.c) */
void register_callbacks(void)
{
    qemu_plugin_id_t id = p4.run->plugin_id;
    qemu_plugin_register_vcpu_init_cb(id, vcpu_init, NULL);
    qemu_plugin_register_vcpu_tb_trans_cb(id, translate, NULL);
    qemu_plugin_register_vcpu_discon_cb(id, P4_DISCON_EXCEPTION, on_exception, NULL);
    if (p4.run->instrument || p4c_control()->on) {
        /* only while counting (or while the control channel parks vCPUs): QEMU's
         * interrupt discontinuity callback has a cost for every block once registered
         * (measured: about 10 % of plain QEMU with nothing enabled) */
        qemu_plugin_register_vcpu_discon_cb(id, P4_DISCON_INTERRUPT, on_interrupt, NULL);
        qemu_plugin_register_vcpu_idle_cb(id, on_idle, NULL);
        qemu_plugin_register_vcpu_resume_cb(id, on_resume, NULL);
    }
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
}
