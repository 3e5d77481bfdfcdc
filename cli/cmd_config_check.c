/* cli/cmd_config_check.c - `nprobe config_check pack|compare`: pack this
 * environment (libs, env, pip, seeds, weights, data, hyperparameters) into a
 * zip, or diff two packs into DIR/result.xlsx (or result.json). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd.h"
#include "opts.h"
#include "nprobe/configcheck.h"

#define MAX_DATASETS 256

static void help_main(FILE *out)
{
    fprintf(out,
            "usage: nprobe config_check pack -o PACK.zip [options]\n"
            "       nprobe config_check compare BENCH.zip CMP.zip -o DIR [--format xlsx|json]\n"
            "\n"
            "Pack what decides the numbers of a run (environment, library versions and\n"
            "thread counts, Python packages, seeds, weight and data hashes,\n"
            "hyperparameters) into a zip; diff two packs. 'nprobe train\n"
            "--config-check-out PACK.zip' writes a pack from a run.\n"
            "\n"
            "See 'nprobe config_check pack --help', 'nprobe config_check compare --help'\n"
            "and docs/CONFIG_CHECK.md.\n");
}

typedef struct pack_args {
    np_cc_pack_opts o;
    const char *out;
    np_cli_list datasets;
    long seed, timeout;
    int no_python;
} pack_args;

#define F(f) offsetof(pack_args, f)
#define STR(f) NP_OPT_STR, F(f), 0, 0, NULL, 0, NULL
/* `nprobe config_check pack`'s options: parsing and --help from this one table (cli/opts.h). */
static const np_cli_opt pack_opts[] = {
    {NULL, "-o|--output", "PACK.zip", "the pack to write (replaced when complete)", STR(out)},
    {NULL, "--weights", "CKPT.h5", "hash every parameter of an nprobe checkpoint", STR(o.weights_path)},
    {NULL, "--dump", "DUMP", "hash the parameters of a dump (dump.h5 or its folder)", STR(o.dump_path)},
    {NULL, "--dataset", "PATH", "hash a data file, or every file under a folder (repeatable)",
     NP_OPT_APPEND, F(datasets), 0, 0, NULL, 0, NULL},
    {NULL, "--hyperparams", "FILE", "a JSON object or key=value lines", STR(o.hyperparams_path)},
    {NULL, "--seed", "N", "the run's seed, recorded in random.json", NP_OPT_LONG, F(seed), 0,
     2147483647L, NULL, 0, NULL},
    {NULL, "--python", "PYTHON", "list this interpreter's packages into pip.txt\n"
                                 "(default: python3 on PATH when there is one)", STR(o.python)},
    {NULL, "--python-timeout", "S", "limit for listing them (default 60); past it the\n"
                                    "interpreter and what it started are killed and the\n"
                                    "pack says pip.txt could not be collected",
     NP_OPT_LONG, F(timeout), 1, 86400L, NULL, 0, NULL},
    {NULL, "--no-python", NULL, "do not write pip.txt", NP_OPT_FLAG, F(no_python), 0, 0, NULL, 0, NULL},
    {NULL, "--help", NULL, "this help", NP_OPT_HELP, 0, 0, 0, NULL, 0, NULL},
};
#undef STR
#undef F
#define N_PACK_OPTS ((int)(sizeof pack_opts / sizeof pack_opts[0]))

static const char pack_before[] =
    "usage: nprobe config_check pack -o PACK.zip [--weights CKPT.h5 | --dump DUMP]\n"
    "                                [--dataset PATH]... [--hyperparams FILE]\n"
    "                                [--seed N] [--python PYTHON | --no-python]\n"
    "\n";
static const char pack_after[] = "\nexit codes: 0 written, 2 usage or input error\n";

typedef struct cc_compare_args {
    const char *bench, *cmp, *outdir, *format;
    long per_sheet;
} cc_compare_args;

static const char *const cc_formats[] = {"xlsx", "json"};
#define F(f) offsetof(cc_compare_args, f)
/* `nprobe config_check compare`'s arguments: parsing and --help from this one table. */
static const np_cli_opt cc_compare_opts[] = {
    {NULL, "BENCH.zip", NULL, NULL, NP_OPT_POS, F(bench), 0, 0, NULL, 0, NULL},
    {NULL, "CMP.zip", NULL, NULL, NP_OPT_POS, F(cmp), 0, 0, NULL, 0, NULL},
    {NULL, "-o|--output", "DIR", "folder for result.xlsx (or result.json); created if needed",
     NP_OPT_STR, F(outdir), 0, 0, NULL, 0, NULL},
    {NULL, "--format", "xlsx|json", "report format (default xlsx)", NP_OPT_CHOICE, F(format), 0, 0,
     cc_formats, 2, NULL},
    {NULL, "--rows-per-sheet", "N", "xlsx: rows per item sheet before it continues on\n"
                                    "'item (2)', ... (default and most 1048575, Excel's limit)",
     NP_OPT_LONG, F(per_sheet), 1, 1048575, NULL, 0, NULL},
    {NULL, "--help", NULL, "this help", NP_OPT_HELP, 0, 0, 0, NULL, 0, NULL},
};
#undef F
#define N_CC_COMPARE_OPTS ((int)(sizeof cc_compare_opts / sizeof cc_compare_opts[0]))

static const char cc_compare_before[] =
    "usage: nprobe config_check compare BENCH.zip CMP.zip -o DIR [--format xlsx|json]\n"
    "                                  [--rows-per-sheet N]\n"
    "\n";
static const char cc_compare_after[] =
    "\n"
    "Each item (env, libs, pip, random, weights, dataset, hyperparameters) gets\n"
    "pass, warning or error; docs/CONFIG_CHECK.md lists which differences are\n"
    "errors. Unsafe or oversized packs are refused. Memory stays bounded\n"
    "whatever the number of keys: the keys are sorted in runs spilled to\n"
    "temporary files inside DIR (removed whatever happens).\n"
    "\n"
    "exit codes: 0 everything passes, 1 something differs, 2 usage or input error\n";

static int cmd_pack(int argc, char **argv)
{
    const char *datasets[MAX_DATASETS];
    pack_args a;
    memset(&a, 0, sizeof a);
    a.seed = -1;
    a.datasets = (np_cli_list){datasets, 0, MAX_DATASETS};
    int rc = np_cli_opts_parse(pack_opts, N_PACK_OPTS, &a, "config_check pack", pack_before,
                               pack_after, argc, argv);
    if (rc)
        return rc - 1;
    np_cc_pack_opts o = a.o;
    const char *out = a.out;
    int no_python = a.no_python;
    o.n_datasets = a.datasets.n;
    if (a.seed >= 0) {
        o.seed = a.seed;
        o.has_seed = 1;
    }
    if (a.timeout)
        o.python_timeout_s = (int)a.timeout;
    if (!out) {
        np_cli_error("config_check pack: missing -o PACK.zip (see 'nprobe config_check pack --help')");
        return NP_EXIT_USAGE;
    }
    if (o.weights_path && o.dump_path) {
        np_cli_error("config_check pack: give --weights or --dump, not both");
        return NP_EXIT_USAGE;
    }
    if (no_python && o.python) {
        np_cli_error("config_check pack: give --python or --no-python, not both");
        return NP_EXIT_USAGE;
    }
    if (no_python)
        o.python = "";
    o.datasets = datasets;
    np_error err;
    np_error_clear(&err);
    if (np_cc_pack(out, &o, &err) != NP_OK) {
        np_cli_report(&err);
        return NP_EXIT_USAGE;
    }
    fprintf(stderr, "nprobe: config_check: wrote %s\n", out);
    return NP_EXIT_OK;
}

/* mkdir DIR (one level; the parent must exist). */
static int ensure_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return 0;
        np_cli_error("config_check compare: %s exists and is not a folder", dir);
        return -1;
    }
    if (mkdir(dir, 0777) != 0) {
        np_cli_error("config_check compare: cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* The items' levels, differences and notes on stdout. */
static void print_summary(const np_cc_result *r, const np_cc_counts *counts)
{
    printf("%-16s %s\n", "item", "pass_check");
    for (int i = 0; i < NP_CC_ITEM_COUNT; i++) {
        const np_cc_item *it = &r->items[i];
        long long ndiff = counts->level[i][NP_CC_WARNING] + counts->level[i][NP_CC_ERROR];
        printf("%-16s %-8s", np_cc_item_name((np_cc_item_id)i), np_cc_level_name(it->pass_check));
        if (ndiff)
            printf(" %lld difference%s", ndiff, ndiff == 1 ? "" : "s");
        if (it->note)
            np_cli_printf(" (%s)", it->note);
        putchar('\n');
    }
}

static int cmd_compare(int argc, char **argv)
{
    cc_compare_args a = {NULL, NULL, NULL, "xlsx", 0};
    int rc = np_cli_opts_parse(cc_compare_opts, N_CC_COMPARE_OPTS, &a, "config_check compare",
                               cc_compare_before, cc_compare_after, argc, argv);
    if (rc)
        return rc - 1;
    const char *paths[2] = {a.bench, a.cmp}, *outdir = a.outdir, *format = a.format;
    int npaths = !!a.bench + !!a.cmp;
    long per_sheet = a.per_sheet;
    if (npaths < 2) {
        np_cli_error("config_check compare: missing %s (see 'nprobe config_check compare --help')",
                     npaths ? "CMP.zip" : "BENCH.zip and CMP.zip");
        return NP_EXIT_USAGE;
    }
    if (!outdir) {
        np_cli_error("config_check compare: missing -o DIR");
        return NP_EXIT_USAGE;
    }
    struct stat sb;
    int made_dir = stat(outdir, &sb) != 0;
    if (ensure_dir(outdir) != 0)
        return NP_EXIT_USAGE;
    int json = strcmp(format, "json") == 0;
    size_t len = strlen(outdir) + 32;
    char *file = malloc(len);
    if (!file) {
        np_cli_error("config_check compare: out of memory");
        return NP_EXIT_USAGE;
    }
    snprintf(file, len, "%s/result.%s", outdir, json ? "json" : "xlsx");
    /* NPROBE_CC_SORT_BUDGET (bytes; for tests, to force several spill runs
     * on small packs): what a side sorts in memory before it spills */
    const char *budget = getenv("NPROBE_CC_SORT_BUDGET");
    np_cc_report_opts ro = {json, per_sheet, budget ? (size_t)strtoull(budget, NULL, 10) : 0};
    np_cc_counts counts;
    np_error err;
    np_error_clear(&err);
    np_cc_result *r = NULL;
    if (np_cc_compare_report(&r, &counts, paths[0], paths[1], file, NULL, &ro, &err) != NP_OK) {
        if (err.status != NP_OK)
            np_cli_report(&err);
        else
            np_cli_error("config_check compare: out of memory");
        if (made_dir)
            rmdir(outdir); /* only when empty: a folder we made for nothing */
        free(file);
        return NP_EXIT_USAGE;
    }
    print_summary(r, &counts);
    np_cli_printf("report: %s\n", file);
    if (budget) /* for the tests: that the runs were spilled and merged */
        fprintf(stderr, "nprobe: config_check: %lld sorted runs spilled\n", counts.spill_runs);
    free(file);
    np_cc_level worst = np_cc_result_level(r);
    np_cc_result_free(r);
    return worst == NP_CC_PASS ? NP_EXIT_OK : NP_EXIT_DIFF;
}

int np_cmd_config_check(int argc, char **argv)
{
    np_cli_ignore_sigxfsz();
    if (argc < 2) {
        help_main(stderr);
        np_cli_error("config_check: missing arguments (see 'nprobe config_check --help')");
        return NP_EXIT_USAGE;
    }
    const char *sub = argv[1];
    if (np_cli_is_help(sub)) {
        help_main(stdout);
        return NP_EXIT_OK;
    }
    if (strcmp(sub, "pack") == 0)
        return cmd_pack(argc - 1, argv + 1);
    if (strcmp(sub, "compare") == 0)
        return cmd_compare(argc - 1, argv + 1);
    static const char *const subs[] = {"pack", "compare"};
    int near = np_closest_word(sub, subs, 2);
    if (near >= 0)
        np_cli_error("config_check: unknown subcommand '%s'; did you mean '%s'?", sub, subs[near]);
    else
        np_cli_error("config_check: unknown subcommand '%s' (expected pack or compare)", sub);
    return NP_EXIT_USAGE;
}
