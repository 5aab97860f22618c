/*
 * p4pmu: translation-cache flushes (qemu_plugin_reset): starting to count (count=auto),
 * installing an exact-deadline signature, switching the outcome-free ("lite") level
 * (docs/guest-events.md, "The outcome-free level").
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "flush.h"
#include "counting.h"
#include "install.h"
#include "kinds.h"
#include "registers.h"

int w2_mode = 1;    /* option exact=on|off */

struct exact_deadline_state w2;

/* One translation-cache flush at a time (qemu_plugin_reset drops a second request while one
 * is under way): it installs what is wanted when it runs (a W2 signature, the level). */
volatile int flush_pending;

int lite_mode = 1;  /* option lite=on|off */

struct lite_level_state lite;

static int lite_wanted(void)
{
    if (!lite_mode || cnt_threads != 1 || n_vcpus_max != 1 || br_trace || !outs) return 0;
    return cv[0].init && outs[0].lite;
}

/* the translation level for the blocks translated from now on (all vCPUs are stopped) */
static void lite_set(int on)
{
    if (on == lite.active) return;
    if (on) lite.installs++;
    else lite.removals++;
    lite.streak = 0;
    __atomic_store_n(&lite.active, on, __ATOMIC_RELEASE);
    DBG("counting: %s level (translation cache flushed)\n", on ? "outcome-free" : "full");
}

static void reset_done(void *ud)
{
    (void)ud;
    lite_set(lite_wanted());
    __atomic_store_n(&cnt_instrument, 1, __ATOMIC_SEQ_CST);
    register_callbacks();
    DBG("counting: instrumentation on (translation cache flushed)\n");
}

/* The flush asked for by flush_request is done (all vCPUs stopped): install what is wanted
 * now.  A new exact-deadline signature: blocks translated from now on carry W2 operations
 * for it; every vCPU takes it up at its next step (w2_update).  The level: lite_wanted(). */
static void flush_installed(void *ud)
{
    (void)ud;
    lite_set(lite_wanted());
    if (!w2.req) {
        __atomic_store_n(&flush_pending, 0, __ATOMIC_RELEASE);
        register_callbacks();
        return;
    }
    w2.req = 0;
    w2.sig = w2.next;
    w2.flushes++;
    for (int i = 0; i < n_vcpus_max; i++) {
        if (!cv[i].init) continue;
        cv[i].w2_on = 0;
        cv[i].w2_key_winc = NULL;
        sbv((unsigned)i)[SB_W2] = 0;
    }
    __atomic_store_n(&w2.active, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&flush_pending, 0, __ATOMIC_RELEASE);
    register_callbacks();
    DBG("counting: exact deadlines for counter %d (signature %u; translation cache flushed)\n",
        w2.sig.ctr, w2.flushes);
}

/* Ask for a flush (no-op while one is under way: it installs what is wanted when it runs).
 * Returns 1 if this call asked. */
static int flush_request(void)
{
    int idle = 0; /* one request at a time, whichever vCPU thread asks first */
    if (!__atomic_compare_exchange_n(&flush_pending, &idle, 1, 0, __ATOMIC_ACQ_REL,
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
    if (!cnt_instrument) return; /* not started: reset_done chooses */
    int want = lite_wanted();
    if (want == lite.active) {
        lite.streak = 0;
        return;
    }
    if (want && (lite.installs >= LITE_MAX_INSTALLS || ++lite.streak < LITE_STREAK)) return;
    if (flush_request()) qemu_plugin_reset(plugin_id, flush_installed, NULL);
}

/* Ask for counter widx[slot] of outs `o` as the exact-deadline signature (a flush). */
void w2_request(const struct p4c_out *o, int slot)
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
    struct w2sig g = {ctr, nk, col, rate, {0, 0}};
    for (int os = 0; os < 2; os++) {
        for (unsigned q = 0; q < n_penalty; q++) g.pen[os] += w2_inc(&g, ext(k_penalty[q], os), 1);
    }
    w2.next = g; /* (the previous signature's column stays allocated: blocks were weighted
                  * with it until the flush) */
    w2.req = 1;
    qemu_plugin_reset(plugin_id, flush_installed, NULL);
}

/* count=auto: the guest enabled a counter for the first time.  qemu_plugin_reset flushes the
 * translation cache (asynchronously, between blocks) and unregisters our callbacks;
 * reset_done registers them again with instrumentation on. */
void counting_start(void)
{
    cnt_start_requested = 1;
    qemu_plugin_reset(plugin_id, reset_done, NULL);
}
