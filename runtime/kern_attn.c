/* runtime/kern_attn.c - float32 kernels of scaled_dot_product_attention
 * (kernels.h): softmax(q k^T * scale [+ causal mask]) v, fused. Per (b, h)
 * head the products Q K^T, P V and, backward, dO V^T, dS K, dS^T Q, P^T dO
 * are single-threaded cblas_sgemm calls (causal scores in blocks of 32 query
 * rows that skip the masked key columns), OpenMP over heads, so the bits do
 * not depend on the thread count. Under autocast (ac != float32) scores and
 * probabilities are rounded to ac as the matmul outputs/inputs of the
 * unfused form would be, softmax runs in float32, and the output is rounded
 * to its dtype. No context and no fault here. */
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "kernels.h"
#include "rt_internal.h"

/* Keys a causal query row t sees: [0, t + 1 + diagonal), at most T. */
static int64_t row_len(const rt_attn_geom *g, int64_t t)
{
    if (!g->causal)
        return g->T;
    int64_t L = t + 1 + g->diagonal;
    return L < g->T ? L : g->T;
}

#define ATTN_RB 32 /* query rows per score block (causal: fewer key columns) */

/* Columns of the score rows [r0, r1) that can be non-zero. */
static int64_t block_cols(const rt_attn_geom *g, int64_t r1)
{
    if (!g->causal)
        return g->T;
    int64_t L = r1 + g->diagonal;
    return L < g->T ? L : g->T;
}

/* S (T, T) = X (T, D) Y^T per row block, only the columns a block can see. */
static void head_scores(const rt_attn_geom *g, const float *X, const float *Y, float *S)
{
    int64_t T = g->T, D = g->D;
    for (int64_t r0 = 0; r0 < T; r0 += ATTN_RB) {
        int64_t r1 = r0 + ATTN_RB < T ? r0 + ATTN_RB : T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(r1 - r0), (int)block_cols(g, r1),
                    (int)D, 1.0f, X + r0 * D, (int)D, Y, (int)D, 0.0f, S + r0 * T, (int)T);
    }
}

/* Scores of one head (T, T) in place -> probabilities, masked columns 0. */
static void head_probs(const rt_attn_geom *g, float *Ph, np_dtype ac, rt_softmax_row_fn row)
{
    float scf = (float)g->scale;
    for (int64_t t = 0; t < g->T; t++) {
        int64_t L = row_len(g, t);
        float *p = Ph + t * g->T;
        if (ac == NP_FLOAT32)
            for (int64_t j = 0; j < L; j++)
                p[j] *= scf;
        else
            for (int64_t j = 0; j < L; j++)
                p[j] = np_round_to(ac, np_round_to(ac, p[j]) * scf);
        row(p, p, L);
        if (ac != NP_FLOAT32)
            for (int64_t j = 0; j < L; j++)
                p[j] = np_round_to(ac, p[j]);
        for (int64_t j = L; j < g->T; j++)
            p[j] = 0.0f;
    }
}

void rt_sdpa_forward(float *out, float *P, const float *q, const float *k, const float *v,
                     const rt_attn_geom *g, np_dtype ac, np_dtype odt, rt_softmax_row_fn row)
{
    int64_t BH = g->BH, T = g->T, D = g->D;
#pragma omp parallel for schedule(dynamic) if (BH * T * T * D > RT_PAR_MIN * 16)
    for (int64_t h = 0; h < BH; h++) {
        float *Ph = P + h * T * T, *oh = out + h * T * D;
        head_scores(g, q + h * T * D, k + h * T * D, Ph);
        head_probs(g, Ph, ac, row);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)T, (int)D, (int)T, 1.0f, Ph,
                    (int)T, v + h * T * D, (int)D, 0.0f, oh, (int)D);
        if (odt != NP_FLOAT32)
            for (int64_t i = 0; i < T * D; i++)
                oh[i] = np_round_to(odt, oh[i]);
    }
}

void rt_sdpa_backward(float *dq, float *dk, float *dv, float *dscores, const float *dout, const float *q,
                      const float *k, const float *v, const float *P, const rt_attn_geom *g)
{
    int64_t BH = g->BH, T = g->T, D = g->D;
    float sc = (float)g->scale;
#pragma omp parallel for schedule(dynamic) if (BH * T * T * D > RT_PAR_MIN * 16)
    for (int64_t h = 0; h < BH; h++) {
        const float *qh = q + h * T * D, *kh = k + h * T * D, *vh = v + h * T * D;
        const float *Ph = P + h * T * T, *goh = dout + h * T * D;
        float *ds = dscores + h * T * T;
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
