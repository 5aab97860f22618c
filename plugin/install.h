/*
 * install.h: what install.c offers to the other units. install.c: the plugin's entry point:
 * qemu_plugin_install (option parsing, refusing a second copy), callback registration, vCPU
 * set-up, idle/resume/interrupt callbacks and the exit report (docs/bridge.md).
 */
#ifndef P4PMU_INSTALL_H
#define P4PMU_INSTALL_H

#include "bridge_types.h"
#include "p4_tables.h"
#include "registers.h"

/* The options the C side reads from the plugin's argument list (the Python side, bridge.py,
 * has validated them: an invalid one stopped the installation before they are parsed). */
struct plugin_options {
    int verbose;         /* verbose=on: report every intercepted instruction when translated */
    int count_mode;      /* count=off|auto|on: 0, 1, 2 */
    int pmi_on;          /* pmi= */
    unsigned bp_penalty; /* bp_penalty=: clocks after a misprediction, at most 60 */
    int exact_on;        /* exact= */
    int lite_on;         /* lite= */
    int threads;         /* threads=: logical processors per core, 1 or 2 */
};

extern struct plugin_options options;
extern int debug;

void options_parse(int argc, char **argv, struct plugin_options *opt);
void register_callbacks(void);

#endif
