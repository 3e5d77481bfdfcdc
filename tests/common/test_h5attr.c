/* tests/common/test_h5attr.c - the attribute readers take one value only:
 * arrays, empty dataspaces, wrong classes and oversized strings are refused
 * with a code that says which (issue 13: an array-valued `format` or
 * `step` overflowed the one-value buffer), and nothing past the buffer is
 * written. Every file is built with the HDF5 C API. */
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "nprobe/format.h"

/* An attribute `name` on obj of file type t over dataspace sp holding buf. */
static void put(hid_t obj, const char *name, hid_t t, hid_t sp, const void *buf)
{
    hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(a >= 0);
    if (buf)
        CHECK(H5Awrite(a, t, buf) >= 0);
    H5Aclose(a);
}

static hid_t fixed_str(size_t n)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, n);
    return t;
}

int main(void)
{
    char path[] = "test_h5attr.h5";
    /* dense attribute storage (for the 2 MiB string) needs the 1.8 format */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(f >= 0);
    hsize_t n64 = 64, n1 = 1, d2[2] = {1, 1};
    hid_t scalar = H5Screate(H5S_SCALAR), arr = H5Screate_simple(1, &n64, NULL);
    hid_t one = H5Screate_simple(1, &n1, NULL), one2d = H5Screate_simple(2, d2, NULL);
    hid_t null = H5Screate(H5S_NULL);
    int64_t ints[64];
    for (int i = 0; i < 64; i++)
        ints[i] = 1000 + i;
    char strs[64][12];
    for (int i = 0; i < 64; i++)
        snprintf(strs[i], sizeof strs[i], "nprobe-dump");
    const char *vstrs[64];
    for (int i = 0; i < 64; i++)
        vstrs[i] = "nprobe-dump";
    hid_t s12 = fixed_str(12), vs = H5Tcopy(H5T_C_S1), big = fixed_str((size_t)2 << 20);
    H5Tset_size(vs, H5T_VARIABLE);
    put(f, "i_scalar", H5T_NATIVE_INT64, scalar, ints);
    put(f, "i_one", H5T_NATIVE_INT64, one, ints);
    put(f, "i_one2d", H5T_NATIVE_INT64, one2d, ints);
    put(f, "i_array", H5T_NATIVE_INT64, arr, ints);
    put(f, "i_null", H5T_NATIVE_INT64, null, NULL);
    put(f, "d_scalar", H5T_NATIVE_DOUBLE, scalar, &(double){2.5});
    put(f, "s_scalar", s12, scalar, strs[0]);
    put(f, "s_array", s12, arr, strs);
    put(f, "v_scalar", vs, scalar, vstrs);
    put(f, "v_array", vs, arr, vstrs);
    H5Fclose(f);
    /* a 2 MiB fixed string does not fit an object header: a dataset holds it */
    f = H5Fopen(path, H5F_ACC_RDWR, fapl);
    H5Pclose(fapl);
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_attr_phase_change(gcpl, 0, 0);
    hid_t g2 = H5Gcreate2(f, "dense", H5P_DEFAULT, gcpl, H5P_DEFAULT);
    char *huge = calloc((size_t)2 << 20, 1);
    memset(huge, 'A', ((size_t)2 << 20) - 1);
    put(g2, "s_huge", big, scalar, huge);
    free(huge);
    H5Gclose(g2);
    H5Pclose(gcpl);

    /* a canary after each buffer: the read must stay inside */
    struct {
        int64_t v;
        int64_t canary[64];
    } iv;
    memset(&iv, 0x5a, sizeof iv);
    CHECK_EQ_INT(np_h5_attr_get_i64(f, "i_scalar", &iv.v), 0);
    CHECK_EQ_INT(iv.v, 1000);
    CHECK_EQ_INT(np_h5_attr_get_i64(f, "i_one", &iv.v), 0);
    CHECK_EQ_INT(np_h5_attr_get_i64(f, "i_one2d", &iv.v), 0);
    iv.v = -7;
    CHECK_EQ_INT(np_h5_attr_get_i64(f, "i_array", &iv.v), NP_H5_ATTR_NOT_SCALAR);
    CHECK_EQ_INT(iv.v, -7); /* unchanged */
    CHECK_EQ_INT(np_h5_attr_get_i64(f, "i_null", &iv.v), NP_H5_ATTR_NOT_SCALAR);
    CHECK_EQ_INT(np_h5_attr_get_i64(f, "s_scalar", &iv.v), NP_H5_ATTR_WRONG_TYPE);
    CHECK_EQ_INT(np_h5_attr_get_i64(f, "d_scalar", &iv.v), NP_H5_ATTR_WRONG_TYPE);
    CHECK_EQ_INT(np_h5_attr_get_i64(f, "absent", &iv.v), NP_H5_ATTR_ABSENT);
    for (int i = 0; i < 64; i++)
        CHECK(iv.canary[i] == (int64_t)0x5a5a5a5a5a5a5a5aLL);

    double d = -1;
    CHECK_EQ_INT(np_h5_attr_get_f64(f, "d_scalar", &d), 0);
    CHECK(d == 2.5);
    CHECK_EQ_INT(np_h5_attr_get_f64(f, "i_scalar", &d), 0);
    CHECK(d == 1000.0);
    CHECK_EQ_INT(np_h5_attr_get_f64(f, "i_array", &d), NP_H5_ATTR_NOT_SCALAR);
    CHECK_EQ_INT(np_h5_attr_get_f64(f, "v_scalar", &d), NP_H5_ATTR_WRONG_TYPE);

    struct {
        char s[32];
        char canary[256];
    } sv;
    memset(&sv, 0x5a, sizeof sv);
    CHECK_EQ_INT(np_h5_attr_get_str(f, "s_scalar", sv.s, sizeof sv.s), 0);
    CHECK(strcmp(sv.s, "nprobe-dump") == 0);
    CHECK_EQ_INT(np_h5_attr_get_str(f, "v_scalar", sv.s, sizeof sv.s), 0);
    CHECK(strcmp(sv.s, "nprobe-dump") == 0);
    CHECK_EQ_INT(np_h5_attr_get_str(f, "s_array", sv.s, sizeof sv.s), NP_H5_ATTR_NOT_SCALAR);
    CHECK(sv.s[0] == '\0');
    CHECK_EQ_INT(np_h5_attr_get_str(f, "v_array", sv.s, sizeof sv.s), NP_H5_ATTR_NOT_SCALAR);
    CHECK_EQ_INT(np_h5_attr_get_str(f, "i_scalar", sv.s, sizeof sv.s), NP_H5_ATTR_WRONG_TYPE);
    CHECK_EQ_INT(np_h5_attr_get_str(f, "i_null", sv.s, sizeof sv.s), NP_H5_ATTR_NOT_SCALAR);
    hid_t gd = H5Gopen2(f, "dense", H5P_DEFAULT);
    CHECK_EQ_INT(np_h5_attr_get_str(gd, "s_huge", sv.s, sizeof sv.s), NP_H5_ATTR_WRONG_TYPE);
    H5Gclose(gd);
    for (int i = 0; i < 256; i++)
        CHECK(sv.canary[i] == 0x5a);
    CHECK(strcmp(np_h5_attr_problem(NP_H5_ATTR_NOT_SCALAR),
                 "is an array or empty (expected a single value)") == 0);

    H5Fclose(f);
    H5Sclose(scalar);
    H5Sclose(arr);
    H5Sclose(one);
    H5Sclose(one2d);
    H5Sclose(null);
    H5Tclose(s12);
    H5Tclose(vs);
    H5Tclose(big);
    unlink(path);
    return check_report();
}
