/*
 * install.h: what install.c offers to the other units. install.c: the plugin's entry point:
 * qemu_plugin_install (option parsing, refusing a second copy), callback registration, vCPU
 * set-up, idle/resume/interrupt callbacks and the exit report (docs/bridge.md).
 */
#ifndef P4PMU_INSTALL_H
#define P4PMU_INSTALL_H

#include "bridge_types.h"
#include "registers.h"

extern int verbose;
extern int debug;

void register_callbacks(void);

#endif
