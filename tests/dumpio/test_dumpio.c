/* tests/dumpio/test_dumpio.c - the dump-reading module (include/internal/nprobe/dumpio.h)
 * on real HDF5 dumps written here (tests/compare/dumpwriter.c):
 * - finding step files: complete, partial, temporary and missing files of a
 *   root, a step directory, a rank directory, a file; the errors;
 * - root information and the entries streamed in chunks (5000 rows with
 *   known values), calls, a dump without /calls;
 * - the error codes: not HDF5, not a dump, another format version (the same
 *   NP_ERR_FORMAT from every reader), a missing file;
 * - payloads: raw float32 segments read with pread, float32 in memory from
 *   a compressed dataset, int64 widened to float64 with the crc32 of the
 *   stored bytes, the first values;
 * - file locking off: a dump held open for writing by another process;
 * - the batch checker on a second source of this test's own whose walk
 *   crashes (SIGSEGV) or hangs on chosen files: those files are reported
 *   corrupt, the others pass, in any order of waiting;
 * - the root attribute dp_grad_scale: 1 when absent, read when positive and
 *   finite, a file with 0, -1, NaN, Inf or a string refused naming the file
 *   and the attribute. */
#define _POSIX_C_SOURCE 200809L
#include <hdf5.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../check.h"
#include "../compare/dumpwriter.h"
#include "nprobe/dumpio.h"

static char tmpdir[512];

static void path_of(char *buf, size_t cap, const char *rel)
{
    snprintf(buf, cap, "%s/%s", tmpdir, rel);
}

/* A statistics or tensor dump of one relu call with n values 0, 1, ... */
static void write_small(const char *path, const char *task, int step, int rank, int n,
                        int layout, int complete)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *s = strrchr(dir, '/');
    if (s) {
        *s = '\0';
        tw_mkdirs(dir);
    }
    tw *w = tw_open(path, task, "fp32", step, rank);
    CHECK(w != NULL);
    if (!w)
        return;
    tw_layout(w, layout);
    float *v = malloc((size_t)n * sizeof *v);
    for (int i = 0; i < n; i++)
        v[i] = (float)i;
    int64_t shape[1] = {n};
    int q = tw_call(w, "Functional.relu.0.forward", "api", "", "");
    tw_tensor(w, q, "Functional.relu.0.forward", "output", "0", "float32", 1, shape, v);
    free(v);
    tw_close(w, complete);
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("partial", f);
        fclose(f);
    }
}

static void test_find(void)
{
    char p[1024], root[1024];
    path_of(root, sizeof root, "root");
    path_of(p, sizeof p, "root/step0/rank0/dump.h5");
    write_small(p, "statistics", 0, 0, 4, TW_CHUNKED, 1);
    path_of(p, sizeof p, "root/step0/rank1/dump.h5.partial");
    write_small(p, "statistics", 0, 1, 4, TW_CHUNKED, 0);
    path_of(p, sizeof p, "root/step1/rank0");
    tw_mkdirs(p);
    path_of(p, sizeof p, "root/step1/rank0/dump.h5.tmp");
    touch(p);
    path_of(p, sizeof p, "root/step1/rank1");
    tw_mkdirs(p);
    path_of(p, sizeof p, "root/step12/rank0/dump.h5");
    write_small(p, "statistics", 12, 0, 4, TW_CHUNKED, 1);
    path_of(p, sizeof p, "root/step12/rank0/dump.h5.partial");
    write_small(p, "statistics", 12, 0, 4, TW_CHUNKED, 0);
    path_of(p, sizeof p, "root/notastep");
    tw_mkdirs(p);

    np_dumpio_ref *r = NULL;
    size_t n = 0;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_find(&r, &n, root, &err), NP_OK);
    CHECK_EQ_INT(n, 6);
    if (n == 6) {
        /* sorted by step, rank, state */
        const int want_step[6] = {0, 0, 1, 1, 12, 12}, want_rank[6] = {0, 1, 0, 1, 0, 0};
        const np_dumpio_state want_state[6] = {NP_DUMPIO_COMPLETE, NP_DUMPIO_PARTIAL,
                                               NP_DUMPIO_TEMP,     NP_DUMPIO_MISSING,
                                               NP_DUMPIO_COMPLETE, NP_DUMPIO_PARTIAL};
        for (int i = 0; i < 6; i++) {
            CHECK_EQ_INT(r[i].step, want_step[i]);
            CHECK_EQ_INT(r[i].rank, want_rank[i]);
            CHECK_EQ_INT(r[i].state, want_state[i]);
            CHECK(r[i].source == &np_dumpio_nprobe_source);
        }
        CHECK_CONTAINS(r[2].path, "step1/rank0/dump.h5.tmp");
        CHECK_CONTAINS(r[3].path, "step1/rank1");
        CHECK_CONTAINS(r[5].path, "step12/rank0/dump.h5.partial");
    }
    free(r);
    /* a step directory: its ranks, step from its name */
    path_of(p, sizeof p, "root/step0");
    CHECK_EQ_INT(np_dumpio_find(&r, &n, p, &err), NP_OK);
    CHECK_EQ_INT(n, 2);
    if (n == 2)
        CHECK(r[0].step == 0 && r[1].rank == 1 && r[1].state == NP_DUMPIO_PARTIAL);
    free(r);
    /* a rank directory and a file: step and rank from the path */
    path_of(p, sizeof p, "root/step12/rank0");
    CHECK_EQ_INT(np_dumpio_find(&r, &n, p, &err), NP_OK);
    CHECK_EQ_INT(n, 2);
    if (n == 2)
        CHECK(r[0].step == 12 && r[0].rank == 0 && r[0].state == NP_DUMPIO_COMPLETE);
    free(r);
    path_of(p, sizeof p, "root/step0/rank1/dump.h5.partial");
    CHECK_EQ_INT(np_dumpio_find(&r, &n, p, &err), NP_OK);
    CHECK_EQ_INT(n, 1);
    if (n == 1) {
        CHECK(r[0].step == 0 && r[0].rank == 1 && r[0].state == NP_DUMPIO_PARTIAL);
        CHECK_STREQ(r[0].path, p);
    }
    free(r);
    /* nothing there; no dump below */
    path_of(p, sizeof p, "no_such_dir");
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_find(&r, &n, p, &err), NP_ERR_NOTFOUND);
    CHECK_CONTAINS(err.text, "no such file or directory");
    CHECK_CONTAINS(err.file, "no_such_dir");
    path_of(p, sizeof p, "root/notastep");
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_find(&r, &n, p, &err), NP_ERR_NOTFOUND);
    CHECK_CONTAINS(err.text, "no dump files (dump.h5 or dump.json) found here");
    /* every source's layout is named */
    CHECK_CONTAINS(err.text, "step*/rank*/dump.h5 (nprobe)");
    CHECK_CONTAINS(err.text, "step*/{rank*,proc*,rank}/dump.json (msprobe)");
    CHECK(r == NULL);
}

/* The entries sink of test_rows: checks the chunks arrive in order. */
typedef struct rows_seen {
    size_t hint, next, chunks;
    int in_order, values_ok;
} rows_seen;

static np_status seen_begin(void *user, size_t n_hint, np_error *err)
{
    (void)err;
    ((rows_seen *)user)->hint = n_hint;
    return NP_OK;
}

static np_status seen_rows(void *user, np_entry_rec *rows, size_t first, size_t n, np_error *err)
{
    (void)err;
    rows_seen *s = user;
    s->in_order &= first == s->next;
    s->next = first + n;
    s->chunks++;
    for (size_t i = 0; i < n; i++) {
        /* row k holds the tensor [k, k + 1]: max k + 1, min k, mean k + 0.5 */
        double k = (double)(first + i);
        char want[64];
        snprintf(want, sizeof want, "Functional.add.%zu.forward.output.0", first + i);
        s->values_ok &= rows[i].max == k + 1 && rows[i].min == k && rows[i].mean == k + 0.5 &&
                        strcmp(rows[i].name, want) == 0 && rows[i].ndim == 1 &&
                        rows[i].shape[0] == 2 && strcmp(rows[i].dtype, "float32") == 0;
    }
    return NP_OK;
}

static void test_rows(void)
{
    enum { ROWS = 5000 };
    char p[1024];
    path_of(p, sizeof p, "rows/step3/rank2/dump.h5");
    tw_mkdirs(tmpdir);
    char dir[1024];
    path_of(dir, sizeof dir, "rows/step3/rank2");
    tw_mkdirs(dir);
    tw *w = tw_open(p, "statistics", "bf16", 3, 2);
    CHECK(w != NULL);
    if (!w)
        return;
    tw_loss_scale(w, 1024.0);
    int64_t shape[1] = {2};
    for (int k = 0; k < ROWS; k++) {
        char call[64];
        snprintf(call, sizeof call, "Functional.add.%d.forward", k);
        int q = tw_call(w, call, "api", "Module.m.M.forward.0", "x.py:1");
        float v[2] = {(float)k, (float)k + 1};
        tw_tensor(w, q, call, "output", "0", "float32", 1, shape, v);
    }
    tw_close(w, 1);
    np_dumpio *d = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_open(&d, p, NULL, 0, &err), NP_OK);
    if (!d)
        return;
    const np_dumpio_info *in = np_dumpio_get_info(d);
    CHECK_STREQ(in->source, "nprobe");
    CHECK_STREQ(in->format, "nprobe-dump");
    CHECK_EQ_INT(in->format_version, 1);
    CHECK_STREQ(in->task, "statistics");
    CHECK_STREQ(in->precision, "bf16");
    CHECK_EQ_INT(in->step, 3);
    CHECK_EQ_INT(in->rank, 2);
    CHECK_EQ_INT(in->complete, 1);
    CHECK_EQ_INT(in->has_calls, 1);
    CHECK_EQ_FLOAT(in->loss_scale, 1024.0);
    CHECK_STREQ(np_dumpio_path(d), p);
    rows_seen s = {0, 0, 0, 1, 1};
    np_dumpio_entry_sink sink = {seen_begin, seen_rows, &s};
    CHECK_EQ_INT(np_dumpio_entries(d, &sink, &err), NP_OK);
    CHECK_EQ_INT(s.hint, ROWS);
    CHECK_EQ_INT(s.next, ROWS);
    CHECK(s.chunks >= 2); /* streamed, not one block */
    CHECK(s.in_order);
    CHECK(s.values_ok);
    np_call_rec *c = NULL;
    size_t nc = 0;
    CHECK_EQ_INT(np_dumpio_read_calls(&c, &nc, d, &err), NP_OK);
    CHECK_EQ_INT(nc, ROWS);
    if (nc == ROWS) {
        CHECK_STREQ(c[4321].call, "Functional.add.4321.forward");
        CHECK_STREQ(c[4321].parent, "Module.m.M.forward.0");
        CHECK_STREQ(c[4321].callsite, "x.py:1");
        CHECK_EQ_INT(c[4321].seq, 4321);
    }
    free(c);
    np_dumpio_close(d);
}

/* Rewrite a root attribute of a closed dump. */
static void set_attr_i64(const char *path, const char *name, int64_t v)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0);
    if (f < 0)
        return;
    H5Adelete(f, name);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Sclose(sp);
    H5Fclose(f);
}

static void set_attr_f64(const char *path, const char *name, double v)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0);
    if (f < 0)
        return;
    H5Adelete(f, name);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
    H5Aclose(a);
    H5Sclose(sp);
    H5Fclose(f);
}

/* The data-parallel factor of the gradients (root attribute dp_grad_scale,
 * docs/FORMAT.md): 1 in a file without it (every file before it), the
 * written value otherwise; a value that is no factor is refused at open
 * (NP_ERR_FORMAT naming the file and the attribute), not read as 1, since
 * gradients divided by a wrong factor would be judged wrongly. */
static void test_dp_grad_scale(void)
{
    char p[1024];
    np_dumpio *d = NULL;
    np_error err;
    path_of(p, sizeof p, "dp/step0/rank0/dump.h5");
    write_small(p, "statistics", 0, 0, 4, TW_CHUNKED, 1);
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_open(&d, p, NULL, 0, &err), NP_OK);
    if (d) {
        CHECK_EQ_FLOAT(np_dumpio_get_info(d)->dp_grad_scale, 1.0);
        CHECK_EQ_FLOAT(np_dumpio_get_info(d)->loss_scale, 1.0);
        np_dumpio_close(d);
        d = NULL;
    }
    set_attr_f64(p, "dp_grad_scale", 4.0);
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_open(&d, p, NULL, 0, &err), NP_OK);
    if (d) {
        CHECK_EQ_FLOAT(np_dumpio_get_info(d)->dp_grad_scale, 4.0);
        CHECK_EQ_FLOAT(np_dumpio_get_info(d)->loss_scale, 1.0); /* apart from the loss scale */
        CHECK_STREQ(np_dumpio_get_info(d)->problems, "");
        np_dumpio_close(d);
        d = NULL;
    }
    const double bad[] = {0.0, -2.0, NAN, INFINITY};
    const char *shown[] = {"is 0 ", "is -2 ", "is nan ", "is inf "};
    for (int k = 0; k < 4; k++) {
        set_attr_f64(p, "dp_grad_scale", bad[k]);
        np_error_clear(&err);
        CHECK_EQ_INT(np_dumpio_open(&d, p, NULL, 0, &err), NP_ERR_FORMAT);
        CHECK(d == NULL);
        CHECK_CONTAINS(err.file, "dp/step0/rank0/dump.h5");
        CHECK_STREQ(err.key, "dp_grad_scale");
        CHECK_CONTAINS(err.text, "root attribute 'dp_grad_scale'");
        CHECK_CONTAINS(err.text, shown[k]);
        CHECK_CONTAINS(err.text, "expected a positive finite factor");
        if (d) {
            np_dumpio_close(d);
            d = NULL;
        }
    }
    /* a string where a float64 belongs */
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0);
    if (f >= 0) {
        H5Adelete(f, "dp_grad_scale");
        hid_t sp = H5Screate(H5S_SCALAR), st = H5Tcopy(H5T_C_S1);
        H5Tset_size(st, 2);
        hid_t a = H5Acreate2(f, "dp_grad_scale", st, sp, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(a, st, "2");
        H5Aclose(a);
        H5Tclose(st);
        H5Sclose(sp);
        H5Fclose(f);
    }
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_open(&d, p, NULL, 0, &err), NP_ERR_FORMAT);
    CHECK_STREQ(err.key, "dp_grad_scale");
    CHECK_CONTAINS(err.text, "has the wrong type");
    if (d)
        np_dumpio_close(d);
}

static void test_errors(void)
{
    char p[1024];
    np_dumpio *d = NULL;
    np_error err;
    /* not HDF5 */
    path_of(p, sizeof p, "text.h5");
    touch(p);
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_open(&d, p, NULL, 0, &err), NP_ERR_FORMAT);
    CHECK_CONTAINS(err.text, "not an HDF5 file");
    CHECK_CONTAINS(err.file, "text.h5");
    /* a partial file that cannot be read */
    path_of(p, sizeof p, "cut/dump.h5.partial");
    char dir[1024];
    path_of(dir, sizeof dir, "cut");
    tw_mkdirs(dir);
    touch(p);
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_open(&d, p, NULL, 0, &err), NP_ERR_INCOMPLETE);
    CHECK_CONTAINS(err.text, "incomplete step");
    /* format version 3 (past NP_FMT_VERSION_MAX): NP_ERR_FORMAT, as every reader says it */
    path_of(p, sizeof p, "v2.h5");
    write_small(p, "statistics", 0, 0, 4, TW_CHUNKED, 1);
    set_attr_i64(p, "format_version", 3);
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_open(&d, p, NULL, 0, &err), NP_ERR_FORMAT);
    CHECK_CONTAINS(err.text, "format version 3");
    CHECK_STREQ(err.key, "format_version");
    CHECK(d == NULL);
    /* no such file */
    path_of(p, sizeof p, "absent.h5");
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_open(&d, p, NULL, 0, &err), NP_ERR_NOTFOUND);
    CHECK_CONTAINS(err.file, "absent.h5");
    CHECK(np_dumpio_source_by_name("nprobe") == &np_dumpio_nprobe_source);
    CHECK(np_dumpio_source_by_name("no-such-format") == NULL);
    CHECK(np_dumpio_sources()[0] == &np_dumpio_nprobe_source);
}

static void test_payloads(void)
{
    char p[1024];
    path_of(p, sizeof p, "pay/dump.h5");
    char dir[1024];
    path_of(dir, sizeof dir, "pay");
    tw_mkdirs(dir);
    tw *w = tw_open(p, "tensor", "fp32", 0, 0);
    CHECK(w != NULL);
    if (!w)
        return;
    enum { N = 1000 };
    float v[N];
    for (int i = 0; i < N; i++)
        v[i] = (float)i * 0.5f;
    int64_t shape[2] = {10, 100};
    int q = tw_call(w, "Functional.linear.0.forward", "api", "", "");
    tw_layout(w, TW_CONTIGUOUS);
    tw_tensor(w, q, "Functional.linear.0.forward", "input", "0", "float32", 2, shape, v);
    tw_layout(w, TW_DEFLATE);
    tw_tensor(w, q, "Functional.linear.0.forward", "output", "0", "float32", 2, shape, v);
    int64_t iv[3] = {-5, 7, 1LL << 40}, ishape[1] = {3};
    tw_tensor_i64(w, q, "Functional.linear.0.forward", "input", "1", 1, ishape, iv);
    tw_close(w, 1);

    np_dumpio *d = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_open(&d, p, NULL, 0, &err), NP_OK);
    if (!d)
        return;
    np_dumpio_buf buf = {0};
    np_dumpio_payload pl;
    /* contiguous float32: described as segments, read with pread */
    CHECK_EQ_INT(np_dumpio_payload_get(&pl, d, "Functional.linear.0.forward.input.0", N,
                                       NP_DUMPIO_ALLOW_FILE, &buf, &err), NP_OK);
    CHECK_EQ_INT(pl.form, NP_DUMPIO_FILE_F32);
    CHECK_EQ_INT(pl.nseg, 1);
    CHECK_EQ_INT(pl.crc_kind, NP_DUMPIO_CRC_ELEMENTS);
    if (pl.form == NP_DUMPIO_FILE_F32 && pl.nseg == 1) {
        float got[N];
        CHECK_EQ_INT(pread(pl.fd, got, sizeof got, (off_t)pl.segs[0].addr), (long)sizeof got);
        CHECK(memcmp(got, v, sizeof got) == 0);
    }
    np_dumpio_payload_release(&pl);
    /* the same without ALLOW_FILE: float32 in memory */
    CHECK_EQ_INT(np_dumpio_payload_get(&pl, d, "Functional.linear.0.forward.input.0", N, 0, &buf,
                                       &err), NP_OK);
    CHECK_EQ_INT(pl.form, NP_DUMPIO_MEM_F32);
    CHECK(pl.mem && memcmp(pl.mem, v, sizeof v) == 0);
    np_dumpio_payload_release(&pl);
    /* compressed: in memory whatever the flags */
    CHECK_EQ_INT(np_dumpio_payload_get(&pl, d, "Functional.linear.0.forward.output.0", N,
                                       NP_DUMPIO_ALLOW_FILE, &buf, &err), NP_OK);
    CHECK_EQ_INT(pl.form, NP_DUMPIO_MEM_F32);
    CHECK(pl.mem && ((const float *)pl.mem)[999] == 499.5f);
    np_dumpio_payload_release(&pl);
    /* int64: float64 values, the crc32 of the stored int64 bytes */
    CHECK_EQ_INT(np_dumpio_payload_get(&pl, d, "Functional.linear.0.forward.input.1", 3,
                                       NP_DUMPIO_ALLOW_FILE, &buf, &err), NP_OK);
    CHECK_EQ_INT(pl.form, NP_DUMPIO_MEM_F64);
    CHECK_EQ_INT(pl.crc_kind, NP_DUMPIO_CRC_GIVEN);
    CHECK_EQ_INT(pl.crc, np_crc32(0, iv, sizeof iv));
    if (pl.mem) {
        CHECK_EQ_FLOAT(((const double *)pl.mem)[0], -5.0);
        CHECK_EQ_FLOAT(((const double *)pl.mem)[2], 1099511627776.0);
    }
    np_dumpio_payload_release(&pl);
    /* a wrong element count, a leaf without payload */
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_payload_get(&pl, d, "Functional.linear.0.forward.input.0", N + 1, 0,
                                       &buf, &err), NP_ERR_FORMAT);
    CHECK_CONTAINS(err.text, "1000 elements");
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_payload_get(&pl, d, "Functional.nothing", 1, 0, &buf, &err),
                 NP_ERR_NOTFOUND);
    CHECK_STREQ(err.key, "Functional.nothing");
    /* the first values, from segments and from memory */
    double first[4];
    size_t got = 0;
    CHECK_EQ_INT(np_dumpio_read_values(first, 4, &got, d, "Functional.linear.0.forward.input.0", N,
                                       &err), NP_OK);
    CHECK_EQ_INT(got, 4);
    CHECK_EQ_FLOAT(first[3], 1.5);
    CHECK_EQ_INT(np_dumpio_read_values(first, 4, &got, d, "Functional.linear.0.forward.input.1", 3,
                                       &err), NP_OK);
    CHECK_EQ_INT(got, 3);
    CHECK_EQ_FLOAT(first[1], 7.0);
    np_dumpio_buf_free(&buf);
    np_dumpio_close(d);
}

/* A dump held open for writing by another process (HDF5 locks the file
 * there): readers open it all the same. */
static void test_locking(void)
{
    char p[1024];
    path_of(p, sizeof p, "locked.h5");
    write_small(p, "statistics", 0, 0, 4, TW_CHUNKED, 1);
    int fds[2];
    CHECK_EQ_INT(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
        char b = f >= 0 ? 'y' : 'n';
        if (write(fds[1], &b, 1) != 1)
            _exit(3);
        sleep(30); /* killed by the parent */
        _exit(0);
    }
    close(fds[1]);
    char b = 0;
    CHECK_EQ_INT(read(fds[0], &b, 1), 1);
    CHECK_EQ_INT(b, 'y');
    np_dumpio *d = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_open(&d, p, NULL, 0, &err), NP_OK);
    np_entry_rec *e = NULL;
    size_t n = 0;
    if (d)
        CHECK_EQ_INT(np_dumpio_read_entries(&e, &n, d, &err), NP_OK);
    CHECK_EQ_INT(n, 1);
    free(e);
    np_dumpio_close(d);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(fds[0]);
}

/* ---- the checker, with a source of this test's own ---- */

/* Its walk: SIGSEGV on a path containing "crash", an endless loop on
 * "hang", a clean refusal on "refuse", success otherwise. */
static int test_walk(const char *path)
{
    if (strstr(path, "crash"))
        raise(SIGSEGV);
    if (strstr(path, "hang"))
        for (;;)
            pause();
    return strstr(path, "refuse") ? 1 : 0;
}

static void test_checker(void)
{
    static np_dumpio_source src; /* only name and walk are used by the checker */
    src.name = "test";
    src.walk = test_walk;
    const char *paths[] = {"a", "crash-b", "c", "hang-d", "e", "refuse-f", "g", "crash-h", "i"};
    enum { N = sizeof paths / sizeof paths[0] };
    np_dumpio_ref refs[N];
    for (int i = 0; i < N; i++)
        refs[i] = (np_dumpio_ref){paths[i], i, 0, NP_DUMPIO_COMPLETE, &src};
    setenv("NPROBE_FILE_CHECK_TIMEOUT", "1", 1);
    np_dumpio_checker *c = NULL;
    np_error err;
    np_error_clear(&err);
    CHECK_EQ_INT(np_dumpio_checker_start(&c, refs, N, &err), NP_OK);
    if (!c)
        return;
    /* out of order: the last first, then the rest, one twice */
    const int order[] = {8, 0, 1, 2, 3, 4, 5, 6, 7, 1};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        int i = order[k];
        np_error_clear(&err);
        np_status st = np_dumpio_checker_wait(c, (size_t)i, &err);
        if (strstr(paths[i], "crash")) {
            CHECK_EQ_INT(st, NP_ERR_FORMAT);
            CHECK_CONTAINS(err.text, "crashed");
            CHECK_CONTAINS(err.text, "signal 11");
            CHECK_STREQ(err.file, paths[i]);
        } else if (strstr(paths[i], "hang")) {
            CHECK_EQ_INT(st, NP_ERR_FORMAT);
            CHECK_CONTAINS(err.text, "did not finish");
        } else {
            CHECK_MSG(st == NP_OK, "file %s: %s", paths[i], err.text);
        }
    }
    np_dumpio_checker_free(c);
    /* isolation off: everything passes unwalked */
    setenv("NPROBE_NO_ISOLATION", "1", 1);
    CHECK_EQ_INT(np_dumpio_checker_start(&c, refs, N, &err), NP_OK);
    if (c)
        CHECK_EQ_INT(np_dumpio_checker_wait(c, 1, &err), NP_OK);
    np_dumpio_checker_free(c);
    unsetenv("NPROBE_NO_ISOLATION");
    unsetenv("NPROBE_FILE_CHECK_TIMEOUT");
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/np_test_dumpio_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    test_find();
    test_rows();
    test_errors();
    test_dp_grad_scale();
    test_payloads();
    test_locking();
    test_checker();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_report();
}
