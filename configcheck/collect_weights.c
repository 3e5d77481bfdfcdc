/* configcheck/collect_weights.c - weights.json: per parameter the SHA-256 of
 * the stored bytes (little-endian values as the runtime holds them: float32
 * for float32/bfloat16/float16), dtype, shape and statistics; read from a
 * checkpoint (docs/CONTRACTS.md), a dump (include/nprobe/format.h) or the
 * runtime's tensors. */
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cc_internal.h"
#include "nprobe/dumpio.h"
#include "nprobe/format.h"
#include "nprobe/model.h"

#define MAX_PARAM_BYTES ((uint64_t)4 << 30)

/* How the runtime stores each logical dtype, for the statistics (names and
 * storage sizes are common's: np_dtype_name, np_dtype_storage_size). */
static const struct {
    char kind;
} dtypes[] = {
    /* np_dtype order, no designators: the size check below sees a missing one */
    {'f'} /* float32 */, {'f'} /* bfloat16 */, {'f'} /* float16 */, {'d'} /* float64 */,
    {'l'} /* int64 */,   {'i'} /* int32 */,    {'b'} /* bool */,
    /* the float8 kinds: float32 holding the decoded values (np_dtype_storage_size 4) */
    {'f'} /* float8_e4m3fn */, {'f'} /* float8_e5m2 */, {'f'} /* hifloat8 */,
};
_Static_assert(sizeof dtypes / sizeof dtypes[0] == NP_DTYPE_COUNT, "dtypes");

/* HDF5 prints its error stack by default; a library must not print. */

/* Hash and describe one dataset `dsname` under `loc` as params[key]. */
static np_status add_dataset(json_t *params, hid_t loc, const char *dsname, const char *key,
                             const char *file, const char *dtype_hint, np_error *err)
{
    np_status st = NP_OK;
    int problem = 0;
    hid_t ds = np_h5_open_local(loc, dsname, &problem);
    hid_t ft = -1, sp = -1, mt = -1;
    void *buf = NULL;
    if (ds < 0)
        return np_error_set(err, problem == NP_H5_NOT_LOCAL ? NP_ERR_FORMAT : NP_ERR_HDF5, file,
                            dsname, "the dataset %s", np_h5_dset_problem(problem));
    ft = H5Dget_type(ds);
    sp = H5Dget_space(ds);
    int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    if (ft < 0 || nd < 0 || nd > NP_MAX_DIMS) {
        st = np_error_set(err, NP_ERR_FORMAT, file, dsname,
                          "expected a simple dataset of at most %d dimensions", NP_MAX_DIMS);
        goto done;
    }
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
    /* the element count overflow-checked, the data actually in the file */
    size_t esize = H5Tget_size(mt);
    int64_t dims[NP_MAX_DIMS] = {0}, n = 0;
    int rc = np_h5_dset_extent(ds, esize, NP_MAX_DIMS, dims, &nd, &n);
    if (rc) {
        st = np_error_set(err, NP_ERR_FORMAT, file, dsname, "dataset %s %s", dsname,
                          np_h5_dset_problem(rc));
        goto done;
    }
    uint64_t numel = (uint64_t)n;
    json_t *shape = json_array();
    for (int i = 0; i < nd; i++)
        json_array_append_new(shape, json_integer((json_int_t)dims[i]));
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

/* The type of the object a link names (H5O_TYPE_UNKNOWN when it cannot be
 * read). H5Oget_info_by_name changed its signature in HDF5 1.12 (a fields
 * argument, H5O_info2_t): the versioned call is named for each release, and
 * only the basic fields are read (docs/DEVELOPING.md, "Debian 12 and 13"). */
static H5O_type_t object_type(hid_t loc, const char *name)
{
#if H5_VERSION_GE(1, 12, 0)
    H5O_info2_t oi;
    if (H5Oget_info_by_name3(loc, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
        return H5O_TYPE_UNKNOWN;
#else
    H5O_info_t oi; /* 1.10.3 to 1.10.x: H5O_info_t is the 1.10 struct */
    if (H5Oget_info_by_name2(loc, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
        return H5O_TYPE_UNKNOWN;
#endif
    return oi.type;
}

static np_status checkpoint_read(json_t *params, const char *path, np_error *err)
{
    np_h5_quiet_state q;
    np_h5_quiet(&q);
    np_status st = NP_OK;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0)
        H5Pset_file_locking(fapl, 0, 1); /* another process may hold the file */
    const char *why = NULL;
    hid_t g = -1, f = np_h5_fopen_read(path, fapl >= 0 ? fapl : 0, &why);
    if (fapl >= 0)
        H5Pclose(fapl);
    if (f < 0) {
        st = np_error_set(err, NP_ERR_FORMAT, path, NULL, "cannot open%s%s",
                          why ? ": " : " ", why ? why : "as HDF5 (expected an nprobe checkpoint)");
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
    int problem = 0;
    g = np_h5_open_local(f, "params", &problem);
    if (g < 0) {
        st = np_error_set(err, NP_ERR_FORMAT, path, "/params", "%s",
                          problem == NP_H5_NOT_LOCAL ? "the group /params lies outside the file "
                                                       "(an external or soft link): refused"
                                                     : "the checkpoint has no /params group");
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
        if (object_type(g, name) != H5O_TYPE_DATASET)
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

/* The child's read of a checkpoint (np_cc_weights_checkpoint): all that
 * the real read asks HDF5 for. 0 read, 1 refused. */
static int checkpoint_walk(void *arg)
{
    json_t *tmp = json_object();
    int rc = tmp && checkpoint_read(tmp, arg, NULL) == NP_OK ? 0 : 1;
    json_decref(tmp);
    return rc;
}

np_status np_cc_weights_checkpoint(json_t *params, const char *path, np_error *err)
{
    /* HDF5 1.10 can crash or loop on corrupt metadata: read the file in a
     * child process first, as the dump readers do (np_dumpio) */
    if (!getenv("NPROBE_NO_ISOLATION") && access(path, R_OK) == 0) {
        int sig = 0;
        double limit = np_file_check_timeout();
        int r = np_run_isolated(checkpoint_walk, (void *)path, limit, &sig);
        np_status st = np_isolated_walk_error(err, path, r, sig, limit);
        if (st != NP_OK)
            return st;
    }
    /* model settings that the file's data do not back (n_layer 2^31 ...)
     * are refused, as train --load refuses them */
    np_status st = np_checkpoint_check_settings(path, err);
    return st != NP_OK ? st : checkpoint_read(params, path, err);
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

/* The payload of a parameter row as the runtime holds it (float32 for
 * float32/bfloat16/float16, float64, int64, int32, bool as uint8), hashed
 * and described as params[key]. */
static np_status add_payload(json_t *params, np_dumpio *d, const np_entry_rec *r, const char *key,
                             np_dumpio_buf *buf, np_error *err)
{
    const char *file = np_dumpio_path(d);
    np_dumpio_payload p;
    np_status st = np_dumpio_payload_get(&p, d, r->name, r->numel, 0, buf, err);
    if (st != NP_OK)
        return st;
    int dt = np_dtype_from_name(r->dtype);
    char kind = p.form == NP_DUMPIO_MEM_F64 ? 'd' : 'f';
    if (p.form == NP_DUMPIO_MEM_F64 && dt >= 0 && !np_dtype_is_floating((np_dtype)dt))
        kind = dtypes[dt].kind; /* integers arrive widened to float64: narrow them back */
    size_t esize = kind == 'd' || kind == 'l' ? 8 : kind == 'b' ? 1 : 4;
    int64_t n = r->numel > 0 ? r->numel : 0;
    if ((uint64_t)n > MAX_PARAM_BYTES / esize) {
        np_dumpio_payload_release(&p);
        return np_error_set(err, NP_ERR_LIMIT, file, r->name, "parameter larger than 4 GiB");
    }
    unsigned char *bytes = (unsigned char *)buf->p;
    const double *wide = p.mem;
    /* narrowed in place, front to back: element i's bytes end before wide[i + 1] */
    for (int64_t i = 0; kind != 'f' && kind != 'd' && i < n; i++) {
        double v = wide[i];
        if (kind == 'l') {
            int64_t x = (int64_t)v;
            memcpy(bytes + (size_t)i * 8, &x, 8);
        } else if (kind == 'i') {
            int32_t x = (int32_t)v;
            memcpy(bytes + (size_t)i * 4, &x, 4);
        } else {
            bytes[i] = (unsigned char)(v != 0);
        }
    }
    char hex[65];
    np_sha256_hex(hex, n ? (const void *)bytes : "", (size_t)n * esize);
    np_dumpio_payload_release(&p);
    json_t *shape = json_array();
    for (int i = 0; i < r->ndim && i < NP_FMT_MAX_DIMS; i++)
        json_array_append_new(shape, json_integer((json_int_t)r->shape[i]));
    json_t *o = np_cc_stats_json(bytes, kind, n);
    if (!o || json_object_set_new(o, "sha256", json_string(hex)) ||
        json_object_set_new(o, "dtype", json_string(r->dtype)) ||
        json_object_set_new(o, "shape", shape) || json_object_set_new(params, key, o))
        return np_error_set(err, NP_ERR_NOMEM, file, r->name, "out of memory");
    return NP_OK;
}

/* The entries sink: each parameter's first use in the step. */
typedef struct weights_sink {
    json_t *params;
    np_dumpio *d;
    np_dumpio_buf buf;
} weights_sink;

static np_status weights_rows(void *user, np_entry_rec *rows, size_t first, size_t n,
                              np_error *err)
{
    (void)first;
    weights_sink *w = user;
    np_status st = NP_OK;
    for (size_t i = 0; i < n && st == NP_OK; i++) {
        const np_entry_rec *r = &rows[i];
        if (strcmp(r->role, "parameters") != 0 || strstr(r->call, ".backward"))
            continue;
        char key[NP_FMT_NAME_LEN * 2];
        param_name(key, sizeof key, r);
        if (json_object_get(w->params, key))
            continue; /* first use of the parameter in the step */
        if (r->has_data)
            st = add_payload(w->params, w->d, r, key, &w->buf, err);
        else if (add_entry_stats(w->params, key, r) != NP_OK)
            st = np_error_set(err, NP_ERR_NOMEM, np_dumpio_path(w->d), r->name, "out of memory");
    }
    return st;
}

np_status np_cc_weights_dump(json_t *params, char **used, const char *path, np_error *err)
{
    *used = NULL;
    np_dumpio_ref *refs = NULL;
    size_t n = 0, pick = 0;
    np_error e;
    np_error_clear(&e);
    np_status st = np_dumpio_find(&refs, &n, path, &e);
    while (st == NP_OK && pick < n && refs[pick].state != NP_DUMPIO_COMPLETE)
        pick++; /* the first step and rank with a finished file */
    if (st != NP_OK || pick == n) {
        free(refs);
        return np_error_set(err, NP_ERR_NOTFOUND, path, NULL,
                            "no dump found (expected dump.h5, a folder holding it, or "
                            "step{S}/rank{R}/dump.h5)");
    }
    weights_sink w = {params, NULL, {0}};
    st = np_dumpio_open_ref(&w.d, &refs[pick], 0, err);
    if (st == NP_OK) {
        np_dumpio_entry_sink sink = {NULL, weights_rows, &w};
        st = np_dumpio_entries(w.d, &sink, err);
    }
    if (st == NP_OK && !(*used = strdup(refs[pick].path)))
        st = np_error_set(err, NP_ERR_NOMEM, path, NULL, "out of memory");
    np_dumpio_buf_free(&w.buf);
    np_dumpio_close(w.d);
    free(refs);
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
        np_sha256_hex(hex, t->numel ? t->data : "", (size_t)t->numel * np_dtype_storage_size(t->dtype));
        json_t *o = np_cc_stats_json(t->data, dtypes[t->dtype].kind, t->numel);
        if (!o || json_object_set_new(o, "sha256", json_string(hex)) ||
            json_object_set_new(o, "dtype", json_string(np_dtype_name(t->dtype))) ||
            json_object_set_new(o, "shape", shape) || json_object_set_new(params, name, o))
            return np_error_set(err, NP_ERR_NOMEM, NULL, name, "out of memory");
    }
    return NP_OK;
}
