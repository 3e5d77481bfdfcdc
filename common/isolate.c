/* common/isolate.c - run a risky piece of work in a child process.
 *
 * HDF5 1.10 can crash (SIGSEGV in H5HG_read, H5T conversion, H5Aexists) on
 * a file whose metadata bytes are corrupt, and h5py with it. nprobe's
 * readers first walk such a file in a forked child: if the child dies, the
 * file is reported as corrupt and left out, and the caller - a compare of
 * many steps, `nprobe ls` - goes on. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nprobe/common.h"

int np_isolated_start(np_isolated *h, int (*fn)(void *), void *arg)
{
    h->pid = -1;
    clock_gettime(CLOCK_MONOTONIC, &h->t0);
    pid_t pid = fork();
    if (pid < 0)
        return NP_ISOLATE_NOFORK;
    if (pid == 0) {
        /* the child: a crash ends it by its signal (not by a handler the
         * process installed, e.g. a sanitizer's), no stdio flush, no
         * atexit handlers */
        signal(SIGPIPE, SIG_DFL);
        signal(SIGSEGV, SIG_DFL);
        signal(SIGBUS, SIG_DFL);
        signal(SIGILL, SIG_DFL);
        signal(SIGFPE, SIG_DFL);
        _exit(fn(arg) & 0x7f);
    }
    h->pid = (long)pid;
    return 0;
}

int np_isolated_wait(np_isolated *h, double timeout_s, int *sig)
{
    if (sig)
        *sig = 0;
    if (h->pid <= 0)
        return NP_ISOLATE_NOFORK;
    pid_t pid = (pid_t)h->pid;
    h->pid = -1;
    int status = 0;
    pid_t r;
    long nap_ns = 100000; /* 0.1 ms, doubling to 20 ms */
    for (;;) {
        r = waitpid(pid, &status, timeout_s > 0 ? WNOHANG : 0);
        if (r == pid || (r < 0 && errno != EINTR))
            break;
        if (r == 0) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            double el = (double)(now.tv_sec - h->t0.tv_sec) +
                        (double)(now.tv_nsec - h->t0.tv_nsec) * 1e-9;
            if (el > timeout_s) {
                kill(pid, SIGKILL);
                while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                    ;
                return NP_ISOLATE_TIMEOUT;
            }
            struct timespec ts = {0, nap_ns};
            nanosleep(&ts, NULL);
            if (nap_ns < 20000000)
                nap_ns *= 2;
        }
    }
    if (r < 0)
        return NP_ISOLATE_NOFORK;
    if (WIFSIGNALED(status)) {
        if (sig)
            *sig = WTERMSIG(status);
        return NP_ISOLATE_CRASHED;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : NP_ISOLATE_CRASHED;
}

double np_file_check_timeout(void)
{
    const char *ev = getenv("NPROBE_FILE_CHECK_TIMEOUT");
    double v = ev ? atof(ev) : 0;
    return v > 0 ? v : 120.0;
}

np_status np_isolated_walk_error(np_error *err, const char *path, int r, int sig, double limit)
{
    if (r == NP_ISOLATE_TIMEOUT)
        return np_error_set(err, NP_ERR_FORMAT, path, NULL,
                            "the file is corrupt: reading its metadata did not finish in %g s (the "
                            "HDF5 library looped, in a child process; NPROBE_FILE_CHECK_TIMEOUT "
                            "sets the limit)",
                            limit);
    if (r == NP_ISOLATE_CRASHED)
        return np_error_set(err, NP_ERR_FORMAT, path, NULL,
                            "the file is corrupt: reading its metadata crashed the HDF5 library "
                            "(signal %d, in a child process)",
                            sig);
    return NP_OK;
}

int np_run_isolated(int (*fn)(void *), void *arg, double timeout_s, int *sig)
{
    np_isolated h;
    int r = np_isolated_start(&h, fn, arg);
    return r ? r : np_isolated_wait(&h, timeout_s, sig);
}
