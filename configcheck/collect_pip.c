/* configcheck/collect_pip.c - pip.txt: the installed Python distributions of
 * an interpreter, from `python -m pip list --format=freeze`, or from
 * importlib.metadata when pip is absent. The child runs in its own process
 * group with one time limit for both tries (the group is killed when it
 * passes) and its output is capped; nothing is printed. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cc_internal.h"

#define PIP_TIMEOUT_S 60 /* default limit for listing the packages, both tries */
#define PIP_MAX_OUTPUT ((size_t)8 << 20)

static const char importlib_script[] =
    "import importlib.metadata as m\n"
    "r = {}\n"
    "for d in m.distributions():\n"
    "    n = d.metadata['Name']\n"
    "    if n:\n"
    "        r.setdefault(n.lower(), n + '==' + d.version)\n"
    "print('\\n'.join(sorted(r.values(), key=str.lower)))\n";

/* Resolve `name` (a path, or a program looked up on PATH) to an executable
 * file; malloc'd, or NULL. */
static char *find_program(const char *name)
{
    struct stat st;
    if (strchr(name, '/')) {
        if (stat(name, &st) == 0 && S_ISREG(st.st_mode) && access(name, X_OK) == 0)
            return strdup(name);
        return NULL;
    }
    const char *path = getenv("PATH");
    if (!path)
        return NULL;
    size_t nn = strlen(name);
    for (const char *p = path;;) {
        const char *c = strchr(p, ':');
        size_t dl = c ? (size_t)(c - p) : strlen(p);
        if (dl > 0) {
            char *cand = malloc(dl + nn + 2);
            if (!cand)
                return NULL;
            memcpy(cand, p, dl);
            cand[dl] = '/';
            memcpy(cand + dl + 1, name, nn + 1);
            if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
                return cand;
            free(cand);
        }
        if (!c)
            return NULL;
        p = c + 1;
    }
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The child's whole process group (it and whatever it started) is killed:
 * the child is not reaped yet, so its group id cannot have been reused. */
static void kill_group(pid_t pid)
{
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
}

/* Read the child's stdout into a growing buffer until EOF or the deadline.
 * 0 at EOF, -1 on timeout, too much output or no memory. */
static int read_until(int fd, long long deadline, char **buf, size_t *n, int *timed_out)
{
    size_t cap = 65536;
    if (!(*buf = malloc(cap)))
        return -1;
    for (;;) {
        long long left = deadline - now_ms();
        struct pollfd pfd = {fd, POLLIN, 0};
        int pr = left > 0 ? poll(&pfd, 1, (int)left) : 0;
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0) {
            *timed_out = 1;
            return -1;
        }
        if (*n + 4096 > cap) {
            char *nb = cap < PIP_MAX_OUTPUT ? realloc(*buf, cap * 2) : NULL;
            if (!nb)
                return -1;
            *buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, *buf + *n, cap - *n - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
        *n += (size_t)r;
    }
}

/* Wait for the child until the deadline (it may close its stdout and go on
 * running); 0 with *status, -1 on timeout. */
static int wait_until(pid_t pid, long long deadline, int *status)
{
    for (;;) {
        pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid)
            return 0;
        if (w < 0 && errno != EINTR)
            return -1;
        if (now_ms() >= deadline)
            return -1;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Run argv (argv[0] an executable path) in its own process group, stdin and
 * stderr on /dev/null, collect stdout, until `deadline` (now_ms() clock): then
 * the group is killed. Returns the exit status, or -1 (*timed_out set when
 * the deadline passed), and *out (malloc'd). */
static int run_capture(char *const argv[], long long deadline, char **out, size_t *len,
                       int *timed_out)
{
    int fds[2];
    *out = NULL;
    *len = 0;
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 2);
        }
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    setpgid(pid, pid); /* also here: no race with the kill below */
    close(fds[1]);
    char *buf = NULL;
    size_t n = 0;
    int status = 0;
    int failed = read_until(fds[0], deadline, &buf, &n, timed_out) != 0;
    close(fds[0]);
    if (!failed && wait_until(pid, deadline, &status) != 0)
        failed = *timed_out = 1;
    if (failed) {
        kill_group(pid);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    }
    if (failed || !WIFEXITED(status)) {
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return WEXITSTATUS(status);
}

np_status np_cc_collect_pip(char **out, const char *python, int timeout_s, np_error *err)
{
    *out = NULL;
    const char *want = python ? python : "python3";
    char *exe = find_program(want);
    if (!exe)
        return np_error_set(err, NP_ERR_NOTFOUND, want, NULL,
                            "no executable Python interpreter found");
    if (timeout_s <= 0)
        timeout_s = PIP_TIMEOUT_S;
    long long deadline = now_ms() + (long long)timeout_s * 1000; /* for both tries */
    char *text = NULL;
    size_t len = 0;
    int timed_out = 0;
    char *pip_argv[] = {exe, "-m", "pip", "list", "--format=freeze",
                        "--disable-pip-version-check", NULL};
    int rc = run_capture(pip_argv, deadline, &text, &len, &timed_out);
    if ((rc != 0 || len == 0) && !timed_out) {
        free(text);
        char *meta_argv[] = {exe, "-c", (char *)importlib_script, NULL};
        rc = run_capture(meta_argv, deadline, &text, &len, &timed_out);
    }
    free(exe);
    if (rc != 0 || !text) {
        free(text);
        if (timed_out)
            return np_error_set(err, NP_ERR_LIMIT, want, NULL,
                                "not collected: listing the installed packages did not finish "
                                "within %d s; the interpreter and what it started were killed",
                                timeout_s);
        return np_error_set(err, NP_ERR_IO, want, NULL,
                            "not collected: could not list the installed packages (pip and "
                            "importlib.metadata both failed)");
    }
    *out = text;
    return NP_OK;
}
