/* runtime/kern_norm.c - float32 kernels of the row-wise ops (kernels.h):
 * layer_norm, softmax, cross_entropy, and embedding. Row statistics in
 * double, OpenMP over rows (weight gradients over column blocks), so bits do
 * not depend on the thread count. No context and no fault here. */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "rt_internal.h"
#include "vmath.h"

/* ---- layer_norm --------------------------------------------------------- */
/* Row sums in double over 8 interleaved partial sums (element c goes to
 * lane c mod 8), combined pairwise: a fixed order, the same whatever the
 * thread count or vector width, that GCC vectorises (a single running sum
 * cannot be). Each row kernel is cloned for AVX-512/AVX2/baseline. */
#define LN_LANES 8
static inline double ln_combine(const double *p)
{
    return ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
}

/* yr (C) from xr (C); w, b (C) or NULL; mean_out, rstd_out (1). */
RT_VCLONES static void layer_norm_row(const float *xr, const float *w, const float *b, float *yr,
                                      int64_t C, double eps, float *mean_out, float *rstd_out)
{
    double p[LN_LANES] = {0};
    int64_t c8 = C / LN_LANES * LN_LANES;
    for (int64_t c = 0; c < c8; c += LN_LANES)
        for (int j = 0; j < LN_LANES; j++)
            p[j] += xr[c + j];
    for (int64_t c = c8; c < C; c++)
        p[c - c8] += xr[c];
    double m = ln_combine(p) / (double)C;
    double q[LN_LANES] = {0};
    for (int64_t c = 0; c < c8; c += LN_LANES)
        for (int j = 0; j < LN_LANES; j++)
            q[j] += (xr[c + j] - m) * (xr[c + j] - m);
    for (int64_t c = c8; c < C; c++)
        q[c - c8] += (xr[c] - m) * (xr[c] - m);
    double v = ln_combine(q) / (double)C;
    double rs = 1.0 / sqrt(v + eps);
    if (w && b)
        for (int64_t c = 0; c < C; c++)
            yr[c] = (float)((xr[c] - m) * rs * w[c] + b[c]);
    else if (w)
        for (int64_t c = 0; c < C; c++)
            yr[c] = (float)((xr[c] - m) * rs * w[c]);
    else if (b)
        for (int64_t c = 0; c < C; c++)
            yr[c] = (float)((xr[c] - m) * rs + b[c]);
    else
        for (int64_t c = 0; c < C; c++)
            yr[c] = (float)((xr[c] - m) * rs);
    *mean_out = (float)m;
    *rstd_out = (float)rs;
}

void rt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int64_t N, int64_t C, double eps)
{
#pragma omp parallel for if (N * C > RT_PAR_MIN)
    for (int64_t r = 0; r < N; r++)
        layer_norm_row(inp + r * C, weight, bias, out + r * C, C, eps, mean + r, rstd + r);
}

/* weight and bias gradients of columns [c0, c0 + 16): sums over rows in order */
RT_VCLONES static void layer_norm_wgrad_block(const float *x, const float *g, const float *mean, const float *rstd,
                                              int64_t R, int64_t C, int64_t c0, float *dw, float *db)
{
    double aw[16] = {0}, ab[16] = {0};
    int64_t cn = C - c0 < 16 ? C - c0 : 16;
    for (int64_t r = 0; r < R; r++) {
        double m = mean[r], rs = rstd[r];
        const float *gr = g + r * C + c0, *xr = x + r * C + c0;
        if (cn == 16)
            for (int j = 0; j < 16; j++) {
                double gv = gr[j];
                aw[j] += gv * ((xr[j] - m) * rs);
                ab[j] += gv;
            }
        else
            for (int64_t j = 0; j < cn; j++) {
                double gv = gr[j];
                aw[j] += gv * ((xr[j] - m) * rs);
                ab[j] += gv;
            }
    }
    for (int64_t j = 0; j < cn; j++) {
        if (dw)
            dw[c0 + j] = (float)aw[j];
        if (db)
            db[c0 + j] = (float)ab[j];
    }
}

/* dx of one row: rs (dxh - mean(dxh) - xh mean(dxh xh)), dxh = g w. */
RT_VCLONES static void layer_norm_row_bwd(const float *xr, const float *gr, const float *w, float *dxr,
                                          int64_t C, double m, double rs)
{
    double p1[LN_LANES] = {0}, p2[LN_LANES] = {0};
    int64_t c8 = C / LN_LANES * LN_LANES;
    for (int64_t c = 0; c < c8; c += LN_LANES)
        for (int j = 0; j < LN_LANES; j++) {
            double dxh = (double)gr[c + j] * (w ? (double)w[c + j] : 1.0);
            p1[j] += dxh;
            p2[j] += dxh * ((xr[c + j] - m) * rs);
        }
    for (int64_t c = c8; c < C; c++) {
        double dxh = (double)gr[c] * (w ? (double)w[c] : 1.0);
        p1[c - c8] += dxh;
        p2[c - c8] += dxh * ((xr[c] - m) * rs);
    }
    double s1 = ln_combine(p1) / (double)C, s2 = ln_combine(p2) / (double)C;
    for (int64_t c = 0; c < C; c++) {
        double dxh = (double)gr[c] * (w ? (double)w[c] : 1.0);
        double xh = (xr[c] - m) * rs;
        dxr[c] = (float)(rs * (dxh - s1 - xh * s2));
    }
}

void rt_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, const float *mean,
                           const float *rstd, int64_t N, int64_t C)
{
    if (dinp) {
#pragma omp parallel for if (N * C > RT_PAR_MIN)
        for (int64_t r = 0; r < N; r++)
            layer_norm_row_bwd(inp + r * C, dout + r * C, weight, dinp + r * C, C, mean[r], rstd[r]);
    }
    if (dweight || dbias) {
        int64_t nblk = (C + 15) / 16;
#pragma omp parallel for if (N * C > RT_PAR_MIN)
        for (int64_t b = 0; b < nblk; b++)
            layer_norm_wgrad_block(inp, dout, mean, rstd, N, C, b * 16, dweight, dbias);
    }
}

/* ---- softmax ------------------------------------------------------------ */
RT_VCLONES static void softmax_exp_block(const float *x, float mx, double *e, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        e[i] = rt_exp_d((double)x[i] - mx);
}

void rt_softmax_row(const float *x, float *y, int64_t n)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > mx || isnan(x[i]))
            mx = x[i];
    /* exponentials in blocks (vectorised, vmath.h), summed in order; an
     * exponent below -708 (a masked -inf logit) gives ~3e-308 instead of 0,
     * which changes neither the sum nor any float output */
    double s = 0.0, e[256];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        int64_t len = n - i0 < 256 ? n - i0 : 256;
        softmax_exp_block(x + i0, mx, e, len);
        for (int64_t i = 0; i < len; i++) {
            y[i0 + i] = (float)e[i];
            s += e[i];
        }
    }
    for (int64_t i = 0; i < n; i++)
        y[i] = (float)((double)y[i] / s);
}

void rt_softmax_forward(float *out, const float *inp, int64_t N, int64_t C, rt_softmax_row_fn row)
{
#pragma omp parallel for if (N * C > RT_PAR_MIN)
    for (int64_t r = 0; r < N; r++)
        row(inp + r * C, out + r * C, C);
}

void rt_softmax_backward(float *dinp, const float *dout, const float *out, int64_t N, int64_t C)
{
#pragma omp parallel for if (N * C > RT_PAR_MIN)
    for (int64_t r = 0; r < N; r++) {
        double dot = 0.0;
        for (int64_t c = 0; c < C; c++)
            dot += (double)dout[r * C + c] * out[r * C + c];
        for (int64_t c = 0; c < C; c++)
            dinp[r * C + c] = (float)((double)out[r * C + c] * ((double)dout[r * C + c] - dot));
    }
}

/* ---- cross_entropy ------------------------------------------------------ */
void rt_cross_entropy_forward(float *loss, float *lse, double *rowloss, const float *logits,
                              const int64_t *targets, int64_t N, int64_t C, int64_t ignore_index,
                              int64_t nvalid)
{
#pragma omp parallel for if (N * C > RT_PAR_MIN)
    for (int64_t r = 0; r < N; r++) {
        const float *xr = logits + r * C;
        float mx = -INFINITY;
        for (int64_t c = 0; c < C; c++)
            if (xr[c] > mx || isnan(xr[c]))
                mx = xr[c];
        double s = 0.0;
        for (int64_t c = 0; c < C; c++)
            s += exp((double)xr[c] - mx);
        double l = mx + log(s);
        lse[r] = (float)l;
        rowloss[r] = targets[r] == ignore_index ? 0.0 : l - xr[targets[r]];
    }
    double tot = 0.0;
    for (int64_t r = 0; r < N; r++)
        tot += rowloss[r];
    loss[0] = nvalid ? (float)(tot / (double)nvalid) : NAN;
}

void rt_cross_entropy_backward(float *dlogits, const float *dloss, const float *logits,
                               const float *lse, const int64_t *targets, int64_t N, int64_t C,
                               int64_t ignore_index, int64_t nvalid)
{
    if (nvalid == 0)
        return;
    double gs = (double)dloss[0] / (double)nvalid;
#pragma omp parallel for if (N * C > RT_PAR_MIN)
    for (int64_t r = 0; r < N; r++) {
        if (targets[r] == ignore_index)
            continue;
        for (int64_t c = 0; c < C; c++) {
            double p = exp((double)logits[r * C + c] - lse[r]);
            dlogits[r * C + c] = (float)(gs * (p - (c == targets[r] ? 1.0 : 0.0)));
        }
    }
}

/* ---- embedding ---------------------------------------------------------- */
static int64_t idx_at(const void *idx, np_dtype dt, int64_t i)
{
    return dt == NP_INT64 ? ((const int64_t *)idx)[i] : ((const int32_t *)idx)[i];
}

void rt_embedding_forward(float *out, const void *idx, np_dtype idx_dtype, const float *weight,
                          int64_t N, int64_t C)
{
#pragma omp parallel for if (N * C > RT_PAR_EW)
    for (int64_t i = 0; i < N; i++)
        memcpy(out + i * C, weight + idx_at(idx, idx_dtype, i) * C, (size_t)C * sizeof(float));
}

/* columns in blocks of 16 over threads; rows in order within a block */
void rt_embedding_backward(float *dweight, const float *dout, const void *idx, np_dtype idx_dtype,
                           int64_t N, int64_t C)
{
    int64_t nblk = (C + 15) / 16;
#pragma omp parallel for if (N * C > RT_PAR_MIN)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t c0 = b * 16, cn = C - c0 < 16 ? C - c0 : 16;
        for (int64_t r = 0; r < N; r++) {
            int64_t v = idx_at(idx, idx_dtype, r);
            for (int64_t j = 0; j < cn; j++)
                dweight[v * C + c0 + j] += dout[r * C + c0 + j];
        }
    }
}
