/*
 * install.h: what install.c offers to the other units. install.c: the plugin's entry point:
 * qemu_plugin_install (option parsing, refusing a second copy), callback registration, vCPU
 * set-up, idle/resume/interrupt callbacks and the exit report (docs/bridge.md).
 */
#ifndef P4PMU_INSTALL_H
#define P4PMU_INSTALL_H

#include "bridge_types.h"
#include "options.h"
#include "p4_tables.h"
#include "registers.h"

/* The plugin's options, parsed once at install by the one parser over the generated table
 * (plugin/options.c; docs/options.md) */

void register_callbacks(void);

#endif
