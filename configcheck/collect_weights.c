/* configcheck/collect_weights.c - weights.json: per parameter the SHA-256 of
 * the stored bytes (little-endian values as the runtime holds them: float32
 * for float32/bfloat16/float16), dtype, shape and statistics; read from a
 * checkpoint (docs/CONTRACTS.md), a dump (include/nprobe/format.h) or the
 * runtime's tensors. */
#include <dirent.h>
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cc_internal.h"
#include "nprobe/format.h"

#define MAX_PARAM_BYTES ((uint64_t)4 << 30)

/* The logical dtype names of nprobe/tensor.h, kept here so configcheck does
 * not depend on the runtime library. */
static const struct {
    const char *name;
    char kind;
    size_t size;
} dtypes[NP_DTYPE_COUNT] = {
    [NP_FLOAT32] = {"float32", 'f', 4}, [NP_BFLOAT16] = {"bfloat16", 'f', 4},
    [NP_FLOAT16] = {"float16", 'f', 4}, [NP_FLOAT64] = {"float64", 'd', 8},
    [NP_INT64] = {"int64", 'l', 8},     [NP_INT32] = {"int32", 'i', 4},
    [NP_BOOL] = {"bool", 'b', 1},
};

/* HDF5 prints its error stack by default; a library must not print. */

/* Hash and describe one dataset `dsname` under `loc` as params[key]. */
static np_status add_dataset(json_t *params, hid_t loc, const char *dsname, const char *key,
                             const char *file, const char *dtype_hint, np_error *err)
{
    np_status st = NP_OK;
    hid_t ds = H5Dopen2(loc, dsname, H5P_DEFAULT);
    hid_t ft = -1, sp = -1, mt = -1;
    void *buf = NULL;
    if (ds < 0)
        return np_error_set(err, NP_ERR_HDF5, file, dsname, "cannot open the dataset");
    ft = H5Dget_type(ds);
    sp = H5Dget_space(ds);
    int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    if (ft < 0 || nd < 0 || nd > NP_MAX_DIMS) {
        st = np_error_set(err, NP_ERR_FORMAT, file, dsname,
                          "expected a simple dataset of at most %d dimensions", NP_MAX_DIMS);
        goto done;
    }
    hsize_t dims[NP_MAX_DIMS] = {0};
    H5Sget_simple_extent_dims(sp, dims, NULL);
    H5T_class_t cls = H5Tget_class(ft);
    size_t tsize = H5Tget_size(ft);
    char kind;
    const char *dname;
    if (cls == H5T_FLOAT && tsize == 4) {
        mt = H5T_NATIVE_FLOAT, kind = 'f', dname = "float32";
    } else if (cls == H5T_FLOAT && tsize == 8) {
        mt = H5T_NATIVE_DOUBLE, kind = 'd', dname = "float64";
    } else if (cls == H5T_INTEGER && tsize == 8) {
        mt = H5T_NATIVE_INT64, kind = 'l', dname = "int64";
    } else if (cls == H5T_INTEGER && tsize == 4) {
        mt = H5T_NATIVE_INT32, kind = 'i', dname = "int32";
    } else if (cls == H5T_INTEGER && tsize == 1) {
        mt = H5T_NATIVE_UINT8, kind = 'b', dname = "bool";
    } else {
        st = np_error_set(err, NP_ERR_DTYPE, file, dsname,
                          "expected float32, float64, int64, int32 or uint8 data");
        goto done;
    }
    uint64_t numel = 1;
    json_t *shape = json_array();
    for (int i = 0; i < nd; i++) {
        numel *= dims[i];
        json_array_append_new(shape, json_integer((json_int_t)dims[i]));
    }
    size_t esize = H5Tget_size(mt);
    if (numel > MAX_PARAM_BYTES / esize) {
        json_decref(shape);
        st = np_error_set(err, NP_ERR_LIMIT, file, dsname, "parameter larger than 4 GiB");
        goto done;
    }
    buf = malloc(numel ? numel * esize : 1);
    if (!buf) {
        json_decref(shape);
        st = np_error_set(err, NP_ERR_NOMEM, file, dsname, "out of memory");
        goto done;
    }
    if (numel && H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        json_decref(shape);
        st = np_error_set(err, NP_ERR_HDF5, file, dsname, "cannot read the dataset");
        goto done;
    }
    char hex[65], attr_dtype[NP_FMT_DTYPE_LEN + 16];
    np_sha256_hex(hex, buf, numel * esize);
    if (dtype_hint && *dtype_hint)
        snprintf(attr_dtype, sizeof attr_dtype, "%s", dtype_hint);
    else if (np_h5_attr_get_str(ds, "dtype", attr_dtype, sizeof attr_dtype) != 0 || !attr_dtype[0])
        snprintf(attr_dtype, sizeof attr_dtype, "%s", dname);
    json_t *o = np_cc_stats_json(buf, kind, (int64_t)numel);
    if (!o || json_object_set_new(o, "sha256", json_string(hex)) ||
        json_object_set_new(o, "dtype", json_string(attr_dtype)) ||
        json_object_set_new(o, "shape", shape) || json_object_set_new(params, key, o)) {
        st = np_error_set(err, NP_ERR_NOMEM, file, dsname, "out of memory");
        goto done;
    }
done:
    free(buf);
    if (sp >= 0)
        H5Sclose(sp);
    if (ft >= 0)
        H5Tclose(ft);
    H5Dclose(ds);
    return st;
}

np_status np_cc_weights_checkpoint(json_t *params, const char *path, np_error *err)
{
    np_h5_quiet_state q;
    np_h5_quiet(&q);
    np_status st = NP_OK;
    hid_t g = -1, f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        st = np_error_set(err, NP_ERR_FORMAT, path, NULL,
                          "cannot open as HDF5 (expected an nprobe checkpoint)");
        goto done;
    }
    char fmt[64];
    int rc = np_h5_attr_get_str(f, "format", fmt, sizeof fmt);
    if (rc != 0 || strcmp(fmt, "nprobe-checkpoint") != 0) {
        st = np_error_set(err, NP_ERR_FORMAT, path, "format",
                          "expected the root attribute format = \"nprobe-checkpoint\"%s%s",
                          rc && rc != NP_H5_ATTR_ABSENT ? ": it " : "",
                          rc && rc != NP_H5_ATTR_ABSENT ? np_h5_attr_problem(rc) : "");
        goto done;
    }
    g = H5Gopen2(f, "params", H5P_DEFAULT);
    if (g < 0) {
        st = np_error_set(err, NP_ERR_FORMAT, path, "/params",
                          "the checkpoint has no /params group");
        goto done;
    }
    H5G_info_t info;
    if (H5Gget_info(g, &info) < 0) {
        st = np_error_set(err, NP_ERR_HDF5, path, "/params", "cannot list the group");
        goto done;
    }
    for (hsize_t i = 0; i < info.nlinks && st == NP_OK; i++) {
        char name[1024];
        ssize_t n = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name,
                                       H5P_DEFAULT);
        if (n < 0 || (size_t)n >= sizeof name) {
            st = np_error_set(err, NP_ERR_FORMAT, path, "/params", "unreadable or too long link name");
            break;
        }
        H5O_info_t oi;
        if (H5Oget_info_by_name(g, name, &oi, H5P_DEFAULT) < 0 || oi.type != H5O_TYPE_DATASET)
            continue;
        st = add_dataset(params, g, name, name, path, NULL, err);
    }
done:
    if (g >= 0)
        H5Gclose(g);
    if (f >= 0)
        H5Fclose(f);
    np_h5_unquiet(&q);
    return st;
}

/* The entry with the smallest number after `prefix` ("step", "rank") in dir. */
static int pick_numbered(char *out, size_t cap, const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    long best = -1;
    size_t pl = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, pl) != 0 || !e->d_name[pl])
            continue;
        char *end;
        long v = strtol(e->d_name + pl, &end, 10);
        if (*end || v < 0)
            continue;
        if (best < 0 || v < best)
            best = v;
    }
    closedir(d);
    if (best < 0)
        return -1;
    snprintf(out, cap, "%s/%s%ld", dir, prefix, best);
    return 0;
}

/* dump.h5 itself, DIR/dump.h5, or DIR/step{min}/rank{min}/dump.h5. */
static char *resolve_dump(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return NULL;
    if (S_ISREG(st.st_mode))
        return strdup(path);
    char a[PATH_MAX], b[PATH_MAX], c[PATH_MAX + 16];
    snprintf(c, sizeof c, "%s/%s", path, NP_FMT_FILE);
    if (stat(c, &st) == 0 && S_ISREG(st.st_mode))
        return strdup(c);
    if (pick_numbered(a, sizeof a, path, "step") != 0 || pick_numbered(b, sizeof b, a, "rank") != 0)
        return NULL;
    snprintf(c, sizeof c, "%s/%s", b, NP_FMT_FILE);
    return stat(c, &st) == 0 && S_ISREG(st.st_mode) ? strdup(c) : NULL;
}

/* "Module.h.0.mlp.c_fc.Linear.forward.0" + leaf key "weight" -> "h.0.mlp.c_fc.weight". */
static void param_name(char *out, size_t cap, const np_entry_rec *r)
{
    const char *key = strrchr(r->name, '.');
    key = key ? key + 1 : r->name;
    if (strncmp(r->call, "Module.", 7) != 0) {
        snprintf(out, cap, "%s", r->name);
        return;
    }
    char path[NP_FMT_NAME_LEN];
    snprintf(path, sizeof path, "%s", r->call + 7);
    for (int k = 0; k < 3; k++) { /* drop ".{Class}.forward.{N}" */
        char *dot = strrchr(path, '.');
        if (!dot) {
            path[0] = '\0';
            break;
        }
        *dot = '\0';
    }
    if (path[0])
        snprintf(out, cap, "%s.%s", path, key);
    else
        snprintf(out, cap, "%s", key);
}

static np_status add_entry_stats(json_t *params, const char *key, const np_entry_rec *r)
{
    json_t *shape = json_array();
    for (int i = 0; i < r->ndim && i < NP_FMT_MAX_DIMS; i++)
        json_array_append_new(shape, json_integer((json_int_t)r->shape[i]));
    double v[4] = {r->max, r->min, r->mean, r->norm};
    json_t *o = json_object();
    static const char *const names[4] = {"max", "min", "mean", "norm"};
    for (int i = 0; i < 4; i++)
        json_object_set_new(o, names[i], isfinite(v[i]) ? json_real(v[i]) : json_null());
    json_object_set_new(o, "nonfinite",
                        json_integer((json_int_t)(r->nan_count + r->posinf_count + r->neginf_count)));
    json_object_set_new(o, "dtype", json_string(r->dtype));
    json_object_set_new(o, "shape", shape);
    if (r->crc32) {
        char c[16];
        snprintf(c, sizeof c, "%08x", (unsigned)r->crc32);
        json_object_set_new(o, "crc32", json_string(c));
    }
    return json_object_set_new(params, key, o) ? NP_ERR_NOMEM : NP_OK;
}

np_status np_cc_weights_dump(json_t *params, char **used, const char *path, np_error *err)
{
    *used = NULL;
    char *file = resolve_dump(path);
    if (!file)
        return np_error_set(err, NP_ERR_NOTFOUND, path, NULL,
                            "no dump found (expected dump.h5, a folder holding it, or "
                            "step{S}/rank{R}/dump.h5)");
    np_h5_quiet_state q;
    np_h5_quiet(&q);
    np_status st = NP_OK;
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT), ds = -1, sp = -1, mt = -1, data = -1;
    np_entry_rec *rows = NULL;
    if (f < 0) {
        st = np_error_set(err, NP_ERR_FORMAT, file, NULL, "cannot open as HDF5 (expected a dump)");
        goto done;
    }
    char fmt[64];
    int rc = np_h5_attr_get_str(f, NP_FMT_ATTR_FORMAT, fmt, sizeof fmt);
    if (rc != 0 || strcmp(fmt, NP_FMT_NAME) != 0) {
        st = np_error_set(err, NP_ERR_FORMAT, file, NP_FMT_ATTR_FORMAT,
                          "expected the root attribute format = \"%s\"%s%s", NP_FMT_NAME,
                          rc && rc != NP_H5_ATTR_ABSENT ? ": it " : "",
                          rc && rc != NP_H5_ATTR_ABSENT ? np_h5_attr_problem(rc) : "");
        goto done;
    }
    ds = H5Dopen2(f, NP_FMT_ENTRIES, H5P_DEFAULT);
    sp = ds >= 0 ? H5Dget_space(ds) : -1;
    mt = np_fmt_entry_h5type();
    if (ds < 0 || sp < 0 || mt < 0 || H5Sget_simple_extent_ndims(sp) != 1) {
        st = np_error_set(err, NP_ERR_FORMAT, file, "/" NP_FMT_ENTRIES,
                          "expected a one-dimensional /entries table");
        goto done;
    }
    if (H5Lexists(f, NP_FMT_DATA, H5P_DEFAULT) > 0)
        data = H5Gopen2(f, NP_FMT_DATA, H5P_DEFAULT);
    hsize_t total;
    H5Sget_simple_extent_dims(sp, &total, NULL);
    enum { CHUNK = 1024 };
    rows = malloc(CHUNK * sizeof *rows);
    if (!rows) {
        st = np_error_set(err, NP_ERR_NOMEM, file, NULL, "out of memory");
        goto done;
    }
    for (hsize_t off = 0; off < total && st == NP_OK; off += CHUNK) {
        hsize_t cnt = total - off < CHUNK ? total - off : CHUNK;
        hid_t ms = H5Screate_simple(1, &cnt, NULL);
        herr_t e = H5Sselect_hyperslab(sp, H5S_SELECT_SET, &off, NULL, &cnt, NULL);
        if (ms < 0 || e < 0 || H5Dread(ds, mt, ms, sp, H5P_DEFAULT, rows) < 0) {
            if (ms >= 0)
                H5Sclose(ms);
            st = np_error_set(err, NP_ERR_HDF5, file, "/" NP_FMT_ENTRIES, "cannot read rows");
            break;
        }
        H5Sclose(ms);
        for (hsize_t i = 0; i < cnt && st == NP_OK; i++) {
            np_entry_rec *r = &rows[i];
            r->name[NP_FMT_NAME_LEN - 1] = r->call[NP_FMT_NAME_LEN - 1] = '\0';
            r->role[NP_FMT_ROLE_LEN - 1] = r->dtype[NP_FMT_DTYPE_LEN - 1] = '\0';
            if (strcmp(r->role, "parameters") != 0 || strstr(r->call, ".backward"))
                continue;
            char key[NP_FMT_NAME_LEN * 2];
            param_name(key, sizeof key, r);
            if (json_object_get(params, key))
                continue; /* first use of the parameter in the step */
            if (r->has_data && data >= 0 && H5Lexists(data, r->name, H5P_DEFAULT) > 0)
                st = add_dataset(params, data, r->name, key, file, r->dtype, err);
            else if (add_entry_stats(params, key, r) != NP_OK)
                st = np_error_set(err, NP_ERR_NOMEM, file, r->name, "out of memory");
        }
    }
done:
    free(rows);
    if (data >= 0)
        H5Gclose(data);
    if (mt >= 0)
        H5Tclose(mt);
    if (sp >= 0)
        H5Sclose(sp);
    if (ds >= 0)
        H5Dclose(ds);
    if (f >= 0)
        H5Fclose(f);
    np_h5_unquiet(&q);
    if (st == NP_OK)
        *used = file;
    else
        free(file);
    return st;
}

np_status np_cc_weights_tensors(json_t *params, const np_named_tensor *w, int n, np_error *err)
{
    for (int i = 0; i < n; i++) {
        const np_tensor *t = w[i].t;
        const char *name = w[i].name ? w[i].name : (t && t->name ? t->name : NULL);
        if (!t || !name || (unsigned)t->dtype >= NP_DTYPE_COUNT || t->ndim < 0 ||
            t->ndim > NP_MAX_DIMS || t->numel < 0 || (t->numel > 0 && !t->data))
            return np_error_set(err, NP_ERR_ARG, NULL, name ? name : "(unnamed)",
                                "run weight %d: expected a named tensor with data", i);
        json_t *shape = json_array();
        for (int d = 0; d < t->ndim; d++)
            json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
        char hex[65];
        np_sha256_hex(hex, t->numel ? t->data : "", (size_t)t->numel * dtypes[t->dtype].size);
        json_t *o = np_cc_stats_json(t->data, dtypes[t->dtype].kind, t->numel);
        if (!o || json_object_set_new(o, "sha256", json_string(hex)) ||
            json_object_set_new(o, "dtype", json_string(dtypes[t->dtype].name)) ||
            json_object_set_new(o, "shape", shape) || json_object_set_new(params, name, o))
            return np_error_set(err, NP_ERR_NOMEM, NULL, name, "out of memory");
    }
    return NP_OK;
}
