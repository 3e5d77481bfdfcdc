/* nprobe/format.h - the dump file, format version 1 (docs/FORMAT.md is the
 * authoritative text). Shared by the writer (probe) and the reader (compare,
 * ls, show) so both sides use one record layout and one set of names.
 *
 *   {dump_path}/step{S}/rank{R}/dump.h5
 *     root attributes   NP_FMT_ATTR_*  (strings or int64)
 *     /entries          compound table of np_entry_rec, one row per tensor leaf
 *     /calls            compound table of np_call_rec, one row per call
 *     /data/{leaf}      payloads (tensor task): float32 for bf16/fp16/fp32,
 *                       float64, int64, int32, uint8 (bool); attribute "dtype"
 */
#ifndef NPROBE_FORMAT_H
#define NPROBE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "nprobe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NP_FMT_NAME "nprobe-dump"
#define NP_FMT_VERSION 1       /* what the probe writes for a dump without placements */
#define NP_FMT_VERSION_MAX 2   /* readers take 1..2; 2: the mesh attributes and /placements */
#define NP_FMT_FILE "dump.h5"

#define NP_FMT_NAME_LEN 256   /* leaf, call, parent names, NUL-terminated */
#define NP_FMT_SITE_LEN 128
#define NP_FMT_ROLE_LEN 16
#define NP_FMT_DTYPE_LEN 16
#define NP_FMT_KIND_LEN 8
#define NP_FMT_MAX_DIMS 8

/* Root attribute names. */
#define NP_FMT_ATTR_FORMAT "format"                 /* string "nprobe-dump" */
#define NP_FMT_ATTR_FORMAT_VERSION "format_version" /* int64 1 */
#define NP_FMT_ATTR_NPROBE_VERSION "nprobe_version" /* string */
#define NP_FMT_ATTR_TASK "task"                     /* statistics|tensor|md5|overflow_check */
#define NP_FMT_ATTR_LEVEL "level"                   /* L0|L1|mix */
#define NP_FMT_ATTR_FRAMEWORK "framework"           /* "nprobe-runtime", "pytorch", ... */
#define NP_FMT_ATTR_DEVICE "device"                 /* "cpu", "npu-sim", ... */
#define NP_FMT_ATTR_PRECISION "precision"           /* "fp32", "bf16", "fp16" */
#define NP_FMT_ATTR_STEP "step"                     /* int64 */
#define NP_FMT_ATTR_RANK "rank"                     /* int64 */
#define NP_FMT_ATTR_WORLD_SIZE "world_size"         /* int64 */
#define NP_FMT_ATTR_COMPLETE "complete"             /* int64: 1 once the step closed cleanly */
#define NP_FMT_ATTR_LOSS_SCALE "loss_scale"         /* float64: the factor the step's gradients
                                                       carry (1 without a loss scaler; absent in
                                                       files of nprobe 0.x before it: read as 1) */
#define NP_FMT_ATTR_DP_GRAD_SCALE "dp_grad_scale" /* float64, only when not 1: the factor
                                                       an averaging data-parallel reduction
                                                       leaves on each rank's gradients (its
                                                       divisor); absent: 1 */
#define NP_FMT_ATTR_SCOPE "scope"                   /* string, only with a configured scope:
                                                       "closed", "open" or "not reached" */
#define NP_FMT_ATTR_SCOPE_FIRST "scope_first"       /* string: the configured range's first call */
#define NP_FMT_ATTR_SCOPE_LAST "scope_last"         /* string: its last call */
#define NP_FMT_ATTR_MESH_DIMS "mesh_dims"         /* string, version 2: the mesh's dimension
                                                       names, ","-separated ("dp,tp") */
#define NP_FMT_ATTR_MESH_SHAPE "mesh_shape"       /* string, version 2: their sizes ("2,2") */
#define NP_FMT_ATTR_MESH_COORDS "mesh_coords"     /* string, version 2: this rank's coordinates */
#define NP_FMT_PARTIAL_SUFFIX ".partial"            /* a step in progress: dump.h5.partial */

#define NP_FMT_ENTRIES "entries"
#define NP_FMT_CALLS "calls"
#define NP_FMT_PLACEMENTS "placements"            /* version 2: one row per placed leaf */
#define NP_FMT_PLACE_LEN 96
#define NP_FMT_MESH_MAX 4                         /* mesh dimensions at most */
#define NP_FMT_MESH_MB "mb"                       /* the mesh dimension of a rank's micro-batches
                                                   * (in time): not counted in world_size, the
                                                   * file's coordinate 0, a leaf's its row's
                                                   * micro_batch */
#define NP_FMT_DATA "data"
#define NP_FMT_DATA_DTYPE_ATTR "dtype"

/* The statistics block of a leaf, over its finite elements (max, min, mean
 * and norm are NaN when there are none), with its NaN/Inf counts: one struct
 * for the probe's results (np_probe_stats), a caller's (np_leaf_stats) and
 * compare's sides (np_cmp_side), written into a row of /entries by
 * np_fmt_entry_set_stats and read from one by np_fmt_entry_stats: the row's
 * fields max..neginf_count are this block member for member, and the block
 * has no padding, so memcmp compares two bit for bit (both checked at
 * compile time in common/format.c). */
typedef struct np_stats {
    double max, min, mean, norm;
    int64_t nan_count, posinf_count, neginf_count;
} np_stats;

/* One row of /entries. Strings are NUL-terminated and NUL-padded. For a row
 * of role "kwargs" (a scalar argument) ndim = 0, numel = 1 and the value is
 * in max, min and mean. Statistics are over finite elements; when there are
 * none, max/min/mean/norm are NaN. */
typedef struct np_entry_rec {
    int64_t seq;                         /* order of the call in the step (row of /calls) */
    char name[NP_FMT_NAME_LEN];          /* the leaf: "{call}.{role}.{index|key}" */
    char call[NP_FMT_NAME_LEN];          /* the call: "Functional.linear.3.forward" */
    char role[NP_FMT_ROLE_LEN];          /* input|output|parameters|kwargs|parameters_grad */
    char dtype[NP_FMT_DTYPE_LEN];        /* logical dtype name */
    int32_t ndim;
    int64_t shape[NP_FMT_MAX_DIMS];      /* unused dims are 0 */
    int64_t numel;
    double max, min, mean, norm;         /* np_stats, member for member (see above) */
    int64_t nan_count, posinf_count, neginf_count;
    uint32_t crc32;                      /* zlib crc32 of the stored bytes (md5/tensor tasks), else 0 */
    int8_t has_data;                     /* 1 when /data/{name} holds the payload */
    int8_t requires_grad;
} np_entry_rec;

/* One row of /calls. */
typedef struct np_call_rec {
    int64_t seq;
    char call[NP_FMT_NAME_LEN];
    char kind[NP_FMT_KIND_LEN];          /* "api" or "module" */
    char parent[NP_FMT_NAME_LEN];        /* enclosing module call, "" at top level */
    char callsite[NP_FMT_SITE_LEN];
} np_call_rec;

/* One row of /placements (format version 2): how leaf `name` of this rank
 * lies in its logical tensor. `placements` has one item per mesh dimension,
 * ","-separated, in DTensor's words: "Shard(d)" (split along logical dim d
 * over that mesh dimension), "Replicate()" (a whole copy), "Partial(sum)"
 * (the logical tensor is the sum over that mesh dimension). */
typedef struct np_place_rec {
    char name[NP_FMT_NAME_LEN];          /* a leaf of /entries */
    char placements[NP_FMT_PLACE_LEN];   /* "Replicate(),Shard(0)" */
    int32_t global_ndim;                 /* the logical tensor's ndim (= the leaf's) */
    int64_t global_shape[NP_FMT_MAX_DIMS];
    int64_t offset[NP_FMT_MAX_DIMS];     /* where this shard starts in the logical tensor */
    int32_t stage;                       /* pipeline stage, -1: no pipeline */
    int32_t micro_batch;                 /* micro-batch, -1: the whole batch */
} np_place_rec;

/* A device mesh as a dump file states it (format version 2): `ndim` named
 * dimensions (0: no mesh), their sizes and this rank's coordinates. */
typedef struct np_fmt_mesh {
    int ndim;
    char dims[NP_FMT_MESH_MAX][16];
    int64_t shape[NP_FMT_MESH_MAX], coords[NP_FMT_MESH_MAX];
} np_fmt_mesh;

/* Why placement row `p` is outside the format (docs/FORMAT.md,
 * "/placements") for a file with mesh `m` whose leaf p->name has `ndim`
 * dimensions of `shape` (ndim < 0: the row names no leaf): the message
 * names the leaf and the field; NULL when the row is sound. The one check
 * the writer (np_probe_place) and the readers (np_dumpio_place_problem)
 * share. */
const char *np_fmt_place_problem(const np_fmt_mesh *m, const np_place_rec *p, int ndim,
                                 const int64_t *shape, char *buf, size_t cap);
/* Placement item k of p ("Shard(1)") into buf; returns buf ("" past the end). */
const char *np_fmt_place_item(const np_place_rec *p, int k, char *buf, size_t cap);
/* Item `item`: 'S' with *dim set for Shard(dim), 'R' for Replicate(), 'P'
 * for Partial(sum), 'A' for Partial(avg), 'L' for Local() (each rank's own
 * values, no logical tensor: routing positions); 0 when it is none of them. */
int np_fmt_place_kind(const char *item, int *dim);

/* HDF5 type ids are int64_t (hid_t) in HDF5 >= 1.10; declared here without
 * including hdf5.h so this header stays dependency-free. Each returns a new
 * compound type id that the caller closes with H5Tclose, or a negative id on
 * failure. Field names equal the struct member names. */
/* The statistics block written into a row (its fields max..neginf_count),
 * and read from one. */
void np_fmt_entry_set_stats(np_entry_rec *r, const np_stats *s);
np_stats np_fmt_entry_stats(const np_entry_rec *r);

int64_t np_fmt_entry_h5type(void);
int64_t np_fmt_call_h5type(void);
int64_t np_fmt_place_h5type(void);

/* Scalar attributes on an HDF5 object (`obj` is a hid_t). Strings are
 * written fixed-length NUL-terminated and read fixed or variable length
 * (truncated to cap - 1). A read accepts only a scalar or one-element
 * dataspace; strings must be of the string class (fixed ones at most
 * NP_H5_ATTR_STR_MAX bytes), int64 reads take integers of 1 to 8 bytes,
 * f64 reads integers or floats. Each returns 0, or NP_H5_ATTR_ABSENT,
 * NP_H5_ATTR_NOT_SCALAR or NP_H5_ATTR_WRONG_TYPE (all negative) and leaves
 * *out unchanged ("" for strings); the caller names file and attribute,
 * np_h5_attr_problem words the fault ("is an array ..."). */
#define NP_H5_ATTR_ABSENT (-1)
#define NP_H5_ATTR_NOT_SCALAR (-2)
#define NP_H5_ATTR_WRONG_TYPE (-3)
#define NP_H5_ATTR_STR_MAX ((size_t)1 << 20)
const char *np_h5_attr_problem(int rc);
int np_h5_attr_set_str(int64_t obj, const char *name, const char *value);
int np_h5_attr_set_i64(int64_t obj, const char *name, int64_t value);
int np_h5_attr_set_f64(int64_t obj, const char *name, double value);
int np_h5_attr_get_str(int64_t obj, const char *name, char *buf, size_t cap);
int np_h5_attr_get_i64(int64_t obj, const char *name, int64_t *out);
int np_h5_attr_get_f64(int64_t obj, const char *name, double *out);
/* A dump file's root attribute loss_scale; 1 when absent, not positive or
 * not finite. */
double np_fmt_get_loss_scale(int64_t file);

/* Silence HDF5's automatic error-stack printing (libraries never print) and
 * restore it afterwards. */
typedef struct np_h5_quiet_state {
    void (*fn)(void);
    void *data;
} np_h5_quiet_state;
void np_h5_quiet(np_h5_quiet_state *q);
void np_h5_unquiet(const np_h5_quiet_state *q);

/* The extent of dataset `ds` (a hid_t) for a read of elements of `esize`
 * bytes, checked before anything is allocated for it: a simple dataspace of
 * at most `cap` dimensions (dims[], *ndim), an element count (*numel) whose
 * product and byte size do not overflow int64, and a file that actually
 * holds the data it claims: a dataset without filters keeps all numel *
 * esize bytes, a compressed one at least 1/1024 of them (more than deflate
 * can reach). Returns 0 or NP_H5_DSET_NOT_SIMPLE, NP_H5_DSET_OVERFLOW,
 * NP_H5_DSET_NOT_STORED (all negative); np_h5_dset_problem words it. */
#define NP_H5_DSET_NOT_SIMPLE (-11)
#define NP_H5_DSET_OVERFLOW (-12)
#define NP_H5_DSET_NOT_STORED (-13)
int np_h5_dset_extent(int64_t ds, size_t esize, int cap, int64_t *dims, int *ndim, int64_t *numel);
const char *np_h5_dset_problem(int rc);

/* Open group or dataset `name` (one path component) under `loc` only when
 * reading it stays in this file: reached by a hard link (an external link
 * opens another file, a soft link can lead to one) and, for a dataset, with
 * its data in the file (not external raw storage nor a virtual dataset,
 * which map other files: a hostile dump could make nprobe read any file).
 * Returns the object's hid_t, or a negative value with *problem set
 * (NP_H5_NOT_LOCAL; NP_H5_ATTR_ABSENT when it cannot be opened);
 * np_h5_dset_problem words it. The caller closes it (H5Oclose, or H5Gclose
 * / H5Dclose by kind). */
#define NP_H5_NOT_LOCAL (-14)
int64_t np_h5_open_local(int64_t loc, const char *name, int *problem);

/* H5Fopen(path, read-only, fapl: a hid_t or 0 for the default) of a file a
 * user named, only when it is a regular file: HDF5 opens a FIFO for
 * reading and waits forever for a writer. Negative with *why set
 * (np_open_regular's words) when it is not one; negative with *why NULL
 * when HDF5 refuses it. */
int64_t np_h5_fopen_read(const char *path, int64_t fapl, const char **why);

/* Copy `src` into a fixed field of `cap` bytes, NUL-padded; returns 1 if it
 * had to be truncated. */
int np_fmt_copy_name(char *dst, size_t cap, const char *src);

#ifdef __cplusplus
}
#endif
#endif
