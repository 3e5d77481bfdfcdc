/* ops/ref_dense.c - float64 reference kernels of the dense ops (linear,
 * matmul, conv2d, max_pool2d, embedding) and their registry entries
 * (include/internal/nprobe/ops.h). Context-free: plain arrays in, plain arrays out.
 * GEMMs are np_ref_dgemm (gemm64.c: OpenBLAS cblas_dgemm, the caller pins
 * OpenBLAS to one thread, as the runtime does, so the bits do not depend on
 * a thread count; or nprobe's own kernel with NPROBE_GEMM=own); every
 * other loop is serial or parallel over outputs. */
#include <math.h>
#include <string.h>

#include "ops_ref_internal.h"

/* ---- linear --------------------------------------------------------------- */

void np_ref_linear_forward(double *out, const double *inp, const double *weight,
                           const double *bias, int64_t M, int64_t K, int64_t N)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            out[i * N + j] = bias ? bias[j] : 0.0;
    if (M > 0 && N > 0 && K > 0)
        np_ref_dgemm(0, 1, M, N, K, inp, K, weight, K, 1.0, out, N);
}

void np_ref_linear_backward(double *dinp, double *dweight, double *dbias, const double *dout,
                            const double *inp, const double *weight, int64_t M, int64_t K,
                            int64_t N)
{
    if (dinp) {
        memset(dinp, 0, (size_t)(M * K) * sizeof(double));
        if (N > 0)
            np_ref_dgemm(0, 0, M, K, N, dout, N, weight, K, 0.0, dinp, K);
    }
    if (dweight) {
        memset(dweight, 0, (size_t)(N * K) * sizeof(double));
        if (M > 0)
            np_ref_dgemm(1, 0, N, K, M, dout, N, inp, K, 0.0, dweight, K);
    }
    if (dbias)
        for (int64_t j = 0; j < N; j++) {
            double s = 0.0;
            for (int64_t i = 0; i < M; i++)
                s += dout[i * N + j];
            dbias[j] = s;
        }
}

np_status rt_ref_linear_shape(np_op_call *c, np_error *err)
{
    const np_op_tensor *x = &c->in[0], *w = &c->in[1], *b = &c->in[2];
    if (x->ndim < 1 || w->ndim != 2 || w->shape[1] != x->shape[x->ndim - 1] ||
        (b->data && (b->ndim != 1 || b->shape[0] != w->shape[0])))
        return np_error_set(err, NP_ERR_SHAPE, NULL, "linear",
                            "linear: expected input (..., K), weight (N, K), bias (N)");
    c->n_out = 1;
    rt_ref_set_shape(&c->out[0], x->ndim, x->shape);
    c->out[0].shape[x->ndim - 1] = w->shape[0];
    c->out[0].numel = np_op_numel(x->ndim, c->out[0].shape);
    return NP_OK;
}

void rt_ref_linear_fwd(np_op_call *c)
{
    int64_t K = c->in[1].shape[1], N = c->in[1].shape[0], M = K ? c->in[0].numel / K : 0;
    np_ref_linear_forward(c->out[0].data, c->in[0].data, c->in[1].data, c->in[2].data, M, K, N);
}

void rt_ref_linear_bwd(np_op_call *c)
{
    int64_t K = c->in[1].shape[1], N = c->in[1].shape[0], M = K ? c->in[0].numel / K : 0;
    np_ref_linear_backward(c->want_gin[0] ? c->gin[0].data : NULL,
                           c->want_gin[1] ? c->gin[1].data : NULL,
                           c->want_gin[2] && c->in[2].data ? c->gin[2].data : NULL,
                           c->gout[0].data, c->in[0].data, c->in[1].data, M, K, N);
}

/* ---- matmul ----------------------------------------------------------------- */

void np_ref_matmul_forward(double *out, const double *a, const double *b, int64_t Bt, int64_t M,
                           int64_t K, int64_t N, int b_batched)
{
    for (int64_t t = 0; t < Bt; t++) {
        const double *bt = b_batched ? b + t * K * N : b;
        if (K == 0) {
            memset(out + t * M * N, 0, (size_t)(M * N) * sizeof(double));
            continue;
        }
        np_ref_dgemm(0, 0, M, N, K, a + t * M * K, K, bt, N, 0.0, out + t * M * N, N);
    }
}

void np_ref_matmul_backward(double *da, double *db, const double *dout, const double *a,
                            const double *b, int64_t Bt, int64_t M, int64_t K, int64_t N,
                            int b_batched)
{
    if (db)
        memset(db, 0, (size_t)((b_batched ? Bt : 1) * K * N) * sizeof(double));
    for (int64_t t = 0; t < Bt; t++) {
        const double *bt = b_batched ? b + t * K * N : b;
        const double *go = dout + t * M * N;
        if (da && N > 0)
            np_ref_dgemm(0, 1, M, K, N, go, N, bt, N, 0.0, da + t * M * K, K);
        else if (da)
            memset(da + t * M * K, 0, (size_t)(M * K) * sizeof(double));
        if (db && M > 0)
            np_ref_dgemm(1, 0, K, N, M, a + t * M * K, K, go, N, 1.0,
                         db + (b_batched ? t * K * N : 0), N);
    }
}

/* a (..., M, K) @ b (..., K, N) with equal leading dims, or b (K, N). */
np_status rt_ref_matmul_shape(np_op_call *c, np_error *err)
{
    const np_op_tensor *a = &c->in[0], *b = &c->in[1];
    int ok = a->ndim >= 2 && b->ndim >= 2 && a->shape[a->ndim - 1] == b->shape[b->ndim - 2];
    if (ok && b->ndim > 2) {
        ok = b->ndim == a->ndim;
        for (int i = 0; ok && i < a->ndim - 2; i++)
            ok = a->shape[i] == b->shape[i];
    }
    if (!ok)
        return np_error_set(err, NP_ERR_UNSUPPORTED, NULL, "matmul",
                            "matmul: supported are a (..., M, K) @ b (K, N) or b (..., K, N) with "
                            "the same leading dimensions");
    c->n_out = 1;
    rt_ref_set_shape(&c->out[0], a->ndim, a->shape);
    c->out[0].shape[a->ndim - 1] = b->shape[b->ndim - 1];
    c->out[0].numel = np_op_numel(a->ndim, c->out[0].shape);
    return NP_OK;
}

static void matmul_dims(const np_op_call *c, int64_t *Bt, int64_t *M, int64_t *K, int64_t *N,
                        int *bb)
{
    const np_op_tensor *a = &c->in[0], *b = &c->in[1];
    *M = a->shape[a->ndim - 2];
    *K = a->shape[a->ndim - 1];
    *N = b->shape[b->ndim - 1];
    *Bt = np_op_numel(a->ndim - 2, a->shape);
    *bb = b->ndim > 2;
}

void rt_ref_matmul_fwd(np_op_call *c)
{
    int64_t Bt, M, K, N;
    int bb;
    matmul_dims(c, &Bt, &M, &K, &N, &bb);
    np_ref_matmul_forward(c->out[0].data, c->in[0].data, c->in[1].data, Bt, M, K, N, bb);
}

void rt_ref_matmul_bwd(np_op_call *c)
{
    int64_t Bt, M, K, N;
    int bb;
    matmul_dims(c, &Bt, &M, &K, &N, &bb);
    np_ref_matmul_backward(c->want_gin[0] ? c->gin[0].data : NULL,
                           c->want_gin[1] ? c->gin[1].data : NULL, c->gout[0].data,
                           c->in[0].data, c->in[1].data, Bt, M, K, N, bb);
}

/* ---- conv2d ------------------------------------------------------------------ */

static int64_t conv_out(int64_t n, int64_t k, int64_t stride, int64_t pad)
{
    return (n + 2 * pad - k) / stride + 1;
}

void np_ref_conv2d_forward(double *out, const double *inp, const double *weight,
                           const double *bias, int64_t B, int64_t C, int64_t H, int64_t W,
                           int64_t O, int64_t kh, int64_t kw, int64_t stride, int64_t pad)
{
    int64_t OH = conv_out(H, kh, stride, pad), OW = conv_out(W, kw, stride, pad);
#pragma omp parallel for collapse(2) if (B * O * OH * OW * C * kh * kw > (1 << 22))
    for (int64_t b = 0; b < B; b++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t y = 0; y < OH; y++)
                for (int64_t x = 0; x < OW; x++) {
                    double s = bias ? bias[o] : 0.0;
                    for (int64_t ci = 0; ci < C; ci++)
                        for (int64_t i = 0; i < kh; i++) {
                            int64_t iy = y * stride - pad + i;
                            if (iy < 0 || iy >= H)
                                continue;
                            for (int64_t j = 0; j < kw; j++) {
                                int64_t ix = x * stride - pad + j;
                                if (ix >= 0 && ix < W)
                                    s += inp[((b * C + ci) * H + iy) * W + ix] *
                                         weight[((o * C + ci) * kh + i) * kw + j];
                            }
                        }
                    out[((b * O + o) * OH + y) * OW + x] = s;
                }
}

void np_ref_conv2d_backward(double *dinp, double *dweight, double *dbias, const double *dout,
                            const double *inp, const double *weight, int64_t B, int64_t C,
                            int64_t H, int64_t W, int64_t O, int64_t kh, int64_t kw,
                            int64_t stride, int64_t pad)
{
    int64_t OH = conv_out(H, kh, stride, pad), OW = conv_out(W, kw, stride, pad);
    if (dinp)
        memset(dinp, 0, (size_t)(B * C * H * W) * sizeof(double));
    if (dweight)
        memset(dweight, 0, (size_t)(O * C * kh * kw) * sizeof(double));
    if (dbias)
        memset(dbias, 0, (size_t)O * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t y = 0; y < OH; y++)
                for (int64_t x = 0; x < OW; x++) {
                    double g = dout[((b * O + o) * OH + y) * OW + x];
                    if (dbias)
                        dbias[o] += g;
                    for (int64_t ci = 0; ci < C; ci++)
                        for (int64_t i = 0; i < kh; i++) {
                            int64_t iy = y * stride - pad + i;
                            if (iy < 0 || iy >= H)
                                continue;
                            for (int64_t j = 0; j < kw; j++) {
                                int64_t ix = x * stride - pad + j;
                                if (ix < 0 || ix >= W)
                                    continue;
                                int64_t ii = ((b * C + ci) * H + iy) * W + ix;
                                int64_t wi = ((o * C + ci) * kh + i) * kw + j;
                                if (dinp)
                                    dinp[ii] += g * weight[wi];
                                if (dweight)
                                    dweight[wi] += g * inp[ii];
                            }
                        }
                }
}

np_status rt_ref_conv2d_shape(np_op_call *c, np_error *err)
{
    const np_op_tensor *x = &c->in[0], *w = &c->in[1], *b = &c->in[2];
    int64_t stride = (int64_t)c->sc[0], pad = (int64_t)c->sc[1];
    if (x->ndim != 4 || w->ndim != 4 || w->shape[1] != x->shape[1] || stride < 1 || pad < 0 ||
        (b->data && (b->ndim != 1 || b->shape[0] != w->shape[0])) ||
        x->shape[2] + 2 * pad < w->shape[2] || x->shape[3] + 2 * pad < w->shape[3])
        return np_error_set(err, NP_ERR_SHAPE, NULL, "conv2d",
                            "conv2d: expected input (B, C, H, W), weight (O, C, kh, kw), bias (O), "
                            "stride >= 1, padding >= 0 (groups 1, dilation 1)");
    c->n_out = 1;
    int64_t s[4] = {x->shape[0], w->shape[0], conv_out(x->shape[2], w->shape[2], stride, pad),
                    conv_out(x->shape[3], w->shape[3], stride, pad)};
    rt_ref_set_shape(&c->out[0], 4, s);
    return NP_OK;
}

const char *rt_ref_conv2d_unsupported(const np_op_call *c)
{
    if (c->sc[2] != 1.0)
        return "conv2d: the float64 reference takes dilation 1 only";
    if (c->sc[3] != 1.0)
        return "conv2d: the float64 reference takes groups 1 only";
    return NULL;
}

void rt_ref_conv2d_fwd(np_op_call *c)
{
    const int64_t *xs = c->in[0].shape, *ws = c->in[1].shape;
    np_ref_conv2d_forward(c->out[0].data, c->in[0].data, c->in[1].data, c->in[2].data, xs[0],
                          xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], (int64_t)c->sc[0],
                          (int64_t)c->sc[1]);
}

void rt_ref_conv2d_bwd(np_op_call *c)
{
    const int64_t *xs = c->in[0].shape, *ws = c->in[1].shape;
    np_ref_conv2d_backward(c->want_gin[0] ? c->gin[0].data : NULL,
                           c->want_gin[1] ? c->gin[1].data : NULL,
                           c->want_gin[2] && c->in[2].data ? c->gin[2].data : NULL,
                           c->gout[0].data, c->in[0].data, c->in[1].data, xs[0], xs[1], xs[2],
                           xs[3], ws[0], ws[2], ws[3], (int64_t)c->sc[0], (int64_t)c->sc[1]);
}

/* ---- max_pool2d ------------------------------------------------------------- */

/* Index (within the (H, W) plane) of the first maximum of a window; a NaN wins. */
static int64_t pool_argmax(const double *p, int64_t W, int64_t y0, int64_t x0, int64_t k)
{
    int64_t best = y0 * W + x0;
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++) {
            int64_t at = (y0 + i) * W + x0 + j;
            if (isnan(p[best]))
                return best;
            if (p[at] > p[best] || isnan(p[at]))
                best = at;
        }
    return best;
}

void np_ref_max_pool2d_forward(double *out, const double *inp, int64_t B, int64_t C, int64_t H,
                               int64_t W, int64_t k, int64_t stride)
{
    int64_t OH = (H - k) / stride + 1, OW = (W - k) / stride + 1;
    for (int64_t bc = 0; bc < B * C; bc++)
        for (int64_t y = 0; y < OH; y++)
            for (int64_t x = 0; x < OW; x++) {
                const double *p = inp + bc * H * W;
                out[(bc * OH + y) * OW + x] = p[pool_argmax(p, W, y * stride, x * stride, k)];
            }
}

void np_ref_max_pool2d_backward(double *dinp, const double *dout, const double *inp, int64_t B,
                                int64_t C, int64_t H, int64_t W, int64_t k, int64_t stride)
{
    int64_t OH = (H - k) / stride + 1, OW = (W - k) / stride + 1;
    memset(dinp, 0, (size_t)(B * C * H * W) * sizeof(double));
    for (int64_t bc = 0; bc < B * C; bc++)
        for (int64_t y = 0; y < OH; y++)
            for (int64_t x = 0; x < OW; x++) {
                const double *p = inp + bc * H * W;
                dinp[bc * H * W + pool_argmax(p, W, y * stride, x * stride, k)] +=
                    dout[(bc * OH + y) * OW + x];
            }
}

const char *rt_ref_max_pool2d_unsupported(const np_op_call *c)
{
    if (c->sc[2] != 0.0 || c->sc[3] != 1.0)
        return "max_pool2d: the float64 reference takes padding 0 and dilation 1 only";
    return NULL;
}

np_status rt_ref_max_pool2d_shape(np_op_call *c, np_error *err)
{
    const np_op_tensor *x = &c->in[0];
    int64_t k = (int64_t)c->sc[0], s = c->sc[1] > 0 ? (int64_t)c->sc[1] : k;
    if (x->ndim != 4 || k < 1 || x->shape[2] < k || x->shape[3] < k)
        return np_error_set(err, NP_ERR_SHAPE, NULL, "max_pool2d",
                            "max_pool2d: expected input (B, C, H, W) with H, W >= kernel_size >= 1");
    c->sc[1] = (double)s;
    c->n_out = 1;
    int64_t o[4] = {x->shape[0], x->shape[1], (x->shape[2] - k) / s + 1, (x->shape[3] - k) / s + 1};
    rt_ref_set_shape(&c->out[0], 4, o);
    return NP_OK;
}

void rt_ref_max_pool2d_fwd(np_op_call *c)
{
    const int64_t *xs = c->in[0].shape;
    np_ref_max_pool2d_forward(c->out[0].data, c->in[0].data, xs[0], xs[1], xs[2], xs[3],
                              (int64_t)c->sc[0], (int64_t)c->sc[1]);
    if (c->out[0].mag)
        rt_ref_abs_copy(c->out[0].mag, c->out[0].data, c->out[0].numel);
}

void rt_ref_max_pool2d_bwd(np_op_call *c)
{
    const int64_t *xs = c->in[0].shape;
    np_ref_max_pool2d_backward(c->gin[0].data, c->gout[0].data, c->in[0].data, xs[0], xs[1],
                               xs[2], xs[3], (int64_t)c->sc[0], (int64_t)c->sc[1]);
    if (c->gin[0].mag) { /* |dinp|: exact where windows do not overlap (stride >= kernel) */
        np_ref_max_pool2d_backward(c->gin[0].mag, c->gout[0].data, c->in[0].data, xs[0], xs[1], xs[2], xs[3],
                                   (int64_t)c->sc[0], (int64_t)c->sc[1]);
        rt_ref_abs_copy(c->gin[0].mag, c->gin[0].mag, c->gin[0].numel);
    }
}

/* ---- embedding ----------------------------------------------------------------- */

void np_ref_embedding_forward(double *out, const double *idx, const double *weight, int64_t N,
                              int64_t V, int64_t C)
{
    for (int64_t i = 0; i < N; i++) {
        int64_t r = (int64_t)idx[i];
        if (r < 0 || r >= V)
            for (int64_t j = 0; j < C; j++)
                out[i * C + j] = NAN;
        else
            memcpy(out + i * C, weight + r * C, (size_t)C * sizeof(double));
    }
}

void np_ref_embedding_backward(double *dweight, const double *dout, const double *idx, int64_t N,
                               int64_t V, int64_t C)
{
    memset(dweight, 0, (size_t)(V * C) * sizeof(double));
    for (int64_t i = 0; i < N; i++) {
        int64_t r = (int64_t)idx[i];
        if (r >= 0 && r < V)
            for (int64_t j = 0; j < C; j++)
                dweight[r * C + j] += dout[i * C + j];
    }
}

np_status rt_ref_embedding_shape(np_op_call *c, np_error *err)
{
    const np_op_tensor *idx = &c->in[0], *w = &c->in[1];
    if (w->ndim != 2 || idx->ndim + 1 > NP_OP_MAX_DIM)
        return np_error_set(err, NP_ERR_SHAPE, NULL, "embedding",
                            "embedding: expected indices (...) and weight (V, C)");
    for (int64_t i = 0; i < idx->numel; i++)
        if (!(idx->data[i] >= 0 && idx->data[i] < (double)w->shape[0]))
            return np_error_set(err, NP_ERR_SHAPE, NULL, "embedding",
                                "embedding: index %g at %lld is outside the weight's %lld rows",
                                idx->data[i], (long long)i, (long long)w->shape[0]);
    c->n_out = 1;
    rt_ref_set_shape(&c->out[0], idx->ndim + 1, idx->shape);
    c->out[0].shape[idx->ndim] = w->shape[1];
    c->out[0].numel = np_op_numel(idx->ndim + 1, c->out[0].shape);
    return NP_OK;
}

void rt_ref_embedding_fwd(np_op_call *c)
{
    np_ref_embedding_forward(c->out[0].data, c->in[0].data, c->in[1].data, c->in[0].numel,
                             c->in[1].shape[0], c->in[1].shape[1]);
}

const char *rt_ref_embedding_unsupported(const np_op_call *c)
{
    if (!isnan(c->sc[1]))
        return "embedding: max_norm renormalises the weight in place";
    if (c->sc[2] != 0.0)
        return "embedding: the float64 reference takes scale_grad_by_freq False only";
    return NULL;
}

void rt_ref_embedding_bwd(np_op_call *c)
{
    if (!c->want_gin[1])
        return;
    int64_t V = c->in[1].shape[0], C = c->in[1].shape[1];
    np_ref_embedding_backward(c->gin[1].data, c->gout[0].data, c->in[0].data, c->in[0].numel, V,
                              C);
    /* the row of padding_idx gets no gradient (torch's embedding) */
    double p = c->sc[0];
    if (!isnan(p)) {
        int64_t r = (int64_t)p < 0 ? (int64_t)p + V : (int64_t)p;
        if (r >= 0 && r < V)
            memset(c->gin[1].data + r * C, 0, (size_t)C * sizeof(double));
    }
}
