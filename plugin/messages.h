/*
 * messages.h: what messages.c offers to the other units.  messages.c: every message of the C
 * side -- warnings, errors, the P4PMU_DEBUG trace -- formatted and handed to QEMU's plugin
 * output (qemu_plugin_outs: QEMU's log, shown with -d plugin, on stderr unless -D FILE).
 */
#ifndef P4PMU_MESSAGES_H
#define P4PMU_MESSAGES_H

/* Format a message (printf-style, ending in a newline) and print it through QEMU. */
void p4_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
