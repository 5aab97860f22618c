/*
 * p4pmu: translation-cache flushes (qemu_plugin_reset): starting to count (count=auto),
 * installing an exact-deadline signature, switching the outcome-free ("lite") level
 * (docs/guest-events.md, "The outcome-free level"), dropping a block that a change of
 * silent direction failed to drop (directions.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "flush.h"
#include "counting.h"
#include "kinds.h"
#include "memory.h"
#include "state.h"


/* One translation-cache flush at a time (qemu_plugin_reset drops a second request while one
 * is under way): it installs what is wanted when it runs (a W2 signature, the levels). */

/* The level the programming wants: 1 outcome-free, 0 full, -1 either (no counter may count:
 * the level in force is kept, so that a driver that disables everything around its idle
 * loop or scheduling costs no flushes) */
static int lite_wanted(void)
{
    if (!p4.run->lite_on || p4.run->threads != 1 || p4.n_vcpus_max != 1 || p4.run->branch_trace ||
        !p4.run->fold_out || !p4.run->per_vcpu[0].init) {
        return 0;
    }
    int w = p4.run->fold_out[0].lite;
    return w == P4_LITE_EITHER ? -1 : w != 0;
}

/* the level to install at a flush */
static int lite_choice(void)
{
    int w = lite_wanted();
    return w < 0 ? p4.lite->active : w;
}

/* the translation level for the blocks translated from now on (all vCPUs are stopped) */
static void lite_set(int on)
{
    if (on == p4.lite->active) return;
    if (on) p4.lite->installs++;
    else p4.lite->removals++;
    p4.lite->streak = 0;
    __atomic_store_n(&p4.lite->active, on, __ATOMIC_RELEASE);
    DBG("counting: %s level (translation cache flushed)\n", on ? "outcome-free" : "full");
}

/* The memory level (memory.c, docs/memory-model.md) the programmings of the vCPUs want:
 * the P4_MEM_ALL parts as one of them wants each, 0 if none wants anything, -1 if no
 * counter may count anywhere (keep the level) */
static int mem_wanted(void)
{
    if (!p4.run->fold_out) return -1;
    int want = -1;
    for (int i = 0; i < p4.n_vcpus_max; i++) {
        if (!p4.run->per_vcpu[i].init) continue;
        int w = p4.run->fold_out[i].mem;
        if (w == P4_LITE_EITHER) continue;
        want = (want < 0 ? 0 : want) | (w & P4_MEM_ALL);
    }
    return want;
}

static int mem_choice(void)
{
    int w = mem_wanted();
    return w < 0 ? p4.memlvl->active : w;
}

static void mem_set(int on)
{
    if (on == p4.memlvl->active) return;
    int added = on & ~p4.memlvl->active;
    if (added) p4.memlvl->installs++;
    mem_models_reset(added, on);
    if (p4.memlvl->active & ~on) p4.memlvl->removals++;
    p4.memlvl->streak = 0;
    __atomic_store_n(&p4.memlvl->active, on, __ATOMIC_RELEASE);
    DBG("counting: memory level %s%s%s%s%s (translation cache flushed)\n",
        on & P4_MEM_DATA ? "data " : "", on & P4_MEM_FETCH ? "fetch " : "",
        on & P4_MEM_CODE ? "code " : "", on & P4_MEM_FP ? "operands " : "",
        on & P4_MEM_SB ? "stores"
        : on           ? ""
                       : "off");
}

static void reset_done(void *ud)
{
    (void)ud;
    lite_set(lite_choice());
    mem_set(mem_choice());
    __atomic_store_n(&p4.run->instrument, 1, __ATOMIC_SEQ_CST);
    p4.up.register_callbacks();
    DBG("counting: instrumentation on (translation cache flushed)\n");
}

/* The flush asked for by flush_request is done (all vCPUs stopped): install what is wanted
 * now.  A new exact-deadline signature: blocks translated from now on carry W2 operations
 * for it; every vCPU takes it up at its next step (exact_update).  The level: lite_choice(). */
static void flush_installed(void *ud)
{
    (void)ud;
    if (p4.run->instrument) p4.up.groups_after_flush();
    lite_set(lite_choice());
    mem_set(mem_choice());
    if (!p4.exact->req) {
        __atomic_store_n(&p4.run->flush_pending, 0, __ATOMIC_RELEASE);
        p4.up.register_callbacks();
        return;
    }
    p4.exact->req = 0;
    p4.exact->sig = p4.exact->next;
    p4.exact->flushes++;
    for (int i = 0; i < p4.n_vcpus_max; i++) {
        struct vcpu_counting *c = &p4.run->per_vcpu[i];
        if (c->init) p4.up.exact_drop(c);
    }
    __atomic_store_n(&p4.exact->active, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&p4.run->flush_pending, 0, __ATOMIC_RELEASE);
    p4.up.register_callbacks();
    DBG("counting: exact deadlines for counter %d (signature %u; translation cache flushed)\n",
        p4.exact->sig.ctr, p4.exact->flushes);
}

/* Ask for a flush (no-op while one is under way: it installs what is wanted when it runs).
 * Returns 1 if this call asked. */
static int flush_request(void)
{
    int idle = 0; /* one request at a time, whichever vCPU thread asks first */
    if (!__atomic_compare_exchange_n(&p4.run->flush_pending, &idle, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        return 0;
    }
    return 1;
}

/* After a step: does the translation level still fit the programming?  To the full level at
 * once (the next block entry flushes); to the outcome-free level after LITE_STREAK steps in
 * a row that want it. */
void lite_update(void)
{
    if (!p4.run->instrument) return; /* not started: reset_done chooses */
    int want = lite_wanted();
    if (want < 0 || want == p4.lite->active) {
        p4.lite->streak = 0;
        return;
    }
    if (want && (p4.lite->installs >= LITE_MAX_INSTALLS || ++p4.lite->streak < LITE_STREAK)) return;
    if (flush_request()) qemu_plugin_reset(p4.run->plugin_id, flush_installed, NULL);
}

void mem_update(void)
{
    if (!p4.run->instrument) return; /* not started: reset_done chooses */
    int want = mem_wanted();
    if (want < 0 || want == p4.memlvl->active) {
        p4.memlvl->streak = 0;
        return;
    }
    /* something more at once; something less after a streak (and not too often) */
    if (!(want & ~p4.memlvl->active) &&
        (p4.memlvl->removals >= MEM_MAX_REMOVALS || ++p4.memlvl->streak < MEM_STREAK))
        return;
    if (flush_request()) qemu_plugin_reset(p4.run->plugin_id, flush_installed, NULL);
}

/* A block that should have been dropped ran (directions.c): a flush drops it */
void flush_for_stale_block(void)
{
    if (flush_request()) qemu_plugin_reset(p4.run->plugin_id, flush_installed, NULL);
}

/* Ask for counter widx[slot] of fold output `o` as the exact-deadline signature (a flush). */
void exact_request(const struct p4c_out *o, int slot)
{
    if (!flush_request()) return;
    int ctr = o->widx[slot];
    uint32_t nk = o->nkext;
    int32_t *col = malloc(sizeof(int32_t) * (nk ? nk : 1));
    int64_t rate = 1;
    for (uint32_t e = 0; e < nk; e++) {
        col[e] = o->winc[(size_t)e * P4_NCOUNTERS + ctr];
        if (col[e] > rate) rate = col[e];
    }
    if (o->wrate[slot] > rate) rate = o->wrate[slot];
    struct exact_signature g = {ctr, nk, col, rate, {0, 0}};
    for (int os = 0; os < 2; os++) {
        for (unsigned q = 0; q < p4.kinds->n_penalty; q++) {
            g.pen[os] += exact_increment(&g, ext(p4.kinds->penalty[q], os), 1);
        }
    }
    p4.exact->next = g; /* (the previous signature's column stays allocated: blocks were weighted
                  * with it until the flush) */
    p4.exact->req = 1;
    qemu_plugin_reset(p4.run->plugin_id, flush_installed, NULL);
}

/* count=auto: the guest enabled a counter for the first time.  qemu_plugin_reset flushes the
 * translation cache (asynchronously, between blocks) and unregisters our callbacks;
 * reset_done registers them again with instrumentation on. */
void counting_start(void)
{
    p4.run->start_requested = 1;
    qemu_plugin_reset(p4.run->plugin_id, reset_done, NULL);
}
