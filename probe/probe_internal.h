/* probe/probe_internal.h - what the probe's sources share: the parsed
 * config, the statistics kernels, the HDF5 step writer and its asynchronous
 * front (a writer thread fed through a bounded byte ring). */
#ifndef NPROBE_PROBE_INTERNAL_H
#define NPROBE_PROBE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "nprobe/format.h"
#include "nprobe/probe.h"

/* data_mode bits */
enum {
    NP_DM_INPUT = 1,
    NP_DM_OUTPUT = 2,
    NP_DM_FORWARD = 4,
    NP_DM_BACKWARD = 8,
    NP_DM_ALL = 15
};

struct np_probe_config {
    char source[512];        /* file name or "<string>" */
    np_probe_task task;
    np_probe_level level;
    char *dump_path;         /* absolute */
    int *ranks;              /* empty: all */
    int n_ranks;
    int (*steps)[2];         /* inclusive ranges; empty: all */
    int n_steps;
    char *scope[2];          /* [first, last] or NULL */
    int n_scope;             /* 0 or 2 */
    char **list;
    int n_list;
    unsigned dm_roles;       /* role constraint bits (NP_DM_INPUT|NP_DM_OUTPUT), 0 = any */
    unsigned dm_dirs;        /* direction constraint bits, 0 = any */
    long overflow_nums;      /* -1: no limit */
    int async_dump;
    long queue_mb;
    int compression;         /* 0 none, 1..9 deflate level */
    int stack;
    int stop_training;       /* on_error */
};

/* Deep copy; NULL on out of memory. */
np_probe_config *np_probe_config_dup(const np_probe_config *c);

/* ---- tensor views (view.c) -------------------------------------------- */

/* Make `out` describe view `v` in the dump's storage: `v`'s own memory when
 * it already is (contiguous float32/float64/int64/int32/bool), else `*buf`
 * (grown with realloc to *cap bytes, owned by the caller) holding the
 * gathered, widened elements. `leaf` names the tensor in errors. */
np_status probe_view_tensor(np_tensor *out, const np_tensor_view *v, void **buf, size_t *cap,
                            const char *leaf, np_error *err);

/* A view whose elements are exactly those of one contiguous block of its
 * storage, each once, in any order (a contiguous tensor, or a transpose,
 * permute, reshape, view of one; no overlap, no gap): that block as a 1-D
 * contiguous view. Size-1 dimensions may have any stride. `numel` holds
 * v.shape[0] (v.shape points at it: the struct must not be copied). */
typedef struct probe_block_view {
    np_tensor_view v;
    int64_t numel;
} probe_block_view;

/* 1 and `out` filled when `v` (a valid view: known dtype, 0..NP_MAX_DIMS
 * dimensions, sizes >= 0, data) is such a block of at least one element;
 * else 0. */
int probe_view_block(const np_tensor_view *v, probe_block_view *out);

/* ---- statistics ------------------------------------------------------- */

/* Fill the statistics fields of `rec` (and crc32 when `want_crc`). `scratch`
 * holds per-chunk partials; grown as needed (realloc) and owned by the
 * caller. Returns 0, or -1 on out of memory (rec then holds serial stats). */
typedef struct np_stats_scratch {
    void *buf;
    size_t cap;
} np_stats_scratch;

void np_stats_compute(np_probe_stats *st, uint32_t *crc, np_dtype dt, const void *data,
                      int64_t numel, np_stats_scratch *scratch);
void np_stats_scratch_free(np_stats_scratch *s);
/* np_stats_compute and, in the same chunk loop (each chunk read again while
 * it is in cache), the extras of float32 storage: the count of elements
 * equal to 0 (when `zeros`) and the sum of squares of the finite
 * differences data - prev (when `prev`: numel float32 values). The *_out
 * fields receive them (0 for other dtypes). NULL: np_stats_compute. */
typedef struct np_stats_extra {
    const float *prev;
    int zeros;
    /* Adam's derived update (prev NULL): m, v (or max_exp_avg_sq) of the
     * same numel and coef[4] (np_probe_tensor_stats_f32_adam); its sum of
     * squares goes to diff_sumsq_out */
    const float *m, *v;
    const double *coef;
    int64_t zeros_out;
    double diff_sumsq_out;
} np_stats_extra;
void np_stats_compute_ex(np_probe_stats *st, uint32_t *crc, np_dtype dt, const void *data,
                         int64_t numel, np_stats_scratch *scratch, np_stats_extra *ex);
/* Tests: 1 makes the float32 statistics take the portable C path instead of
 * the AVX-512/AVX2 one picked at run time (the results are the same bits). */
void np_stats_force_portable(int on);

/* ---- the HDF5 step writer (not thread-safe; one owner) ----------------- */

typedef struct np_h5w np_h5w;

/* Uncompressed payloads of NP_H5W_DIRECT_MIN bytes and more are written
 * around the page cache (O_DIRECT) where the file system allows it, straight
 * from the caller's memory when it is NP_H5W_DIRECT_ALIGN-aligned, else
 * through a bounce buffer (h5writer.c). */
#define NP_H5W_DIRECT_ALIGN ((size_t)4096)
#define NP_H5W_DIRECT_MIN ((size_t)1 << 18)

typedef struct np_h5w_step_info {
    const char *task, *level, *framework, *device, *precision;
    int64_t step, rank, world_size;
    double loss_scale; /* the factor the step's gradients carry (root attribute loss_scale) */
    /* the device mesh (format version 2, root attributes mesh_dims, mesh_shape,
     * mesh_coords: ","-separated), or NULL/"" for none (format version 1) */
    const char *mesh_dims, *mesh_shape, *mesh_coords;
    double dp_grad_scale; /* the factor of an averaging data-parallel reduction (root
                           * attribute dp_grad_scale, written when not 1) */
} np_h5w_step_info;

typedef struct np_h5w_totals {
    int64_t files, calls, entries, data_bytes, bytes;
} np_h5w_totals;

np_status np_h5w_new(np_h5w **out, const char *dump_path, int compression, np_error *err);
/* Create {dump_path}/step{S}/rank{R}/dump.h5.partial with complete=0; an
 * existing dump.h5 of that step and rank (an earlier run's) is removed. */
np_status np_h5w_step_begin(np_h5w *w, const np_h5w_step_info *info, np_error *err);
np_status np_h5w_call(np_h5w *w, const np_call_rec *rec, np_error *err);
/* One /entries row; `data` (may be NULL) is written as /data/{rec->name}. */
np_status np_h5w_entry(np_h5w *w, const np_entry_rec *rec, const void *data, np_error *err);
/* One /placements row (a step with a mesh only); the rows are kept and
 * written as the table when the step ends. */
np_status np_h5w_place(np_h5w *w, const np_place_rec *rec, np_error *err);
/* Flush rows and HDF5 metadata so the partial file reads up to here. */
np_status np_h5w_flush(np_h5w *w, np_error *err);
/* Remove dump.h5 and dump.h5.partial of a step and rank if they exist (a
 * step the probe selects but may not write: overflow_check). */
np_status np_h5w_clear_step(const char *dump_path, int64_t step, int64_t rank, np_error *err);
/* How the config's scope fared in a step (root attributes scope,
 * scope_first, scope_last, written only when a scope is configured;
 * docs/FORMAT.md). */
typedef struct np_h5w_scope {
    char state[16];                 /* "closed", "open", "not reached" */
    char first[NP_FMT_NAME_LEN], last[NP_FMT_NAME_LEN];
} np_h5w_scope;

/* complete=1, close, rename dump.h5.partial -> dump.h5. `scope` may be NULL
 * (no scope configured). */
np_status np_h5w_step_end(np_h5w *w, const np_h5w_scope *scope, np_error *err);
/* Close an open step without completing it (left as .partial). */
void np_h5w_abandon(np_h5w *w);
int np_h5w_in_step(const np_h5w *w);
void np_h5w_totals_get(const np_h5w *w, np_h5w_totals *t);
void np_h5w_free(np_h5w *w);

/* ---- the writer's HDF5 file driver (h5vfd.c) --------------------------- */

/* sec2 with a switch for closing after errors: NP_VFD_DISCARD drops every
 * further write, NP_VFD_REPORT puts a failed write's errno into *report
 * instead of failing (an HDF5 1.10 close that fails leaves a freed file id
 * registered, and the program dies at exit). */
enum { NP_VFD_NORMAL = 0, NP_VFD_DISCARD, NP_VFD_REPORT };
/* The registered driver (an hid_t), or -1 (then the writer uses HDF5's sec2). */
int64_t np_vfd_id(void);
/* The driver's state of an open file (an hid_t), or NULL when it is not ours. */
void *np_vfd_of(int64_t file);
void np_vfd_set_mode(void *vf, int mode, int *report);

/* ---- asynchronous front ------------------------------------------------ */

typedef struct np_aw np_aw;

/* Start a writer thread owning `w` (stolen) with a ring of `queue_bytes`. */
np_status np_aw_new(np_aw **out, np_h5w *w, size_t queue_bytes, np_error *err);
/* Each call enqueues (blocking while the ring is full). Any error the
 * writer met earlier is returned instead (the first one). */
np_status np_aw_step_begin(np_aw *a, const np_h5w_step_info *info, np_error *err);
np_status np_aw_call(np_aw *a, const np_call_rec *rec, np_error *err);
/* Payloads of NP_H5W_DIRECT_MIN bytes and more are queued at
 * NP_H5W_DIRECT_ALIGN-aligned addresses, so the writer can hand them to
 * O_DIRECT without another copy. */
np_status np_aw_entry(np_aw *a, const np_entry_rec *rec, const void *data, size_t nbytes,
                      np_error *err);
np_status np_aw_place(np_aw *a, const np_place_rec *rec, np_error *err);
np_status np_aw_step_end(np_aw *a, const np_h5w_scope *scope, np_error *err);
/* Wait until everything queued is written; returns the writer's error. */
np_status np_aw_drain(np_aw *a, np_error *err);
/* Peak bytes held in the ring. */
size_t np_aw_peak_bytes(const np_aw *a);
/* Drain, stop the thread, give the writer back (caller frees it). */
np_h5w *np_aw_stop(np_aw *a, np_error *err);

#endif
