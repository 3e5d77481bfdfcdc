/* runtime/ops_elem.c - elementwise ops and reductions: Functional.relu,
 * Functional.gelu (erf and tanh), Functional.silu, Torch.tanh, Functional.dropout,
 * Tensor.add, Tensor.mul (tensor and scalar), Torch.sum, Torch.mean. Outputs
 * keep the (promoted) input dtype, so under autocast a low-precision input
 * gives a rounded low-precision output. The arithmetic is in kern_elem.c
 * (the erf GELU through ctx->k, where the gelu_tanh fault acts); here the
 * checks, the outputs and one typed saved-state struct per op. */
#include <math.h>
#include <string.h>

#include "rt_internal.h"

/* ---- relu, gelu, silu ----------------------------------------------------- */
enum { EW_RELU, EW_GELU, EW_GELU_TANH, EW_SILU, EW_TANH };

typedef struct ew_state {
    int kind;          /* EW_* */
    const double *cdf; /* (n) erf GELU's Phi(x) kept for backward, or NULL */
} ew_state;

static void ew_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const ew_state *s = nd->st;
    const float *x = nd->in[0]->data;
    int64_t n = nd->in[0]->numel;
    if (!gin[0])
        return;
    switch (s->kind) {
    case EW_RELU:
        rt_relu_backward(gin[0], gout[0], x, n);
        break;
    case EW_GELU:
        ctx->k.gelu_backward(gin[0], gout[0], x, s->cdf, n);
        break;
    case EW_GELU_TANH:
        rt_gelu_tanh_backward(gin[0], gout[0], x, n);
        break;
    case EW_TANH:
        rt_tanh_backward(gin[0], gout[0], x, n);
        break;
    default:
        rt_silu_backward(gin[0], gout[0], x, n);
    }
}

static np_tensor *ew_op(np_ctx *ctx, np_op op, np_tensor *x, int kind, const char *sk, double sv)
{
    const char *api = np_op_api(op);
    if (!x || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input"))
        return NULL;
    np_tensor *y = rt_new(ctx, x->dtype, x->ndim, x->shape);
    ew_state *s = rt_alloc(ctx, sizeof *s);
    if (!y || !s)
        return NULL;
    int64_t n = x->numel;
    rt_node nd;
    rt_node_init(ctx, &nd, op, &x, 1);
    /* erf gelu keeps its cdf term 0.5 (1 + erf(x/sqrt 2)) (in double, the
     * exact value the backward formula would recompute) for the backward */
    double *cdf = kind == EW_GELU && nd.record ? rt_alloc(ctx, (size_t)n * sizeof(double) + 1) : NULL;
    if (kind == EW_GELU && nd.record && !cdf)
        return NULL;
    *s = (ew_state){kind, cdf};
    switch (kind) {
    case EW_RELU:
        rt_relu_forward(y->data, x->data, n);
        break;
    case EW_GELU:
        ctx->k.gelu_forward(y->data, cdf, x->data, n, x->dtype);
        break;
    case EW_GELU_TANH:
        rt_gelu_tanh_forward(y->data, x->data, n, x->dtype);
        break;
    case EW_TANH:
        rt_tanh_forward(y->data, x->data, n, x->dtype);
        break;
    default:
        rt_silu_forward(y->data, x->data, n, x->dtype);
    }
    if (sk)
        rt_node_scalar(&nd, sk, sv);
    nd.st = s;
    nd.gin_full = 1;
    return rt_finish(ctx, &nd, y, ew_bwd);
}

np_tensor *np_relu(np_ctx *ctx, np_tensor *x)
{
    return ew_op(ctx, NP_OP_RELU, x, EW_RELU, NULL, 0);
}

np_tensor *np_gelu(np_ctx *ctx, np_tensor *x, int approximate_tanh)
{
    int kind = approximate_tanh ? EW_GELU_TANH : EW_GELU;
    return ew_op(ctx, NP_OP_GELU, x, kind, "approximate", approximate_tanh ? 1 : 0);
}

np_tensor *np_silu(np_ctx *ctx, np_tensor *x)
{
    return ew_op(ctx, NP_OP_SILU, x, EW_SILU, NULL, 0);
}

np_tensor *np_tanh(np_ctx *ctx, np_tensor *x)
{
    return ew_op(ctx, NP_OP_TANH, x, EW_TANH, NULL, 0);
}

/* ---- dropout ------------------------------------------------------------ */
typedef struct dropout_state {
    uint64_t key;  /* counter-based RNG key of this call (seed, step, call) */
    int active;    /* training and p > 0: else the identity */
    float p, scale;
} dropout_state;

static uint64_t dropout_key(const np_ctx *ctx, int n)
{
    return np_rng_u64(np_rng_u64(ctx->o.seed ^ 0xD80F0017ull, (uint64_t)ctx->step), (uint64_t)n);
}

static void dropout_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const dropout_state *s = nd->st;
    int64_t n = nd->in[0]->numel;
    (void)ctx;
    if (!gin[0])
        return;
    if (!s->active)
        memcpy(gin[0], gout[0], (size_t)n * sizeof(float));
    else
        rt_dropout_backward(gin[0], gout[0], n, s->key, s->p, s->scale);
}

np_tensor *np_dropout(np_ctx *ctx, np_tensor *x, double p, int training)
{
    const char *api = np_op_api(NP_OP_DROPOUT);
    if (!x || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input"))
        return NULL;
    if (!(p >= 0.0 && p <= 1.0))
        return rt_fail(ctx, NP_ERR_ARG, api, "%s: p must be in [0, 1], got %g", api, p);
    np_tensor *y = rt_new(ctx, x->dtype, x->ndim, x->shape);
    dropout_state *s = rt_alloc(ctx, sizeof *s);
    if (!y || !s)
        return NULL;
    rt_node nd;
    rt_node_init(ctx, &nd, NP_OP_DROPOUT, &x, 1);
    rt_node_scalar(&nd, "p", p);
    rt_node_scalar(&nd, "training", training ? 1 : 0);
    *s = (dropout_state){dropout_key(ctx, nd.n), training && p > 0.0, (float)p,
                         p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.0f};
    if (!s->active)
        memcpy(y->data, x->data, (size_t)x->numel * sizeof(float));
    else
        rt_dropout_forward(y->data, x->data, x->numel, s->key, s->p, s->scale, x->dtype);
    nd.st = s;
    nd.gin_full = 1;
    return rt_finish(ctx, &nd, y, dropout_bwd);
}

/* ---- add / mul with suffix broadcasting ----------------------------------- */
typedef struct binary_state {
    int big; /* index of the operand with the full shape (the other repeats) */
} binary_state;

static void bin_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const binary_state *s = nd->st;
    int bi = s->big, si = 1 - bi;
    (void)ctx;
    rt_binary_backward(gin[bi], gin[si], gout[0], nd->in[bi]->data, nd->in[si]->data, nd->in[bi]->numel,
                       nd->in[si]->numel, nd->op != NP_OP_ADD);
}

/* 1 if small's shape is a suffix of big's (or small has one element). */
static int suffix_of(const np_tensor *small, const np_tensor *big)
{
    if (small->numel == 1)
        return 1;
    if (small->ndim > big->ndim)
        return 0;
    for (int i = 1; i <= small->ndim; i++)
        if (small->shape[small->ndim - i] != big->shape[big->ndim - i])
            return 0;
    return 1;
}

static np_tensor *bin_op(np_ctx *ctx, np_op op, np_tensor *a, np_tensor *b)
{
    const char *api = np_op_api(op);
    if (!a || !b || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, a, api, "input") || !rt_need_float(ctx, b, api, "other"))
        return NULL;
    int bi;
    if (suffix_of(b, a) && (b->numel != 1 || a->numel >= 1) && a->numel >= b->numel)
        bi = 0;
    else if (suffix_of(a, b))
        bi = 1;
    else
        return rt_fail(ctx, NP_ERR_SHAPE, api, "%s: shapes do not broadcast (one shape must be a suffix of the other, or have one element)", api);
    np_tensor *big = bi ? b : a, *small = bi ? a : b;
    np_dtype odt = rt_promote(a->dtype, b->dtype);
    np_tensor *y = rt_new(ctx, odt, big->ndim, big->shape);
    binary_state *s = rt_alloc(ctx, sizeof *s);
    if (!y || !s)
        return NULL;
    s->big = bi;
    np_tensor *in[2] = {a, b};
    rt_node nd;
    rt_node_init(ctx, &nd, op, in, 2);
    rt_binary_forward(y->data, big->data, small->data, big->numel, small->numel, op != NP_OP_ADD, odt);
    nd.st = s;
    nd.gin_full = 3;
    return rt_finish(ctx, &nd, y, bin_bwd);
}

np_tensor *np_add(np_ctx *ctx, np_tensor *a, np_tensor *b)
{
    return bin_op(ctx, NP_OP_ADD, a, b);
}

np_tensor *np_mul(np_ctx *ctx, np_tensor *a, np_tensor *b)
{
    return bin_op(ctx, NP_OP_MUL, a, b);
}

typedef struct scale_state {
    float s; /* the scalar, as float */
} scale_state;

static void scale_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    const scale_state *s = nd->st;
    (void)ctx;
    if (gin[0])
        rt_scale_backward(gin[0], gout[0], nd->in[0]->numel, s->s);
}

np_tensor *np_scale(np_ctx *ctx, np_tensor *x, double s)
{
    const char *api = np_op_api(NP_OP_MUL);
    if (!x || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input"))
        return NULL;
    np_tensor *y = rt_new(ctx, x->dtype, x->ndim, x->shape);
    scale_state *st = rt_alloc(ctx, sizeof *st);
    if (!y || !st)
        return NULL;
    st->s = (float)s;
    rt_node nd;
    rt_node_init(ctx, &nd, NP_OP_MUL, &x, 1);
    rt_scale_forward(y->data, x->data, x->numel, st->s, x->dtype);
    rt_node_scalar(&nd, "other", s);
    nd.st = st;
    return rt_finish(ctx, &nd, y, scale_bwd);
}

/* ---- sum / mean (no saved state: the op says which) ----------------------- */
static void reduce_bwd(np_ctx *ctx, rt_node *nd, float *const *gout, float *const *gin)
{
    (void)ctx;
    if (gin[0])
        rt_reduce_backward(gin[0], gout[0], nd->in[0]->numel, nd->op == NP_OP_MEAN);
}

static np_tensor *reduce_op(np_ctx *ctx, np_op op, np_tensor *x)
{
    const char *api = np_op_api(op);
    if (!x || ctx->err.status)
        return NULL;
    if (!rt_need_float(ctx, x, api, "input"))
        return NULL;
    np_tensor *y = rt_new(ctx, x->dtype, 0, NULL);
    if (!y)
        return NULL;
    rt_node nd;
    rt_node_init(ctx, &nd, op, &x, 1);
    rt_reduce_forward(y->data, x->data, x->numel, op == NP_OP_MEAN, x->dtype);
    return rt_finish(ctx, &nd, y, reduce_bwd);
}

np_tensor *np_sum(np_ctx *ctx, np_tensor *x)
{
    return reduce_op(ctx, NP_OP_SUM, x);
}

np_tensor *np_mean(np_ctx *ctx, np_tensor *x)
{
    return reduce_op(ctx, NP_OP_MEAN, x);
}
