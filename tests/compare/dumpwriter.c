/* tests/compare/dumpwriter.c - see dumpwriter.h. */
#include "dumpwriter.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "nprobe/format.h"

struct tw {
    hid_t file, data;
    char task[32], precision[16];
    int step, rank, layout, bad_crc;
    double loss_scale; /* 0: no attribute */
    np_entry_rec *e;
    size_t ne, cape;
    np_call_rec *c;
    size_t nc, capc;
};

static void attr_str(hid_t obj, const char *name, const char *v)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v) + 1);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, v);
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
}

static void attr_i64(hid_t obj, const char *name, int64_t v)
{
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Sclose(s);
}

int tw_mkdirs(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0777);
            *p = '/';
        }
    struct stat sb;
    return mkdir(buf, 0777) == 0 || (stat(buf, &sb) == 0 && S_ISDIR(sb.st_mode)) ? 0 : -1;
}

tw *tw_open(const char *path, const char *task, const char *precision, int step, int rank)
{
    tw *w = calloc(1, sizeof *w);
    w->file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (w->file < 0) {
        free(w);
        return NULL;
    }
    w->data = H5Gcreate2(w->file, "data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    snprintf(w->task, sizeof w->task, "%s", task);
    snprintf(w->precision, sizeof w->precision, "%s", precision);
    w->step = step;
    w->rank = rank;
    return w;
}

void tw_layout(tw *w, int layout)
{
    w->layout = layout;
}

void tw_bad_crc(tw *w, int on)
{
    w->bad_crc = on;
}

int tw_call(tw *w, const char *call, const char *kind, const char *parent, const char *callsite)
{
    if (w->nc == w->capc) {
        w->capc = w->capc ? w->capc * 2 : 16;
        w->c = realloc(w->c, w->capc * sizeof *w->c);
    }
    np_call_rec *r = &w->c[w->nc];
    memset(r, 0, sizeof *r);
    r->seq = (int64_t)w->nc;
    np_fmt_copy_name(r->call, sizeof r->call, call);
    np_fmt_copy_name(r->kind, sizeof r->kind, kind);
    np_fmt_copy_name(r->parent, sizeof r->parent, parent ? parent : "");
    np_fmt_copy_name(r->callsite, sizeof r->callsite, callsite ? callsite : "");
    return (int)w->nc++;
}

static np_entry_rec *new_entry(tw *w, int seq, const char *call, const char *role, const char *key,
                               const char *dtype, int ndim, const int64_t *shape)
{
    if (w->ne == w->cape) {
        w->cape = w->cape ? w->cape * 2 : 64;
        w->e = realloc(w->e, w->cape * sizeof *w->e);
    }
    np_entry_rec *r = &w->e[w->ne++];
    memset(r, 0, sizeof *r);
    char name[600];
    snprintf(name, sizeof name, "%s.%s.%s", call, role, key);
    r->seq = seq;
    np_fmt_copy_name(r->name, sizeof r->name, name);
    np_fmt_copy_name(r->call, sizeof r->call, call);
    np_fmt_copy_name(r->role, sizeof r->role, role);
    np_fmt_copy_name(r->dtype, sizeof r->dtype, dtype);
    r->ndim = ndim;
    r->numel = 1;
    for (int i = 0; i < ndim; i++) {
        r->shape[i] = shape[i];
        r->numel *= shape[i];
    }
    return r;
}

static void stats(np_entry_rec *r, const double *v, int64_t n)
{
    double mx = -INFINITY, mn = INFINITY, sum = 0, sq = 0;
    int64_t fin = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(v[i])) {
            r->nan_count++;
            continue;
        }
        if (isinf(v[i])) {
            if (v[i] > 0)
                r->posinf_count++;
            else
                r->neginf_count++;
            continue;
        }
        fin++;
        mx = v[i] > mx ? v[i] : mx;
        mn = v[i] < mn ? v[i] : mn;
        sum += v[i];
        sq += v[i] * v[i];
    }
    if (!fin) {
        r->max = r->min = r->mean = r->norm = NAN;
        return;
    }
    r->max = mx;
    r->min = mn;
    r->mean = sum / (double)fin;
    r->norm = sqrt(sq);
}

static void store(tw *w, np_entry_rec *r, hid_t ftype, hid_t mtype, const void *data, size_t esize)
{
    /* as the probe: no crc32 in a statistics dump (FORMAT.md) */
    r->crc32 = strcmp(w->task, "statistics") ? (uint32_t)crc32(0L, data, (uInt)((size_t)r->numel * esize)) : 0;
    if (w->bad_crc)
        r->crc32 ^= 0x00010000u;
    if (strcmp(w->task, "tensor") != 0)
        return;
    hsize_t dims[NP_FMT_MAX_DIMS];
    int nd = r->ndim;
    for (int i = 0; i < nd; i++)
        dims[i] = (hsize_t)r->shape[i];
    hid_t space = nd ? H5Screate_simple(nd, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (nd && r->numel > 0 && w->layout != TW_CONTIGUOUS) {
        H5Pset_chunk(dcpl, nd, dims);
        if (w->layout == TW_DEFLATE)
            H5Pset_deflate(dcpl, 4);
    }
    hid_t ds = H5Dcreate2(w->data, r->name, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (r->numel > 0)
        H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    attr_str(ds, "dtype", r->dtype);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    r->has_data = 1;
}

void tw_tensor(tw *w, int seq, const char *call, const char *role, const char *key,
               const char *dtype, int ndim, const int64_t *shape, const float *data)
{
    np_entry_rec *r = new_entry(w, seq, call, role, key, dtype, ndim, shape);
    double *v = malloc((size_t)(r->numel + 1) * sizeof *v);
    for (int64_t i = 0; i < r->numel; i++)
        v[i] = data[i];
    stats(r, v, r->numel);
    free(v);
    store(w, r, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, data, sizeof(float));
}

void tw_tensor_i64(tw *w, int seq, const char *call, const char *role, const char *key, int ndim,
                   const int64_t *shape, const int64_t *data)
{
    np_entry_rec *r = new_entry(w, seq, call, role, key, "int64", ndim, shape);
    double *v = malloc((size_t)(r->numel + 1) * sizeof *v);
    for (int64_t i = 0; i < r->numel; i++)
        v[i] = (double)data[i];
    stats(r, v, r->numel);
    free(v);
    store(w, r, H5T_STD_I64LE, H5T_NATIVE_INT64, data, sizeof(int64_t));
}

void tw_scalar(tw *w, int seq, const char *call, const char *key, double v)
{
    np_entry_rec *r = new_entry(w, seq, call, "kwargs", key, "float64", 0, NULL);
    r->max = r->min = r->mean = v;
    r->norm = fabs(v);
}

static void table(hid_t file, const char *name, hid_t type, const void *rows, size_t n)
{
    hsize_t dims = n, maxd = H5S_UNLIMITED, chunk = 64;
    hid_t space = H5Screate_simple(1, &dims, &maxd);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    hid_t ds = H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (n)
        H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
}

void tw_loss_scale(tw *w, double scale)
{
    w->loss_scale = scale;
}

int tw_close(tw *w, int complete)
{
    hid_t et = (hid_t)np_fmt_entry_h5type(), ct = (hid_t)np_fmt_call_h5type();
    table(w->file, "entries", et, w->e, w->ne);
    table(w->file, "calls", ct, w->c, w->nc);
    H5Tclose(et);
    H5Tclose(ct);
    attr_str(w->file, "format", "nprobe-dump");
    attr_i64(w->file, "format_version", 1);
    attr_str(w->file, "nprobe_version", "0.1.0");
    attr_str(w->file, "task", w->task);
    attr_str(w->file, "level", "mix");
    attr_str(w->file, "framework", "test");
    attr_str(w->file, "device", "test");
    attr_str(w->file, "precision", w->precision);
    attr_i64(w->file, "step", w->step);
    attr_i64(w->file, "rank", w->rank);
    attr_i64(w->file, "world_size", 1);
    attr_i64(w->file, "complete", complete);
    if (w->loss_scale != 0)
        np_h5_attr_set_f64(w->file, "loss_scale", w->loss_scale);
    H5Gclose(w->data);
    herr_t e = H5Fclose(w->file);
    free(w->e);
    free(w->c);
    free(w);
    return e < 0 ? -1 : 0;
}
