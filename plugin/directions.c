/*
 * p4pmu: the silent direction of each conditional predictor entry group.  A group is created
 * with the static one (backward taken, forward not taken: blocks.c); its outcomes in the
 * silent direction run without a callback, the others each cost one (docs/guest-events.md,
 * "Silent branch outcomes").  Many branches go mostly the other way (docs/performance.md,
 * "Conditional callbacks"), so when enough of a window of a vCPU's resolutions would have
 * been silent, a translation-cache flush re-chooses: every group whose outcomes in the
 * window went mostly against its direction takes the other one.  The counts do not
 * depend on the directions; only which outcomes need a callback does.
 */
#include <stdint.h>
#include <stdio.h>

#include "directions.h"
#include "blocks.h"
#include "counting.h"
#include "registers.h"
#include "resolve.h"

struct direction_state directions;

enum {
    DIR_MAX_FLIPS = 8,         /* re-choices per run (each is a flush) */
};
/* a re-choice must make silent at least a quarter of the first look's resolutions and of
 * the callbacks the directions cost */
#define DIR_MIN_SHARE 4

/* the outcomes of group gid against and with its silent direction: on vCPU `only`, or on
 * every vCPU (only < 0) */
static void group_tally(uint32_t gid, int only, uint64_t *against, uint64_t *with)
{
    *against = *with = 0;
    if (!blocks.groups[gid]) return; /* (id 0 is none) */
    int t = blocks.groups[gid]->silent_t;
    for (int vi = 0; vi < n_vcpus_max; vi++) {
        if ((only >= 0 && vi != only) || !run.per_vcpu[vi].init) continue;
        const struct group_state *g = group_state_peek((unsigned)vi, gid);
        if (!g) continue;
        *against += g->dir[!t];
        *with += g->dir[t];
    }
}

/* a group changes when its other direction leads by 1/2^14 of the window (64 outcomes at
 * the default window of 2^20), at least 2 */
static int worth_flipping(uint64_t against, uint64_t with)
{
    uint64_t lead = run.dir_first_look >> 14;
    return against > with + (lead > 2 ? lead : 2);
}

/* At a callback of vCPU vi whose resolutions reached its next look: is a re-choice worth a
 * flush?  Looks at the outcomes of the window since the last look (every 2^N resolutions:
 * option directions=N): yes when the groups that went mostly against their direction would
 * have saved a quarter of the window's resolutions and of its callbacks against the
 * directions.  Otherwise the window starts again. */
int directions_wanted(unsigned vi)
{
    struct vcpu_counting *c = &run.per_vcpu[vi];
    c->dir_look_at = c->resolutions + run.dir_first_look;
    if (directions.flips >= DIR_MAX_FLIPS || directions.req) return 0;
    uint64_t cost = 0, gain = 0;
    for (uint32_t gid = 0; gid < blocks.n_groups; gid++) {
        uint64_t a, w;
        group_tally(gid, (int)vi, &a, &w);
        cost += a;
        if (worth_flipping(a, w)) gain += a - w;
    }
    int want = gain * DIR_MIN_SHARE >= run.dir_first_look && gain * DIR_MIN_SHARE >= cost;
    DBG("directions: vCPU %u at %llu resolutions: %llu callbacks against the silent "
        "directions in the window, %llu would be silent%s\n", vi,
        (unsigned long long)c->resolutions, (unsigned long long)cost,
        (unsigned long long)gain, want ? ": re-choosing" : "");
    if (!want) group_counts_reset(vi);
    return want;
}

/* At the flush (every vCPU stopped): every silent outcome replayed, then each group worth
 * it released on every vCPU, given the other direction, and emptied of its members (every
 * block translated before the flush is gone from the translation cache; the one whose
 * outcome may still be pending is resolved on its own, under the direction it ran with) */
void directions_rechoose(void)
{
    directions.req = 0;
    directions.flips++;
    for (int vi = 0; vi < n_vcpus_max; vi++) {
        if (run.per_vcpu[vi].init) silent_catch_up_all((unsigned)vi);
    }
    for (uint32_t gid = 0; gid < blocks.n_groups; gid++) {
        uint64_t a, w;
        group_tally(gid, -1, &a, &w);
        if (!worth_flipping(a, w)) continue;
        for (int vi = 0; vi < n_vcpus_max; vi++) {
            if (run.per_vcpu[vi].init) group_release((unsigned)vi, gid);
        }
        struct pred_group *gr = blocks.groups[gid];
        gr->silent_t ^= 1;
        __atomic_store_n(&gr->nmem, 0, __ATOMIC_RELEASE);
        directions.groups_flipped++;
    }
    for (int vi = 0; vi < n_vcpus_max; vi++) {
        if (run.per_vcpu[vi].init) group_counts_reset((unsigned)vi);
    }
    DBG("directions: %llu groups changed direction in %u re-choices (translation cache "
        "flushed)\n", (unsigned long long)directions.groups_flipped, directions.flips);
}
