/* runtime/ops_norm.c - row-wise ops that run in float32 under autocast:
 * Functional.layer_norm, Functional.softmax, Functional.cross_entropy; and
 * Functional.embedding. Each op checks its arguments, allocates its output
 * and saved state in the step arena, runs its kernels (kern_norm.c, or a
 * fault's through ctx->k) and records a tape node whose backward reads one
 * typed saved-state struct. */
#include <math.h>
#include <string.h>

#include "rt_internal.h"

/* ---- layer_norm --------------------------------------------------------- */
typedef struct ln_state {
    const float *mean, *rstd; /* (R) row statistics of the forward */
    int64_t R, C;             /* rows, normalised length */
} ln_state;

static void layer_norm_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const ln_state *s = nd->st;
    const float *w = nd->in[1] ? nd->in[1]->data : NULL;
    ctx->k.layernorm_backward(gin[0], gin[1], gin[2], gout[0], nd->in[0]->data, w, s->mean, s->rstd,
                              s->R, s->C);
}

np_tensor *np_layer_norm(np_ctx *ctx, np_tensor *x, np_tensor *weight, np_tensor *bias, double eps)
{
    const char *api = np_op_api(NP_OP_LAYER_NORM);
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
    ln_state *s = rt_alloc(ctx, sizeof *s);
    float *mean = rt_alloc(ctx, (size_t)R * sizeof(float) + 1), *rstd = rt_alloc(ctx, (size_t)R * sizeof(float) + 1);
    if (!y || !s || !mean || !rstd)
        return NULL;
    *s = (ln_state){mean, rstd, R, C};
    np_tensor *in[3] = {x, weight, bias};
    rt_node nd;
    rt_node_init(ctx, &nd, NP_OP_LAYER_NORM, in, 3);
    nd.k->layernorm_forward(y->data, mean, rstd, x->data, weight ? weight->data : NULL,
                             bias ? bias->data : NULL, R, C, eps);
    rt_node_scalar(&nd, "eps", eps);
    nd.st = s;
    nd.gin_full = 7;
    return rt_finish(ctx, &nd, y, layer_norm_bwd);
}

/* ---- softmax ------------------------------------------------------------ */
typedef struct softmax_state {
    int64_t R, C; /* rows, row length (the last dim) */
} softmax_state;

static void softmax_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const softmax_state *s = nd->st;
    (void)ctx;
    if (gin[0])
        rt_softmax_backward(gin[0], gout[0], nd->out[0]->data, s->R, s->C);
}

np_tensor *np_softmax(np_ctx *ctx, np_tensor *x, int dim)
{
    const char *api = np_op_api(NP_OP_SOFTMAX);
    if (!x || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input"))
        return NULL;
    if (x->ndim < 1 || (dim != -1 && dim != x->ndim - 1))
        return rt_fail(ctx, NP_ERR_UNSUPPORTED, api, "%s: only the last dim is supported (dim -1), got dim %d of rank %d", api, dim, x->ndim);
    int64_t C = x->shape[x->ndim - 1], R = C ? x->numel / C : 0;
    np_tensor *y = rt_new(ctx, NP_FLOAT32, x->ndim, x->shape);
    softmax_state *s = rt_alloc(ctx, sizeof *s);
    if (!y || !s)
        return NULL;
    *s = (softmax_state){R, C};
    rt_node nd;
    rt_node_init(ctx, &nd, NP_OP_SOFTMAX, &x, 1);
    rt_softmax_forward(y->data, x->data, R, C, nd.k->softmax_row);
    rt_node_scalar(&nd, "dim", dim);
    nd.st = s;
    nd.gin_full = 1;
    return rt_finish(ctx, &nd, y, softmax_bwd);
}

/* ---- cross_entropy ------------------------------------------------------ */
typedef struct ce_state {
    const float *lse;      /* (R) log-sum-exp of each row */
    int64_t R, C;          /* rows, classes */
    int64_t ignore_index;
    int64_t nvalid;        /* rows whose target is not ignore_index */
} ce_state;

static void ce_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const ce_state *s = nd->st;
    (void)ctx;
    if (gin[0])
        rt_cross_entropy_backward(gin[0], gout[0], nd->in[0]->data, s->lse, nd->in[1]->data, s->R, s->C,
                                  s->ignore_index, s->nvalid);
}

/* Number of rows whose target is valid, or -1 (ctx error) for a target outside [0, C). */
static int64_t ce_count_valid(np_ctx *ctx, const int64_t *t, int64_t R, int64_t C, int64_t ignore_index)
{
    const char *api = np_op_api(NP_OP_CROSS_ENTROPY);
    int64_t nvalid = 0;
    for (int64_t r = 0; r < R; r++) {
        if (t[r] == ignore_index)
            continue;
        if (t[r] < 0 || t[r] >= C) {
            rt_fail(ctx, NP_ERR_ARG, api, "%s: target %lld at row %lld outside [0, %lld)", api,
                    (long long)t[r], (long long)r, (long long)C);
            return -1;
        }
        nvalid++;
    }
    return nvalid;
}

np_tensor *np_cross_entropy(np_ctx *ctx, np_tensor *logits, np_tensor *targets, int64_t ignore_index)
{
    const char *api = np_op_api(NP_OP_CROSS_ENTROPY);
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
    int64_t nvalid = ce_count_valid(ctx, targets->data, R, C, ignore_index);
    if (nvalid < 0)
        return NULL;
    np_tensor *y = rt_new(ctx, NP_FLOAT32, 0, NULL);
    ce_state *s = rt_alloc(ctx, sizeof *s);
    float *lse = rt_alloc(ctx, (size_t)R * sizeof(float) + 1);
    double *rl = rt_alloc(ctx, (size_t)R * sizeof(double) + 1);
    if (!y || !s || !lse || !rl)
        return NULL;
    *s = (ce_state){lse, R, C, ignore_index, nvalid};
    np_tensor *in[2] = {logits, targets};
    rt_node nd;
    rt_node_init(ctx, &nd, NP_OP_CROSS_ENTROPY, in, 2);
    nd.k->cross_entropy_forward(y->data, lse, rl, logits->data, targets->data, R, C, ignore_index, nvalid);
    rt_node_scalar(&nd, "ignore_index", (double)ignore_index);
    nd.st = s;
    return rt_finish(ctx, &nd, y, ce_bwd);
}

/* ---- embedding ----------------------------------------------------------- */
typedef struct embedding_state {
    int64_t C; /* embedding width (the weight is (V, C)) */
} embedding_state;

static void embedding_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const embedding_state *s = nd->st;
    const np_tensor *idx = nd->in[0];
    if (gin[1])
        ctx->k.embedding_backward(gin[1], gout[0], idx->data, idx->dtype, idx->numel, s->C);
}

static int64_t idx_at(const np_tensor *idx, int64_t i)
{
    return idx->dtype == NP_INT64 ? ((const int64_t *)idx->data)[i] : ((const int32_t *)idx->data)[i];
}

np_tensor *np_embedding(np_ctx *ctx, np_tensor *idx, np_tensor *weight)
{
    const char *api = np_op_api(NP_OP_EMBEDDING);
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
    embedding_state *s = rt_alloc(ctx, sizeof *s);
    if (!y || !s)
        return NULL;
    s->C = C;
    np_tensor *in[2] = {idx, weight};
    rt_node nd;
    rt_node_init(ctx, &nd, NP_OP_EMBEDDING, in, 2);
    rt_embedding_forward(y->data, idx->data, idx->dtype, weight->data, idx->numel, C);
    nd.st = s;
    return rt_finish(ctx, &nd, y, embedding_bwd);
}
