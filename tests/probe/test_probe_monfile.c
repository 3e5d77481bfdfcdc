/* test_probe_monfile.c - the monitor file's writer (nprobe/probe.h
 * np_monitor_file_*, probe/monfile.c), read back field by field with HDF5
 * types of the test's own (the format's member names of docs/MONITOR.md
 * "File format", not the writer's types): three steps' records, keys and
 * /steps rows, the root attributes (with a pipeline stage's), an existing
 * file refused naming it and left as it was, a missing folder named with
 * the system's words, a bad call refused. */
#include <hdf5.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "nprobe/probe.h"

typedef struct { double norm; int64_t step; int32_t key; } rec_view;   /* a subset, reordered */
typedef struct { char metric[40]; } key_view;                          /* a longer field */
typedef struct { int64_t keys, records, step; } step_view;

static int64_t attr_i64(hid_t f, const char *name)
{
    int64_t v = -1;
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    if (a >= 0) {
        H5Aread(a, H5T_NATIVE_INT64, &v);
        H5Aclose(a);
    }
    return v;
}

static void *read_all(hid_t f, const char *name, hid_t mt, size_t row, hsize_t *n)
{
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t sp = H5Dget_space(d);
    H5Sget_simple_extent_dims(sp, n, NULL);
    void *buf = calloc(*n ? *n : 1, row);
    if (*n)
        H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    H5Sclose(sp);
    H5Dclose(d);
    return buf;
}

int main(void)
{
    char dir[] = "/tmp/np_monfile_XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char path[256], path2[256];
    snprintf(path, sizeof path, "%s/monitor_rank3.h5", dir);
    snprintf(path2, sizeof path2, "%s/monitor_rank1.h5", dir);
    np_error err;
    np_error_clear(&err);
    np_monitor_file *f = NULL;
    CHECK_EQ_INT(np_monitor_file_create(&f, path, 3, 4, 2, 0, 0, &err), NP_OK);
    /* steps 0, 2, 4: 2, 0 and 3 records, 2, 0 and 1 new keys */
    np_monitor_record r[3];
    np_monitor_key k[2];
    memset(k, 0, sizeof k);
    strcpy(k[0].name, "h.0.mlp");
    strcpy(k[0].metric, "activation");
    strcpy(k[1].name, "loss");
    strcpy(k[1].metric, "loss");
    int64_t want_n[3] = {2, 0, 3}, want_k[3] = {2, 0, 1};
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < 3; i++)
            r[i] = (np_monitor_record){.step = 2 * s, .seq = i, .key = i % 2, .numel = 10 + i,
                                       .norm = 100.0 * s + i, .min = -1, .max = 1, .mean = 0.5,
                                       .zeros = i, .nans = 0, .infs = s};
        const np_monitor_key *kk = s == 0 ? k : s == 2 ? &k[1] : NULL;
        if (s == 2)
            strcpy((char *)k[1].metric, "loss_scale");
        CHECK_EQ_INT(np_monitor_file_append(f, 2 * s, r, want_n[s], kk, want_k[s], &err), NP_OK);
    }
    int64_t nr, nk, ns;
    np_monitor_file_counts(f, &nr, &nk, &ns);
    CHECK(nr == 5 && nk == 3 && ns == 3);
    /* a bad call: refused, the file takes more steps after it */
    CHECK_EQ_INT(np_monitor_file_append(f, 6, NULL, 2, NULL, 0, &err), NP_ERR_ARG);
    np_error_clear(&err);
    CHECK_EQ_INT(np_monitor_file_close(f, &err), NP_OK);

    /* an existing file: refused naming it, left as it was */
    np_monitor_file *g = NULL;
    CHECK_EQ_INT(np_monitor_file_create(&g, path, 0, 1, 1, 0, 0, &err), NP_ERR_IO);
    CHECK(g == NULL && strcmp(err.file, path) == 0 && strstr(err.text, "exist"));
    np_error_clear(&err);
    /* a folder that is not there: the system's words */
    char nodir[300];
    snprintf(nodir, sizeof nodir, "%s/none/monitor_rank0.h5", dir);
    CHECK_EQ_INT(np_monitor_file_create(&g, nodir, 0, 1, 1, 0, 0, &err), NP_ERR_IO);
    CHECK_MSG(g == NULL && strcmp(err.file, nodir) == 0 && strstr(err.text, "No such file"),
              "%s", err.text);
    np_error_clear(&err);
    /* a pipeline stage's file has its two attributes more */
    CHECK_EQ_INT(np_monitor_file_create(&g, path2, 1, 2, 1, 2, 1, &err), NP_OK);
    CHECK_EQ_INT(np_monitor_file_close(g, &err), NP_OK);

    hid_t h = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(h >= 0);
    CHECK(attr_i64(h, "version") == 1 && attr_i64(h, "rank") == 3 &&
          attr_i64(h, "world_size") == 4 && attr_i64(h, "step_interval") == 2);
    CHECK(!H5Aexists(h, "pp_stages"));
    hid_t rt = H5Tcreate(H5T_COMPOUND, sizeof(rec_view));
    H5Tinsert(rt, "norm", HOFFSET(rec_view, norm), H5T_NATIVE_DOUBLE);
    H5Tinsert(rt, "step", HOFFSET(rec_view, step), H5T_NATIVE_INT64);
    H5Tinsert(rt, "key", HOFFSET(rec_view, key), H5T_NATIVE_INT32);
    hsize_t n = 0;
    rec_view *rv = read_all(h, "records", rt, sizeof *rv, &n);
    CHECK_EQ_INT((long long)n, 5);
    const double want_norm[5] = {0, 1, 200, 201, 202};
    const int64_t want_step[5] = {0, 0, 4, 4, 4};
    for (hsize_t i = 0; i < n && i < 5; i++)
        CHECK_MSG(rv[i].norm == want_norm[i] && rv[i].step == want_step[i] &&
                      rv[i].key == (int32_t)((i < 2 ? i : i - 2) % 2),
                  "record %d: norm %g step %lld key %d", (int)i, rv[i].norm,
                  (long long)rv[i].step, rv[i].key);
    hid_t s40 = H5Tcopy(H5T_C_S1);
    H5Tset_size(s40, 40);
    hid_t kt = H5Tcreate(H5T_COMPOUND, sizeof(key_view));
    H5Tinsert(kt, "metric", 0, s40);
    key_view *kv = read_all(h, "keys", kt, sizeof *kv, &n);
    CHECK(n == 3 && !strcmp(kv[0].metric, "activation") && !strcmp(kv[1].metric, "loss") &&
          !strcmp(kv[2].metric, "loss_scale"));
    hid_t st = H5Tcreate(H5T_COMPOUND, sizeof(step_view));
    H5Tinsert(st, "step", HOFFSET(step_view, step), H5T_NATIVE_INT64);
    H5Tinsert(st, "records", HOFFSET(step_view, records), H5T_NATIVE_INT64);
    H5Tinsert(st, "keys", HOFFSET(step_view, keys), H5T_NATIVE_INT64);
    step_view *sv = read_all(h, "steps", st, sizeof *sv, &n);
    CHECK(n == 3 && sv[0].step == 0 && sv[0].records == 2 && sv[0].keys == 2 && sv[1].step == 2 &&
          sv[1].records == 2 && sv[1].keys == 2 && sv[2].step == 4 && sv[2].records == 5 &&
          sv[2].keys == 3);
    H5Fclose(h);
    h = H5Fopen(path2, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(attr_i64(h, "pp_stages") == 2 && attr_i64(h, "pp_stage") == 1);
    H5Fclose(h);
    free(rv);
    free(kv);
    free(sv);
    H5Tclose(rt);
    H5Tclose(kt);
    H5Tclose(st);
    H5Tclose(s40);
    unlink(path);
    unlink(path2);
    rmdir(dir);
    return check_report();
}
