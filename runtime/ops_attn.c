/* runtime/ops_attn.c - Functional.scaled_dot_product_attention: q, k, v
 * (B, H, T, D), softmax(q k^T * scale [+ causal mask]) v in one fused kernel
 * (its inner matmuls and softmax are not events). Per (b, h) head the
 * products Q K^T, P V and, backward, dO V^T, dS K, dS^T Q, P^T dO are
 * single-threaded cblas_sgemm calls (causal scores in blocks of 32 query
 * rows that skip the masked key columns), OpenMP over heads, so the bits do
 * not depend on the thread count. The same kernel serves cpu and npu-sim
 * (the npu-sim blocked GEMM is for linear, matmul and conv2d). Under autocast: q, k, v rounded, scores and
 * probabilities rounded to the low dtype (as the matmul outputs/inputs of the
 * unfused form would be), softmax in float32, output rounded. */
#include <math.h>
#include <string.h>

#include <cblas.h>

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

#define ATTN_RB 32 /* query rows per score block (causal: fewer key columns) */

/* Columns of the score rows [r0, r1) that can be non-zero. */
static int64_t block_cols(const attn_geom *g, int64_t r1)
{
    if (!g->causal)
        return g->T;
    int64_t L = r1 + g->extra;
    return L < g->T ? L : g->T;
}

/* S (T, T) = X (T, D) Y^T per row block, only the columns a block can see. */
static void head_scores(const attn_geom *g, const float *X, const float *Y, float *S)
{
    int64_t T = g->T, D = g->D;
    for (int64_t r0 = 0; r0 < T; r0 += ATTN_RB) {
        int64_t r1 = r0 + ATTN_RB < T ? r0 + ATTN_RB : T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(r1 - r0), (int)block_cols(g, r1),
                    (int)D, 1.0f, X + r0 * D, (int)D, Y, (int)D, 0.0f, S + r0 * T, (int)T);
    }
}

static void sdpa_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const attn_geom *g = nd->saved[4];
    const float *q = nd->saved[0], *k = nd->saved[1], *v = nd->saved[2], *P = nd->saved[3];
    const float *go = gout[0];
    int64_t BH = g->BH, T = g->T, D = g->D;
    float *dsb = rt_alloc(ctx, (size_t)(BH * T * T) * sizeof(float) + 1);
    float *dq = gin[0], *dk = gin[1], *dv = gin[2];
    if (!dsb)
        return;
    float sc = (float)g->scale;
#pragma omp parallel for schedule(dynamic) if (BH * T * T * D > RT_PAR_MIN * 16)
    for (int64_t h = 0; h < BH; h++) {
        const float *qh = q + h * T * D, *kh = k + h * T * D, *vh = v + h * T * D;
        const float *Ph = P + h * T * T, *goh = go + h * T * D;
        float *ds = dsb + h * T * T;
        head_scores(g, goh, vh, ds); /* dP = dO V^T */
        for (int64_t t = 0; t < T; t++) {
            int64_t L = row_len(g, t);
            const float *p = Ph + t * T;
            float *dr = ds + t * T;
            double dot = 0.0;
            for (int64_t j = 0; j < L; j++)
                dot += (double)p[j] * dr[j];
            for (int64_t j = 0; j < L; j++)
                dr[j] = (float)((double)p[j] * ((double)dr[j] - dot)) * sc;
            for (int64_t j = L; j < T; j++)
                dr[j] = 0.0f;
        }
        if (dq)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)D, (int)T, 1.0f, ds,
                        (int)T, kh, (int)D, 0.0f, dq + h * T * D, (int)D);
        if (dk)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)T, (int)D, (int)T, 1.0f, ds,
                        (int)T, qh, (int)D, 0.0f, dk + h * T * D, (int)D);
        if (dv)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)T, (int)D, (int)T, 1.0f, Ph,
                        (int)T, goh, (int)D, 0.0f, dv + h * T * D, (int)D);
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
    if (!y || !qd || !kd || !vd || !P)
        return NULL;
    rt_softmax_row_fn softmax_row = ctx->k.softmax_row;
    float scf = (float)g->scale;
    float *yd = y->data;
#pragma omp parallel for schedule(dynamic) if (BH * T * T * D > RT_PAR_MIN * 16)
    for (int64_t h = 0; h < BH; h++) {
        float *Ph = P + h * T * T, *oh = yd + h * T * D;
        head_scores(g, qd + h * T * D, kd + h * T * D, Ph);
        for (int64_t t = 0; t < T; t++) {
            int64_t L = row_len(g, t);
            float *p = Ph + t * T;
            if (ac == NP_FLOAT32)
                for (int64_t j = 0; j < L; j++)
                    p[j] *= scf;
            else
                for (int64_t j = 0; j < L; j++)
                    p[j] = np_round_to(ac, np_round_to(ac, p[j]) * scf);
            softmax_row(p, p, L);
            if (ac != NP_FLOAT32)
                for (int64_t j = 0; j < L; j++)
                    p[j] = np_round_to(ac, p[j]);
            for (int64_t j = L; j < T; j++)
                p[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)D, (int)T, 1.0f, Ph,
                    (int)T, vd + h * T * D, (int)D, 0.0f, oh, (int)D);
        if (odt != NP_FLOAT32)
            for (int64_t i = 0; i < T * D; i++)
                oh[i] = np_round_to(odt, oh[i]);
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
    nd.gin_full = 7;
    return rt_finish(ctx, &nd, y, sdpa_bwd);
}
