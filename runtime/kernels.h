/* runtime/kernels.h - the runtime's float32 kernels, in llm.c's manner: one
 * function per op pass, plain pointers and sizes, no context, no arena, no
 * fault. They are what the ops (ops_*.c) run on a training step, and what
 * replay and tests can call on their own buffers. Shapes are given on every
 * argument; N is the number of rows (B*T for a (B, T, C) tensor), C the
 * length of the last dim. Rows (or columns, for weight gradients) are split
 * over OpenMP threads, never a reduction across threads, so the bits do not
 * depend on the thread count. Backward kernels write (not accumulate into)
 * the gradients they are given unless said otherwise; a NULL gradient is
 * not computed.
 *
 * Faults (the npu-sim device's catalog, fault.c) are not inside these
 * kernels: a fault wraps a kernel (calls it with changed arguments) or
 * replaces it (runtime/fault_kernels.c), and the context picks the table of
 * kernels of its fault once (rt_kernels_for); an op calls the table's slot
 * where a fault can act (ctx->k.layernorm_forward(...)). Private to the runtime (and its tests). */
#ifndef NPROBE_RT_KERNELS_H
#define NPROBE_RT_KERNELS_H

#include <stdint.h>

#include "nprobe/runtime.h"

/* ---- layer_norm (kern_norm.c) ------------------------------------------- */
/* out (N,C) = (inp - mean) * rstd * weight + bias per row; mean (N) and
 * rstd (N) saved for backward; inp (N,C); weight (C) or NULL; bias (C) or
 * NULL. Row statistics in double (fixed-lane sums). */
void rt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int64_t N, int64_t C, double eps);
/* dinp (N,C), dweight (C), dbias (C) (each may be NULL) from dout (N,C),
 * inp (N,C), weight (C) or NULL, and the forward's mean (N), rstd (N). */
void rt_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, const float *mean,
                           const float *rstd, int64_t N, int64_t C);

/* ---- softmax over the last dim (kern_norm.c) ---------------------------- */
/* One row: y (n) = softmax(x (n)); y may alias x. */
typedef void (*rt_softmax_row_fn)(const float *x, float *y, int64_t n);
void rt_softmax_row(const float *x, float *y, int64_t n);
/* out (N,C) = softmax of each row of inp (N,C), row by `row` (rt_softmax_row
 * or a fault's). */
void rt_softmax_forward(float *out, const float *inp, int64_t N, int64_t C, rt_softmax_row_fn row);
/* dinp (N,C) = out * (dout - sum(dout * out)) per row; out (N,C) the
 * forward's output, dout (N,C). */
void rt_softmax_backward(float *dinp, const float *dout, const float *out, int64_t N, int64_t C);

/* ---- cross_entropy, mean over valid rows (kern_norm.c) ------------------ */
/* loss (1) = mean over rows whose target is not ignore_index of
 * lse - logits[target]; lse (N) log-sum-exp per row saved for backward;
 * rowloss (N) scratch; logits (N,C); targets (N) in [0, C) or ignore_index;
 * nvalid = number of valid rows (loss NaN when 0). */
void rt_cross_entropy_forward(float *loss, float *lse, double *rowloss, const float *logits,
                              const int64_t *targets, int64_t N, int64_t C, int64_t ignore_index,
                              int64_t nvalid);
/* dlogits (N,C) = dloss / nvalid * (softmax - onehot(target)) on valid rows
 * (ignored rows untouched: the caller zeroes dlogits); dloss (1). */
void rt_cross_entropy_backward(float *dlogits, const float *dloss, const float *logits,
                               const float *lse, const int64_t *targets, int64_t N, int64_t C,
                               int64_t ignore_index, int64_t nvalid);

/* ---- embedding (kern_norm.c) -------------------------------------------- */
/* out (N,C) = weight[idx[i]] rows; idx (N) int64 or int32 (idx_dtype) in
 * [0, V); weight (V,C). */
void rt_embedding_forward(float *out, const void *idx, np_dtype idx_dtype, const float *weight,
                          int64_t N, int64_t C);
/* dweight (V,C) += dout rows scattered to their indices (rows in order);
 * dout (N,C); idx (N). */
void rt_embedding_backward(float *dweight, const float *dout, const void *idx, np_dtype idx_dtype,
                           int64_t N, int64_t C);
typedef void (*rt_embedding_bwd_fn)(float *dweight, const float *dout, const void *idx,
                                    np_dtype idx_dtype, int64_t N, int64_t C);

/* ---- elementwise ops and reductions (kern_elem.c) ----------------------- */
/* n elements each; out and inp (n); dt the logical dtype outputs are rounded
 * to (NP_FLOAT32: none). */
void rt_relu_forward(float *out, const float *inp, int64_t n);
void rt_relu_backward(float *dinp, const float *dout, const float *inp, int64_t n);
/* erf GELU x * Phi(x); cdf (n) = Phi(x) in double kept for backward, or NULL. */
void rt_gelu_forward(float *out, double *cdf, const float *inp, int64_t n, np_dtype dt);
/* cdf (n) from the forward, or NULL (recomputed with libm). */
void rt_gelu_backward(float *dinp, const float *dout, const float *inp, const double *cdf, int64_t n);
void rt_gelu_tanh_forward(float *out, const float *inp, int64_t n, np_dtype dt);
void rt_gelu_tanh_backward(float *dinp, const float *dout, const float *inp, int64_t n);
void rt_silu_forward(float *out, const float *inp, int64_t n, np_dtype dt);
void rt_silu_backward(float *dinp, const float *dout, const float *inp, int64_t n);
/* tanh, in double; backward from the input: dinp = dout * (1 - tanh(x)^2). */
void rt_tanh_forward(float *out, const float *inp, int64_t n, np_dtype dt);
void rt_tanh_backward(float *dinp, const float *dout, const float *inp, int64_t n);
/* element i kept (times scale) when np_rng_uniform(key, i) >= p, else 0. */
void rt_dropout_forward(float *out, const float *inp, int64_t n, uint64_t key, float p, float scale,
                        np_dtype dt);
void rt_dropout_backward(float *dinp, const float *dout, int64_t n, uint64_t key, float p, float scale);
/* out (nb) = big (nb) + small (ns), or * when mul; big is nb/ns repeats of
 * small's shape (ns divides nb). */
void rt_binary_forward(float *out, const float *big, const float *small, int64_t nb, int64_t ns, int mul,
                       np_dtype dt);
/* dbig (nb), dsmall (ns) (each may be NULL) from dout (nb); big, small the
 * forward's operands (read for mul only). */
void rt_binary_backward(float *dbig, float *dsmall, const float *dout, const float *big, const float *small,
                        int64_t nb, int64_t ns, int mul);
/* out (n) = inp (n) * s */
void rt_scale_forward(float *out, const float *inp, int64_t n, float s, np_dtype dt);
void rt_scale_backward(float *dinp, const float *dout, int64_t n, float s);
/* out (1) = sum of inp (n) in double, in order (divided by n when mean). */
void rt_reduce_forward(float *out, const float *inp, int64_t n, int mean, np_dtype dt);
void rt_reduce_backward(float *dinp, const float *dout, int64_t n, int mean);
/* grad (n) = grad + g (n), rounded to dt: a tensor's gradient gaining one
 * contribution (the tape's accumulation, ctx.c). */
void rt_grad_accumulate(float *grad, const float *g, int64_t n, np_dtype dt);

/* ---- shape ops that copy (kern_shape.c) --------------------------------- */
/* inp seen as (pre, A, mid, B, post) -> out (pre, B, mid, A, post). */
void rt_transpose_forward(float *out, const float *inp, int64_t pre, int64_t A, int64_t mid, int64_t B,
                          int64_t post);
/* dinp (pre, A, mid, B, post) from dout (pre, B, mid, A, post). */
void rt_transpose_backward(float *dinp, const float *dout, int64_t pre, int64_t A, int64_t mid, int64_t B,
                           int64_t post);
/* One chunk of a split along a dim of size S: inp (pre, S, post) ->
 * out (pre, len, post) = inp[:, off:off+len, :]; backward writes that slice
 * of dinp (pre, S, post) from dout (pre, len, post). */
void rt_split_forward(float *out, const float *inp, int64_t pre, int64_t S, int64_t post, int64_t off,
                      int64_t len);
void rt_split_backward(float *dinp, const float *dout, int64_t pre, int64_t S, int64_t post, int64_t off,
                       int64_t len);

/* ---- scaled_dot_product_attention (kern_attn.c) ------------------------- */
typedef struct rt_attn_geom {
    int64_t BH, T, D;  /* batch * heads, sequence length, head width */
    int causal;        /* 1: query t sees keys [0, t + 1 + diagonal) */
    int64_t diagonal;  /* of the causal mask, as torch.tril's (0: the usual mask) */
    double scale;      /* of the scores, applied as float */
} rt_attn_geom;
/* out (BH,T,D) = softmax(q k^T scale, masked) v, probabilities P (BH,T,T)
 * kept for backward (masked entries 0); q, k, v (BH,T,D) already rounded to
 * ac; scores and probabilities rounded to ac unless float32, rows by `row`
 * (rt_softmax_row or a fault's); out rounded to odt. */
void rt_sdpa_forward(float *out, float *P, const float *q, const float *k, const float *v,
                     const rt_attn_geom *g, np_dtype ac, np_dtype odt, rt_softmax_row_fn row);
/* dq, dk, dv (BH,T,D) (each may be NULL) from dout (BH,T,D), the forward's
 * q, k, v (BH,T,D) and P (BH,T,T); dscores (BH,T,T) scratch. */
void rt_sdpa_backward(float *dq, float *dk, float *dv, float *dscores, const float *dout, const float *q,
                      const float *k, const float *v, const float *P, const rt_attn_geom *g);

/* ---- GEMM-based ops (kern_dense.c) -------------------------------------- */
/* Kernels calling the device's GEMM (rt_gemm_dev) return 0, or -1 when
 * npu-sim's GEMM had no memory. Outputs rounded to dt. */
/* out (N,O) = inp (N,K) weight^T + bias; weight (O,K); bias (O) or NULL. */
int rt_linear_forward(float *out, const float *inp, const float *weight, const float *bias, int64_t N,
                      int64_t K, int64_t O, np_dtype dt, np_device dev);
/* dinp (N,K), dweight (O,K), dbias (O) (each may be NULL) from dout (N,O)
 * and the forward's inp (N,K), weight (O,K). */
int rt_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                       const float *weight, int64_t N, int64_t K, int64_t O, np_device dev);
/* out (nbat,M,N) = a (nbat,M,K) @ b (nbat,K,N), or b (K,N) shared by every
 * batch when shared_b. */
int rt_matmul_forward(float *out, const float *a, const float *b, int64_t nbat, int64_t M, int64_t K,
                      int64_t N, int shared_b, np_dtype dt, np_device dev);
/* da (nbat,M,K), db (as b) (each may be NULL) from dout (nbat,M,N). */
int rt_matmul_backward(float *da, float *db, const float *dout, const float *a, const float *b, int64_t nbat,
                       int64_t M, int64_t K, int64_t N, int shared_b, np_device dev);

typedef struct rt_conv_geom {
    int64_t N, C, H, W;   /* input (N, C, H, W) */
    int64_t O, KH, KW;    /* weight (O, C, KH, KW) */
    int64_t OH, OW;       /* output (N, O, OH, OW) */
    int64_t s, p;         /* stride, padding */
} rt_conv_geom;
/* out (N,O,OH,OW) = cross-correlation of inp (N,C,H,W) with weight
 * (O,C,KH,KW) + bias (O) or NULL; cols (N, C*KH*KW, OH*OW) the im2col
 * columns, kept for backward. */
int rt_conv2d_forward(float *out, float *cols, const float *inp, const float *weight, const float *bias,
                      const rt_conv_geom *g, np_dtype dt, np_device dev);
/* dinp (N,C,H,W) accumulated into (the caller zeroes it), dweight
 * (O,C,KH,KW) and dbias (O) written (each may be NULL), from dout
 * (N,O,OH,OW), the forward's cols and weight; dcol (C*KH*KW, OH*OW) scratch. */
int rt_conv2d_backward(float *dinp, float *dweight, float *dbias, float *dcol, const float *dout,
                       const float *cols, const float *weight, const rt_conv_geom *g, np_device dev);
/* flipped (O,C,KH,KW) = weight with both spatial axes reversed. */
void rt_conv2d_flip_weight(float *flipped, const float *weight, const rt_conv_geom *g);
/* out (planes, OH, OW) = max over each kernel x kernel window (stride) of
 * inp (planes, H, W), OH = (H - kernel) / stride + 1; arg (planes, OH, OW)
 * the index in the plane of each max (the first; NaN wins). */
void rt_max_pool2d_forward(float *out, int32_t *arg, const float *inp, int64_t planes, int64_t H, int64_t W,
                           int kernel, int stride);
/* dinp (planes, HW) += dout (planes, OHW) at arg (planes, OHW). */
void rt_max_pool2d_backward(float *dinp, const float *dout, const int32_t *arg, int64_t planes, int64_t HW,
                            int64_t OHW);

/* ---- the kernels a fault can wrap or replace ---------------------------- */
typedef void (*rt_layernorm_fwd_fn)(float *out, float *mean, float *rstd, const float *inp,
                                    const float *weight, const float *bias, int64_t N, int64_t C,
                                    double eps);
typedef void (*rt_layernorm_bwd_fn)(float *dinp, float *dweight, float *dbias, const float *dout,
                                    const float *inp, const float *weight, const float *mean,
                                    const float *rstd, int64_t N, int64_t C);
typedef void (*rt_gelu_fwd_fn)(float *out, double *cdf, const float *inp, int64_t n, np_dtype dt);
typedef void (*rt_gelu_bwd_fn)(float *dinp, const float *dout, const float *inp, const double *cdf,
                               int64_t n);
typedef void (*rt_sdpa_fwd_fn)(float *out, float *P, const float *q, const float *k, const float *v,
                               const rt_attn_geom *g, np_dtype ac, np_dtype odt, rt_softmax_row_fn row);
typedef void (*rt_sdpa_bwd_fn)(float *dq, float *dk, float *dv, float *dscores, const float *dout,
                               const float *q, const float *k, const float *v, const float *P,
                               const rt_attn_geom *g);
typedef int (*rt_linear_fwd_fn)(float *out, const float *inp, const float *weight, const float *bias,
                                int64_t N, int64_t K, int64_t O, np_dtype dt, np_device dev);
typedef int (*rt_linear_bwd_fn)(float *dinp, float *dweight, float *dbias, const float *dout,
                                const float *inp, const float *weight, int64_t N, int64_t K, int64_t O,
                                np_device dev);
typedef int (*rt_conv2d_fwd_fn)(float *out, float *cols, const float *inp, const float *weight,
                                const float *bias, const rt_conv_geom *g, np_dtype dt, np_device dev);
typedef int (*rt_conv2d_bwd_fn)(float *dinp, float *dweight, float *dbias, float *dcol, const float *dout,
                                const float *cols, const float *weight, const rt_conv_geom *g,
                                np_device dev);

typedef struct rt_kernels {
    rt_layernorm_fwd_fn layernorm_forward;
    rt_layernorm_bwd_fn layernorm_backward;
    rt_softmax_row_fn softmax_row;   /* Functional.softmax and the attention's softmax */
    rt_embedding_bwd_fn embedding_backward;
    rt_gelu_fwd_fn gelu_forward;     /* the erf GELU (approximate='none') */
    rt_gelu_bwd_fn gelu_backward;
    rt_sdpa_fwd_fn sdpa_forward;
    rt_sdpa_bwd_fn sdpa_backward;
    rt_linear_fwd_fn linear_forward;
    rt_linear_bwd_fn linear_backward;
    rt_conv2d_fwd_fn conv2d_forward;
    rt_conv2d_bwd_fn conv2d_backward;
    void (*cross_entropy_forward)(float *loss, float *lse, double *rowloss, const float *logits,
                                  const int64_t *targets, int64_t N, int64_t C, int64_t ignore_index,
                                  int64_t nvalid); /* a promotion fault's (runtime/promote.c) */
} rt_kernels;

/* k = the reference kernels, with fault f's wrappers or replacements in
 * their slots (NP_FAULT_NONE or an unknown id: the reference only). */
void rt_kernels_for(rt_kernels *k, np_fault f);

#endif
