/*
 * p4pmu: the silent direction of each conditional predictor entry group, changed while the
 * guest runs.  A group is created with the static direction (backward taken, forward not
 * taken: blocks.c); its outcomes in the silent direction run without a callback, the others
 * each cost one (docs/guest-events.md, "Silent branch outcomes").  Many branches go mostly
 * the other way (docs/performance.md), so every 2^N resolutions of a vCPU (option
 * directions=N) the groups whose outcomes in that window went against their direction by
 * enough to pay for it take the other one.  Only their blocks are translated again: a byte of
 * each member's branch instruction is rewritten with its own value through physical memory,
 * and QEMU drops every translated block that holds a written byte, as it does for
 * self-modifying code.  The counts do not depend on the directions; only which outcomes need
 * a callback does.
 *
 * A member whose translation was not dropped (a write that failed) would run silently in the
 * old direction: its first execution after the change is seen (the change gates every
 * member: cb_first), the group then stays closed, and a flush follows (resolve.c,
 * stale_entry).  One vCPU only (a change must see no member running elsewhere).
 */
#include <stdint.h>
#include <stdio.h>

#include "directions.h"
#include "blocks.h"
#include "counting.h"
#include "flush.h"
#include "registers.h"
#include "resolve.h"
#include "state.h"


enum {
    DIR_MAX_GROUP_FLIPS = 4, /* direction changes per group (a branch that keeps changing
                                * its majority is left alone) */
    DIR_LEAD_SHIFT = 8,      /* a change needs a lead of 1/2^8 of the window (4,096
                                * outcomes at 2^20): a few translations' cost */
    DIR_MIN_LEAD = 2,
};

/* The legacy BIOS and option-ROM window (0xA0000-0xFFFFF: VGA memory, and RAM that the
 * firmware makes read-only through the chipset's PAM registers after start-up) and the
 * firmware's top 256 KiB below 4 GiB: writes there are dropped, so no translated block is;
 * such branches keep their direction */
static int rewritable(uint64_t hw)
{
    return !(hw >= 0xA0000 && hw < 0x100000) && !(hw >= 0xFFFC0000ull && hw < 0x100000000ull);
}

/* At the translation of block b: where its branch instruction is in guest-physical memory,
 * if a change of direction can drop b there (else NO_HW) */
void directions_note_block(struct blk *b)
{
    uint64_t hw;
    if (b->gate && qemu_plugin_translate_vaddr(b->ins[b->n - 1].addr, &hw) && rewritable(hw))
        b->br_hw = hw;
}

/* this vCPU's outcomes of group gid against and with its silent direction in the window */
static void group_tally(const struct resolve_vcpu *rv, uint32_t gid, uint64_t *against,
                        uint64_t *with)
{
    *against = *with = 0;
    const struct group_state *g = group_state_peek(rv, gid);
    if (!g) return;
    int t = p4.blocks->groups[gid]->silent_t;
    *against = g->dir[!t];
    *with = g->dir[t];
}

/* Rewrite the byte at guest-physical address hw with its own value: QEMU drops the
 * translated blocks that hold it.  Returns 1 if both accesses succeeded. */
static int rewrite_byte(struct vcpu *v, uint64_t hw)
{
    g_byte_array_set_size(v->buf, 0);
    if ((int)qemu_plugin_read_memory_hwaddr(hw, v->buf, 1) != 0 || v->buf->len < 1) return 0;
    return (int)qemu_plugin_write_memory_hwaddr(hw, v->buf) == 0;
}

/* Change group gid's direction on vCPU vi (none of its members is running or has an
 * outcome pending): its silent outcomes replayed and the group released (group_retire), the
 * other direction, every member's translation dropped, the members list emptied (the
 * blocks translated again join it).  0 when a member's physical address is unknown. */
static int group_flip(unsigned vi, struct vcpu_counting *c, uint32_t gid)
{
    struct pred_group *gr = p4.blocks->groups[gid];
    uint32_t nm = __atomic_load_n(&gr->nmem, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < nm; i++) {
        if (p4.blocks->by_id[gr->mem[i]]->br_hw == NO_HW) {
            p4.directions->unflippable++;
            return 0;
        }
    }
    group_retire(vi, c, gid);
    gr->silent_t ^= 1;
    gr->flips++;
    struct vcpu *v = p4.run->dir_rewrite ? bridge_vcpu(vi) : NULL;
    for (uint32_t i = 0; i < nm && v; i++) {
        p4.directions->rewrites += (uint64_t)rewrite_byte(v, p4.blocks->by_id[gr->mem[i]]->br_hw);
    }
    __atomic_store_n(&gr->nmem, 0, __ATOMIC_RELEASE);
    p4.directions->groups_flipped++;
    return 1;
}

/* At the entry of block `cur` (cb_xcheck) when vCPU vi's resolutions reached its next look:
 * change the direction of every group worth it, but those of `cur` (running) and of `prev`
 * (its outcome is about to be resolved), then start a new window. */
void directions_update(unsigned vi, struct vcpu_counting *c, const struct blk *cur, uint32_t prev)
{
    if (!p4.run->dir_first_look || p4.n_vcpus_max != 1) {
        c->dir.look_at = UINT64_MAX; /* (directions=0, or several vCPUs: never) */
        return;
    }
    c->dir.look_at = c->res.resolutions + p4.run->dir_first_look;
    p4.directions->looks++;
    if (!p4.run->instrument || p4.lite->active) {
        group_counts_reset(&c->res);
        return;
    }
    uint32_t skip1 = cur->end == BRK_COND ? cur->gid : 0;
    uint32_t skip2 = prev ? p4.blocks->by_id[prev]->gid : 0;
    uint64_t lead = p4.run->dir_first_look >> DIR_LEAD_SHIFT, changed = 0;
    if (lead < DIR_MIN_LEAD) lead = DIR_MIN_LEAD;
    for (uint32_t gid = 1; gid < p4.blocks->n_groups; gid++) {
        uint64_t a, w;
        group_tally(&c->res, gid, &a, &w);
        if (a < w + lead || gid == skip1 || gid == skip2 ||
            p4.blocks->groups[gid]->flips >= DIR_MAX_GROUP_FLIPS) {
            continue;
        }
        changed += (uint64_t)group_flip(vi, c, gid);
    }
    group_counts_reset(&c->res);
    if (changed) {
        DBG("directions: vCPU %u at %llu resolutions: %llu groups changed direction (%llu in "
            "all, %llu branch bytes rewritten)\n",
            vi, (unsigned long long)c->res.resolutions, (unsigned long long)changed,
            (unsigned long long)p4.directions->groups_flipped,
            (unsigned long long)p4.directions->rewrites);
    }
}

/* A block that joined its group before the group's last change ran (stale_entry): its
 * translation was not dropped.  A flush drops it. */
void directions_stale_ran(uint32_t id)
{
    p4.directions->stale_runs++;
    const struct blk *b = p4.blocks->by_id[id];
    DBG("directions: block %u (%#llx, branch at physical %#llx, mode %u, %u instructions, "
        "group %u changed %u times) ran after its group changed direction: flushing\n",
        id, (unsigned long long)b->vaddr, (unsigned long long)b->br_hw, b->mode, b->n, b->gid,
        p4.blocks->groups[b->gid]->flips);
    flush_for_stale_block();
}

/* At every translation-cache flush (every vCPU stopped): every block translated before it is
 * gone, so every group is emptied of its members (else hot code, translated again after each
 * flush, fills its group with dead members: every explicit outcome of an open group replays
 * them all, and a full group's new blocks are never silent).  Every silent outcome is
 * replayed first; each group is released on every vCPU (its entry's state stays: the
 * predictor's); a block whose outcome may still be pending is resolved on its own, under
 * the direction it ran with.  No stale block is left. */
void groups_after_flush(void)
{
    for (int vi = 0; vi < p4.n_vcpus_max; vi++) {
        struct vcpu_counting *c = &p4.run->per_vcpu[vi];
        if (c->init) silent_catch_up_all((unsigned)vi, c);
    }
    for (uint32_t gid = 1; gid < p4.blocks->n_groups; gid++) {
        struct pred_group *gr = p4.blocks->groups[gid];
        gr->stale = 0;
        if (!gr->nmem) continue;
        for (int vi = 0; vi < p4.n_vcpus_max; vi++) {
            struct vcpu_counting *c = &p4.run->per_vcpu[vi];
            if (c->init && group_state_peek(&c->res, gid)) group_release(c, gid);
        }
        __atomic_store_n(&gr->nmem, 0, __ATOMIC_RELEASE);
    }
}
