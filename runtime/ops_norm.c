/* runtime/ops_norm.c - row-wise ops that run in float32 under autocast:
 * Functional.layer_norm, Functional.softmax, Functional.cross_entropy; and
 * Functional.embedding. Row statistics in double, OpenMP over rows (weight
 * gradients over column blocks), so bits do not depend on the thread count. */
#include <math.h>
#include <string.h>

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
                                          int64_t C, double m, double rs, int nomean)
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
        dxr[c] = (float)(nomean ? rs * dxh : rs * (dxh - s1 - xh * s2));
    }
}

static void layer_norm_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const float *x = nd->in[0]->data, *g = gout[0];
    const float *w = nd->in[1] ? nd->in[1]->data : NULL;
    const float *mean = nd->saved[0], *rstd = nd->saved[1];
    int64_t R = nd->iv[0], C = nd->iv[1];
    int nomean = (int)nd->iv[2];
    if (gin[0]) {
        float *dx = gin[0];
#pragma omp parallel for if (R * C > RT_PAR_MIN)
        for (int64_t r = 0; r < R; r++)
            layer_norm_row_bwd(x + r * C, g + r * C, w, dx + r * C, C, mean[r], rstd[r], nomean);
    }
    if (gin[1] || gin[2]) {
        int64_t nblk = (C + 15) / 16;
#pragma omp parallel for if (R * C > RT_PAR_MIN)
        for (int64_t b = 0; b < nblk; b++)
            layer_norm_wgrad_block(x, g, mean, rstd, R, C, b * 16, gin[1], gin[2]);
    }
}

np_tensor *np_layer_norm(np_ctx *ctx, np_tensor *x, np_tensor *weight, np_tensor *bias, double eps)
{
    static const char *api = "Functional.layer_norm";
    if (!x || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input") || (weight && !rt_need_float(ctx, weight, api, "weight")) ||
        (bias && !rt_need_float(ctx, bias, api, "bias")))
        return NULL;
    if (x->ndim < 1)
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: input must have rank >= 1", api);
    int64_t C = x->shape[x->ndim - 1], R = C ? x->numel / C : 0;
    if ((weight && (weight->ndim != 1 || weight->shape[0] != C)) || (bias && (bias->ndim != 1 || bias->shape[0] != C)))
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: weight and bias must be (%lld)", api, (long long)C);
    if (!(eps >= 0.0))
        return rt_fail(ctx, NP_ERR_ARG, api, "%s: eps must be >= 0, got %g", api, eps);
    np_tensor *y = rt_new(ctx, NP_FLOAT32, x->ndim, x->shape);
    float *mean = rt_alloc(ctx, (size_t)R * sizeof(float) + 1), *rstd = rt_alloc(ctx, (size_t)R * sizeof(float) + 1);
    if (!y || !mean || !rstd)
        return NULL;
    double e = ctx->fault == NP_FAULT_LAYERNORM_EPS ? eps * 1e5 : eps;
    const float *xd = x->data, *w = weight ? weight->data : NULL, *b = bias ? bias->data : NULL;
    float *yd = y->data;
#pragma omp parallel for if (R * C > RT_PAR_MIN)
    for (int64_t r = 0; r < R; r++)
        layer_norm_row(xd + r * C, w, b, yd + r * C, C, e, mean + r, rstd + r);
    np_tensor *in[3] = {x, weight, bias};
    rt_node nd;
    rt_node_init(ctx, &nd, RT_OP_LAYER_NORM, in, 3);
    rt_node_scalar(&nd, "eps", eps);
    nd.saved[0] = mean;
    nd.saved[1] = rstd;
    nd.iv[0] = R;
    nd.iv[1] = C;
    nd.iv[2] = ctx->fault == NP_FAULT_LAYERNORM_BWD_NO_MEAN;
    nd.gin_full = 7;
    return rt_finish(ctx, &nd, y, layer_norm_bwd);
}

/* ---- softmax ------------------------------------------------------------ */
/* One row of n logits -> probabilities (y may alias x). fp16_nomax emulates the faulty
 * kernel: no max subtraction, exp and running sum rounded to float16. */
RT_VCLONES static void softmax_exp_block(const float *x, float mx, double *e, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        e[i] = rt_exp_d((double)x[i] - mx);
}

void rt_softmax_row(const float *x, float *y, int64_t n, int fp16_nomax)
{
    if (fp16_nomax) {
        float s = 0.0f;
        for (int64_t i = 0; i < n; i++) {
            y[i] = np_round_f16(expf(np_round_f16(x[i])));
            s = np_round_f16(s + y[i]);
        }
        for (int64_t i = 0; i < n; i++)
            y[i] = np_round_f16(y[i] / s);
        return;
    }
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

static void softmax_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const float *y = nd->out[0]->data, *g = gout[0];
    int64_t R = nd->iv[0], C = nd->iv[1];
    if (!gin[0])
        return;
#pragma omp parallel for if (R * C > RT_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        double dot = 0.0;
        for (int64_t c = 0; c < C; c++)
            dot += (double)g[r * C + c] * y[r * C + c];
        for (int64_t c = 0; c < C; c++)
            gin[0][r * C + c] = (float)((double)y[r * C + c] * ((double)g[r * C + c] - dot));
    }
}

np_tensor *np_softmax(np_ctx *ctx, np_tensor *x, int dim)
{
    static const char *api = "Functional.softmax";
    if (!x || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input"))
        return NULL;
    if (x->ndim < 1 || (dim != -1 && dim != x->ndim - 1))
        return rt_fail(ctx, NP_ERR_UNSUPPORTED, api, "%s: only the last dim is supported (dim -1), got dim %d of rank %d", api, dim, x->ndim);
    int64_t C = x->shape[x->ndim - 1], R = C ? x->numel / C : 0;
    np_tensor *y = rt_new(ctx, NP_FLOAT32, x->ndim, x->shape);
    if (!y)
        return NULL;
    int f = ctx->fault == NP_FAULT_SOFTMAX_FP16_NOMAX;
    const float *xd = x->data;
    float *yd = y->data;
#pragma omp parallel for if (R * C > RT_PAR_MIN)
    for (int64_t r = 0; r < R; r++)
        rt_softmax_row(xd + r * C, yd + r * C, C, f);
    rt_node nd;
    rt_node_init(ctx, &nd, RT_OP_SOFTMAX, &x, 1);
    rt_node_scalar(&nd, "dim", dim);
    nd.iv[0] = R;
    nd.iv[1] = C;
    nd.gin_full = 1;
    return rt_finish(ctx, &nd, y, softmax_bwd);
}

/* ---- cross_entropy ------------------------------------------------------ */
static void ce_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const float *x = nd->in[0]->data, *lse = nd->saved[0];
    const int64_t *t = nd->in[1]->data;
    int64_t R = nd->iv[0], C = nd->iv[1], ign = nd->iv[2], nvalid = nd->iv[3];
    if (!gin[0] || nvalid == 0)
        return;
    double gs = (double)gout[0][0] / (double)nvalid;
#pragma omp parallel for if (R * C > RT_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        if (t[r] == ign)
            continue;
        for (int64_t c = 0; c < C; c++) {
            double p = exp((double)x[r * C + c] - lse[r]);
            gin[0][r * C + c] = (float)(gs * (p - (c == t[r] ? 1.0 : 0.0)));
        }
    }
}

np_tensor *np_cross_entropy(np_ctx *ctx, np_tensor *logits, np_tensor *targets, int64_t ignore_index)
{
    static const char *api = "Functional.cross_entropy";
    if (!logits || !targets || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, logits, api, "input"))
        return NULL;
    if (targets->dtype != NP_INT64)
        return rt_fail(ctx, NP_ERR_DTYPE, api, "%s: target must be int64, got %s", api, np_dtype_name(targets->dtype));
    if (logits->ndim < 2)
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: input must be (N, C), got rank %d", api, logits->ndim);
    int64_t C = logits->shape[logits->ndim - 1], R = C ? logits->numel / C : 0;
    if (targets->numel != R)
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: %lld targets for %lld rows of logits", api,
                       (long long)targets->numel, (long long)R);
    const int64_t *t = targets->data;
    int64_t nvalid = 0;
    for (int64_t r = 0; r < R; r++) {
        if (t[r] == ignore_index)
            continue;
        if (t[r] < 0 || t[r] >= C)
            return rt_fail(ctx, NP_ERR_ARG, api, "%s: target %lld at row %lld outside [0, %lld)", api,
                           (long long)t[r], (long long)r, (long long)C);
        nvalid++;
    }
    np_tensor *y = rt_new(ctx, NP_FLOAT32, 0, NULL);
    float *lse = rt_alloc(ctx, (size_t)R * sizeof(float) + 1);
    double *rl = rt_alloc(ctx, (size_t)R * sizeof(double) + 1);
    if (!y || !lse || !rl)
        return NULL;
    const float *x = logits->data;
#pragma omp parallel for if (R * C > RT_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * C;
        float mx = -INFINITY;
        for (int64_t c = 0; c < C; c++)
            if (xr[c] > mx || isnan(xr[c]))
                mx = xr[c];
        double s = 0.0;
        for (int64_t c = 0; c < C; c++)
            s += exp((double)xr[c] - mx);
        double l = mx + log(s);
        lse[r] = (float)l;
        rl[r] = t[r] == ignore_index ? 0.0 : l - xr[t[r]];
    }
    double tot = 0.0;
    for (int64_t r = 0; r < R; r++)
        tot += rl[r];
    ((float *)y->data)[0] = nvalid ? (float)(tot / (double)nvalid) : NAN;
    np_tensor *in[2] = {logits, targets};
    rt_node nd;
    rt_node_init(ctx, &nd, RT_OP_CROSS_ENTROPY, in, 2);
    rt_node_scalar(&nd, "ignore_index", (double)ignore_index);
    nd.saved[0] = lse;
    nd.iv[0] = R;
    nd.iv[1] = C;
    nd.iv[2] = ignore_index;
    nd.iv[3] = nvalid;
    return rt_finish(ctx, &nd, y, ce_bwd);
}

/* ---- embedding ----------------------------------------------------------- */
static int64_t idx_at(const np_tensor *idx, int64_t i)
{
    return idx->dtype == NP_INT64 ? ((const int64_t *)idx->data)[i] : ((const int32_t *)idx->data)[i];
}

static void embedding_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const np_tensor *idx = nd->in[0];
    int64_t C = nd->iv[0], R = idx->numel;
    int overwrite = (int)nd->iv[1];
    if (!gin[1])
        return;
    float *dw = gin[1];
    const float *g = gout[0];
    int64_t nblk = (C + 15) / 16;
#pragma omp parallel for if (R * C > RT_PAR_MIN)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t c0 = b * 16, cn = C - c0 < 16 ? C - c0 : 16;
        for (int64_t r = 0; r < R; r++) {
            int64_t v = idx_at(idx, r);
            for (int64_t j = 0; j < cn; j++) {
                if (overwrite)
                    dw[v * C + c0 + j] = g[r * C + c0 + j];
                else
                    dw[v * C + c0 + j] += g[r * C + c0 + j];
            }
        }
    }
}

np_tensor *np_embedding(np_ctx *ctx, np_tensor *idx, np_tensor *weight)
{
    static const char *api = "Functional.embedding";
    if (!idx || !weight || ctx->err.status)
        return NULL;
    if (idx->dtype != NP_INT64 && idx->dtype != NP_INT32)
        return rt_fail(ctx, NP_ERR_DTYPE, api, "%s: input must be int64 or int32, got %s", api, np_dtype_name(idx->dtype));
    if (!rt_need_float(ctx, weight, api, "weight"))
        return NULL;
    if (weight->ndim != 2 || idx->ndim >= NP_MAX_DIMS)
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: weight must be (V, C)", api);
    int64_t V = weight->shape[0], C = weight->shape[1];
    for (int64_t i = 0; i < idx->numel; i++) {
        int64_t v = idx_at(idx, i);
        if (v < 0 || v >= V)
            return rt_fail(ctx, NP_ERR_ARG, api, "%s: index %lld at position %lld outside [0, %lld)", api,
                           (long long)v, (long long)i, (long long)V);
    }
    int64_t shape[NP_MAX_DIMS];
    memcpy(shape, idx->shape, sizeof shape);
    shape[idx->ndim] = C;
    np_tensor *y = rt_new(ctx, weight->dtype, idx->ndim + 1, shape);
    if (!y)
        return NULL;
    const float *w = weight->data;
    float *yd = y->data;
#pragma omp parallel for if (idx->numel * C > RT_PAR_EW)
    for (int64_t i = 0; i < idx->numel; i++)
        memcpy(yd + i * C, w + idx_at(idx, i) * C, (size_t)C * sizeof(float));
    np_tensor *in[2] = {idx, weight};
    rt_node nd;
    rt_node_init(ctx, &nd, RT_OP_EMBEDDING, in, 2);
    nd.iv[0] = C;
    nd.iv[1] = ctx->fault == NP_FAULT_EMBEDDING_BWD_OVERWRITE;
    return rt_finish(ctx, &nd, y, embedding_bwd);
}
