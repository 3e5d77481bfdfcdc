/* cli/cmd_compare_replicas.c - `nprobe compare --replicas DUMP`: one
 * data-parallel dump checked against itself (nprobe/replicas.h), the first
 * call where the replicas part named with its step and rank(s). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "opts.h"
#include "nprobe/replicas.h"

typedef struct replicas_args {
    const char *dump;
    int quiet;
} replicas_args;

#define F(f) offsetof(replicas_args, f)
/* `nprobe compare --replicas`'s options: parsing and --help from this one
 * table (cli/opts.h). */
static const np_cli_opt replicas_opts[] = {
    {NULL, "--replicas", "DUMP", "the dump to check (2 or more ranks per step)", NP_OPT_STR, F(dump), 0,
     0, NULL, 0, NULL},
    {NULL, "-q|--quiet", NULL, "print only the first finding", NP_OPT_FLAG, F(quiet), 0, 0, NULL, 0, NULL},
    {NULL, "--help", NULL, "this help", NP_OPT_HELP, 0, 0, 0, NULL, 0, NULL},
};
#undef F
#define N_REPLICAS_OPTS ((int)(sizeof replicas_opts / sizeof replicas_opts[0]))

static const char replicas_before[] =
"usage: nprobe compare --replicas DUMP [-q]\n"
"\n"
"Check one data-parallel dump (mpirun -n K nprobe train with the probe on)\n"
"against itself, step by step, in execution order:\n"
"  - replicas: the parameters, the gradients after the all-reduce\n"
"    (parameters_grad) and what every Distributed.* call delivered (its output)\n"
"    must be bit-identical on every rank (crc32 and statistics of the dump);\n"
"  - collectives: every Distributed.all_reduce output must be the mean (or the\n"
"    max) of the ranks' inputs, recomputed in float64 in rank order (needs task\n"
"    tensor; within 1e-6 of the largest |mean| for a float32 reduction).\n"
"Prints each step's verdict and the first call where the replicas part, with\n"
"the rank(s) at fault. DUMP is a dump root or a step directory of rank{R}/.\n"
"\n"
"options:\n";

static const char replicas_after[] =
"\n"
"A step with fewer than two complete rank files (a killed rank leaves\n"
"dump.h5.partial or nothing) is not checked, and a rank without one is left\n"
"out of its step: both are listed, and the exit status is then 1.\n"
"\n"
"exit status: 0 every step checked on every rank and the replicas agree, 1\n"
"they part (or a collective is wrong, or a step or rank could not be\n"
"checked), 2 usage or input error (no step has two complete ranks)\n";

static const char *kind_name(np_rep_kind k)
{
    return k == NP_REP_PART ? "replicas part" : k == NP_REP_REDUCE ? "collective is wrong"
                                              : k == NP_REP_MISSING ? "replica missing" : "ok";
}

static void print_finding(const char *lead, const np_rep_finding *f)
{
    np_cli_printf("%s: step %d, %s (seq %lld), rank(s) %s: %s\n", lead, f->step, f->call,
           (long long)f->seq, f->ranks, f->text);
}

int np_cmd_compare_replicas(int argc, char **argv)
{
    replicas_args a = {NULL, 0};
    for (int i = 1; i < argc; i++)
        if (np_cli_is_help(argv[i])) { /* also right after --replicas (compare's help says so) */
            np_cli_opts_help(stdout, replicas_before, replicas_opts, N_REPLICAS_OPTS, replicas_after);
            return NP_EXIT_OK;
        }
    int rc = np_cli_opts_parse(replicas_opts, N_REPLICAS_OPTS, &a, "compare --replicas", replicas_before,
                               replicas_after, argc, argv);
    if (rc)
        return rc - 1;
    const char *dump = a.dump;
    int quiet = a.quiet;
    if (!dump) {
        np_cli_error("compare: --replicas needs a dump (see 'nprobe compare --replicas --help')");
        return NP_EXIT_USAGE;
    }
    np_rep_result r;
    np_error err;
    np_error_clear(&err);
    if (np_rep_check(&r, dump, &err)) {
        np_cli_report(&err);
        return NP_EXIT_USAGE;
    }
    if (!quiet) {
        np_cli_printf("replicas of %s: %d rank(s), %d step(s); %lld replica tensor comparisons, "
               "%lld all-reduce call(s) recomputed", dump, r.world_size, r.n_steps,
               (long long)r.n_replica_leaves, (long long)r.n_collectives);
        if (r.n_collectives_no_data)
            printf(", %lld without payloads (not recomputed: dump with task tensor)",
                   (long long)r.n_collectives_no_data);
        printf("\n");
        for (int i = 0; i < r.n_steps; i++) {
            const np_rep_finding *f = &r.per_step[i];
            if (f->kind == NP_REP_NONE)
                printf("  step %d: replicas agree, collectives consistent\n", r.steps[i]);
            else
                np_cli_printf("  step %d: %s at %s (rank(s) %s)\n", r.steps[i], kind_name(f->kind),
                       f->call, f->ranks);
        }
    }
    /* what could not be checked is said, also with -q, and is no pass */
    for (int i = 0; i < r.n_gaps; i++)
        np_cli_printf("  step %d: %s\n", r.gaps[i].step, r.gaps[i].text);
    rc = r.first.kind == NP_REP_NONE && !r.n_gaps ? NP_EXIT_OK : NP_EXIT_DIFF;
    if (r.first.kind == NP_REP_NONE)
        printf("first parting: none%s\n", r.n_gaps ? " among the ranks checked (see the steps "
                                                      "and ranks not checked above)" : "");
    else
        print_finding("first parting", &r.first);
    np_rep_result_free(&r);
    return rc;
}
