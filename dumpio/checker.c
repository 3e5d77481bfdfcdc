/* dumpio/checker.c - crash-isolated walks of many files, ahead of the reads.
 *
 * One child process per class of files (file i belongs to class
 * i % nchild) walks its files in order and writes one byte per file to a
 * pipe when the walk is done. The caller waits for a file's byte; if the
 * child dies on a file (EOF on the pipe, a signal from waitpid), that file
 * is corrupt and a new child takes the class up at the next file; if it
 * spends longer than the timeout on a file, it is killed the same way. A
 * child starts walking at once and runs ahead of the caller, so its work
 * overlaps the caller's reads on another core. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define MAX_CHILDREN 2

enum { PENDING = 0, WALKED, CRASHED, TIMED_OUT, UNCHECKED };

typedef struct child {
    pid_t pid;             /* -1: none running */
    int fd;                /* read end of its pipe, -1 */
    size_t next;           /* the file it reports next */
    struct timespec since; /* when its current file started, as far as we know */
} child;

struct np_dumpio_checker {
    const np_dumpio_ref *refs;   /* borrowed */
    size_t n;
    unsigned char *state;
    int *sig;
    int nchild;
    child ch[MAX_CHILDREN];
    double limit;
};

static double seconds_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* In the child: walk files first, first + step, ... and report each. */
static void child_main(const np_dumpio_checker *c, size_t first, int step, int fd)
{
    signal(SIGPIPE, SIG_DFL);
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    signal(SIGILL, SIG_DFL);
    signal(SIGFPE, SIG_DFL);
    for (size_t i = first; i < c->n; i += (size_t)step) {
        const np_dumpio_ref *r = &c->refs[i];
        unsigned char b = 0;
        if (r->source && r->source->walk && r->state < NP_DUMPIO_TEMP)
            b = (unsigned char)(r->source->walk(r->path) & 0x7f);
        while (write(fd, &b, 1) < 0 && errno == EINTR)
            ;
    }
    _exit(0);
}

/* Start a child for class `k` at file `first`; files of the class stay
 * unchecked when no child can be started. */
static void start_child(np_dumpio_checker *c, int k, size_t first)
{
    child *ch = &c->ch[k];
    ch->pid = -1;
    ch->fd = -1;
    ch->next = first;
    clock_gettime(CLOCK_MONOTONIC, &ch->since);
    if (first >= c->n)
        return;
    int p[2];
    pid_t pid = -1;
    if (pipe(p) == 0) {
        pid = fork();
        if (pid == 0) {
            close(p[0]);
            child_main(c, first, c->nchild, p[1]);
        }
        close(p[1]);
        if (pid < 0)
            close(p[0]);
    }
    if (pid < 0) {
        for (size_t i = first; i < c->n; i += (size_t)c->nchild)
            c->state[i] = UNCHECKED;
        ch->next = c->n;
        return;
    }
    ch->pid = pid;
    ch->fd = p[0];
}

static void reap(child *ch, int kill_it, int *sig)
{
    int status = 0;
    if (kill_it)
        kill(ch->pid, SIGKILL);
    while (waitpid(ch->pid, &status, 0) < 0 && errno == EINTR)
        ;
    *sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    close(ch->fd);
    ch->pid = -1;
    ch->fd = -1;
}

/* The child of class k ended or hung on its current file: mark that file
 * and go on with a new child at the next one. */
static void child_failed(np_dumpio_checker *c, int k, int timed_out)
{
    child *ch = &c->ch[k];
    int sig = 0;
    reap(ch, timed_out, &sig);
    size_t i = ch->next;
    if (i < c->n) {
        c->state[i] = timed_out ? TIMED_OUT : CRASHED;
        c->sig[i] = sig;
        start_child(c, k, i + (size_t)c->nchild);
    }
}

/* Read what the child of class k reported, waiting at most until its
 * current file's time is up. */
static void pump(np_dumpio_checker *c, int k)
{
    child *ch = &c->ch[k];
    double left = c->limit - seconds_since(&ch->since);
    struct pollfd pfd = {ch->fd, POLLIN, 0};
    int ms = left <= 0 ? 0 : left > 1e6 ? 1000000000 : (int)(left * 1000.0) + 1;
    int r = poll(&pfd, 1, ms);
    if (r < 0 && errno == EINTR)
        return;
    if (r == 0) {
        child_failed(c, k, 1);
        return;
    }
    unsigned char buf[256];
    ssize_t got = read(ch->fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR)
        return;
    if (got <= 0) {
        child_failed(c, k, 0); /* EOF before its current file's report: it died on it */
        return;
    }
    for (ssize_t j = 0; j < got && ch->next < c->n; j++) {
        c->state[ch->next] = WALKED;
        ch->next += (size_t)c->nchild;
    }
    clock_gettime(CLOCK_MONOTONIC, &ch->since);
    if (ch->next >= c->n) {
        int sig;
        reap(ch, 0, &sig);
    }
}

np_status np_dumpio_checker_start(np_dumpio_checker **out, const np_dumpio_ref *refs, size_t n,
                                  np_error *err)
{
    *out = NULL;
    np_dumpio_checker *c = calloc(1, sizeof *c);
    if (c) {
        c->state = calloc(n ? n : 1, 1);
        c->sig = calloc(n ? n : 1, sizeof *c->sig);
    }
    if (!c || !c->state || !c->sig) {
        np_dumpio_checker_free(c);
        return np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory for %zu files", n);
    }
    c->refs = refs;
    c->n = n;
    c->limit = np_file_check_timeout();
    c->nchild = n < MAX_CHILDREN ? (int)n : MAX_CHILDREN;
    int need = 0;
    for (size_t i = 0; i < n; i++) {
        if (!refs[i].source || !refs[i].source->walk || refs[i].state >= NP_DUMPIO_TEMP)
            c->state[i] = UNCHECKED;
        else
            need = 1;
    }
    if (!need || !dumpio_isolation_on()) {
        memset(c->state, UNCHECKED, n);
        c->nchild = 0;
    }
    for (int k = 0; k < c->nchild; k++)
        start_child(c, k, (size_t)k);
    *out = c;
    return NP_OK;
}

np_status np_dumpio_checker_wait(np_dumpio_checker *c, size_t i, np_error *err)
{
    if (i >= c->n)
        return np_error_set(err, NP_ERR_ARG, NULL, NULL, "file %zu of %zu", i, c->n);
    int k = c->nchild ? (int)(i % (size_t)c->nchild) : 0;
    while (c->state[i] == PENDING && c->ch[k].pid > 0)
        pump(c, k);
    if (c->state[i] == PENDING) /* the class's child is gone without a word */
        c->state[i] = UNCHECKED;
    if (c->state[i] == CRASHED)
        return np_isolated_walk_error(err, c->refs[i].path, NP_ISOLATE_CRASHED, c->sig[i],
                                      c->limit);
    if (c->state[i] == TIMED_OUT)
        return np_isolated_walk_error(err, c->refs[i].path, NP_ISOLATE_TIMEOUT, 0, c->limit);
    return NP_OK;
}

void np_dumpio_checker_free(np_dumpio_checker *c)
{
    if (!c)
        return;
    for (int k = 0; k < c->nchild; k++) {
        if (c->ch[k].pid > 0) {
            int sig;
            reap(&c->ch[k], 1, &sig);
        }
    }
    free(c->state);
    free(c->sig);
    free(c);
}
