/* nprobe/runtime.h - the CPU training runtime: context, devices, autocast,
 * tensors (persistent parameters and step-scoped activations), API-level ops
 * with forward and backward kernels, tape autograd, module calls, the hook,
 * and the fault catalog of the emulated accelerator.
 *
 * Model of use (one training step):
 *
 *     np_ctx_step_begin(ctx);                       NP_EV_STEP_BEGIN
 *     np_module_begin(ctx, fc1);                    module call opens
 *     h = np_linear(ctx, x, w1, b1);                "Functional.linear.0.forward"
 *     np_module_end(ctx, fc1, &x, 1, &h, 1);        "Module.fc1.Linear.forward.0"
 *     ...
 *     loss = np_cross_entropy(ctx, logits, y, -100);
 *     np_backward(ctx, loss);                       API/module backward events
 *     np_ctx_emit_param_grads(ctx);                 NP_EV_PARAM_GRAD per module
 *     ... optimizer update on np_tensor.data / .grad ...
 *     np_ctx_step_end(ctx);                         NP_EV_STEP_END, arena reset
 *
 * Ops return a new tensor, or NULL on error. The first error is kept in the
 * context (np_ctx_status / np_ctx_error); an op given a NULL input returns
 * NULL without a new error, so a forward pass can be written straight and
 * checked once at the end.
 *
 * Tensors: np_tensor (tensor.h) is contiguous and row-major. Persistent
 * tensors (np_tensor_new, np_tensor_new_param) live until np_tensor_free or
 * np_ctx_free. Every tensor an op returns, and np_tensor_tmp, lives in the
 * step arena and is invalid after np_ctx_step_end (or np_ctx_reset_arena):
 * copy what must survive. Activation gradients are allocated in the arena
 * during backward; parameter gradients are persistent float32 buffers that
 * np_backward accumulates into (zero them with np_ctx_zero_grads).
 *
 * Numerics: device "cpu" is the float32 reference (GEMMs through OpenBLAS in
 * shape-fixed panels, other kernels OpenMP-parallel over outputs, so bits do
 * not depend on the OpenMP thread count). The first np_ctx_new sets OpenBLAS
 * to one thread and, when OPENBLAS_CORETYPE is unset and OpenBLAS fell back
 * to its generic "Prescott" kernels on an AVX2/AVX-512 CPU it does not know,
 * re-selects Haswell/SkylakeX kernels. Device "npu-sim" uses its own blocked GEMM (different
 * accumulation order) and honours the fault selected in the options.
 * Autocast (precision bf16/fp16) follows torch.autocast; see docs/RUNTIME.md
 * for the table of which op runs in which dtype.
 *
 * Thread safety: one context is used by one thread at a time (the kernels
 * themselves use OpenMP). */
#ifndef NPROBE_RUNTIME_H
#define NPROBE_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "nprobe/common.h"
#include "nprobe/hook.h"
#include "nprobe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== devices ============================================================ */

typedef enum np_device {
    NP_DEVICE_CPU = 0,  /* float32 reference */
    NP_DEVICE_NPU_SIM,  /* emulated accelerator: blocked GEMM, faults */
    NP_DEVICE_COUNT
} np_device;

/* "cpu", "npu-sim". */
const char *np_device_name(np_device d);
/* Parse a device name; -1 if unknown. */
int np_device_from_name(const char *name);

/* ==== fault catalog (active on npu-sim only) ============================= */

typedef enum np_fault {
    NP_FAULT_NONE = 0,
    NP_FAULT_LAYERNORM_EPS,         /* layer_norm fwd: eps multiplied by 1e5 */
    NP_FAULT_SOFTMAX_FP16_NOMAX,    /* softmax and sdpa's softmax: no max subtraction, exp/sum in fp16 */
    NP_FAULT_GELU_TANH,             /* gelu fwd+bwd: tanh approximation instead of erf */
    NP_FAULT_ATTN_MASK_OFF_BY_ONE,  /* sdpa fwd+bwd: causal mask lets t see t+1 */
    NP_FAULT_LINEAR_DROP_BIAS,      /* linear fwd: bias ignored (and gets no gradient) */
    NP_FAULT_ATTN_SCALE,            /* sdpa fwd+bwd: scale 1/D instead of 1/sqrt(D) */
    NP_FAULT_LAYERNORM_BWD_NO_MEAN, /* layer_norm bwd only: input grad misses the mean terms */
    NP_FAULT_EMBEDDING_BWD_OVERWRITE, /* embedding bwd only: repeated indices overwrite instead of add */
    NP_FAULT_CONV2D_FLIP_KERNEL,    /* conv2d fwd+bwd: kernel applied flipped (true convolution) */
    NP_FAULT_COUNT
} np_fault;

typedef struct np_fault_info {
    np_fault id;
    const char *name;        /* "layernorm_eps", used by --fault */
    const char *op;          /* API it affects, "Functional.layer_norm" */
    const char *pass;        /* "forward", "backward" or "forward+backward" */
    int beats_bf16_noise;    /* 1 if the error stands out of bf16 noise (rel err > 5e-2) */
    const char *description; /* one sentence: what the kernel does wrong */
} np_fault_info;

/* Number of entries of the catalog, including NP_FAULT_NONE ("none") at 0. */
int np_fault_count(void);
/* Entry i in [0, np_fault_count()); NULL when out of range. Static storage. */
const np_fault_info *np_fault_get(int i);
/* Fault id by name ("none" gives NP_FAULT_NONE); -1 if unknown. */
int np_fault_from_name(const char *name);

/* ==== context ============================================================ */

typedef struct np_ctx np_ctx;

typedef struct np_ctx_opts {
    np_device device;     /* NP_DEVICE_CPU (default) or NP_DEVICE_NPU_SIM */
    np_dtype precision;   /* autocast dtype: NP_FLOAT32 (off, default), NP_BFLOAT16, NP_FLOAT16 */
    np_fault fault;       /* NP_FAULT_NONE by default; only acts on npu-sim */
    uint64_t seed;        /* keys dropout masks and np_tensor_fill_* (default 0) */
    int threads;          /* > 0: omp_set_num_threads; 0 = leave as is. OpenBLAS always runs
                           * single-threaded: rt_gemm_dev spreads GEMM panels over OpenMP */
    int rank;             /* reported in events (default 0) */
    size_t arena_bytes;   /* first arena slab; 0 = 64 MiB. The arena grows as needed */
    int lowp;             /* np_lowp (nprobe/lowp.h): GEMM operands of linear and matmul
                           * quantized to MxFP8 or HiF8, accumulation in float32; needs
                           * precision NP_FLOAT32 (default NP_LOWP_NONE) */
    int prec_fault;       /* np_prec_fault (nprobe/precision.h); only acts on npu-sim */
    const char *fp32_ops; /* per-op precision overrides, comma-separated: an API name
                           * ("Functional.layer_norm"), an API call ("Functional.softmax.2")
                           * or a module path ("h.0.ln_1": every op inside it) runs in
                           * float32 inside autocast; NULL/"" none. Copied by np_ctx_new */
    int lowp_backward;    /* with lowp: the backward GEMMs of linear quantized too (the
                           * gradient and the re-quantized input and weight, blocks along
                           * each GEMM's reduction dim: docs/RUNTIME.md); 0: the forward only;
                           * 1: every operand in lowp's format; 2 (mxfp8 only): the gradient
                           * in E5M2 blocks (NP_LOWP_MXFP8_E5M2), input and weight E4M3 */
} np_ctx_opts;

/* Fill `o` with the defaults above. */
void np_ctx_opts_default(np_ctx_opts *o);

/* Create a context. `o` NULL means defaults. *out is the caller's, free with
 * np_ctx_free. NP_ERR_ARG on a bad device, precision or fault. */
np_status np_ctx_new(np_ctx **out, const np_ctx_opts *o, np_error *err);
/* Free the context, its arena, every persistent tensor and module. NULL ok. */
void np_ctx_free(np_ctx *ctx);

/* Register the hook (NULL fn unregisters). `user` is borrowed. The hook is
 * an observer of order 0 without a before event (np_ctx_add_observer);
 * setting it again replaces it. */
void np_ctx_set_hook(np_ctx *ctx, np_hook_fn fn, void *user);
/* Add an observer (include/nprobe/hook.h); NP_ERR_LIMIT past
 * NP_CTX_MAX_OBSERVERS, NP_ERR_ARG if it has neither callback. With no
 * observer the runtime formats no event and the before check is one
 * branch per call. */
#define NP_CTX_MAX_OBSERVERS 8
np_status np_ctx_add_observer(np_ctx *ctx, const np_observer *obs, np_error *err);
/* Remove the observers registered with this `user`. */
void np_ctx_remove_observers(np_ctx *ctx, const void *user);
/* 1 once a hook call returned non-zero (the trainer stops at the next step
 * boundary). Cleared by np_ctx_new only. */
int np_ctx_stop_requested(const np_ctx *ctx);

/* The options in force (device, precision, fault, seed, threads, rank). */
const np_ctx_opts *np_ctx_options(const np_ctx *ctx);
/* The fault that is active: opts.fault on npu-sim, NP_FAULT_NONE otherwise. */
np_fault np_ctx_active_fault(const np_ctx *ctx);

/* First error recorded by an op or call on this context (NP_OK if none). */
np_status np_ctx_status(const np_ctx *ctx);
const np_error *np_ctx_error(const np_ctx *ctx);
void np_ctx_clear_error(np_ctx *ctx);

/* Autograd recording (default on). Off: ops run and fire forward events but
 * record nothing and their outputs do not require grad (evaluation). */
void np_ctx_set_grad_enabled(np_ctx *ctx, int enabled);
int np_ctx_grad_enabled(const np_ctx *ctx);

/* Callsite of the next API or module call ("model_gpt.c:212 attn_forward"):
 * it is consumed by that call (an op, or np_module_begin) and carried by the
 * call's events, forward and backward (np_hook_event.callsite); calls made
 * without one have none (NULL). Borrowed, must live until the step ends;
 * NULL clears. */
void np_ctx_set_callsite(np_ctx *ctx, const char *callsite);
/* The same from parts in static storage (__FILE__, __LINE__, __func__),
 * formatted "basename(file):line func" only when an event is emitted, so
 * setting it costs no formatting or allocation. */
void np_ctx_set_callsite_at(np_ctx *ctx, const char *file, int line, const char *func);
/* Set the callsite of the next API or module call to the line it is written on. */
#define NP_CALLSITE(ctx) np_ctx_set_callsite_at((ctx), __FILE__, __LINE__, __func__)
/* NP_AT(ctx, call): make `call` (an op, an np_module_begin, or a function
 * whose first call is one) with the callsite set to this line:
 * `y = NP_AT(ctx, np_gelu(ctx, h, 0));`. The arguments must not make API
 * calls themselves (they would take the callsite): one call per statement. */
#define NP_AT(ctx, call) (NP_CALLSITE(ctx), (call))

/* ==== steps ============================================================== */

/* Start a step: emits NP_EV_STEP_BEGIN (with the scalar "loss_scale"),
 * resets the API and module counters, the event sequence and the tape. */
void np_ctx_step_begin(np_ctx *ctx);
/* The factor this step's gradients will carry (the loss scale its backward
 * is seeded with; 1 without a loss scaler, the default). Set before
 * np_ctx_step_begin, which passes it to the hook; values <= 0 or not finite
 * mean 1. */
void np_ctx_set_loss_scale(np_ctx *ctx, double scale);
/* End a step: emits NP_EV_STEP_END, clears the tape, resets the arena (every
 * step-scoped tensor becomes invalid) and advances the step number. */
void np_ctx_step_end(np_ctx *ctx);
/* The current step (0 for the first; advanced by np_ctx_step_end). */
int np_ctx_step(const np_ctx *ctx);
/* Set the step number (resuming from a checkpoint); keys dropout masks. */
void np_ctx_set_step(np_ctx *ctx, int step);
/* The micro-batch the calls from now on belong to (gradient accumulation,
 * np_train_opts.micro_batches), -1 outside them (the default, and after
 * np_ctx_step_begin): read by an observer that places leaves. */
void np_ctx_set_micro_batch(np_ctx *ctx, int m);
int np_ctx_micro_batch(const np_ctx *ctx);
/* Drop the tape and every step-scoped tensor without events (evaluation
 * passes outside steps). */
void np_ctx_reset_arena(np_ctx *ctx);
/* Bytes currently reserved by the arena (all slabs). */
size_t np_ctx_arena_bytes(const np_ctx *ctx);

/* Backpropagate from `loss` (any shape; its gradient is seeded with 1.0, or
 * `seed` for np_backward_seed, e.g. a loss scale) through the tape in reverse
 * order, emitting NP_EV_API_BACKWARD for every recorded op whose outputs got a
 * gradient and NP_EV_MODULE_BACKWARD after the backward of everything inside
 * a module call. Accumulates into the parameters' grad. Clears the tape. */
np_status np_backward(np_ctx *ctx, np_tensor *loss);
np_status np_backward_seed(np_ctx *ctx, np_tensor *loss, float seed);

/* Emit NP_EV_PARAM_GRAD for every registered module that owns parameters, in
 * registration order (event name "Module.{path}.{Class}", tensors of role
 * parameters_grad keyed by the parameter's key; the tensor is a float32 view
 * of the gradient). */
void np_ctx_emit_param_grads(np_ctx *ctx);
/* Emit any event through the hook: the runtime fills step, rank and seq
 * (the rest is the caller's). Returns the hook's value (0 without hook). */
int np_ctx_emit(np_ctx *ctx, const np_hook_event *ev);
/* A call the runtime makes outside the ops (a collective) as a timed pair:
 * np_ctx_emit_begin gives the observers its before event (name, inputs)
 * and returns the mask of those that declined it; np_ctx_emit_end, after
 * the work, is np_ctx_emit for the others. */
unsigned np_ctx_emit_begin(np_ctx *ctx, const np_hook_event *ev);
int np_ctx_emit_end(np_ctx *ctx, const np_hook_event *ev, unsigned declined);

/* ==== tensors ============================================================ */

/* Persistent tensor, zero-filled, no gradient. NULL on error (kept in ctx).
 * `shape` has `ndim` entries (ndim 0 = scalar). */
np_tensor *np_tensor_new(np_ctx *ctx, np_dtype dt, int ndim, const int64_t *shape);
/* Persistent parameter: floating dtype, zero-filled, requires_grad = 1 and a
 * zeroed float32 grad buffer. `name` (GPT-2 style, "h.0.attn.c_attn.weight")
 * is copied. Parameters are listed by np_ctx_params in creation order. */
np_tensor *np_tensor_new_param(np_ctx *ctx, np_dtype dt, int ndim,
                               const int64_t *shape, const char *name);
/* Free a persistent tensor now (it is otherwise freed by np_ctx_free).
 * NULL and step-scoped tensors are ignored. */
void np_tensor_free(np_ctx *ctx, np_tensor *t);
/* Step-scoped tensor from the arena, zero-filled, no gradient. */
np_tensor *np_tensor_tmp(np_ctx *ctx, np_dtype dt, int ndim, const int64_t *shape);

/* All parameters, creation order; *n set to their count. Borrowed. */
np_tensor *const *np_ctx_params(const np_ctx *ctx, int *n);
/* Set every parameter's grad to zero. */
void np_ctx_zero_grads(np_ctx *ctx);
/* Mark a tensor as requiring grad (a persistent tensor gets a grad buffer). */
np_status np_tensor_set_requires_grad(np_ctx *ctx, np_tensor *t, int on);

/* Float32 storage of a float32/bf16/fp16 tensor; NULL for other dtypes. */
float *np_tensor_f32(const np_tensor *t);
/* Storage of an int64 tensor; NULL for other dtypes. */
int64_t *np_tensor_i64(const np_tensor *t);
/* Element count of a shape. */
int64_t np_shape_numel(int ndim, const int64_t *shape);
/* 1 if both tensors have the same ndim and shape. */
int np_tensor_same_shape(const np_tensor *a, const np_tensor *b);

/* Fill helpers (no events, no tape). Values are rounded to the dtype. */
void np_tensor_fill(np_tensor *t, double v);
/* Copy `n` == numel values from `src` (float for floating, int64 for int
 * dtypes via np_tensor_copy_i64). NP_ERR_SHAPE on a count mismatch. */
np_status np_tensor_copy_f32(np_tensor *t, const float *src, int64_t n, np_error *err);
np_status np_tensor_copy_i64(np_tensor *t, const int64_t *src, int64_t n, np_error *err);
/* Copy data between two tensors of the same dtype and numel. */
np_status np_tensor_copy(np_tensor *dst, const np_tensor *src, np_error *err);
/* Deterministic fills from a counter-based generator keyed on (seed, stream,
 * element index): the bits depend neither on threads nor on fill order. */
void np_tensor_fill_normal(np_tensor *t, uint64_t seed, uint64_t stream, double mean, double std);
void np_tensor_fill_uniform(np_tensor *t, uint64_t seed, uint64_t stream, double lo, double hi);

/* Counter-based random numbers (splitmix64 mixing): a 64-bit hash of
 * (key, counter) and a uniform float in [0, 1) with 24 random bits. */
uint64_t np_rng_u64(uint64_t key, uint64_t counter);
float np_rng_uniform(uint64_t key, uint64_t counter);

/* ==== modules ============================================================ */

typedef struct np_module np_module;

/* Register a module (owned by ctx; freed with it). `path` is the dotted
 * module path ("h.0.attn", "" for the root model), `cls` its class name
 * ("CausalSelfAttention"); both copied. Registration order is the
 * definition order used by np_ctx_emit_param_grads. NULL on error. */
np_module *np_module_new(np_ctx *ctx, const char *path, const char *cls);
/* Attach a parameter directly owned by the module under `key` ("weight"). */
np_status np_module_add_param(np_module *m, const char *key, np_tensor *param);
/* "Module.{path}.{cls}" (or "Module.{cls}" for an empty path). Borrowed. */
const char *np_module_name(const np_module *m);

/* Open a module call: APIs and modules called until the matching
 * np_module_end get this call as their parent. Calls nest. */
np_status np_module_begin(np_ctx *ctx, np_module *m);
/* Close the innermost open call of `m`: emits NP_EV_MODULE_FORWARD
 * "Module.{path}.{cls}.forward.{N}" with the inputs, the module's parameters
 * and the outputs, and records it so that NP_EV_MODULE_BACKWARD
 * "...backward.{N}" fires after the backward of everything inside it
 * (input = grads at its outputs, output = grads it produced at its inputs).
 * Arrays and tensors are borrowed; entries may be NULL. */
np_status np_module_end(np_ctx *ctx, np_module *m, np_tensor *const *inputs, int n_in,
                        np_tensor *const *outputs, int n_out);

/* ==== ops ================================================================ */
/* Every op is an API hook point named as in PyTorch/msprobe (in brackets);
 * only the outermost API fires when one op uses another internally. Shapes
 * are given as in llm.c: x is (B,T,C). Autocast column: AC = inputs rounded
 * to the autocast dtype, low-precision output; F32 = computed in float32,
 * float32 output; KEEP = output keeps the promoted input dtype. */

/* [Functional.linear] AC. x (..., in), w (out, in), b (out) or NULL -> (..., out). */
np_tensor *np_linear(np_ctx *ctx, np_tensor *x, np_tensor *w, np_tensor *b);
/* [Torch.matmul] AC. a (..., M, K) @ b (..., K, N) with equal batch dims, or
 * b (K, N) shared by every batch -> (..., M, N). */
np_tensor *np_matmul(np_ctx *ctx, np_tensor *a, np_tensor *b);
/* [Functional.conv2d] AC. x (N, C, H, W), w (O, C, KH, KW), b (O) or NULL ->
 * (N, O, OH, OW), OH = (H + 2*padding - KH) / stride + 1. Scalars stride, padding. */
np_tensor *np_conv2d(np_ctx *ctx, np_tensor *x, np_tensor *w, np_tensor *b,
                     int stride, int padding);
/* [Functional.max_pool2d] KEEP. x (N, C, H, W) -> (N, C, OH, OW), no padding;
 * stride 0 means stride = kernel. Scalars kernel_size, stride. */
np_tensor *np_max_pool2d(np_ctx *ctx, np_tensor *x, int kernel, int stride);
/* [Functional.relu] KEEP. */
np_tensor *np_relu(np_ctx *ctx, np_tensor *x);
/* [Functional.gelu] KEEP. approximate_tanh 0: x/2 (1 + erf(x/sqrt 2)) (PyTorch
 * default); 1: the tanh form. Scalar approximate (0/1). */
np_tensor *np_gelu(np_ctx *ctx, np_tensor *x, int approximate_tanh);
/* [Functional.silu] KEEP. x * sigmoid(x). */
np_tensor *np_silu(np_ctx *ctx, np_tensor *x);
/* [Torch.tanh] KEEP. tanh(x). */
np_tensor *np_tanh(np_ctx *ctx, np_tensor *x);
/* [Functional.layer_norm] F32. x (..., C), weight (C) or NULL, bias (C) or
 * NULL; biased variance over the last dim. Scalar eps. */
np_tensor *np_layer_norm(np_ctx *ctx, np_tensor *x, np_tensor *weight,
                         np_tensor *bias, double eps);
/* [Functional.softmax] F32. Over the last dim (dim must be -1 or ndim-1). Scalar dim. */
np_tensor *np_softmax(np_ctx *ctx, np_tensor *x, int dim);
/* [Functional.scaled_dot_product_attention] AC. q, k, v (B, H, T, D) ->
 * (B, H, T, D); softmax(q k^T * scale [+ causal mask]) v with scale
 * 1/sqrt(D) when `scale` <= 0. Scalars is_causal, scale. */
np_tensor *np_sdpa(np_ctx *ctx, np_tensor *q, np_tensor *k, np_tensor *v,
                   int is_causal, double scale);
/* [Functional.embedding] weight dtype. idx int64/int32 (...), weight (V, C)
 * -> (..., C). An index outside [0, V) is NP_ERR_ARG. */
np_tensor *np_embedding(np_ctx *ctx, np_tensor *idx, np_tensor *weight);
/* [Functional.dropout] KEEP. Zeroes elements with probability p and scales
 * the rest by 1/(1-p) when `training`; identity otherwise (still an event).
 * Mask from np_rng keyed on (seed, step, call N, element index). Scalars p, training. */
np_tensor *np_dropout(np_ctx *ctx, np_tensor *x, double p, int training);
/* [Functional.cross_entropy] F32. logits (N, C) (or (..., C), flattened),
 * targets int64 (N) -> scalar mean over targets != ignore_index (log-sum-exp
 * form). Scalar ignore_index. */
np_tensor *np_cross_entropy(np_ctx *ctx, np_tensor *logits, np_tensor *targets,
                            int64_t ignore_index);
/* [Tensor.add] KEEP. a + b; b's shape equal to a's, a suffix of it (bias-like
 * broadcast, e.g. (B,T,C) + (T,C)), or one element; or the same with a, b swapped. */
np_tensor *np_add(np_ctx *ctx, np_tensor *a, np_tensor *b);
/* [Tensor.mul] KEEP. a * b with the same broadcasting as np_add. */
np_tensor *np_mul(np_ctx *ctx, np_tensor *a, np_tensor *b);
/* [Tensor.mul] KEEP. x * s for a Python-style scalar s. Scalar other. */
np_tensor *np_scale(np_ctx *ctx, np_tensor *x, double s);
/* [Torch.sum] KEEP. Sum of all elements -> scalar (ndim 0). */
np_tensor *np_sum(np_ctx *ctx, np_tensor *x);
/* [Torch.mean] KEEP. Mean of all elements -> scalar (ndim 0). */
np_tensor *np_mean(np_ctx *ctx, np_tensor *x);

/* ---- shape ops (hook points too; they copy or alias, no arithmetic) ---- */
/* [Tensor.view] Same data, new shape; one entry may be -1 (inferred). */
np_tensor *np_view(np_ctx *ctx, np_tensor *x, int ndim, const int64_t *shape);
/* [Tensor.reshape] As np_view. */
np_tensor *np_reshape(np_ctx *ctx, np_tensor *x, int ndim, const int64_t *shape);
/* [Torch.flatten] Dims start_dim..end collapsed into one (CNN: start_dim 1). */
np_tensor *np_flatten(np_ctx *ctx, np_tensor *x, int start_dim);
/* [Tensor.transpose] Swap two dims (negative dims count from the end);
 * the result is materialised contiguous. Scalars dim0, dim1. */
np_tensor *np_transpose(np_ctx *ctx, np_tensor *x, int dim0, int dim1);
/* [Tensor.split] Split `dim` into chunks of `split_size` (last may be
 * shorter); writes up to `max_out` tensors into out[] and returns their
 * count, or -1 on error (more chunks than max_out is NP_ERR_ARG).
 * GPT: np_split(ctx, qkv, C, -1, out, 3) gives q, k, v (B, T, C). Scalars split_size, dim. */
int np_split(np_ctx *ctx, np_tensor *x, int64_t split_size, int dim,
             np_tensor **out, int max_out);

#ifdef __cplusplus
}
#endif
#endif
