/* common/h5attr.c - scalar HDF5 attributes (strings and int64), read and
 * written one way by every part: dumps, checkpoints, packs. */
#include "nprobe/common.h"
#include "nprobe/format.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int attr_write(hid_t obj, const char *name, hid_t type, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = sp < 0 ? -1 : H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    int ok = a >= 0 && H5Awrite(a, type, v) >= 0;
    if (a >= 0)
        H5Aclose(a);
    if (sp >= 0)
        H5Sclose(sp);
    return ok ? 0 : -1;
}

int np_h5_attr_set_str(int64_t obj, const char *name, const char *value)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0)
        return -1;
    H5Tset_size(t, strlen(value) + 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    int rc = attr_write((hid_t)obj, name, t, value);
    H5Tclose(t);
    return rc;
}

int np_h5_attr_set_i64(int64_t obj, const char *name, int64_t value)
{
    return attr_write((hid_t)obj, name, H5T_NATIVE_INT64, &value);
}

int np_h5_attr_set_f64(int64_t obj, const char *name, double value)
{
    return attr_write((hid_t)obj, name, H5T_NATIVE_DOUBLE, &value);
}

/* Open attribute `name` of obj for a one-value read: only a scalar or a
 * one-element dataspace fits the caller's buffer (H5Aread writes every
 * element), so anything else is refused before any read. */
static int attr_open_one(hid_t *out, hid_t obj, const char *name)
{
    *out = -1;
    if (H5Aexists(obj, name) <= 0)
        return NP_H5_ATTR_ABSENT;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0)
        return NP_H5_ATTR_WRONG_TYPE;
    hid_t sp = H5Aget_space(a);
    H5S_class_t cls = sp >= 0 ? H5Sget_simple_extent_type(sp) : H5S_NO_CLASS;
    hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    if (sp >= 0)
        H5Sclose(sp);
    if (!(cls == H5S_SCALAR || (cls == H5S_SIMPLE && n == 1))) {
        H5Aclose(a);
        return NP_H5_ATTR_NOT_SCALAR;
    }
    *out = a;
    return 0;
}

/* Read a one-value string attribute a of file type t into buf. */
static int read_str(hid_t a, hid_t t, char *buf, size_t cap)
{
    int rc = NP_H5_ATTR_WRONG_TYPE;
    hid_t mt = H5Tcopy(H5T_C_S1);
    if (mt < 0)
        return rc;
    H5Tset_cset(mt, H5Tget_cset(t));
    if (H5Tis_variable_str(t) > 0) {
        char *s = NULL;
        H5Tset_size(mt, H5T_VARIABLE);
        if (H5Aread(a, mt, &s) >= 0 && s) {
            snprintf(buf, cap, "%s", s);
            rc = 0;
        }
        if (s)
            H5free_memory(s);
    } else {
        size_t sz = H5Tget_size(t);
        char *tmp = sz > 0 && sz <= NP_H5_ATTR_STR_MAX ? calloc(sz + 1, 1) : NULL;
        if (tmp && H5Tset_size(mt, sz) >= 0 && H5Aread(a, mt, tmp) >= 0) {
            snprintf(buf, cap, "%s", tmp);
            rc = 0;
        }
        free(tmp);
    }
    H5Tclose(mt);
    return rc;
}

int np_h5_attr_get_str(int64_t obj, const char *name, char *buf, size_t cap)
{
    buf[0] = '\0';
    hid_t a;
    int rc = attr_open_one(&a, (hid_t)obj, name);
    if (rc)
        return rc;
    hid_t t = H5Aget_type(a);
    rc = NP_H5_ATTR_WRONG_TYPE;
    if (t >= 0 && H5Tget_class(t) == H5T_STRING)
        rc = read_str(a, t, buf, cap);
    if (t >= 0)
        H5Tclose(t);
    H5Aclose(a);
    if (rc)
        buf[0] = '\0';
    return rc;
}

/* Read a one-value number attribute converted to `type`: integers of 1 to 8
 * bytes always, floats only when want_float. */
static int attr_read(hid_t obj, const char *name, hid_t type, int want_float, void *v)
{
    hid_t a;
    int rc = attr_open_one(&a, obj, name);
    if (rc)
        return rc;
    hid_t t = H5Aget_type(a);
    H5T_class_t c = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
    size_t sz = t >= 0 ? H5Tget_size(t) : 0;
    if (t >= 0)
        H5Tclose(t);
    int fits = (c == H5T_INTEGER && sz >= 1 && sz <= 8) ||
               (want_float && c == H5T_FLOAT && sz >= 2 && sz <= 16);
    rc = fits && H5Aread(a, type, v) >= 0 ? 0 : NP_H5_ATTR_WRONG_TYPE;
    H5Aclose(a);
    return rc;
}

int np_h5_attr_get_i64(int64_t obj, const char *name, int64_t *out)
{
    int64_t v = 0;
    int rc = attr_read((hid_t)obj, name, H5T_NATIVE_INT64, 0, &v);
    if (rc == 0)
        *out = v;
    return rc;
}

int np_h5_attr_get_f64(int64_t obj, const char *name, double *out)
{
    double v = 0;
    int rc = attr_read((hid_t)obj, name, H5T_NATIVE_DOUBLE, 1, &v);
    if (rc == 0)
        *out = v;
    return rc;
}

const char *np_h5_attr_problem(int rc)
{
    switch (rc) {
    case 0:
        return "is fine";
    case NP_H5_ATTR_ABSENT:
        return "is missing";
    case NP_H5_ATTR_NOT_SCALAR:
        return "is an array or empty (expected a single value)";
    default:
        return "has the wrong type";
    }
}

double np_fmt_get_loss_scale(int64_t file)
{
    double v = 1.0;
    if (np_h5_attr_get_f64(file, NP_FMT_ATTR_LOSS_SCALE, &v) != 0 || !(v > 0) ||
        !isfinite(v))
        v = 1.0;
    return v;
}

void np_h5_quiet(np_h5_quiet_state *q)
{
    H5E_auto2_t fn = NULL;
    H5Eget_auto2(H5E_DEFAULT, &fn, &q->data);
    q->fn = (void (*)(void))fn;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void np_h5_unquiet(const np_h5_quiet_state *q)
{
    H5Eset_auto2(H5E_DEFAULT, (H5E_auto2_t)q->fn, q->data);
}

/* Element count of dims[0..nd), 0 or NP_H5_DSET_OVERFLOW past max. */
static int checked_numel(const hsize_t *dims, int nd, int64_t max, int64_t *out)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++) {
        if (dims[i] > (hsize_t)INT64_MAX)
            return NP_H5_DSET_OVERFLOW;
        if (dims[i] != 0 && n > max / (int64_t)dims[i])
            return NP_H5_DSET_OVERFLOW;
        n *= (int64_t)dims[i];
    }
    *out = n;
    return 0;
}

int np_h5_dset_extent(int64_t ds, size_t esize, int cap, int64_t *dims, int *ndim, int64_t *numel)
{
    hid_t sp = H5Dget_space((hid_t)ds);
    int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    H5S_class_t cls = sp >= 0 ? H5Sget_simple_extent_type(sp) : H5S_NO_CLASS;
    hsize_t d[32] = {0};
    int rc = 0;
    if (nd < 0 || nd > cap || nd > 32 || (cls != H5S_SIMPLE && cls != H5S_SCALAR))
        rc = NP_H5_DSET_NOT_SIMPLE;
    else if (nd > 0 && H5Sget_simple_extent_dims(sp, d, NULL) < 0)
        rc = NP_H5_DSET_NOT_SIMPLE;
    if (sp >= 0)
        H5Sclose(sp);
    int64_t n = 0;
    if (!rc)
        rc = checked_numel(d, nd, INT64_MAX / (int64_t)(esize ? esize : 1), &n);
    if (rc)
        return rc;
    /* the bytes the file holds for it */
    hid_t dcpl = H5Dget_create_plist((hid_t)ds);
    int nfilters = dcpl >= 0 ? H5Pget_nfilters(dcpl) : 0;
    if (dcpl >= 0)
        H5Pclose(dcpl);
    uint64_t want = (uint64_t)n * esize, have = (uint64_t)H5Dget_storage_size((hid_t)ds);
    if (nfilters > 0 ? have < want / 1024 : have < want)
        return NP_H5_DSET_NOT_STORED;
    for (int i = 0; i < nd; i++)
        dims[i] = (int64_t)d[i];
    *ndim = nd;
    *numel = n;
    return 0;
}

const char *np_h5_dset_problem(int rc)
{
    switch (rc) {
    case 0:
        return "is fine";
    case NP_H5_DSET_NOT_SIMPLE:
        return "is not a simple dataset of at most the expected dimensions";
    case NP_H5_DSET_OVERFLOW:
        return "has a shape whose element count overflows 64 bits";
    case NP_H5_NOT_LOCAL:
        return "lies outside the file (an external or soft link, external raw storage or a "
               "virtual dataset): refused, no other file is read";
    case NP_H5_ATTR_ABSENT:
        return "cannot be opened";
    default:
        return "claims more elements than the file holds data for";
    }
}

int64_t np_h5_open_local(int64_t loc, const char *name, int *problem)
{
    H5L_info_t li;
    *problem = 0;
    if (H5Lget_info((hid_t)loc, name, &li, H5P_DEFAULT) < 0) {
        *problem = NP_H5_ATTR_ABSENT;
        return -1;
    }
    if (li.type != H5L_TYPE_HARD) {
        *problem = NP_H5_NOT_LOCAL;
        return -1;
    }
    hid_t o = H5Oopen((hid_t)loc, name, H5P_DEFAULT);
    if (o < 0) {
        *problem = NP_H5_ATTR_ABSENT;
        return -1;
    }
    if (H5Iget_type(o) == H5I_DATASET) {
        hid_t dcpl = H5Dget_create_plist(o);
        int outside = dcpl < 0 || H5Pget_layout(dcpl) == H5D_VIRTUAL ||
                      H5Pget_external_count(dcpl) != 0;
        if (dcpl >= 0)
            H5Pclose(dcpl);
        if (outside) {
            H5Oclose(o);
            *problem = NP_H5_NOT_LOCAL;
            return -1;
        }
    }
    return o;
}

int64_t np_h5_fopen_read(const char *path, int64_t fapl, const char **why)
{
    int fd = np_open_regular(path, why);
    if (fd < 0)
        return -1;
    close(fd);
    *why = NULL;
    return H5Fopen(path, H5F_ACC_RDONLY, fapl > 0 ? (hid_t)fapl : H5P_DEFAULT);
}
