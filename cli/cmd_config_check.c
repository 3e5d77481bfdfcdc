/* cli/cmd_config_check.c - `nprobe config_check pack|compare`: pack this
 * environment (libs, env, pip, seeds, weights, data, hyperparameters) into a
 * zip, or diff two packs into DIR/result.xlsx (or result.json). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd.h"
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

static void help_pack(FILE *out)
{
    fprintf(out,
            "usage: nprobe config_check pack -o PACK.zip [--weights CKPT.h5 | --dump DUMP]\n"
            "                                [--dataset PATH]... [--hyperparams FILE]\n"
            "                                [--seed N] [--python PYTHON | --no-python]\n"
            "\n"
            "  -o, --output PACK.zip  the pack to write (replaced when complete)\n"
            "  --weights CKPT.h5      hash every parameter of an nprobe checkpoint\n"
            "  --dump DUMP            hash the parameters of a dump (dump.h5 or its folder)\n"
            "  --dataset PATH         hash a data file, or every file under a folder (repeatable)\n"
            "  --hyperparams FILE     a JSON object or key=value lines\n"
            "  --seed N               the run's seed, recorded in random.json\n"
            "  --python PYTHON        list this interpreter's packages into pip.txt\n"
            "                         (default: python3 on PATH when there is one)\n"
            "  --python-timeout S     limit for listing them (default 60); past it the\n"
            "                         interpreter and what it started are killed and the\n"
            "                         pack says pip.txt could not be collected\n"
            "  --no-python            do not write pip.txt\n"
            "\n"
            "exit codes: 0 written, 2 usage or input error\n");
}

static void help_compare(FILE *out)
{
    fprintf(out,
            "usage: nprobe config_check compare BENCH.zip CMP.zip -o DIR [--format xlsx|json]\n"
            "                                  [--rows-per-sheet N]\n"
            "\n"
            "  -o, --output DIR       folder for result.xlsx (or result.json); created if needed\n"
            "  --format xlsx|json     report format (default xlsx)\n"
            "  --rows-per-sheet N     xlsx: rows per item sheet before it continues on\n"
            "                         'item (2)', ... (default and most 1048575, Excel's limit)\n"
            "\n"
            "Each item (env, libs, pip, random, weights, dataset, hyperparameters) gets\n"
            "pass, warning or error; docs/CONFIG_CHECK.md lists which differences are\n"
            "errors. Unsafe or oversized packs are refused. Memory stays bounded\n"
            "whatever the number of keys: the keys are sorted in runs spilled to\n"
            "temporary files inside DIR (removed whatever happens).\n"
            "\n"
            "exit codes: 0 everything passes, 1 something differs, 2 usage or input error\n");
}

/* The value of option argv[*i]; advances *i. NULL (and a message) if missing. */
static const char *opt_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        np_cli_error("config_check: %s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

static int cmd_pack(int argc, char **argv)
{
    np_cc_pack_opts o;
    memset(&o, 0, sizeof o);
    const char *out = NULL;
    const char *datasets[MAX_DATASETS];
    int no_python = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (np_cli_is_help(a)) {
            help_pack(stdout);
            return NP_EXIT_OK;
        }
        int takes = !strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--weights") ||
                    !strcmp(a, "--dump") || !strcmp(a, "--dataset") ||
                    !strcmp(a, "--hyperparams") || !strcmp(a, "--seed") || !strcmp(a, "--python") ||
                    !strcmp(a, "--python-timeout");
        if (takes && !(v = opt_value(argc, argv, &i)))
            return NP_EXIT_USAGE;
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            out = v;
        } else if (!strcmp(a, "--weights")) {
            o.weights_path = v;
        } else if (!strcmp(a, "--dump")) {
            o.dump_path = v;
        } else if (!strcmp(a, "--dataset")) {
            if (o.n_datasets == MAX_DATASETS) {
                np_cli_error("config_check pack: at most %d --dataset paths", MAX_DATASETS);
                return NP_EXIT_USAGE;
            }
            datasets[o.n_datasets++] = v;
        } else if (!strcmp(a, "--hyperparams")) {
            o.hyperparams_path = v;
        } else if (!strcmp(a, "--seed")) {
            long s;
            if (np_cli_parse_int("--seed", v, 0, 2147483647L, &s) != 0)
                return NP_EXIT_USAGE;
            o.seed = s;
            o.has_seed = 1;
        } else if (!strcmp(a, "--python")) {
            o.python = v;
        } else if (!strcmp(a, "--python-timeout")) {
            long t;
            if (np_cli_parse_int("--python-timeout", v, 1, 86400L, &t) != 0)
                return NP_EXIT_USAGE;
            o.python_timeout_s = (int)t;
        } else if (!strcmp(a, "--no-python")) {
            no_python = 1;
        } else {
            static const char *const known[] = {"--output", "--weights", "--dump", "--dataset",
                                                "--hyperparams", "--seed", "--python",
                                                "--python-timeout", "--no-python", "--help"};
            int near = np_closest_word(a, known, (int)(sizeof known / sizeof known[0]));
            if (near >= 0)
                np_cli_error("config_check pack: unknown option '%s'; did you mean '%s'?", a,
                             known[near]);
            else
                np_cli_error("config_check pack: unknown option '%s' (see 'nprobe config_check "
                             "pack --help')",
                             a);
            return NP_EXIT_USAGE;
        }
    }
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
    const char *paths[2] = {NULL, NULL}, *outdir = NULL, *format = "xlsx";
    int npaths = 0;
    long per_sheet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (np_cli_is_help(a)) {
            help_compare(stdout);
            return NP_EXIT_OK;
        }
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(outdir = opt_value(argc, argv, &i)))
                return NP_EXIT_USAGE;
        } else if (!strcmp(a, "--format")) {
            if (!(format = opt_value(argc, argv, &i)))
                return NP_EXIT_USAGE;
            if (strcmp(format, "xlsx") != 0 && strcmp(format, "json") != 0) {
                np_cli_error("config_check compare: --format: expected xlsx or json, got '%s'",
                             format);
                return NP_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--rows-per-sheet")) {
            const char *v = opt_value(argc, argv, &i);
            if (!v || np_cli_parse_int("config_check compare: --rows-per-sheet", v, 1, 1048575,
                                       &per_sheet))
                return NP_EXIT_USAGE;
        } else if (a[0] == '-' && a[1]) {
            np_cli_error("config_check compare: unknown option '%s' (see 'nprobe config_check "
                         "compare --help')",
                         a);
            return NP_EXIT_USAGE;
        } else if (npaths < 2) {
            paths[npaths++] = a;
        } else {
            np_cli_error("config_check compare: expected two packs, got a third: '%s'", a);
            return NP_EXIT_USAGE;
        }
    }
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
