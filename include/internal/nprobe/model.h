/* nprobe/model.h - models, optimizers, data sets, checkpoints, the fp16 loss
 * scaler and the trainer behind `nprobe train`, built on nprobe/runtime.h.
 *
 * Model of use:
 *
 *     np_train_opts o;  np_train_opts_default(&o, NP_MODEL_GPT);
 *     np_ctx_new(&ctx, &ctx_opts, err);
 *     np_trainer_new(&tr, ctx, &o, err);      builds model, data, optimizer
 *     for (...) np_trainer_step(tr, &res, err);
 *     np_trainer_free(tr); np_ctx_free(ctx);
 *
 * Everything here is deterministic: parameters are initialised from the
 * runtime's counter-based generator keyed on (seed, parameter index), and
 * batch s is a pure function of (seed, s), so a run resumed from a
 * checkpoint at step s continues with the same bits as an uninterrupted one.
 * Nothing here prints or exits. */
#ifndef NPROBE_MODEL_H
#define NPROBE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "nprobe/common.h"
#include "nprobe/dist.h"
#include "nprobe/runtime.h"
#include "nprobe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SHA-256 (np_sha256_*) lives in nprobe/common.h. */

/* ==== data sets ========================================================== */

typedef enum np_data_kind {
    NP_DATA_POINTS = 0, /* 2-D points on three noisy concentric rings, 3 classes (MLP) */
    NP_DATA_IMAGES,     /* 1x16x16 images: bar, column, diagonal, box at random places + noise, 4 classes (CNN) */
    NP_DATA_ARITH,      /* char-level sums "3+4=7;8+5=13;" with digits 0-9 (GPT) */
    NP_DATA_TEXT,       /* char-level windows of a text file (GPT), vocabulary = the file's bytes */
    NP_DATA_KIND_COUNT
} np_data_kind;

/* "points", "images", "arith", "text". */
const char *np_data_kind_name(np_data_kind k);

typedef struct np_dataset np_dataset;

/* One batch in host memory, owned by the batch (np_batch_free).
 * Classification: x float32 (B, in) or (B, 1, 16, 16), y int64 (B).
 * Language: x int64 tokens (B, T), y int64 next tokens (B, T). */
typedef struct np_batch {
    int x_is_int;              /* 1: xi holds tokens, 0: xf holds features */
    int x_ndim;
    int64_t x_shape[4];
    int64_t x_numel;
    float *xf;                 /* x_numel floats or NULL */
    int64_t *xi;               /* x_numel int64 or NULL */
    int y_ndim;
    int64_t y_shape[2];
    int64_t y_numel;
    int64_t *y;                /* y_numel int64 class ids / next tokens */
} np_batch;

/* A generated data set (points, images, arith). `context` is T for arith
 * (ignored otherwise). *out is the caller's (np_data_free). */
np_status np_data_open(np_dataset **out, np_data_kind kind, int context, uint64_t seed,
                       np_error *err);
/* A char-level text file: the vocabulary is the sorted set of the file's
 * bytes; windows of context+1 bytes at offsets drawn from (seed, step). The
 * file needs more than context+1 bytes. NP_ERR_IO / NP_ERR_FORMAT. */
np_status np_data_open_text(np_dataset **out, const char *path, int context, uint64_t seed,
                            np_error *err);
void np_data_free(np_dataset *ds);

np_data_kind np_data_kind_of(const np_dataset *ds);
/* Classes (points, images) or vocabulary size (arith, text). */
int np_data_n_classes(const np_dataset *ds);
/* Bytes of the vocabulary (language data), in token order; NULL otherwise. Borrowed. */
const char *np_data_vocab(const np_dataset *ds);
/* Feature width of a point (2) or image side (16); 0 for language data. */
int np_data_feature_dim(const np_dataset *ds);
/* SHA-256 (hex) of the file of a text data set, "" otherwise. Borrowed. */
const char *np_data_file_sha256(const np_dataset *ds);
/* Random numbers drawn so far by the batch generator (for config_check). */
uint64_t np_data_draws(const np_dataset *ds);

/* Fill `b` with batch number `index` (a pure function of seed and index) of
 * `batch` samples. The first call allocates b's buffers; later calls must
 * use the same batch size. Zero-initialise `b` before the first call. */
np_status np_data_get_batch(np_batch *b, np_dataset *ds, int64_t index, int batch,
                            np_error *err);
void np_batch_free(np_batch *b);
/* SHA-256 (hex) of the batch's bytes: x as stored (float32 or int64,
 * little-endian host order) followed by y (int64). config_check uses it. */
void np_data_batch_sha256(const np_batch *b, char hex[65]);
/* Copy the batch into step-scoped tensors of ctx (x float32 or int64, y int64). */
np_status np_batch_to_tensors(np_tensor **x, np_tensor **y, np_ctx *ctx, const np_batch *b,
                              np_error *err);

/* ==== modules ============================================================ */
/* Each module is registered with the runtime (np_module_new) so its calls
 * are named "Module.{path}.{Class}.forward.{N}"; parameters are named
 * "{path}.{key}" (GPT-2 style). Structs are owned by their model. */

typedef struct np_nn_linear {
    np_module *mod;
    np_tensor *weight;  /* (out, in) */
    np_tensor *bias;    /* (out) or NULL */
} np_nn_linear;

typedef struct np_nn_conv2d {
    np_module *mod;
    np_tensor *weight;  /* (O, C, K, K) */
    np_tensor *bias;    /* (O) */
    int stride, padding;
} np_nn_conv2d;

typedef struct np_nn_layer_norm {
    np_module *mod;
    np_tensor *weight;  /* (C) */
    np_tensor *bias;    /* (C) */
    double eps;
} np_nn_layer_norm;

typedef struct np_nn_embedding {
    np_module *mod;
    np_tensor *weight;  /* (V, C) */
} np_nn_embedding;

np_status np_nn_linear_init(np_nn_linear *l, np_ctx *ctx, const char *path, int in, int out,
                            int bias, np_error *err);
np_status np_nn_conv2d_init(np_nn_conv2d *c, np_ctx *ctx, const char *path, int in_ch,
                            int out_ch, int kernel, int stride, int padding, np_error *err);
np_status np_nn_layer_norm_init(np_nn_layer_norm *ln, np_ctx *ctx, const char *path, int dim,
                                double eps, np_error *err);
np_status np_nn_embedding_init(np_nn_embedding *e, np_ctx *ctx, const char *path, int num,
                               int dim, np_error *err);
/* Forward through the module call API; NULL on error (kept in ctx). */
np_tensor *np_nn_linear_forward(np_ctx *ctx, np_nn_linear *l, np_tensor *x);      /* (..., in) -> (..., out) */
np_tensor *np_nn_conv2d_forward(np_ctx *ctx, np_nn_conv2d *c, np_tensor *x);      /* (N,C,H,W) -> (N,O,OH,OW) */
np_tensor *np_nn_layer_norm_forward(np_ctx *ctx, np_nn_layer_norm *ln, np_tensor *x); /* (..., C) */
np_tensor *np_nn_embedding_forward(np_ctx *ctx, np_nn_embedding *e, np_tensor *idx); /* (...) -> (..., C) */

/* ==== models ============================================================= */

typedef enum np_model_kind {
    NP_MODEL_MLP = 0,
    NP_MODEL_CNN,
    NP_MODEL_GPT,
    NP_MODEL_KIND_COUNT
} np_model_kind;

/* "mlp", "cnn", "gpt"; from_name returns -1 if unknown. */
const char *np_model_kind_name(np_model_kind k);
int np_model_kind_from_name(const char *name);
/* 1 when a training step of model `k` calls the API named by the `len`
 * bytes at `api` ("Functional.layer_norm"). */
int np_model_calls_api(np_model_kind k, const char *api, size_t len);
/* 1 when a fault whose op list is `ops` (np_fault_info.op, comma-separated)
 * acts on model `k`: the model calls one of those ops. */
int np_model_fault_applies(np_model_kind k, const char *ops);

typedef struct np_model_config {
    np_model_kind kind;
    int in_dim;       /* mlp: input features (2) */
    int hidden;       /* mlp: hidden width (64) */
    int image_size;   /* cnn: side of the square 1-channel image (16) */
    int channels;     /* cnn: conv1 output channels (8); conv2 has twice as many */
    int n_classes;    /* mlp (3) / cnn (4) */
    int n_layer;      /* gpt: blocks (2) */
    int n_head;       /* gpt: heads (2) */
    int n_embd;       /* gpt: width C (64) */
    int block_size;   /* gpt: context T (32) */
    int vocab_size;   /* gpt: V (set from the data set) */
    double ln_eps;    /* gpt: layer-norm epsilon (1e-5) */
    int n_expert;     /* gpt: experts in each block's MLP (0: the dense MLP, default);
                       * runtime/model_moe.c, docs/RUNTIME.md "MoE" */
} np_model_config;

/* Defaults (small and fast) for a model kind. */
void np_model_config_default(np_model_config *c, np_model_kind kind);
/* NP_ERR_ARG naming the field when a value does not fit (e.g. n_embd not a
 * multiple of n_head). */
np_status np_model_config_check(const np_model_config *c, np_error *err);

typedef struct np_model np_model;

/* Build a model on ctx: registers its modules and parameters and initialises
 * them from `seed` (GPT: GPT-2 init, normal std 0.02, residual projections
 * 0.02/sqrt(2 n_layer), biases 0, layer norms 1/0; MLP/CNN: PyTorch's default
 * uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))). *out is the caller's; the
 * parameters belong to ctx. */
np_status np_model_new(np_model **out, np_ctx *ctx, const np_model_config *c, uint64_t seed,
                       np_error *err);
void np_model_free(np_model *m);

const np_model_config *np_model_get_config(const np_model *m);
/* The model's parameters in creation (= definition) order. Borrowed. */
np_tensor *const *np_model_params(const np_model *m, int *n);
/* Random numbers the initialisation drew. */
uint64_t np_model_init_draws(const np_model *m);
/* Total parameter count (GPT: wte counted once, it is tied to the lm head). */
int64_t np_model_n_weights(const np_model *m);

/* Forward: x float (B, in) / (B,1,S,S) or int64 tokens (B, T) -> logits
 * (B, classes) or (B, T, V). Step-scoped; NULL on error (kept in ctx). */
np_tensor *np_model_forward(np_model *m, np_tensor *x);
/* Forward plus mean cross-entropy against y -> scalar loss. */
np_tensor *np_model_loss(np_model *m, np_tensor *x, np_tensor *y);

/* GPT only: hidden state after each block, captured by the last forward
 * (borrowed, step-scoped; NULL before a forward or for other models).
 * i in [0, n_layer). Used by the PyTorch agreement test. */
np_tensor *np_model_gpt_block_output(const np_model *m, int i);

/* ==== optimizers ========================================================= */

typedef enum np_optim_kind {
    NP_OPTIM_ADAMW = 0,
    NP_OPTIM_SGD,
    NP_OPTIM_KIND_COUNT
} np_optim_kind;

/* "adamw", "sgd"; from_name returns -1 if unknown. */
const char *np_optim_kind_name(np_optim_kind k);
int np_optim_kind_from_name(const char *name);

typedef struct np_optim_config {
    np_optim_kind kind;
    double lr;            /* peak learning rate */
    double momentum;      /* sgd (0.9) */
    double beta1, beta2;  /* adamw (0.9, 0.95) */
    double eps;           /* adamw (1e-8) */
    double weight_decay;  /* decoupled for adamw, L2 for sgd (PyTorch); only tensors of ndim >= 2 */
} np_optim_config;

void np_optim_config_default(np_optim_config *c, np_optim_kind kind);

typedef struct np_optim np_optim;

/* Optimizer over params[0..n) (borrowed; they must outlive it). PyTorch
 * semantics: SGD buf = m*buf + g (buf = g at the first step), p -= lr*buf;
 * AdamW p *= 1 - lr*wd, m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
 * p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). */
np_status np_optim_new(np_optim **out, const np_optim_config *c, np_tensor *const *params,
                       int n, np_error *err);
void np_optim_free(np_optim *o);
/* One update with learning rate lr from the parameters' grad. */
void np_optim_step(np_optim *o, double lr);
const np_optim_config *np_optim_get_config(const np_optim *o);
/* Updates done so far (AdamW's t). */
int64_t np_optim_steps(const np_optim *o);
void np_optim_set_steps(np_optim *o, int64_t t);
/* State buffers of parameter i, numel floats each, for checkpoints:
 * slot 0 = exp_avg / momentum_buffer, slot 1 = exp_avg_sq (AdamW only);
 * NULL when absent. */
int np_optim_n_slots(const np_optim *o);
const char *np_optim_slot_name(const np_optim *o, int slot);
float *np_optim_slot(np_optim *o, int slot, int i);
/* Put buf (numel floats) in the place of slot `slot` of parameter i and
 * return the one it replaces (np_train_state's exchange). */
float *np_optim_swap_slot(np_optim *o, int slot, int i, float *buf);

/* Statistics of the tensors an update reads and writes, gathered inside
 * its loop (no pass of their own: the monitor's gradient, optimizer-state,
 * weight and update-ratio records, docs/MONITOR.md "Costs"). Over the
 * finite elements: sum, sum of squares (float64 totals of float32 block
 * sums: np_optim_tstats_add), min, max; counts of
 * finite elements, zeros, NaNs and infinities. */
typedef struct np_optim_tstats {
    double sum, sumsq, min, max;
    int64_t finite, zeros, nans, infs;
} np_optim_tstats;
enum {
    NP_OPTIM_ST_GRAD,    /* the gradient the update read */
    NP_OPTIM_ST_SLOT0,   /* exp_avg / momentum_buffer after the update */
    NP_OPTIM_ST_SLOT1,   /* exp_avg_sq after the update (AdamW) */
    NP_OPTIM_ST_WEIGHT,  /* the weight after the update */
    NP_OPTIM_ST_DELTA,   /* W_after - W_before: sumsq only (NaN when a value is not finite) */
    NP_OPTIM_ST_N
};
/* The next np_optim_step fills out[i * NP_OPTIM_ST_N + k] for every
 * parameter i with want[i] != 0 (want NULL: every parameter), with the same
 * updated values as without; the step after it collects nothing again.
 * The chunks' partials are combined in order: the figures do not depend on
 * the thread count. */
void np_optim_collect_stats(np_optim *o, np_optim_tstats *out, const unsigned char *want);
/* Which of them np_optim_collect_stats gathers: bits 1 << NP_OPTIM_ST_*
 * (default every one; the others stay empty and cost nothing). */
void np_optim_collect_mask(np_optim *o, unsigned mask);
/* Add the statistics of x[0, n) to t: float32 partial sums over blocks of
 * 512 elements, each added to t's float64 sums (a block with a value not
 * finite, or one float32 cannot hold, taken in double element by element);
 * min, max and the counts exact. The monitor's one-pass kernel. */
void np_optim_tstats_add(np_optim_tstats *t, const float *x, int64_t n);
/* The same over float64 values, element by element (a collective of a
 * float64 scalar: the monitor's cc_distribution). */
void np_optim_tstats_add_f64(np_optim_tstats *t, const double *x, int64_t n);

/* Global L2 norm of the gradients, accumulated in double. */
double np_grad_norm(np_tensor *const *params, int n);
/* Scale every gradient by max_norm / (norm + 1e-6) when that is below 1
 * (PyTorch clip_grad_norm_); returns the norm before clipping. */
double np_clip_grad_norm(np_tensor *const *params, int n, double max_norm);

/* Warmup + cosine: lr * (s+1)/warmup for s < warmup, then
 * min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2 with
 * p = (s - warmup) / max(1, total - warmup) clamped to [0, 1]. */
double np_lr_schedule(int64_t step, double lr, double min_lr, int64_t warmup, int64_t total);

/* ==== dynamic loss scaler (fp16) ========================================= */

typedef struct np_scaler {
    int enabled;          /* 0: scale stays 1, nothing is checked */
    double scale;         /* current loss scale (65536) */
    double growth_factor; /* 2 */
    double backoff_factor;/* 0.5 */
    int growth_interval;  /* good steps before growing (2000, like PyTorch) */
    int good_steps;       /* consecutive finite steps since the last change */
    int64_t skipped;      /* steps skipped so far */
} np_scaler;

/* PyTorch GradScaler defaults; `enabled` 0 makes every call a no-op. */
void np_scaler_init(np_scaler *s, int enabled);
/* Multiply every gradient by 1/scale (as float32) and return 1 if any
 * gradient is inf or NaN (0 when disabled). */
int np_scaler_unscale(np_scaler *s, np_tensor *const *params, int n);
/* After a step: on overflow halve the scale, reset the good-step count and
 * count a skipped step; otherwise grow by growth_factor after
 * growth_interval good steps. */
void np_scaler_update(np_scaler *s, int found_inf);

/* ==== the trainer ======================================================== */

typedef struct np_train_opts {
    np_model_config model;     /* vocab_size is taken from the data for the GPT */
    np_optim_config optim;
    int batch;                 /* samples per step (mlp 64, cnn 32, gpt 8) */
    int64_t steps;             /* total steps, for the schedule */
    int64_t warmup;            /* warmup steps (default steps/10) */
    double min_lr_frac;        /* cosine floor as a fraction of lr (0.1) */
    double grad_clip;          /* max global norm; 0 = off (gpt 1.0) */
    uint64_t seed;
    const char *data_path;     /* GPT: text file instead of the generated language; borrowed */
    int scaler_growth_interval;/* fp16 loss scaler growth interval (2000) */
    double scaler_init;        /* initial loss scale (65536) */
    np_dist dist;              /* data parallelism (nprobe/dist.h); zero = one process.
                                * batch is the global batch, a multiple of world_size */
    int micro_batches;         /* gradient accumulation (0 or 1: none): this rank's rows of
                                * the batch in M equal micro-batches, each forward and
                                * backward in turn (its backward seeded 1/M), the
                                * parameters' gradients summed over them before the update */
    int load_other_precision;  /* np_trainer_load accepts a checkpoint written at another
                                * autocast precision (nprobe triage's reruns; the weights are
                                * float32 either way) */
} np_train_opts;

/* Defaults for a model kind (AdamW; lr: mlp and cnn 1e-2, gpt 3e-3). */
void np_train_opts_default(np_train_opts *o, np_model_kind kind);

typedef struct np_trainer np_trainer;

typedef struct np_step_result {
    int64_t step;        /* the step just done */
    double loss;         /* mean loss of the batch (unscaled) */
    double lr;           /* learning rate used */
    double grad_norm;    /* global grad norm before clipping (0 on a skipped step) */
    int skipped;         /* 1 if the loss scaler skipped the update */
    double loss_scale;   /* loss scale used for this step (1 without scaler) */
    int64_t items;       /* samples (mlp/cnn) or tokens (gpt) in the batch */
} np_step_result;

/* Build data, model and optimizer on ctx (autocast precision, device and
 * fault come from ctx; fp16 enables the loss scaler). *out is the caller's. */
np_status np_trainer_new(np_trainer **out, np_ctx *ctx, const np_train_opts *o, np_error *err);
void np_trainer_free(np_trainer *tr);

/* One training step: step_begin, batch, forward, backward (seeded with the
 * loss scale), param-grad events, unscale/check, clip, update (or skip),
 * step_end. A non-finite loss is reported in `res`, not as an error. */
np_status np_trainer_step(np_trainer *tr, np_step_result *res, np_error *err);

np_model *np_trainer_model(const np_trainer *tr);
np_dataset *np_trainer_data(const np_trainer *tr);
np_optim *np_trainer_optim(const np_trainer *tr);
np_scaler *np_trainer_scaler(np_trainer *tr);
const np_train_opts *np_trainer_opts(const np_trainer *tr);
/* Next step to run (0 for a fresh run, the saved step after a load). */
int64_t np_trainer_next_step(const np_trainer *tr);

/* Watch points of a step, for a monitor beside the runtime's hook
 * (docs/MONITOR.md): parameter gradients before the data-parallel
 * reduction and the optimizer's update are not hook events. */
typedef enum np_train_point {
    NP_TRAIN_BACKWARD_END = 0, /* after backward, before the reduction: this rank's own
                                  gradients (scaled), res->loss this rank's loss */
    NP_TRAIN_UPDATE_BEGIN,     /* reduced, unscaled and clipped gradients, before the
                                  optimizer step (not on a step the loss scaler skips) */
    NP_TRAIN_UPDATE_END,       /* after the optimizer step or skip; res complete */
    NP_TRAIN_POINT_COUNT
} np_train_point;
/* Called inside np_trainer_step, before np_ctx_step_end; return 0. */
typedef int (*np_train_watch_fn)(np_train_point pt, np_trainer *tr, const np_step_result *res,
                                 void *user);
/* Set (NULL fn: clear) the trainer's watcher; `user` is borrowed. */
void np_trainer_set_watch(np_trainer *tr, np_train_watch_fn fn, void *user);
/* The collectives that are no hook events (tensor parallel's all-reduces
 * and, under --sp, reduce-scatters and all-gathers inside the forward and
 * the backward: a TP run keeps the calls of one process, docs/RUNTIME.md):
 * fn is told, on the calling thread, what this rank sends (received 0,
 * before the collective) and then what it got (received 1); `op`
 * "all_reduce", "reduce_scatter" or "all_gather_into_tensor", backward 1
 * inside the backward. For the monitor's
 * cc_distribution (docs/MONITOR.md "Collectives"). NULL fn: none (the
 * default: a NULL test per collective). A run without --tp has none (its
 * collectives are Distributed.* hook events). */
typedef void (*np_train_coll_fn)(const char *op, int backward, int received, const void *x,
                                 np_dtype dtype, int64_t n, void *user); /* NP_FLOAT32 or NP_FLOAT64 */
void np_trainer_set_coll_watch(np_trainer *tr, np_train_coll_fn fn, void *user);

/* ==== checkpoints (HDF5, docs/CONTRACTS.md "Checkpoint file") ============ */

/* Write parameters, optimizer and scaler state, the next step, seed and
 * model configuration to `path` (replaced atomically via a temp file). */
np_status np_trainer_save(const np_trainer *tr, const char *path, np_error *err);
/* A copy of the trainer's state (weights, optimizer state and counter,
 * loss scaler, next step), taken at a step's start and written later as a
 * checkpoint of that step (np_trainer_save's file): the monitor's ring for
 * its checkpoint on anomaly (docs/MONITOR.md "Dump on anomaly"). Each copy
 * holds the weights and the optimizer state: that much memory. */
typedef struct np_train_state np_train_state;
np_status np_train_state_new(np_train_state **out, const np_trainer *tr, np_error *err);
void np_train_state_take(np_train_state *s, np_trainer *tr);
/* The step it was taken at (-1: none yet). */
int64_t np_train_state_step(const np_train_state *s);
np_status np_train_state_save(np_train_state *s, np_trainer *tr, const char *path, np_error *err);
void np_train_state_free(np_train_state *s);
/* Restore what np_trainer_save wrote into a trainer built with the same
 * model configuration (NP_ERR_FORMAT naming the attribute or parameter that
 * does not fit). */
np_status np_trainer_load(np_trainer *tr, const char *path, np_error *err);
/* Read the model kind, configuration, step and seed of a checkpoint, to
 * build a matching trainer before np_trainer_load. The settings must agree
 * with the parameter datasets the file holds (their number, names, shapes
 * and stored bytes): NP_ERR_FORMAT naming the attribute (or dataset)
 * otherwise, before anything is allocated for the model. */
np_status np_checkpoint_read_config(np_model_config *c, int64_t *step, uint64_t *seed,
                                    const char *path, np_error *err);
/* The same check for a reader of any checkpoint (config_check pack
 * --weights): a file that states model settings (any of the root
 * attributes np_trainer_save writes for them) gets np_checkpoint_read_config's
 * checks; a partial checkpoint without settings passes. */
np_status np_checkpoint_check_settings(const char *path, np_error *err);

#ifdef __cplusplus
}
#endif
#endif
