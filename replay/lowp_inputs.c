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

np_status rp_lowp_linear_backward(np_op_call *oc, int lowp, int grad_lowp, np_error *err)
{
    np_op_tensor *x = &oc->in[0], *w = &oc->in[1], *g = &oc->gout[0];
    if (!x->data || !w->data || !g->data || w->ndim != 2 || w->shape[1] <= 0 || w->shape[0] <= 0 ||
        x->numel % w->shape[1] || g->numel != x->numel / w->shape[1] * w->shape[0])
        return np_op_run(oc, NP_OP_BACKWARD, err);
    np_lowp f = (np_lowp)lowp;
    int64_t I = w->shape[1], O = w->shape[0], R = x->numel / I;
    double *xh = x->data, *wh = w->data, *gh = g->data;
    np_lowp gf = (np_lowp)grad_lowp;
    double *gq_o = quant_copy(g, R, O, 1, gf), *wq_o = quant_copy(w, 1, O, I, f);
    double *gq_r = quant_copy(g, 1, R, O, gf), *xq_r = quant_copy(x, 1, R, I, f);
    double *k0 = malloc((size_t)(2 * oc->gin[0].numel) * sizeof(double) + 1);
    double *k2 = malloc((size_t)(2 * oc->gin[2].numel) * sizeof(double) + 1);
    np_status st = NP_ERR_NOMEM;
    if (!gq_o || !wq_o || !gq_r || !xq_r || !k0 || !k2) {
        np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory quantizing the backward GEMMs' operands");
        goto out;
    }
    /* the bias gradient: the gradient as it arrived */
    if ((st = np_op_run(oc, NP_OP_BACKWARD, err)))
        goto out;
    keep_gin(&oc->gin[2], k2);
    /* dX = Q_O(dY) Q_O(W) */
    w->data = wq_o;
    g->data = gq_o;
    st = np_op_run(oc, NP_OP_BACKWARD, err);
    w->data = wh;
    if (st)
        goto out;
    keep_gin(&oc->gin[0], k0);
    /* dW = Q_R(dY)^T Q_R(X) */
    x->data = xq_r;
    g->data = gq_r;
    st = np_op_run(oc, NP_OP_BACKWARD, err);
    x->data = xh;
    if (st)
        goto out;
    put_gin(&oc->gin[0], k0);
    put_gin(&oc->gin[2], k2);
out:
    x->data = xh;
    w->data = wh;
    g->data = gh;
    free(gq_o);
    free(wq_o);
    free(gq_r);
    free(xq_r);
    free(k0);
    free(k2);
    return st;
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
    np_lowp f = (np_lowp)lowp, gf = (np_lowp)grad_lowp;
    double *ah = a->data, *bh = b->data, *gh = g->data;
    double *gq_n = quant_copy(g, nbat * M, N, 1, gf), *bq_n = quant_copy(b, nb * K, N, 1, f);
    double *gq_m = quant_copy(g, nb, mr, N, gf), *aq_m = quant_copy(a, nb, mr, K, f);
    double *k0 = malloc((size_t)(2 * oc->gin[0].numel) * sizeof(double) + 1);
    np_status st = NP_ERR_NOMEM;
    if (!gq_n || !bq_n || !gq_m || !aq_m || !k0) {
        np_error_set(err, NP_ERR_NOMEM, NULL, NULL, "out of memory quantizing the backward GEMMs' operands");
        goto out;
    }
    /* dA = Q_N(dY) Q_N(B)^T */
    b->data = bq_n;
    g->data = gq_n;
    st = np_op_run(oc, NP_OP_BACKWARD, err);
    b->data = bh;
    if (st)
        goto out;
    keep_gin(&oc->gin[0], k0);
    /* dB = Q_M(A)^T Q_M(dY) */
    a->data = aq_m;
    g->data = gq_m;
    st = np_op_run(oc, NP_OP_BACKWARD, err);
    if (st)
        goto out;
    put_gin(&oc->gin[0], k0);
out:
    a->data = ah;
    b->data = bh;
    g->data = gh;
    free(gq_n);
    free(bq_n);
    free(gq_m);
    free(aq_m);
    free(k0);
    return st;
}
