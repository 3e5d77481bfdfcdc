/* configcheck/collect_pip.c - pip.txt: the installed Python distributions of
 * an interpreter, from `python -m pip list --format=freeze`, or from
 * importlib.metadata when pip is absent. The child runs with a time limit
 * and its output is capped; nothing is printed. */
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

#define PIP_TIMEOUT_MS 60000
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

/* Run argv (argv[0] an executable path), stdin and stderr on /dev/null,
 * collect stdout. Returns the exit status (or -1) and *out (malloc'd). */
static int run_capture(char *const argv[], char **out, size_t *len)
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
    close(fds[1]);
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    int failed = buf == NULL;
    long long deadline = now_ms() + PIP_TIMEOUT_MS;
    while (!failed) {
        long long left = deadline - now_ms();
        if (left <= 0) {
            failed = 1;
            break;
        }
        struct pollfd pfd = {fds[0], POLLIN, 0};
        int pr = poll(&pfd, 1, (int)left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0) {
            failed = 1;
            break;
        }
        if (n + 4096 > cap) {
            if (cap >= PIP_MAX_OUTPUT) {
                failed = 1;
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                failed = 1;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fds[0], buf + n, cap - n - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fds[0]);
    if (failed)
        kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (failed || !WIFEXITED(status)) {
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return WEXITSTATUS(status);
}

np_status np_cc_collect_pip(char **out, const char *python, np_error *err)
{
    *out = NULL;
    const char *want = python ? python : "python3";
    char *exe = find_program(want);
    if (!exe)
        return np_error_set(err, NP_ERR_NOTFOUND, want, NULL,
                            "no executable Python interpreter found");
    char *text = NULL;
    size_t len = 0;
    char *pip_argv[] = {exe, "-m", "pip", "list", "--format=freeze",
                        "--disable-pip-version-check", NULL};
    int rc = run_capture(pip_argv, &text, &len);
    if (rc != 0 || len == 0) {
        free(text);
        char *meta_argv[] = {exe, "-c", (char *)importlib_script, NULL};
        rc = run_capture(meta_argv, &text, &len);
    }
    free(exe);
    if (rc != 0 || !text) {
        free(text);
        return np_error_set(err, NP_ERR_IO, want, NULL,
                            "could not list the installed packages (pip and importlib.metadata "
                            "both failed or timed out)");
    }
    *out = text;
    return NP_OK;
}
