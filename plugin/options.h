/*
 * p4pmu: the plugin's options on the C side (docs/options.md).
 *
 * struct p4_options (one field per option) and the option table come from
 * p4_options_gen.h, which plugin/build.py generates from p4pmu/plugin/options.py (OPTIONS):
 * the Python side parses with the same table, the same spellings and the same messages.
 * p4_options_parse (plugin/options.c) is the one parser.
 */
#ifndef P4PMU_OPTIONS_H
#define P4PMU_OPTIONS_H

#include <stddef.h>

enum p4_option_kind { P4_OPT_BOOL, P4_OPT_CHOICE, P4_OPT_INT, P4_OPT_TEXT };

/* One row of the table (p4_options_gen.h, P4_OPTIONS_TABLE) */
struct p4_option_spec {
    const char *name;
    enum p4_option_kind kind;
    size_t offset;             /* of the field in struct p4_options */
    const char *const *values; /* P4_OPT_CHOICE: the allowed values, NULL-terminated */
    int lo, hi;                /* P4_OPT_INT: the range */
    int nonempty;              /* P4_OPT_TEXT: an empty value is refused */
    int def_int;               /* default of an int field (-1: unset) */
    const char *def_text;      /* default of a text field (NULL: unset) */
    const char *allowed;       /* what the option accepts, as the messages say it */
};

#include "p4_options_gen.h"

/*
 * Fill *out from QEMU's plugin arguments ("name=value"; the last of a repeated option
 * counts).  Returns 0, or -1 with a message naming the option and the allowed values in
 * err (size errlen; without the "p4pmu: " prefix).  Text fields point into argv.
 */
int p4_options_parse(int argc, char **argv, struct p4_options *out, char *err, size_t errlen);

/* The table: P4_OPTION_COUNT rows */
const struct p4_option_spec *p4_options_table(void);

/* The value of option i of *o as text in its one spelling (booleans on/off; "" when unset) */
const char *p4_options_value_text(const struct p4_options *o, int i, char *buf, size_t n);

#endif
