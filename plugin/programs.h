/*
 * programs.h: what programs.c offers to the other units. programs.c: the programmings a
 * vCPU's register mirror may switch between without Python (docs/bridge.md, "Programming
 * writes in C").
 */
#ifndef P4PMU_PROGRAMS_H
#define P4PMU_PROGRAMS_H

#include "bridge_types.h"
#include "mirror.h"

int prog_find(const struct p4c_mirror *m, int k, int s, uint64_t value);
int prog_write_noticed(const struct p4c_mirror *m, int k, int s, uint64_t value);
void prog_switch(unsigned vi, struct p4c_mirror *m, int i);

#endif
