/* cli/cmd_ls.c - `nprobe ls DUMP [--calls|--tree]`: for every dump file
 * under DUMP (a dump.h5, a rank or step directory, a dump root) list the
 * entries with dtype, shape and statistics, or the calls, or the module
 * tree built from the parent links. Incomplete steps (a run that stopped
 * mid-step) are listed as far as they can be read and marked as such. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "nprobe/dumpio.h"

static void help(FILE *out)
{
    fprintf(out,
            "usage: nprobe ls DUMP [--calls|--tree]\n"
            "\n"
            "List a dump. DUMP is a dump.h5 (or dump.h5.partial), a rank directory, a\n"
            "step directory or a dump root. Each file gets a header line (step, rank,\n"
            "task, level, complete or INCOMPLETE), then:\n"
            "  (default)  one line per tensor: name, dtype, shape, max, min, mean, norm,\n"
            "             NaN/Inf counts, '*' when the payload is stored\n"
            "  --calls    one line per call: seq, kind, call, parent module, callsite\n"
            "  --tree     the calls as a module tree (parent links; mix level shows\n"
            "             modules with their API calls inside)\n"
            "\n"
            "exit code: 0, or 2 when DUMP holds no readable dump file.\n");
}

static void fmt_shape(char *buf, size_t cap, const np_entry_rec *e)
{
    size_t u = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < e->ndim && i < NP_FMT_MAX_DIMS && u < cap; i++)
        u += (size_t)snprintf(buf + u, cap - u, "%s%lld", i ? "," : "",
                              (long long)e->shape[i]);
    if (u < cap)
        snprintf(buf + u, cap - u, ")");
}

static void list_entries(np_dumpio *d)
{
    np_entry_rec *e = NULL;
    size_t n = 0;
    np_error err;
    np_error_clear(&err);
    if (np_dumpio_read_entries(&e, &n, d, &err)) {
        np_cli_report(&err);
        return;
    }
    printf("  %-64s %-9s %-14s %13s %13s %13s %13s  %s\n", "name", "dtype", "shape", "max", "min",
           "mean", "norm", "nan/+inf/-inf");
    for (size_t i = 0; i < n; i++) {
        char shape[128];
        fmt_shape(shape, sizeof shape, &e[i]);
        printf("  %-64s %-9s %-14s %13.6g %13.6g %13.6g %13.6g  %lld/%lld/%lld%s\n", e[i].name,
               e[i].dtype, shape, e[i].max, e[i].min, e[i].mean, e[i].norm,
               (long long)e[i].nan_count, (long long)e[i].posinf_count,
               (long long)e[i].neginf_count, e[i].has_data ? " *" : "");
    }
    printf("  %zu entr%s\n", n, n == 1 ? "y" : "ies");
    free(e);
}

static void list_calls(np_dumpio *d)
{
    np_call_rec *c = NULL;
    size_t n = 0;
    np_error err;
    np_error_clear(&err);
    if (np_dumpio_read_calls(&c, &n, d, &err)) {
        np_cli_report(&err);
        return;
    }
    printf("  %5s %-6s %-56s %-48s %s\n", "seq", "kind", "call", "parent", "callsite");
    for (size_t i = 0; i < n; i++)
        printf("  %5lld %-6s %-56s %-48s %s\n", (long long)c[i].seq, c[i].kind, c[i].call,
               c[i].parent[0] ? c[i].parent : "-", c[i].callsite[0] ? c[i].callsite : "-");
    printf("  %zu call%s\n", n, n == 1 ? "" : "s");
    free(c);
}

/* Tree nodes: the calls plus parents named but not dumped (L1 level). */
typedef struct node {
    const char *name, *kind, *parent;
    int parent_idx;
    int present;
} node;

static int find_node(const node *v, int n, const char *name)
{
    for (int i = n - 1; i >= 0; i--)
        if (strcmp(v[i].name, name) == 0)
            return i;
    return -1;
}

static void print_tree(const node *v, int n, int at, int depth)
{
    printf("  %*s%s%s%s\n", depth * 2, "", v[at].name,
           v[at].present ? "" : "  (not dumped)",
           v[at].present && strcmp(v[at].kind, "module") == 0 ? "  [module]" : "");
    for (int i = 0; i < n; i++)
        if (v[i].parent_idx == at && depth < 64)
            print_tree(v, n, i, depth + 1);
}

static void list_tree(np_dumpio *d)
{
    np_call_rec *c = NULL;
    size_t nc = 0;
    np_error err;
    np_error_clear(&err);
    if (np_dumpio_read_calls(&c, &nc, d, &err)) {
        np_cli_report(&err);
        return;
    }
    node *v = calloc(2 * nc + 1, sizeof *v);
    if (!v) {
        free(c);
        return;
    }
    int n = 0;
    for (size_t i = 0; i < nc; i++)
        v[n++] = (node){c[i].call, c[i].kind, c[i].parent, -1, 1};
    int base = n;
    for (int i = 0; i < base; i++) {
        if (!v[i].parent[0])
            continue;
        int p = find_node(v, n, v[i].parent);
        if (p == i)
            continue;
        if (p < 0) {
            v[n] = (node){v[i].parent, "module", "", -1, 0};
            p = n++;
        }
        v[i].parent_idx = p;
    }
    /* Roots in order of appearance: a virtual parent at its first child. */
    int *printed = calloc(n > 0 ? (size_t)n : 1, sizeof *printed);
    for (int i = 0; printed && i < base; i++) {
        int r = i;
        for (int hops = 0; v[r].parent_idx >= 0 && v[r].parent_idx != r && hops < n; hops++)
            r = v[r].parent_idx;
        if (!printed[r]) {
            printed[r] = 1;
            print_tree(v, n, r, 0);
        }
    }
    printf("  %zu call%s\n", nc, nc == 1 ? "" : "s");
    free(printed);
    free(v);
    free(c);
}

static void print_header(const np_dumpio_ref *ref, const np_dumpio_info *in, int complete)
{
    char ls[64] = "";
    if (in->loss_scale != 1.0)
        snprintf(ls, sizeof ls, ", gradients x loss scale %.17g", in->loss_scale);
    printf("step %lld rank %lld: %s\n  task %s, level %s, %s on %s (%s)%s%s\n",
           (long long)in->step, (long long)in->rank, ref->path, in->task, in->level,
           in->framework, in->device, in->precision, ls,
           complete ? ", complete"
                    : ", INCOMPLETE: the run stopped during this step; listing what was "
                      "flushed");
}

int np_cmd_ls(int argc, char **argv)
{
    const char *path = NULL;
    int mode = 0;
    for (int i = 1; i < argc; i++) {
        if (np_cli_is_help(argv[i])) {
            help(stdout);
            return NP_EXIT_OK;
        }
        if (strcmp(argv[i], "--calls") == 0)
            mode = 1;
        else if (strcmp(argv[i], "--tree") == 0)
            mode = 2;
        else if (argv[i][0] == '-') {
            np_cli_error("ls: unknown option '%s' (see 'nprobe ls --help')", argv[i]);
            return NP_EXIT_USAGE;
        } else if (path) {
            np_cli_error("ls: one DUMP only, got '%s' and '%s'", path, argv[i]);
            return NP_EXIT_USAGE;
        } else
            path = argv[i];
    }
    if (!path) {
        help(stderr);
        np_cli_error("ls: missing arguments (see 'nprobe ls --help')");
        return NP_EXIT_USAGE;
    }
    np_error err;
    np_error_clear(&err);
    np_dumpio_ref *refs = NULL;
    size_t n = 0;
    if (np_dumpio_find(&refs, &n, path, &err)) {
        np_cli_report(&err);
        return NP_EXIT_USAGE;
    }
    np_dumpio_checker *chk = NULL;
    if (np_dumpio_checker_start(&chk, refs, n, &err)) {
        np_cli_report(&err);
        free(refs);
        return NP_EXIT_USAGE;
    }
    int readable = 0;
    for (size_t i = 0; i < n; i++) {
        if (refs[i].state == NP_DUMPIO_TEMP || refs[i].state == NP_DUMPIO_MISSING)
            continue;
        np_dumpio *d = NULL;
        np_error_clear(&err);
        if (np_dumpio_checker_wait(chk, i, &err) ||
            np_dumpio_open_ref(&d, &refs[i], NP_DUMPIO_CHECKED, &err)) {
            printf("step %d rank %d: %s\n  %s: %s\n", refs[i].step, refs[i].rank, refs[i].path,
                   err.status == NP_ERR_INCOMPLETE ? "INCOMPLETE" : "UNREADABLE", err.text);
            continue;
        }
        readable++;
        const np_dumpio_info *in = np_dumpio_get_info(d);
        int complete = in->complete && refs[i].state == NP_DUMPIO_COMPLETE;
        print_header(&refs[i], in, complete);
        if (mode == 0)
            list_entries(d);
        else if (mode == 1)
            list_calls(d);
        else
            list_tree(d);
        np_dumpio_close(d);
    }
    np_dumpio_checker_free(chk);
    free(refs);
    if (!readable) {
        np_cli_error("%s: no readable dump file", path);
        return NP_EXIT_USAGE;
    }
    return NP_EXIT_OK;
}
