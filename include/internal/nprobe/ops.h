/* nprobe/ops.h - the op registry: the one place that says which APIs nprobe
 * can recompute, with their inputs, scalar arguments (and defaults), and
 * context-free float64 reference kernels, forward and backward (DESIGN.md
 * section 11, docs/REPLAY.md).
 *
 *   int op = np_op_from_api("Functional.layer_norm");   -1 if unknown
 *   const np_op_info *info = np_op_get(op);
 *   np_op_call c; np_op_call_init(&c, info);             scalars get defaults
 *   c.in[0] = ...; c.n_in = 3; c.sc[0] = eps;            float64 views
 *   info->shape(&c, &err);                               output shapes
 *   np_op_call_alloc(&c, NP_OP_FORWARD, 1, &err);        outputs (+ magnitudes)
 *   np_op_run(&c, NP_OP_FORWARD, &err);
 *   ... c.out[0].data, c.out[0].mag ...
 *   np_op_call_free(&c);
 *
 * Every kernel is float64 throughout, single-threaded or OpenMP over
 * outputs only (never a reduction across threads), so results do not
 * depend on the thread count. Beside each output a kernel can give its
 * *magnitude*: per element, the sum of the absolute values of the terms
 * that make it (|x|.|w| + |b| for linear), which is the scale a correct
 * low-precision implementation's error is proportional to; replay's
 * isolated error divides by it (docs/COMPARE.md).
 *
 * The llm.c-style kernels themselves are declared at the end, with the
 * shape of every argument. */
#ifndef NPROBE_OPS_H
#define NPROBE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "nprobe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== the registry ======================================================= */

/* The one op identity of nprobe: the runtime's tape nodes, its hook events'
 * API names, the fault catalog, the models' op lists and replay all name an
 * op by this enum; its API name ("Functional.layer_norm") is spelled once,
 * in the op's entry of the table (ops/ops_registry.c), np_op_api gives it.
 * Adding an op: one enumerator here, one entry in that table (the build
 * fails without it: the table is unsized and checked against NP_OP_COUNT),
 * its kernels (float64 in ops/, float32 in runtime/) and their tests
 * (docs/DEVELOPING.md, "Adding an op"). New ops go before NP_OP_COUNT. */
typedef enum np_op {
    NP_OP_LINEAR = 0,
    NP_OP_MATMUL,
    NP_OP_CONV2D,
    NP_OP_MAX_POOL2D,
    NP_OP_EMBEDDING,
    NP_OP_RELU,
    NP_OP_GELU,
    NP_OP_SILU,
    NP_OP_DROPOUT,
    NP_OP_LAYER_NORM,
    NP_OP_RMS_NORM,
    NP_OP_SOFTMAX,
    NP_OP_LOG_SOFTMAX,
    NP_OP_SDPA,
    NP_OP_CROSS_ENTROPY,
    NP_OP_ADD,
    NP_OP_SUB,
    NP_OP_MUL,
    NP_OP_DIV,
    NP_OP_SUM,
    NP_OP_MEAN,
    NP_OP_VIEW,
    NP_OP_TRANSPOSE,
    NP_OP_SPLIT,
    NP_OP_RESHAPE,      /* Tensor.reshape: recomputed as Tensor.view (NP_OPF_AS_VIEW) */
    NP_OP_FLATTEN,      /* Torch.flatten: likewise */
    NP_OP_TANH,
    NP_OP_COUNT
} np_op;

#define NP_OP_MAX_IN 4
#define NP_OP_MAX_OUT 16
#define NP_OP_MAX_SCALARS 4
#define NP_OP_MAX_DIM 8

typedef enum np_op_pass { NP_OP_FORWARD = 0, NP_OP_BACKWARD = 1 } np_op_pass;

/* A float64 tensor view. `data` NULL = absent (an optional input left out,
 * a gradient not wanted). `mag` (same layout) is the magnitude of each
 * element (see above), or NULL. Owned by whoever filled it: the caller for
 * inputs, np_op_call_alloc for outputs and gradients. */
typedef struct np_op_tensor {
    double *data;
    double *mag;
    int ndim;
    int64_t shape[NP_OP_MAX_DIM];
    int64_t numel;
} np_op_tensor;

typedef struct np_op_info np_op_info;

/* One call of an op. Forward: in -> out. Backward: in (the forward inputs)
 * and gout (the gradients arriving at the outputs; data NULL = zero) ->
 * gin (the gradients for the inputs; the caller leaves data NULL for those
 * it does not want, np_op_call_alloc allocates the others). */
typedef struct np_op_call {
    const np_op_info *info;
    np_op_tensor in[NP_OP_MAX_IN];
    int n_in;                        /* inputs given (absent optional ones have data NULL) */
    double sc[NP_OP_MAX_SCALARS];    /* scalar arguments in info->scalars order */
    np_op_tensor out[NP_OP_MAX_OUT];
    int n_out;                       /* set by info->shape */
    np_op_tensor gout[NP_OP_MAX_OUT];
    np_op_tensor gin[NP_OP_MAX_IN];
    int want_gin[NP_OP_MAX_IN];      /* backward: 1 = compute gin[i] */
    int absmode;                     /* internal: the magnitude pass of a multilinear op */
    void *owned;                     /* internal: buffers np_op_call_alloc made */
} np_op_call;

typedef struct np_op_scalar {
    const char *name;   /* the kwargs key in a dump ("eps", "dim", ...) */
    double def;         /* the value when the dump does not record it (NaN: none) */
    int required;       /* 1: a call without it cannot be recomputed */
} np_op_scalar;

/* Flags of an op. */
enum {
    NP_OPF_MULTILINEAR = 1, /* magnitudes = the same kernel on |inputs| (sum of |terms|) */
    NP_OPF_RANDOM = 2,      /* random unless its scalars make it deterministic (dropout) */
    NP_OPF_EXACT = 4,       /* moves or copies values only (shape ops): no rounding at all */
    NP_OPF_AS_VIEW = 8      /* np_op_from_api gives NP_OP_VIEW for its names: replay
                             * recomputes it as a view of the dumped output's shape */
};

struct np_op_info {
    np_op op;
    const char *name;                /* "layer_norm" */
    const char *api;                 /* the name the runtime emits: "Functional.layer_norm" */
    const char *const *aliases;      /* other API names recomputed the same way, NULL-ended */
    const char *const *inputs;       /* input names in argument order, NULL-ended */
    int n_in_min;                    /* inputs that must be present */
    unsigned param_mask;             /* bit i: input i is a parameter (weight, bias) */
    unsigned int_mask;               /* bit i: input i holds integers (indices, targets) */
    const np_op_scalar *scalars;
    int n_scalars;
    unsigned flags;
    /* Check the inputs' shapes and scalars, set n_out and the outputs'
     * shapes (and gin shapes = input shapes). NP_ERR_SHAPE/NP_ERR_UNSUPPORTED
     * with a message naming the op and what was expected. */
    np_status (*shape)(np_op_call *c, np_error *err);
    /* Fill out[i].data (and out[i].mag when not NULL). */
    void (*forward)(np_op_call *c);
    /* Fill gin[i].data for want_gin[i] (and gin[i].mag when not NULL);
     * NULL when the op has no backward here. */
    void (*backward)(np_op_call *c);
    /* NULL, or a reason the call cannot be recomputed with these scalars
     * (dropout in training: its mask is random). */
    const char *(*not_recomputable)(const np_op_call *c);
    /* Torch's positional arguments in order, as msprobe dumps them
     * (replay/msprobe_args.c), NULL-ended; NULL when unknown. A leading
     * '~' marks an argument that does not change the values computed (a
     * shape the dumped output gives, an in-place flag); "~*" stands for
     * every further positional one (Tensor.view(*shape)). Keyword-only
     * arguments (add's alpha) are found by their key. */
    const char *const *torch_args;
};

/* The op's entry; NULL for an id out of range. */
const np_op_info *np_op_get(int op);
/* "layer_norm" for NP_OP_LAYER_NORM, "unknown" out of range. */
const char *np_op_name(int op);
/* The API name the runtime emits for the op ("Functional.layer_norm"),
 * "Unknown.op" out of range. */
const char *np_op_api(int op);
/* The op recomputing an API name ("Functional.linear", "Torch.bmm",
 * "Tensor.__add__", ...), -1 when none does (an op flagged NP_OPF_AS_VIEW
 * gives NP_OP_VIEW). */
int np_op_from_api(const char *api);
/* Where a call name of the op goes on after its API name and the dot
 * ("3.forward" in "Functional.linear.3.forward" for NP_OP_LINEAR); NULL
 * when `name` is no call of the op ("Functional.linear_x.0.forward"). */
const char *np_op_call_of(const char *name, int op);
/* Index of a scalar of the op by its kwargs key, -1 if it has none. */
int np_op_scalar_index(const np_op_info *info, const char *key);

/* Reset c for `info`: no inputs, scalars at their defaults. */
void np_op_call_init(np_op_call *c, const np_op_info *info);
/* After info->shape: allocate out[] (forward) or the wanted gin[]
 * (backward), each with a magnitude array when `mag` is 1. */
np_status np_op_call_alloc(np_op_call *c, np_op_pass pass, int mag, np_error *err);
/* Run the pass (magnitudes too when allocated: a multilinear op's
 * magnitudes come from running the kernel on the absolute values). */
np_status np_op_run(np_op_call *c, np_op_pass pass, np_error *err);
/* Free what np_op_call_alloc made (the caller's inputs stay). */
void np_op_call_free(np_op_call *c);
/* numel of a shape. */
int64_t np_op_numel(int ndim, const int64_t *shape);

/* ==== the reference kernels (float64, context-free) ======================
 * Shapes in the llm.c manner; "rows" are all leading dimensions flattened. */

/* C (M,N, row-major, ldc) = op(A) op(B) + beta C with op(A) (M,K), op(B)
 * (K,N), ta/tb 1 for a transposed operand: every GEMM of these kernels.
 * OpenBLAS's cblas_dgemm, or with NPROBE_GEMM=own in the environment (or
 * np_ref_gemm_select(1)) nprobe's own blocked kernel, equal to float64
 * rounding (docs/PERFORMANCE.md, "The replay's float64 GEMM"). */
void np_ref_dgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const double *A, int64_t lda,
                  const double *B, int64_t ldb, double beta, double *C, int64_t ldc);
/* 1 own kernel, 0 OpenBLAS (overrides NPROBE_GEMM); np_ref_gemm_own: which. */
void np_ref_gemm_select(int own);
int np_ref_gemm_own(void);

/* out (M,N) = inp (M,K) . weight (N,K)^T + bias (N) (bias may be NULL). */
void np_ref_linear_forward(double *out, const double *inp, const double *weight,
                           const double *bias, int64_t M, int64_t K, int64_t N);
/* dinp (M,K), dweight (N,K), dbias (N), each may be NULL; dout (M,N). */
void np_ref_linear_backward(double *dinp, double *dweight, double *dbias, const double *dout,
                            const double *inp, const double *weight, int64_t M, int64_t K,
                            int64_t N);
/* out (Bt,M,N) = a (Bt,M,K) . b (Bt,K,N); b_batched 0: b is one (K,N) for every batch. */
void np_ref_matmul_forward(double *out, const double *a, const double *b, int64_t Bt, int64_t M,
                           int64_t K, int64_t N, int b_batched);
void np_ref_matmul_backward(double *da, double *db, const double *dout, const double *a,
                            const double *b, int64_t Bt, int64_t M, int64_t K, int64_t N,
                            int b_batched);
/* out (B,O,OH,OW) = cross-correlation of inp (B,C,H,W) with weight (O,C,kh,kw) + bias (O). */
void np_ref_conv2d_forward(double *out, const double *inp, const double *weight,
                           const double *bias, int64_t B, int64_t C, int64_t H, int64_t W,
                           int64_t O, int64_t kh, int64_t kw, int64_t stride, int64_t pad);
void np_ref_conv2d_backward(double *dinp, double *dweight, double *dbias, const double *dout,
                            const double *inp, const double *weight, int64_t B, int64_t C,
                            int64_t H, int64_t W, int64_t O, int64_t kh, int64_t kw,
                            int64_t stride, int64_t pad);
/* out (B,C,OH,OW) = max over k x k windows of inp (B,C,H,W); the first maximum wins. */
void np_ref_max_pool2d_forward(double *out, const double *inp, int64_t B, int64_t C, int64_t H,
                               int64_t W, int64_t k, int64_t stride);
void np_ref_max_pool2d_backward(double *dinp, const double *dout, const double *inp, int64_t B,
                                int64_t C, int64_t H, int64_t W, int64_t k, int64_t stride);
/* out (N,C) = weight (V,C) rows at idx (N) (as doubles holding integers). */
void np_ref_embedding_forward(double *out, const double *idx, const double *weight, int64_t N,
                              int64_t V, int64_t C);
void np_ref_embedding_backward(double *dweight, const double *dout, const double *idx, int64_t N,
                               int64_t V, int64_t C);
/* Pointwise, n elements. gelu: approximate 0 = erf form, 1 = tanh form. */
void np_ref_relu_forward(double *out, const double *inp, int64_t n);
void np_ref_relu_backward(double *dinp, const double *dout, const double *inp, int64_t n);
void np_ref_gelu_forward(double *out, const double *inp, int64_t n, int approximate);
void np_ref_gelu_backward(double *dinp, const double *dout, const double *inp, int64_t n,
                          int approximate);
void np_ref_silu_forward(double *out, const double *inp, int64_t n);
void np_ref_silu_backward(double *dinp, const double *dout, const double *inp, int64_t n);
void np_ref_tanh_forward(double *out, const double *inp, int64_t n);
void np_ref_tanh_backward(double *dinp, const double *dout, const double *inp, int64_t n);
/* out, mag (R,C) = layer norm of inp (R,C) over C with weight (C), bias (C)
 * (either may be NULL); mean, rstd (R) may be NULL; mag may be NULL. */
void np_ref_layernorm_forward(double *out, double *mag, double *mean, double *rstd,
                              const double *inp, const double *weight, const double *bias,
                              int64_t R, int64_t C, double eps);
void np_ref_layernorm_backward(double *dinp, double *dweight, double *dbias, double *mdinp,
                               const double *dout, const double *inp, const double *weight,
                               int64_t R, int64_t C, double eps);
/* out (R,C) = inp * rsqrt(mean(inp^2) + eps) * weight (C, may be NULL). */
void np_ref_rmsnorm_forward(double *out, double *mag, const double *inp, const double *weight,
                            int64_t R, int64_t C, double eps);
void np_ref_rmsnorm_backward(double *dinp, double *dweight, double *mdinp, const double *dout,
                             const double *inp, const double *weight, int64_t R, int64_t C,
                             double eps);
/* Softmax / log-softmax over the middle axis of inp (O,N,I) (dim of size N). */
void np_ref_softmax_forward(double *out, double *mag, const double *inp, int64_t O, int64_t N,
                            int64_t In, int log_form);
void np_ref_softmax_backward(double *dinp, double *mdinp, const double *dout, const double *inp,
                             int64_t O, int64_t N, int64_t In, int log_form);
/* out (BH,T,Dv) = softmax(q (BH,T,D) k (BH,S,D)^T * scale [causal]) v (BH,S,Dv). */
void np_ref_sdpa_forward(double *out, double *mag, const double *q, const double *k,
                         const double *v, int64_t BH, int64_t T, int64_t S, int64_t D, int64_t Dv,
                         int causal, double scale);
void np_ref_sdpa_backward(double *dq, double *dk, double *dv, double *mdq, double *mdk,
                          double *mdv, const double *dout, const double *q, const double *k,
                          const double *v, int64_t BH, int64_t T, int64_t S, int64_t D,
                          int64_t Dv, int causal, double scale);
/* loss (1) = mean over rows with target != ignore of cross entropy of
 * logits (N,C) against target (N), with label smoothing ls. */
void np_ref_cross_entropy_forward(double *loss, double *mag, const double *logits,
                                  const double *target, int64_t N, int64_t C, int64_t ignore,
                                  double ls);
void np_ref_cross_entropy_backward(double *dlogits, double *mdlogits, double dloss,
                                   const double *logits, const double *target, int64_t N,
                                   int64_t C, int64_t ignore, double ls);

#ifdef __cplusplus
}
#endif
#endif
