/* runtime/fault_kernels.c - the npu-sim faults as kernels (the catalog and
 * its descriptions are in fault.c): each fault wraps a reference kernel of
 * kernels.h, calling it with changed arguments, or replaces it with the
 * faulty arithmetic; rt_kernels_for gives the table of kernels a context
 * with that fault runs. The reference kernels hold no fault branch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "rt_internal.h"

/* layernorm_eps wraps: epsilon read in the wrong unit (eps * 1e5). */
static void layernorm_eps_forward(float *out, float *mean, float *rstd, const float *inp,
                                  const float *weight, const float *bias, int64_t N, int64_t C,
                                  double eps)
{
    rt_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps * 1e5);
}

/* layernorm_bwd_no_mean replaces the input gradient: dinp = rstd * w * dout,
 * without the two mean terms; the weight and bias gradients are the
 * reference's. */
static void layernorm_no_mean_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                       const float *inp, const float *weight, const float *mean,
                                       const float *rstd, int64_t N, int64_t C)
{
    if (dinp) {
#pragma omp parallel for if (N * C > RT_PAR_MIN)
        for (int64_t r = 0; r < N; r++) {
            double rs = rstd[r];
            for (int64_t c = 0; c < C; c++) {
                double dxh = (double)dout[r * C + c] * (weight ? (double)weight[c] : 1.0);
                dinp[r * C + c] = (float)(rs * dxh);
            }
        }
    }
    rt_layernorm_backward(NULL, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

/* softmax_fp16_nomax replaces the softmax row: no max subtraction, exp and
 * running sum rounded to float16. */
static void softmax_fp16_nomax_row(const float *x, float *y, int64_t n)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        y[i] = np_round_f16(expf(np_round_f16(x[i])));
        s = np_round_f16(s + y[i]);
    }
    for (int64_t i = 0; i < n; i++)
        y[i] = np_round_f16(y[i] / s);
}

/* embedding_bwd_overwrite replaces the weight gradient: rows written, not
 * accumulated (a repeated index keeps its last row). */
static void embedding_overwrite_backward(float *dweight, const float *dout, const void *idx,
                                         np_dtype idx_dtype, int64_t N, int64_t C)
{
    int64_t nblk = (C + 15) / 16;
#pragma omp parallel for if (N * C > RT_PAR_MIN)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t c0 = b * 16, cn = C - c0 < 16 ? C - c0 : 16;
        for (int64_t r = 0; r < N; r++) {
            int64_t v = idx_dtype == NP_INT64 ? ((const int64_t *)idx)[r] : ((const int32_t *)idx)[r];
            for (int64_t j = 0; j < cn; j++)
                dweight[v * C + c0 + j] = dout[r * C + c0 + j];
        }
    }
}

/* gelu_tanh replaces the erf GELU by its tanh approximation (no cdf kept). */
static void gelu_tanh_as_erf_forward(float *out, double *cdf, const float *inp, int64_t n, np_dtype dt)
{
    (void)cdf;
    rt_gelu_tanh_forward(out, inp, n, dt);
}

static void gelu_tanh_as_erf_backward(float *dinp, const float *dout, const float *inp, const double *cdf,
                                      int64_t n)
{
    (void)cdf;
    rt_gelu_tanh_backward(dinp, dout, inp, n);
}

/* attn_mask_off_by_one wraps the attention: the causal mask's diagonal is 1
 * (position t also sees t + 1), forward and backward. */
static rt_attn_geom off_by_one(const rt_attn_geom *g)
{
    rt_attn_geom f = *g;
    f.diagonal = 1;
    return f;
}

static void attn_off_by_one_forward(float *out, float *P, const float *q, const float *k, const float *v,
                                    const rt_attn_geom *g, np_dtype ac, np_dtype odt, rt_softmax_row_fn row)
{
    rt_attn_geom f = off_by_one(g);
    rt_sdpa_forward(out, P, q, k, v, &f, ac, odt, row);
}

static void attn_off_by_one_backward(float *dq, float *dk, float *dv, float *dscores, const float *dout,
                                     const float *q, const float *k, const float *v, const float *P,
                                     const rt_attn_geom *g)
{
    rt_attn_geom f = off_by_one(g);
    rt_sdpa_backward(dq, dk, dv, dscores, dout, q, k, v, P, &f);
}

/* attn_scale wraps the attention: scores scaled by 1/D instead of 1/sqrt(D)
 * (the scale asked for divided by sqrt(D) once more), forward and backward. */
static rt_attn_geom scale_by_d(const rt_attn_geom *g)
{
    rt_attn_geom f = *g;
    f.scale /= sqrt((double)g->D);
    return f;
}

static void attn_scale_forward(float *out, float *P, const float *q, const float *k, const float *v,
                               const rt_attn_geom *g, np_dtype ac, np_dtype odt, rt_softmax_row_fn row)
{
    rt_attn_geom f = scale_by_d(g);
    rt_sdpa_forward(out, P, q, k, v, &f, ac, odt, row);
}

static void attn_scale_backward(float *dq, float *dk, float *dv, float *dscores, const float *dout,
                                const float *q, const float *k, const float *v, const float *P,
                                const rt_attn_geom *g)
{
    rt_attn_geom f = scale_by_d(g);
    rt_sdpa_backward(dq, dk, dv, dscores, dout, q, k, v, P, &f);
}

/* linear_drop_bias wraps linear: the bias is left out of the GEMM epilogue
 * and receives a zero gradient. */
static int linear_drop_bias_forward(float *out, const float *inp, const float *weight, const float *bias,
                                    int64_t N, int64_t K, int64_t O, np_dtype dt, np_device dev)
{
    (void)bias;
    return rt_linear_forward(out, inp, weight, NULL, N, K, O, dt, dev);
}

static int linear_drop_bias_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                     const float *inp, const float *weight, int64_t N, int64_t K, int64_t O,
                                     np_device dev)
{
    if (dbias)
        memset(dbias, 0, (size_t)O * sizeof(float));
    return rt_linear_backward(dinp, dweight, NULL, dout, inp, weight, N, K, O, dev);
}

/* conv2d_flip_kernel wraps conv2d: the kernel applied flipped (a true
 * convolution), so forward runs on the flipped weight, and backward's
 * weight gradient is flipped back onto the weight's layout. */
static int conv2d_flip_forward(float *out, float *cols, const float *inp, const float *weight,
                               const float *bias, const rt_conv_geom *g, np_dtype dt, np_device dev)
{
    float *f = malloc((size_t)(g->O * g->C * g->KH * g->KW) * sizeof(float) + 1);
    if (!f)
        return -1;
    rt_conv2d_flip_weight(f, weight, g);
    int st = rt_conv2d_forward(out, cols, inp, f, bias, g, dt, dev);
    free(f);
    return st;
}

static int conv2d_flip_backward(float *dinp, float *dweight, float *dbias, float *dcol, const float *dout,
                                const float *cols, const float *weight, const rt_conv_geom *g,
                                np_device dev)
{
    size_t nw = (size_t)(g->O * g->C * g->KH * g->KW);
    float *f = malloc(nw * sizeof(float) + 1), *dw = dweight ? calloc(nw + 1, sizeof(float)) : NULL;
    int st = -1;
    if (f && (dw || !dweight)) {
        rt_conv2d_flip_weight(f, weight, g);
        st = rt_conv2d_backward(dinp, dw, dbias, dcol, dout, cols, f, g, dev);
        if (dweight)
            rt_conv2d_flip_weight(dweight, dw, g);
    }
    free(f);
    free(dw);
    return st;
}

void rt_kernels_for(rt_kernels *k, np_fault f)
{
    *k = (rt_kernels){
        .layernorm_forward = rt_layernorm_forward,
        .layernorm_backward = rt_layernorm_backward,
        .softmax_row = rt_softmax_row,
        .embedding_backward = rt_embedding_backward,
        .gelu_forward = rt_gelu_forward,
        .gelu_backward = rt_gelu_backward,
        .sdpa_forward = rt_sdpa_forward,
        .sdpa_backward = rt_sdpa_backward,
        .linear_forward = rt_linear_forward,
        .linear_backward = rt_linear_backward,
        .conv2d_forward = rt_conv2d_forward,
        .conv2d_backward = rt_conv2d_backward,
        .cross_entropy_forward = rt_cross_entropy_forward,
    };
    switch (f) {
    case NP_FAULT_LAYERNORM_EPS:
        k->layernorm_forward = layernorm_eps_forward;
        break;
    case NP_FAULT_SOFTMAX_FP16_NOMAX:
        k->softmax_row = softmax_fp16_nomax_row;
        break;
    case NP_FAULT_GELU_TANH:
        k->gelu_forward = gelu_tanh_as_erf_forward;
        k->gelu_backward = gelu_tanh_as_erf_backward;
        break;
    case NP_FAULT_ATTN_MASK_OFF_BY_ONE:
        k->sdpa_forward = attn_off_by_one_forward;
        k->sdpa_backward = attn_off_by_one_backward;
        break;
    case NP_FAULT_ATTN_SCALE:
        k->sdpa_forward = attn_scale_forward;
        k->sdpa_backward = attn_scale_backward;
        break;
    case NP_FAULT_LINEAR_DROP_BIAS:
        k->linear_forward = linear_drop_bias_forward;
        k->linear_backward = linear_drop_bias_backward;
        break;
    case NP_FAULT_CONV2D_FLIP_KERNEL:
        k->conv2d_forward = conv2d_flip_forward;
        k->conv2d_backward = conv2d_flip_backward;
        break;
    case NP_FAULT_LAYERNORM_BWD_NO_MEAN:
        k->layernorm_backward = layernorm_no_mean_backward;
        break;
    case NP_FAULT_EMBEDDING_BWD_OVERWRITE:
        k->embedding_backward = embedding_overwrite_backward;
        break;
    default:
        break;
    }
}
