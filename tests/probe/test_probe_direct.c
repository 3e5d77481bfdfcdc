/* tests/probe/test_probe_direct.c - large tensor payloads (written around the
 * page cache with O_DIRECT where the file system allows it, probe/h5writer.c)
 * read back bit for bit with the HDF5 C API, sync and async (a queue that
 * holds them and one smaller than a payload), from aligned and unaligned
 * memory, with sizes that leave a tail, span several staging buffers or fit
 * in one block; the tensor is changed right after each dump call, so a
 * payload must have been copied (or written) before the call returned. The
 * crc32 in /entries is checked against zlib over the expected bytes, and
 * where O_DIRECT works every large payload must start at a 4096-byte file
 * offset. Last, a file size limit below one payload gives NP_ERR_NOSPACE in
 * sync mode (a staged write failing) without killing the process, also not
 * at exit (the child ends with exit(), so HDF5's atexit handler runs). */
#define _GNU_SOURCE /* O_DIRECT */
#include <fcntl.h>
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "nprobe/format.h"
#include "nprobe/probe.h"

static char g_tmp[512];

#define NT 4
static const char *g_key[NT] = {"odd", "multi", "exact", "small"};

static void fill(float *x, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 65536.0f - 128.0f;
    }
}

static int direct_ok(const char *dir)
{
    char f[700];
    snprintf(f, sizeof f, "%s/odirect_probe", dir);
    int fd = open(f, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0666);
    if (fd >= 0)
        close(fd);
    unlink(f);
    return fd >= 0;
}

/* Check step `step` of `dir` against want[k] (n[k] floats each). */
static void check_step(const char *dir, int step, float **want, const size_t *n, int aligned,
                       const char *what)
{
    char path[800];
    snprintf(path, sizeof path, "%s/step%d/rank0/%s", dir, step, NP_FMT_FILE);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK_MSG(f >= 0, "%s: cannot open %s", what, path);
    if (f < 0)
        return;
    hid_t ed = H5Dopen2(f, NP_FMT_ENTRIES, H5P_DEFAULT);
    hid_t es = H5Dget_space(ed);
    hssize_t rows = H5Sget_simple_extent_npoints(es);
    CHECK_EQ_INT(rows, NT);
    np_entry_rec *recs = calloc((size_t)(rows > 0 ? rows : 1), sizeof *recs);
    hid_t mt = np_fmt_entry_h5type();
    CHECK(H5Dread(ed, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, recs) >= 0);
    for (int k = 0; k < NT; k++) {
        char leaf[200];
        snprintf(leaf, sizeof leaf, "%s/Big.forward.output.%s", NP_FMT_DATA, g_key[k]);
        hid_t d = H5Dopen2(f, leaf, H5P_DEFAULT);
        CHECK_MSG(d >= 0, "%s: no %s", what, leaf);
        if (d < 0)
            continue;
        float *got = malloc(n[k] * sizeof *got);
        CHECK(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
        CHECK_MSG(memcmp(got, want[k], n[k] * sizeof *got) == 0, "%s step %d: %s differs", what,
                  step, leaf);
        haddr_t off = H5Dget_offset(d);
        if (aligned && n[k] * sizeof(float) >= ((size_t)1 << 18))
            CHECK_MSG(off != HADDR_UNDEF && off % 4096 == 0, "%s: %s at offset %llu", what,
                      leaf, (unsigned long long)off);
        uint32_t crc = (uint32_t)crc32(0L, (const Bytef *)want[k], (uInt)(n[k] * sizeof(float)));
        int found = 0;
        for (hssize_t r = 0; r < rows; r++)
            if (strcmp(recs[r].name, leaf + strlen(NP_FMT_DATA) + 1) == 0) {
                found = 1;
                CHECK_EQ_INT(recs[r].crc32, crc);
            }
        CHECK(found);
        free(got);
        H5Dclose(d);
    }
    H5Tclose(mt);
    free(recs);
    H5Sclose(es);
    H5Dclose(ed);
    H5Fclose(f);
}

static void run_mode(const char *mode, const char *json_opts, int aligned)
{
    size_t n[NT] = {65536 + 3, 1500001, 262144, 1000};
    float *buf[NT], *x[NT], *want[2][NT];
    for (int k = 0; k < NT; k++) {
        /* unaligned memory (+4 bytes) except for "exact", which is aligned */
        buf[k] = aligned_alloc(4096, (n[k] * sizeof(float) + 8 + 4095) / 4096 * 4096);
        x[k] = k == 2 ? buf[k] : buf[k] + 1;
        for (int s = 0; s < 2; s++) {
            want[s][k] = malloc(n[k] * sizeof(float));
            fill(want[s][k], n[k], (uint32_t)(100 * s + k + 1));
        }
    }
    char dir[700], json[1200];
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, mode);
    snprintf(json, sizeof json, "{\"task\": \"tensor\", \"dump_path\": \"%s\"%s}", dir,
             json_opts);
    np_probe *p = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_probe_open_json(&p, json, NULL, &err), NP_OK);
    for (int s = 0; s < 2 && p; s++) {
        CHECK_EQ_INT(np_probe_step_begin(p, s, &err), NP_OK);
        for (int k = 0; k < NT; k++) {
            memcpy(x[k], want[s][k], n[k] * sizeof(float));
            np_tensor t;
            memset(&t, 0, sizeof t);
            t.dtype = NP_FLOAT32;
            t.ndim = 2;
            t.shape[0] = 1;
            t.shape[1] = (int64_t)n[k];
            t.numel = (int64_t)n[k];
            t.data = x[k];
            CHECK_EQ_INT(np_probe_dump(p, "Big.forward", NP_ROLE_OUTPUT, g_key[k], &t, &err),
                         NP_OK);
            /* the caller may reuse its tensor at once */
            memset(x[k], 0x7f, n[k] * sizeof(float));
        }
        CHECK_EQ_INT(np_probe_step_end(p, &err), NP_OK);
    }
    np_probe_summary sum;
    CHECK_EQ_INT(np_probe_close(p, &sum, &err), NP_OK);
    CHECK_MSG(err.status == NP_OK, "%s: %s", mode, err.text);
    np_probe_free(p);
    for (int s = 0; s < 2; s++)
        check_step(dir, s, want[s], n, aligned, mode);
    for (int k = 0; k < NT; k++) {
        free(buf[k]);
        free(want[0][k]);
        free(want[1][k]);
    }
}

static void test_fsize(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {3 << 20, 3 << 20};
        setrlimit(RLIMIT_FSIZE, &rl);
        char dir[700], json[1200];
        snprintf(dir, sizeof dir, "%s/fsize", g_tmp);
        snprintf(json, sizeof json, "{\"task\": \"tensor\", \"dump_path\": \"%s\"}", dir);
        np_probe *p = NULL;
        if (np_probe_open_json(&p, json, NULL, NULL))
            exit(10);
        size_t n = 1500001;
        float *x = calloc(n, sizeof *x);
        np_tensor t;
        memset(&t, 0, sizeof t);
        t.dtype = NP_FLOAT32;
        t.ndim = 1;
        t.data = x + 1;
        t.numel = t.shape[0] = (int64_t)n - 1;
        for (int s = 0; s < 2; s++) {
            np_probe_step_begin(p, s, NULL);
            np_probe_dump(p, "Big.forward", NP_ROLE_OUTPUT, "0", &t, NULL);
            np_probe_step_end(p, NULL);
        }
        np_probe_summary sum;
        np_error e;
        np_error_clear(&e);
        np_status st = np_probe_close(p, &sum, &e);
        np_probe_free(p);
        free(x);
        if (st != NP_ERR_NOSPACE || sum.error.status != NP_ERR_NOSPACE)
            exit(11);
        if (!strstr(e.text, "File too large"))
            exit(12);
        exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fsize: exit %d signal %d",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1,
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int main(void)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_tmp, sizeof g_tmp, "%s/np_probe_direct_XXXXXX", base);
    if (!mkdtemp(g_tmp))
        return 1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int aligned = direct_ok(g_tmp);
    test_fsize(); /* first: a child forked after OpenMP has started its threads hangs */
    run_mode("sync", "", aligned);
    run_mode("async", ", \"async_dump\": true, \"queue_mb\": 64", aligned);
    run_mode("async_small_queue", ", \"async_dump\": true, \"queue_mb\": 4", aligned);
    run_mode("deflate", ", \"compression\": \"deflate:1\"", 0);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (check_failures_ == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_tmp);
    return check_report();
}
