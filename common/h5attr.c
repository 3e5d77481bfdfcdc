/* common/h5attr.c - scalar HDF5 attributes (strings and int64), read and
 * written one way by every part: dumps, checkpoints, packs. */
#include "nprobe/format.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int np_h5_attr_get_str(int64_t obj, const char *name, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (H5Aexists((hid_t)obj, name) <= 0)
        return -1;
    hid_t a = H5Aopen((hid_t)obj, name, H5P_DEFAULT);
    if (a < 0)
        return -1;
    hid_t t = H5Aget_type(a);
    int rc = -1;
    if (t >= 0 && H5Tget_class(t) == H5T_STRING) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        if (H5Tis_variable_str(t) > 0) {
            char *s = NULL;
            H5Tset_size(mt, H5T_VARIABLE);
            H5Tset_cset(mt, H5Tget_cset(t));
            if (H5Aread(a, mt, &s) >= 0 && s) {
                snprintf(buf, cap, "%s", s);
                H5free_memory(s);
                rc = 0;
            }
        } else {
            size_t sz = H5Tget_size(t);
            char *tmp = calloc(sz + 1, 1);
            H5Tset_size(mt, sz);
            H5Tset_cset(mt, H5Tget_cset(t));
            if (tmp && H5Aread(a, mt, tmp) >= 0) {
                snprintf(buf, cap, "%s", tmp);
                rc = 0;
            }
            free(tmp);
        }
        H5Tclose(mt);
    }
    if (t >= 0)
        H5Tclose(t);
    H5Aclose(a);
    return rc;
}

static int attr_read(hid_t obj, const char *name, hid_t type, void *v)
{
    if (H5Aexists(obj, name) <= 0)
        return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    int ok = a >= 0 && H5Aread(a, type, v) >= 0;
    if (a >= 0)
        H5Aclose(a);
    return ok ? 0 : -1;
}

int np_h5_attr_get_i64(int64_t obj, const char *name, int64_t *out)
{
    return attr_read((hid_t)obj, name, H5T_NATIVE_INT64, out);
}

int np_h5_attr_get_f64(int64_t obj, const char *name, double *out)
{
    return attr_read((hid_t)obj, name, H5T_NATIVE_DOUBLE, out);
}

double np_fmt_get_loss_scale(int64_t file)
{
    double v = 1.0;
    if (attr_read((hid_t)file, NP_FMT_ATTR_LOSS_SCALE, H5T_NATIVE_DOUBLE, &v) != 0 || !(v > 0) ||
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
