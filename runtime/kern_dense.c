/* runtime/kern_dense.c - float32 kernels of the GEMM-based ops (kernels.h):
 * linear, matmul, conv2d (im2col + GEMM) and max_pool2d. The GEMM is the
 * device's (rt_gemm_dev: cpu's cblas panels or npu-sim's blocked
 * accumulation), the only thing a kernel here knows of the device; outputs
 * are rounded to their logical dtype `dt`. Kernels that call the GEMM
 * return 0, or -1 when npu-sim's GEMM had no memory. No context, no fault. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "rt_internal.h"
#include "vmath.h"

/* out[c] = sum over rows r of g[r*C + c] (double accumulation, rows in order);
 * OpenMP over blocks of columns so bits do not depend on the thread count. */
RT_VCLONES static void col_sum_block(const float *g, int64_t R, int64_t C, int64_t c0, float *out)
{
    double acc[16] = {0};
    int64_t cn = C - c0 < 16 ? C - c0 : 16;
    if (cn == 16) /* the common case, a fixed trip count that vectorises */
        for (int64_t r = 0; r < R; r++)
            for (int j = 0; j < 16; j++)
                acc[j] += g[r * C + c0 + j];
    else
        for (int64_t r = 0; r < R; r++)
            for (int64_t j = 0; j < cn; j++)
                acc[j] += g[r * C + c0 + j];
    for (int64_t j = 0; j < cn; j++)
        out[c0 + j] = (float)acc[j];
}

static void col_sum(const float *g, int64_t R, int64_t C, float *out)
{
    int64_t nblk = (C + 15) / 16;
#pragma omp parallel for if (R * C > RT_PAR_EW)
    for (int64_t b = 0; b < nblk; b++)
        col_sum_block(g, R, C, b * 16, out);
}

/* ---- linear ------------------------------------------------------------ */
int rt_linear_forward(float *out, const float *inp, const float *weight, const float *bias, int64_t N,
                      int64_t K, int64_t O, np_dtype dt, np_device dev)
{
    /* as torch's addmm: the output rows start as the bias and the GEMM adds
     * x W^T to them (beta 1), saving a pass and a parallel region */
    if (bias)
        for (int64_t r = 0; r < N; r++)
            memcpy(out + r * O, bias, (size_t)O * sizeof(float));
    int st = rt_gemm_dev(dev, 0, 1, (int)N, (int)O, (int)K, inp, (int)K, weight, (int)K, bias ? 1.0f : 0.0f,
                         out, (int)O);
    rt_round_buf(out, N * O, dt);
    return st;
}

int rt_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                       const float *weight, int64_t N, int64_t K, int64_t O, np_device dev)
{
    int st = 0;
    if (dinp)
        st |= rt_gemm_dev(dev, 0, 0, (int)N, (int)K, (int)O, dout, (int)O, weight, (int)K, 0.0f, dinp, (int)K);
    if (dweight)
        st |= rt_gemm_dev(dev, 1, 0, (int)O, (int)K, (int)N, dout, (int)O, inp, (int)K, 0.0f, dweight, (int)K);
    if (dbias)
        col_sum(dout, N, O, dbias);
    return st;
}

/* ---- matmul -------------------------------------------------------------- */
int rt_matmul_forward(float *out, const float *a, const float *b, int64_t nbat, int64_t M, int64_t K,
                      int64_t N, int shared_b, np_dtype dt, np_device dev)
{
    int st = 0;
    for (int64_t i = 0; i < nbat; i++)
        st |= rt_gemm_dev(dev, 0, 0, (int)M, (int)N, (int)K, a + i * M * K, (int)K,
                          b + (shared_b ? 0 : i * K * N), (int)N, 0.0f, out + i * M * N, (int)N);
    rt_round_buf(out, nbat * M * N, dt);
    return st;
}

int rt_matmul_backward(float *da, float *db, const float *dout, const float *a, const float *b, int64_t nbat,
                       int64_t M, int64_t K, int64_t N, int shared_b, np_device dev)
{
    int st = 0;
    for (int64_t i = 0; i < nbat; i++) {
        const float *gi = dout + i * M * N, *ai = a + i * M * K;
        const float *bi = b + (shared_b ? 0 : i * K * N);
        if (da)
            st |= rt_gemm_dev(dev, 0, 1, (int)M, (int)K, (int)N, gi, (int)N, bi, (int)N, 0.0f, da + i * M * K,
                              (int)K);
        if (db)
            st |= rt_gemm_dev(dev, 1, 0, (int)K, (int)N, (int)M, ai, (int)K, gi, (int)N,
                              shared_b && i > 0 ? 1.0f : 0.0f, db + (shared_b ? 0 : i * K * N), (int)N);
    }
    return st;
}

/* ---- conv2d ------------------------------------------------------------ */
/* col (C*KH*KW, OH*OW) from one image x (C, H, W). */
static void im2col(const rt_conv_geom *g, const float *x, float *col)
{
    int64_t rows = g->C * g->KH * g->KW, P = g->OH * g->OW;
#pragma omp parallel for if (rows * P > RT_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t c = r / (g->KH * g->KW), kh = (r / g->KW) % g->KH, kw = r % g->KW;
        float *dst = col + r * P;
        for (int64_t oh = 0; oh < g->OH; oh++) {
            int64_t ih = oh * g->s - g->p + kh;
            for (int64_t ow = 0; ow < g->OW; ow++) {
                int64_t iw = ow * g->s - g->p + kw;
                dst[oh * g->OW + ow] = (ih >= 0 && ih < g->H && iw >= 0 && iw < g->W)
                                           ? x[(c * g->H + ih) * g->W + iw] : 0.0f;
            }
        }
    }
}

/* dx (C, H, W) += scatter of dcol; parallel over channels (disjoint outputs). */
static void col2im(const rt_conv_geom *g, const float *dcol, float *dx)
{
    int64_t P = g->OH * g->OW;
#pragma omp parallel for if (g->C * g->H * g->W > RT_PAR_MIN)
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t kh = 0; kh < g->KH; kh++)
            for (int64_t kw = 0; kw < g->KW; kw++) {
                const float *src = dcol + ((c * g->KH + kh) * g->KW + kw) * P;
                for (int64_t oh = 0; oh < g->OH; oh++) {
                    int64_t ih = oh * g->s - g->p + kh;
                    if (ih < 0 || ih >= g->H)
                        continue;
                    for (int64_t ow = 0; ow < g->OW; ow++) {
                        int64_t iw = ow * g->s - g->p + kw;
                        if (iw >= 0 && iw < g->W)
                            dx[(c * g->H + ih) * g->W + iw] += src[oh * g->OW + ow];
                    }
                }
            }
}

void rt_conv2d_flip_weight(float *flipped, const float *weight, const rt_conv_geom *g)
{
    for (int64_t oc = 0; oc < g->O * g->C; oc++)
        for (int64_t kh = 0; kh < g->KH; kh++)
            for (int64_t kw = 0; kw < g->KW; kw++)
                flipped[(oc * g->KH + kh) * g->KW + kw] =
                    weight[(oc * g->KH + (g->KH - 1 - kh)) * g->KW + (g->KW - 1 - kw)];
}

int rt_conv2d_forward(float *out, float *cols, const float *inp, const float *weight, const float *bias,
                      const rt_conv_geom *g, np_dtype dt, np_device dev)
{
    int64_t CKK = g->C * g->KH * g->KW, P = g->OH * g->OW;
    int st = 0;
    for (int64_t n = 0; n < g->N; n++) {
        float *col = cols + n * CKK * P;
        im2col(g, inp + n * g->C * g->H * g->W, col);
        float *yn = out + n * g->O * P;
        st |= rt_gemm_dev(dev, 0, 0, (int)g->O, (int)P, (int)CKK, weight, (int)CKK, col, (int)P, 0.0f, yn, (int)P);
        if (bias)
            for (int64_t o = 0; o < g->O; o++)
                for (int64_t p = 0; p < P; p++)
                    yn[o * P + p] += bias[o];
    }
    rt_round_buf(out, g->N * g->O * P, dt);
    return st;
}

int rt_conv2d_backward(float *dinp, float *dweight, float *dbias, float *dcol, const float *dout,
                       const float *cols, const float *weight, const rt_conv_geom *g, np_device dev)
{
    int64_t CKK = g->C * g->KH * g->KW, P = g->OH * g->OW;
    int st = 0;
    for (int64_t n = 0; n < g->N; n++) {
        const float *gn = dout + n * g->O * P;
        if (dweight)
            st |= rt_gemm_dev(dev, 0, 1, (int)g->O, (int)CKK, (int)P, gn, (int)P, cols + n * CKK * P, (int)P,
                              n > 0 ? 1.0f : 0.0f, dweight, (int)CKK);
        if (dinp) {
            st |= rt_gemm_dev(dev, 1, 0, (int)CKK, (int)P, (int)g->O, weight, (int)CKK, gn, (int)P, 0.0f, dcol,
                              (int)P);
            col2im(g, dcol, dinp + n * g->C * g->H * g->W);
        }
    }
    if (dbias) {
#pragma omp parallel for
        for (int64_t o = 0; o < g->O; o++) {
            double acc = 0.0;
            for (int64_t n = 0; n < g->N; n++)
                for (int64_t p = 0; p < P; p++)
                    acc += dout[(n * g->O + o) * P + p];
            dbias[o] = (float)acc;
        }
    }
    return st;
}

/* ---- max_pool2d ------------------------------------------------------------ */
void rt_max_pool2d_forward(float *out, int32_t *arg, const float *inp, int64_t planes, int64_t H, int64_t W,
                           int kernel, int stride)
{
    int64_t OH = (H - kernel) / stride + 1, OW = (W - kernel) / stride + 1;
#pragma omp parallel for if (planes * OH * OW > RT_PAR_MIN)
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t best = (oh * stride) * W + ow * stride;
                float bv = inp[pl * H * W + best];
                for (int kh = 0; kh < kernel; kh++)
                    for (int kw = 0; kw < kernel; kw++) {
                        int64_t idx = (oh * stride + kh) * W + ow * stride + kw;
                        float v = inp[pl * H * W + idx];
                        if (v > bv || (isnan(v) && !isnan(bv))) {
                            bv = v;
                            best = idx;
                        }
                    }
                out[(pl * OH + oh) * OW + ow] = bv;
                arg[(pl * OH + oh) * OW + ow] = (int32_t)best;
            }
}

void rt_max_pool2d_backward(float *dinp, const float *dout, const int32_t *arg, int64_t planes, int64_t HW,
                            int64_t OHW)
{
#pragma omp parallel for if (planes * OHW > RT_PAR_MIN)
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t o = 0; o < OHW; o++)
            dinp[pl * HW + arg[pl * OHW + o]] += dout[pl * OHW + o];
}
