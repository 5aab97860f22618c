/*
 * directions.h: what directions.c offers.  directions.c: the silent direction of each
 * conditional predictor entry group, re-chosen at a flush to the direction its outcomes
 * take most (docs/guest-events.md, "Silent branch outcomes").
 */
#ifndef P4PMU_DIRECTIONS_H
#define P4PMU_DIRECTIONS_H

#include "counting_types.h"

extern struct direction_state directions;

int directions_wanted(unsigned vi);
void directions_rechoose(void);

#endif
