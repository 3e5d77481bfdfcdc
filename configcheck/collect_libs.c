/* configcheck/collect_libs.c - libs.json: the versions and settings of every
 * library that can change the numbers (or the files) of a run. */
#include <cblas.h>
#include <hdf5.h>
#include <jansson.h>
#include <omp.h>
#include <xlsxwriter.h>
#include <zip.h>

#if defined(__GLIBC__) || defined(__linux__)
#include <features.h>
#endif
#if defined(__GLIBC__)
#include <gnu/libc-version.h>
#endif

#include "cc_internal.h"

#ifndef NP_CC_BUILD_TYPE
#define NP_CC_BUILD_TYPE "unknown"
#endif
#ifndef NP_CC_C_FLAGS
#define NP_CC_C_FLAGS ""
#endif
#ifndef NP_CC_SANITIZE
#define NP_CC_SANITIZE 0
#endif

#define STR_(x) #x
#define STR(x) STR_(x)

json_t *np_cc_collect_libs(void)
{
    unsigned maj = 0, min = 0, rel = 0;
    char hdf5v[64];
    H5get_libversion(&maj, &min, &rel);
    snprintf(hdf5v, sizeof hdf5v, "%u.%u.%u", maj, min, rel);
#if defined(__GLIBC__)
    const char *libc = gnu_get_libc_version();
    const char *libc_name = "glibc";
#else
    const char *libc = "unknown";
    const char *libc_name = "unknown";
#endif
#if defined(__clang__)
    const char *compiler = "clang " __VERSION__;
#elif defined(__GNUC__)
    const char *compiler = "gcc " __VERSION__;
#elif defined(__VERSION__)
    const char *compiler = __VERSION__;
#else
    const char *compiler = "unknown";
#endif
    const char *blas_config = openblas_get_config();
    const char *blas_core = openblas_get_corename();
    return json_pack(
        "{s:{s:s, s:s, s:s, s:s, s:b, s:s},"
        " s:s, s:{s:s, s:s}, s:s,"
        " s:{s:s, s:s, s:i, s:i, s:i},"
        " s:{s:i, s:i, s:s},"
        " s:s, s:s, s:s}",
        "nprobe", "version", NP_VERSION_STRING, "build_type", NP_CC_BUILD_TYPE,
        "c_flags", NP_CC_C_FLAGS, "numerics_flags", "-ffp-contract=off",
        "sanitize", NP_CC_SANITIZE, "c_standard", STR(__STDC_VERSION__),
        "compiler", compiler,
        "libc", "name", libc_name, "version", libc,
        "hdf5", hdf5v,
        "openblas", "config", blas_config ? blas_config : "", "corename",
        blas_core ? blas_core : "", "num_threads", openblas_get_num_threads(),
        "num_procs", openblas_get_num_procs(), "parallel", openblas_get_parallel(),
        "openmp", "max_threads", omp_get_max_threads(), "num_procs", omp_get_num_procs(),
        "version", STR(_OPENMP),
        "libxlsxwriter", LXW_VERSION, "jansson", JANSSON_VERSION,
        "libzip", zip_libzip_version());
}
