/* runtime/ops_dense.c - GEMM-based ops: Functional.linear, Torch.matmul,
 * Functional.conv2d (im2col + GEMM), and Functional.max_pool2d. Under
 * autocast the GEMM inputs are rounded to the low dtype and the output is
 * produced in it; gradients are computed in float32 from the rounded inputs. */
#include <math.h>
#include <string.h>

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
static void linear_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const float *x = nd->saved[0], *w = nd->saved[1], *g = gout[0];
    int R = (int)nd->iv[0], I = (int)nd->iv[1], O = (int)nd->iv[2];
    if (gin[0])
        rt_gemm(ctx, 0, 0, R, I, O, g, O, w, I, 0.0f, gin[0], I);
    if (gin[1])
        rt_gemm(ctx, 1, 0, O, I, R, g, O, x, I, 0.0f, gin[1], I);
    if (gin[2] && !nd->iv[3])
        col_sum(g, R, O, gin[2]);
}

np_tensor *np_linear(np_ctx *ctx, np_tensor *x, np_tensor *w, np_tensor *b)
{
    static const char *api = "Functional.linear";
    if (!x || !w || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input") || !rt_need_float(ctx, w, api, "weight") ||
        (b && !rt_need_float(ctx, b, api, "bias")))
        return NULL;
    if (x->ndim < 1 || w->ndim != 2 || x->shape[x->ndim - 1] != w->shape[1])
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: input (..., %lld) and weight of rank %d (%lld, %lld) do not fit (weight is (out, in))",
                       api, (long long)(x->ndim ? x->shape[x->ndim - 1] : 0), w->ndim,
                       (long long)w->shape[0], (long long)(w->ndim > 1 ? w->shape[1] : 0));
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: bias must be (%lld)", api, (long long)w->shape[0]);
    int64_t I = w->shape[1], O = w->shape[0], R = x->numel / (I ? I : 1);
    np_dtype ac = rt_ac(ctx);
    np_dtype odt = ac != NP_FLOAT32 ? ac : rt_promote(x->dtype, w->dtype);
    int64_t shape[NP_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = O;
    np_tensor *y = rt_new(ctx, odt, x->ndim, shape);
    const float *xd = rt_rounded(ctx, x, ac), *wd = rt_rounded(ctx, w, ac);
    const float *bd = b ? rt_rounded(ctx, b, ac) : NULL;
    if (!y || !xd || !wd || (b && !bd))
        return NULL;
    int drop = ctx->fault == NP_FAULT_LINEAR_DROP_BIAS;
    float *yd = y->data;
    /* as torch's addmm: the output rows start as the bias and the GEMM adds
     * x W^T to them (beta 1), saving a pass and a parallel region */
    int with_bias = bd && !drop;
    if (with_bias)
        for (int64_t r = 0; r < R; r++)
            memcpy(yd + r * O, bd, (size_t)O * sizeof(float));
    rt_gemm(ctx, 0, 1, (int)R, (int)O, (int)I, xd, (int)I, wd, (int)I, with_bias ? 1.0f : 0.0f, yd, (int)O);
    rt_round_buf(yd, y->numel, odt);
    np_tensor *in[3] = {x, w, b};
    rt_node nd;
    rt_node_init(ctx, &nd, RT_OP_LINEAR, in, 3);
    for (int i = 0; i < 3; i++)
        if (in[i] && ac != NP_FLOAT32)
            nd.gdt[i] = ac;
    nd.saved[0] = (void *)xd;
    nd.saved[1] = (void *)wd;
    nd.iv[0] = R;
    nd.iv[1] = I;
    nd.iv[2] = O;
    nd.iv[3] = drop;
    nd.gin_full = drop ? 3 : 7;
    return rt_finish(ctx, &nd, y, linear_bwd);
}

/* ---- matmul -------------------------------------------------------------- */
static void matmul_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const float *a = nd->saved[0], *b = nd->saved[1], *g = gout[0];
    int64_t nb = nd->iv[0];
    int M = (int)nd->iv[1], K = (int)nd->iv[2], N = (int)nd->iv[3], shared = (int)nd->iv[4];
    for (int64_t i = 0; i < nb; i++) {
        const float *gi = g + i * M * N, *ai = a + i * M * K;
        const float *bi = b + (shared ? 0 : i * K * N);
        if (gin[0])
            rt_gemm(ctx, 0, 1, M, K, N, gi, N, bi, N, 0.0f, gin[0] + i * M * K, K);
        if (gin[1])
            rt_gemm(ctx, 1, 0, K, N, M, ai, K, gi, N, shared && i > 0 ? 1.0f : 0.0f,
                    gin[1] + (shared ? 0 : i * K * N), N);
    }
}

np_tensor *np_matmul(np_ctx *ctx, np_tensor *a, np_tensor *b)
{
    static const char *api = "Torch.matmul";
    if (!a || !b || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, a, api, "input") || !rt_need_float(ctx, b, api, "other"))
        return NULL;
    if (a->ndim < 2 || b->ndim < 2)
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: both operands need rank >= 2 (got %d and %d)", api, a->ndim, b->ndim);
    int64_t M = a->shape[a->ndim - 2], K = a->shape[a->ndim - 1];
    int64_t K2 = b->shape[b->ndim - 2], N = b->shape[b->ndim - 1];
    int shared = b->ndim == 2;
    int ok = K == K2;
    if (!shared) {
        ok = ok && a->ndim == b->ndim;
        for (int i = 0; ok && i < a->ndim - 2; i++)
            ok = a->shape[i] == b->shape[i];
    }
    if (!ok)
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: shapes do not fit: (..., %lld, %lld) @ (..., %lld, %lld) with equal batch dims or a 2-D right operand",
                       api, (long long)M, (long long)K, (long long)K2, (long long)N);
    int64_t nbat = a->numel / (M * K != 0 ? M * K : 1);
    if (M * K == 0)
        nbat = np_shape_numel(a->ndim - 2, a->shape);
    np_dtype ac = rt_ac(ctx);
    np_dtype odt = ac != NP_FLOAT32 ? ac : rt_promote(a->dtype, b->dtype);
    int64_t shape[NP_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[a->ndim - 1] = N;
    np_tensor *y = rt_new(ctx, odt, a->ndim, shape);
    const float *ad = rt_rounded(ctx, a, ac), *bd = rt_rounded(ctx, b, ac);
    if (!y || !ad || !bd)
        return NULL;
    float *yd = y->data;
    for (int64_t i = 0; i < nbat; i++)
        rt_gemm(ctx, 0, 0, (int)M, (int)N, (int)K, ad + i * M * K, (int)K,
                bd + (shared ? 0 : i * K * N), (int)N, 0.0f, yd + i * M * N, (int)N);
    rt_round_buf(yd, y->numel, odt);
    np_tensor *in[2] = {a, b};
    rt_node nd;
    rt_node_init(ctx, &nd, RT_OP_MATMUL, in, 2);
    if (ac != NP_FLOAT32)
        nd.gdt[0] = nd.gdt[1] = ac;
    nd.saved[0] = (void *)ad;
    nd.saved[1] = (void *)bd;
    nd.iv[0] = nbat;
    nd.iv[1] = M;
    nd.iv[2] = K;
    nd.iv[3] = N;
    nd.iv[4] = shared;
    return rt_finish(ctx, &nd, y, matmul_bwd);
}

/* ---- conv2d ------------------------------------------------------------ */
typedef struct conv_geom {
    int64_t N, C, H, W, O, KH, KW, OH, OW, s, p;
} conv_geom;

/* col (C*KH*KW, OH*OW) from one image x (C, H, W). */
static void im2col(const conv_geom *g, const float *x, float *col)
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
static void col2im(const conv_geom *g, const float *dcol, float *dx)
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

/* w (O, C, KH, KW) with both spatial axes reversed. */
static void flip_kernel(const conv_geom *g, const float *w, float *f)
{
    for (int64_t oc = 0; oc < g->O * g->C; oc++)
        for (int64_t kh = 0; kh < g->KH; kh++)
            for (int64_t kw = 0; kw < g->KW; kw++)
                f[(oc * g->KH + kh) * g->KW + kw] =
                    w[(oc * g->KH + (g->KH - 1 - kh)) * g->KW + (g->KW - 1 - kw)];
}

static void conv2d_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const conv_geom *g = nd->saved[2];
    const float *w = nd->saved[1], *cols = nd->saved[0], *gy = gout[0];
    int64_t CKK = g->C * g->KH * g->KW, P = g->OH * g->OW;
    float *dw = gin[1];
    if (dw && nd->iv[0]) {
        dw = rt_calloc(ctx, (size_t)(g->O * CKK) * sizeof(float));
        if (!dw)
            return;
    }
    float *dcol = gin[0] ? rt_alloc(ctx, (size_t)(CKK * P) * sizeof(float)) : NULL;
    for (int64_t n = 0; n < g->N; n++) {
        const float *gn = gy + n * g->O * P;
        if (dw)
            rt_gemm(ctx, 0, 1, (int)g->O, (int)CKK, (int)P, gn, (int)P, cols + n * CKK * P, (int)P,
                    n > 0 ? 1.0f : 0.0f, dw, (int)CKK);
        if (dcol) {
            rt_gemm(ctx, 1, 0, (int)CKK, (int)P, (int)g->O, w, (int)CKK, gn, (int)P, 0.0f, dcol, (int)P);
            col2im(g, dcol, gin[0] + n * g->C * g->H * g->W);
        }
    }
    if (gin[1] && nd->iv[0])
        flip_kernel(g, dw, gin[1]);
    if (gin[2]) {
#pragma omp parallel for
        for (int64_t o = 0; o < g->O; o++) {
            double acc = 0.0;
            for (int64_t n = 0; n < g->N; n++)
                for (int64_t p = 0; p < P; p++)
                    acc += gy[(n * g->O + o) * P + p];
            gin[2][o] = (float)acc;
        }
    }
}

np_tensor *np_conv2d(np_ctx *ctx, np_tensor *x, np_tensor *w, np_tensor *b, int stride, int padding)
{
    static const char *api = "Functional.conv2d";
    if (!x || !w || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input") || !rt_need_float(ctx, w, api, "weight") ||
        (b && !rt_need_float(ctx, b, api, "bias")))
        return NULL;
    if (stride < 1 || padding < 0)
        return rt_fail(ctx, NP_ERR_ARG, api, "%s: stride must be >= 1 and padding >= 0 (got %d, %d)", api, stride, padding);
    if (x->ndim != 4 || w->ndim != 4 || x->shape[1] != w->shape[1])
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: input must be (N, C, H, W) and weight (O, C, KH, KW) with equal C", api);
    conv_geom g0 = {x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0],
                    w->shape[2], w->shape[3], 0, 0, stride, padding};
    g0.OH = (g0.H + 2 * g0.p - g0.KH) / g0.s + 1;
    g0.OW = (g0.W + 2 * g0.p - g0.KW) / g0.s + 1;
    if (g0.H + 2 * g0.p < g0.KH || g0.W + 2 * g0.p < g0.KW)
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: kernel %lldx%lld larger than the padded input %lldx%lld", api,
                       (long long)g0.KH, (long long)g0.KW, (long long)(g0.H + 2 * g0.p), (long long)(g0.W + 2 * g0.p));
    if (b && (b->ndim != 1 || b->shape[0] != g0.O))
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: bias must be (%lld)", api, (long long)g0.O);
    conv_geom *g = rt_alloc(ctx, sizeof *g);
    if (!g)
        return NULL;
    *g = g0;
    np_dtype ac = rt_ac(ctx);
    np_dtype odt = ac != NP_FLOAT32 ? ac : rt_promote(x->dtype, w->dtype);
    int64_t shape[4] = {g->N, g->O, g->OH, g->OW};
    np_tensor *y = rt_new(ctx, odt, 4, shape);
    const float *xd = rt_rounded(ctx, x, ac), *wd = rt_rounded(ctx, w, ac);
    const float *bd = b ? rt_rounded(ctx, b, ac) : NULL;
    int64_t CKK = g->C * g->KH * g->KW, P = g->OH * g->OW;
    float *cols = rt_alloc(ctx, (size_t)(g->N * CKK * P) * sizeof(float) + 1);
    if (!y || !xd || !wd || (b && !bd) || !cols)
        return NULL;
    int flip = ctx->fault == NP_FAULT_CONV2D_FLIP_KERNEL;
    if (flip) {
        float *f = rt_alloc(ctx, (size_t)(g->O * CKK) * sizeof(float));
        if (!f)
            return NULL;
        flip_kernel(g, wd, f);
        wd = f;
    }
    float *yd = y->data;
    for (int64_t n = 0; n < g->N; n++) {
        float *col = cols + n * CKK * P;
        im2col(g, xd + n * g->C * g->H * g->W, col);
        float *yn = yd + n * g->O * P;
        rt_gemm(ctx, 0, 0, (int)g->O, (int)P, (int)CKK, wd, (int)CKK, col, (int)P, 0.0f, yn, (int)P);
        if (bd)
            for (int64_t o = 0; o < g->O; o++)
                for (int64_t p = 0; p < P; p++)
                    yn[o * P + p] += bd[o];
    }
    rt_round_buf(yd, y->numel, odt);
    np_tensor *in[3] = {x, w, b};
    rt_node nd;
    rt_node_init(ctx, &nd, RT_OP_CONV2D, in, 3);
    for (int i = 0; i < 3; i++)
        if (in[i] && ac != NP_FLOAT32)
            nd.gdt[i] = ac;
    rt_node_scalar(&nd, "stride", stride);
    rt_node_scalar(&nd, "padding", padding);
    nd.saved[0] = cols;
    nd.saved[1] = (void *)wd;
    nd.saved[2] = g;
    nd.iv[0] = flip;
    return rt_finish(ctx, &nd, y, conv2d_bwd);
}

/* ---- max_pool2d ------------------------------------------------------------ */
static void maxpool_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const int32_t *arg = nd->saved[0];
    int64_t planes = nd->iv[0], HW = nd->iv[1], OHW = nd->iv[2];
    if (!gin[0])
        return;
#pragma omp parallel for if (planes * OHW > RT_PAR_MIN)
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t o = 0; o < OHW; o++)
            gin[0][pl * HW + arg[pl * OHW + o]] += gout[0][pl * OHW + o];
}

np_tensor *np_max_pool2d(np_ctx *ctx, np_tensor *x, int kernel, int stride)
{
    static const char *api = "Functional.max_pool2d";
    if (!x || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input"))
        return NULL;
    if (stride == 0)
        stride = kernel;
    if (kernel < 1 || stride < 1)
        return rt_fail(ctx, NP_ERR_ARG, api, "%s: kernel_size and stride must be >= 1 (got %d, %d)", api, kernel, stride);
    if (x->ndim != 4 || x->shape[2] < kernel || x->shape[3] < kernel)
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: input must be (N, C, H, W) with H, W >= kernel_size %d", api, kernel);
    int64_t H = x->shape[2], W = x->shape[3];
    int64_t OH = (H - kernel) / stride + 1, OW = (W - kernel) / stride + 1;
    int64_t shape[4] = {x->shape[0], x->shape[1], OH, OW};
    np_tensor *y = rt_new(ctx, x->dtype, 4, shape);
    int64_t planes = x->shape[0] * x->shape[1];
    int32_t *arg = rt_alloc(ctx, (size_t)(planes * OH * OW) * sizeof(int32_t) + 1);
    if (!y || !arg)
        return NULL;
    const float *xd = x->data;
    float *yd = y->data;
#pragma omp parallel for if (planes * OH * OW > RT_PAR_MIN)
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t best = (oh * stride) * W + ow * stride;
                float bv = xd[pl * H * W + best];
                for (int kh = 0; kh < kernel; kh++)
                    for (int kw = 0; kw < kernel; kw++) {
                        int64_t idx = (oh * stride + kh) * W + ow * stride + kw;
                        float v = xd[pl * H * W + idx];
                        if (v > bv || (isnan(v) && !isnan(bv))) {
                            bv = v;
                            best = idx;
                        }
                    }
                yd[(pl * OH + oh) * OW + ow] = bv;
                arg[(pl * OH + oh) * OW + ow] = (int32_t)best;
            }
    np_tensor *in[1] = {x};
    rt_node nd;
    rt_node_init(ctx, &nd, RT_OP_MAX_POOL2D, in, 1);
    rt_node_scalar(&nd, "kernel_size", kernel);
    rt_node_scalar(&nd, "stride", stride);
    nd.saved[0] = arg;
    nd.iv[0] = planes;
    nd.iv[1] = H * W;
    nd.iv[2] = OH * OW;
    return rt_finish(ctx, &nd, y, maxpool_bwd);
}
