/* cli/cmd_triage.c - `nprobe triage DIR --load CK --out OUT -- TRAIN...`:
 * the first anomaly of a monitored run (docs/MONITOR.md), told apart by
 * rerunning its step from a checkpoint taken just before it: the same
 * rerun clean -> transient (hardware-like); reproduced, and clean in fp32
 * -> numerics; reproduced in fp32 at the module that reads the batch ->
 * data; elsewhere -> code. For numerics the op: compare's first culprit
 * of the two reruns' dumps; for code (and transient) the first call
 * inside the anomalous module whose float64 replay exceeds its budget
 * among the calls the monitor kept at the anomaly (anomaly_calls,
 * triage_kept.c), else the module's first API call in the rerun's dump. Each rerun is `nprobe train TRAIN... --load CK
 * --stop-after S+1` in a child process, its files under OUT. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmd.h"
#include "opts.h"
#include "nprobe/format.h"
#include "nprobe/model.h"
#include "nprobe/monitor.h"

typedef struct triage_args {
    const char *dir, *load, *out, *config, *launcher;
    int rest; /* argv index of the first TRAIN_OPTION (after "--"), 0: none */
} triage_args;

static int n_ranks = 1;              /* ranks of DIR (the reruns run as many) */
static const char *launcher;         /* their launcher ("mpirun -n 2 ..."), or NULL */

static const char help_before[] =
    "usage: nprobe triage DIR [--load CKPT] --out OUT [options] -- TRAIN_OPTIONS...\n"
    "\n"
    "Tell the cause of the first anomaly of the monitor folder DIR by rerunning its\n"
    "step S from CKPT (a checkpoint at step S: nprobe train ... --stop-after S --save\n"
    "CKPT; without --load, the monitor's own DIR/anomaly_rank0.stepS.h5 that\n"
    "monitor.anomaly_checkpoint writes) with TRAIN_OPTIONS, the `nprobe train`\n"
    "options of the run (not --load,\n"
    "--save, --stop-after, --dump-config, --monitor-config), and print\n"
    "'class: transient|data|numerics|code' and, for numerics and code, 'op: CALL'.\n";

static const char help_after[] =
    "\n"
    "Reruns (each judged by the rules over the run's own records before S, then\n"
    "the rerun's step S): the same options: clean -> transient; at fp32\n"
    "(--precision fp32 --load-other-precision; skipped when the run was fp32):\n"
    "clean -> numerics; reproduced at the module that reads the batch (the\n"
    "step's first record) -> data, elsewhere -> code. The op: for numerics, the\n"
    "first culprit of nprobe compare of the two reruns' statistics dumps of S (fp32\n"
    "the bench); for code and transient, when the run kept its calls\n"
    "(monitor.anomaly_calls: DIR/anomaly_calls/stepS/rankR/dump.h5), the first call\n"
    "of the anomalous module whose float64 replay exceeds its error budget; else,\n"
    "for code, the first API call of the anomalous module in the dump of the rerun\n"
    "that reproduced it.\n"
    "A run of several ranks (DIR holds monitor_rank{R}.h5 for each) needs --launcher,\n"
    "the command that starts the run's ranks; every rank loads CKPT (data-parallel\n"
    "replicas hold the same state), and the first anomaly of the rerun is taken\n"
    "over all ranks (step, call order, rank). OUT must not exist.\n"
    "\n"
    "exit codes: 0 classified (or no anomaly), 2 usage or input error\n";

#define F(f) offsetof(triage_args, f)
static const np_cli_opt triage_opts_table[] = {
    {NULL, "DIR", NULL, NULL, NP_OPT_POS, F(dir), 0, 0, NULL, 0, NULL},
    {NULL, "--", "TRAIN_OPTIONS", NULL, NP_OPT_REST, F(rest), 0, 0, NULL, 0, NULL},
    {"reruns:", "--load", "CKPT", "the checkpoint at the anomaly's step (default: the\n"
                                                       "monitor's DIR/anomaly_rank0.stepS.h5)", NP_OPT_STR,
     F(load), 0, 0, NULL, 0, NULL},
    {NULL, "--out", "OUT", "folder of the reruns' monitor files, dumps and logs\n"
                           "(created; must not exist)", NP_OPT_STR, F(out), 0, 0, NULL, 0, NULL},
    {NULL, "--config", "FILE", "the rules of this config.json's monitor section\n"
                               "(default: the default rules)", NP_OPT_STR, F(config), 0, 0, NULL, 0,
     NULL},
    {NULL, "--launcher", "CMD", "start each rerun under CMD, split at spaces (a run\n"
                                "of several ranks: \"mpirun -n 2\")", NP_OPT_STR, F(launcher), 0,
     0, NULL, 0, NULL},
    {NULL, "--help", NULL, "show this help", NP_OPT_HELP, 0, 0, 0, NULL, 0, NULL},
};
#undef F
#define N_OPTS ((int)(sizeof triage_opts_table / sizeof triage_opts_table[0]))

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wx");
    if (!f)
        return -1;
    int bad = fputs(text, f) < 0;
    return fclose(f) || bad ? -1 : 0;
}

/* Run av with stdout and stderr into log (created, not overwritten): av[0]
 * searched on PATH when by_path, else this program itself. Its exit status,
 * or -1 when it could not run or did not exit. */
static int run_logged(char *const *av, const char *log, int by_path)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0)
            _exit(127);
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
        if (by_path)
            execvp(av[0], av);
        else
            execv("/proc/self/exe", av);
        _exit(127);
    }
    int ws = 0;
    if (pid < 0 || waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws))
        return -1;
    return WEXITSTATUS(ws);
}

/* `nprobe train TRAIN... --load CK --stop-after S+1 EXTRA...` with its output
 * in OUT/NAME.log; 0 when it exited 0. */
static int rerun(const char *out, const char *name, char **train, int n_train, const char *ck,
                 int64_t step, const char *const *extra, int n_extra)
{
    char log[4300], stop[32];
    snprintf(log, sizeof log, "%s/%s.log", out, name);
    snprintf(stop, sizeof stop, "%lld", (long long)step + 1);
    /* under the launcher: its words, then this program by its path */
    char lw[1024], exe[4096];
    int n_lw = 0;
    char *words[64];
    if (launcher) {
        snprintf(lw, sizeof lw, "%s", launcher);
        for (char *t = strtok(lw, " "); t && n_lw < 64; t = strtok(NULL, " "))
            words[n_lw++] = t;
        ssize_t ne = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (ne <= 0 || !n_lw)
            return -1;
        exe[ne] = 0;
    }
    char **av = calloc((size_t)(n_lw + n_train + n_extra + 9), sizeof *av);
    if (!av)
        return -1;
    int k = 0;
    for (int i = 0; i < n_lw; i++)
        av[k++] = words[i];
    av[k++] = launcher ? exe : "nprobe";
    av[k++] = "train";
    for (int i = 0; i < n_train; i++)
        av[k++] = train[i];
    av[k++] = "--load";
    av[k++] = (char *)ck;
    av[k++] = "--stop-after";
    av[k++] = stop;
    for (int i = 0; i < n_extra; i++)
        av[k++] = (char *)extra[i];
    av[k] = NULL;
    int rc = run_logged(av, log, launcher != NULL);
    free(av);
    return rc == 0 ? 0 : -1;
}

/* `nprobe compare -b OUT/BENCH -c OUT/CMP --step S --rank R -o OUT/compare`
 * (output in OUT/compare.log): the first culprit's call into api; 0 when
 * compare named one. */
static int culprit_of(char *api, size_t cap, const char *out, const char *bench, const char *cmp,
                      int64_t step, int rank)
{
    char log[4300], b[4300], c[4300], o[4300], st[32], rk[32];
    snprintf(log, sizeof log, "%s/compare.log", out);
    snprintf(b, sizeof b, "%s/%s", out, bench);
    snprintf(c, sizeof c, "%s/%s", out, cmp);
    snprintf(o, sizeof o, "%s/compare", out);
    snprintf(st, sizeof st, "%lld", (long long)step);
    snprintf(rk, sizeof rk, "%d", rank);
    char *av[] = {"nprobe", "compare", "-b", b, "-c", c, "--step", st, "--rank", rk, "-o", o, NULL};
    int rc = run_logged(av, log, 0);
    if (rc < 0 || rc > 1)
        return -1;
    FILE *f = fopen(log, "r");
    if (!f)
        return -1;
    char line[8192];
    int found = -1;
    while (found && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "first culprit: ");
        if (!p)
            continue;
        p += strlen("first culprit: ");
        size_t n = strcspn(p, " \n");
        if (n > 0 && n < cap) {
            memcpy(api, p, n);
            api[n] = 0;
            found = 0;
        }
    }
    fclose(f);
    return found;
}

/* The first API call inside module `mod`'s first forward call in the dump
 * DUMP/step{S}/rank{R}/dump.h5; 0 when found. */
static int first_api_of(char *api, size_t cap, const char *dump, int64_t step, int rank,
                        const char *mod)
{
    char path[4600], want[NP_MONITOR_NAME_LEN + 16];
    snprintf(path, sizeof path, "%s/step%lld/rank%d/dump.h5", dump, (long long)step, rank);
    snprintf(want, sizeof want, "Module.%s.", mod);
    int found = -1;
    size_t n;
    np_call_rec *rows = np_cli_dump_calls(path, &n);
    const char *modcall = NULL;
    for (size_t i = 0; i < n && !modcall; i++)
        if (!strcmp(rows[i].kind, "module") && !strncmp(rows[i].call, want, strlen(want)) &&
            strstr(rows[i].call, ".forward."))
            modcall = rows[i].call;
    for (size_t i = 0; modcall && i < n && found; i++)
        if (!strcmp(rows[i].kind, "api") && !strcmp(rows[i].parent, modcall)) {
            snprintf(api, cap, "%s", rows[i].call);
            found = 0;
        }
    free(rows);
    return found;
}

typedef struct verdict {
    int ok;                      /* the rerun ran */
    size_t n;                    /* anomalies at the step */
    np_monitor_anomaly first;
} verdict;

static void judge(verdict *v, const char *dir, const char *rdir, int64_t step,
                  const np_monitor_rules *rules)
{
    np_monitor_result res;
    np_error err;
    np_error_clear(&err);
    memset(v, 0, sizeof *v);
    /* each rank against its own history; the first over the ranks by call
     * order, then rank (nprobe monitor's order within a step) */
    for (int r = 0; r < n_ranks; r++) {
        if (np_monitor_analyze_rerun(&res, dir, r, step, rdir, rules, &err)) {
            np_cli_report(&err);
            v->ok = 0;
            return;
        }
        for (size_t i = 0; i < res.n; i++) {
            const np_monitor_anomaly *a = &res.anomalies[i];
            if (a->step != step)
                continue;
            if (!v->n++ || a->seq < v->first.seq || (a->seq == v->first.seq && a->rank < v->first.rank))
                v->first = *a;
        }
        np_monitor_result_free(&res);
    }
    v->ok = 1;
}

static void print_verdict(const char *what, const verdict *v)
{
    if (!v->n)
        printf("rerun %s: clean\n", what);
    else
        printf("rerun %s: reproduced (%zu anomalies; first rank %d %s %s %s %s %.6g)\n", what, v->n,
               v->first.rank, v->first.name, v->first.metric, v->first.rule, v->first.stat,
               v->first.value);
}

/* The precision TRAIN asks for (its last --precision; fp32 without). */
static const char *train_precision(char **train, int n)
{
    const char *p = "fp32";
    for (int i = 0; i + 1 < n; i++)
        if (!strcmp(train[i], "--precision"))
            p = train[i + 1];
    return p;
}

static int train_has(char **train, int n, const char *opt)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(train[i], opt))
            return 1;
    return 0;
}

/* TRAIN's integer option OPT (its last), or dflt */
static long train_int(char **train, int n, const char *opt, long dflt)
{
    long v = dflt;
    for (int i = 0; i + 1 < n; i++)
        if (!strcmp(train[i], opt))
            v = strtol(train[i + 1], NULL, 10);
    return v;
}

/* The rerun of VARIANT: a monitor into OUT/VARIANT and a statistics dump of
 * step S into OUT/VARIANT_dump; judged against DIR's history into *v. */
static int run_variant(verdict *v, const char *dir, const char *out, const char *variant,
                       char **train, int n_train, const char *ck, int64_t step,
                       const np_monitor_rules *rules, int fp32)
{
    char mcfg[4300], dcfg[4300], text[9000], rdir[4300];
    snprintf(rdir, sizeof rdir, "%s/%s", out, variant);
    snprintf(mcfg, sizeof mcfg, "%s/%s_monitor.json", out, variant);
    snprintf(dcfg, sizeof dcfg, "%s/%s_dump.json", out, variant);
    snprintf(text, sizeof text, "{\"task\": \"monitor\", \"dump_path\": \"%s\"}\n", rdir);
    if (write_text(mcfg, text))
        return -1;
    snprintf(text, sizeof text,
             "{\"task\": \"statistics\", \"level\": \"mix\", \"dump_path\": \"%s_dump\", "
             "\"step\": [%lld]}\n", rdir, (long long)step);
    if (write_text(dcfg, text))
        return -1;
    const char *extra[] = {"--monitor-config", mcfg, "--dump-config", dcfg, "--precision", "fp32",
                           "--load-other-precision"};
    /* a rerun that diverges (a NaN loss in fp32) exits non-zero: its
     * monitor file still holds the step */
    int bad = rerun(out, variant, train, n_train, ck, step, extra, fp32 ? 7 : 4);
    judge(v, dir, rdir, step, rules);
    if (!v->ok)
        np_cli_error("triage: the rerun '%s' %s (its output: %s/%s.log)", variant,
                     bad ? "failed" : "left no monitor record", out, variant);
    return v->ok ? 0 : -1;
}

/* The train options triage owns refused, the rules read: 0 or an exit code. */
static int setup(const triage_args *a, char **train, int n_train, np_monitor_rules *rules)
{
    static const char *const owned[] = {"--load", "--save", "--stop-after", "--dump-config",
                                        "--monitor-config", "--load-other-precision"};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        if (train_has(train, n_train, owned[i])) {
            np_cli_error("triage: %s is triage's own; leave it out of the train options after --",
                         owned[i]);
            return NP_EXIT_USAGE;
        }
    np_monitor_rules_default(rules);
    if (a->config) {
        static np_monitor_config cfg;
        np_error err;
        np_error_clear(&err);
        if (np_monitor_config_load(&cfg, a->config, &err)) {
            np_cli_report(&err);
            return NP_EXIT_USAGE;
        }
        *rules = cfg.rules;
    }
    return 0;
}

/* DIR's first anomaly into *first: -1, else the exit code (none: 0). */
static int find_first(const char *dir, const np_monitor_rules *rules, np_monitor_anomaly *first)
{
    np_monitor_result res;
    np_error err;
    np_error_clear(&err);
    if (np_monitor_analyze(&res, dir, rules, &err)) {
        np_cli_report(&err);
        return NP_EXIT_USAGE;
    }
    int rc = -1;
    n_ranks = res.ranks;
    if (res.ranks != 1 && !launcher) {
        np_cli_error("triage: %s holds %d ranks' files; give --launcher, the command that starts "
                     "them (\"mpirun -n %d\")", dir, res.ranks, res.ranks);
        rc = NP_EXIT_USAGE;
    } else if (!res.n) {
        printf("nprobe triage: no anomaly in %s\n", dir);
        rc = NP_EXIT_OK;
    } else {
        *first = res.anomalies[0];
    }
    np_monitor_result_free(&res);
    return rc;
}

/* The checkpoint of the rerun into a->load (without --load, the monitor's
 * own at the anomaly, into own[]), checked to be at the anomaly's step: -1,
 * else the exit code. */
static int checkpoint_for(triage_args *a, const char *dir, const np_monitor_anomaly *first,
                          char *own, size_t cap, int collective)
{
    np_error err;
    np_error_clear(&err);
    if (!a->load) {
        /* the checkpoint the monitor wrote on the anomaly (anomaly_checkpoint);
         * a tensor- or pipeline-parallel run's is one file of the whole
         * tensors, rank 0's */
        snprintf(own, cap, "%s/anomaly_rank%d.step%lld.h5", dir, collective ? 0 : first->rank,
                 (long long)first->step);
        if (access(own, R_OK)) {
            np_cli_error("triage: no --load and no %s (the monitor writes it with "
                         "\"anomaly_checkpoint\": true; else nprobe train ... --stop-after %lld "
                         "--save CKPT)", own, (long long)first->step);
            return NP_EXIT_USAGE;
        }
        a->load = own;
        printf("checkpoint: %s (the monitor's, at the anomaly)\n", own);
    }
    np_model_config lc;
    int64_t lstep = -1;
    uint64_t lseed = 0;
    if (np_checkpoint_read_config(&lc, &lstep, &lseed, a->load, &err)) {
        np_cli_report(&err);
        return NP_EXIT_USAGE;
    }
    if (lstep != first->step) {
        np_cli_error("triage: %s is at step %lld; the rerun needs one at the anomaly's step %lld "
                     "(nprobe train ... --stop-after %lld --save CKPT)", a->load, (long long)lstep,
                     (long long)first->step, (long long)first->step);
        return NP_EXIT_USAGE;
    }
    return -1;
}

int np_cmd_triage(int argc, char **argv)
{
    triage_args a;
    memset(&a, 0, sizeof a);
    int rc = np_cli_opts_parse(triage_opts_table, N_OPTS, &a, "triage", help_before, help_after,
                               argc, argv);
    if (rc)
        return rc - 1;
    char **train = argv + (a.rest ? a.rest : argc);
    int n_train = a.rest ? argc - a.rest : 0;
    const char *dir = a.dir;
    if (!dir || !a.out) {
        np_cli_error("triage: expected the monitor folder DIR and --out OUT (see "
                     "'nprobe triage --help')");
        return NP_EXIT_USAGE;
    }
    np_monitor_rules rules;
    np_monitor_anomaly first;
    launcher = a.launcher && a.launcher[0] ? a.launcher : NULL;
    if ((rc = setup(&a, train, n_train, &rules)) || (rc = find_first(dir, &rules, &first)) >= 0)
        return rc;
    printf("first anomaly: step %lld rank %d %s %s %s: %s %.6g\n", (long long)first.step,
           first.rank, first.name, first.metric, first.rule, first.stat, first.value);
    static char own[4200];
    long tp = train_int(train, n_train, "--tp", 1), pp = train_int(train, n_train, "--pp", 1);
    if ((rc = checkpoint_for(&a, dir, &first, own, sizeof own, tp > 1 || pp > 1)) >= 0)
        return rc;
    if (mkdir(a.out, 0755)) {
        np_cli_error("triage: cannot create %s: %s (it must not exist)", a.out, strerror(errno));
        return NP_EXIT_USAGE;
    }
    const char *prec = train_precision(train, n_train);
    int reduced = strcmp(prec, "fp32") != 0;
    verdict same, full = {0};
    char what[64];
    snprintf(what, sizeof what, "same (%s)", prec);
    if (run_variant(&same, dir, a.out, "same", train, n_train, a.load, first.step, &rules, 0))
        return NP_EXIT_USAGE;
    print_verdict(what, &same);
    const char *cls, *why, *opdump = NULL;
    const verdict *at = &same;
    if (!same.n) {
        cls = "transient";
        why = "the same step from the same state is clean: a one-time (hardware-like) event";
    } else {
        if (reduced) {
            if (run_variant(&full, dir, a.out, "fp32", train, n_train, a.load, first.step, &rules,
                            1))
                return NP_EXIT_USAGE;
            print_verdict("fp32", &full);
        } else {
            full = same;
        }
        if (reduced && !full.n) {
            cls = "numerics";
            why = "reproduced at the run's precision, clean in fp32";
            opdump = "same_dump";
        } else {
            at = &full;
            opdump = reduced ? "fp32_dump" : "same_dump";
            if (full.first.seq == 0) {
                cls = "data";
                why = "reproduced in fp32 at the module that reads the batch (the step's first "
                      "record): the batch itself";
                opdump = NULL;
            } else {
                cls = "code";
                why = "reproduced in fp32 past the batch's own module: a persistent defect";
            }
        }
    }
    printf("class: %s (%s)\n", cls, why);
    /* code (no clean rerun to compare with) and transient (gone on the
     * rerun): the op by replay of the calls the monitor kept, when it did */
    if ((!strcmp(cls, "code") || !strcmp(cls, "transient")) &&
        !np_cli_triage_kept_op(dir, first.step, first.rank, first.name))
        return NP_EXIT_OK;
    if (opdump && reduced && !full.n) {
        /* numerics: the op where the run's precision parts from fp32, by
         * compare of the two reruns' dumps of step S (the fp32 one the bench) */
        char api[NP_FMT_NAME_LEN];
        /* a sharded layout (--tp, --pp, with data parallel beside them):
         * compare assembles the step's logical tensors from all its ranks
         * under the lowest, rank 0 */
        int crank = tp > 1 || pp > 1 ? 0 : same.first.rank;
        if (!culprit_of(api, sizeof api, a.out, "fp32_dump", "same_dump", first.step, crank)) {
            printf("op: %s (compare of the %s rerun against the fp32 one: the first culprit)\n",
                   api, prec);
            return NP_EXIT_OK;
        }
        /* no culprit named: the anomalous module's first call, as for code */
    }
    if (opdump) {
        char dpath[4400], api[NP_FMT_NAME_LEN];
        snprintf(dpath, sizeof dpath, "%s/%s", a.out, opdump);
        if (!first_api_of(api, sizeof api, dpath, first.step, at->first.rank, at->first.name))
            printf("op: %s (in %s)\n", api, at->first.name);
        else
            printf("op: not found (no API call of %s in %s)\n", at->first.name, dpath);
    }
    return NP_EXIT_OK;
}
