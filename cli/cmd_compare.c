/* cli/cmd_compare.c - `nprobe compare -b BENCH -c CMP [-o OUTDIR]`: pair two
 * dumps, print the verdict counts and the first culprit, write the reports
 * (xlsx by default; csv/json with --format). Exit 0 when no row is an
 * error, 1 when differences are found, 2 on usage or input errors. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cmd.h"
#include "opts.h"
#include "compare_reports.h"
#include "compare_summary.h"
#include "nprobe/compare.h"

typedef struct compare_args {
    np_cmp_options o;
    const char *bench, *cmp, *outdir, *format;
    int quiet;
} compare_args;

#define F(f) offsetof(compare_args, f)
#define FLAG(f) NP_OPT_FLAG, F(f), 0, 0, NULL, 0, NULL
#define STR(f) NP_OPT_STR, F(f), 0, 0, NULL, 0, NULL
#define INT(f, lo, hi) NP_OPT_INT, F(f), lo, hi, NULL, 0, NULL
#define DBL(f, lo, hi) NP_OPT_DOUBLE, F(f), lo, hi, NULL, 0, NULL
/* `nprobe compare`'s options: parsing and --help from this one table
 * (cli/opts.h); --replicas goes to cmd_compare_replicas.c. */
static const np_cli_opt compare_opts[] = {
    {NULL, "-b|--bench", "PATH", "the reference dump (required)", STR(bench)},
    {NULL, "-c|--cmp", "PATH", "the dump under test (required)", STR(cmp)},
    {NULL, "-o|--output", "DIR", "where the reports go (default: the current directory;\n"
                                 "created if missing)", STR(outdir)},
    {NULL, "--step", "N", "compare only step N", INT(o.step, 0, 100000000)},
    {NULL, "--rank", "N", "compare only rank N", INT(o.rank, 0, 1000000)},
    {NULL, "--fuzzy", NULL, "match leaves with the call counters dropped, walking both\n"
                            "sides in order, shapes equal (for runs whose call counts\n"
                            "differ); rows say exact or fuzzy", FLAG(o.fuzzy)},
    {NULL, "--mapping", "FILE", "JSON renames from cmp names to bench names:\n"
                                "{\"modules\": {\"cmp.path\": \"bench.path\"},\n"
                                " \"apis\": {\"Torch.matmul\": \"Functional.linear\"},\n"
                                " \"names\": {\"cmp leaf or call\": \"bench leaf or call\"}}",
     STR(o.mapping_path)},
    {NULL, "--atol", "X", "RMS floor: errors are relative to max(||bench||, X*sqrt(n))", DBL(o.atol, 0, 0)},
    {NULL, "--rtol", "X", "error when the relative L2 error ||cmp-bench||/||bench||\n"
                          "exceeds X (warning above X/3)", DBL(o.rtol, 0, 0)},
    {NULL, "--cos", "X", "error when the cosine similarity is below X\n"
                         "(default tolerances come from the dtype under test and the\n"
                         "run's precision: fp32 rtol 5e-6, fp16 0.02, bf16 0.1; in a\n"
                         "bf16/fp16 run, gradients behind relu/max_pool and the like\n"
                         "8*sqrt(u): bf16 0.5, fp16 0.177; --rtol sets every row;\n"
                         "docs/COMPARE.md gives the reasoning)", DBL(o.cos, -1, 1)},
    {NULL, "--format", "LIST", "comma-separated report formats among xlsx, csv, json, html\n"
                               "(default xlsx,html; e.g. --format xlsx,csv,json or --format csv)",
     STR(format)},
    {NULL, "--no-replay", NULL, "no float64 recompute of the cmp side's calls (see below)",
     FLAG(o.no_replay)},
    {NULL, "--replay-all", NULL, "recompute every call, also those after the first culprit\n"
                                 "whose inputs already fail (see below)", FLAG(o.replay_all)},
    {NULL, "--rows-per-sheet", "N", "split the xlsx rows sheet every N rows (default 1000000)",
     NP_OPT_LONG, F(o.rows_per_sheet), 1, 1048575, NULL, 0, NULL},
    {NULL, "--single-ref", NULL, "BENCH is a single-process run, CMP a data-parallel run on\n"
                                 "the same global batch (mpirun -n K nprobe train): every\n"
                                 "rank of CMP is compared with BENCH's step, on the leaves\n"
                                 "they share (parameters and reduced gradients)", FLAG(o.single_ref)},
    /* --replicas is dispatched before parsing; listed for the help */
    {NULL, "--replicas", "DUMP", "check one data-parallel dump against itself: the first call\n"
                                 "where the ranks' replicas part (see --replicas --help)", STR(bench)},
    {NULL, "-q|--quiet", NULL, "print nothing on stdout (otherwise: one pair's verdicts,\n"
                               "culprit and reports; for many pairs a summary with one\n"
                               "line per failing pair, the first 8, and the overall first\n"
                               "culprit)", FLAG(quiet)},
    {NULL, "--help", NULL, "this help", NP_OPT_HELP, 0, 0, 0, NULL, 0, NULL},
};
#undef F
#undef FLAG
#undef STR
#undef INT
#undef DBL
#define N_COMPARE_OPTS ((int)(sizeof compare_opts / sizeof compare_opts[0]))

static const char compare_before[] =
"usage: nprobe compare -b BENCH -c CMP [-o OUTDIR] [options]\n"
"\n"
"Pair two dumps tensor by tensor, compute msprobe's accuracy metrics, give each\n"
"row a verdict (pass / warning / error), name the call where the departure\n"
"starts (the first culprit) and write a report per step and rank:\n"
"  OUTDIR/compare_result_rank{R}_step{S}_{YYYYmmddHHMMSS}.xlsx (.csv, .json)\n"
"and one self-contained HTML page for the whole comparison (first culprit over\n"
"all steps and ranks, a chart across steps, the module tree, the error along\n"
"execution order, the failing step's rows; opens from disk, no network):\n"
"  OUTDIR/compare_report_{YYYYmmddHHMMSS}.html\n"
"\n"
"BENCH is the reference run, CMP the run under test (msprobe's \"NPU\" side).\n"
"Each is a dump root (step*/rank*/dump.h5, or msprobe's\n"
"step*/{rank*,proc*,rank}/dump.json), a step directory, a rank directory or one\n"
"dump.h5 / dump.json. Steps and ranks are paired by number; two single files\n"
"are paired as they are.\n"
"\n"
"options:\n";

static const char compare_after[] =
"\n"
"Modes: tensor (both dumps keep payloads: Cosine, EucDist, MaxAbsErr,\n"
"MaxRelativeErr, One Thousandth / Five Thousandths Err Ratio), statistics\n"
"(max/min/mean/norm diffs and relative errors; also used, with a note, when the\n"
"two tasks differ), md5 (crc32 equality: pass/diff).\n"
"\n"
"Gradients are compared divided by each dump's loss scale (root attribute\n"
"loss_scale, written by runs with an fp16 loss scaler) and data-parallel factor\n"
"(dp_grad_scale, written under FSDP2's or DDP's gradient average).\n"
"\n"
"Root cause: calls are walked in execution order (forward, then backward); a\n"
"call whose inputs and parameters pass but whose outputs fail, by at least 3x\n"
"the input error, is a culprit; a call whose inputs already fail is propagated,\n"
"unless no dumped call before it fails (the error comes from outside the dump:\n"
"it is then the culprit).\n"
"In tensor mode the API calls of the cmp side are also recomputed in float64\n"
"from their own dumped inputs (as nprobe replay does; --no-replay or\n"
"NPROBE_NO_REPLAY=1 turns it off), and those above their budget on the bench\n"
"side too: an isolated error above its budget, and more than 4x the bench's,\n"
"makes a call a culprit even below the error level; a culprit whose isolated\n"
"error is clean says so in its reason. Only what the verdict needs is\n"
"recomputed: not the calls identical on both sides, nor those after the first\n"
"culprit whose inputs already fail (--replay-all recomputes them too). At most\n"
"it costs about the model's forward and backward in float64.\n"
"\n"
"exit status: 0 no error row, 1 differences found (error rows, a culprit, or a step/rank\n"
"missing or unreadable on one side while others were compared), 2 usage or\n"
"input error (nothing could be compared)\n";

enum { F_XLSX = 1, F_CSV = 2, F_JSON = 4, F_HTML = 8 };

static int parse_formats(const char *text, int *out)
{
    static const char *const names[] = {"xlsx", "csv", "json", "html"};
    char buf[128];
    snprintf(buf, sizeof buf, "%s", text);
    *out = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int k = -1;
        for (int i = 0; i < 4; i++)
            if (!strcmp(tok, names[i]))
                k = i;
        if (k < 0) {
            int near = np_closest_word(tok, names, 4);
            np_cli_error("compare: --format: unknown format '%s'%s%s%s; expected xlsx, csv, json or html",
                         tok, near >= 0 ? " (did you mean '" : "", near >= 0 ? names[near] : "",
                         near >= 0 ? "'?)" : "");
            return -1;
        }
        *out |= 1 << k;
    }
    if (!*out) {
        np_cli_error("compare: --format: expected xlsx, csv, json or html");
        return -1;
    }
    return 0;
}

/* done/total are payload bytes in tensor mode, rows otherwise: the
 * percentage is what both have in common. */
static void progress(int pair, int n_pairs, uint64_t done, uint64_t total, void *user)
{
    (void)user;
    double pct = total ? 100.0 * (double)done / (double)total : 100.0;
    fprintf(stderr, "\rnprobe compare: pair %d/%d  %5.1f%%", pair + 1, n_pairs, pct);
    if (done >= total)
        fputs("\r\033[K", stderr);
    fflush(stderr);
}

/* What the per-pair callback keeps between pairs. */
typedef struct stream_ctx {
    const char *outdir;
    int formats, failed, no_dir;
    long long now;
    size_t focus;              /* the pair kept whole (np_cmp_focus_pair); SIZE_MAX: none yet */
    report_list written;
} stream_ctx;

/* np_cmp_run's on_pair: write the pair's reports as soon as it is compared,
 * then shrink every pair but the one the summary and the HTML page detail,
 * so memory does not grow with the rows of thousands of step/rank pairs. */
static int on_pair(np_cmp_result *r, size_t i, void *user)
{
    stream_ctx *s = user;
    if (!s->written.n && !s->failed && np_mkdirs(s->outdir) != 0) {
        np_cli_error("compare: %s: cannot create the output directory: %s", s->outdir,
                     strerror(errno));
        s->failed = s->no_dir = 1;
        return 1;
    }
    if (np_cli_compare_write_pair(r, i, s->outdir, s->formats, s->now, 0, &s->written) != NP_OK) {
        s->failed = 1; /* one message; nothing under a final name is partial */
        return 1;
    }
    size_t f = np_cmp_focus_pair(r);
    if (s->focus != f && s->focus < r->n_pairs)
        np_cmp_pair_shrink(&r->pairs[s->focus]);
    if (i != f)
        np_cmp_pair_shrink(&r->pairs[i]);
    s->focus = f;
    return 0;
}

/* Compare, writing each pair's reports as it is done; then the summary
 * (one pair: its block) and the HTML page. */
static int run_streamed(const char *bench, const char *cmp, const char *outdir, int formats,
                        int quiet, np_cmp_options *o)
{
    stream_ctx s = {.outdir = outdir, .formats = formats, .focus = SIZE_MAX};
    np_cli_ignore_sigxfsz();
    s.now = (long long)time(NULL);
    o->on_pair = on_pair;
    o->on_pair_user = &s;
    np_error err = {0};
    np_cmp_result *r = NULL;
    if (np_cmp_run(&r, bench, cmp, o, &err) != NP_OK) {
        np_cli_report(&err);
        return NP_EXIT_USAGE;
    }
    for (size_t i = 0; i < r->n_issues; i++)
        np_cli_error("compare: %s", r->issues[i].text);
    for (size_t i = 0; i < r->n_pairs; i++)
        if (np_cmp_pair_paired_nothing(&r->pairs[i]))
            np_cli_error("compare: step %d rank %d: nothing was paired (no leaf of %s matched one "
                         "of %s), which is not a pass; try --fuzzy (call counters differ) or "
                         "--mapping FILE (modules or APIs renamed)",
                         r->pairs[i].step, r->pairs[i].rank, r->pairs[i].cmp_path,
                         r->pairs[i].bench_path);
    int rc = s.failed ? NP_EXIT_USAGE : np_cmp_has_differences(r) ? NP_EXIT_DIFF : NP_EXIT_OK;
    if (r->n_pairs == 0 || s.no_dir) {
        if (!s.no_dir)
            np_cli_error("compare: nothing could be compared");
        np_cli_report_list_free(&s.written);
        np_cmp_result_free(r);
        return NP_EXIT_USAGE;
    }
    /* many pairs: a summary instead of a block per pair (compare_summary.c) */
    int many = r->n_pairs > 1;
    if (!quiet && !many) {
        np_cli_compare_print_pair(&r->pairs[0]);
        for (size_t i = 0; i < s.written.n; i++)
            np_cli_report_line(s.written.paths[i]);
    }
    if (!quiet && many) {
        np_compare_summary(r);
        np_compare_summary_paths(s.written.paths, s.written.n, outdir, NULL);
    }
    /* after a failed report (full disk, size limit): one message, no page */
    if ((formats & F_HTML) && !s.failed &&
        np_cli_compare_write_html(r, &s.written, outdir, s.now, quiet) != 0)
        rc = NP_EXIT_USAGE;
    np_cli_report_list_free(&s.written);
    np_cmp_result_free(r);
    return rc;
}

int np_cmd_compare(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--replicas"))
            return np_cmd_compare_replicas(argc, argv);
    if (argc < 2) {
        np_cli_opts_help(stderr, compare_before, compare_opts, N_COMPARE_OPTS, compare_after);
        np_cli_error("compare: missing arguments -b BENCH -c CMP (see 'nprobe compare --help')");
        return NP_EXIT_USAGE;
    }
    compare_args a = {.outdir = "."};
    np_cmp_options_init(&a.o);
    int rc = np_cli_opts_parse(compare_opts, N_COMPARE_OPTS, &a, "compare", compare_before,
                               compare_after, argc, argv);
    if (rc)
        return rc - 1;
    int formats = F_XLSX | F_HTML, quiet = a.quiet;
    if (a.format && parse_formats(a.format, &formats))
        return NP_EXIT_USAGE;
    const char *bench = a.bench, *cmp = a.cmp, *outdir = a.outdir;
    np_cmp_options o = a.o;
    if (!bench || !cmp) {
        np_cli_error("compare: missing %s (see 'nprobe compare --help')",
                     !bench && !cmp ? "-b BENCH and -c CMP" : !bench ? "-b BENCH" : "-c CMP");
        return NP_EXIT_USAGE;
    }
    int mrank = 0, mworld = 1, mpi = np_cli_mpi_start_light(&mrank, &mworld);
    if (mpi < 0) {
        np_cli_error("compare: MPI_Init failed");
        return NP_EXIT_USAGE;
    }
    if (mpi > 0) {
        int mrc = np_cli_compare_mpi(bench, cmp, outdir, formats, quiet, &o, mrank, mworld);
        np_cli_mpi_end();
        return mrc;
    }
    if (np_cli_stderr_is_tty())
        o.progress = progress;
    return run_streamed(bench, cmp, outdir, formats, quiet, &o);
}
