/*
 * p4pmu: the one parser of the plugin's options on the C side (docs/options.md).
 *
 * Table-driven: every rule (names, kinds, allowed values, ranges, defaults, the messages'
 * "expected ..." texts) comes from p4_options_gen.h, generated from p4pmu/plugin/options.py,
 * whose parse() applies the same rules on the Python side.  Booleans take exactly what
 * QEMU's qemu_plugin_bool_parse takes (on/yes/true/y, off/no/false/n); numbers are decimal,
 * or hexadecimal after 0x.  A compiled unit of its own, with no QEMU dependency (the tests
 * build it into a small program: tests/test_options.py).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define P4_OPTIONS_TABLE
#include "options.h"

static int *int_field(struct p4_options *o, const struct p4_option_spec *s)
{
    return (int *)((char *)o + s->offset);
}

static const char **text_field(struct p4_options *o, const struct p4_option_spec *s)
{
    return (const char **)((char *)o + s->offset);
}

static int word_index(const char *const *words, const char *v)
{
    for (int i = 0; words[i]; i++) {
        if (!strcmp(words[i], v)) return i;
    }
    return -1;
}

/* decimal digits, or 0x/0X and hexadecimal digits; -1 if neither or above INT32_MAX */
static long long number(const char *v)
{
    int hex = v[0] == '0' && (v[1] == 'x' || v[1] == 'X');
    const char *p = hex ? v + 2 : v;
    const char *digits = hex ? "0123456789abcdefABCDEF" : "0123456789";
    if (!*p || strspn(p, digits) != strlen(p)) return -1;
    long long n = 0;
    for (; *p; p++) {
        int d = *p <= '9' ? *p - '0' : (*p | 0x20) - 'a' + 10;
        n = n * (hex ? 16 : 10) + d;
        if (n > INT32_MAX) return -1;
    }
    return n;
}

/* Set one option from its value text; 0, or -1 if the value is not allowed */
static int set_value(struct p4_options *o, const struct p4_option_spec *s, const char *v)
{
    int *f = int_field(o, s);
    switch (s->kind) {
    case P4_OPT_BOOL: {
        int on = word_index(p4_opt_true_words, v) >= 0;
        if (!on && word_index(p4_opt_false_words, v) < 0) return -1;
        *f = on;
        return 0;
    }
    case P4_OPT_CHOICE: {
        int i = word_index(s->values, v);
        if (i < 0) return -1;
        *f = i;
        return 0;
    }
    case P4_OPT_INT: {
        long long n = number(v);
        if (n < s->lo || n > s->hi) return -1;
        *f = (int)n;
        return 0;
    }
    case P4_OPT_TEXT:
        if (s->nonempty && !*v) return -1;
        *text_field(o, s) = v;
        return 0;
    }
    return -1;
}

static void set_defaults(struct p4_options *o)
{
    for (int i = 0; i < P4_OPTION_COUNT; i++) {
        const struct p4_option_spec *s = &p4_option_specs[i];
        if (s->kind == P4_OPT_TEXT) {
            *text_field(o, s) = s->def_text;
        } else {
            *int_field(o, s) = s->def_int;
        }
    }
}

static const struct p4_option_spec *find(const char *name, size_t len)
{
    for (int i = 0; i < P4_OPTION_COUNT; i++) {
        const char *n = p4_option_specs[i].name;
        if (strlen(n) == len && !strncmp(n, name, len)) return &p4_option_specs[i];
    }
    return NULL;
}

int p4_options_parse(int argc, char **argv, struct p4_options *out, char *err, size_t errlen)
{
    set_defaults(out);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *eq = strchr(a, '=');
        if (!eq) {
            snprintf(err, errlen, "plugin option '%s' is not key=value; known options: %s", a,
                     P4_OPTION_NAMES);
            return -1;
        }
        const struct p4_option_spec *s = find(a, (size_t)(eq - a));
        if (!s) {
            snprintf(err, errlen, "unknown plugin option '%.*s'; known options: %s", (int)(eq - a),
                     a, P4_OPTION_NAMES);
            return -1;
        }
        if (set_value(out, s, eq + 1) < 0) {
            if (s->kind == P4_OPT_TEXT) {
                snprintf(err, errlen, "option %s='': needs %s", s->name, s->allowed);
            } else {
                snprintf(err, errlen, "option %s='%s': expected %s", s->name, eq + 1, s->allowed);
            }
            return -1;
        }
    }
    return 0;
}

const struct p4_option_spec *p4_options_table(void)
{
    return p4_option_specs;
}

const char *p4_options_value_text(const struct p4_options *o, int i, char *buf, size_t n)
{
    const struct p4_option_spec *s = &p4_option_specs[i];
    struct p4_options *w = (struct p4_options *)o;
    if (s->kind == P4_OPT_TEXT) {
        const char *t = *text_field(w, s);
        snprintf(buf, n, "%s", t ? t : "");
        return buf;
    }
    int v = *int_field(w, s);
    if (v < 0) {
        snprintf(buf, n, "%s", "");
    } else if (s->kind == P4_OPT_BOOL) {
        snprintf(buf, n, "%s", v ? "on" : "off");
    } else if (s->kind == P4_OPT_CHOICE) {
        snprintf(buf, n, "%s", s->values[v]);
    } else {
        snprintf(buf, n, "%d", v);
    }
    return buf;
}
