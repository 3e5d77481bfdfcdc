/* nprobe/probe.h - the probe: reads a config.json, selects tensors at the
 * runtime's hook points (or from any C program through the embedding API),
 * computes their statistics and writes them, with or without the payloads,
 * into one HDF5 file per step and rank (docs/FORMAT.md, nprobe/format.h).
 *
 * Two ways in:
 *
 *   1. On the runtime's hook:
 *        np_probe_open(&p, "config.json", &meta, &err);
 *        np_ctx_set_hook(ctx, np_probe_on_event, p);
 *        ... train ...
 *        np_probe_close(p, &summary, &err); np_probe_free(p);
 *
 *   2. Embedded in a training loop of one's own (samples/embed/):
 *        np_probe_step_begin(p, step, &err);
 *        np_probe_dump(p, "Functional.linear.0.forward", NP_ROLE_INPUT, "0", &x, &err);
 *        np_probe_step_end(p, &err);
 *
 * The probe never prints and never exits. A dump error (disk full, file size
 * limit, unwritable file) stops the dump, is kept in the summary, and - only
 * when the config says "on_error": "stop_training" - makes np_probe_on_event
 * return non-zero. The probe ignores SIGXFSZ (if it was at its default) so a
 * file size limit turns into an error instead of killing the program.
 *
 * Thread safety: every entry point that takes an np_probe locks the probe's
 * mutex for the call, so one probe may be fed from several threads (a
 * framework's autograd threads, say); calls are serialised, and the rows of
 * one call must still come from one thread in one go (np_probe_call_begin
 * then its leaves) for the call to hold together. With "async_dump" the
 * probe owns a writer thread of its own. */
#ifndef NPROBE_PROBE_H
#define NPROBE_PROBE_H

#include <stdint.h>

#include "nprobe/common.h"
#include "nprobe/format.h"
#include "nprobe/hook.h"
#include "nprobe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== the config ========================================================= */

typedef enum np_probe_task {
    NP_TASK_STATISTICS = 0,
    NP_TASK_TENSOR,
    NP_TASK_MD5,
    NP_TASK_OVERFLOW_CHECK,
    NP_TASK_COUNT
} np_probe_task;

typedef enum np_probe_level {
    NP_LEVEL_L0 = 0, /* module calls and parameter gradients */
    NP_LEVEL_L1,     /* API calls */
    NP_LEVEL_MIX,    /* both */
    NP_LEVEL_COUNT
} np_probe_level;

/* "statistics", "tensor", "md5", "overflow_check". */
const char *np_probe_task_name(np_probe_task t);
/* "L0", "L1", "mix". */
const char *np_probe_level_name(np_probe_level l);

typedef struct np_probe_config np_probe_config;

/* Read and validate a config file: JSON syntax (line and column), unknown
 * keys ("did you mean"), types, values (with the allowed list), step ranges,
 * scope names, and that dump_path can be created and written (checked
 * without writing anything). *out is the caller's (np_probe_config_free).
 * NP_ERR_JSON / NP_ERR_CONFIG / NP_ERR_IO with file, key and message. */
np_status np_probe_config_load(np_probe_config **out, const char *path, np_error *err);
/* Same from a JSON string; `source` names it in messages (NULL: "<string>").
 * A relative dump_path is taken relative to the current directory. */
np_status np_probe_config_parse(np_probe_config **out, const char *json_text,
                                const char *source, np_error *err);
void np_probe_config_free(np_probe_config *cfg);

/* Accessors (borrowed strings, valid while cfg lives). */
np_probe_task np_probe_config_task(const np_probe_config *cfg);
np_probe_level np_probe_config_level(const np_probe_config *cfg);
const char *np_probe_config_dump_path(const np_probe_config *cfg);

/* ==== the probe ========================================================== */

typedef struct np_probe np_probe;

/* What the host says about the run; written as root attributes. */
typedef struct np_probe_meta {
    const char *framework;  /* NULL: "nprobe-runtime" */
    const char *device;     /* NULL: "cpu" */
    const char *precision;  /* NULL: "fp32" */
    int rank;               /* this process's rank (files go to rank{R}/) */
    int world_size;         /* <= 0 is taken as 1 */
} np_probe_meta;

/* Open a probe from a config file / a JSON string / a loaded config (copied;
 * the caller keeps `cfg`). `meta` NULL means the defaults above with rank 0.
 * Nothing is written before the first selected step begins. */
np_status np_probe_open(np_probe **out, const char *config_path,
                        const np_probe_meta *meta, np_error *err);
np_status np_probe_open_json(np_probe **out, const char *json_text,
                             const np_probe_meta *meta, np_error *err);
np_status np_probe_open_config(np_probe **out, const np_probe_config *cfg,
                               const np_probe_meta *meta, np_error *err);

/* The hook: pass as np_hook_fn with the probe as `user`. Returns 0 to go on,
 * non-zero only after a dump error with "on_error": "stop_training". */
int np_probe_on_event(const np_hook_event *ev, void *probe);

/* ---- embedding API (programs without the nprobe runtime) ---------------- */

/* The factor the gradients of the steps begun from now on carry (the loss
 * scale of a mixed-precision loss scaler; 1, the default, without one):
 * written as the root attribute loss_scale, by which nprobe compare divides
 * the gradient rows. Values <= 0 or not finite mean 1. The runtime's hook
 * passes it with NP_EV_STEP_BEGIN. */
void np_probe_set_loss_scale(np_probe *p, double scale);
/* The factor an averaging data-parallel reduction leaves on each rank's
 * gradients of the steps begun from now on (its divisor: FSDP2's gradient
 * divide factor, DDP's world size; 1, the default, without one): written as
 * the root attribute dp_grad_scale when not 1, by which nprobe compare
 * divides the gradient rows too. Kept apart from the loss scale: only that
 * one makes a one-sided non-finite gradient a skipped step. Values <= 0 or
 * not finite mean 1. (ABI 5) */
void np_probe_set_dp_grad_scale(np_probe *p, double factor);
/* Start step `step` (from 0). An open step is ended first. */
np_status np_probe_step_begin(np_probe *p, int step, np_error *err);
/* Record tensor `t` as leaf "{call}.{role}.{key}" of call `call`
 * ("Functional.linear.0.forward", "Module.fc1.Linear.forward.0", ...;
 * names starting with "Module." are module calls, the others API calls;
 * ".backward" in the name or role parameters_grad means the backward pass).
 * `key` is the index ("0") or the parameter/keyword name. Consecutive dumps
 * with the same call name form one call. `t` is borrowed for the call.
 * The step must have begun. Selection follows the config like hook events.
 * A leaf name already dumped in this step, or longer than the /entries table
 * holds (255 bytes), is refused with NP_ERR_ARG naming the tensor; the rest
 * of the step is unaffected. */
np_status np_probe_dump(np_probe *p, const char *call, np_role role, const char *key,
                        const np_tensor *t, np_error *err);
/* Record a scalar argument as leaf "{call}.kwargs.{key}". */
np_status np_probe_dump_scalar(np_probe *p, const char *call, const char *key,
                               double value, np_error *err);
/* End the step: its file is completed and renamed into place. */
np_status np_probe_step_end(np_probe *p, np_error *err);

/* libnprobe (the shared library): its version ("0.1.0") and ABI level.
 * NP_LIB_ABI grows when functions or struct fields are added; a loader built
 * against level N works with any library of level >= N and the same soname. */
#define NP_LIB_ABI 6
const char *np_lib_version(void);
int np_lib_abi(void);

/* ---- embedding a foreign framework (PyTorch, ...): views, statistics ----- */

/* A tensor as a framework holds it, read in place. `dtype` is the logical
 * dtype and the element storage is the framework's own: 2 bytes for
 * bfloat16/float16 (their bit patterns), 4 for float32/int32, 8 for
 * float64/int64, 1 for bool (0/1). Element (i0, i1, ...) is at byte
 *   data + byte_offset + (i0*strides[0] + i1*strides[1] + ...) * element size
 * with strides in elements (NULL: contiguous row-major). A contiguous
 * float32/float64/int/bool view is read where it lies (no copy); a
 * bfloat16/float16 or strided view is converted/gathered into a buffer the
 * probe keeps and reuses (the dump stores bf16/fp16 as float32, FORMAT.md).
 * Everything is borrowed for the call. `size` must be sizeof(np_tensor_view)
 * (the ABI guard: fields are only ever added at the end). */
typedef struct np_tensor_view {
    size_t size;              /* sizeof(np_tensor_view) */
    np_dtype dtype;           /* logical dtype */
    int ndim;                 /* 0..NP_MAX_DIMS */
    const int64_t *shape;     /* ndim sizes (may be NULL when ndim is 0) */
    const int64_t *strides;   /* ndim strides in elements, or NULL: contiguous */
    const void *data;         /* base pointer of the storage */
    int64_t byte_offset;      /* added to data */
    int requires_grad;
    /* The framework's version counter of the data (PyTorch's _version), or
     * -1. With a version >= 0 the probe reuses the statistics (and crc32)
     * of one of the last NP_VIEW_REUSE views that had the same storage,
     * layout, dtype and version (an op's output dumped again as the next
     * op's input), for the statistics and md5 tasks. The caller promises
     * to keep the tensors of its last NP_VIEW_REUSE np_probe_dump_view calls
     * alive (their memory cannot be another tensor's then). */
    int64_t version;
} np_tensor_view;
#define NP_VIEW_REUSE 16

/* Bytes per element of a view's storage (2 for bfloat16/float16). */
size_t np_view_element_size(np_dtype dt);

/* np_probe_dump for a view. */
np_status np_probe_dump_view(np_probe *p, const char *call, np_role role, const char *key,
                             const np_tensor_view *v, np_error *err);

/* A leaf whose statistics the caller computed (a tensor on a GPU/NPU reduced
 * on its device: only these scalars cross). No payload and no crc32 are
 * stored (has_data 0, crc32 0), whatever the task. `size` must be
 * sizeof(np_leaf_stats). */
typedef struct np_leaf_stats {
    size_t size;              /* sizeof(np_leaf_stats) */
    np_dtype dtype;
    int ndim;
    const int64_t *shape;
    np_stats stats;           /* over finite elements; NaN when none */
    int requires_grad;
} np_leaf_stats;

np_status np_probe_dump_stats(np_probe *p, const char *call, np_role role, const char *key,
                              const np_leaf_stats *s, np_error *err);

/* Start call `call` with its enclosing module call `parent` and `callsite`
 * ("train.py:42 forward"); both may be NULL. The leaves dumped next with the
 * same call name belong to it. (Without this call, np_probe_dump starts a
 * call on a new name with no parent and no callsite.) */
np_status np_probe_call_begin(np_probe *p, const char *call, const char *parent,
                              const char *callsite, np_error *err);

/* A whole call in one go (a binding's per-call path: one crossing instead
 * of np_probe_call_begin and one np_probe_dump_view / np_probe_dump_scalar
 * per leaf; the rows are the same). Leaf i is a tensor view (role input,
 * output, parameters or parameters_grad: dtype, ndim, shape, strides in
 * elements, data, version and requires_grad as in np_tensor_view, byte
 * offset 0) or, with role NP_ROLE_KWARGS, the scalar `value`. Its key is
 * the decimal `index` when `name_off` < 0, else the NUL-terminated string
 * at names + name_off. The layout is fixed (fields are never reordered):
 * a binding may fill an array of these from packed bytes. */
typedef struct np_probe_leaf {
    int32_t role;            /* np_role */
    int32_t index;           /* the key when name_off < 0 */
    int32_t name_off;        /* offset of the key in `names`, or -1 */
    int32_t dtype;           /* np_dtype (tensor leaves) */
    int32_t ndim;            /* 0..NP_MAX_DIMS */
    int32_t requires_grad;
    const void *data;
    int64_t version;         /* np_tensor_view.version: >= 0 lets statistics be reused */
    double value;            /* NP_ROLE_KWARGS: the scalar */
    int64_t shape[NP_MAX_DIMS];
    int64_t strides[NP_MAX_DIMS];
} np_probe_leaf;

/* np_probe_call_begin(call, parent, callsite), then leaves[0..n) in order,
 * as the single calls would record them (each leaf refused on its own: the
 * others still go in). Returns the first leaf's error; *refused (may be
 * NULL) receives the number of leaves refused. */
np_status np_probe_dump_call(np_probe *p, const char *call, const char *parent,
                             const char *callsite, const np_probe_leaf *leaves, int n,
                             const char *names, int *refused, np_error *err);

/* Change what the host says about the run (framework, device, precision,
 * rank, world size: np_probe_meta, copied) for the steps begun from now on:
 * a framework learns its rank (torch.distributed) and its precision (an
 * autocast region) after the probe is opened. The config's rank selection
 * is applied to the new rank. */
np_status np_probe_set_meta(np_probe *p, const np_probe_meta *meta, np_error *err);

/* ---- parallel layouts: the device mesh and placements (format version 2) -- */

/* The device mesh this rank is part of, for the step files begun from now
 * on (root attributes mesh_dims, mesh_shape, mesh_coords; docs/FORMAT.md):
 * `ndim` dimensions (1..4; 0 removes the mesh) named dim_names[k] (letters,
 * digits, '_', at most 15 bytes, distinct: "dp", "tp", "pp"), of sizes
 * shape[k], this rank at coords[k] (0 <= coords[k] < shape[k]). The sizes
 * must multiply to the world size (np_probe_meta / np_probe_set_meta: set
 * it first). A step file with a mesh is written as format version 2, one
 * without as version 1. NP_ERR_ARG naming the field when refused (the
 * mesh then stays as it was). */
np_status np_probe_set_mesh(np_probe *p, int ndim, const char *const *dim_names,
                            const int64_t *shape, const int64_t *coords, np_error *err);

/* Record how leaf "{call}.{role}.{key}" - the one np_probe_dump*(p, call,
 * role, key, ...) wrote in the current step, called after it - lies in its
 * logical tensor: a /placements row (nprobe/format.h np_place_rec) with one
 * placement per mesh dimension ("Shard(d)", "Replicate()", "Partial(sum)",
 * ","-separated in the mesh's order), the logical tensor's global_ndim and
 * global_shape, this shard's offset, the pipeline stage and micro-batch
 * (-1: none). rec->name is ignored (the probe fills it). The step must have
 * a mesh (np_probe_set_mesh before it began). The row is checked against
 * the mesh and the leaf as readers check it; a bad one is refused with
 * NP_ERR_ARG naming the leaf and the field, the step goes on. A leaf that
 * was not selected (level, scope, list, data_mode, step or rank) is
 * accepted and nothing is written (so is one whose call overflow_check did
 * not keep); a leaf the config selects but that was never dumped in this step, or
 * placed twice, is refused. The rows go to the file when the step ends (a
 * .partial step file has none). */
np_status np_probe_place(np_probe *p, const char *call, np_role role, const char *key,
                         const np_place_rec *rec, np_error *err);

/* What step `step` would select, known before it begins: bit 1 API calls,
 * bit 2 module calls (and parameter gradients), bit 4 callsites wanted
 * ("stack"); 0 when the step is not dumped (step or rank not selected, the
 * dump stopped after an error or overflow_nums). A host skips the work of
 * capturing what would be thrown away. */
#define NP_SELECT_API 1
#define NP_SELECT_MODULE 2
#define NP_SELECT_CALLSITE 4
int np_probe_selects(np_probe *p, int step);
/* The config's task (a host decides whether to copy payloads to the host). */
np_probe_task np_probe_task_of(np_probe *p);

/* ---- end ----------------------------------------------------------------- */

typedef struct np_probe_summary {
    int64_t steps;          /* step files completed */
    int64_t ranks;          /* ranks that wrote at least one file (0 or 1 per process) */
    int64_t calls;          /* rows written to /calls */
    int64_t tensors;        /* rows written to /entries */
    int64_t data_bytes;     /* payload bytes written under /data */
    int64_t bytes;          /* size of the dump files written */
    int64_t files;          /* dump files written (= steps) */
    int64_t overflows;      /* overflow_check: calls found holding NaN/Inf */
    int has_overflow;       /* 1 when overflow_* below are set */
    char overflow_call[NP_FMT_NAME_LEN];   /* first call holding NaN/Inf */
    char overflow_module[NP_FMT_NAME_LEN]; /* its module ("" at top level) */
    int overflow_step, overflow_rank;
    /* with a configured scope: step files written, and of them those where
     * the first call never arrived (nothing dumped) or the last never came
     * after it (dumped to the end of the step); the first such step of each */
    int64_t scope_steps, scope_unreached, scope_open;
    int scope_unreached_step, scope_open_step;
    char scope_first[NP_FMT_NAME_LEN], scope_last[NP_FMT_NAME_LEN];
    np_error error;         /* the dump error, status NP_OK if none */
} np_probe_summary;

/* Finish the step in progress, stop the writer thread, fill `out` (may be
 * NULL). Returns the dump error if there was one (also in out->error). A
 * closed probe ignores further events. */
np_status np_probe_close(np_probe *p, np_probe_summary *out, np_error *err);
/* Leave the step in progress incomplete, as a killed run leaves it: its
 * rows so far are flushed into dump.h5.partial (complete = 0), which is
 * neither completed nor renamed; a later np_probe_close finishes nothing.
 * For a host whose step was interrupted (an exception, Ctrl-C, exit in
 * the middle of a step). NULL, or no step in progress, is a no-op. */
void np_probe_abandon(np_probe *p);
/* Close if needed and free. NULL is a no-op. */
void np_probe_free(np_probe *p);

/* ==== statistics (exposed for tests and readers) ========================= */

typedef np_stats np_probe_stats;   /* nprobe/format.h */

/* One pass over `numel` elements of storage of logical dtype `dt`
 * (`data` holds numel * np_dtype_storage_size(dt) bytes). Deterministic:
 * large tensors are cut into fixed chunks whose partial results are
 * combined in order, whatever the thread count. When `crc` is not NULL it
 * receives zlib's crc32 of the bytes. */
void np_probe_tensor_stats(np_probe_stats *out, uint32_t *crc, np_dtype dt,
                           const void *data, int64_t numel);
/* The same statistics of `numel` float32 values (the same bits as
 * np_probe_tensor_stats with NP_FLOAT32) and, in the same pass (each chunk
 * read again while still in cache), when `zeros` is not NULL the count of
 * elements equal to 0 (+0 and -0), and when `before` is not NULL (numel
 * float32 values, e.g. the weights before an optimizer step) the L2 norm
 * of the finite differences data - before, each taken in double, into
 * `diff_norm` (NaN when `before` is NULL; `diff_norm` may be NULL). The
 * package's monitor: a gradient's statistics and zeros in one call, a
 * weight's and its update's norm in another (docs/MONITOR.md). */
void np_probe_tensor_stats_f32(np_probe_stats *out, int64_t *zeros, double *diff_norm,
                               const float *data, const float *before, int64_t numel);
/* np_probe_tensor_stats_f32 over `count` tensors in one call (the package's
 * monitor: one call an optimizer hook, not one a parameter). Tensor k is
 * data[k], numel[k] float32 values; its statistics go to out[k], its zero
 * count to zeros[k] (zeros may be NULL: not counted) and, when `before` and
 * before[k] are not NULL, its difference norm to diff_norm[k] (NaN
 * otherwise; diff_norm may be NULL), the same bits as one
 * np_probe_tensor_stats_f32 call each. When copy_src and copy_src[k] are
 * not NULL, copy_src[k] (numel[k] floats) is copied into copy_dst[k] right
 * after tensor k's statistics, with stores that bypass the cache where the
 * CPU allows (the weights' snapshot for the update ratio, taken beside the
 * gradients' statistics). */
void np_probe_tensor_stats_f32_many(np_probe_stats *out, int64_t *zeros, double *diff_norm,
                                    const float *const *data, const float *const *before,
                                    const int64_t *numel, int64_t count,
                                    const float *const *copy_src, float *const *copy_dst);
/* The statistics and zeros of `count` float32 tensors as
 * np_probe_tensor_stats_f32_many gives them (the same bits), and, where
 * m[k] and v[k] are not NULL (numel[k] floats each: Adam's exp_avg and
 * exp_avg_sq, or max_exp_avg_sq under amsgrad, after the step), the norm of
 * the update derived from them into upd_norm[k] (NaN otherwise): the L2
 * norm over the finite elements of u = A * m / (sqrt(v) * B + E) + K * w,
 * each taken in float32 and squared in double, with (A, K, B, E) =
 * coef[4k .. 4k+3] (docs/MONITOR.md "The update without a snapshot": A =
 * lr / (1 - beta1^t) / c, K = (1 - c) / c, B = 1 / sqrt(1 - beta2^t), E =
 * eps, c = 1 - lr * weight_decay under AdamW's decoupled decay, else 1).
 * Each chunk of w is read again for it right after its statistics, from
 * cache. When mv_out is not NULL, m[k]'s and v[k]'s statistics (and zero
 * counts into mv_zeros[2k], [2k+1] when it is not NULL) go to mv_out[2k]
 * and mv_out[2k+1], taken just before w[k]'s (m and v then read again for
 * the update from cache; they must not be NULL then). */
void np_probe_tensor_stats_f32_adam(np_probe_stats *out, int64_t *zeros, double *upd_norm,
                                    const float *const *data, const float *const *m,
                                    const float *const *v, const double *coef,
                                    const int64_t *numel, int64_t count, np_probe_stats *mv_out,
                                    int64_t *mv_zeros);

/* ==== the monitor file ===================================================
 *
 * The monitor task's file (docs/MONITOR.md "File format"): one per rank,
 * HDF5, append-only, SWMR (readable while it is written and after a kill
 * -9 up to the last finished step). The runtime's monitor writes through
 * it, and so does the Python package's (nprobe.torch.TrainerMon): one
 * writer of the format. */

#define NP_MONITOR_FILE_NAME_LEN 192   /* a key's name, NUL-terminated */
#define NP_MONITOR_FILE_METRIC_LEN 32  /* a key's metric, NUL-terminated */

/* /records: one row per statistic set (80 bytes, no padding) */
typedef struct np_monitor_record {
    int64_t step;
    int32_t seq;     /* call order inside the step (the same call has the same seq on every rank) */
    int32_t key;     /* row of /keys */
    int64_t numel;
    double norm, min, max, mean;   /* over the finite elements; NaN when none is */
    int64_t zeros, nans, infs;
} np_monitor_record;

/* /keys: (name, metric), row i is key i (224 bytes) */
typedef struct np_monitor_key {
    char name[NP_MONITOR_FILE_NAME_LEN];
    char metric[NP_MONITOR_FILE_METRIC_LEN];
} np_monitor_key;

typedef struct np_monitor_file np_monitor_file;

/* Create `path` (never an existing file: NP_ERR_IO naming it) with the
 * format's attributes (format, version, rank, world_size, step_interval;
 * pp_stages and pp_stage when pp_stages > 1: a pipeline stage's file) and
 * its three empty tables, and start SWMR writing (no attribute can be
 * added after that). */
np_status np_monitor_file_create(np_monitor_file **out, const char *path, int rank,
                                 int world_size, int step_interval, int pp_stages, int pp_stage,
                                 np_error *err);

/* One finished step: its n_records records and the n_keys keys it added
 * appended and flushed, then its /steps row (step, records so far, keys so
 * far) appended and flushed: a reader that trusts the last /steps row
 * never sees a record or key it does not cover. After a failure the file
 * takes no more steps (each later call returns the first error). */
np_status np_monitor_file_append(np_monitor_file *f, int64_t step,
                                 const np_monitor_record *records, int64_t n_records,
                                 const np_monitor_key *keys, int64_t n_keys, np_error *err);

/* Rows written so far: records, keys, steps (any may be NULL). */
void np_monitor_file_counts(const np_monitor_file *f, int64_t *records, int64_t *keys,
                            int64_t *steps);

/* Close and free f (NULL: nothing); the first error of its life, if any. */
np_status np_monitor_file_close(np_monitor_file *f, np_error *err);

#ifdef __cplusplus
}
#endif
#endif
