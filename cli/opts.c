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

static int opt_double(const char *opt, const char *text, double lo, double *out)
{
    char *end = NULL;
    double v = strtod(text, &end);
    if (!*text || *end || !isfinite(v) || v < lo) {
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
        if (t[i].group)
            fprintf(out, "\n%s\n", t[i].group);
        char head[64];
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

static const np_cli_opt *find(const np_cli_opt *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return &t[i];
    return NULL;
}

/* One option's value into its field; 1 when bad (reported). */
static int set_value(const np_cli_opt *o, void *args, const char *v)
{
    char *field = (char *)args + o->off;
    switch (o->kind) {
    case NP_OPT_CHOICE:
        memcpy(field, &v, sizeof v);
        return np_cli_opt_choice(o->name, v, o->choices, o->n_choices) < 0;
    case NP_OPT_CHECKED:
        memcpy(field, &v, sizeof v);
        return o->check(o->name, v);
    case NP_OPT_LONG:
        return np_cli_parse_int(o->name, v, o->lo, o->hi, (long *)(void *)field) != 0;
    case NP_OPT_DOUBLE:
        return opt_double(o->name, v, (double)o->lo, (double *)(void *)field) != 0;
    default:
        memcpy(field, &v, sizeof v);
        return 0;
    }
}

int np_cli_opts_parse(const np_cli_opt *t, int n, void *args, const char *cmd, const char *before,
                      const char *after, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (np_cli_is_help(a)) {
            np_cli_opts_help(stdout, before, t, n, after);
            return NP_EXIT_OK + 1;
        }
        const np_cli_opt *o = find(t, n, a);
        if (o && o->kind == NP_OPT_FLAG) {
            *(int *)(void *)((char *)args + o->off) = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            np_cli_error("%s: unexpected argument '%s' (see 'nprobe %s --help')", cmd, a, cmd);
            return NP_EXIT_USAGE + 1;
        }
        if (i + 1 >= argc) {
            np_cli_error("%s: missing value (see 'nprobe %s --help')", a, cmd);
            return NP_EXIT_USAGE + 1;
        }
        const char *v = argv[++i];
        if (!o || o->kind == NP_OPT_HELP) {
            np_cli_error("%s: unknown option '%s' (see 'nprobe %s --help')", cmd, a, cmd);
            return NP_EXIT_USAGE + 1;
        }
        if (set_value(o, args, v))
            return NP_EXIT_USAGE + 1;
    }
    return 0;
}
