/* tests/probe/test_probe_crash.c - crash safety. A child process dumps many
 * steps (tensor task, sync and async) and is killed with SIGKILL at random
 * moments. Afterwards every dump.h5 must be complete and hold exactly the
 * rows and payload bytes of an uninterrupted reference run; the step in
 * progress is either absent, or a dump.h5.partial that the reader opens
 * (complete=0, rows are a prefix of the reference) or refuses cleanly with
 * NP_ERR_INCOMPLETE - checked in a forked reader so that a crash of the
 * reader would be seen as a failure, not take the test down.
 *
 * Two sizes: many small payloads (24 KB, written through HDF5) and fewer
 * large ones (280 KB, above the writer's DIRECT_MIN: written around the
 * page cache with O_DIRECT where the file system allows it, the path the
 * multi-gigabyte dumps take). The test directory is under $TMPDIR (or
 * /tmp); the large run says whether O_DIRECT was in use there. */
#define _GNU_SOURCE /* O_DIRECT */
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "nprobe/dumpio.h"
#include "nprobe/probe.h"

#define MAX_STEPS 40
/* the configuration of the current suite (small or large payloads) */
static int N_STEPS = 40, N_CALLS = 12, NUMEL = 6000, ROWS = 60, COLS = 100;

static void child_run(const char *dir, int async)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"task\": \"tensor\", \"dump_path\": \"%s\", \"level\": \"L1\","
             " \"async_dump\": %s, \"queue_mb\": 1}", dir, async ? "true" : "false");
    np_probe *p = NULL;
    if (np_probe_open_json(&p, json, NULL, NULL))
        _exit(3);
    float *x = malloc((size_t)NUMEL * sizeof *x);
    if (!x)
        _exit(4);
    np_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = NP_FLOAT32;
    t.ndim = 2;
    t.shape[0] = ROWS;
    t.shape[1] = COLS;
    t.numel = NUMEL;
    t.data = x;
    for (int s = 0; s < N_STEPS; s++) {
        np_hook_event ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = NP_EV_STEP_BEGIN;
        ev.step = s;
        np_probe_on_event(&ev, p);
        for (int c = 0; c < N_CALLS; c++) {
            for (int i = 0; i < NUMEL; i++)
                x[i] = (float)(s * 1000 + c) + (float)i * 0.001f;
            char name[64];
            snprintf(name, sizeof name, "Functional.gelu.%d.forward", c);
            np_hook_tensor ht[2] = {{NP_ROLE_INPUT, 0, NULL, &t}, {NP_ROLE_OUTPUT, 0, NULL, &t}};
            ev.kind = NP_EV_API_FORWARD;
            ev.name = name;
            ev.seq = c;
            ev.tensors = ht;
            ev.n_tensors = 2;
            np_probe_on_event(&ev, p);
        }
        ev.kind = NP_EV_STEP_END;
        ev.name = NULL;
        ev.tensors = NULL;
        ev.n_tensors = 0;
        np_probe_on_event(&ev, p);
    }
    np_probe_close(p, NULL, NULL);
    np_probe_free(p);
    _exit(0);
}

/* Rows and all payload bytes of one file, for comparison. */
typedef struct content {
    np_entry_rec *rows;
    size_t n;
    float *data;   /* n * NUMEL floats (rows without payload left zero) */
} content;

static int load(content *c, const char *path)
{
    memset(c, 0, sizeof *c);
    np_dumpio *d = NULL;
    if (np_dumpio_open(&d, path, NULL, 0, NULL))
        return -1;
    int rc = np_dumpio_read_entries(&c->rows, &c->n, d, NULL) ? -1 : 0;
    if (rc == 0 && c->n) {
        c->data = calloc(c->n * (size_t)NUMEL, sizeof(float));
        double *v = malloc(NUMEL * sizeof *v);
        for (size_t i = 0; i < c->n && rc == 0; i++) {
            size_t got;
            if (np_dumpio_read_values(v, (size_t)NUMEL, &got, d, c->rows[i].name, c->rows[i].numel, NULL) ||
                got != (size_t)NUMEL) {
                rc = -1;
                break;
            }
            for (size_t k = 0; k < (size_t)NUMEL; k++)
                c->data[i * NUMEL + k] = (float)v[k];
        }
        free(v);
    }
    np_dumpio_close(d);
    return rc;
}

static void unload(content *c)
{
    free(c->rows);
    free(c->data);
}

static int same(const content *a, const content *b, size_t n)
{
    return a->n >= n && b->n >= n && memcmp(a->rows, b->rows, n * sizeof *a->rows) == 0 &&
           memcmp(a->data, b->data, n * (size_t)NUMEL * sizeof(float)) == 0;
}

/* Open a partial file in a child: 0 read fine with a prefix of ref rows (or
 * all of them when the step was closed but not yet renamed),
 * 1 refused cleanly, 2 wrong content, other: the reader crashed. */
static int check_partial(const char *path, const content *ref)
{
    pid_t pid = fork();
    if (pid == 0) {
        np_dumpio *d = NULL;
        np_status st = np_dumpio_open(&d, path, NULL, 0, NULL);
        if (st == NP_ERR_INCOMPLETE || st == NP_ERR_FORMAT)
            _exit(1);
        if (st)
            _exit(2);
        /* complete = 1 in a .partial: killed while closing the step or before
         * the rename. The .partial name is what marks the step incomplete;
         * such a file is either refused cleanly or holds the whole step. */
        int closed = np_dumpio_get_info(d)->complete != 0;
        np_dumpio_close(d);
        content c;
        if (load(&c, path) != 0)
            _exit(1);
        int ok = closed ? c.n == ref->n && same(&c, ref, c.n) : c.n <= ref->n && same(&c, ref, c.n);
        unload(&c);
        _exit(ok ? 0 : 2);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

static void suite(const char *tmp, int kills)
{
    int status;

    /* The reference: an uninterrupted run. */
    char ref_dir[600];
    snprintf(ref_dir, sizeof ref_dir, "%s/ref", tmp);
    pid_t pid = fork();
    if (pid == 0)
        child_run(ref_dir, 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    waitpid(pid, &status, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    long run_us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
    content ref[MAX_STEPS];
    for (int s = 0; s < N_STEPS; s++) {
        char f[700];
        snprintf(f, sizeof f, "%s/step%d/rank0/dump.h5", ref_dir, s);
        CHECK_MSG(load(&ref[s], f) == 0 && ref[s].n == (size_t)(2 * N_CALLS), "reference step %d",
                  s);
    }

    srand(12345);
    int partial_read = 0, partial_refused = 0, completed_total = 0;
    for (int k = 0; k < kills; k++) {
        int async = k % 2;
        char dir[600];
        snprintf(dir, sizeof dir, "%s/kill%d", tmp, k);
        long delay = 1000 + (long)(rand() % (int)(run_us > 2000 ? run_us - 1000 : 1000));
        pid = fork();
        if (pid == 0)
            child_run(dir, async);
        struct timespec ts = {delay / 1000000L, (delay % 1000000L) * 1000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        int completed = 0, partials = 0;
        for (int s = 0; s < N_STEPS; s++) {
            char f[700], fp[720];
            snprintf(f, sizeof f, "%s/step%d/rank0/dump.h5", dir, s);
            snprintf(fp, sizeof fp, "%s.partial", f);
            struct stat sb;
            if (stat(f, &sb) == 0) {
                content c;
                int ok = load(&c, f) == 0 && c.n == ref[s].n && same(&c, &ref[s], c.n);
                CHECK_MSG(ok, "kill %d (%s, after %ld us): completed step %d differs", k,
                          async ? "async" : "sync", delay, s);
                unload(&c);
                completed++;
            }
            if (stat(fp, &sb) == 0) {
                partials++;
                int r = check_partial(fp, &ref[s]);
                CHECK_MSG(r == 0 || r == 1, "kill %d: partial step %d: reader result %d", k, s,
                          r);
                partial_read += r == 0;
                partial_refused += r == 1;
            }
        }
        CHECK_MSG(partials <= 1, "kill %d: %d partial files", k, partials);
        /* Completed steps are a prefix of the run. */
        for (int s = 0; s < completed; s++) {
            char f[700];
            snprintf(f, sizeof f, "%s/step%d/rank0/dump.h5", dir, s);
            struct stat sb;
            CHECK_MSG(stat(f, &sb) == 0, "kill %d: step %d missing before a later one", k, s);
        }
        completed_total += completed;
        fprintf(stderr, "kill %d (%s) after %ld us of ~%ld: %d complete step(s), %d partial\n", k,
                async ? "async" : "sync", delay, run_us, completed, partials);
    }
    fprintf(stderr, "partial files: %d read, %d refused cleanly; %d complete steps checked\n",
            partial_read, partial_refused, completed_total);
    for (int s = 0; s < N_STEPS; s++)
        unload(&ref[s]);
}

/* 1 when the file system of `dir` accepts O_DIRECT (the writer then uses it
 * for large payloads). */
static int direct_ok(const char *dir)
{
    char f[800];
    snprintf(f, sizeof f, "%s/direct_probe", dir);
    int fd = open(f, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (fd >= 0)
        close(fd);
    unlink(f);
    return fd >= 0;
}

int main(void)
{
    const char *td = getenv("TMPDIR");
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s/np_probe_crash_XXXXXX", td && *td ? td : "/tmp");
    if (!mkdtemp(tmp))
        return 1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int kills = getenv("NP_SANITIZED") ? 3 : 6;
    char sub[700];
    /* small payloads, many steps */
    snprintf(sub, sizeof sub, "%s/small", tmp);
    mkdir(sub, 0700);
    suite(sub, kills);
    /* large payloads (280 KB each, above DIRECT_MIN), fewer steps */
    N_STEPS = 10;
    N_CALLS = 3;
    ROWS = 280;
    COLS = 256;
    NUMEL = ROWS * COLS;
    snprintf(sub, sizeof sub, "%s/large", tmp);
    mkdir(sub, 0700);
    fprintf(stderr, "large payloads (%d bytes each): O_DIRECT %s in %s\n", NUMEL * 4,
            direct_ok(sub) ? "in use" : "refused by the file system (buffered fallback)", sub);
    suite(sub, kills);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (check_failures_ == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return check_report();
}
