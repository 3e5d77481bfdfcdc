/* cli/cmd_dump.c - `nprobe dump -c CONFIG -- CMD ARGS...`: validate the
 * config (exit 2, nothing written, on a bad one), run CMD with
 * NPROBE_DUMP_CONFIG=<absolute config path> (the runtime attaches the probe
 * from it), wait, then summarise the dump files this run wrote, read back
 * from disk: steps, ranks, calls, tensors, bytes, files, the first overflow
 * and any incomplete step. The exit code is the program's. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmd.h"
#include "opts.h"
#include "nprobe/dumpio.h"
#include "nprobe/probe.h"

/* ---- running COMMAND: SIGTERM/SIGINT/SIGHUP sent to nprobe dump reach it -- */

static const int g_fwd_sigs[] = {SIGTERM, SIGINT, SIGHUP};
enum { N_FWD = (int)(sizeof g_fwd_sigs / sizeof g_fwd_sigs[0]) };
static volatile sig_atomic_t g_child_pid; /* 0 until forked (and in the child) */
static volatile sig_atomic_t g_fwd_sig;   /* the last signal forwarded, 0 if none */

/* A signal sent to nprobe dump by a process (kill, a batch scheduler) is
 * passed on to COMMAND; one the terminal sent (Ctrl-C, si_code SI_KERNEL)
 * already reached COMMAND, which is in the same process group. */
static void forward_signal(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (g_child_pid > 0 && (!si || si->si_code != SI_KERNEL)) {
        int saved = errno;
        kill((pid_t)g_child_pid, sig);
        errno = saved;
    }
    g_fwd_sig = sig;
}

/* A signal ignored when nprobe dump started (nohup) stays ignored. */
static void set_forwarding(int on, struct sigaction *old)
{
    for (int k = 0; k < N_FWD; k++) {
        if (on) {
            if (sigaction(g_fwd_sigs[k], NULL, &old[k]) == 0 && old[k].sa_handler == SIG_IGN)
                continue;
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_sigaction = forward_signal;
            sa.sa_flags = SA_SIGINFO; /* waitpid returns EINTR: we say so */
            sigemptyset(&sa.sa_mask);
            sigaction(g_fwd_sigs[k], &sa, &old[k]);
        } else {
            sigaction(g_fwd_sigs[k], &old[k], NULL);
        }
    }
}

/* The Python package (python/nprobe) loads libnprobe: point it at the one
 * built beside this program ({dir}/lib/libnprobe.so), unless NPROBE_LIB is
 * set already. */
static void export_lib_path(void)
{
    char exe[PATH_MAX], lib[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (getenv("NPROBE_LIB") || n <= 0)
        return;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return;
    *slash = '\0';
    snprintf(lib, sizeof lib, "%s/lib/libnprobe.so", exe);
    if (access(lib, R_OK) == 0)
        setenv("NPROBE_LIB", lib, 1);
}

/* Fork and exec argv[0] with the config in the environment; wait for it
 * while forwarding signals. *status receives waitpid's status. -1 when no
 * child could be started. */
static int run_command(int *status, char **argv, const char *abs_cfg)
{
    sigset_t block, prev;
    sigemptyset(&block);
    for (int k = 0; k < N_FWD; k++)
        sigaddset(&block, g_fwd_sigs[k]);
    struct sigaction old[N_FWD];
    g_child_pid = 0;
    g_fwd_sig = 0;
    sigprocmask(SIG_BLOCK, &block, &prev);
    set_forwarding(1, old);
    pid_t pid = fork();
    if (pid == 0) {
        set_forwarding(0, old);
        sigprocmask(SIG_SETMASK, &prev, NULL);
        setenv("NPROBE_DUMP_CONFIG", abs_cfg, 1);
        setenv("NPROBE_DUMP_PARENT", "1", 1); /* the child leaves the scope warnings to us */
        export_lib_path();
        execvp(argv[0], argv);
        np_cli_error("dump: cannot run '%s': %s", argv[0], strerror(errno));
        _exit(127);
    }
    int fork_errno = errno;
    if (pid > 0)
        g_child_pid = pid;
    sigprocmask(SIG_SETMASK, &prev, NULL);
    if (pid < 0) {
        set_forwarding(0, old);
        np_cli_error("dump: cannot start '%s': %s", argv[0], strerror(fork_errno));
        return -1;
    }
    int said = 0;
    while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
        if (g_fwd_sig && !said) {
            np_cli_error("dump: received signal %d, passed on to '%s' (pid %ld); waiting for it "
                         "to end", (int)g_fwd_sig, argv[0], (long)pid);
            said = 1;
        }
    }
    g_child_pid = 0;
    set_forwarding(0, old);
    return 0;
}

typedef struct dump_args {
    const char *config;
    int rest;
} dump_args;

/* `nprobe dump`'s options: parsing and --help from this one table (cli/opts.h). */
static const np_cli_opt dump_opts[] = {
    {NULL, "-c|--config", "FILE", "the dump config (docs/CONFIG.md)", NP_OPT_STR,
     offsetof(dump_args, config), 0, 0, NULL, 0, NULL},
    {NULL, "--", "command", NULL, NP_OPT_REST, offsetof(dump_args, rest), 0, 0, NULL, 0, NULL},
    {NULL, "--help", NULL, "this help", NP_OPT_HELP, 0, 0, 0, NULL, 0, NULL},
};
#define N_DUMP_OPTS ((int)(sizeof dump_opts / sizeof dump_opts[0]))

static const char dump_before[] =
    "usage: nprobe dump -c CONFIG.json -- COMMAND [ARGS...]\n"
    "\n"
    "Run COMMAND with the probe on: the config is validated first (a bad one\n"
    "exits with 2 and writes nothing), COMMAND runs with NPROBE_DUMP_CONFIG set\n"
    "to the config's absolute path (`nprobe train` and programs using the probe\n"
    "read it), and at the end the dump files written by this run are read\n"
    "back and summarised: steps, ranks, calls, tensors, bytes, files, the first\n"
    "overflow (overflow_check), any incomplete step, and a warning when the\n"
    "config's scope never opened in a step, or opened and never closed.\n"
    "SIGTERM, SIGINT and SIGHUP sent to nprobe dump are passed on to COMMAND;\n"
    "nprobe dump waits for it to end, then summarises the finished steps.\n"
    "\n"
    "options:\n";
static const char dump_after[] =
    "\n"
    "exit code: COMMAND's (128+N if it was killed by signal N); 2 on a bad config\n"
    "or when COMMAND cannot be started.\n"
    "example: nprobe dump -c samples/configs/statistics.json -- nprobe train --model gpt --steps 2\n";

typedef struct dump_sum {
    long files, steps, ranks, calls, tensors, incomplete, unreadable;
    long long bytes, data_bytes;
    int has_overflow;
    char of_call[NP_FMT_NAME_LEN], of_module[NP_FMT_NAME_LEN];
    int of_step, of_rank;
    char incomplete_list[1024];
    /* the scope attributes of the step files (docs/FORMAT.md) */
    char scope_first[NP_FMT_NAME_LEN], scope_last[NP_FMT_NAME_LEN];
    long scope_steps, scope_unreached, scope_open;
    char unreached_list[512], open_list[512];
} dump_sum;

static void add_step(char *list, size_t cap, int step, int rank)
{
    size_t used = strlen(list);
    if (used < cap - 40)
        snprintf(list + used, cap - used, "%sstep %d rank %d", used ? ", " : "", step, rank);
}

/* How the scope fared in a finished step file (the probe records it when a
 * scope is configured): "not reached" or "open" are counted for a warning. */
static void note_scope(dump_sum *s, const np_dumpio_ref *r, const np_dumpio_info *in)
{
    if (!in->scope[0])
        return;
    s->scope_steps++;
    snprintf(s->scope_first, sizeof s->scope_first, "%s", in->scope_first);
    snprintf(s->scope_last, sizeof s->scope_last, "%s", in->scope_last);
    if (strcmp(in->scope, "not reached") == 0) {
        s->scope_unreached++;
        add_step(s->unreached_list, sizeof s->unreached_list, r->step, r->rank);
    } else if (strcmp(in->scope, "open") == 0) {
        s->scope_open++;
        add_step(s->open_list, sizeof s->open_list, r->step, r->rank);
    }
}

static int newer(const char *path, const struct timespec *t0)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return 0;
    if (sb.st_mtim.tv_sec != t0->tv_sec)
        return sb.st_mtim.tv_sec > t0->tv_sec;
    return sb.st_mtim.tv_nsec >= t0->tv_nsec;
}

static void add_incomplete(dump_sum *s, int step, int rank, const char *why)
{
    size_t used = strlen(s->incomplete_list);
    if (used < sizeof s->incomplete_list - 80)
        snprintf(s->incomplete_list + used, sizeof s->incomplete_list - used,
                 "%sstep %d rank %d (%s)", used ? ", " : "", step, rank, why);
    s->incomplete++;
}

/* The tensors, payload bytes and first overflow of one step file. */
static void sum_entries(dump_sum *s, np_dumpio *d, const np_dumpio_info *in)
{
    np_entry_rec *e = NULL;
    np_call_rec *c = NULL;
    size_t ne = 0, nc = 0;
    np_dumpio_read_entries(&e, &ne, d, NULL);
    np_dumpio_read_calls(&c, &nc, d, NULL);
    s->tensors += (long)ne;
    s->calls += (long)nc;
    for (size_t k = 0; k < ne; k++) {
        if (e[k].has_data) {
            int dt = np_dtype_from_name(e[k].dtype);
            s->data_bytes += (long long)e[k].numel *
                             (long long)np_dtype_storage_size(dt < 0 ? NP_FLOAT32 : (np_dtype)dt);
        }
        np_stats st = np_fmt_entry_stats(&e[k]);
        int bad = strcmp(e[k].role, "kwargs") != 0 &&
                  (st.nan_count || st.posinf_count || st.neginf_count);
        if (bad && !s->has_overflow && strcmp(in->task, "overflow_check") == 0) {
            s->has_overflow = 1;
            snprintf(s->of_call, sizeof s->of_call, "%s", e[k].call);
            s->of_step = (int)in->step;
            s->of_rank = (int)in->rank;
            for (size_t j = 0; j < nc; j++)
                if (c[j].seq == e[k].seq)
                    snprintf(s->of_module, sizeof s->of_module, "%s",
                             strcmp(c[j].kind, "module") == 0 ? c[j].call : c[j].parent);
        }
    }
    free(e);
    free(c);
}

/* The files this run wrote (finished or partial step files newer than t0),
 * copied out of refs (paths still point into refs). *out is the caller's. */
static size_t this_run(np_dumpio_ref **out, const np_dumpio_ref *refs, size_t n,
                       const struct timespec *t0)
{
    size_t m = 0;
    *out = malloc((n ? n : 1) * sizeof **out);
    for (size_t i = 0; *out && i < n; i++)
        if (refs[i].state < NP_DUMPIO_TEMP && newer(refs[i].path, t0))
            (*out)[m++] = refs[i];
    return m;
}

static void summarize(dump_sum *s, const char *dump_path, const struct timespec *t0)
{
    memset(s, 0, sizeof *s);
    np_dumpio_ref *refs = NULL, *mine = NULL;
    size_t n = 0;
    if (np_dumpio_find(&refs, &n, dump_path, NULL))
        return;
    np_dumpio_checker *chk = NULL;
    n = this_run(&mine, refs, n, t0);
    if (!mine || np_dumpio_checker_start(&chk, mine, n, NULL) != NP_OK)
        n = 0;
    int last_step = INT_MIN;
    int ranks_seen[64];
    int n_ranks = 0;
    for (size_t i = 0; i < n; i++) {
        const np_dumpio_ref *r = &mine[i];
        np_dumpio *d = NULL;
        if (np_dumpio_checker_wait(chk, i, NULL) ||
            np_dumpio_open_ref(&d, r, NP_DUMPIO_CHECKED, NULL)) {
            s->unreadable++;
            add_incomplete(s, r->step, r->rank, "unreadable partial file");
            continue;
        }
        const np_dumpio_info *in = np_dumpio_get_info(d);
        s->files++;
        struct stat sb;
        if (stat(r->path, &sb) == 0)
            s->bytes += (long long)sb.st_size;
        if (r->step != last_step) {
            s->steps++;
            last_step = r->step;
        }
        int known = 0;
        for (int k = 0; k < n_ranks; k++)
            known |= ranks_seen[k] == r->rank;
        if (!known && n_ranks < 64)
            ranks_seen[n_ranks++] = r->rank;
        int finished = r->state == NP_DUMPIO_COMPLETE && in->complete;
        if (!finished)
            add_incomplete(s, r->step, r->rank, "the run stopped during this step");
        sum_entries(s, d, in);
        if (finished)
            note_scope(s, r, in);
        np_dumpio_close(d);
    }
    s->ranks = n_ranks;
    np_dumpio_checker_free(chk);
    free(mine);
    free(refs);
}

static void print_summary(const dump_sum *s, const char *dump_path, const char *task)
{
    np_cli_printf("nprobe dump summary (%s, task %s)\n", dump_path, task);
    printf("  steps      %ld\n", s->steps);
    printf("  ranks      %ld\n", s->ranks);
    printf("  files      %ld\n", s->files);
    printf("  calls      %ld\n", s->calls);
    printf("  tensors    %ld\n", s->tensors);
    printf("  bytes      %lld (payloads %lld)\n", s->bytes, s->data_bytes);
    if (strcmp(task, "overflow_check") == 0) {
        if (s->has_overflow)
            np_cli_printf("  overflow   first at %s (step %d, rank %d%s%s)\n", s->of_call, s->of_step,
                   s->of_rank, s->of_module[0] ? ", module " : "", s->of_module);
        else
            printf("  overflow   none found\n");
    }
    if (s->incomplete)
        np_cli_printf("  incomplete %ld: %s\n", s->incomplete, s->incomplete_list);
    else
        printf("  incomplete 0\n");
    if (s->scope_steps)
        np_cli_printf("  scope      [%s, %s]: closed in %ld of %ld step file(s)\n", s->scope_first,
               s->scope_last, s->scope_steps - s->scope_unreached - s->scope_open,
               s->scope_steps);
    fflush(stdout);
    if (s->scope_unreached)
        np_cli_error("dump: warning: scope: the first call \"%s\" never arrived in %s, so "
                     "nothing was dumped there (is the name, the step or the level right? "
                     "`nprobe ls --calls` on a dump without scope lists the call names)",
                     s->scope_first, s->unreached_list);
    if (s->scope_open)
        np_cli_error("dump: warning: scope: the last call \"%s\" never arrived after \"%s\" "
                     "in %s, so everything to the end of the step was dumped",
                     s->scope_last, s->scope_first, s->open_list);
}

/* Why COMMAND cannot be started (as execvp would look it up: a path when
 * it holds a '/', else each PATH entry), NULL when it can: checked before
 * the fork so a missing program is a usage error (2), not the child's 127. */
static const char *command_missing(const char *cmd)
{
    struct stat sb;
    if (!cmd[0])
        return "empty command";
    if (strchr(cmd, '/')) {
        if (stat(cmd, &sb) != 0)
            return strerror(errno);
        if (!S_ISREG(sb.st_mode))
            return "not a regular file";
        return access(cmd, X_OK) == 0 ? NULL : "not executable";
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    char buf[PATH_MAX];
    for (const char *p = path;; p++) {
        size_t n = strcspn(p, ":");
        int len = snprintf(buf, sizeof buf, "%.*s%s%s", (int)n, p, n ? "/" : "./", cmd);
        if (len > 0 && (size_t)len < sizeof buf && stat(buf, &sb) == 0 && S_ISREG(sb.st_mode) &&
            access(buf, X_OK) == 0)
            return NULL;
        p += n;
        if (!*p)
            break;
    }
    return "no such command on PATH";
}

int np_cmd_dump(int argc, char **argv)
{
    dump_args a = {NULL, 0};
    int rc = np_cli_opts_parse(dump_opts, N_DUMP_OPTS, &a, "dump", dump_before, dump_after, argc, argv);
    if (rc)
        return rc - 1;
    const char *config = a.config;
    int i = a.rest ? a.rest : argc;
    if (!config) {
        np_cli_opts_help(stderr, dump_before, dump_opts, N_DUMP_OPTS, dump_after);
        np_cli_error("dump: missing -c CONFIG.json (see 'nprobe dump --help')");
        return NP_EXIT_USAGE;
    }
    if (i >= argc) {
        np_cli_error("dump: missing the command to run after '--' (see 'nprobe dump --help')");
        return NP_EXIT_USAGE;
    }
    const char *why = command_missing(argv[i]);
    if (why) {
        np_cli_error("dump: cannot run '%s': %s", argv[i], why);
        return NP_EXIT_USAGE;
    }
    np_error err;
    np_error_clear(&err);
    np_probe_config *cfg = NULL;
    if (np_probe_config_load(&cfg, config, &err)) {
        np_cli_report(&err);
        return NP_EXIT_USAGE;
    }
    char abs_cfg[PATH_MAX], dump_path[4096], task[32];
    if (config[0] == '/') {
        snprintf(abs_cfg, sizeof abs_cfg, "%s", config);
    } else {
        char cwd[PATH_MAX / 2];
        if (!getcwd(cwd, sizeof cwd)) {
            np_cli_error("dump: cannot get the current directory: %s", strerror(errno));
            np_probe_config_free(cfg);
            return NP_EXIT_USAGE;
        }
        snprintf(abs_cfg, sizeof abs_cfg, "%s/%s", cwd, config);
    }
    snprintf(dump_path, sizeof dump_path, "%s", np_probe_config_dump_path(cfg));
    snprintf(task, sizeof task, "%s", np_probe_task_name(np_probe_config_task(cfg)));
    np_probe_config_free(cfg);

    struct timespec t0;
    clock_gettime(CLOCK_REALTIME, &t0);
    t0.tv_nsec = 0; /* file times may be coarser than the clock */
    fflush(stdout);
    fflush(stderr);
    int status = 0;
    if (run_command(&status, argv + i, abs_cfg) != 0)
        return NP_EXIT_USAGE;
    int code = WIFEXITED(status) ? WEXITSTATUS(status)
                                 : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
    if (WIFEXITED(status) && code == 127)
        return code;
    dump_sum s;
    summarize(&s, dump_path, &t0);
    print_summary(&s, dump_path, task);
    if (WIFSIGNALED(status))
        np_cli_error("dump: '%s' was killed by signal %d", argv[i], WTERMSIG(status));
    return code;
}
