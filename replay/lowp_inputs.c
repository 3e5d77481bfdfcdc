/* replay/lowp_inputs.c - the GEMM operands of a run of precision mxfp8 or
 * hif8 quantized as the runtime quantized them (runtime/lowp.c): the dump
 * holds the operands as the program passed them, the kernel multiplied
 * their 8-bit images, so the float64 recompute starts from the same images
 * (docs/RUNTIME.md, "Low-precision GEMM formats"); a linear whose backward
 * GEMMs were quantized too (kwargs lowp_backward) is recomputed with the
 * runtime's recipe (rp_lowp_linear_backward). */
#include <stdlib.h>

#include "nprobe/lowp.h"
#include "replay_internal.h"

static int quant(np_op_tensor *t, int64_t K, int64_t inner, np_lowp f)
{
    if (!t->data || K <= 0 || inner <= 0 || t->numel % (K * inner))
        return 0;
    float *b = malloc((size_t)t->numel * sizeof *b);
    if (!b)
        return -1;
    for (int64_t i = 0; i < t->numel; i++)
        b[i] = (float)t->data[i];
    np_lowp_quantize(b, b, t->numel / (K * inner), K, inner, f, 0, 0, NULL);
    for (int64_t i = 0; i < t->numel; i++)
        t->data[i] = b[i];
    free(b);
    return 0;
}

int rp_lowp_inputs(np_op_call *oc, int lowp)
{
    if (lowp <= NP_LOWP_NONE || lowp >= NP_LOWP_COUNT || oc->n_in < 2)
        return 0;
    np_op_tensor *a = &oc->in[0], *b = &oc->in[1];
    if (a->ndim < 1 || b->ndim < 2)
        return 0;
    int64_t K = a->shape[a->ndim - 1];
    if (oc->info->op == NP_OP_LINEAR) /* x (..., I), w (O, I): both along I */
        return quant(a, K, 1, (np_lowp)lowp) || quant(b, K, 1, (np_lowp)lowp) ? -1 : 0;
    if (oc->info->op == NP_OP_MATMUL) /* a (..., M, K), b (..., K, N) */
        return quant(a, K, 1, (np_lowp)lowp) || quant(b, K, b->shape[b->ndim - 1], (np_lowp)lowp) ? -1 : 0;
    return 0;
}

/* a quantized copy of t's data viewed as (outer, K, inner); NULL: no memory */
static double *quant_copy(const np_op_tensor *t, int64_t outer, int64_t K, int64_t inner, np_lowp f)
{
    int64_t n = outer * K * inner;
    float *b = calloc((size_t)n + 1, sizeof *b);
    double *d = malloc((size_t)n * sizeof *d + 1);
    if (!b || !d) {
        free(b);
        free(d);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        b[i] = (float)t->data[i];
    np_lowp_quantize(b, b, outer, K, inner, f, 0, 0, NULL);
    for (int64_t i = 0; i < n; i++)
        d[i] = b[i];
    free(b);
    return d;
}

/* gin[i]'s data and magnitudes into keep (2 * numel doubles) */
static void keep_gin(const np_op_tensor *g, double *keep)
{
    for (int64_t j = 0; g->data && j < g->numel; j++) {
        keep[j] = g->data[j];
        keep[g->numel + j] = g->mag ? g->mag[j] : 0;
    }
}

static void put_gin(np_op_tensor *g, const double *keep)
{
    for (int64_t j = 0; g->data && j < g->numel; j++) {
        g->data[j] = keep[j];
        if (g->mag)
            g->mag[j] = keep[g->numel + j];
    }
}

/* One backward GEMM of a linear or matmul: the operand `op` and the incoming
 * gradient, each viewed as (outer, K, inner) and quantized along K. */
typedef struct lowp_gemm {
    np_op_tensor *op;
    int64_t op_dims[3], g_dims[3];
} lowp_gemm;

/* The backward of a two-GEMM op with each GEMM's operands quantized: gin[0]
 * from `first` (the input's gradient), the other gradients from `second`,
 * gin[plain] (>= 0: the bias) from the gradient as it arrived. The operands
 * are put back as they were; np_op_run's status. */
static np_status lowp_backward2(np_op_call *oc, const lowp_gemm *first, const lowp_gemm *second,
                                int plain, np_lowp f, np_lowp gf, np_error *err)
{
    np_op_tensor *g = &oc->gout[0], *o1 = first->op, *o2 = second->op;
    const int64_t *d1 = first->op_dims, *e1 = first->g_dims, *d2 = second->op_dims, *e2 = second->g_dims;
    double *o1h = o1->data, *o2h = o2->data, *gh = g->data;
    double *g1 = quant_copy(g, e1[0], e1[1], e1[2], gf), *q1 = quant_copy(o1, d1[0], d1[1], d1[2], f);
    double *g2 = quant_copy(g, e2[0], e2[1], e2[2], gf), *q2 = quant_copy(o2, d2[0], d2[1], d2[2], f);
    double *k0 = malloc((size_t)(2 * oc->gin[0].numel) * sizeof(double) + 1);
    double *kp = plain >= 0 ? malloc((size_t)(2 * oc->gin[plain].numel) * sizeof(double) + 1) : NULL;
    np_status st = NP_ERR_NOMEM;
    if (!g1 || !q1 || !g2 || !q2 || !k0 || (plain >= 0 && !kp)) {
        np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory quantizing the backward GEMMs' operands");
        goto out;
    }
    if (plain >= 0) {
        if ((st = np_op_run(oc, NP_OP_BACKWARD, err)))
            goto out;
        keep_gin(&oc->gin[plain], kp);
    }
    o1->data = q1;
    g->data = g1;
    st = np_op_run(oc, NP_OP_BACKWARD, err);
    o1->data = o1h;
    if (st)
        goto out;
    keep_gin(&oc->gin[0], k0);
    o2->data = q2;
    g->data = g2;
    if ((st = np_op_run(oc, NP_OP_BACKWARD, err)))
        goto out;
    put_gin(&oc->gin[0], k0);
    if (plain >= 0)
        put_gin(&oc->gin[plain], kp);
out:
    o1->data = o1h;
    o2->data = o2h;
    g->data = gh;
    free(g1);
    free(q1);
    free(g2);
    free(q2);
    free(k0);
    free(kp);
    return st;
}

np_status rp_lowp_linear_backward(np_op_call *oc, int lowp, int grad_lowp, np_error *err)
{
    np_op_tensor *x = &oc->in[0], *w = &oc->in[1], *g = &oc->gout[0];
    if (!x->data || !w->data || !g->data || w->ndim != 2 || w->shape[1] <= 0 || w->shape[0] <= 0 ||
        x->numel % w->shape[1] || g->numel != x->numel / w->shape[1] * w->shape[0])
        return np_op_run(oc, NP_OP_BACKWARD, err);
    int64_t I = w->shape[1], O = w->shape[0], R = x->numel / I;
    /* dX = Q_O(dY) Q_O(W); dW = Q_R(dY)^T Q_R(X); the bias gradient from dY */
    lowp_gemm dx = {w, {1, O, I}, {R, O, 1}}, dw = {x, {1, R, I}, {1, R, O}};
    return lowp_backward2(oc, &dx, &dw, 2, (np_lowp)lowp, (np_lowp)grad_lowp, err);
}

np_status rp_lowp_matmul_backward(np_op_call *oc, int lowp, int grad_lowp, np_error *err)
{
    np_op_tensor *a = &oc->in[0], *b = &oc->in[1], *g = &oc->gout[0];
    if (!a->data || !b->data || !g->data || a->ndim < 2 || b->ndim < 2)
        return np_op_run(oc, NP_OP_BACKWARD, err);
    int64_t M = a->shape[a->ndim - 2], K = a->shape[a->ndim - 1], N = b->shape[b->ndim - 1];
    if (M <= 0 || K <= 0 || N <= 0 || a->numel % (M * K) || g->numel != a->numel / K * N)
        return np_op_run(oc, NP_OP_BACKWARD, err);
    int shared = b->ndim == 2;
    int64_t nbat = a->numel / (M * K), nb = shared ? 1 : nbat, mr = shared ? nbat * M : M;
    /* dA = Q_N(dY) Q_N(B)^T; dB = Q_M(A)^T Q_M(dY) */
    lowp_gemm da = {b, {nb * K, N, 1}, {nbat * M, N, 1}}, db = {a, {nb, mr, K}, {nb, mr, N}};
    return lowp_backward2(oc, &da, &db, -1, (np_lowp)lowp, (np_lowp)grad_lowp, err);
}
