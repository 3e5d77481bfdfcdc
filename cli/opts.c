/* cli/opts.c - option tables (opts.h): parsing and --help from one table. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "opts.h"

int np_cli_opt_choice(const char *opt, const char *text, const char *const *allowed, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(text, allowed[i]) == 0)
            return i;
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        strncat(list, allowed[i], sizeof list - strlen(list) - 1);
        if (i + 1 < n)
            strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    np_cli_error("%s: expected one of %s, got '%s'", opt, list, text);
    return -1;
}

static int opt_double(const char *opt, const char *text, double lo, double hi, double *out)
{
    char *end = NULL;
    double v = strtod(text, &end);
    int bounded = hi > lo;
    if (!*text || *end || !isfinite(v) || v < lo || (bounded && v > hi)) {
        if (bounded)
            np_cli_error("%s: expected a number in [%g, %g], got '%s'", opt, lo, hi, text);
        else
            np_cli_error("%s: expected a number >= %g, got '%s'", opt, lo, text);
        return -1;
    }
    *out = v;
    return 0;
}

void np_cli_opts_help(FILE *out, const char *before, const np_cli_opt *t, int n, const char *after)
{
    fputs(before, out);
    for (int i = 0; i < n; i++) {
        if ((t[i].kind == NP_OPT_POS || t[i].kind == NP_OPT_POS_LIST || t[i].kind == NP_OPT_REST) &&
            !t[i].help)
            continue;
        if (t[i].group)
            fprintf(out, "\n%s\n", t[i].group);
        char head[64];
        const char *bar = strchr(t[i].name, '|');
        if (bar)        /* "-b|--bench" */
            snprintf(head, sizeof head, "%.*s, %s%s", (int)(bar - t[i].name), t[i].name, bar + 1,
                     t[i].arg ? " " : "");
        else
            snprintf(head, sizeof head, "%s%s%s", t[i].kind == NP_OPT_HELP ? "-h, " : "", t[i].name,
                     t[i].arg ? " " : "");
        if (t[i].arg)
            strncat(head, t[i].arg, sizeof head - strlen(head) - 1);
        const char *h = t[i].help;
        if (strlen(head) > 20)
            fprintf(out, "  %s\n%24s", head, "");
        else
            fprintf(out, "  %-20s  ", head);
        for (const char *nl; (nl = strchr(h, '\n')); h = nl + 1)
            fprintf(out, "%.*s\n%24s", (int)(nl - h), h, "");
        fprintf(out, "%s\n", h);
    }
    fputs(after, out);
}

/* Whether an entry's name ("--x", or "-x|--x") is `a`. */
static int named(const np_cli_opt *o, const char *a)
{
    const char *bar = strchr(o->name, '|');
    if (!bar)
        return strcmp(o->name, a) == 0;
    return strcmp(bar + 1, a) == 0 ||
           (strlen(a) == (size_t)(bar - o->name) && strncmp(o->name, a, (size_t)(bar - o->name)) == 0);
}

/* The long name of an entry. */
static const char *long_name(const np_cli_opt *o)
{
    const char *bar = strchr(o->name, '|');
    return bar ? bar + 1 : o->name;
}

/* Whether an entry is an option (not a positional or the '--' rest). */
static int is_option(const np_cli_opt *o)
{
    return o->kind != NP_OPT_POS && o->kind != NP_OPT_POS_LIST && o->kind != NP_OPT_REST;
}

static const np_cli_opt *find(const np_cli_opt *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (is_option(&t[i]) && named(&t[i], name))
            return &t[i];
    return NULL;
}

/* The positional entry after `from` (-1: the first), or -1; a list takes
 * every positional argument after the single ones. */
static int next_pos(const np_cli_opt *t, int n, int from)
{
    if (from >= 0 && t[from].kind == NP_OPT_POS_LIST)
        return from;
    for (int i = from + 1; i < n; i++)
        if (t[i].kind == NP_OPT_POS || t[i].kind == NP_OPT_POS_LIST)
            return i;
    return -1;
}

static void unknown(const np_cli_opt *t, int n, const char *cmd, const char *a)
{
    const char *names[64];
    int k = 0;
    for (int i = 0; i < n && k < 64; i++)
        if (is_option(&t[i]))
            names[k++] = long_name(&t[i]);
    int near = np_closest_word(a, names, k);
    if (near >= 0)
        np_cli_error("%s: unknown option '%s'; did you mean '%s'?", cmd, a, names[near]);
    else
        np_cli_error("%s: unknown option '%s' (see 'nprobe %s --help')", cmd, a, cmd);
}

/* One option's value into its field; 1 when bad (reported). */
static int set_value(const np_cli_opt *o, void *args, const char *v)
{
    char *field = (char *)args + o->off;
    const char *name = long_name(o);
    switch (o->kind) {
    case NP_OPT_CHOICE:
        memcpy(field, &v, sizeof v);
        return np_cli_opt_choice(name, v, o->choices, o->n_choices) < 0;
    case NP_OPT_CHECKED:
        memcpy(field, &v, sizeof v);
        return o->check(name, v);
    case NP_OPT_LONG:
        return np_cli_parse_int(name, v, o->lo, o->hi, (long *)(void *)field) != 0;
    case NP_OPT_INT: {
        long x;
        if (np_cli_parse_int(name, v, o->lo, o->hi, &x) != 0)
            return 1;
        *(int *)(void *)field = (int)x;
        return 0;
    }
    case NP_OPT_APPEND:
    case NP_OPT_POS_LIST: {
        np_cli_list *l = (np_cli_list *)(void *)field;
        if (l->n >= l->cap) {
            np_cli_error("%s: at most %d of them", name, l->cap);
            return 1;
        }
        l->items[l->n++] = v;
        return 0;
    }
    case NP_OPT_DOUBLE:
        return opt_double(name, v, (double)o->lo, (double)o->hi, (double *)(void *)field) != 0;
    default:
        memcpy(field, &v, sizeof v);
        return 0;
    }
}

int np_cli_opts_parse(const np_cli_opt *t, int n, void *args, const char *cmd, const char *before,
                      const char *after, int argc, char **argv)
{
    int pos = next_pos(t, n, -1);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (np_cli_is_help(a)) {
            np_cli_opts_help(stdout, before, t, n, after);
            return NP_EXIT_OK + 1;
        }
        if (strcmp(a, "--") == 0) {
            for (int k = 0; k < n; k++)
                if (t[k].kind == NP_OPT_REST) {
                    *(int *)(void *)((char *)args + t[k].off) = i + 1;
                    return 0;
                }
        }
        const np_cli_opt *o = find(t, n, a);
        if (o && o->kind == NP_OPT_FLAG) {
            *(int *)(void *)((char *)args + o->off) = 1;
            continue;
        }
        if (!o && a[0] != '-' && pos >= 0) {
            if (t[pos].kind == NP_OPT_POS_LIST && set_value(&t[pos], args, a))
                return NP_EXIT_USAGE + 1;
            if (t[pos].kind == NP_OPT_POS)
                memcpy((char *)args + t[pos].off, &a, sizeof a);
            pos = next_pos(t, n, pos);
            continue;
        }
        if (a[0] != '-' || (!o && strncmp(a, "--", 2) != 0)) {
            const np_cli_opt *rest = NULL;
            for (int k = 0; k < n; k++)
                if (t[k].kind == NP_OPT_REST)
                    rest = &t[k];
            if (a[0] == '-')
                unknown(t, n, cmd, a);
            else if (rest)
                np_cli_error("%s: unexpected argument '%s'; put the %s after '--' (see 'nprobe %s --help')",
                             cmd, a, rest->arg ? rest->arg : "rest", cmd);
            else
                np_cli_error("%s: unexpected argument '%s' (see 'nprobe %s --help')", cmd, a, cmd);
            return NP_EXIT_USAGE + 1;
        }
        if (!o || o->kind == NP_OPT_HELP) {
            unknown(t, n, cmd, a);
            return NP_EXIT_USAGE + 1;
        }
        if (i + 1 >= argc) {
            np_cli_error("%s: missing value (see 'nprobe %s --help')", a, cmd);
            return NP_EXIT_USAGE + 1;
        }
        const char *v = argv[++i];
        if (set_value(o, args, v))
            return NP_EXIT_USAGE + 1;
    }
    return 0;
}
