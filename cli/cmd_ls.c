/* cli/cmd_ls.c - `nprobe ls DUMP [--calls|--tree]`: for every dump file
 * under DUMP (a dump.h5, a rank or step directory, a dump root) list the
 * entries with dtype, shape and statistics, or the calls, or the module
 * tree built from the parent links. Incomplete steps (a run that stopped
 * mid-step) are listed as far as they can be read and marked as such. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "opts.h"
#include "nprobe/calltree.h"
#include "nprobe/dumpio.h"

typedef struct ls_args {
    const char *path;
    int calls, tree;
} ls_args;

#define F(f) offsetof(ls_args, f)
/* `nprobe ls`'s arguments: parsing and --help from this one table (cli/opts.h). */
static const np_cli_opt ls_opts[] = {
    {NULL, "DUMP", NULL, NULL, NP_OPT_POS, F(path), 0, 0, NULL, 0, NULL},
    {NULL, "--calls", NULL, "one line per call: seq, kind, call, parent module, callsite",
     NP_OPT_FLAG, F(calls), 0, 0, NULL, 0, NULL},
    {NULL, "--tree", NULL, "the calls as a module tree (parent links; mix level shows\n"
                           "modules with their API calls inside)",
     NP_OPT_FLAG, F(tree), 0, 0, NULL, 0, NULL},
    {NULL, "--help", NULL, "show this help", NP_OPT_HELP, 0, 0, 0, NULL, 0, NULL},
};
#undef F
#define N_LS_OPTS ((int)(sizeof ls_opts / sizeof ls_opts[0]))

static const char ls_before[] =
    "usage: nprobe ls DUMP [--calls|--tree]\n"
    "\n"
    "List a dump. DUMP is a dump.h5 (or dump.h5.partial), a rank directory, a\n"
    "step directory or a dump root. Each file gets a header line (step, rank,\n"
    "task, level, complete or INCOMPLETE), then one line per tensor (the\n"
    "default): name, dtype, shape, max, min, mean, norm, NaN/Inf counts, '*'\n"
    "when the payload is stored; or, with\n";
static const char ls_after[] =
    "\n"
    "exit code: 0, or 2 when DUMP holds no readable dump file.\n";

static void fmt_shape(char *buf, size_t cap, const np_entry_rec *e)
{
    size_t u = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < e->ndim && i < NP_FMT_MAX_DIMS && u < cap; i++)
        u += (size_t)snprintf(buf + u, cap - u, "%s%lld", i ? "," : "",
                              (long long)e->shape[i]);
    if (u < cap)
        snprintf(buf + u, cap - u, ")");
}

static int list_entries(np_dumpio *d)
{
    np_entry_rec *e = NULL;
    size_t n = 0;
    np_error err;
    np_error_clear(&err);
    if (np_dumpio_read_entries(&e, &n, d, &err)) {
        np_cli_report(&err);
        return -1;
    }
    printf("  %-64s %-9s %-14s %13s %13s %13s %13s  %s\n", "name", "dtype", "shape", "max", "min",
           "mean", "norm", "nan/+inf/-inf");
    for (size_t i = 0; i < n; i++) {
        char shape[128], nm[4 * NP_FMT_NAME_LEN], dt[4 * NP_FMT_DTYPE_LEN];
        fmt_shape(shape, sizeof shape, &e[i]);
        np_stats st = np_fmt_entry_stats(&e[i]);
        /* names are user data: no terminal escapes pass through */
        printf("  %-64s %-9s %-14s %13.6g %13.6g %13.6g %13.6g  %lld/%lld/%lld%s\n",
               np_term_safe(nm, sizeof nm, e[i].name), np_term_safe(dt, sizeof dt, e[i].dtype),
               shape, st.max, st.min, st.mean, st.norm, (long long)st.nan_count,
               (long long)st.posinf_count, (long long)st.neginf_count, e[i].has_data ? " *" : "");
        char why[400];
        if (np_dumpio_entry_problem(np_dumpio_get_info(d), &e[i], why, sizeof why))
            np_cli_printf("    DUMP DEFECT: this row contradicts itself: %s\n", why);
    }
    printf("  %zu entr%s\n", n, n == 1 ? "y" : "ies");
    free(e);
    return 0;
}

static int list_calls(np_dumpio *d)
{
    np_call_rec *c = NULL;
    size_t n = 0;
    np_error err;
    np_error_clear(&err);
    if (np_dumpio_read_calls(&c, &n, d, &err)) {
        np_cli_report(&err);
        return -1;
    }
    printf("  %5s %-6s %-56s %-48s %s\n", "seq", "kind", "call", "parent", "callsite");
    for (size_t i = 0; i < n; i++) {
        char kd[4 * NP_FMT_KIND_LEN], cl[4 * NP_FMT_NAME_LEN], pa[4 * NP_FMT_NAME_LEN],
            cs[4 * NP_FMT_SITE_LEN];
        printf("  %5lld %-6s %-56s %-48s %s\n", (long long)c[i].seq,
               np_term_safe(kd, sizeof kd, c[i].kind), np_term_safe(cl, sizeof cl, c[i].call),
               np_term_safe(pa, sizeof pa, c[i].parent[0] ? c[i].parent : "-"),
               np_term_safe(cs, sizeof cs, c[i].callsite[0] ? c[i].callsite : "-"));
    }
    printf("  %zu call%s\n", n, n == 1 ? "" : "s");
    free(c);
    return 0;
}

/* The module tree (nprobe/calltree.h, the builder the HTML report uses). */
static int list_tree(np_dumpio *d)
{
    np_call_rec *c = NULL;
    size_t nc = 0;
    np_error err;
    np_error_clear(&err);
    if (np_dumpio_read_calls(&c, &nc, d, &err)) {
        np_cli_report(&err);
        return -1;
    }
    const char **names = malloc((2 * nc + 1) * sizeof *names);
    np_calltree *t = NULL;
    for (size_t i = 0; names && i < nc; i++) {
        names[i] = c[i].call;
        names[nc + i] = c[i].parent;
    }
    if (!names)
        np_error_set(&err, NP_ERR_NOMEM, NULL, NULL, "out of memory listing %zu calls", nc);
    if (!names || np_calltree_build(&t, names, names + nc, nc, &err) != NP_OK) {
        np_cli_report(&err);
        free(names);
        free(c);
        return -1;
    }
    for (int i = t->first_root; i >= 0; i = np_calltree_next(t, i)) {
        const np_calltree_node *v = &t->nodes[i];
        int ind = v->depth < 64 ? v->depth : 64;
        char nm[4 * NP_FMT_NAME_LEN]; /* names are user data: no terminal escapes */
        printf("  %*s%s%s%s\n", ind * 2, "", np_term_safe(nm, sizeof nm, v->name),
               v->call < 0 ? "  (not dumped)" : "",
               v->call >= 0 && strcmp(c[v->call].kind, "module") == 0 ? "  [module]" : "");
    }
    printf("  %zu call%s\n", nc, nc == 1 ? "" : "s");
    np_calltree_free(t);
    free(names);
    free(c);
    return 0;
}

static void print_header(const np_dumpio_ref *ref, const np_dumpio_info *in, int complete)
{
    char ls[128] = "";
    if (in->loss_scale != 1.0)
        snprintf(ls, sizeof ls, ", gradients x loss scale %.17g", in->loss_scale);
    if (in->dp_grad_scale != 1.0 && in->dp_grad_scale > 0) {
        size_t u = strlen(ls);
        snprintf(ls + u, sizeof ls - u, ", gradients x data-parallel factor %.17g",
                 in->dp_grad_scale);
    }
    /* the strings come from the file (a msprobe dump.json's task ...) */
    np_cli_printf("step %lld rank %lld: %s\n  task %s, level %s, %s on %s (%s)%s%s\n",
           (long long)in->step, (long long)in->rank, ref->path, in->task, in->level,
           in->framework, in->device, in->precision, ls,
           complete ? ", complete"
                    : ", INCOMPLETE: the run stopped during this step; listing what was "
                      "flushed");
    if (in->problems[0])
        np_cli_printf("  DUMP DEFECT: root attribute %s\n", in->problems);
    if (ref->step >= 0 && in->step >= 0 && ref->step != in->step)
        np_cli_printf("  DUMP DEFECT: the step attribute is %lld but the folder is step%d\n",
                      (long long)in->step, ref->step);
    if (ref->rank >= 0 && in->rank >= 0 && ref->rank != in->rank)
        np_cli_printf("  DUMP DEFECT: the rank attribute is %lld but the folder is rank%d\n",
                      (long long)in->rank, ref->rank);
}

int np_cmd_ls(int argc, char **argv)
{
    ls_args a = {0};
    int rc = np_cli_opts_parse(ls_opts, N_LS_OPTS, &a, "ls", ls_before, ls_after, argc, argv);
    if (rc)
        return rc - 1;
    const char *path = a.path;
    int mode = a.tree ? 2 : a.calls ? 1 : 0;
    if (!path) {
        np_cli_opts_help(stderr, ls_before, ls_opts, N_LS_OPTS, ls_after);
        np_cli_error("ls: missing arguments (see 'nprobe ls --help')");
        return NP_EXIT_USAGE;
    }
    np_dumpio_ref *refs = NULL;
    size_t n = 0;
    np_dumpio_checker *chk = NULL;
    if ((rc = np_cli_find_checked(&refs, &n, &chk, path)) != 0)
        return rc;
    np_error err;
    int readable = 0;
    for (size_t i = 0; i < n; i++) {
        if (refs[i].state == NP_DUMPIO_TEMP || refs[i].state == NP_DUMPIO_MISSING)
            continue;
        np_dumpio *d = NULL;
        np_error_clear(&err);
        if (np_dumpio_checker_wait(chk, i, &err) ||
            np_dumpio_open_ref(&d, &refs[i], NP_DUMPIO_CHECKED, &err)) {
            np_cli_printf("step %d rank %d: %s\n  %s: %s\n", refs[i].step, refs[i].rank,
                          refs[i].path,
                          err.status == NP_ERR_INCOMPLETE ? "INCOMPLETE" : "UNREADABLE", err.text);
            continue;
        }
        const np_dumpio_info *in = np_dumpio_get_info(d);
        int complete = in->complete && refs[i].state == NP_DUMPIO_COMPLETE;
        print_header(&refs[i], in, complete);
        /* a file whose table cannot be read is not a readable dump file */
        int bad = mode == 0 ? list_entries(d) : mode == 1 ? list_calls(d) : list_tree(d);
        readable += bad == 0;
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
