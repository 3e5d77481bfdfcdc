/* cli/cmd_promote.c - `nprobe promote`: find a smallest set of ops whose
 * promotion to float32 (the per-op overrides, NPROBE_FP32_OPS) brings a run
 * back within the reference's noise, by group testing over the candidates
 * the compare ranks first (docs/COMPARE.md, "nprobe promote").
 *
 * Each run is `nprobe dump -c CONFIG' -- CMD...` (CONFIG with its dump_path
 * moved into OUT/runK) and `nprobe compare -b BENCH -c OUT/runK` (json
 * report into OUT/cmpK); the verdict is compare's exit status and, with
 * --bench-log, the run's loss trajectory against the reference's, within
 * the reference's own step-to-step noise. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "cmd.h"
#include "opts.h"
#include "nprobe/common.h"

#define MAX_CAND 64
#define NAME_MAX_LEN 256
#define MAX_LOSS 4096
#define LOSS_SIGMAS 3.0 /* a run's loss may stray this many noise sigmas from the reference's */

typedef struct promote_ctx {
    const char *bench, *config, *out;
    char **cmd;
    int max_cand;
    char exe[4096];
    json_t *cfg;
    int runs;         /* runs made, the first (nothing promoted) included */
    double t0;        /* seconds of the first run */
    char sets[64][512]; /* the sets run (joined), and their seconds */
    double secs[64];
    int by_module;      /* --granularity module: candidates are module paths (or API calls) */
    const char *bench_log; /* the reference run's output: its loss trajectory (NULL: compare only) */
    double ref_loss[MAX_LOSS];
    int nloss;
    double sigma;       /* the reference's loss noise (loss_noise) */
} promote_ctx;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char help_before[] =
    "usage: nprobe promote -b BENCH -c CONFIG [-o OUTDIR] [--candidates N] [--bench-log FILE]\n"
    "                      [--granularity api|module] -- COMMAND [ARGS...]\n"
    "\n"
    "Find a smallest set of ops whose promotion to float32 inside autocast brings\n"
    "the run of COMMAND back within the reference's noise (nprobe compare against\n"
    "BENCH passes). COMMAND is run under `nprobe dump -c CONFIG` (its dump_path\n"
    "moved into OUTDIR/runK) with NPROBE_FP32_OPS set to the set under test; the\n"
    "candidates are the API names of the calls compare ranks first in the\n"
    "unpromoted run (culprits, then error rows, in order); with --granularity\n"
    "module, the innermost module path of each call (an API call 'NAME.N' outside\n"
    "any module), each module preceded by the modules inside it, so the smallest\n"
    "one that suffices is named. When all of them promoted still fail, the\n"
    "calls upstream of the first culprit are searched, in execution order (the\n"
    "cause may lie before where the error shows). One op responsible:\n"
    "ceil(log2 N) + 2 reruns. With --bench-log, a run is clean only if its loss\n"
    "trajectory (the number after 'loss' on each line of its output, 'final loss'\n"
    "left out) also stays within 3 sigma of the reference's at every step, sigma\n"
    "the reference's own step-to-step noise. Prints one line per run and, last,\n"
    "  promote: NAME[, NAME...]     (empty: nothing needs promoting)\n"
    "\n"
    "options:\n";

static const char help_after[] =
    "\n"
    "exit codes: 0 a set found and verified (or nothing needed), 1 no set of the\n"
    "candidates brings the run back, 2 usage or input error\n";

typedef struct promote_args {
    const char *bench, *config, *out, *bench_log, *granularity;
    int max_cand, rest;
} promote_args;

static const char *const granularities[] = {"api", "module"};

/* `nprobe promote`'s options: parsing and --help from this one table (cli/opts.h). */
#define F(f) offsetof(promote_args, f)
static const np_cli_opt promote_opts[] = {
    {NULL, "-b|--bench", "PATH", "the reference dump (a dump root)", NP_OPT_STR, F(bench), 0, 0, NULL,
     0, NULL},
    {NULL, "-c|--config", "FILE", "the dump config.json of the runs", NP_OPT_STR, F(config), 0, 0,
     NULL, 0, NULL},
    {NULL, "-o|--output", "DIR", "runs, logs and reports (default ./promote; created)", NP_OPT_STR,
     F(out), 0, 0, NULL, 0, NULL},
    {NULL, "--candidates", "N", "at most N candidates (default 16)", NP_OPT_INT, F(max_cand), 1,
     MAX_CAND, NULL, 0, NULL},
    {NULL, "--bench-log", "FILE", "the reference run's output, 3 or more lines 'loss L'", NP_OPT_STR,
     F(bench_log), 0, 0, NULL, 0, NULL},
    {NULL, "--granularity", "G", "api (default: API names, every call of an op) or module",
     NP_OPT_CHOICE, F(granularity), 0, 0, granularities, 2, NULL},
    {NULL, "--", "COMMAND", NULL, NP_OPT_REST, F(rest), 0, 0, NULL, 0, NULL},
    {NULL, "--help", NULL, "show this help", NP_OPT_HELP, 0, 0, 0, NULL, 0, NULL},
};
#undef F
#define N_PROMOTE_OPTS ((int)(sizeof promote_opts / sizeof promote_opts[0]))

/* Run argv with stdout and stderr into log (env NPROBE_FP32_OPS=ops); the
 * exit status, or -1 when it could not run. */
static int run_child(char *const *argv, const char *log, const char *ops)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (ops)
            setenv("NPROBE_FP32_OPS", ops, 1);
        else
            unsetenv("NPROBE_FP32_OPS");
        execv(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Join the candidates of mask into buf ("A,B"); sep ", " for printing. */
static void join(char *buf, size_t cap, char cand[][NAME_MAX_LEN], const int *in, int n, const char *sep)
{
    size_t l = 0;
    for (int i = 0; i < n; i++)
        if (in[i]) {
            size_t ls = l ? strlen(sep) : 0, lc = strlen(cand[i]);
            if (l + ls + lc + 1 > cap)
                break;
            memcpy(buf + l, sep, ls);
            memcpy(buf + l + ls, cand[i], lc);
            l += ls + lc;
        }
    buf[l] = '\0';
}

/* The loss trajectory of a run's output: on each line, the number after the
 * first word "loss" (then optional ':' or '='), in order; "final loss" (a
 * summary, as nprobe train's "done:" line) is not a step. The count, or -1
 * when the file cannot be read. */
static int read_losses(const char *path, double *out, int cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        for (char *p = line; (p = strstr(p, "loss")); p += 4) {
            if (p > line && (p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= 'A' && p[-1] <= 'Z')))
                continue; /* a word ending in "loss" */
            if (p - line >= 6 && !strncmp(p - 6, "final ", 6))
                break;
            char *q = p + 4, *end;
            while (*q == ' ' || *q == ':' || *q == '=' || *q == '\t')
                q++;
            double v = strtod(q, &end);
            if (end != q && q != p + 4) {
                out[n++] = v;
                break;
            }
        }
    }
    fclose(f);
    return n;
}

/* The reference's own loss noise: the RMS of its second differences
 * r_k = L_k - (L_{k-1} + L_{k+1}) / 2, k = 1..K-2, divided by sqrt(1.5)
 * (for independent noise of deviation s around a locally straight trend,
 * E[r^2] = 1.5 s^2). The batch-to-batch wobble of the curve: a promotion
 * that moves the loss less than that is within the reference's noise. */
static double loss_noise(const double *l, int k)
{
    double s = 0;
    for (int i = 1; i + 1 < k; i++) {
        double r = l[i] - 0.5 * (l[i - 1] + l[i + 1]);
        s += r * r;
    }
    return sqrt(s / (k - 2) / 1.5);
}

/* The largest |loss - reference| of a run's log over the reference's steps;
 * -1 when the log does not hold as many losses. */
static double loss_dev(const promote_ctx *pc, const char *log, int *got)
{
    static double l[MAX_LOSS];
    *got = read_losses(log, l, MAX_LOSS);
    if (*got < pc->nloss)
        return -1;
    double m = 0;
    for (int i = 0; i < pc->nloss; i++) {
        double d = fabs(l[i] - pc->ref_loss[i]);
        if (!(d <= m)) /* NaN too */
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* One run with the candidates of `in` promoted: 0 clean, 1 fails, -1 error. */
static int try_set(promote_ctx *pc, char cand[][NAME_MAX_LEN], const int *in, int n, const char *why)
{
    int k = pc->runs++;
    char dir[4096], cfgp[4096], log[4096], cmpdir[4096], cmplog[4096];
    snprintf(dir, sizeof dir, "%s/run%d", pc->out, k);
    snprintf(cfgp, sizeof cfgp, "%s/run%d.json", pc->out, k);
    snprintf(log, sizeof log, "%s/run%d.log", pc->out, k);
    snprintf(cmpdir, sizeof cmpdir, "%s/cmp%d", pc->out, k);
    snprintf(cmplog, sizeof cmplog, "%s/cmp%d.txt", pc->out, k);
    json_object_set_new(pc->cfg, "dump_path", json_string(dir));
    json_object_del(pc->cfg, "fp32_ops"); /* the set under test is the environment's */
    if (json_dump_file(pc->cfg, cfgp, JSON_INDENT(1))) {
        np_cli_error("promote: cannot write %s", cfgp);
        return -1;
    }
    char ops[8192];
    join(ops, sizeof ops, cand, in, n, ",");
    int argc = 0;
    while (pc->cmd[argc])
        argc++;
    char **argv = calloc((size_t)argc + 6, sizeof *argv);
    if (!argv)
        return -1;
    argv[0] = pc->exe;
    argv[1] = "dump";
    argv[2] = "-c";
    argv[3] = cfgp;
    argv[4] = "--";
    for (int i = 0; i < argc; i++)
        argv[5 + i] = pc->cmd[i];
    double t = now_s();
    int rc = run_child(argv, log, ops[0] ? ops : NULL);
    free(argv);
    t = now_s() - t;
    if (k == 0)
        pc->t0 = t;
    if (k < 64) {
        snprintf(pc->sets[k], sizeof pc->sets[k], "%.511s", ops);
        pc->secs[k] = t;
    }
    if (rc != 0) {
        np_cli_error("promote: run %d (%s) exited %d: see %s", k, ops[0] ? ops : "nothing promoted", rc, log);
        return -1;
    }
    char *cargv[] = {pc->exe, "compare", "-b", (char *)pc->bench, "-c", dir, "-o", cmpdir,
                     "--format", "json", NULL};
    int crc = run_child(cargv, cmplog, NULL);
    if (crc != 0 && crc != 1) {
        np_cli_error("promote: compare of run %d exited %d: see %s", k, crc, cmplog);
        return -1;
    }
    char shown[8192], lossnote[160] = "";
    join(shown, sizeof shown, cand, in, n, ", ");
    int verdict = crc;
    if (pc->bench_log) {
        int got = 0;
        double dev = loss_dev(pc, log, &got);
        if (dev < 0) {
            np_cli_error("promote: run %d printed %d losses, the reference %s %d: see %s", k, got, pc->bench_log,
                         pc->nloss, log);
            return -1;
        }
        int off = !(dev <= LOSS_SIGMAS * pc->sigma);
        verdict |= off;
        snprintf(lossnote, sizeof lossnote, "; loss max |dev| %.3g %s %.0f sigma %.3g%s", dev, off ? ">" : "<=",
                 LOSS_SIGMAS, LOSS_SIGMAS * pc->sigma, off && !crc ? ", compare clean" : "");
    }
    printf("run %d: %-12s promote {%s} -> %s (%.2f s%s%s)\n", k, why, shown, verdict ? "fails" : "clean", t,
           k ? "" : ", the run as it is", lossnote);
    fflush(stdout);
    return verdict;
}

/* The API name of a call ("Functional.layer_norm.0.forward" ->
 * "Functional.layer_norm"), or the module path of a module call. */
static void candidate_of(char *buf, size_t cap, const char *call)
{
    if (!strncmp(call, "Module.", 7)) { /* Module.h.0.ln_1.LayerNorm.forward.0 -> h.0.ln_1 */
        const char *p = call + 7, *f = strstr(p, ".forward.");
        if (!f)
            f = strstr(p, ".backward.");
        const char *cls = f;
        while (cls && cls > p && cls[-1] != '.')
            cls--;
        size_t n = cls && cls > p ? (size_t)(cls - 1 - p) : strlen(p);
        snprintf(buf, cap, "%.*s", (int)n, p);
        return;
    }
    size_t n = strlen(call);
    const char *e = call + n;
    /* drop ".forward"/".backward", then ".N" */
    const char *d = strrchr(call, '.');
    if (d && (!strcmp(d, ".forward") || !strcmp(d, ".backward")))
        e = d;
    const char *q = e;
    while (q > call && q[-1] >= '0' && q[-1] <= '9')
        q--;
    if (q < e && q > call && q[-1] == '.')
        e = q - 1;
    snprintf(buf, cap, "%.*s", (int)(e - call), call);
}

/* The API call of a call ("Functional.linear.5.forward" ->
 * "Functional.linear.5"), which the overrides match in every step. */
static void api_call_of(char *buf, size_t cap, const char *call)
{
    snprintf(buf, cap, "%s", call);
    char *d = strrchr(buf, '.');
    if (d && (!strcmp(d, ".forward") || !strcmp(d, ".backward")))
        *d = '\0';
}

static int has(char cand[][NAME_MAX_LEN], int n, const char *c)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(cand[i], c))
            return 1;
    return 0;
}

/* The module paths the reports name (every row's innermost module), in
 * execution order, each once: the finer candidates of --granularity module. */
typedef struct modlist {
    char (*p)[NAME_MAX_LEN];
    int n, cap;
} modlist;

static int add_one(char cand[][NAME_MAX_LEN], int *n, int max, const char *c)
{
    if (!c[0] || !strncmp(c, "Distributed.", 12) || has(cand, *n, c) || *n >= max)
        return 0;
    snprintf(cand[(*n)++], NAME_MAX_LEN, "%s", c);
    return 1;
}

/* Add the candidate of `call` (in module `module`, "" if none): its API
 * name, or under --granularity module its innermost module path, preceded
 * by the paths of mods inside that module (finest first), or its API call
 * when it is in no module. */
static int add_cand(const promote_ctx *pc, char cand[][NAME_MAX_LEN], int *n, const char *call, const char *module,
                    const modlist *mods)
{
    char c[NAME_MAX_LEN];
    if (!pc->by_module) {
        candidate_of(c, sizeof c, call);
        return add_one(cand, n, pc->max_cand, c);
    }
    if (!strncmp(call, "Module.", 7))
        module = call;
    const char *inner = module ? strrchr(module, '>') : NULL; /* a chain "Module.a... > Module.a.b...": the last */
    if (inner) {
        module = inner + 1;
        while (*module == ' ')
            module++;
    }
    if (!module || !module[0]) {
        api_call_of(c, sizeof c, call);
        return add_one(cand, n, pc->max_cand, c);
    }
    candidate_of(c, sizeof c, module);
    if (has(cand, *n, c))
        return 0;
    size_t lc = strlen(c);
    for (int pass = 0; pass < 2; pass++) /* deeper paths first: a path's children before it */
        for (int i = mods ? mods->n - 1 : -1; i >= 0; i--) {
            const char *m = mods->p[i];
            if (strncmp(m, c, lc) || m[lc] != '.')
                continue;
            int deep = strchr(m + lc + 1, '.') != NULL;
            if (deep == !pass)
                add_one(cand, n, pc->max_cand, m);
        }
    return add_one(cand, n, pc->max_cand, c);
}

/* run 0's json reports (OUT/cmp0/compare_result_*.json) into docs, in the
 * order of their names (rank, then step); their count. */
static int load_reports(const promote_ctx *pc, json_t **docs, int cap)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/cmp0", pc->out);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    char *files[256];
    int nf = 0;
    struct dirent *de;
    while ((de = readdir(d)) && nf < 256)
        if (!strncmp(de->d_name, "compare_result_", 15) && strstr(de->d_name, ".json"))
            files[nf++] = strdup(de->d_name);
    closedir(d);
    /* report names sort by rank then step: order steps first by name is fine
     * for a single rank; the culprits of every report come before rows */
    for (int i = 0; i < nf; i++)
        for (int j = i + 1; j < nf; j++)
            if (files[j] && files[i] && strcmp(files[j], files[i]) < 0) {
                char *t = files[i];
                files[i] = files[j];
                files[j] = t;
            }
    for (int i = 0; i < nf; i++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, files[i] ? files[i] : "");
        docs[i] = files[i] && i < cap ? json_load_file(p, 0, NULL) : NULL;
        free(files[i]);
    }
    return nf < cap ? nf : cap;
}

/* The column named `name` of a report's headers, (size_t)-1 if none. */
static size_t column(json_t *doc, const char *name)
{
    size_t h;
    json_t *hv;
    json_array_foreach(json_object_get(doc, "headers"), h, hv) if (json_is_string(hv) &&
                                                                  !strcmp(json_string_value(hv), name)) return h;
    return (size_t)-1;
}

/* The call of a row's leaf name: "Functional.linear.2.forward.input.0" ->
 * "Functional.linear.2.forward" (cut ".{role}.{index}"). */
static void row_call(char *call, size_t cap, const char *name)
{
    snprintf(call, cap, "%s", name);
    for (int cut = 0; cut < 2; cut++) {
        char *dot = strrchr(call, '.');
        if (dot)
            *dot = '\0';
    }
}

/* Candidates from run 0's json reports: culprits first, then the calls of
 * error rows, then of warning rows, then of every other row, each in the
 * order of the reports (steps, then execution order). */
static int candidates(promote_ctx *pc, char cand[][NAME_MAX_LEN])
{
    json_t *docs[256] = {0};
    int nf = load_reports(pc, docs, 256), n = 0;
    static char modbuf[1024][NAME_MAX_LEN];
    modlist mods = {modbuf, 0, 1024};
    for (int i = 0; pc->by_module && i < nf; i++) {
        size_t k, mcol = column(docs[i], "Module");
        json_t *e;
        json_array_foreach(json_object_get(docs[i], "rows"), k, e) {
            const char *m = json_string_value(json_array_get(e, mcol));
            char c[NAME_MAX_LEN];
            if (!m || strncmp(m, "Module.", 7))
                continue;
            candidate_of(c, sizeof c, m);
            if (c[0] && !has(mods.p, mods.n, c) && mods.n < mods.cap)
                snprintf(mods.p[mods.n++], NAME_MAX_LEN, "%s", c);
        }
    }
    static const char *const want[] = {NULL, "error", "warning", NULL};
    for (int pass = 0; pass < 4; pass++)
        for (int i = 0; i < nf; i++) {
            if (!docs[i])
                continue;
            size_t k;
            json_t *e;
            if (pass == 0) {
                json_array_foreach(json_object_get(docs[i], "culprits"), k, e) {
                    const char *call = json_string_value(json_object_get(e, "call"));
                    if (call)
                        add_cand(pc, cand, &n, call, json_string_value(json_object_get(e, "module")), &mods);
                }
                continue;
            }
            size_t vcol = column(docs[i], "Verdict"), mcol = column(docs[i], "Module");
            json_array_foreach(json_object_get(docs[i], "rows"), k, e) {
                const char *v = json_string_value(json_array_get(e, vcol));
                const char *name = json_string_value(json_array_get(e, 0));
                if (!v || !name || (want[pass] && strcmp(v, want[pass])))
                    continue;
                char call[NAME_MAX_LEN];
                row_call(call, sizeof call, name);
                add_cand(pc, cand, &n, call, json_string_value(json_array_get(e, mcol)), &mods);
            }
        }
    for (int i = 0; i < nf; i++)
        json_decref(docs[i]);
    return n;
}

/* The second candidate list, when promoting every ranked candidate does not
 * bring the run back (the cause lies upstream of where the error shows: a
 * bf16 router in block 0 moves block 1's input, whose router then flips a
 * token): the rows of the first report with a culprit, in execution order,
 * from its first through the first culprit's call, each row's candidate
 * (as add_cand: API name, or under --granularity module its innermost
 * module path, its API call outside modules) once, ordered by its last
 * forward row in the report (where it ends: a module after every module
 * inside it, so a block comes after its router); the last MAX_CAND of them
 * when there are more (those nearest the culprit). Ordered so, the search's
 * shortest clean prefix ends at the earliest op or module whose promotion
 * suffices. */
/* c with its first all-digit path component (a block's index: "h.1.mlp.router")
 * as '#' ("h.#.mlp.router"): the same op or module in every layer. */
static void layer_pattern(char *buf, size_t cap, const char *c)
{
    snprintf(buf, cap, "%s", c);
    for (char *p = buf; *p; p++) {
        if (p != buf && p[-1] != '.')
            continue;
        size_t d = strspn(p, "0123456789");
        if (d && (p[d] == '.' || !p[d])) {
            *p = '#';
            memmove(p + 1, p + d, strlen(p + d) + 1);
            return;
        }
    }
}

static int upstream_candidates(promote_ctx *pc, char cand[][NAME_MAX_LEN], int nranked)
{
    json_t *docs[256] = {0};
    int nf = load_reports(pc, docs, 256), n = 0;
    static char all[1024][NAME_MAX_LEN];
    static int last[1024];
    for (int i = 0; i < nf && !n; i++) {
        const char *first = json_string_value(json_object_get(json_array_get(json_object_get(docs[i], "culprits"), 0),
                                                              "call"));
        if (!first)
            continue;
        size_t k, mcol = column(docs[i], "Module");
        json_t *e;
        int past = 0; /* past the first culprit's call: no new candidate; forward rows still end modules */
        json_array_foreach(json_object_get(docs[i], "rows"), k, e) {
            const char *name = json_string_value(json_array_get(e, 0));
            if (!name)
                continue;
            char call[NAME_MAX_LEN], c[NAME_MAX_LEN];
            row_call(call, sizeof call, name);
            const char *module = !strncmp(call, "Module.", 7) ? call : json_string_value(json_array_get(e, mcol));
            const char *inner = module ? strrchr(module, '>') : NULL;
            if (inner)
                for (module = inner + 1; *module == ' '; module++)
                    ;
            if (!pc->by_module)
                candidate_of(c, sizeof c, call);
            else if (module && !strncmp(module, "Module.", 7))
                candidate_of(c, sizeof c, module);
            else
                api_call_of(c, sizeof c, call);
            int j = 0;
            while (j < n && strcmp(all[j], c))
                j++;
            if (j < n ? !past || strstr(call, ".forward") : !past && add_one(all, &n, 1024, c))
                last[j] = (int)k;
            if (!strcmp(call, first))
                past = 1;
        }
    }
    for (int i = 0; i < nf; i++)
        json_decref(docs[i]);
    /* the ranked candidates' layers: their counterparts in every block come first */
    static char pat[MAX_CAND][NAME_MAX_LEN];
    for (int i = 0; i < nranked; i++)
        layer_pattern(pat[i], NAME_MAX_LEN, cand[i]);
    static int first[1024];
    for (int i = 0; i < n; i++) {
        char p[NAME_MAX_LEN];
        layer_pattern(p, sizeof p, all[i]);
        first[i] = has(pat, nranked, p);
    }
    int order[1024];
    for (int i = 0; i < n; i++) { /* insertion sort: counterparts first, then by the last row (distinct) */
        int j = i;
        while (j > 0 && (first[order[j - 1]] < first[i] ||
                         (first[order[j - 1]] == first[i] && last[order[j - 1]] > last[i]))) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    int skip = n > MAX_CAND ? n - MAX_CAND : 0;
    for (int i = skip; i < n; i++)
        snprintf(cand[i - skip], NAME_MAX_LEN, "%s", all[order[i]]);
    return n - skip;
}

static int parse(promote_ctx *pc, int argc, char **argv)
{
    promote_args a = {NULL, NULL, "promote", NULL, "api", 16, 0};
    int rc = np_cli_opts_parse(promote_opts, N_PROMOTE_OPTS, &a, "promote", help_before, help_after,
                               argc, argv);
    if (rc)
        return rc;
    if (!a.bench || !a.config || !a.rest || a.rest >= argc) {
        np_cli_error("promote: -b BENCH, -c CONFIG and -- COMMAND are required (see 'nprobe promote --help')");
        return NP_EXIT_USAGE + 1;
    }
    pc->bench = a.bench;
    pc->config = a.config;
    pc->out = a.out;
    pc->max_cand = a.max_cand;
    pc->bench_log = a.bench_log;
    pc->by_module = !strcmp(a.granularity, "module");
    pc->cmd = argv + a.rest;
    return 0;
}

/* The smallest k (1..n) whose prefix {0..k-1} of `order`, with `fixed`, is
 * clean, knowing that the full prefix is (ceil(log2 n) runs at most), or,
 * when *untested, supposing it: then the full prefix is run only if the
 * search ends there (0 when it fails: no prefix is clean). */
static int shortest_prefix(promote_ctx *pc, char cand[][NAME_MAX_LEN], int nc, const int *order, int n,
                           const int *fixed, int *err, int *untested)
{
    int lo = 1, hi = n; /* prefix(hi) clean */
    if (*untested) {
        /* the search as if prefix(n) were clean; a clean run at hi < n settles it */
        int k = shortest_prefix(pc, cand, nc, order, n, fixed, err, &(int){0});
        if (*err || k < n)
            return (*untested = 0, k);
        int in[MAX_CAND];
        memcpy(in, fixed, sizeof in);
        for (int i = 0; i < n; i++)
            in[order[i]] = 1;
        int r = try_set(pc, cand, in, nc, "all");
        *untested = 0;
        *err = r < 0;
        return r == 0 ? n : 0;
    }
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        int in[MAX_CAND];
        memcpy(in, fixed, sizeof in);
        for (int i = 0; i < mid; i++)
            in[order[i]] = 1;
        int r = try_set(pc, cand, in, nc, "search");
        if (r < 0) {
            *err = 1;
            return -1;
        }
        if (r == 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return hi;
}

/* Adaptive group testing over cand[0..nc) (docs/COMPARE.md gives the
 * bounds): the shortest clean prefix names one needed op; fix it and search
 * the ops before it, until the fixed set alone is clean. untested: the full
 * list was not run (the upstream candidates). The set into found; 0 found
 * and verified, 1 no prefix is clean, 2 the set does not verify, -1 error. */
static int group_test(promote_ctx *pc, char cand[][NAME_MAX_LEN], int nc, int *found, int untested)
{
    int order[MAX_CAND], left = nc, err = 0;
    for (int i = 0; i < nc; i++)
        order[i] = i;
    while (left > 0) {
        int k = shortest_prefix(pc, cand, nc, order, left, found, &err, &untested);
        if (err)
            return -1;
        if (k == 0)
            return 1;
        found[order[k - 1]] = 1;
        left = k - 1;
        if (left == 0) /* found is the shortest clean prefix with what was fixed: a set that was run */
            return 0;
        int rf = try_set(pc, cand, found, nc, "verify");
        if (rf <= 0)
            return rf;
    }
    int rv = try_set(pc, cand, found, nc, "verify");
    return rv < 0 ? -1 : rv ? 2 : 0;
}

int np_cmd_promote(int argc, char **argv)
{
    promote_ctx pc;
    memset(&pc, 0, sizeof pc);
    int r = parse(&pc, argc, argv);
    if (r)
        return r - 1;
    ssize_t n = readlink("/proc/self/exe", pc.exe, sizeof pc.exe - 1);
    if (n <= 0) {
        np_cli_error("promote: cannot find this program (/proc/self/exe)");
        return NP_EXIT_USAGE;
    }
    pc.exe[n] = '\0';
    const char *why = NULL;
    int fd = np_open_regular(pc.config, &why);
    json_error_t je;
    pc.cfg = fd >= 0 ? json_loadfd(fd, 0, &je) : NULL;
    if (fd >= 0)
        close(fd);
    if (!pc.cfg || !json_is_object(pc.cfg)) {
        np_cli_error("promote: %s: %s", pc.config, why ? why : fd >= 0 ? je.text : "cannot read it");
        json_decref(pc.cfg);
        return NP_EXIT_USAGE;
    }
    if (pc.bench_log) {
        pc.nloss = read_losses(pc.bench_log, pc.ref_loss, MAX_LOSS);
        if (pc.nloss < 3) {
            np_cli_error("promote: --bench-log %s: %s", pc.bench_log,
                         pc.nloss < 0 ? strerror(errno)
                                      : "fewer than 3 lines with 'loss L' (the noise needs 3 steps or more)");
            json_decref(pc.cfg);
            return NP_EXIT_USAGE;
        }
        pc.sigma = loss_noise(pc.ref_loss, pc.nloss);
        printf("loss noise of the reference: %d steps, sigma %.6g (second differences); a run may stray %.0f sigma "
               "= %.6g\n",
               pc.nloss, pc.sigma, LOSS_SIGMAS, LOSS_SIGMAS * pc.sigma);
    }
    if (np_mkdirs(pc.out) != 0 && errno != EEXIST) {
        np_cli_error("promote: cannot create %s: %s", pc.out, strerror(errno));
        json_decref(pc.cfg);
        return NP_EXIT_USAGE;
    }
    static char cand[MAX_CAND][NAME_MAX_LEN];
    int none[MAX_CAND] = {0}, code = NP_EXIT_USAGE;
    int r0 = try_set(&pc, cand, none, 0, "as it is");
    if (r0 < 0)
        goto done;
    if (r0 == 0) {
        printf("promote: \n");
        code = NP_EXIT_OK;
        goto done;
    }
    int nc = candidates(&pc, cand);
    printf("candidates (%d, ranked by the compare of run 0):", nc);
    for (int i = 0; i < nc; i++)
        printf(" %s", cand[i]);
    printf("\n");
    int all[MAX_CAND], found[MAX_CAND] = {0};
    for (int i = 0; i < MAX_CAND; i++)
        all[i] = i < nc;
    int ra = nc ? try_set(&pc, cand, all, nc, "all") : 1, untested = 0, nranked = nc;
    if (ra < 0)
        goto done;
    if (ra) { /* the cause lies upstream of the culprits: the calls before the first, as executed */
        nc = upstream_candidates(&pc, cand, nranked);
        printf("all %d ranked candidates promoted still fail; candidates upstream of the first culprit (%d, in "
               "execution order):", nranked, nc);
        for (int i = 0; i < nc; i++)
            printf(" %s", cand[i]);
        printf("\n");
        untested = 1;
    }
    int g = nc ? group_test(&pc, cand, nc, found, untested) : 1;
    if (g < 0)
        goto done;
    if (g) {
        if (g == 2)
            printf("promote: the set found does not verify (the candidates interact)\n");
        else
            printf("promote: no set of the %d candidates brings the run back (all promoted still fails)\n", nc);
        code = NP_EXIT_DIFF;
        goto done;
    }
    char shown[8192];
    join(shown, sizeof shown, cand, found, nc, ", ");
    char ops[8192];
    join(ops, sizeof ops, cand, found, nc, ",");
    double tf = NAN;
    for (int k = pc.runs - 1; k >= 0 && isnan(tf); k--)
        if (k < 64 && !strcmp(pc.sets[k], ops))
            tf = pc.secs[k];
    int d = 0, lg = (int)ceil(log2(nc > 1 ? nc : 1));
    for (int i = 0; i < nc; i++)
        d += found[i];
    if (d <= 1)
        printf("reruns: %d (candidates %d%s, bound for one op ceil(log2 N) + 2 = %d); ", pc.runs - 1, nc,
               untested ? " upstream" : "", lg + 2);
    else
        printf("reruns: %d (candidates %d%s, bound for %d ops 1 + d (ceil(log2 N) + 1) = %d); ", pc.runs - 1, nc,
               untested ? " upstream" : "", d, 1 + d * (lg + 1));
    printf("cost of the promotion: the run took %.2f s as it is, %.2f s promoted (dump and all)\n", pc.t0, tf);
    printf("promote: %s\n", shown);
    code = NP_EXIT_OK;
done:
    json_decref(pc.cfg);
    return code;
}
