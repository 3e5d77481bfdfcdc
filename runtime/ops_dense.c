/* runtime/ops_dense.c - GEMM-based ops: Functional.linear, Torch.matmul,
 * Functional.conv2d (im2col + GEMM), and Functional.max_pool2d. Under
 * autocast the GEMM inputs are rounded to the low dtype and the output is
 * produced in it; gradients are computed in float32 from the rounded inputs
 * (lowp_backward: linear's backward GEMMs quantize their operands too).
 * The arithmetic is in kern_dense.c (linear and conv2d through ctx->k, where
 * their faults act); here the checks, the outputs and one typed saved-state
 * struct per op. */
#include <math.h>
#include <string.h>

#include "rt_internal.h"

/* A kernel's -1: the npu-sim GEMM had no memory for an operand's copy. */
static void gemm_status(np_ctx *ctx, int st, const char *api)
{
    if (st != 0)
        rt_fail(ctx, NP_ERR_NOMEM, api, "%s: out of memory in the npu-sim GEMM", api);
}

/* ---- linear ------------------------------------------------------------ */
typedef struct linear_state {
    const float *x, *w;   /* (R,I), (O,I): the GEMM's inputs as it saw them (rounded under autocast) */
    const float *xh, *wh; /* lowp_backward: the same before quantization, re-quantized for the
                           * backward GEMMs; NULL otherwise */
    int64_t R, I, O;      /* rows, in features, out features */
} linear_state;

/* The quantized backward (lowp_backward; docs/RUNTIME.md, "The backward
 * GEMMs"): each GEMM quantizes both operands in blocks along its own
 * reduction dim, from the high-precision tensors (MX blocks are not
 * transpose-invariant, so the forward's copies cannot be reused):
 *   dX (R,I) = Q_O(dY) Q_O(W):      dY (R,O) along O, W (O,I) along O (columns)
 *   dW (O,I) = Q_R(dY)^T Q_R(X):    dY along R (columns), X (R,I) along R (columns)
 *   db       = column sums of dY as it arrived (no GEMM). */
static void linear_bwd_lowp(np_ctx *ctx, const linear_state *s, const float *g, float *const *gin)
{
    const char *api = np_op_api(NP_OP_LINEAR);
    int st = 0;
    if (gin[0]) {
        const float *gq = rt_lowp_bwd_operand(ctx, 1, g, s->R, s->O, 1);
        const float *wq = rt_lowp_bwd_operand(ctx, 0, s->wh, 1, s->O, s->I);
        if (!gq || !wq)
            return;
        st |= ctx->k.linear_backward(gin[0], NULL, NULL, gq, s->x, wq, s->R, s->I, s->O, ctx->o.device);
    }
    if (gin[1]) {
        const float *gq = rt_lowp_bwd_operand(ctx, 1, g, 1, s->R, s->O);
        const float *xq = rt_lowp_bwd_operand(ctx, 0, s->xh, 1, s->R, s->I);
        if (!gq || !xq)
            return;
        st |= ctx->k.linear_backward(NULL, gin[1], NULL, gq, xq, s->w, s->R, s->I, s->O, ctx->o.device);
    }
    if (gin[2])
        st |= ctx->k.linear_backward(NULL, NULL, gin[2], g, s->x, s->w, s->R, s->I, s->O, ctx->o.device);
    gemm_status(ctx, st, api);
}

static void linear_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const linear_state *s = nd->st;
    if (s->xh) {
        linear_bwd_lowp(ctx, s, gout[0], gin);
        return;
    }
    gemm_status(ctx, ctx->k.linear_backward(gin[0], gin[1], gin[2], gout[0], s->x, s->w, s->R, s->I, s->O,
                                            ctx->o.device), np_op_api(NP_OP_LINEAR));
}

np_tensor *np_linear(np_ctx *ctx, np_tensor *x, np_tensor *w, np_tensor *b)
{
    const char *api = np_op_api(NP_OP_LINEAR);
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
    int promoted = rt_promoted(ctx, NP_OP_LINEAR);
    if (promoted == 2) /* inside a promoted module: the output stays float32 */
        odt = NP_FLOAT32;
    if (promoted) /* a per-op override: float32 inside (not quantized), the output cast back */
        ac = NP_FLOAT32;
    int64_t shape[NP_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = O;
    np_tensor *y = rt_new(ctx, odt, x->ndim, shape);
    linear_state *s = rt_alloc(ctx, sizeof *s);
    const float *xh = rt_rounded(ctx, x, ac), *wh = rt_rounded(ctx, w, ac);
    const float *bd = b ? rt_rounded(ctx, b, ac) : NULL;
    const float *xd = xh, *wd = wh;
    if (!promoted) {
        xd = rt_lowp_operand(ctx, 0, xh, R, I, 1); /* MxFP8/HiF8: blocks along I (lowp.c) */
        wd = rt_lowp_operand(ctx, 1, wh, O, I, 1);
    }
    if (!y || !s || !xd || !wd || (b && !bd))
        return NULL;
    int qbwd = !promoted && !ctx->ac_off && ctx->o.lowp != NP_LOWP_NONE && ctx->o.lowp_backward;
    *s = (linear_state){xd, wd, qbwd ? xh : NULL, qbwd ? wh : NULL, R, I, O};
    np_tensor *in[3] = {x, w, b};
    rt_node nd;
    rt_node_init(ctx, &nd, NP_OP_LINEAR, in, 3);
    if (!promoted)
        rt_lowp_scalars(ctx, &nd);
    if (qbwd) /* recorded: the replay quantizes this call's backward GEMMs as here */
        rt_node_scalar(&nd, "lowp_backward", ctx->o.lowp_backward); /* 2: E5M2 gradients */
    gemm_status(ctx, ctx->k.linear_forward(y->data, xd, wd, bd, R, I, O, odt, ctx->o.device), api);
    for (int i = 0; i < 3; i++)
        if (in[i] && ac != NP_FLOAT32)
            nd.gdt[i] = ac;
    nd.st = s;
    nd.gin_full = 7;
    return rt_finish(ctx, &nd, y, linear_bwd);
}

/* ---- matmul -------------------------------------------------------------- */
typedef struct matmul_state {
    const float *a, *b;    /* (nbat,M,K), (nbat,K,N) or (K,N): as the GEMM saw them */
    const float *ah, *bh;  /* lowp_backward: the same before quantization; NULL otherwise */
    int64_t nbat, M, K, N;
    int shared;            /* b is 2-D, shared by every batch */
} matmul_state;

/* The quantized backward of matmul (lowp_backward), linear's recipe:
 *   dA (nbat,M,K) = Q_N(dY) Q_N(B)^T:  dY along N (its rows), B along N (its rows)
 *   dB (nbat,K,N) = Q_M(A)^T Q_M(dY):  A and dY along M (their columns); a
 *                                      shared 2-D B sums over the batches: along nbat*M */
static void matmul_bwd_lowp(np_ctx *ctx, const matmul_state *s, const float *g, float *const *gin)
{
    int st = 0;
    int64_t nb = s->shared ? 1 : s->nbat, mr = s->shared ? s->nbat * s->M : s->M;
    if (gin[0]) {
        const float *gq = rt_lowp_bwd_operand(ctx, 1, g, s->nbat * s->M, s->N, 1);
        const float *bq = rt_lowp_bwd_operand(ctx, 0, s->bh, nb * s->K, s->N, 1);
        if (!gq || !bq)
            return;
        st |= rt_matmul_backward(gin[0], NULL, gq, s->a, bq, s->nbat, s->M, s->K, s->N, s->shared, ctx->o.device);
    }
    if (gin[1]) {
        const float *gq = rt_lowp_bwd_operand(ctx, 1, g, nb, mr, s->N);
        const float *aq = rt_lowp_bwd_operand(ctx, 0, s->ah, nb, mr, s->K);
        if (!gq || !aq)
            return;
        st |= rt_matmul_backward(NULL, gin[1], gq, aq, s->b, s->nbat, s->M, s->K, s->N, s->shared, ctx->o.device);
    }
    gemm_status(ctx, st, np_op_api(NP_OP_MATMUL));
}

static void matmul_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const matmul_state *s = nd->st;
    if (s->ah) {
        matmul_bwd_lowp(ctx, s, gout[0], gin);
        return;
    }
    gemm_status(ctx, rt_matmul_backward(gin[0], gin[1], gout[0], s->a, s->b, s->nbat, s->M, s->K, s->N,
                                        s->shared, ctx->o.device), np_op_api(NP_OP_MATMUL));
}

np_tensor *np_matmul(np_ctx *ctx, np_tensor *a, np_tensor *b)
{
    const char *api = np_op_api(NP_OP_MATMUL);
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
    int promoted = rt_promoted(ctx, NP_OP_MATMUL);
    if (promoted == 2) /* inside a promoted module: the output stays float32 */
        odt = NP_FLOAT32;
    if (promoted)
        ac = NP_FLOAT32;
    int64_t shape[NP_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[a->ndim - 1] = N;
    np_tensor *y = rt_new(ctx, odt, a->ndim, shape);
    matmul_state *s = rt_alloc(ctx, sizeof *s);
    const float *ah = rt_rounded(ctx, a, ac), *bh = rt_rounded(ctx, b, ac), *ad = ah, *bd = bh;
    if (!promoted) {
        ad = rt_lowp_operand(ctx, 0, ah, nbat * M, K, 1); /* MxFP8/HiF8: blocks along K (lowp.c) */
        bd = rt_lowp_operand(ctx, 1, bh, shared ? 1 : nbat, K, N);
    }
    if (!y || !s || !ad || !bd)
        return NULL;
    int qbwd = !promoted && !ctx->ac_off && ctx->o.lowp != NP_LOWP_NONE && ctx->o.lowp_backward;
    *s = (matmul_state){ad, bd, qbwd ? ah : NULL, qbwd ? bh : NULL, nbat, M, K, N, shared};
    np_tensor *in[2] = {a, b};
    rt_node nd;
    rt_node_init(ctx, &nd, NP_OP_MATMUL, in, 2);
    if (!promoted)
        rt_lowp_scalars(ctx, &nd);
    if (qbwd) /* recorded: the replay quantizes this call's backward GEMMs as here */
        rt_node_scalar(&nd, "lowp_backward", ctx->o.lowp_backward);
    gemm_status(ctx, rt_matmul_forward(y->data, ad, bd, nbat, M, K, N, shared, odt, ctx->o.device), api);
    if (ac != NP_FLOAT32)
        nd.gdt[0] = nd.gdt[1] = ac;
    nd.st = s;
    return rt_finish(ctx, &nd, y, matmul_bwd);
}

/* ---- conv2d ------------------------------------------------------------ */
typedef struct conv_state {
    const float *cols;    /* (N, C*KH*KW, OH*OW) im2col columns of the (rounded) input */
    const float *w;       /* (O,C,KH,KW) the weight as the GEMM saw it (rounded under autocast) */
    rt_conv_geom g;
} conv_state;

static void conv2d_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const conv_state *s = nd->st;
    const rt_conv_geom *g = &s->g;
    float *dcol = gin[0] ? rt_alloc(ctx, (size_t)(g->C * g->KH * g->KW * g->OH * g->OW) * sizeof(float)) : NULL;
    if (gin[0] && !dcol)
        return;
    gemm_status(ctx, ctx->k.conv2d_backward(gin[0], gin[1], gin[2], dcol, gout[0], s->cols, s->w, g,
                                            ctx->o.device), np_op_api(NP_OP_CONV2D));
}

/* The geometry of x (N,C,H,W) * w (O,C,KH,KW), or 0 with a ctx error. */
static int conv_geom_of(np_ctx *ctx, rt_conv_geom *g, const np_tensor *x, const np_tensor *w, const np_tensor *b,
                        int stride, int padding)
{
    const char *api = np_op_api(NP_OP_CONV2D);
    if (stride < 1 || padding < 0)
        return rt_fail(ctx, NP_ERR_ARG, api, "%s: stride must be >= 1 and padding >= 0 (got %d, %d)", api, stride, padding), 0;
    if (x->ndim != 4 || w->ndim != 4 || x->shape[1] != w->shape[1])
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: input must be (N, C, H, W) and weight (O, C, KH, KW) with equal C", api), 0;
    *g = (rt_conv_geom){x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0],
                        w->shape[2], w->shape[3], 0, 0, stride, padding};
    g->OH = (g->H + 2 * g->p - g->KH) / g->s + 1;
    g->OW = (g->W + 2 * g->p - g->KW) / g->s + 1;
    if (g->H + 2 * g->p < g->KH || g->W + 2 * g->p < g->KW)
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: kernel %lldx%lld larger than the padded input %lldx%lld", api,
                       (long long)g->KH, (long long)g->KW, (long long)(g->H + 2 * g->p), (long long)(g->W + 2 * g->p)), 0;
    if (b && (b->ndim != 1 || b->shape[0] != g->O))
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: bias must be (%lld)", api, (long long)g->O), 0;
    return 1;
}

np_tensor *np_conv2d(np_ctx *ctx, np_tensor *x, np_tensor *w, np_tensor *b, int stride, int padding)
{
    const char *api = np_op_api(NP_OP_CONV2D);
    if (!x || !w || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input") || !rt_need_float(ctx, w, api, "weight") ||
        (b && !rt_need_float(ctx, b, api, "bias")))
        return NULL;
    rt_conv_geom g0;
    if (!conv_geom_of(ctx, &g0, x, w, b, stride, padding))
        return NULL;
    conv_state *s = rt_alloc(ctx, sizeof *s);
    if (!s)
        return NULL;
    s->g = g0;
    const rt_conv_geom *g = &s->g;
    np_dtype ac = rt_ac(ctx);
    np_dtype odt = ac != NP_FLOAT32 ? ac : rt_promote(x->dtype, w->dtype);
    int promoted = rt_promoted(ctx, NP_OP_CONV2D);
    if (promoted == 2) /* inside a promoted module: the output stays float32 */
        odt = NP_FLOAT32;
    if (promoted)
        ac = NP_FLOAT32;
    int64_t shape[4] = {g->N, g->O, g->OH, g->OW};
    np_tensor *y = rt_new(ctx, odt, 4, shape);
    const float *xd = rt_rounded(ctx, x, ac), *wd = rt_rounded(ctx, w, ac);
    const float *bd = b ? rt_rounded(ctx, b, ac) : NULL;
    /* MxFP8/HiF8: blocks along C, the reduction dim of the implicit GEMM, per
     * pixel of x (N,C,H*W) and per tap of w (O,C,KH*KW); im2col then copies
     * quantized values (lowp.c) */
    if (!promoted) {
        xd = rt_lowp_operand(ctx, 0, xd, g->N, g->C, g->H * g->W);
        wd = rt_lowp_operand(ctx, 1, wd, g->O, g->C, g->KH * g->KW);
    }
    float *cols = rt_alloc(ctx, (size_t)(g->N * g->C * g->KH * g->KW * g->OH * g->OW) * sizeof(float) + 1);
    if (!y || !xd || !wd || (b && !bd) || !cols)
        return NULL;
    s->cols = cols;
    s->w = wd;
    np_tensor *in[3] = {x, w, b};
    rt_node nd;
    rt_node_init(ctx, &nd, NP_OP_CONV2D, in, 3);
    if (!promoted)
        rt_lowp_scalars(ctx, &nd);
    gemm_status(ctx, ctx->k.conv2d_forward(y->data, cols, xd, wd, bd, g, odt, ctx->o.device), api);
    for (int i = 0; i < 3; i++)
        if (in[i] && ac != NP_FLOAT32)
            nd.gdt[i] = ac;
    rt_node_scalar(&nd, "stride", stride);
    rt_node_scalar(&nd, "padding", padding);
    nd.st = s;
    return rt_finish(ctx, &nd, y, conv2d_bwd);
}

/* ---- max_pool2d ------------------------------------------------------------ */
typedef struct maxpool_state {
    const int32_t *arg;       /* (planes, OH*OW) index of each max in its plane */
    int64_t planes, HW, OHW;  /* N*C planes, input and output plane sizes */
} maxpool_state;

static void maxpool_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const maxpool_state *s = nd->st;
    (void)ctx;
    if (gin[0])
        rt_max_pool2d_backward(gin[0], gout[0], s->arg, s->planes, s->HW, s->OHW);
}

np_tensor *np_max_pool2d(np_ctx *ctx, np_tensor *x, int kernel, int stride)
{
    const char *api = np_op_api(NP_OP_MAX_POOL2D);
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
    maxpool_state *s = rt_alloc(ctx, sizeof *s);
    if (!y || !arg || !s)
        return NULL;
    *s = (maxpool_state){arg, planes, H * W, OH * OW};
    np_tensor *in[1] = {x};
    rt_node nd;
    rt_node_init(ctx, &nd, NP_OP_MAX_POOL2D, in, 1);
    rt_max_pool2d_forward(y->data, arg, x->data, planes, H, W, kernel, stride);
    rt_node_scalar(&nd, "kernel_size", kernel);
    rt_node_scalar(&nd, "stride", stride);
    nd.st = s;
    return rt_finish(ctx, &nd, y, maxpool_bwd);
}
