/*
 * directions.h: what directions.c offers.  directions.c: the silent direction of each
 * conditional predictor entry group, changed while the guest runs to the direction its
 * outcomes take most, only its blocks translated again (docs/guest-events.md, "Silent
 * branch outcomes").
 */
#ifndef P4PMU_DIRECTIONS_H
#define P4PMU_DIRECTIONS_H

#include "counting_types.h"


/* a vCPU's next look at the directions */
struct directions_vcpu {
    uint64_t look_at; /* resolutions at which directions.c looks next */
};

void directions_update(unsigned vi, struct vcpu_counting *c, const struct blk *cur, uint32_t prev);
void directions_stale_ran(uint32_t id);
void groups_after_flush(void);
void directions_note_block(struct blk *b);

#endif
