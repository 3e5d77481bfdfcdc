/* common/format.c - HDF5 compound types for the dump tables (format v1),
 * built from the structs in nprobe/format.h so writer and reader agree. */
#include "nprobe/format.h"

#include <hdf5.h>
#include <stddef.h>
#include <string.h>

_Static_assert(sizeof(hid_t) == sizeof(int64_t), "hid_t must be 64-bit (HDF5 >= 1.10)");

/* A row's fields max..neginf_count are an np_stats member for member: one
 * block copy reads or writes them (a field added to either fails here). */
#define NP_ROW_STAT(f) (offsetof(np_entry_rec, f) - offsetof(np_entry_rec, max) == offsetof(np_stats, f))
_Static_assert(NP_ROW_STAT(max) && NP_ROW_STAT(min) && NP_ROW_STAT(mean) && NP_ROW_STAT(norm) &&
                   NP_ROW_STAT(nan_count) && NP_ROW_STAT(posinf_count) &&
                   NP_ROW_STAT(neginf_count) &&
                   offsetof(np_entry_rec, crc32) - offsetof(np_entry_rec, max) == sizeof(np_stats),
               "np_entry_rec's statistics fields are not np_stats");
#undef NP_ROW_STAT
/* No padding: two blocks are compared bit for bit with memcmp (compare's
 * replicas and shards: a NaN equals the same NaN). */
_Static_assert(sizeof(np_stats) == 4 * sizeof(double) + 3 * sizeof(int64_t),
               "np_stats has padding");

void np_fmt_entry_set_stats(np_entry_rec *r, const np_stats *s)
{
    memcpy((char *)r + offsetof(np_entry_rec, max), s, sizeof *s); /* the block, not one member */
}

np_stats np_fmt_entry_stats(const np_entry_rec *r)
{
    np_stats s;
    memcpy(&s, (const char *)r + offsetof(np_entry_rec, max), sizeof s);
    return s;
}

static hid_t str_type(size_t len)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0)
        return t;
    H5Tset_size(t, len);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    return t;
}

int64_t np_fmt_entry_h5type(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(np_entry_rec));
    hid_t name_t = str_type(NP_FMT_NAME_LEN);
    hid_t role_t = str_type(NP_FMT_ROLE_LEN);
    hid_t dtype_t = str_type(NP_FMT_DTYPE_LEN);
    hsize_t dims = NP_FMT_MAX_DIMS;
    hid_t shape_t = H5Tarray_create2(H5T_NATIVE_INT64, 1, &dims);
    herr_t e = 0;
    if (t < 0 || name_t < 0 || role_t < 0 || dtype_t < 0 || shape_t < 0)
        e = -1;
#define F(field, type) \
    if (e >= 0) e = H5Tinsert(t, #field, offsetof(np_entry_rec, field), type)
    F(seq, H5T_NATIVE_INT64);
    F(name, name_t);
    F(call, name_t);
    F(role, role_t);
    F(dtype, dtype_t);
    F(ndim, H5T_NATIVE_INT32);
    F(shape, shape_t);
    F(numel, H5T_NATIVE_INT64);
    F(max, H5T_NATIVE_DOUBLE);
    F(min, H5T_NATIVE_DOUBLE);
    F(mean, H5T_NATIVE_DOUBLE);
    F(norm, H5T_NATIVE_DOUBLE);
    F(nan_count, H5T_NATIVE_INT64);
    F(posinf_count, H5T_NATIVE_INT64);
    F(neginf_count, H5T_NATIVE_INT64);
    F(crc32, H5T_NATIVE_UINT32);
    F(has_data, H5T_NATIVE_INT8);
    F(requires_grad, H5T_NATIVE_INT8);
#undef F
    if (name_t >= 0) H5Tclose(name_t);
    if (role_t >= 0) H5Tclose(role_t);
    if (dtype_t >= 0) H5Tclose(dtype_t);
    if (shape_t >= 0) H5Tclose(shape_t);
    if (e < 0) {
        if (t >= 0)
            H5Tclose(t);
        return -1;
    }
    return t;
}

int64_t np_fmt_call_h5type(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(np_call_rec));
    hid_t name_t = str_type(NP_FMT_NAME_LEN);
    hid_t kind_t = str_type(NP_FMT_KIND_LEN);
    hid_t site_t = str_type(NP_FMT_SITE_LEN);
    herr_t e = 0;
    if (t < 0 || name_t < 0 || kind_t < 0 || site_t < 0)
        e = -1;
#define F(field, type) \
    if (e >= 0) e = H5Tinsert(t, #field, offsetof(np_call_rec, field), type)
    F(seq, H5T_NATIVE_INT64);
    F(call, name_t);
    F(kind, kind_t);
    F(parent, name_t);
    F(callsite, site_t);
#undef F
    if (name_t >= 0) H5Tclose(name_t);
    if (kind_t >= 0) H5Tclose(kind_t);
    if (site_t >= 0) H5Tclose(site_t);
    if (e < 0) {
        if (t >= 0)
            H5Tclose(t);
        return -1;
    }
    return t;
}

int np_fmt_copy_name(char *dst, size_t cap, const char *src)
{
    size_t n = src ? strlen(src) : 0;
    int truncated = n >= cap;
    if (truncated)
        n = cap - 1;
    if (n)
        memcpy(dst, src, n);
    memset(dst + n, 0, cap - n);
    return truncated;
}

int64_t np_fmt_place_h5type(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(np_place_rec));
    hid_t name_t = str_type(NP_FMT_NAME_LEN);
    hid_t pl_t = str_type(NP_FMT_PLACE_LEN);
    hsize_t dims = NP_FMT_MAX_DIMS;
    hid_t shape_t = H5Tarray_create2(H5T_NATIVE_INT64, 1, &dims);
    herr_t e = 0;
    if (t < 0 || name_t < 0 || pl_t < 0 || shape_t < 0)
        e = -1;
#define F(field, type) \
    if (e >= 0) e = H5Tinsert(t, #field, offsetof(np_place_rec, field), type)
    F(name, name_t);
    F(placements, pl_t);
    F(global_ndim, H5T_NATIVE_INT32);
    F(global_shape, shape_t);
    F(offset, shape_t);
    F(stage, H5T_NATIVE_INT32);
    F(micro_batch, H5T_NATIVE_INT32);
#undef F
    if (name_t >= 0) H5Tclose(name_t);
    if (pl_t >= 0) H5Tclose(pl_t);
    if (shape_t >= 0) H5Tclose(shape_t);
    if (e < 0) {
        if (t >= 0)
            H5Tclose(t);
        return -1;
    }
    return t;
}
