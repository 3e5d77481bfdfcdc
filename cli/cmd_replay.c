/* cli/cmd_replay.c - `nprobe replay DUMP [-o DIR] ...`: recompute every
 * dumped API call in float64 (include/internal/nprobe/replay.h), print per step and
 * rank the counts and the calls whose isolated error exceeds its budget,
 * write the reports. One table drives parsing, usage and help. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "cmd.h"
#include "opts.h"
#include "nprobe/dumpio.h"
#include "nprobe/replay.h"

typedef struct rp_args {
    const char *dump, *out, *format;
    long step, rank, top;
    double budget_scale;
} rp_args;

static int bad_formats(const char *opt, const char *v);

#define F(f) offsetof(rp_args, f)
/* `nprobe replay`'s options: parsing and --help from this one table (cli/opts.h). */
static const np_cli_opt rp_opts[] = {
    {NULL, "DUMP", NULL, NULL, NP_OPT_POS, F(dump), 0, 0, NULL, 0, NULL},
    {NULL, "-o|--out", "DIR", "write the reports into DIR (created; default: no report files)",
     NP_OPT_STR, F(out), 0, 0, NULL, 0, NULL},
    {NULL, "--format", "LIST", "report formats, comma-separated: xlsx, csv, json (xlsx)",
     NP_OPT_CHECKED, F(format), 0, 0, NULL, 0, bad_formats},
    {NULL, "--step", "N", "only step N", NP_OPT_LONG, F(step), 0, 1L << 40, NULL, 0, NULL},
    {NULL, "--rank", "N", "only rank N", NP_OPT_LONG, F(rank), 0, 1L << 30, NULL, 0, NULL},
    {NULL, "--top", "N", "print at most N exceeding calls per step and rank (10)", NP_OPT_LONG, F(top),
     0, 1L << 30, NULL, 0, NULL},
    {NULL, "--budget-scale", "X", "multiply every budget by X, X > 0 (1)", NP_OPT_DOUBLE,
     F(budget_scale), 0, 0, NULL, 0, NULL},
    {NULL, "--help", NULL, "this help", NP_OPT_HELP, 0, 0, 0, NULL, 0, NULL},
};
#undef F
#define N_RP_OPTS ((int)(sizeof rp_opts / sizeof rp_opts[0]))

static const char rp_before[] =
    "usage: nprobe replay DUMP [options]\n"
    "\n"
    "Recompute every API call of a tensor-task dump in float64 from its dumped\n"
    "inputs and scalar arguments (forward), or from the dumped forward inputs and\n"
    "incoming gradients (backward), and report each call's isolated error: the\n"
    "dumped output against the float64 result, in units of the rounding of the\n"
    "output's dtype (u = 2^-24 float32, 2^-8 bfloat16, 2^-11 float16), per element\n"
    "relative to the sum of the absolute values of the terms that make it.\n"
    "A correct op stays within its budget (float32 256 u, bfloat16/float16 8 u,\n"
    "shape ops 0.5 u; docs/COMPARE.md); calls without a float64 reference or\n"
    "with inputs missing from the dump are listed as not recomputable.\n"
    "Two known defects that stay inside one rounding are told by their\n"
    "pattern instead (\"defect signature\"): a softmax/attention computed in\n"
    "float16 without max subtraction, and a GELU of the other form (tanh/erf).\n"
    "DUMP is a dump root, a step or rank directory or a dump.h5.\n"
    "\noptions:\n";

static const char rp_after[] =
    "\nexit code: 0 every recomputed call within its budget, 1 a call exceeds it,\n"
    "2 usage or input error (no dump, unreadable file).\n";

/* --format LIST: 1 (after the error) unless every item is xlsx, csv or json. */
static int bad_formats(const char *opt, const char *v)
{
    for (const char *f = v; *f;) {
        size_t n = strcspn(f, ",");
        if (!((n == 4 && strncmp(f, "xlsx", 4) == 0) || (n == 3 && strncmp(f, "csv", 3) == 0) ||
              (n == 4 && strncmp(f, "json", 4) == 0))) {
            np_cli_error("%s: expected xlsx, csv or json (comma-separated), got '%.*s'", opt, (int)n, f);
            return 1;
        }
        f += n + (f[n] == ',');
    }
    return 0;
}

/* Parse argv into a; 0, or an exit code + 1 to leave with. */
static int parse_args(rp_args *a, int argc, char **argv)
{
    int rc = np_cli_opts_parse(rp_opts, N_RP_OPTS, a, "replay", rp_before, rp_after, argc, argv);
    if (rc)
        return rc;
    if (!(a->budget_scale > 0)) {
        np_cli_error("--budget-scale: expected a positive number, got '%g'", a->budget_scale);
        return NP_EXIT_USAGE + 1;
    }
    if (!a->dump) {
        np_cli_error("replay: a DUMP is required (see 'nprobe replay --help')");
        return NP_EXIT_USAGE + 1;
    }
    return 0;
}

static int by_ratio(const void *x, const void *y)
{
    const np_replay_call *a = *(const np_replay_call *const *)x;
    const np_replay_call *b = *(const np_replay_call *const *)y;
    return a->ratio < b->ratio ? 1 : a->ratio > b->ratio ? -1 : 0;
}

static void print_result(const np_replay_result *r, long top)
{
    np_cli_printf("step %lld rank %lld (%s on %s, %s): %zu calls: %zu pass, %zu exceed, %zu not "
           "recomputable (%.2f s)\n",
           (long long)r->step, (long long)r->rank, r->task, r->device, r->precision, r->n_calls,
           r->count[NP_REPLAY_PASS], r->count[NP_REPLAY_EXCEEDS], r->count[NP_REPLAY_SKIPPED],
           r->seconds);
    const np_replay_call **ex = malloc((r->count[NP_REPLAY_EXCEEDS] + 1) * sizeof *ex);
    size_t n = 0;
    for (size_t i = 0; ex && i < r->n_calls; i++)
        if (r->calls[i].status == NP_REPLAY_EXCEEDS)
            ex[n++] = &r->calls[i];
    if (ex)
        qsort(ex, n, sizeof *ex, by_ratio);
    for (size_t i = 0; ex && i < n && (long)i < top; i++)
        np_cli_printf("  %s: %s  %.3g u (%.3g x the budget): %s\n",
               ex[i]->signature ? "defect signature" : "exceeds", ex[i]->name, ex[i]->err_units,
               ex[i]->ratio, ex[i]->reason);
    if ((long)n > top)
        printf("  ... %zu more exceeding calls in the report\n", n - (size_t)top);
    free(ex);
    size_t shown = 0;
    for (size_t i = 0; i < r->n_calls && shown < 5; i++)
        if (r->calls[i].status == NP_REPLAY_SKIPPED) {
            np_cli_printf("  not recomputable: %s: %s\n", r->calls[i].name, r->calls[i].reason);
            shown++;
        }
    if (r->count[NP_REPLAY_SKIPPED] > shown)
        printf("  ... %zu more not recomputable calls in the report\n",
               r->count[NP_REPLAY_SKIPPED] - shown);
}

static int has_format(const char *list, const char *f)
{
    size_t n = strlen(f);
    for (const char *p = list; *p;) {
        size_t k = strcspn(p, ",");
        if (k == n && strncmp(p, f, n) == 0)
            return 1;
        p += k + (p[k] == ',');
    }
    return 0;
}

static int write_reports(const np_replay_result *r, const rp_args *a)
{
    char base[256], name[300], path[4400];
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d%H%M%S", &tm);
    static const char *const exts[] = {"xlsx", "csv", "json"};
    snprintf(base, sizeof base, "replay_result_rank%lld_step%lld_%s", (long long)r->rank,
             (long long)r->step, stamp);
    np_error err;
    np_error_clear(&err);
    np_cli_ignore_sigxfsz(); /* a file size limit is a write error, reported (not SIGXFSZ) */
    /* the name family is reserved among parallel runs, as compare's reports */
    np_status st = np_out_reserve(name, sizeof name, a->out, base, exts, 3, &err);
    int reserved = st == NP_OK;
    for (int i = 0; i < 3 && st == NP_OK; i++) {
        if (!has_format(a->format, exts[i]))
            continue;
        snprintf(path, sizeof path, "%s/%s.%s", a->out, name, exts[i]);
        st = i == 0   ? np_replay_write_xlsx(r, path, &err)
             : i == 1 ? np_replay_write_csv(r, path, &err)
                      : np_replay_write_json(r, path, &err);
        if (st == NP_OK)
            np_cli_report_line(path);
    }
    if (reserved)
        np_out_release(a->out, name);
    if (st) {
        np_cli_report(&err);
        return NP_EXIT_USAGE;
    }
    return 0;
}

static void progress(size_t done, size_t total, void *user)
{
    (void)user;
    fprintf(stderr, "\rnprobe replay: %zu/%zu calls", done, total);
    if (done >= total)
        fputs("\r\033[K", stderr);
    fflush(stderr);
}

int np_cmd_replay(int argc, char **argv)
{
    rp_args a = {NULL, NULL, "xlsx", -1, -1, 10, 1.0};
    int rc = parse_args(&a, argc, argv);
    if (rc)
        return rc - 1;
    np_error err;
    np_error_clear(&err);
    np_dumpio_ref *refs = NULL;
    size_t n = 0;
    if (np_dumpio_find(&refs, &n, a.dump, &err)) {
        np_cli_report(&err);
        return NP_EXIT_USAGE;
    }
    if (a.out && np_mkdirs(a.out) != 0) {
        np_cli_error("%s: cannot create the output directory: %s", a.out, strerror(errno));
        free(refs);
        return NP_EXIT_USAGE;
    }
    openblas_set_num_threads(1); /* the bits must not depend on a thread count */
    np_replay_options o;
    np_replay_options_init(&o);
    o.budget_scale = a.budget_scale;
    if (np_cli_stderr_is_tty())
        o.progress = progress;
    int done = 0;
    rc = NP_EXIT_OK;
    for (size_t i = 0; i < n; i++) {
        if (refs[i].state != NP_DUMPIO_COMPLETE || (a.step >= 0 && refs[i].step != a.step) ||
            (a.rank >= 0 && refs[i].rank != a.rank))
            continue;
        np_replay_result *r = NULL;
        np_error_clear(&err);
        if (np_replay_file(&r, refs[i].path, &o, &err)) {
            np_cli_report(&err);
            rc = NP_EXIT_USAGE;
            continue;
        }
        done++;
        print_result(r, a.top);
        if (a.out && write_reports(r, &a)) {
            /* one message: the next steps' reports would meet the same full
             * disk or size limit */
            np_replay_result_free(r);
            rc = NP_EXIT_USAGE;
            break;
        }
        if (r->count[NP_REPLAY_EXCEEDS] && rc == NP_EXIT_OK)
            rc = NP_EXIT_DIFF;
        np_replay_result_free(r);
    }
    if (!done && rc == NP_EXIT_OK) {
        np_cli_error("%s: no complete dump file%s%s", a.dump,
                     a.step >= 0 || a.rank >= 0 ? " for the --step/--rank given" : "",
                     n ? "" : " found");
        rc = NP_EXIT_USAGE;
    }
    free(refs);
    return rc;
}
