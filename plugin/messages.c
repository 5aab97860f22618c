/*
 * p4pmu: the one way the C side prints -- a message formatted here and handed to QEMU's
 * plugin output, qemu_plugin_outs (QEMU's log with -d plugin: stderr, or the file of -D).
 * p4pmu's QEMU command lines always add -d plugin (qemu_glue/qemu_command.py).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "messages.h"
#include "qemu_plugin_api.h"

#define MESSAGE_INLINE 512 /* longer messages are formatted into a buffer of their size */

void p4_message(const char *fmt, ...)
{
    char small[MESSAGE_INLINE];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof(small)) {
        qemu_plugin_outs(small);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        qemu_plugin_outs(small); /* cut short rather than lost */
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    qemu_plugin_outs(big);
    free(big);
}
