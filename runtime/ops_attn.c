/* runtime/ops_attn.c - Functional.scaled_dot_product_attention: q, k, v
 * (B, H, T, D), softmax(q k^T * scale [+ causal mask]) v in one fused kernel
 * (its inner matmuls and softmax are not events). Loops are ordered so the
 * innermost runs over contiguous memory; OpenMP over (b, h, t) rows forward
 * and over (b, h) heads backward. Under autocast: q, k, v rounded, scores and
 * probabilities rounded to the low dtype (as the matmul outputs/inputs of the
 * unfused form would be), softmax in float32, output rounded. */
#include <math.h>
#include <string.h>

#include "rt_internal.h"

typedef struct attn_geom {
    int64_t BH, T, D;
    int causal, extra; /* extra = 1 with the off-by-one fault */
    double scale;
} attn_geom;

static int64_t row_len(const attn_geom *g, int64_t t)
{
    if (!g->causal)
        return g->T;
    int64_t L = t + 1 + g->extra;
    return L < g->T ? L : g->T;
}

/* dst (D, T) per head from src (T, D). */
static void transpose_heads(const float *src, float *dst, int64_t BH, int64_t T, int64_t D)
{
#pragma omp parallel for if (BH * T * D > RT_PAR_MIN)
    for (int64_t h = 0; h < BH; h++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t d = 0; d < D; d++)
                dst[h * T * D + d * T + t] = src[h * T * D + t * D + d];
}

static void sdpa_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const attn_geom *g = nd->saved[4];
    const float *q = nd->saved[0], *k = nd->saved[1], *v = nd->saved[2], *P = nd->saved[3];
    const float *go = gout[0];
    int64_t BH = g->BH, T = g->T, D = g->D;
    float *vt = rt_alloc(ctx, (size_t)(BH * T * D) * sizeof(float) + 1);
    float *scr = rt_alloc(ctx, (size_t)(BH * 2 * T) * sizeof(float) + 1);
    float *dq = gin[0], *dk = gin[1], *dv = gin[2];
    if (!vt || !scr)
        return;
    transpose_heads(v, vt, BH, T, D);
    float sc = (float)g->scale;
#pragma omp parallel for schedule(dynamic)
    for (int64_t h = 0; h < BH; h++) {
        float *dp = scr + h * 2 * T, *ds = dp + T;
        const float *qh = q + h * T * D, *kh = k + h * T * D, *vth = vt + h * T * D;
        for (int64_t t = 0; t < T; t++) {
            int64_t L = row_len(g, t);
            const float *p = P + (h * T + t) * T, *gr = go + (h * T + t) * D;
            for (int64_t j = 0; j < L; j++)
                dp[j] = 0.0f;
            for (int64_t d = 0; d < D; d++) {
                float gd = gr[d];
                const float *vrow = vth + d * T;
                for (int64_t j = 0; j < L; j++)
                    dp[j] += gd * vrow[j];
            }
            double dot = 0.0;
            for (int64_t j = 0; j < L; j++)
                dot += (double)p[j] * dp[j];
            for (int64_t j = 0; j < L; j++)
                ds[j] = (float)((double)p[j] * ((double)dp[j] - dot)) * sc;
            if (dq) {
                float *dqr = dq + (h * T + t) * D;
                for (int64_t j = 0; j < L; j++) {
                    float s = ds[j];
                    const float *krow = kh + j * D;
                    for (int64_t d = 0; d < D; d++)
                        dqr[d] += s * krow[d];
                }
            }
            if (dk) {
                const float *qr = qh + t * D;
                for (int64_t j = 0; j < L; j++) {
                    float s = ds[j];
                    float *dkr = dk + (h * T + j) * D;
                    for (int64_t d = 0; d < D; d++)
                        dkr[d] += s * qr[d];
                }
            }
            if (dv) {
                for (int64_t j = 0; j < L; j++) {
                    float pj = p[j];
                    float *dvr = dv + (h * T + j) * D;
                    for (int64_t d = 0; d < D; d++)
                        dvr[d] += pj * gr[d];
                }
            }
        }
    }
}

np_tensor *np_sdpa(np_ctx *ctx, np_tensor *q, np_tensor *k, np_tensor *v, int is_causal, double scale)
{
    static const char *api = "Functional.scaled_dot_product_attention";
    if (!q || !k || !v || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, q, api, "query") || !rt_need_float(ctx, k, api, "key") ||
        !rt_need_float(ctx, v, api, "value"))
        return NULL;
    if (q->ndim != 4 || !np_tensor_same_shape(q, k) || !np_tensor_same_shape(q, v))
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: query, key and value must all be (B, H, T, D) of one shape", api);
    attn_geom *g = rt_alloc(ctx, sizeof *g);
    if (!g)
        return NULL;
    g->BH = q->shape[0] * q->shape[1];
    g->T = q->shape[2];
    g->D = q->shape[3];
    g->causal = is_causal != 0;
    g->extra = ctx->fault == NP_FAULT_ATTN_MASK_OFF_BY_ONE;
    double sc = scale > 0.0 ? scale : 1.0 / sqrt((double)g->D);
    if (ctx->fault == NP_FAULT_ATTN_SCALE)
        sc /= sqrt((double)g->D);
    g->scale = (float)sc;
    np_dtype ac = rt_ac(ctx);
    np_dtype odt = ac != NP_FLOAT32 ? ac : rt_promote(rt_promote(q->dtype, k->dtype), v->dtype);
    np_tensor *y = rt_new(ctx, odt, 4, q->shape);
    const float *qd = rt_rounded(ctx, q, ac), *kd = rt_rounded(ctx, k, ac), *vd = rt_rounded(ctx, v, ac);
    int64_t BH = g->BH, T = g->T, D = g->D;
    float *P = rt_alloc(ctx, (size_t)(BH * T * T) * sizeof(float) + 1);
    float *kt = rt_alloc(ctx, (size_t)(BH * T * D) * sizeof(float) + 1);
    if (!y || !qd || !kd || !vd || !P || !kt)
        return NULL;
    transpose_heads(kd, kt, BH, T, D);
    int nomax = ctx->fault == NP_FAULT_SOFTMAX_FP16_NOMAX;
    float scf = (float)g->scale;
    float *yd = y->data;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < BH * T; r++) {
        int64_t h = r / T, t = r % T, L = row_len(g, t);
        float *p = P + r * T;
        const float *qr = qd + r * D, *kth = kt + h * T * D, *vh = vd + h * T * D;
        for (int64_t j = 0; j < L; j++)
            p[j] = 0.0f;
        for (int64_t d = 0; d < D; d++) {
            float qv = qr[d];
            const float *krow = kth + d * T;
            for (int64_t j = 0; j < L; j++)
                p[j] += qv * krow[j];
        }
        for (int64_t j = 0; j < L; j++)
            p[j] = np_round_to(ac, np_round_to(ac, p[j]) * scf);
        rt_softmax_row(p, p, L, nomax);
        for (int64_t j = 0; j < L; j++)
            p[j] = np_round_to(ac, p[j]);
        for (int64_t j = L; j < T; j++)
            p[j] = 0.0f;
        float *o = yd + r * D;
        for (int64_t d = 0; d < D; d++)
            o[d] = 0.0f;
        for (int64_t j = 0; j < L; j++) {
            float pj = p[j];
            const float *vrow = vh + j * D;
            for (int64_t d = 0; d < D; d++)
                o[d] += pj * vrow[d];
        }
        if (odt != NP_FLOAT32)
            for (int64_t d = 0; d < D; d++)
                o[d] = np_round_to(odt, o[d]);
    }
    np_tensor *in[3] = {q, k, v};
    rt_node nd;
    rt_node_init(ctx, &nd, RT_OP_SDPA, in, 3);
    if (ac != NP_FLOAT32)
        nd.gdt[0] = nd.gdt[1] = nd.gdt[2] = ac;
    rt_node_scalar(&nd, "is_causal", g->causal);
    rt_node_scalar(&nd, "scale", scale > 0.0 ? scale : 1.0 / sqrt((double)g->D));
    nd.saved[0] = (void *)qd;
    nd.saved[1] = (void *)kd;
    nd.saved[2] = (void *)vd;
    nd.saved[3] = P;
    nd.saved[4] = g;
    return rt_finish(ctx, &nd, y, sdpa_bwd);
}
